"""Hypothesis strategies for AMQP values, shared by the codec tests (test_codec, test_codec_pamqp).

Every strategy draws values the codec must give back unchanged after encode -> decode: text as
``str``, anything that is not valid UTF-8 as ``bytes`` (the decoder keeps such bytes as seen).
"""

from __future__ import annotations

import os
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import strategies as st

from amqpscope.dissect.spec import Field
from amqpscope.dissect.values import Timestamp

U8, U16, U32, U64 = 2**8 - 1, 2**16 - 1, 2**32 - 1, 2**64 - 1


def utf8_text(max_bytes: int, alphabet: st.SearchStrategy[str] | None = None) -> st.SearchStrategy[str]:
    text = st.text(alphabet=alphabet, max_size=max_bytes) if alphabet is not None else st.text(max_size=max_bytes)
    return text.filter(lambda s: len(s.encode()) <= max_bytes)


def invalid_utf8(max_bytes: int) -> st.SearchStrategy[bytes]:
    """Bytes that are never valid UTF-8 (0xff cannot occur in UTF-8)."""
    half = max(0, (max_bytes - 1) // 2)
    return st.tuples(st.binary(max_size=half), st.binary(max_size=half)).map(lambda ab: ab[0] + b"\xff" + ab[1])


def strings(max_bytes: int) -> st.SearchStrategy[str | bytes]:
    return st.one_of(utf8_text(max_bytes), invalid_utf8(max_bytes))


table_keys = utf8_text(128)
decimals = st.builds(lambda raw, scale: Decimal(raw).scaleb(-scale), st.integers(-(2**31), 2**31 - 1), st.integers(0, 255))
timestamps = st.integers(0, U64).map(Timestamp)

# integers of every width (encoders pick the type code by size)
table_ints = st.one_of(*(st.integers(lo, hi) for lo, hi in (
    (-128, 127), (-(2**15), 2**15 - 1), (2**15, 2**16 - 1), (-(2**31), 2**31 - 1), (2**31, 2**32 - 1),
    (-(2**63), 2**63 - 1))))  # fmt: skip

# scalar values our encoder writes with a type code our decoder reads back as the same value
table_scalars = st.one_of(
    st.none(),
    st.booleans(),
    table_ints,
    st.floats(allow_nan=False),
    decimals,
    utf8_text(200),
    st.binary(max_size=40),
    timestamps,
)


def tables(scalars: st.SearchStrategy[Any] = table_scalars, keys: st.SearchStrategy[str] = table_keys,
           max_leaves: int = 12) -> st.SearchStrategy[dict[str, Any]]:  # fmt: skip
    """Field tables with nested tables and arrays."""
    values = st.recursive(
        scalars,
        lambda children: st.one_of(
            st.lists(children, max_size=4), st.dictionaries(keys, children, max_size=4)
        ),
        max_leaves=max_leaves,
    )
    return st.dictionaries(keys, values, max_size=6)


TABLES = tables()


def for_type(amqp_type: str) -> st.SearchStrategy[Any]:
    """Any value a field of this primitive type may carry."""
    return {
        "bit": st.booleans(),
        "octet": st.integers(0, U8),
        "short": st.integers(0, U16),
        "long": st.integers(0, U32),
        "longlong": st.integers(0, U64),
        "timestamp": timestamps,
        "shortstr": strings(255),
        "longstr": strings(600),
        "content": strings(600),
        "table": TABLES,
    }[amqp_type]


def method_args(fields: tuple[Field, ...]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({f.ident: for_type(f.type) for f in fields})


def property_values(props: tuple[Field, ...]) -> st.SearchStrategy[dict[str, Any]]:
    """Any subset of the properties (absent = not in the dict). A bit property, when present, is True:
    the flag is its value."""
    return st.fixed_dictionaries(
        {}, optional={f.ident: (st.just(True) if f.type == "bit" else for_type(f.type)) for f in props}
    )


# Long hypothesis runs are opt-in: the default test command must stay fast.
_SLOW_SKIP = pytest.mark.skipif(not os.environ.get("AMQPSCOPE_SLOW"), reason="long hypothesis run: set AMQPSCOPE_SLOW=1")


def slow(test: Any) -> Any:
    return pytest.mark.slow(_SLOW_SKIP(test))

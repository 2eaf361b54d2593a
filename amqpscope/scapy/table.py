"""Field tables for the Scapy layer: the one encoder of field tables in the project, and a strict
decoder for dissection.

A value's type code travels on the wire, so a decoded table remembers the code of each entry
(:class:`Table`, :class:`Array`): building it again gives the same bytes. New values get the code
RabbitMQ's clients use for their Python type; :class:`Typed` forces a code (``Typed("U", -3)``),
which is how every code of RabbitMQ's errata and of 0-9 can be written.

The codes and what they hold come from the compiled tables (``tables.FIELD_TYPES``: ``s`` signed
16-bit, ``l`` signed 64-bit, ``x`` byte array, 0-9's ``U``/``L``), the same list the core decodes.
Dissection is strict where the core is lenient: a table that runs past its length, an unknown
code or nesting past the core's bound raises :class:`TableError`, and the frame shows as raw
bytes with that reason.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, NamedTuple

from amqpscope.dissect.tables import FIELD_TYPES
from amqpscope.dissect.values import Timestamp

# the core's bound on nesting (crates/amqpscope-core/src/limits.rs: table_depth)
MAX_DEPTH = 64

_U32 = struct.Struct(">I")
_DECIMAL = struct.Struct(">Bi")
# fixed-width kinds of FIELD_TYPES and how they are packed
_FIXED: dict[str, struct.Struct] = {
    "i8": struct.Struct(">b"), "u8": struct.Struct(">B"), "i16": struct.Struct(">h"), "u16": struct.Struct(">H"),
    "i32": struct.Struct(">i"), "u32": struct.Struct(">I"), "i64": struct.Struct(">q"), "f32": struct.Struct(">f"),
    "f64": struct.Struct(">d"), "timestamp": struct.Struct(">Q"),
}  # fmt: skip
_SIZED = {"longstr": "long string", "bytes": "byte array", "table": "nested table", "array": "array"}


class TableError(ValueError):
    """A field table that cannot be dissected; the text says where and why."""


class Typed(NamedTuple):
    """A table value written with an explicit type code."""

    code: str
    value: Any


class Table(dict[str, Any]):
    """A decoded field table: a dict that remembers each entry's type code."""

    codes: dict[str, str]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.codes = {}


class Array(list[Any]):
    """A decoded field array: a list that remembers each element's type code."""

    codes: list[str]

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.codes = []


def _text(raw: bytes) -> str | bytes:
    """Text when it is UTF-8, else the bytes as seen (as the core hands them to Python)."""
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return raw


# --- encoding ------------------------------------------------------------------------------------


def encode_table(table: Mapping[str, Any] | None) -> bytes:
    """A field table with its 32-bit length."""
    body = encode_table_body(table)
    return _U32.pack(len(body)) + body


def encode_table_body(table: Mapping[str, Any] | None) -> bytes:
    """The entries of a field table without the length (AMQPLAIN's response is one)."""
    codes = table.codes if isinstance(table, Table) else {}
    out = []
    for key, value in (table or {}).items():
        k = key.encode()
        if len(k) > 255:
            raise ValueError(f"field table key of {len(k)} bytes (at most 255)")
        out.append(bytes((len(k),)) + k + _encode_kept(codes.get(key), value))
    return b"".join(out)


def _encode_kept(code: str | None, value: Any) -> bytes:
    """A decoded value with the code it came with, unless it was changed into something that code
    cannot carry."""
    if code is not None and not isinstance(value, Typed):
        try:
            return encode_typed(code, value)
        except (TypeError, ValueError, struct.error):
            pass
    return encode_value(value)


def encode_value(value: Any) -> bytes:
    """One table value with its type code: the code RabbitMQ's clients use for the Python type."""
    if isinstance(value, Typed):
        return encode_typed(value.code, value.value)
    if value is None:
        return b"V"
    if isinstance(value, bool):
        return b"t" + (b"\x01" if value else b"\x00")
    if isinstance(value, Timestamp):
        return encode_typed("T", value)
    if isinstance(value, int):
        return encode_typed("I" if -(2**31) <= value < 2**31 else "l", value)
    if isinstance(value, float):
        return encode_typed("d", value)
    if isinstance(value, Decimal):
        return encode_typed("D", value)
    if isinstance(value, str):
        return encode_typed("S", value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return encode_typed("x", bytes(value))
    if isinstance(value, Mapping):
        return b"F" + encode_table(value)
    if isinstance(value, (list, tuple)):
        return encode_typed("A", value)
    raise TypeError(f"cannot encode {type(value).__name__} in a field table")


def encode_typed(code: str, value: Any) -> bytes:
    """``value`` written with type code ``code`` (any code of ``tables.FIELD_TYPES``)."""
    kind = FIELD_TYPES.get(code)
    if kind is None:
        raise ValueError(f"unknown field table type code {code!r}")
    tag = code.encode()
    if kind in _FIXED:
        if isinstance(value, (str, bytes, Mapping, list, tuple)) or value is None:
            raise TypeError(f"type {code!r} holds a number, not {type(value).__name__}")
        return tag + _FIXED[kind].pack(value if kind in ("f32", "f64") else int(value))
    if kind == "bool":
        return tag + (b"\x01" if value else b"\x00")
    if kind == "void":
        if value is not None:
            raise TypeError(f"type 'V' holds nothing, not {type(value).__name__}")
        return tag
    if kind == "decimal":
        return tag + _encode_decimal(value)
    if kind in ("longstr", "bytes"):
        if not isinstance(value, (str, bytes, bytearray, memoryview)):
            raise TypeError(f"type {code!r} holds a string, not {type(value).__name__}")
        raw = value.encode() if isinstance(value, str) else bytes(value)
        return tag + _U32.pack(len(raw)) + raw
    if kind == "table":
        if not isinstance(value, Mapping):
            raise TypeError(f"type 'F' holds a table, not {type(value).__name__}")
        return tag + encode_table(value)
    if not isinstance(value, (list, tuple)):  # "array"
        raise TypeError(f"type 'A' holds a list, not {type(value).__name__}")
    codes = value.codes if isinstance(value, Array) else []
    body = b"".join(_encode_kept(codes[i] if i < len(codes) else None, v) for i, v in enumerate(value))
    return tag + _U32.pack(len(body)) + body


def _encode_decimal(value: Any) -> bytes:
    if not isinstance(value, (Decimal, int)) or isinstance(value, bool):
        raise TypeError(f"type 'D' holds a Decimal, not {type(value).__name__}")
    d = Decimal(value)
    exp = d.as_tuple().exponent
    scale = -exp if isinstance(exp, int) and exp < 0 else 0
    return _DECIMAL.pack(scale, int(d.scaleb(scale)))


# --- decoding ------------------------------------------------------------------------------------


def decode_table_body(buf: bytes, off: int, end: int, depth: int = 0) -> Table:
    """The entries of the table held in ``buf[off:end]``."""
    if depth >= MAX_DEPTH:
        raise TableError(f"field table nested deeper than {MAX_DEPTH}")
    table = Table()
    while off < end:
        klen = buf[off]
        kstart = off + 1
        off = kstart + klen
        if off >= end:
            raise TableError(f"field table entry at byte {kstart - 1} has a key but no value")
        raw_key = buf[kstart:off]
        try:
            key = raw_key.decode()
        except UnicodeDecodeError:
            key = raw_key.decode("latin-1")  # keys stay text, as the core keeps them
        code = chr(buf[off])
        value, off = decode_value(buf, off + 1, end, code, depth)
        table[key] = value
        table.codes[key] = code
    return table


def decode_value(buf: bytes, off: int, end: int, code: str, depth: int) -> tuple[Any, int]:
    """The value of type ``code`` at ``off`` (inside a table or array ending at ``end``) and the
    offset after it."""
    kind = FIELD_TYPES.get(code)
    if kind is None:
        raise TableError(f"unknown field table type code {code!r}")
    if kind in _FIXED:
        stop = off + _FIXED[kind].size
        _fits(stop, end, code)
        (v,) = _FIXED[kind].unpack_from(buf, off)
        return (Timestamp(v) if kind == "timestamp" else v), stop
    if kind == "bool":
        _fits(off + 1, end, code)
        return buf[off] != 0, off + 1
    if kind == "void":
        return None, off
    if kind == "decimal":
        _fits(off + 5, end, code)
        scale, digits = _DECIMAL.unpack_from(buf, off)
        return Decimal(digits).scaleb(-scale), off + 5
    _fits(off + 4, end, code)
    (n,) = _U32.unpack_from(buf, off)
    start, stop = off + 4, off + 4 + n
    if stop > end:
        raise TableError(f"{_SIZED[kind]} of {n} bytes runs past its table")
    if kind == "longstr":
        return _text(buf[start:stop]), stop
    if kind == "bytes":
        return bytes(buf[start:stop]), stop
    if kind == "table":
        return decode_table_body(buf, start, stop, depth + 1), stop
    if depth + 1 >= MAX_DEPTH:
        raise TableError(f"field array nested deeper than {MAX_DEPTH}")
    items = Array()
    while start < stop:
        elem = chr(buf[start])
        value, start = decode_value(buf, start + 1, stop, elem, depth + 1)
        items.append(value)
        items.codes.append(elem)
    return items, stop


def _fits(stop: int, end: int, code: str) -> None:
    if stop > end:
        raise TableError(f"value of type {code!r} runs past its table")

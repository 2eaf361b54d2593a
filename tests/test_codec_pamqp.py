"""Cross-check the codec against pamqp 4 (a test-only dependency), in both directions.

* pamqp -> us: hypothesis builds a pamqp command (or content header) with arguments pamqp accepts,
  ``pamqp.frame.marshal`` writes the frame, the test-side ``decode_frame`` splits it and the native
  core's decoders (``Codec.decode_method`` / ``decode_header``) read it, and every argument must equal what pamqp was given.
* us -> pamqp: hypothesis arguments, our encoder writes the frame, ``pamqp.frame.unmarshal`` reads
  it, and every attribute must equal what we encoded.

Every method pamqp knows is covered (pamqp knows exactly the 0-9-1 methods we ship; the test checks
that), and so are the 14 basic content properties. Arguments are matched by position: pamqp keeps
0-8 names for some fields (``ticket`` for reserved-1, ``nowait`` for no-wait, ``exchange_type`` for
type, ``message_type`` for type, ``cluster_id`` for reserved), and the test checks that the wire
types agree field by field.

Deliberate differences, all pamqp's own choices, each handled where the values are drawn:
* pamqp writes and reads ``longlong`` as *signed* 64-bit; the spec (and we) use unsigned. pamqp can
  only write 0 .. 2**63-1, and what it reads back for larger values is compared modulo 2**64.
* pamqp writes a table float as ``f`` (32-bit): only 32-bit-exact floats are drawn for it.
* pamqp reads a ``T`` timestamp above 0xFFFFFFFF as milliseconds (its own heuristic), so table and
  property timestamps we encode for it stay at or below 0xFFFFFFFF.
* pamqp decodes short strings strictly as UTF-8 (invalid bytes raise), so only text goes into short
  strings we encode for it; long strings may hold any bytes (pamqp keeps them as bytes, as we do).
* pamqp writes only ``str`` strings, ``bytearray`` byte arrays, ``datetime`` timestamps, and
  refuses names outside its exchange/queue-name pattern and non-default reserved fields (e.g.
  channel.open's out-of-band must be the string "0"); values are drawn to fit.
* pamqp's content header leaves out a property whose value is ``''`` (it treats empty as absent),
  and it reads an absent cluster-id as ``''`` rather than "not present".
"""

from __future__ import annotations

import datetime
import struct
from decimal import Decimal
from typing import Any

import pytest
from codec_strategies import decimals, slow, strings, table_ints, utf8_text
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pamqp import commands, frame, header

from amqpscope.dissect.codec import get_codec
from amqpscope.dissect.spec import Method
from amqpscope.dissect.values import Timestamp
from amqpscope.dissect.wire import FRAME_HEADER, FRAME_METHOD, encode_frame
from amqpscope.testing.frames import RawFrame, decode_frame

# pamqp warns when it builds basic.recover-async, which 0-9-1 deprecates; we still decode it
pytestmark = pytest.mark.filterwarnings("ignore:This command is deprecated in AMQP 0-9-1:DeprecationWarning")

CODEC = get_codec()
OURS = {m.key: m for m in CODEC.spec.methods()}
PAMQP = dict(sorted(commands.INDEX_MAPPING.items()))
METHOD_IDS = [OURS[k].full_name for k in PAMQP]
PROPS = CODEC.spec.find_class("basic").properties
PAMQP_PROPS = commands.Basic.Properties.__slots__
EXAMPLES = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
U63 = 2**63 - 1

# --- values pamqp can write ------------------------------------------------------------------------

NAME_CHARS = st.sampled_from("abcXYZ019-_.:@#,/+ ")  # pamqp's exchange-name / queue-name pattern
FIXED = {"ticket": 0, "capabilities": "", "insist": False, "known_hosts": "", "out_of_band": "0", "channel_id": "0",
         "cluster_id": ""}  # fmt: skip
NAMES = {"exchange", "queue", "source", "destination", "virtual_host"}
seconds = st.integers(0, 2**32 - 1)
pamqp_scalars = st.one_of(
    st.none(),
    st.booleans(),
    table_ints,
    st.floats(width=32, allow_nan=False),
    decimals,
    utf8_text(100),
    st.binary(max_size=20).map(bytearray),
    seconds.map(lambda s: datetime.datetime.fromtimestamp(s, tz=datetime.UTC)),
)
pamqp_tables = st.dictionaries(
    utf8_text(128),
    st.recursive(pamqp_scalars, lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(utf8_text(20), c, max_size=3)),
                 max_leaves=8),
    max_size=5,
)


def pamqp_value(slot: str, amqp_type: str) -> st.SearchStrategy[Any]:
    if slot in FIXED:
        return st.just(FIXED[slot])
    if slot in NAMES:
        return st.text(NAME_CHARS, max_size=127)
    return {
        "bit": st.booleans(),
        "octet": st.integers(0, 255),
        "short": st.integers(0, 2**16 - 1),
        "long": st.integers(0, 2**32 - 1),
        "longlong": st.integers(0, U63),
        "shortstr": utf8_text(255),
        "longstr": utf8_text(400),
        "table": pamqp_tables,
    }[amqp_type]


def as_ours(value: Any) -> Any:
    """A value pamqp was given, as our decoder represents it."""
    if isinstance(value, datetime.datetime):
        return Timestamp(int(value.timestamp()))
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, dict):
        return {k: as_ours(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_ours(v) for v in value]
    return value


# --- values we write for pamqp to read ---------------------------------------------------------------

our_scalars = st.one_of(
    st.none(),
    st.booleans(),
    table_ints,
    st.floats(allow_nan=False),  # we write doubles ('d'), which pamqp reads exactly
    decimals,
    utf8_text(100),
    st.binary(max_size=20),
    seconds.map(Timestamp),
)
our_tables = st.dictionaries(
    utf8_text(128),
    st.recursive(our_scalars, lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(utf8_text(20), c, max_size=3)),
                 max_leaves=8),
    max_size=5,
)


def our_value(amqp_type: str) -> st.SearchStrategy[Any]:
    return {
        "bit": st.booleans(),
        "octet": st.integers(0, 255),
        "short": st.integers(0, 2**16 - 1),
        "long": st.integers(0, 2**32 - 1),
        "longlong": st.integers(0, 2**64 - 1),
        "timestamp": seconds.map(Timestamp),
        "shortstr": utf8_text(255),
        "longstr": strings(400),
        "table": our_tables,
    }[amqp_type]


def as_pamqp(value: Any, amqp_type: str = "") -> Any:
    """A value we encoded, as pamqp represents it after decoding."""
    if amqp_type == "longlong" and value > U63:
        return value - 2**64  # pamqp reads longlong as signed
    if isinstance(value, Timestamp):
        return datetime.datetime.fromtimestamp(int(value), tz=datetime.UTC)
    if isinstance(value, bytes) and amqp_type != "longstr":
        return bytearray(value)  # 'x' in a table
    if isinstance(value, dict):
        return {k: as_pamqp(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_pamqp(v) for v in value]
    return value


# --- the method set ------------------------------------------------------------------------------------


def test_pamqp_knows_the_same_methods_with_the_same_wire_types() -> None:
    assert set(PAMQP) == set(OURS), "pamqp and our 0-9-1 spec should define the same methods"
    for key, cls in PAMQP.items():
        ours = OURS[key]
        assert [cls.amqp_type(s) for s in cls.__slots__] == [f.type for f in ours.fields], ours.full_name
        assert cls.frame_id == ours.index
    assert [commands.Basic.Properties.amqp_type(s) for s in PAMQP_PROPS] == [f.type for f in PROPS]
    flags = commands.Basic.Properties.flags
    assert [flags[s] for s in PAMQP_PROPS] == [0x8000 >> i for i in range(len(PROPS))]


# --- pamqp -> us -------------------------------------------------------------------------------------------


def _decode_one(raw: bytes) -> RawFrame:
    f = decode_frame(raw)
    assert isinstance(f, RawFrame) and f.end == len(raw)
    return f


@pytest.mark.parametrize("key", list(PAMQP), ids=METHOD_IDS)
@EXAMPLES
@given(data=st.data())
def test_pamqp_marshals_we_decode(key: int, data: st.DataObject) -> None:
    cls, ours = PAMQP[key], OURS[key]
    kwargs = {s: data.draw(pamqp_value(s, cls.amqp_type(s)), label=s) for s in cls.__slots__}
    command = cls(**kwargs)
    channel = data.draw(st.integers(0, 65535))
    f = _decode_one(frame.marshal(command, channel))
    assert (f.type, f.channel) == (FRAME_METHOD, channel)
    d = CODEC.decode_method(f.payload)
    assert (d.name, d.method, d.problem) == (ours.full_name, ours, None)
    assert d.args == {f.ident: as_ours(getattr(command, s)) for f, s in zip(ours.fields, cls.__slots__, strict=True)}


def _pamqp_properties(data: st.DataObject) -> commands.Basic.Properties:
    values = {}
    for slot, ours in zip(PAMQP_PROPS, PROPS, strict=True):
        if slot == "delivery_mode":
            strategy: st.SearchStrategy[Any] = st.sampled_from([1, 2])  # pamqp refuses other values
        elif slot == "timestamp":
            strategy = seconds.map(lambda s: datetime.datetime.fromtimestamp(s, tz=datetime.UTC))
        elif slot == "cluster_id":
            values[slot] = ""  # pamqp refuses anything else, even None
            continue
        else:
            strategy = pamqp_value(slot, ours.type)
        values[slot] = data.draw(st.none() | strategy, label=slot)
    return commands.Basic.Properties(**values)


@EXAMPLES
@given(data=st.data(), body_size=st.integers(0, U63), channel=st.integers(1, 65535))
def test_pamqp_content_header_we_decode(data: st.DataObject, body_size: int, channel: int) -> None:
    props = _pamqp_properties(data)
    f = _decode_one(frame.marshal(header.ContentHeader(0, body_size, props), channel))
    assert (f.type, f.channel) == (FRAME_HEADER, channel)
    h = CODEC.decode_header(f.payload)
    assert (h.class_id, h.weight, h.body_size, h.problem) == (60, 0, body_size, None)
    expected = {
        ours.ident: as_ours(getattr(props, slot))
        for slot, ours in zip(PAMQP_PROPS, PROPS, strict=True)
        if getattr(props, slot) not in (None, "")  # pamqp leaves out empty strings
    }
    assert h.properties == expected


@slow
@settings(max_examples=500, deadline=None)
@given(data=st.data(), body_size=st.integers(0, U63))
def test_pamqp_content_header_we_decode_many(data: st.DataObject, body_size: int) -> None:
    props = _pamqp_properties(data)
    h = CODEC.decode_header(_decode_one(frame.marshal(header.ContentHeader(0, body_size, props), 1)).payload)
    assert h.problem is None
    assert h.properties == {o.ident: as_ours(getattr(props, s)) for s, o in zip(PAMQP_PROPS, PROPS, strict=True)
                            if getattr(props, s) not in (None, "")}  # fmt: skip


# --- us -> pamqp -------------------------------------------------------------------------------------------


def _check_pamqp_reads_method(ours: Method, args: dict[str, Any], channel: int) -> None:
    raw = CODEC.method_frame(channel, ours.full_name, **args)
    used, got_channel, command = frame.unmarshal(raw)
    assert (used, got_channel, type(command)) == (len(raw), channel, PAMQP[ours.key])
    for f, slot in zip(ours.fields, command.__slots__, strict=True):
        assert getattr(command, slot) == as_pamqp(args[f.ident], f.type), (ours.full_name, f.name)


@pytest.mark.parametrize("key", list(PAMQP), ids=METHOD_IDS)
@EXAMPLES
@given(data=st.data(), channel=st.integers(0, 65535))
def test_we_encode_pamqp_unmarshals(key: int, data: st.DataObject, channel: int) -> None:
    ours = OURS[key]
    args = {f.ident: data.draw(our_value(f.type), label=f.name) for f in ours.fields}
    _check_pamqp_reads_method(ours, args, channel)


@slow
@pytest.mark.parametrize("key", list(PAMQP), ids=METHOD_IDS)
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_we_encode_pamqp_unmarshals_many(key: int, data: st.DataObject) -> None:
    ours = OURS[key]
    _check_pamqp_reads_method(ours, {f.ident: data.draw(our_value(f.type)) for f in ours.fields}, 1)


@EXAMPLES
@given(
    props=st.fixed_dictionaries({}, optional={f.ident: our_value(f.type) for f in PROPS}),
    body_size=st.integers(0, 2**63 - 1),
    channel=st.integers(1, 65535),
)
def test_we_encode_content_header_pamqp_unmarshals(props: dict[str, Any], body_size: int, channel: int) -> None:
    raw = encode_frame(FRAME_HEADER, channel, CODEC.encode_header(60, body_size, props))
    used, got_channel, content = frame.unmarshal(raw)
    assert (used, got_channel) == (len(raw), channel)
    assert isinstance(content, header.ContentHeader)
    assert (content.class_id, content.weight, content.body_size) == (60, 0, body_size)
    for slot, ours in zip(PAMQP_PROPS, PROPS, strict=True):
        absent = "" if slot == "cluster_id" else None  # pamqp's default for an absent cluster-id is ''
        expected = as_pamqp(props[ours.ident], ours.type) if ours.ident in props else absent
        assert getattr(content.properties, slot) == expected, slot


def test_every_pamqp_table_type_code() -> None:
    """One value of each type code pamqp writes, in one table, decoded by us."""
    when = datetime.datetime(2030, 5, 6, 7, 8, 9, tzinfo=datetime.UTC)
    table = {"t": True, "b": -5, "s": -300, "u": 40000, "I": -70000, "i": 3_000_000_000, "l": -(2**40), "f": 0.5,
             "D": Decimal("-3.25"), "S": "text", "T": when, "F": {"in": "x"}, "A": [1, "a", None], "x": bytearray(b"\x00\xff"),
             "V": None}  # fmt: skip
    raw = frame.marshal(commands.Queue.Declare(queue="q", arguments=table), 1)
    for k in table:  # each entry is: key length 1, the key, then the type code, named like the key
        assert b"\x01" + k.encode() * 2 in raw, f"pamqp did not write {table[k]!r} with code {k!r}"
    args = CODEC.decode_method(_decode_one(raw).payload).args
    assert args["arguments"] == as_ours(table)


def test_a_known_frame_both_ways() -> None:
    """One fixed example to read when the property tests fail: basic.deliver with everything set."""
    deliver = commands.Basic.Deliver(consumer_tag="ctag", delivery_tag=2**40 + 1, redelivered=True,
                                     exchange="amq.direct", routing_key="rk")  # fmt: skip
    raw = frame.marshal(deliver, 3)
    assert raw == CODEC.method_frame(3, "basic.deliver", consumer_tag="ctag", delivery_tag=2**40 + 1,
                                     redelivered=True, exchange="amq.direct", routing_key="rk")  # fmt: skip
    props = commands.Basic.Properties(content_type="text/plain", delivery_mode=2, headers={"a": 1},
                                      timestamp=datetime.datetime(2024, 1, 2, tzinfo=datetime.UTC))  # fmt: skip
    raw = frame.marshal(header.ContentHeader(0, 11, props), 3)
    assert struct.unpack_from(">H", raw, 7 + 12)[0] == 0x8000 | 0x2000 | 0x1000 | 0x0040
    # pamqp writes the small integer 1 as 'b'; we would write 'I' — so compare decoded values, not bytes
    h = CODEC.decode_header(raw[7:-1])
    assert h.properties == {"content_type": "text/plain", "headers": {"a": 1}, "delivery_mode": 2,
                            "timestamp": Timestamp(1704153600)}  # fmt: skip

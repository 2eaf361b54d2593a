"""The codec, the native core's decoders through ``Codec.decode_method`` / ``decode_header`` and
``values.decode_table``, against the Python encoders: round trips, the wire layout, field tables
byte by byte, and bad input.

* Every method of the shipped 0-9-1 and 0-9 specs: hypothesis arguments -> encode -> decode gives
  the same arguments back, and the encoded bytes equal an independent reference encoder written
  here from the spec's rules (bits packed LSB first into shared octets, big-endian integers).
* Content headers: every property alone, none, all, and hypothesis subsets; the flag word is
  checked against the property order. A synthetic spec adds what the shipped specs lack: more
  than 15 properties (a second flag word with the continuation bit), bit properties and bit runs
  longer than one octet.
* Field tables: one byte literal per type code (t b B s u I i l f d D S A T F V x, and 0-9's U L),
  unknown codes, invalid UTF-8, nesting and entry bounds.
* Bad input: truncation at every length, bad declared lengths, unknown ids, trailing bytes;
  ``decode_frame`` (the test-side frame splitter, ``amqpscope.testing.frames``) answers need-more /
  frame / malformed and never raises; protocol headers also go through the core as a TCP stream.
"""

from __future__ import annotations

import struct
from decimal import Decimal
from typing import Any

import pytest
from codec_strategies import for_type, method_args, property_values, slow
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amqpscope.dissect.codec import Codec, get_codec
from amqpscope.dissect.spec import Field, Method, bundled_spec_path, parse_spec
from amqpscope.dissect.values import Problem, Timestamp, decode_table
from amqpscope.dissect.wire import PROTOCOL_VERSIONS, encode_frame
from amqpscope.events import Frame, ProtocolHeader
from amqpscope.scapy.table import encode_table, encode_value
from amqpscope.testing.frames import Malformed, NeedMore, RawFrame, decode_frame, protocol_header
from amqpscope.testing.streams import OneWay

CODEC_091 = get_codec()
CODEC_09 = get_codec(bundled_spec_path("amqp0-9.xml"))
CODECS = {"0-9-1": CODEC_091, "0-9": CODEC_09}
ALL_METHODS = [(v, m.full_name) for v, c in CODECS.items() for m in c.spec.methods()]
CONTENT_CLASSES = [(v, cls.name) for v, c in CODECS.items() for cls in c.spec.classes if cls.properties]
EXAMPLES = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEW = settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# A spec with what the shipped ones lack: 20 properties (two flag words), a bit property, a method
# with 10 bits in a row (two octets), bits around a short and after a table.
SYNTHETIC_XML = b"""<?xml version="1.0"?>
<amqp major="0" minor="9" revision="1" port="5672">
  <constant name="frame-end" value="206"/>
  <domain name="name" type="shortstr"/>
  <class name="wide" index="200">
    <method name="bits" index="10">
""" + b"".join(b'<field name="a%d" type="bit"/>' % i for i in range(10)) + b"""
      <field name="size" type="short"/>
      <field name="b1" type="bit"/><field name="b2" type="bit"/><field name="b3" type="bit"/>
      <field name="args" type="table"/>
      <field name="last" type="bit"/>
    </method>
    <method name="empty" index="11"/>
""" + b"".join(
    b'<field name="p%d" %s/>' % (i, t)
    for i, t in enumerate(
        [b'domain="name"', b'type="octet"', b'type="table"', b'type="bit"', b'type="short"', b'type="long"',
         b'type="longlong"', b'type="timestamp"', b'type="longstr"', b'type="shortstr"', b'type="octet"',
         b'type="shortstr"', b'type="shortstr"', b'type="bit"', b'type="shortstr"', b'type="octet"',
         b'type="shortstr"', b'type="table"', b'type="bit"', b'type="long"']
    )
) + b"""
  </class>
</amqp>
"""
SYNTHETIC_SPEC = parse_spec(SYNTHETIC_XML, "<synthetic>")
SYNTHETIC = Codec(SYNTHETIC_SPEC)
# the core's bounds on field tables (crates/amqpscope-core/src/limits.rs: table_depth, table_entries)
MAX_DEPTH = 64
MAX_ENTRIES = 65536


def method(version: str, name: str) -> Method:
    return CODECS[version].spec.find_method(name)


# --- an independent reference encoder, written from the spec's wire rules ------------------------


def _raw(v: str | bytes) -> bytes:
    return v.encode() if isinstance(v, str) else v


def reference_encode(fields: tuple[Field, ...], args: dict[str, Any]) -> bytes:
    out = bytearray()
    bits: list[bool] = []

    def flush() -> None:
        if bits:
            out.append(sum(1 << i for i, b in enumerate(bits) if b))
            bits.clear()

    for f in fields:
        v = args[f.ident]
        if f.type == "bit":
            if len(bits) == 8:
                flush()
            bits.append(v)
            continue
        flush()
        if f.type in ("octet", "short", "long", "longlong", "timestamp"):
            out += int(v).to_bytes({"octet": 1, "short": 2, "long": 4}.get(f.type, 8), "big")
        elif f.type == "shortstr":
            out += bytes((len(_raw(v)),)) + _raw(v)
        elif f.type in ("longstr", "content"):
            out += len(_raw(v)).to_bytes(4, "big") + _raw(v)
        elif f.type == "table":
            out += encode_table(v)  # table bytes are pinned by the byte-literal tests below
        else:
            raise AssertionError(f.type)
    flush()
    return bytes(out)


def _flag_words(props: tuple[Field, ...], present: dict[str, Any]) -> list[int]:
    words = [0] * max(1, (max((i for i, f in enumerate(props) if f.ident in present), default=0)) // 15 + 1)
    for i, f in enumerate(props):
        if f.ident in present:
            words[i // 15] |= 1 << (15 - i % 15)
    for w in range(len(words) - 1):
        words[w] |= 1
    return words


# --- method round trips ----------------------------------------------------------------------------


def _roundtrip_method(codec: Codec, m: Method, args: dict[str, Any]) -> None:
    payload = codec.encode_method(m.full_name, args)
    assert payload[:4] == struct.pack(">HH", m.class_index, m.index)
    assert payload[4:] == reference_encode(m.fields, args)
    d = codec.decode_method(payload)
    assert (d.class_id, d.method_id, d.name, d.method, d.problem) == (m.class_index, m.index, m.full_name, m, None)
    assert d.args == args
    assert list(d.args) == [f.ident for f in m.fields]  # in wire order


@pytest.mark.parametrize(("version", "name"), ALL_METHODS)
@EXAMPLES
@given(data=st.data())
def test_method_round_trip(version: str, name: str, data: st.DataObject) -> None:
    m = method(version, name)
    _roundtrip_method(CODECS[version], m, data.draw(method_args(m.fields)))


@slow
@pytest.mark.parametrize(("version", "name"), ALL_METHODS)
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_method_round_trip_many(version: str, name: str, data: st.DataObject) -> None:
    m = method(version, name)
    _roundtrip_method(CODECS[version], m, data.draw(method_args(m.fields)))


@pytest.mark.parametrize(("version", "name"), ALL_METHODS)
def test_method_all_defaults_and_all_bits_set(version: str, name: str) -> None:
    """Every argument omitted encodes as zero / empty; then every bit set, every number at its maximum."""
    codec, m = CODECS[version], method(version, name)
    zero = {"bit": False, "shortstr": "", "longstr": "", "content": "", "table": {}}
    assert codec.decode_method(codec.encode_method(name, {})).args == {f.ident: zero.get(f.type, 0) for f in m.fields}
    top = {"bit": True, "octet": 255, "short": 65535, "long": 2**32 - 1, "longlong": 2**64 - 1,
           "timestamp": Timestamp(2**64 - 1), "shortstr": "s" * 255, "longstr": "l" * 300, "content": "c",
           "table": {"k": [1, {"n": None}]}}  # fmt: skip
    _roundtrip_method(codec, m, {f.ident: top[f.type] for f in m.fields})


def test_bits_pack_lsb_first_and_across_octets() -> None:
    m = SYNTHETIC_SPEC.find_method("wide.bits")
    args = {f.ident: False for f in m.fields if f.type == "bit"} | {"size": 0x0102, "args": {}}
    args.update(a0=True, a7=True, a8=True, b2=True, last=True)
    payload = SYNTHETIC.encode_method("wide.bits", args)
    # a0..a7 -> 0b10000001, a8 a9 -> 0b01, short, b1..b3 -> 0b010, empty table, last -> 0b1
    assert payload[4:] == bytes([0x81, 0x01, 0x01, 0x02, 0x02]) + b"\x00\x00\x00\x00" + b"\x01"
    assert SYNTHETIC.decode_method(payload).args == args


@EXAMPLES
@given(data=st.data())
def test_synthetic_method_round_trip(data: st.DataObject) -> None:
    for m in SYNTHETIC_SPEC.methods():
        _roundtrip_method(SYNTHETIC, m, data.draw(method_args(m.fields)))


def test_well_known_method_bytes() -> None:
    """basic.publish as RabbitMQ's clients write it, byte for byte."""
    payload = CODEC_091.encode_method("basic.publish", {"exchange": "amq.topic", "routing_key": "a.b", "mandatory": True})
    assert payload == b"\x00\x3c\x00\x28" + b"\x00\x00" + b"\x09amq.topic" + b"\x03a.b" + b"\x01"
    frame = CODEC_091.method_frame(1, "basic.ack", delivery_tag=7, multiple=True)
    assert frame == b"\x01\x00\x01\x00\x00\x00\x0d" + b"\x00\x3c\x00\x50" + (7).to_bytes(8, "big") + b"\x01" + b"\xce"


# --- content headers -------------------------------------------------------------------------------


def _roundtrip_header(codec: Codec, class_index: int, props: dict[str, Any], body_size: int = 5) -> bytes:
    cls = codec.spec.find_class(class_index)
    payload = codec.encode_header(class_index, body_size, props)
    words = _flag_words(cls.properties, props)
    assert payload[:12] == struct.pack(">HHQ", class_index, 0, body_size)
    assert list(struct.unpack_from(f">{len(words)}H", payload, 12)) == words
    h = codec.decode_header(payload)
    assert (h.class_id, h.weight, h.body_size, h.problem) == (class_index, 0, body_size, None)
    assert h.properties == props
    return payload


@pytest.mark.parametrize(("version", "cls_name"), CONTENT_CLASSES)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_properties_round_trip_any_subset(version: str, cls_name: str, data: st.DataObject) -> None:
    codec = CODECS[version]
    cls = codec.spec.find_class(cls_name)
    _roundtrip_header(codec, cls.index, data.draw(property_values(cls.properties)), data.draw(st.integers(0, 2**64 - 1)))


@slow
@pytest.mark.parametrize(("version", "cls_name"), CONTENT_CLASSES)
@settings(max_examples=500, deadline=None)
@given(data=st.data())
def test_properties_round_trip_any_subset_many(version: str, cls_name: str, data: st.DataObject) -> None:
    codec = CODECS[version]
    cls = codec.spec.find_class(cls_name)
    _roundtrip_header(codec, cls.index, data.draw(property_values(cls.properties)))


@pytest.mark.parametrize(("version", "cls_name"), CONTENT_CLASSES)
@FEW
@given(data=st.data())
def test_properties_none_all_and_each_alone(version: str, cls_name: str, data: st.DataObject) -> None:
    codec = CODECS[version]
    cls = codec.spec.find_class(cls_name)
    values = {f.ident: (True if f.type == "bit" else data.draw(for_type(f.type))) for f in cls.properties}
    assert _roundtrip_header(codec, cls.index, {})[12:] == b"\x00\x00"
    _roundtrip_header(codec, cls.index, values)
    for f in cls.properties:
        _roundtrip_header(codec, cls.index, {f.ident: values[f.ident]})


def test_basic_properties_flag_bits() -> None:
    """The 14 basic properties own flag bits 15..2 in spec order (content-type = 0x8000)."""
    props = CODEC_091.spec.find_class("basic").properties
    assert [f.name for f in props][:3] == ["content-type", "content-encoding", "headers"]
    for i, f in enumerate(props):
        payload = CODEC_091.encode_header(60, 0, {f.ident: SAMPLE[f.type]})
        assert struct.unpack_from(">H", payload, 12)[0] == 0x8000 >> i


@EXAMPLES
@given(data=st.data())
def test_two_flag_words_and_bit_properties(data: st.DataObject) -> None:
    props = SYNTHETIC_SPEC.find_class("wide").properties
    assert len(props) == 20
    chosen = data.draw(property_values(props))
    _roundtrip_header(SYNTHETIC, 200, chosen)
    everything = {f.ident: (True if f.type == "bit" else data.draw(for_type(f.type))) for f in props}
    payload = _roundtrip_header(SYNTHETIC, 200, everything)
    assert struct.unpack_from(">HH", payload, 12) == (0xFFFF, 0xF800)  # 15 flags + continuation, then 5
    only_last = _roundtrip_header(SYNTHETIC, 200, {"p19": 7})
    assert only_last[12:] == b"\x00\x01" + b"\x08\x00" + b"\x00\x00\x00\x07"


def test_content_frames_split_bodies() -> None:
    frames = CODEC_091.content_frames(3, b"x" * 250, {"delivery_mode": 2}, frame_max=108)
    off, got = 0, []
    while off < len(frames):
        f = decode_frame(frames, off)
        assert isinstance(f, RawFrame) and f.channel == 3
        got.append(f)
        off = f.end
    assert [f.type for f in got] == [2, 3, 3, 3]
    assert [len(f.payload) for f in got[1:]] == [100, 100, 50]
    assert CODEC_091.decode_header(got[0].payload).body_size == 250


# --- field tables, byte by byte --------------------------------------------------------------------


def _entry(key: bytes, value: bytes) -> bytes:
    return bytes((len(key),)) + key + value


def _table(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack(">I", len(body)) + body


TYPE_LITERALS: list[tuple[str, bytes, Any]] = [
    ("t", b"t\x01", True),
    ("t", b"t\x00", False),
    ("b", b"b\xfe", -2),
    ("B", b"B\xfe", 254),
    ("s", b"s\xff\xfe", -2),  # RabbitMQ: signed 16-bit
    ("u", b"u\xff\xfe", 65534),
    ("U", b"U\xff\xfe", -2),  # 0-9: signed 16-bit
    ("I", b"I\xff\xff\xff\xfe", -2),
    ("i", b"i\xff\xff\xff\xfe", 2**32 - 2),
    ("l", b"l" + b"\xff" * 7 + b"\xfe", -2),  # RabbitMQ: signed 64-bit
    ("L", b"L" + b"\xff" * 7 + b"\xfe", -2),  # 0-9: long-long, read as signed 64-bit like RabbitMQ
    ("f", b"f\x3f\xc0\x00\x00", 1.5),
    ("d", b"d\xc0\x04\x00\x00\x00\x00\x00\x00", -2.5),
    ("D", b"D\x02\x00\x00\x04\xd2", Decimal("12.34")),
    ("D", b"D\x00\xff\xff\xff\xff", Decimal(-1)),
    ("S", b"S\x00\x00\x00\x05h\xc3\xa9ll", "h\u00e9ll"),
    ("S", b"S\x00\x00\x00\x00", ""),
    ("x", b"x\x00\x00\x00\x03\x00\xff\x01", b"\x00\xff\x01"),
    ("A", b"A\x00\x00\x00\x09" + b"b\x01" + b"V" + b"S\x00\x00\x00\x01z", [1, None, "z"]),
    ("A", b"A\x00\x00\x00\x00", []),
    ("T", b"T\x00\x00\x00\x00\x65\x53\xf1\x00", Timestamp(1700000000)),
    ("F", b"F" + _table(_entry(b"in", b"I\x00\x00\x00\x2a")), {"in": 42}),
    ("F", b"F\x00\x00\x00\x00", {}),
    ("V", b"V", None),
]


@pytest.mark.parametrize(("code", "raw", "expected"), TYPE_LITERALS, ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(TYPE_LITERALS)])
def test_table_type_code_literal(code: str, raw: bytes, expected: Any) -> None:
    data = _table(_entry(b"before", b"I\x00\x00\x00\x01"), _entry(b"k", raw), _entry(b"after", b"t\x01"))
    table, end = decode_table(b"\x99" + data + b"\x77", 1)  # at an offset, with bytes after it
    assert end == 1 + len(data)
    assert table == {"before": 1, "k": expected, "after": True}
    assert type(table["k"]) is type(expected)


def test_every_type_code_in_one_table() -> None:
    codes = {c for c, _, _ in TYPE_LITERALS}
    assert codes == set("tbBsuUIilLfdDSxATFV")
    data = _table(*(_entry(f"{c}{i}".encode(), raw) for i, (c, raw, _) in enumerate(TYPE_LITERALS)))
    table, _ = decode_table(data, 0)
    assert table == {f"{c}{i}": v for i, (c, _, v) in enumerate(TYPE_LITERALS)}


@pytest.mark.parametrize(
    ("value", "raw"),
    [
        (None, b"V"), (True, b"t\x01"), (False, b"t\x00"), (-2, b"I\xff\xff\xff\xfe"),
        (2**31, b"l\x00\x00\x00\x00\x80\x00\x00\x00"), (-2.5, b"d\xc0\x04\x00\x00\x00\x00\x00\x00"),
        (Decimal("12.34"), b"D\x02\x00\x00\x04\xd2"), ("h\u00e9", b"S\x00\x00\x00\x03h\xc3\xa9"),
        (b"\x00\xff", b"x\x00\x00\x00\x02\x00\xff"), (Timestamp(1700000000), b"T\x00\x00\x00\x00\x65\x53\xf1\x00"),
        ({"a": 1}, b"F\x00\x00\x00\x07\x01aI\x00\x00\x00\x01"), ([1, "z"], b"A\x00\x00\x00\x0bI\x00\x00\x00\x01S\x00\x00\x00\x01z"),
    ],
)  # fmt: skip
def test_encode_value_literal(value: Any, raw: bytes) -> None:
    assert encode_value(value) == raw


def test_unknown_type_code_keeps_earlier_entries_and_the_rest_of_the_method() -> None:
    props = _table(_entry(b"product", b"S\x00\x00\x00\x03abc"), _entry(b"odd", b"Z\x01\x02"), _entry(b"lost", b"V"))
    payload = b"\x00\x0a\x00\x0a" + b"\x00\x09" + props + b"\x00\x00\x00\x05PLAIN" + b"\x00\x00\x00\x05en_US"
    d = CODEC_091.decode_method(payload)
    assert d.name == "connection.start" and d.problem is None
    sp = d.args["server_properties"]
    assert list(sp) == ["product", "odd"] and sp["product"] == "abc"
    assert isinstance(sp["odd"], Problem) and "'Z'" in sp["odd"]
    # the table's declared length still says where it ends: the fields after it decode
    assert (d.args["mechanisms"], d.args["locales"]) == ("PLAIN", "en_US")


def test_unknown_type_code_inside_an_array() -> None:
    data = _table(_entry(b"arr", b"A\x00\x00\x00\x04" + b"b\x05" + b"?\x00"), _entry(b"next", b"b\x06"))
    table, _ = decode_table(data, 0)
    assert table["arr"][0] == 5 and isinstance(table["arr"][1], Problem)
    assert table["next"] == 6  # the array's length is sound, so the table goes on


def test_truncated_element_inside_an_array_keeps_the_table_going() -> None:
    """Regression: an array element running past the array's end used to abort the whole table,
    losing the array and every entry after it, although the array's own length was sound."""
    data = _table(_entry(b"arr", b"A\x00\x00\x00\x05" + b"b\x07" + b"I\x00\x00"), _entry(b"next", b"b\x06"))
    table, end = decode_table(data, 0)
    assert end == len(data)
    assert table["arr"][0] == 7 and isinstance(table["arr"][1], Problem) and len(table["arr"]) == 2
    assert table["next"] == 6 and "<problem>" not in table


def test_invalid_utf8_is_kept_as_bytes() -> None:
    data = _table(_entry(b"s", b"S\x00\x00\x00\x02\xc3\x28"), _entry(b"k\xff", b"V"))
    table, _ = decode_table(data, 0)
    assert table["s"] == b"\xc3\x28"
    # keys stay str so every output can write them: undecodable keys are read as latin-1
    assert table["k\u00ff"] is None
    payload = CODEC_091.encode_method("basic.publish", {"exchange": b"\xffx", "routing_key": "r"})
    assert CODEC_091.decode_method(payload).args["exchange"] == b"\xffx"
    payload = CODEC_091.encode_method("connection.secure", {"challenge": b"\x80\x81"})
    assert CODEC_091.decode_method(payload).args["challenge"] == b"\x80\x81"
    header = CODEC_091.encode_header(60, 0, {"content_type": b"text/\xfe", "app_id": "ok"})
    assert CODEC_091.decode_header(header).properties == {"content_type": b"text/\xfe", "app_id": "ok"}


def _nested(depth: int, code: bytes) -> bytes:
    inner = _table() if code == b"F" else b"\x00\x00\x00\x00"
    for _ in range(depth):
        wrapped = _table(_entry(b"n", b"F" + inner)) if code == b"F" else struct.pack(">I", len(inner) + 1) + b"A" + inner
        inner = wrapped
    return inner


def test_deep_nesting_is_bounded() -> None:
    table, _ = decode_table(_nested(5000, b"F"), 0)  # far beyond Python's recursion limit
    level, depth = table, 0
    while "n" in level:
        level, depth = level["n"], depth + 1
    assert depth == MAX_DEPTH and isinstance(level["<problem>"], Problem)
    arrays = _table(_entry(b"a", b"A" + _nested(5000, b"A")))
    table, _ = decode_table(arrays, 0)
    level, depth = table["a"], 1
    while level and isinstance(level[0], list):
        level, depth = level[0], depth + 1
    assert depth == MAX_DEPTH and isinstance(level[0], Problem)  # the same limit as for tables


def test_nesting_at_the_limit_decodes() -> None:
    value: Any = {"leaf": 1}
    for _ in range(MAX_DEPTH - 1):
        value = {"n": value}
    table, _ = decode_table(encode_table(value), 0)
    assert table == value


def test_entry_count_is_bounded() -> None:
    table, _ = decode_table(_table(*[b"\x00V"] * 3 + [_entry(b"%d" % i, b"V") for i in range(MAX_ENTRIES + 5)]), 0)
    assert len(table) == MAX_ENTRIES + 1 and isinstance(table["<problem>"], Problem)


# --- bad input: truncation, lengths, ids ---------------------------------------------------------------


SAMPLE = {"bit": True, "octet": 9, "short": 300, "long": 70000, "longlong": 2**40, "timestamp": Timestamp(5),
          "shortstr": "abc", "longstr": "long", "content": "body", "table": {"k": "v", "n": [1, 2]}}  # fmt: skip


def _full_args(m: Method) -> dict[str, Any]:
    return {f.ident: SAMPLE[f.type] for f in m.fields}


@pytest.mark.parametrize("version", CODECS)
def test_truncated_method_at_every_length(version: str) -> None:
    codec = CODECS[version]
    for m in codec.spec.methods():
        payload = codec.encode_method(m.full_name, _full_args(m))
        for cut in range(len(payload)):
            d = codec.decode_method(payload[:cut])
            assert d.problem, (m.full_name, cut)
            if cut >= 4:
                assert (d.name, d.method) == (m.full_name, m)
        assert codec.decode_method(payload + b"\x00\x00").problem == "2 trailing bytes"


@pytest.mark.parametrize("version", CODECS)
def test_truncated_header_at_every_length(version: str) -> None:
    codec = CODECS[version]
    for cls in codec.spec.classes:
        if not cls.properties:
            continue
        props = {f.ident: SAMPLE[f.type] for f in cls.properties}
        payload = codec.encode_header(cls.index, 9, props)
        assert codec.decode_header(payload).properties == props
        for cut in range(len(payload)):
            assert codec.decode_header(payload[:cut]).problem, (cls.name, cut)
        h = codec.decode_header(payload + b"\x01")
        assert h.problem == "1 trailing bytes after the properties" and h.properties == props


def test_bad_declared_lengths() -> None:
    ids = b"\x00\x3c\x00\x28"  # basic.publish
    # short string claiming more bytes than the frame has
    d = CODEC_091.decode_method(ids + b"\x00\x00" + b"\xffabc")
    assert d.name == "basic.publish" and d.problem.startswith("truncated arguments")
    # long string of 4 GiB - 1
    d = CODEC_091.decode_method(b"\x00\x0a\x00\x15" + b"\xff\xff\xff\xff" + b"x")  # connection.secure-ok
    assert d.problem == "arguments run past the end of the frame"
    # field table longer than the frame
    d = CODEC_091.decode_method(b"\x00\x32\x00\x0a" + b"\x00\x00" + b"\x01q" + b"\x00" + b"\x00\x00\x01\x00")
    assert d.name == "queue.declare" and d.problem.startswith("truncated arguments (field table of 256 bytes")
    # nested values longer than their table: the table stops with a problem, earlier entries stay
    for bad in (b"S\x00\x00\x00\x09ab", b"F\x00\x00\x00\x09\x00", b"A\x00\x00\x00\x09b", b"x\x00\x00\x01\x00",
                b"I\x00\x00", b"l\x00", b"D\x00", b"t"):  # fmt: skip
        table, end = decode_table(_table(_entry(b"ok", b"V"), _entry(b"bad", bad)) + b"\x00" * 16, 0)
        assert end == 4 + 4 + 4 + len(bad)
        assert table["ok"] is None and "bad" not in table and isinstance(table["<problem>"], Problem), bad
    # a key longer than the table
    table, _ = decode_table(_table(b"\x09key"), 0)
    assert isinstance(table["<problem>"], Problem)


def test_unknown_class_and_method() -> None:
    for class_id, method_id in ((999, 10), (60, 999), (30, 10)):  # 30: access, not in 0-9-1
        d = CODEC_091.decode_method(struct.pack(">HH", class_id, method_id) + b"\x00\x01")
        assert (d.class_id, d.method_id, d.name, d.method, d.args) == (class_id, method_id, f"{class_id}.{method_id}", None, {})
        assert d.problem == f"unknown method {class_id}/{method_id}"
    assert CODEC_09.decode_method(b"\x00\x1e\x00\x0a" + b"\x00" + b"\x00" + b"\x00\x00").name == "access.request"
    assert CODEC_091.method(60, 40) is CODEC_091.spec.find_method("basic.publish")
    assert CODEC_091.method(60, 999) is None
    with pytest.raises(KeyError):
        CODEC_091.encode_method("basic.nonsense", {})
    d = CODEC_091.decode_method(b"\x00\x3c")
    assert d.class_id == -1 and "no class and method id" in d.problem


def test_header_problems() -> None:
    assert "too short" in CODEC_091.decode_header(b"\x00\x3c\x00").problem
    h = CODEC_091.decode_header(struct.pack(">HHQH", 60, 0, 3, 0x0002))  # bit 1: there is no 15th basic property
    assert "0x0002" in h.problem and h.body_size == 3
    h = CODEC_091.decode_header(struct.pack(">HHQH", 60, 0, 3, 0x8001))  # continuation, no next word
    assert h.problem == "property flags run past the end"
    h = CODEC_091.decode_header(struct.pack(">HHQH", 10, 0, 0, 0))  # connection: no properties at all
    assert h.problem is None and h.properties == {}
    h = CODEC_091.decode_header(struct.pack(">HHQH", 10, 0, 0, 0x8000))
    assert "no content properties" in h.problem
    h = CODEC_091.decode_header(struct.pack(">HHQH", 60, 0, 0, 0x1000))  # delivery-mode flagged, byte missing
    assert "truncated properties" in h.problem
    h = CODEC_091.decode_header(struct.pack(">HHQH", 60, 0, 0, 0x8000) + b"\x05ab")  # string cut short
    assert h.problem == "properties run past the end of the frame"


def test_many_flag_combinations_decode() -> None:
    """Many distinct flag words in a row, each decoded (the Python decoders cached one decoder per
    flag word, capped; the core reads the flags directly, so only the decoded values are checked)."""
    codec = Codec(SYNTHETIC_SPEC)
    for p in range(6):
        props = {f"p{p}": True if p == 3 else 1} if p not in (0, 2) else {f"p{p}": "x" if p == 0 else {}}
        assert codec.decode_header(codec.encode_header(200, 0, props)).properties == props


# --- frames and protocol headers ---------------------------------------------------------------------


def test_decode_frame_need_more_frame_malformed() -> None:
    frame = encode_frame(1, 5, CODEC_091.encode_method("channel.open", {}))
    buf = b"junk" + frame + encode_frame(8, 0, b"")
    for cut in range(4, 4 + len(frame)):
        r = decode_frame(buf[:cut], 4)
        assert isinstance(r, NeedMore) and r.needed > cut - 4
    r = decode_frame(buf, 4)
    assert r == RawFrame(1, 5, frame[7:-1], 4 + len(frame))
    assert decode_frame(buf, r.end) == RawFrame(8, 0, b"", len(buf))  # heartbeat
    assert decode_frame(buf, len(buf)) == NeedMore(8)
    bad_end = frame[:-1] + b"\x00"
    assert decode_frame(bad_end) == Malformed("frame-end octet is 0x00, not 0xce")
    huge = b"\x03\x00\x01\xff\xff\xff\xff" + b"\x00" * 10
    assert "exceeds the limit" in decode_frame(huge).reason
    assert isinstance(decode_frame(b"\x03\x00\x01\x00\x00\x01\x00" + b"\x00" * 10, 0, max_size=100), Malformed)
    assert decode_frame(b"\x09\x00\x00\x00\x00\x00\x00\xce") == RawFrame(9, 0, b"", 8)  # unknown type: the session names it


@pytest.mark.parametrize("raw", list(PROTOCOL_VERSIONS), ids=list(PROTOCOL_VERSIONS.values()))
def test_protocol_headers(raw: bytes) -> None:
    version = PROTOCOL_VERSIONS[raw]
    assert protocol_header(raw) == version
    assert protocol_header(b"xx" + raw, 2) == version
    for cut in range(8):
        assert protocol_header(raw[:cut]) == NeedMore(8)
        assert isinstance(decode_frame(raw[:cut]), (NeedMore, Malformed))
    # where a frame is expected, a header is malformed, and the reason says what it is
    assert decode_frame(raw + b"\x00" * 8) == Malformed(f"protocol header (AMQP {version}) where a frame was expected")
    # the same bytes as one direction of a TCP connection, through the core
    stream = OneWay()
    stream.feed(raw + encode_frame(8, 0, b""))
    events, stats = stream.decode()
    items = [ev for ev in events if ev.kind != "connection"]
    assert isinstance(items[0], ProtocolHeader) and items[0].version == version
    if version in ("0-9-1", "0-9", "0-8"):
        assert isinstance(items[1], Frame) and items[1].type == "heartbeat"
    else:
        assert items[1:] == []  # 0-10 and 1.0 frame differently: counted, not dissected
    assert stats.accounting.balanced()


def test_protocol_header_versions() -> None:
    assert {PROTOCOL_VERSIONS[r] for r in (b"AMQP\x00\x00\x09\x01", b"AMQP\x01\x01\x00\x09", b"AMQP\x01\x01\x08\x00",
                                           b"AMQP\x01\x01\x00\x0a", b"AMQP\x00\x01\x00\x00")} == {
        "0-9-1", "0-9", "0-8", "0-10", "1.0"}  # fmt: skip
    assert protocol_header(b"AMQP\x00\x00\x09\x02") == "unknown (0.0.9.2)"
    assert protocol_header(b"HTTP/1.1") is None


@EXAMPLES
@given(st.lists(st.sampled_from(["basic.publish", "basic.deliver", "connection.start", "heartbeat"]), max_size=5))
def test_decode_frame_never_raises_on_any_prefix(names: list[str]) -> None:
    buf = b""
    for name in names:
        if name == "heartbeat":
            buf += encode_frame(8, 0, b"")
        else:
            m = CODEC_091.spec.find_method(name)
            buf += encode_frame(1, 1, CODEC_091.encode_method(name, _full_args(m)))
    for cut in range(len(buf) + 1):
        off = 0
        while True:
            r = decode_frame(buf[:cut], off)
            if not isinstance(r, RawFrame):
                assert isinstance(r, NeedMore)
                break
            assert CODEC_091.decode_method(r.payload).problem is None or r.type == 8
            off = r.end

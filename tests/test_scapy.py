"""The Scapy layer (``amqpscope.scapy``): crafting, dissecting, what it shows, malformed input,
TCP port binding and reassembly. The layers' field values are checked against the native core's
decoders throughout; the property-based sweep over every method of both specs is in
test_scapy_codec.py, the shared captures in test_scapy_captures.py.
"""

from __future__ import annotations

import io
import struct
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw
from scapy.sendrecv import sniff
from scapy.sessions import TCPSession
from scapy.utils import rdpcap, wrpcap

import amqpscope.scapy as amqp
from amqpscope.capture import read_packets
from amqpscope.dissect.codec import Codec, get_codec
from amqpscope.dissect.spec import bundled_spec_path, parse_spec
from amqpscope.dissect.values import Timestamp
from amqpscope.events import Frame, Message
from amqpscope.pcapwrite import TcpConversation, write_pcap
from amqpscope.pipeline import Options, decode_packets
from amqpscope.scapy import Typed, layers_for
from amqpscope.scapy.layers import FrameLayer, MethodLayer, RawLayer, build_layers, split

CODEC = get_codec()
L = amqp.DEFAULT
AMQP = L.frame
BasicPublish = L.method("basic.publish")
ConnectionStartOk = L.method("connection.start-ok")
BasicHeader = L.header(60)
AMQPBody = L.body


def layers_of(pkt: Packet) -> list[Packet]:
    out = []
    layer: Packet = pkt
    while layer:
        out.append(layer)
        layer = layer.payload
    return out


def frames_of(pkt: Packet) -> list[tuple[FrameLayer, Packet]]:
    return [(f, f.payload) for f in amqp.frames(pkt) if isinstance(f, FrameLayer)]


def tcp_segment(payload: Any, seq: int = 1, sport: int = 40000, dport: int = 5672) -> Packet:
    return Ether() / IP(src="127.0.0.1", dst="127.0.0.1") / TCP(sport=sport, dport=dport, flags="PA", seq=seq) / payload


# --- crafting --------------------------------------------------------------------------------------


def test_publish_builds_the_frame_the_spec_describes() -> None:
    raw = bytes(AMQP(channel=1) / BasicPublish(exchange="x", routing_key="k"))
    args = b"\x00\x00" + b"\x01x" + b"\x01k" + b"\x00"  # reserved-1, exchange, routing-key, mandatory|immediate
    payload = b"\x00\x3c\x00\x28" + args
    assert raw == struct.pack(">BHI", 1, 1, len(payload)) + payload + b"\xce"
    d = CODEC.decode_method(raw[7:-1])
    assert (d.name, d.problem) == ("basic.publish", None)
    assert d.args == {"reserved_1": 0, "exchange": "x", "routing_key": "k", "mandatory": False, "immediate": False}


def test_the_module_names_the_default_layers() -> None:
    assert amqp.BasicPublish is BasicPublish and amqp.AMQP is AMQP and amqp.BasicHeader is BasicHeader
    assert {"ConnectionStartOk", "ConfirmSelectOk", "AMQPBody", "AMQPHeartbeat", "AMQPRaw"} <= set(amqp.__all__)
    with pytest.raises(AttributeError):
        _ = amqp.NoSuchLayer


def test_bits_pack_lowest_first_and_reserved_fields_default_to_zero() -> None:
    declare = L.method("queue.declare")(queue="q", durable=True, auto_delete=True, arguments={"x-max-length": 5})
    assert declare.reserved_1 == 0 and declare.passive is False
    d = CODEC.decode_method(bytes(declare))
    assert d.args["durable"] and d.args["auto_delete"] and not d.args["exclusive"]
    assert bytes(declare)[4 + 2 + 2] == 0b01010  # passive, durable, exclusive, auto-delete, no-wait
    assert d.args["arguments"] == {"x-max-length": 5}
    assert L.method("basic.publish").reserved == frozenset({"reserved_1"})
    assert L.method("connection.open")().reserved_1 == "" and L.method("connection.open")().reserved_2 is False


def test_a_message_as_one_chain_fills_sizes_and_frame_ends() -> None:
    msg = (
        AMQP(channel=1) / BasicPublish(exchange="", routing_key="q")
        / AMQP(channel=1) / BasicHeader(content_type="text/plain", delivery_mode=2, headers={"a": 1})
        / AMQP(channel=1) / AMQPBody(load=b"hel")
        / AMQP(channel=1) / AMQPBody(load=b"lo")
    )  # fmt: skip
    raw = bytes(msg)
    again = AMQP(raw)
    kinds = [(f.type, f.channel, type(inner).__name__) for f, inner in frames_of(again)]
    assert kinds == [(1, 1, "BasicPublish"), (2, 1, "BasicHeader"), (3, 1, "AMQPBody"), (3, 1, "AMQPBody")]
    header = again[BasicHeader]
    assert header.body_size == 5  # the body frames after it, added up
    assert header.property_flags == [0x8000 | 0x2000 | 0x1000]
    assert bytes(again) == raw
    # the core reads the same message out of a capture of these bytes
    events = decode_capture([raw])
    (m,) = [e for e in events if isinstance(e, Message)]
    assert (m.method, m.body, m.complete) == ("basic.publish", b"hello", True)
    assert m.properties == {"content_type": "text/plain", "delivery_mode": 2, "headers": {"a": 1}}


def decode_capture(client_payloads: list[bytes], server_payloads: list[bytes] = ()) -> list[Any]:  # type: ignore[assignment]
    tcp = TcpConversation(("127.0.0.1", 40001), ("127.0.0.1", 5672), ack_data=False)
    records = list(tcp.handshake())
    records += [r for p in client_payloads for r in tcp.send(True, p)]
    records += [r for p in server_payloads for r in tcp.send(False, p)]
    buf = io.BytesIO()
    write_pcap(buf, [(i * 1000, frame) for i, (_ts, frame) in enumerate(records)])
    return list(decode_packets(read_packets(io.BytesIO(buf.getvalue())), CODEC, Options()))


def test_start_ok_with_a_field_table_builds_and_decodes() -> None:
    props = {"product": "synth", "capabilities": {"publisher_confirms": True, "basic.nack": True}, "n": -7,
             "when": Timestamp(1_700_000_000), "ratio": 0.5, "price": Decimal("12.34"), "raw": b"\x00\xff",
             "list": [1, "two", None, {"x": False}]}  # fmt: skip
    start_ok = ConnectionStartOk(client_properties=props, mechanism="PLAIN", response="\0guest\0s3cret", locale="en_US")
    raw = bytes(AMQP() / start_ok)
    assert raw[0] == 1  # the method layer made the frame a method frame
    d = CODEC.decode_method(raw[7:-1])
    assert d.args == {
        "client_properties": props,
        "mechanism": "PLAIN",
        "response": "\0guest\0s3cret",
        "locale": "en_US",
    }


# --- what it shows: readable, credentials redacted ------------------------------------------------------------


def test_show_and_summary_redact_plain_credentials() -> None:
    pkt = tcp_segment(AMQP() / ConnectionStartOk(client_properties={"product": "p"}, mechanism="PLAIN",
                                                 response="\0guest\0s3cret", locale="en_US"))  # fmt: skip
    pkt = Ether(bytes(pkt))  # dissected, as from a capture
    shown = pkt.show(dump=True)
    assert "s3cret" not in shown and "s3cret" not in pkt.summary() and "s3cret" not in repr(pkt)
    assert "'\\x00guest\\x00[redacted]'" in shown
    assert "connection.start-ok" in shown and "client_properties" in shown
    assert pkt[ConnectionStartOk].response == "\0guest\0s3cret"  # the value itself is the wire's
    assert "connection.start-ok mechanism='PLAIN'" in pkt.summary()
    assert pkt.summary().startswith("Ether / IP / TCP 127.0.0.1:40000 > 127.0.0.1:amqp PA / AMQP ch=0 / ")


def test_amqplain_and_secure_ok_and_update_secret_are_redacted() -> None:
    response = amqp.encode_table_body({"LOGIN": "alice", "PASSWORD": "s3cret"})
    for layer in (
        ConnectionStartOk(mechanism="AMQPLAIN", response=response),
        L.method("connection.secure-ok")(response="s3cret"),
        L.method("connection.update-secret")(new_secret="s3cret", reason="rotation"),
    ):
        shown = AMQP(bytes(AMQP() / layer)).show(dump=True)
        assert "s3cret" not in shown and "[redacted]" in shown
    # nothing to hide: EXTERNAL's response and an empty one are shown
    external = AMQP(bytes(AMQP() / ConnectionStartOk(mechanism="EXTERNAL", response="CN=me")))
    assert "CN=me" in external.show(dump=True)


def test_summary_names_every_frame_of_a_segment() -> None:
    raw = bytes(AMQP(channel=1) / BasicPublish(routing_key="k") / AMQP(channel=1) / BasicHeader(body_size=2)
                / AMQP(channel=1) / AMQPBody(load=b"hi") / AMQP() / L.heartbeat())  # fmt: skip
    summary = Ether(bytes(tcp_segment(Raw(raw)))).summary()
    assert " / AMQP ch=1 / basic.publish exchange='' routing_key='k' mandatory=False immediate=False" in summary
    assert "basic header body_size=2" in summary and "body 2 bytes" in summary and summary.endswith("heartbeat")


# --- dissection ------------------------------------------------------------------------------------------------


def test_protocol_header_then_frames() -> None:
    tune_ok = L.method("connection.tune-ok")(channel_max=2047, frame_max=131072, heartbeat=60)
    raw = bytes(L.protocol_header()) + bytes(AMQP() / tune_ok)
    assert raw[:8] == b"AMQP\x00\x00\x09\x01"
    pkt = AMQP(raw)  # two units: an AMQPSegment holds them
    header, frame = amqp.frames(pkt)
    assert isinstance(pkt, L.segment) and isinstance(header, L.protocol_header)
    assert header.version == b"\x00\x00\x09\x01" and isinstance(frame, FrameLayer)
    assert "(0-9-1)" in pkt.show(dump=True)
    assert (
        pkt.summary()
        == "AMQP protocol header 0-9-1 | AMQP ch=0 / connection.tune-ok channel_max=2047 frame_max=131072 heartbeat=60"
    )
    assert pkt[L.method("connection.tune-ok")].frame_max == 131072
    assert bytes(pkt) == raw
    assert bytes(L.protocol_header(version="0-9")) == b"AMQP\x01\x01\x00\x09"


def test_a_segment_of_many_frames_dissects_and_builds_without_deep_recursion() -> None:
    ack = bytes(AMQP(channel=3) / L.method("basic.ack")(delivery_tag=1))
    raw = ack * 2000
    pkt = Ether(bytes(tcp_segment(Raw(raw))))
    acks = [inner for _f, inner in frames_of(pkt)]
    assert len(acks) == 2000 and all(isinstance(a, L.method("basic.ack")) for a in acks)
    assert bytes(pkt[TCP].payload) == raw


def test_every_type_code_round_trips_and_matches_the_core() -> None:
    codes = {"t": True, "b": -5, "B": 200, "s": -300, "u": 40000, "U": -2, "I": -70000, "i": 3_000_000_000,
             "l": -(2**40), "L": 2**40, "f": 0.5, "d": -2.25, "D": Decimal("-3.25"), "S": "text", "x": b"\x00\xff",
             "A": [1, "a", None], "T": Timestamp(1_700_000_000), "F": {"in": "x"}, "V": None}  # fmt: skip
    table = {code: Typed(code, value) for code, value in codes.items()}
    declare = bytes(AMQP(channel=1) / L.method("queue.declare")(queue="q", arguments=table))
    for code in codes:  # key "X" then type code X
        assert b"\x01" + code.encode() * 2 in declare, code
    core = CODEC.decode_method(declare[7:-1]).args["arguments"]
    assert core == codes
    dissected = AMQP(declare)[L.method("queue.declare")].arguments
    assert dissected == codes and dissected.codes == {c: c for c in codes}
    # rebuilt from the dissected values, every entry keeps its code
    rebuilt = bytes(AMQP(channel=1) / L.method("queue.declare")(queue="q", arguments=dissected))
    assert rebuilt == declare


def test_invalid_utf8_stays_bytes() -> None:
    pkt = AMQP(bytes(AMQP(channel=1) / BasicPublish(exchange=b"\xffx", routing_key="r")))
    assert pkt[BasicPublish].exchange == b"\xffx" and pkt[BasicPublish].routing_key == "r"


# --- malformed input: raw bytes and the reason, never an exception ----------------------------------------------


def _raw_reason(pkt: Packet) -> str:
    raw = pkt.getlayer(RawLayer)
    assert raw is not None, pkt.show(dump=True)
    assert isinstance(raw.reason, str) and raw.reason
    return str(raw.reason)


def test_short_frames_and_a_bad_frame_end() -> None:
    good = bytes(AMQP(channel=1) / BasicPublish(routing_key="k"))
    for n in range(1, len(good)):
        pkt = AMQP(good[:n])
        assert isinstance(pkt, RawLayer) and pkt.load == good[:n]
        assert "cut short" in _raw_reason(pkt)
    assert "frame-end is 0x00, not 0xce" in _raw_reason(AMQP(good[:-1] + b"\x00"))
    # in a segment after a good frame: that frame is kept, the rest is raw with the reason
    pkt = Ether(bytes(tcp_segment(Raw(good + good[:10]))))
    first, rest = amqp.frames(pkt)
    assert isinstance(first.payload, BasicPublish) and isinstance(rest, RawLayer)
    assert "cut short" in _raw_reason(pkt)


def test_bad_payloads_inside_a_sound_frame() -> None:
    overrun = b"\x00\x32\x00\x0a" + b"\x00\x00" + b"\x01q" + b"\x00" + b"\x00\x00\x00\x09" + b"\x01aS\x00\x00\x00\x09"
    cases = {
        overrun: "runs past",  # queue.declare whose table's string runs past the table
        b"\x00\x3c\x00\x28\x00": "reserved_1 needs 2 bytes",
        b"\x00\x3c\x03\xe7": "method 60.999 is not in spec 0-9-1",
        b"\x00": "no class and method ids",
        bytes(BasicPublish()) + b"\x01\x02": "2 trailing bytes",
        b"\x00\x0a\x00\x0b" + b"\x00\x00\x00\x03\x01aZ" + b"\x05PLAIN" + b"\x00\x00\x00\x00" + b"\x00": "unknown field table type code 'Z'",
    }  # fmt: skip
    for payload, reason in cases.items():
        pkt = AMQP(struct.pack(">BHI", 1, 1, len(payload)) + payload + b"\xce")
        assert isinstance(pkt, FrameLayer)
        assert reason in _raw_reason(pkt), (payload, _raw_reason(pkt))
        assert bytes(pkt)[7:-1] == payload  # the raw layer keeps the bytes as seen
    for ftype, payload, reason in ((8, b"x", "heartbeat frame with 1 payload bytes"), (9, b"", "frame (type 9)"),
                                   (2, b"\x00", "no class id"), (2, b"\x00\x3c\x00\x00", "body_size needs 8 bytes")):  # fmt: skip
        assert reason in _raw_reason(AMQP(struct.pack(">BHI", ftype, 0, len(payload)) + payload + b"\xce"))


def test_truncation_anywhere_in_a_message_never_raises() -> None:
    raw = bytes(AMQP(channel=1) / BasicPublish(routing_key="k") / AMQP(channel=1) / BasicHeader(headers={"a": [1, {"b": 2}]})
                / AMQP(channel=1) / AMQPBody(load=b"x" * 20))  # fmt: skip
    for n in range(len(raw) + 1):
        for data in (raw[:n], raw[:n] + b"\xce" * 3, bytes(b ^ 0x55 for b in raw[:n])):
            pkt = Ether(bytes(tcp_segment(Raw(data))))
            assert bytes(pkt[TCP].payload) == data


# --- ports and reassembly ---------------------------------------------------------------------------------------


def test_tcp_port_binding_both_ways_and_other_ports() -> None:
    frame = AMQP() / L.heartbeat()
    assert isinstance(Ether(bytes(tcp_segment(frame))).getlayer(FrameLayer), FrameLayer)
    assert isinstance(Ether(bytes(tcp_segment(frame, sport=5672, dport=40000))).getlayer(FrameLayer), FrameLayer)
    assert TCP(bytes(TCP() / frame)).dport == 5672  # built as TCP()/AMQP(): to the server
    elsewhere = bytes(tcp_segment(frame, dport=5673))
    assert Ether(elsewhere).getlayer(FrameLayer) is None
    amqp.bind_port(5673)
    try:
        assert isinstance(Ether(elsewhere).getlayer(FrameLayer), FrameLayer)
    finally:
        amqp.unbind_port(5673)
    assert Ether(elsewhere).getlayer(FrameLayer) is None


def test_split_says_what_is_whole() -> None:
    frame = bytes(AMQP() / L.heartbeat())
    assert split(b"AMQP\x00\x00\x09\x01" + frame) == (16, None, False)
    assert split(frame + frame[:3]) == (8, 16, False)
    assert split(b"AMQP\x00") == (0, 8, False)
    assert split(frame[:-1] + b"\x00") == (0, None, True)


def _segments(path: Path, payloads: list[bytes], server: list[bytes] = ()) -> None:  # type: ignore[assignment]
    tcp = TcpConversation(("127.0.0.1", 40001), ("127.0.0.1", 5672), ack_data=False)
    records = list(tcp.handshake())
    for p in payloads:
        records += tcp.send(True, p)
    for p in server:
        records += tcp.send(False, p)
    records += tcp.fin()
    write_pcap(str(path), [(i * 1000, frame) for i, (_ts, frame) in enumerate(records)])


def test_frames_spread_over_segments_reassemble_with_tcp_session(tmp_path: Path) -> None:
    body = bytes(range(256)) * 40
    msg = bytes(L.protocol_header()) + bytes(
        AMQP(channel=1) / BasicPublish(routing_key="q") / AMQP(channel=1) / BasicHeader(body_size=len(body))
        / AMQP(channel=1) / AMQPBody(load=body)
    )  # fmt: skip
    cuts = [5, 9, 30, 31, 60, 1000, 5000, len(msg)]  # inside the header, a frame header, a body
    chunks = [msg[a:b] for a, b in zip([0, *cuts], cuts, strict=False)]
    heartbeat = bytes(AMQP() / L.heartbeat())
    path = tmp_path / "split.pcap"
    _segments(path, chunks, [heartbeat[:3], heartbeat[3:] + heartbeat])
    pkts = sniff(offline=str(path), session=TCPSession)
    inner = [type(i).__name__ for p in pkts for _f, i in frames_of(p)]
    assert inner == ["BasicPublish", "BasicHeader", "AMQPBody", "AMQPHeartbeat", "AMQPHeartbeat"]
    assert any(p.haslayer(L.protocol_header) for p in pkts)
    (got,) = [p[AMQPBody].load for p in pkts if p.haslayer(AMQPBody)]
    assert got == body
    # without reassembly, rdpcap still shows the frames a segment holds whole, and says why not the rest
    plain = rdpcap(str(path))
    assert any("cut short" in str(p[RawLayer].reason) for p in plain if p.haslayer(RawLayer))


def test_a_stream_ending_inside_a_frame_is_handed_over_raw(tmp_path: Path) -> None:
    frame = bytes(AMQP(channel=1) / BasicPublish(routing_key="k"))
    path = tmp_path / "cut.pcap"
    _segments(path, [frame + frame[:5]])
    pkts = sniff(offline=str(path), session=TCPSession)
    found = [i for p in pkts for _f, i in frames_of(p)]
    assert [type(i).__name__ for i in found] == ["BasicPublish"]
    assert any("cut short" in str(p[RawLayer].reason) for p in pkts if p.haslayer(RawLayer))


def test_wrpcap_of_crafted_packets_decodes_in_the_core(tmp_path: Path) -> None:
    seq, pkts = 1, []
    for payload in (L.protocol_header(), AMQP(channel=1) / BasicPublish(routing_key="q")
                    / AMQP(channel=1) / BasicHeader() / AMQP(channel=1) / AMQPBody(load=b"hello")):  # fmt: skip
        pkts.append(tcp_segment(payload, seq=seq))
        seq += len(payload)
    path = tmp_path / "crafted.pcap"
    wrpcap(str(path), pkts)
    frames = [e for e in decode_packets(read_packets(path), CODEC, Options()) if isinstance(e, Frame)]
    assert [(f.type, f.method) for f in frames] == [("method", "basic.publish"), ("header", None), ("body", None)]


# --- other specs ------------------------------------------------------------------------------------------------


def test_the_0_9_spec_has_its_own_layers() -> None:
    l09 = layers_for(bundled_spec_path("amqp0-9.xml"))
    assert l09 is layers_for(bundled_spec_path("amqp0-9.xml")) and l09.version == "0-9"
    assert {"file", "stream", "basic"} <= {c.name for c in l09.spec.classes if c.properties}
    assert set(l09.headers) == {c.index for c in l09.spec.classes if c.properties}
    publish = l09.method("basic.publish")(ticket=5, exchange="x")
    assert "ticket" in [f.name for f in publish.fields_desc] and bytes(publish)[4:6] == b"\x00\x05"
    assert bytes(l09.protocol_header()) == b"AMQP\x01\x01\x00\x09"
    pkt = l09.frame(bytes(l09.frame(channel=2) / publish))
    assert isinstance(pkt.payload, l09.method("basic.publish"))


SYNTHETIC = parse_spec(
    b"""<?xml version="1.0"?>
<amqp major="0" minor="9" revision="1" port="5672">
  <class name="wide" index="200">
    <method name="bits" index="10">"""
    + b"".join(b'<field name="a%d" type="bit"/>' % i for i in range(10))
    + b"""<field name="size" type="short"/><field name="b1" type="bit"/><field name="args" type="table"/>
      <field name="last" type="bit"/>
    </method>"""
    + b"".join(
        b'<field name="p%d" type="%s"/>' % (i, t) for i, t in enumerate([b"shortstr", b"octet", b"bit", b"long"] * 5)
    )
    + b"""
  </class>
</amqp>""",
    "<synthetic>",
)


def test_a_spec_file_of_its_own_builds_layers_the_core_agrees_with() -> None:
    """More than 15 properties (two flag words), bit properties, ten bits in a row (two octets)."""
    layers, codec = build_layers(SYNTHETIC), Codec(SYNTHETIC)
    args = {f"a{i}": i % 3 == 0 for i in range(10)} | {"size": 7, "b1": True, "args": {"k": 1}, "last": True}
    method = layers.method("wide.bits")(**args)
    assert codec.decode_method(bytes(method)).args == args
    props = {"p0": "x", "p2": True, "p17": 4, "p18": True, "p19": 9}
    header = layers.header(200)(body_size=3, **props)
    got = codec.decode_header(bytes(header))
    assert (got.body_size, got.properties, got.problem) == (3, props, None)
    again = layers.frame(bytes(layers.frame() / header))[layers.header(200)]
    assert len(again.property_flags) == 2 and {k: getattr(again, k) for k in props} == props
    assert isinstance(layers.frame(bytes(layers.frame() / method)).payload, MethodLayer)


def test_a_spec_field_named_like_a_packet_attribute_is_refused() -> None:
    spec = parse_spec(
        b'<amqp major="0" minor="9" revision="1"><class name="c" index="10">'
        b'<method name="m" index="10"><field name="payload" type="octet"/></method></class></amqp>'
    )
    with pytest.raises(ValueError, match=r"c\.m: a field named 'payload' would hide"):
        build_layers(spec)

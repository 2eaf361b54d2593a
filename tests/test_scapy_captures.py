"""The shared captures (real clients against RabbitMQ) dissected by the Scapy layer with Scapy's
own TCP reassembly, frame by frame against the native core's decode: the same frames, completed
in the same packets, with the same method arguments, content properties and body sizes; and the
credentials the layer shows are the ones the core's redaction leaves.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from scapy.layers.inet import TCP
from scapy.layers.l2 import Ether
from scapy.packet import Packet
from scapy.sendrecv import sniff
from scapy.sessions import TCPSession
from scapy.utils import RawPcapReader

import amqpscope
import amqpscope.scapy as amqp
from amqpscope.events import Frame
from amqpscope.scapy.layers import BodyLayer, ContentHeaderLayer, FrameLayer, HeartbeatLayer, MethodLayer
from amqpscope.scapy.redact import redacted

CAPTURES = Path(__file__).resolve().parents[2] / "shared" / "captures"
# Scapy takes 3-6 ms a packet: by default the captures that bring something the others lack (a
# segment of 557 frames in s02, amqpstorm, rich properties, heartbeats, errors and AMQPLAIN,
# blocked, port 5673, kombu, aio-pika); every capture with AMQPSCOPE_SLOW=1
SLOW_ONES = ("s01", "s04", "s05", "s07", "s11")
SLOW = [pytest.mark.slow, pytest.mark.skipif(not os.environ.get("AMQPSCOPE_SLOW"), reason="set AMQPSCOPE_SLOW=1")]
NAMES = [
    pytest.param(p.name, marks=SLOW if p.name[:3] in SLOW_ONES else [])
    for p in sorted(CAPTURES.glob("s*.pcap"))
] if CAPTURES.is_dir() else []  # fmt: skip
PORTS = {"s12_amqptools_port5673.pcap": 5673}

Record = tuple[Any, ...]


def record(channel: int, inner: Packet) -> Record:
    """One frame as both sides can say it."""
    if isinstance(inner, MethodLayer):
        return channel, "method", inner.method, {f.name: inner.getfieldval(f.name) for f in inner.fields_desc[2:]}
    if isinstance(inner, ContentHeaderLayer):
        props = {f.name: inner.getfieldval(f.name) for f in inner.fields_desc[4:]}
        return channel, "header", inner.body_size, {k: v for k, v in props.items() if v is not None}
    if isinstance(inner, BodyLayer):
        return channel, "body", len(inner.load)
    if isinstance(inner, HeartbeatLayer):
        return (channel, "heartbeat")
    return channel, "raw", inner.show(dump=True)


def core_record(ev: Frame) -> Record:
    if ev.type == "method":
        return ev.channel, "method", ev.method, ev.args
    if ev.type == "header":
        return ev.channel, "header", ev.body_size, ev.properties
    if ev.type == "body":
        return ev.channel, "body", ev.size
    return ev.channel, ev.type


def scapy_frames(path: Path) -> Iterator[tuple[int, Record]]:
    """(packet number, frame) of every frame Scapy's TCPSession completes, packet by packet."""
    session = TCPSession()
    for index, (data, _meta) in enumerate(RawPcapReader(str(path)), start=1):
        out = session.process(Ether(data, stop_dissection_after=TCP))
        if out is None:
            continue
        for unit in amqp.frames(out):
            if isinstance(unit, FrameLayer):
                yield index, record(unit.channel, unit.payload)


@pytest.fixture
def bound(request: pytest.FixtureRequest) -> Iterator[None]:
    port = PORTS.get(request.node.callspec.params["name"])
    if port:
        amqp.bind_port(port)
    yield
    if port:
        amqp.unbind_port(port)


@pytest.mark.parametrize("name", NAMES)
def test_scapy_dissects_what_the_core_decodes(name: str, bound: None) -> None:
    path = CAPTURES / name
    ports = (PORTS.get(name, 5672),)
    core = [(ev.packet, core_record(ev)) for ev in amqpscope.read(path, ports=ports, show_credentials=True)
            if isinstance(ev, Frame)]  # fmt: skip
    ours = list(scapy_frames(path))
    assert len(ours) == len(core)
    for got, want in zip(ours, core, strict=True):
        assert got == want
    # and what Scapy shows of the credentials is what the core's default output says
    shown = {ev.packet: ev.args["response"] for ev in amqpscope.read(path, ports=ports)
             if isinstance(ev, Frame) and ev.method == "connection.start-ok"}  # fmt: skip
    assert shown
    for packet, (_ch, _t, method, args) in ((p, r) for p, r in ours if r[1:3] == ("method", "connection.start-ok")):
        assert redacted(method, args["response"], args["mechanism"]) == shown[packet]


def test_sniff_offline_with_tcp_session_shows_every_frame(captures_dir: Path) -> None:
    path = captures_dir / "s08_pika_heartbeat.pcap"
    core = [core_record(ev) for ev in amqpscope.read(path, show_credentials=True) if isinstance(ev, Frame)]
    pkts = sniff(offline=str(path), session=TCPSession)
    ours = [record(f.channel, f.payload) for p in pkts for f in amqp.frames(p) if isinstance(f, FrameLayer)]
    # by direction the order is the stream's; across directions both interleave by packet
    assert ours == core and sum(1 for r in ours if r[1] == "heartbeat") == 20

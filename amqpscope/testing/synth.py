"""Synthetic AMQP captures built with the Scapy layers (``amqpscope.scapy``), one packet per call.

Used by the validator tests to write one capture per rule and check that exactly the intended
finding fires at the intended packet. Every send is one TCP segment (no ACK packets), so the
packet number a call returns is the packet number the decoder and the validator report.

Example::

    cap = Capture()
    c = cap.connection()
    c.handshake()
    c.open_channel(1)
    p = c.client(1, "tx.commit")  # not transacted: tx.commit.transacted at packet p
    c.close()
    findings = cap.findings()
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

from amqpscope.capture import read_packets
from amqpscope.dissect.codec import Codec, get_codec
from amqpscope.dissect.wire import FRAME_HEARTBEAT
from amqpscope.events import Event, Finding
from amqpscope.pcapwrite import Record, TcpConversation, write_pcap
from amqpscope.pipeline import Options, decode_packets

STEP_NS = 1_000_000
# what pika announces in start-ok's client-properties
CAPABILITIES = ("authentication_failure_close", "basic.nack", "connection.blocked", "consumer_cancel_notify",
                "publisher_confirms")  # fmt: skip


class Capture:
    """Several interleaved TCP connections written into one capture."""

    def __init__(self, codec: Codec | None = None) -> None:
        self.codec = codec or get_codec()
        self.records: list[Record] = []
        self.ts_ns = 1_700_000_000_000_000_000
        self._ports = 40000

    def connection(self, syn: bool = True, server_port: int = 5672) -> SynthConn:
        self._ports += 1
        return SynthConn(self, ("127.0.0.1", self._ports), ("127.0.0.1", server_port), syn)

    def _add(self, records: list[Record]) -> int:
        """Append records with a global clock; returns the packet number of the first."""
        first = len(self.records) + 1
        for _ts, frame in records:
            self.ts_ns += STEP_NS
            self.records.append((self.ts_ns, frame))
        return first

    def pcap(self) -> bytes:
        buf = io.BytesIO()
        write_pcap(buf, self.records)
        return buf.getvalue()

    def write(self, path: str) -> None:
        with open(path, "wb") as f:
            f.write(self.pcap())

    def events(self, validate: bool = False) -> Iterator[Event]:
        packets = read_packets(io.BytesIO(self.pcap()))
        return decode_packets(packets, self.codec, Options(keep_bodies=False, validate=validate))

    def findings(self) -> list[Finding]:
        """The core validator's findings on this capture."""
        return [ev for ev in self.events(validate=True) if isinstance(ev, Finding)]


class SynthConn:
    """One client/server conversation; every method returns the packet number it wrote."""

    def __init__(self, cap: Capture, client: tuple[str, int], server: tuple[str, int], syn: bool) -> None:
        self.cap = cap
        self.codec = cap.codec
        self.layers = cap.codec.layers
        self.tcp = TcpConversation(client, server, ack_data=False)
        self.frame_max = 131072
        if syn:
            cap._add(self.tcp.handshake())

    # --- raw sends ------------------------------------------------------------------------------

    def send(self, from_client: bool, data: bytes) -> int:
        return self.cap._add(self.tcp.send(from_client, data))

    def frames(self, from_client: bool, *frames: bytes) -> int:
        """Several frames in one segment."""
        return self.send(from_client, b"".join(frames))

    def method(self, channel: int, name: str | tuple[int, int], **args: Any) -> bytes:
        return bytes(self.layers.framed(self.layers.method(name)(**args), channel))

    def client(self, channel: int, name: str, **args: Any) -> int:
        return self.send(True, self.method(channel, name, **args))

    def server(self, channel: int, name: str, **args: Any) -> int:
        return self.send(False, self.method(channel, name, **args))

    def content(self, from_client: bool, channel: int, body: bytes, frame_max: int | None = None,
                properties: dict[str, Any] | None = None) -> int:  # fmt: skip
        data = self.codec.content_frames(channel, body, properties, frame_max=frame_max or self.frame_max)
        return self.send(from_client, data)

    def header_frame(self, from_client: bool, channel: int, body_size: int, class_id: int = 60) -> int:
        header = self.layers.header(class_id)(class_id=class_id, body_size=body_size)
        return self.send(from_client, bytes(self.layers.framed(header, channel)))

    def body_frame(self, from_client: bool, channel: int, body: bytes) -> int:
        return self.send(from_client, bytes(self.layers.framed(self.layers.body(load=body), channel)))

    def heartbeat(self, from_client: bool, channel: int = 0, payload: bytes = b"") -> int:
        # a heartbeat with a payload is malformed: the raw layer carries it
        inner = self.layers.raw(load=payload) if payload else self.layers.heartbeat()
        return self.send(from_client, bytes(self.layers.framed(inner, channel, type=FRAME_HEARTBEAT)))

    # --- common sequences -----------------------------------------------------------------------

    def protocol_header(self, version: str | None = None) -> int:
        return self.send(True, bytes(self.layers.protocol_header(version=version or self.codec.spec.version)))

    def handshake(self, frame_max: int = 131072, channel_max: int = 2047, heartbeat: int = 0,
                  client_frame_max: int | None = None, capabilities: dict[str, bool] | None = None) -> int:  # fmt: skip
        """Protocol header through open-ok; returns the packet of open-ok."""
        self.frame_max = client_frame_max or frame_max
        if capabilities is None:
            capabilities = dict.fromkeys(CAPABILITIES, True)
        self.protocol_header()
        self.server(0, "connection.start", version_major=0, version_minor=9,
                    server_properties={"product": "synth"}, mechanisms="PLAIN", locales="en_US")  # fmt: skip
        self.client(0, "connection.start-ok", client_properties={"product": "synth", "capabilities": capabilities},
                    mechanism="PLAIN", response="\x00guest\x00guest", locale="en_US")  # fmt: skip
        self.server(0, "connection.tune", channel_max=channel_max, frame_max=frame_max, heartbeat=heartbeat)
        self.client(0, "connection.tune-ok", channel_max=channel_max, frame_max=self.frame_max, heartbeat=heartbeat)
        self.client(0, "connection.open", virtual_host="/")
        return self.server(0, "connection.open-ok")

    def open_channel(self, channel: int) -> int:
        self.client(channel, "channel.open")
        return self.server(channel, "channel.open-ok")

    def close_channel(self, channel: int, by_client: bool = True) -> int:
        self.send(by_client, self.method(channel, "channel.close", reply_code=200, reply_text="bye"))
        return self.send(not by_client, self.method(channel, "channel.close-ok"))

    def publish(self, channel: int, body: bytes = b"hello", exchange: str = "", routing_key: str = "q",
                **args: Any) -> int:  # fmt: skip
        self.client(channel, "basic.publish", exchange=exchange, routing_key=routing_key, **args)
        return self.content(True, channel, body)

    def deliver(self, channel: int, tag: int, consumer_tag: str = "ctag", body: bytes = b"hello") -> int:
        self.server(channel, "basic.deliver", consumer_tag=consumer_tag, delivery_tag=tag, exchange="", routing_key="q")
        return self.content(False, channel, body)

    def close(self, by_client: bool = True, fin: bool = True) -> int:
        """connection.close / close-ok, then the TCP close; returns the packet of close-ok."""
        self.send(by_client, self.method(0, "connection.close", reply_code=200, reply_text="bye"))
        p = self.send(not by_client, self.method(0, "connection.close-ok"))
        if fin:
            self.fin()
        return p

    def fin(self) -> None:
        self.cap._add(self.tcp.fin())


def ack_above_the_delivered_tags(path: str) -> int:
    """Write the capture issue 16 names: deliveries 1-3, then ``basic.ack multiple=1
    delivery-tag=5``, which RabbitMQ answers with channel.close 406 "unknown delivery tag 5".
    Returns the packet of that ack."""
    cap = Capture()
    c = cap.connection()
    c.handshake()
    c.open_channel(1)
    c.client(1, "basic.consume", queue="q", consumer_tag="ctag")
    c.server(1, "basic.consume-ok", consumer_tag="ctag")
    for tag in (1, 2, 3):
        c.deliver(1, tag)
    ack = c.client(1, "basic.ack", delivery_tag=5, multiple=True)
    c.server(1, "channel.close", reply_code=406, class_id=60, method_id=80,
             reply_text="PRECONDITION_FAILED - unknown delivery tag 5")  # fmt: skip
    c.client(1, "channel.close-ok")
    c.close()
    cap.write(path)
    return ack

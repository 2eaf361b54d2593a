"""Builders shared by the analysis tests: synthetic event sequences and cached capture reports.

``Script`` writes decoded events by hand (what the pipeline would emit for frames that real
clients rarely send: double acks, acks on the wrong channel, delivery-tag 0 with multiple…);
``synthetic_pcap`` goes through the codec and a TCP conversation so the whole pipeline runs.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import amqpscope
from amqpscope.analysis import analyse
from amqpscope.dissect.codec import get_codec
from amqpscope.events import C2S, S2C, Connection, Event, Frame, Message
from amqpscope.pcapwrite import TcpConversation, write_pcap

from .conftest import CAPTURES


@functools.cache
def capture_report(name: str) -> dict[str, Any]:
    """The stats report of one shared capture (decoded once per test session)."""
    return analyse(amqpscope.read(CAPTURES / name)).report()


class Script:
    """Events of hand-made connections, timestamps advancing by ``step`` unless given."""

    def __init__(self, start: float = 1_000.0, step: float = 0.001) -> None:
        self.ts = start
        self.step = step
        self.packet = 0
        self.events: list[Event] = []

    def _tick(self, ts: float | None) -> float:
        self.ts = self.ts + self.step if ts is None else ts
        self.packet += 1
        return self.ts

    def c(self, method: str, channel: int = 1, conn: int = 0, ts: float | None = None, **args: Any) -> Frame:
        return self.method(C2S, method, channel, conn, ts, **args)

    def s(self, method: str, channel: int = 1, conn: int = 0, ts: float | None = None, **args: Any) -> Frame:
        return self.method(S2C, method, channel, conn, ts, **args)

    def method(self, d: str, method: str, channel: int, conn: int, ts: float | None, **args: Any) -> Frame:
        ev = Frame(packet=self.packet + 1, ts=self._tick(ts), conn=conn, dir=d, channel=channel, type="method",
                   size=0, method=method, args=args)  # fmt: skip
        self.events.append(ev)
        return ev

    def heartbeat(self, d: str, conn: int = 0, ts: float | None = None) -> None:
        self.events.append(Frame(packet=self.packet + 1, ts=self._tick(ts), conn=conn, dir=d, channel=0,
                                 type="heartbeat", size=0))  # fmt: skip

    def message(self, d: str, method: str, channel: int = 1, conn: int = 0, body: bytes = b"x",
                properties: dict[str, Any] | None = None, **args: Any) -> None:  # fmt: skip
        """A content method followed by its Message event (header and body folded in)."""
        import hashlib

        f = self.method(d, method, channel, conn, None, **args)
        self.events.append(Message(packet=f.packet, ts=f.ts, conn=conn, dir=d, channel=channel, method=method,
                                   args=args, properties=properties or {}, body_size=len(body),
                                   body_received=len(body), complete=True, first_packet=f.packet, frames=3,
                                   body_sha256=hashlib.sha256(body).hexdigest(), body=body))  # fmt: skip

    def handshake(self, conn: int = 0, heartbeat: int = 0, user: str = "guest") -> None:
        self.events.append(Connection(packet=self.packet + 1, ts=self._tick(None), conn=conn, state="open",
                                      client=f"127.0.0.1:{40000 + conn}", server="127.0.0.1:5672"))  # fmt: skip
        self.s("connection.start", 0, conn)
        self.c("connection.start-ok", 0, conn, mechanism="PLAIN")
        self.s("connection.tune", 0, conn, heartbeat=60)
        self.c("connection.tune-ok", 0, conn, heartbeat=heartbeat, frame_max=131072, channel_max=2047)
        self.c("connection.open", 0, conn, virtual_host="/")
        self.s("connection.open-ok", 0, conn)

    def end(self, conn: int = 0, ended: str = "connection.close", ts: float | None = None, **fields: Any) -> None:
        self.events.append(Connection(packet=self.packet + 1, ts=self._tick(ts), conn=conn, state="close",
                                      client=f"127.0.0.1:{40000 + conn}", server="127.0.0.1:5672",
                                      ended=ended, **fields))  # fmt: skip

    def report(self) -> dict[str, Any]:
        return analyse(self.events).report()


def synthetic_pcap(path: Path, client_frames: list[tuple[bool, bytes]], close: str = "fin") -> Path:
    """A one-connection pcap: the protocol header, then (from_client, frame bytes) in order."""
    conv = TcpConversation()
    conv.handshake()
    conv.send(True, b"AMQP\x00\x00\x09\x01")
    for from_client, data in client_frames:
        conv.send(from_client, data)
    if close == "rst":
        conv.rst()
    else:
        conv.fin()
    write_pcap(path, conv.records)
    return path


def codec_handshake() -> list[tuple[bool, bytes]]:
    codec = get_codec()
    return [
        (False, codec.method_frame(0, "connection.start", version_major=0, version_minor=9,
                                   server_properties={"product": "RabbitMQ"}, mechanisms=b"PLAIN",
                                   locales=b"en_US")),
        (True, codec.method_frame(0, "connection.start-ok", client_properties={"product": "synthetic",
                                                                                "version": "1.0"},
                                  mechanism="PLAIN", response=b"\x00bob\x00hunter2", locale="en_US")),
        (False, codec.method_frame(0, "connection.tune", channel_max=2047, frame_max=131072, heartbeat=60)),
        (True, codec.method_frame(0, "connection.tune-ok", channel_max=2047, frame_max=131072, heartbeat=0)),
        (True, codec.method_frame(0, "connection.open", virtual_host="/")),
        (False, codec.method_frame(0, "connection.open-ok")),
        (True, codec.method_frame(1, "channel.open")),
        (False, codec.method_frame(1, "channel.open-ok")),
    ]  # fmt: skip

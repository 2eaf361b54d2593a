"""A client for live tests that sends exactly the frames it is told to, and reads the broker's methods.

Real client libraries refuse to break the protocol (exceed channel_max, ack unknown tags, skip a
handshake step); the live tests that need those frames on the wire drive the broker with this.
"""

from __future__ import annotations

import contextlib
import socket
import time
from typing import Any

from amqpscope.dissect.codec import Codec
from amqpscope.testing.frames import RawFrame, decode_frame

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"


class RawClient:
    def __init__(self, port: int, codec: Codec, name: str = "raw") -> None:
        self.codec, self.name = codec, name
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.port = self.sock.getsockname()[1]
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def method(self, channel: int, name: str, **args: Any) -> None:
        self.send(self.codec.method_frame(channel, name, **args))

    def expect(self, name: str) -> dict[str, Any]:
        """Read until the broker sends method ``name`` (or closes); its arguments."""
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            frame = decode_frame(self.buf)
            if isinstance(frame, RawFrame):
                self.buf = self.buf[frame.end :]
                if frame.type == 1 and (m := self.codec.decode_method(frame.payload)).name == name:
                    return m.args
                continue
            chunk = self.sock.recv(65536)
            if not chunk:
                break
            self.buf += chunk
        raise AssertionError(f"the broker sent no {name}")

    def until_closed(self, timeout: float = 4.0) -> None:
        """Read until the broker ends the connection."""
        self.sock.settimeout(timeout)
        with contextlib.suppress(OSError):
            while self.sock.recv(65536):
                pass

    def start(self, password: str = "guest", capabilities: bool = True) -> None:
        """Protocol header, then start-ok to the broker's connection.start."""
        self.send(PROTOCOL_HEADER)
        self.expect("connection.start")
        props: dict[str, Any] = {"product": self.name, "connection_name": self.name}
        if capabilities:
            props["capabilities"] = {"authentication_failure_close": True}
        self.method(0, "connection.start-ok", client_properties=props, mechanism="PLAIN",
                    response=f"\x00guest\x00{password}", locale="en_US")  # fmt: skip

    def tune(self, channel_max: int | None = None) -> None:
        tune = self.expect("connection.tune")
        self.method(0, "connection.tune-ok", channel_max=channel_max or tune["channel_max"],
                    frame_max=tune["frame_max"], heartbeat=0)  # fmt: skip

    def handshake(self, channel_max: int | None = None, vhost: str = "/") -> None:
        self.start()
        self.tune(channel_max)
        self.method(0, "connection.open", virtual_host=vhost)
        self.expect("connection.open-ok")

    def close(self) -> None:
        """The AMQP close handshake, then the socket."""
        self.method(0, "connection.close", reply_code=200, reply_text="bye", class_id=0, method_id=0)
        self.expect("connection.close-ok")
        self.sock.close()

    def drop(self) -> None:
        """The socket alone, without connection.close."""
        self.sock.close()

"""AMQP framing facts for the Python face: frame types, protocol headers, and the encoders tests
and samples build frames with. Captures are framed by the native core (``frames.rs``).
"""

from __future__ import annotations

import struct

FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8
FRAME_END = 0xCE
FRAME_TYPE_NAMES = {
    1: "method", 2: "header", 3: "body", 8: "heartbeat",
    4: "oob-method", 5: "oob-header", 6: "oob-body", 7: "trace",  # 0-8 / 0-9 only
}  # fmt: skip
HEADER_SIZE = 7
# A frame larger than this is not waited for: the stream is treated as malformed. RabbitMQ's own
# ceiling for frame_max is 128 MiB; nothing legitimate is bigger.
DEFAULT_MAX_FRAME = 128 * 1024 * 1024 + 4096

_HDR = struct.Struct(">BHI")


def encode_frame(ftype: int, channel: int, payload: bytes) -> bytes:
    return _HDR.pack(ftype, channel, len(payload)) + payload + b"\xce"


# --- protocol headers ---------------------------------------------------------------------------

PROTOCOL_VERSIONS = {
    b"AMQP\x00\x00\x09\x01": "0-9-1",
    b"AMQP\x01\x01\x00\x09": "0-9",
    b"AMQP\x01\x01\x08\x00": "0-8",
    b"AMQP\x01\x01\x09\x01": "0-8",  # what the 0-8 PDF draws; some 0-8 clients send it
    b"AMQP\x01\x01\x00\x0a": "0-10",
    b"AMQP\x00\x01\x00\x00": "1.0",
    b"AMQP\x02\x01\x00\x00": "1.0-tls",
    b"AMQP\x03\x01\x00\x00": "1.0-sasl",
}


def encode_protocol_header(version: str = "0-9-1") -> bytes:
    for raw, name in PROTOCOL_VERSIONS.items():
        if name == version:
            return raw
    raise ValueError(f"unknown protocol version {version!r}")

"""AMQP framing: the 7-octet frame header, frame-end, protocol headers, and string encoders.

``decode_frame`` never raises on short input: it answers *need more*, a frame, or *malformed*,
so a stream dissector can feed it whatever TCP reassembly hands over.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

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
_HDR_UNPACK = _HDR.unpack_from
_new = tuple.__new__  # a NamedTuple without its Python-level __new__ (per-frame hot path)
_U32 = struct.Struct(">I")


class NeedMore(NamedTuple):
    needed: int  # bytes needed from the frame's start before it can be decoded


class RawFrame(NamedTuple):
    type: int
    channel: int
    payload: bytes
    end: int  # offset just after the frame-end octet


class Malformed(NamedTuple):
    reason: str


def decode_frame(buf: bytes, off: int = 0, max_size: int = DEFAULT_MAX_FRAME) -> NeedMore | RawFrame | Malformed:
    """Decode the frame that starts at ``off`` in ``buf``; the payload is a slice of ``buf``."""
    try:
        ftype, channel, size = _HDR_UNPACK(buf, off)
    except struct.error:  # fewer than 7 bytes
        return NeedMore(HEADER_SIZE + 1)
    end = off + HEADER_SIZE + size
    if size <= max_size and end < len(buf) and buf[end] == 0xCE:  # the common case, tested at once
        return _new(RawFrame, (ftype, channel, buf[off + HEADER_SIZE : end], end + 1))
    if size > max_size:
        if buf[off : off + 4] == b"AMQP":  # its "size" is always over 1.3 GB: say what it is instead
            got = protocol_header(buf, off)
            version = got if isinstance(got, str) else "?, cut short"
            return Malformed(f"protocol header (AMQP {version}) where a frame was expected")
        return Malformed(f"declared frame size {size} exceeds the limit of {max_size}")
    if end >= len(buf):
        return NeedMore(HEADER_SIZE + size + 1)
    return Malformed(f"frame-end octet is 0x{buf[end]:02x}, not 0xce")


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


def protocol_header(buf: bytes, off: int = 0) -> str | NeedMore | None:
    """The protocol version named by an ``AMQP`` header at ``off``, need-more, or None."""
    have = bytes(buf[off : off + 8])
    if not b"AMQP".startswith(have[:4]):
        return None
    if len(have) < 8:
        return NeedMore(8)
    return PROTOCOL_VERSIONS.get(have, "unknown ({})".format(".".join(str(b) for b in have[4:])))


def encode_protocol_header(version: str = "0-9-1") -> bytes:
    for raw, name in PROTOCOL_VERSIONS.items():
        if name == version:
            return raw
    raise ValueError(f"unknown protocol version {version!r}")


# --- string encoders used by the generated code ---------------------------------------------------


def _raw(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def enc_shortstr(value: str | bytes) -> bytes:
    raw = _raw(value)
    if len(raw) > 255:
        raise ValueError(f"short string of {len(raw)} bytes (at most 255)")
    return bytes((len(raw),)) + raw


def enc_longstr(value: str | bytes) -> bytes:
    raw = _raw(value)
    return _U32.pack(len(raw)) + raw

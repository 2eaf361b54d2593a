"""Splitting byte streams into AMQP frames, for tests and tools that build or check streams by hand.

Independent of the native core on purpose (like ``tcpwalk``): a second, tiny reading of the framing
rules that tests can hold the core's against. ``decode_frame`` never raises on short input: it
answers *need more*, a frame, or *malformed*.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from amqpscope.dissect.wire import DEFAULT_MAX_FRAME, HEADER_SIZE, PROTOCOL_VERSIONS

_HDR_UNPACK = struct.Struct(">BHI").unpack_from


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
        return RawFrame(ftype, channel, buf[off + HEADER_SIZE : end], end + 1)
    if size > max_size:
        if buf[off : off + 4] == b"AMQP":  # its "size" is always over 1.3 GB: say what it is instead
            got = protocol_header(buf, off)
            version = got if isinstance(got, str) else "?, cut short"
            return Malformed(f"protocol header (AMQP {version}) where a frame was expected")
        return Malformed(f"declared frame size {size} exceeds the limit of {max_size}")
    if end >= len(buf):
        return NeedMore(HEADER_SIZE + size + 1)
    return Malformed(f"frame-end octet is 0x{buf[end]:02x}, not 0xce")


def protocol_header(buf: bytes, off: int = 0) -> str | NeedMore | None:
    """The protocol version named by an ``AMQP`` header at ``off``, need-more, or None."""
    have = bytes(buf[off : off + 8])
    if not b"AMQP".startswith(have[:4]):
        return None
    if len(have) < 8:
        return NeedMore(8)
    return PROTOCOL_VERSIONS.get(have, "unknown ({})".format(".".join(str(b) for b in have[4:])))

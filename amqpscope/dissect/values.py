"""Value types of decoded arguments and properties.

Field tables are the one irregular part of the wire format: a value's type is on the wire, not in
the spec. The native core decodes them (``crates/amqpscope-core/src/fieldtable.rs``: the type codes
RabbitMQ and its clients really send, ``s`` = signed 16-bit, ``l`` = signed 64-bit, ``x`` = byte
array, and the 0-9 codes ``U``/``L``; an unknown code stops that table with a `Problem` entry).
What it hands to Python uses the types below. Tables are encoded by the Scapy layer
(``amqpscope.scapy.table``), the project's one encoder.
"""

from __future__ import annotations

import struct
from typing import Any


class Truncated(Exception):
    """Input ended (or a declared length ran) past the end of what is there."""


class Timestamp(int):
    """Seconds since the epoch, from a ``timestamp`` field or a ``T`` table value."""

    __slots__ = ()


class Problem(str):
    """A value that could not be decoded; the text says why. Kept in place of the value."""

    __slots__ = ()


_u32 = struct.Struct(">I")


def decode_table(buf: bytes, off: int, depth: int = 0) -> tuple[dict[str, Any], int]:
    """Decode a field table at ``off`` with the core's decoder; the table and the offset after it."""
    if off + 4 > len(buf):
        raise Truncated("field table length runs past the end")
    (size,) = _u32.unpack_from(buf, off)
    end = off + 4 + size
    if end > len(buf):
        raise Truncated(f"field table of {size} bytes runs past the end")
    return table_body(buf, off + 4, end, depth), end


def table_body(buf: bytes, off: int, end: int, depth: int = 0) -> dict[str, Any]:
    """The entries of a field table body ``buf[off:end]`` (no length prefix), as the core decodes them."""
    from .codec import get_codec  # the codec loads the native core, which imports this module

    return get_codec().decode_table_body(bytes(buf[off:end]))

"""Value types of decoded arguments and properties, and the field-table encoder.

Field tables are the one irregular part of the wire format: a value's type is on the wire, not in
the spec. The native core decodes them (``crates/amqpscope-core/src/fieldtable.rs``: the type codes
RabbitMQ and its clients really send, ``s`` = signed 16-bit, ``l`` = signed 64-bit, ``x`` = byte
array, and the 0-9 codes ``U``/``L``; an unknown code stops that table with a `Problem` entry).
What it hands to Python uses the types below; this module encodes tables for tests and samples.
"""

from __future__ import annotations

import struct
from decimal import Decimal
from typing import Any


class Truncated(Exception):
    """Input ended (or a declared length ran) past the end of what is there."""


class Timestamp(int):
    """Seconds since the epoch, from a ``timestamp`` field or a ``T`` table value."""

    __slots__ = ()


class Problem(str):
    """A value that could not be decoded; the text says why. Kept in place of the value."""

    __slots__ = ()


_i8 = struct.Struct(">b")
_u8 = struct.Struct(">B")
_i16 = struct.Struct(">h")
_u16 = struct.Struct(">H")
_i32 = struct.Struct(">i")
_u32 = struct.Struct(">I")
_i64 = struct.Struct(">q")
_u64 = struct.Struct(">Q")
_f32 = struct.Struct(">f")
_f64 = struct.Struct(">d")
_dec = struct.Struct(">Bi")


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
    from .codec import get_codec  # the codec module imports this one

    return get_codec().decode_table_body(bytes(buf[off:end]))


# --- encoding --------------------------------------------------------------------------------------


def encode_table(table: dict[str, Any] | None) -> bytes:
    body = b"".join(_encode_entry(k, v) for k, v in (table or {}).items())
    return _u32.pack(len(body)) + body


def _encode_entry(key: str, value: Any) -> bytes:
    k = key.encode()
    return bytes((len(k),)) + k + encode_value(value)


def encode_value(value: Any) -> bytes:
    """Encode one table value, choosing the type code RabbitMQ's clients would use."""
    if value is None:
        return b"V"
    if isinstance(value, bool):
        return b"t" + (b"\x01" if value else b"\x00")
    if isinstance(value, Timestamp):
        return b"T" + _u64.pack(value)
    if isinstance(value, int):
        if -(2**31) <= value < 2**31:
            return b"I" + _i32.pack(value)
        return b"l" + _i64.pack(value)
    if isinstance(value, float):
        return b"d" + _f64.pack(value)
    if isinstance(value, Decimal):
        exp = value.as_tuple().exponent
        scale = -int(exp) if isinstance(exp, int) and exp < 0 else 0
        return b"D" + _dec.pack(scale, int(value.scaleb(scale)))
    if isinstance(value, str):
        data = value.encode()
        return b"S" + _u32.pack(len(data)) + data
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        return b"x" + _u32.pack(len(data)) + data
    if isinstance(value, dict):
        return b"F" + encode_table(value)
    if isinstance(value, (list, tuple)):
        body = b"".join(encode_value(v) for v in value)
        return b"A" + _u32.pack(len(body)) + body
    raise TypeError(f"cannot encode {type(value).__name__} in a field table")


def encode_typed(code: str, value: Any) -> bytes:
    """Encode a value with an explicit type code (tests use it to produce every code)."""
    c = ord(code)
    packers = {
        "b": _i8, "B": _u8, "s": _i16, "u": _u16, "U": _i16, "I": _i32, "i": _u32,
        "l": _i64, "L": _i64, "f": _f32, "d": _f64, "T": _u64,
    }  # fmt: skip
    if code in packers:
        return bytes((c,)) + packers[code].pack(value)
    if code == "t":
        return b"t" + bytes((1 if value else 0,))
    if code in "SxAFDV":
        return encode_value(value) if code != "x" else b"x" + _u32.pack(len(value)) + bytes(value)
    raise ValueError(f"unknown type code {code!r}")

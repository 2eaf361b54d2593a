"""Value types and the field-table codec shared by every generated decoder and encoder.

Field tables are the one irregular part of the wire format: a value's type is on the wire, not in
the spec, so they are decoded here by hand. Type codes follow what RabbitMQ and its clients really
send (``s`` = signed 16-bit, ``l`` = signed 64-bit, ``x`` = byte array) and accept the 0-9 codes
``U``/``L``. Decoding is lenient: an unknown type code stops that table with a `Problem` entry and
keeps what came before it; judging what is wrong is the validator's job.
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


MAX_DEPTH = 64  # nested tables/arrays; RabbitMQ's own limit is lower, hostile input is not
MAX_ENTRIES = 65536  # entries in one table or array

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
_u32_unpack = _u32.unpack_from
_i32_unpack = _i32.unpack_from


def text(raw: bytes) -> str | bytes:
    """Strings are UTF-8 in practice; anything else is kept as the bytes seen."""
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return raw


def decode_table(buf: bytes, off: int, depth: int = 0) -> tuple[dict[str, Any], int]:
    """Decode a field table at ``off``; returns the table and the offset after it."""
    (size,) = _u32_unpack(buf, off)
    off += 4
    end = off + size
    if end > len(buf):
        raise Truncated(f"field table of {size} bytes runs past the end")
    return _table_body(buf, off, end, depth), end


def _table_body(buf: bytes, off: int, end: int, depth: int) -> dict[str, Any]:
    # The hot path of every content header with headers: the common value types are decoded inline
    # (no call per value); the rest go through _DECODERS. Any read past the table's end stops the
    # table with a Problem entry and keeps what came before.
    table: dict[str, Any] = {}
    if depth >= MAX_DEPTH:
        table["<problem>"] = Problem(f"nesting deeper than {MAX_DEPTH}")
        return table
    value: Any
    # every entry takes at least 2 bytes (key length, type code): small tables need no entry count
    counted = end - off > 2 * MAX_ENTRIES
    try:
        while off < end:
            if counted and len(table) >= MAX_ENTRIES:
                table["<problem>"] = Problem(f"more than {MAX_ENTRIES} entries")
                break
            kstart = off + 1
            off = kstart + buf[off]
            if off >= end:
                raise Truncated("key without value")
            raw = buf[kstart:off]
            try:
                key = raw.decode()
            except UnicodeDecodeError:
                key = raw.decode("latin-1")  # keys stay str, so every output format can write them
            code = buf[off]
            off += 1
            if code == 83:  # S
                (n,) = _u32_unpack(buf, off)
                off += 4
                stop = off + n
                if stop > end:
                    raise Truncated(f"long string of {n} bytes runs past its table")
                value = buf[off:stop]
                off = stop
                try:  # noqa: SIM105 - not contextlib.suppress: this is the hot path
                    value = value.decode()
                except UnicodeDecodeError:
                    pass  # kept as the bytes seen
            elif code == 73:  # I
                (value,) = _i32_unpack(buf, off)
                off += 4
                if off > end:
                    raise Truncated("value of type 'I' runs past its table")
            elif code == 116:  # t
                if off >= end:
                    raise Truncated("value of type 't' runs past its table")
                value = buf[off] != 0
                off += 1
            else:
                handler = _DECODERS.get(code)
                if handler is None:
                    table[key] = Problem(f"unknown field type {chr(code)!r} (0x{code:02x})")
                    break
                value, off = handler(buf, off, end, depth)
                if off > end:
                    raise Truncated(f"value of type {chr(code)!r} runs past its table")
            table[key] = value
    except (Truncated, IndexError, struct.error) as exc:
        table["<problem>"] = Problem(f"truncated table entry: {exc}" if str(exc) else "truncated table entry")
    return table


table_body = _table_body  # the generated decoders frame the table themselves and call this


def _value(buf: bytes, off: int, end: int, depth: int) -> tuple[Any, int]:
    code = buf[off]
    off += 1
    handler = _DECODERS.get(code)
    if handler is None:
        return Problem(f"unknown field type {chr(code)!r} (0x{code:02x})"), end
    value, off = handler(buf, off, end, depth)
    if off > end:
        raise Truncated(f"value of type {chr(code)!r} runs past its table")
    return value, off


def _fixed(st: struct.Struct) -> Any:
    size = st.size
    unpack = st.unpack_from

    def dec(buf: bytes, off: int, end: int, depth: int) -> tuple[Any, int]:
        return unpack(buf, off)[0], off + size

    return dec


def _bool(buf: bytes, off: int, end: int, depth: int) -> tuple[Any, int]:
    return buf[off] != 0, off + 1


def _decimal(buf: bytes, off: int, end: int, depth: int) -> tuple[Any, int]:
    scale, raw = _dec.unpack_from(buf, off)
    return Decimal(raw).scaleb(-scale), off + 5


def _shortstr(buf: bytes, off: int, end: int, depth: int) -> tuple[Any, int]:
    n = buf[off]
    off += 1
    if off + n > end:
        raise Truncated("short string runs past its table")
    return text(buf[off : off + n]), off + n


def _longstr(buf: bytes, off: int, end: int, depth: int) -> tuple[Any, int]:
    (n,) = _u32.unpack_from(buf, off)
    off += 4
    if off + n > end:
        raise Truncated(f"long string of {n} bytes runs past its table")
    return text(buf[off : off + n]), off + n


def _bytes(buf: bytes, off: int, end: int, depth: int) -> tuple[Any, int]:
    (n,) = _u32.unpack_from(buf, off)
    off += 4
    if off + n > end:
        raise Truncated(f"byte array of {n} bytes runs past its table")
    return bytes(buf[off : off + n]), off + n


def _timestamp(buf: bytes, off: int, end: int, depth: int) -> tuple[Any, int]:
    return Timestamp(_u64.unpack_from(buf, off)[0]), off + 8


def _nested_table(buf: bytes, off: int, end: int, depth: int) -> tuple[Any, int]:
    (n,) = _u32.unpack_from(buf, off)
    off += 4
    if off + n > end:
        raise Truncated(f"nested table of {n} bytes runs past its table")
    return _table_body(buf, off, off + n, depth + 1), off + n


def _array(buf: bytes, off: int, end: int, depth: int) -> tuple[Any, int]:
    (n,) = _u32.unpack_from(buf, off)
    off += 4
    stop = off + n
    if stop > end:
        raise Truncated(f"array of {n} bytes runs past its table")
    items: list[Any] = []
    if depth + 1 >= MAX_DEPTH:
        return [Problem(f"nesting deeper than {MAX_DEPTH}")], stop
    try:
        while off < stop:
            if len(items) >= MAX_ENTRIES:
                items.append(Problem(f"more than {MAX_ENTRIES} entries"))
                break
            value, off = _value(buf, off, stop, depth + 1)
            items.append(value)
            if isinstance(value, Problem):
                break
    except (Truncated, IndexError, struct.error) as exc:
        # the array's own length is sound, so the table goes on after it
        items.append(Problem(f"truncated array element: {exc}" if str(exc) else "truncated array element"))
    return items, stop


def _void(buf: bytes, off: int, end: int, depth: int) -> tuple[Any, int]:
    return None, off


_DECODERS: dict[int, Any] = {
    ord("t"): _bool,
    ord("b"): _fixed(_i8),
    ord("B"): _fixed(_u8),
    ord("s"): _fixed(_i16),  # RabbitMQ errata: signed 16-bit, not short string
    ord("u"): _fixed(_u16),
    ord("U"): _fixed(_i16),  # 0-9-1 spec's signed 16-bit
    ord("I"): _fixed(_i32),
    ord("i"): _fixed(_u32),
    ord("l"): _fixed(_i64),  # RabbitMQ errata: signed 64-bit
    ord("L"): _fixed(_i64),  # the spec's "long-long-int"; RabbitMQ reads it as signed 64-bit too
    ord("f"): _fixed(_f32),
    ord("d"): _fixed(_f64),
    ord("D"): _decimal,
    ord("S"): _longstr,
    ord("x"): _bytes,
    ord("A"): _array,
    ord("T"): _timestamp,
    ord("F"): _nested_table,
    ord("V"): _void,
}


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

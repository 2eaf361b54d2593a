"""Encoding methods and content headers from the spec model: what tests, samples and the synthetic
captures are built with. Decoding is the native core's job; this side only writes frames, so a plain
walk over the model's fields is fast enough and nothing is generated.
"""

from __future__ import annotations

import struct
from typing import Any

from .spec import Field
from .values import encode_table
from .wire import enc_longstr, enc_shortstr

_FIXED = {"octet": ">B", "short": ">H", "long": ">I", "longlong": ">Q", "timestamp": ">Q"}


def encode_fields(fields: tuple[Field, ...], args: dict[str, Any]) -> bytes:
    """The packed arguments: consecutive bits share an octet (up to 8), everything else in order."""
    out: list[bytes] = []
    bits: list[Field] = []

    def flush() -> None:
        if bits:
            out.append(bytes((sum(1 << i for i, f in enumerate(bits) if args.get(f.ident)),)))
            bits.clear()

    for f in fields:
        if f.type == "bit":
            if len(bits) == 8:
                flush()
            bits.append(f)
            continue
        flush()
        out.append(_encode_one(f, args.get(f.ident)))
    flush()
    return b"".join(out)


def _encode_one(f: Field, value: Any) -> bytes:
    if f.type in _FIXED:
        return struct.pack(_FIXED[f.type], int(value or 0))
    if f.type == "shortstr":
        return enc_shortstr(value or "")
    if f.type in ("longstr", "content"):
        return enc_longstr(value or "")
    if f.type == "table":
        return encode_table(value)
    raise ValueError(f"cannot encode field type {f.type!r}")


def encode_properties(props: tuple[Field, ...], values: dict[str, Any]) -> bytes:
    """Property flag words (15 properties a word, bit 0 continues) and the present properties."""
    words = [0]
    out: list[bytes] = []
    for i, f in enumerate(props):
        if values.get(f.ident) is None:
            continue
        word, bit = divmod(i, 15)
        while len(words) <= word:
            words[-1] |= 1
            words.append(0)
        words[word] |= 1 << (15 - bit)
        if f.type != "bit":
            out.append(_encode_one(f, values[f.ident]))
    return b"".join(struct.pack(">H", w) for w in words) + b"".join(out)

"""The codec for one spec: method and content-header payloads to Python values and back.

It joins the generated fast paths (``generated/*.py`` or a module compiled at run time for
``--spec FILE``) with the spec model, so callers get names, ids and the `Method` description.
"""

from __future__ import annotations

import importlib
import struct
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

from .compiler import SHIPPED, compile_module, flag_decoder, spec_digest
from .spec import DEFAULT_SPEC, Method, Spec, bundled_spec_path, load_spec
from .values import Truncated
from .wire import FRAME_BODY, FRAME_HEADER, FRAME_METHOD, encode_frame

_IDS = struct.Struct(">HH")
_IDS_UNPACK = _IDS.unpack_from
_HEADER_UNPACK = struct.Struct(">HHQH").unpack_from
MAX_FLAG_DECODERS = 4096  # distinct (class, flag word) decoders compiled; hostile input cannot grow it further
_new = tuple.__new__  # builds a NamedTuple without the Python-level __new__ on the hot path
_U16 = struct.Struct(">H")
_DECODE_ERRORS = (Truncated, IndexError, struct.error, ValueError, OverflowError)


class DecodedMethod(NamedTuple):
    class_id: int
    method_id: int
    name: str  # "basic.publish", or "60.999" for ids the spec does not define
    method: Method | None  # None: ids the spec does not define
    args: dict[str, Any]
    problem: str | None  # why the arguments are incomplete or odd; None when clean


class DecodedHeader(NamedTuple):
    class_id: int
    weight: int
    body_size: int
    properties: dict[str, Any]
    problem: str | None


@dataclass(frozen=True, slots=True)
class _Entry:
    method: Method
    name: str
    decode: Any
    encode: Any


class Codec:
    """Decoders and encoders for every method and content class of one spec.

    Content headers take one of two paths: a single flag word with only defined bits (nearly every
    header) goes to a decoder compiled for exactly that word on first sight; anything else (several
    flag words, undefined bits, trailing bytes) goes through the generic generated decoder, which
    also says what is wrong.
    """

    def __init__(self, spec: Spec, module: ModuleType) -> None:
        self.spec = spec
        self._entries: dict[int, _Entry] = {
            m.key: _Entry(m, m.full_name, module.METHOD_DECODERS[m.key], module.METHOD_ENCODERS[m.key]) for m in spec.methods()
        }
        self._by_name = {e.method.full_name: e for e in self._entries.values()}
        self._pdec: dict[int, Any] = dict(module.PROPERTY_DECODERS)
        self._penc: dict[int, Any] = dict(module.PROPERTY_ENCODERS)
        self._nprops = {c.index: len(c.properties) for c in spec.classes}
        # flag bits the first flag word may set without a problem (plus the continuation bit)
        allowed = {c.index: sum(1 << (15 - b) for b in range(min(15, len(c.properties)))) | 1 for c in spec.classes}
        # the decode path reads plain tuples: (decoder, name, Method)
        self._fast_methods = {k: (e.decode, e.name, e.method) for k, e in self._entries.items()}
        # flag bits of a single flag word that no property owns, per class with properties
        self._disallowed = {c: 0xFFFF & ~allowed[c] for c in self._pdec}
        self._props_of = {c.index: c.properties for c in spec.classes}
        self._by_flags: dict[int, Any] = {}  # (class id << 16 | flag word) -> compiled decoder

    # --- decoding -------------------------------------------------------------------------------

    def method(self, class_id: int, method_id: int) -> Method | None:
        entry = self._entries.get((class_id << 16) | method_id)
        return entry.method if entry else None

    def decode_method(self, payload: bytes) -> DecodedMethod:
        try:
            class_id, method_id = _IDS_UNPACK(payload, 0)
        except struct.error:
            return DecodedMethod(-1, -1, "?", None, {}, f"method payload of {len(payload)} bytes has no class and method id")
        entry = self._fast_methods.get((class_id << 16) | method_id)
        if entry is None:
            return DecodedMethod(class_id, method_id, f"{class_id}.{method_id}", None, {}, f"unknown method {class_id}/{method_id}")
        decode, name, method = entry
        try:
            args, end = decode(payload, 4)
        except _DECODE_ERRORS as exc:
            return DecodedMethod(class_id, method_id, name, method, {}, f"truncated arguments ({_why(exc)})")
        if end == len(payload):
            return _new(DecodedMethod, (class_id, method_id, name, method, args, None))
        if end > len(payload):
            return DecodedMethod(class_id, method_id, name, method, args, "arguments run past the end of the frame")
        return DecodedMethod(class_id, method_id, name, method, args, f"{len(payload) - end} trailing bytes")

    def decode_header(self, payload: bytes) -> DecodedHeader:
        try:
            class_id, weight, body_size, word = _HEADER_UNPACK(payload, 0)
        except struct.error:
            return DecodedHeader(-1, 0, 0, {}, f"content header of {len(payload)} bytes is too short")
        if not word & 1:  # one flag word, the common case: a decoder compiled for exactly these flags
            decode = self._by_flags.get((class_id << 16) | word) or self._flag_decoder(class_id, word)
            if decode is not None:
                try:
                    props, end = decode(payload, 14)
                except _DECODE_ERRORS as exc:
                    return DecodedHeader(class_id, weight, body_size, {}, f"truncated properties ({_why(exc)})")
                if end == len(payload):
                    return _new(DecodedHeader, (class_id, weight, body_size, props, None))
        return self._decode_header_slow(payload, class_id, weight, body_size, word)

    def _flag_decoder(self, class_id: int, word: int) -> Any:
        """Compile (once) the decoder for one flag word; None when the slow path must judge it."""
        disallowed = self._disallowed.get(class_id)
        if disallowed is None or word & disallowed or len(self._by_flags) >= MAX_FLAG_DECODERS:
            return None
        decode = self._by_flags[(class_id << 16) | word] = flag_decoder(self._props_of[class_id], word)
        return decode

    def _decode_header_slow(self, payload: bytes, class_id: int, weight: int, body_size: int, word: int) -> DecodedHeader:
        words, off = [word], 14
        try:
            while words[-1] & 1:  # continuation bit: another flag word follows
                words.append(_U16.unpack_from(payload, off)[0])
                off += 2
        except struct.error:
            return DecodedHeader(class_id, weight, body_size, {}, "property flags run past the end")
        decode = self._pdec.get(class_id)
        if decode is None:
            problem = None if words == [0] else f"no content properties are defined for class {class_id}"
            return DecodedHeader(class_id, weight, body_size, {}, problem)
        problem = _unknown_flags(words, self._nprops[class_id])
        try:
            props, end = decode(payload, off, words)
        except _DECODE_ERRORS as exc:
            return DecodedHeader(class_id, weight, body_size, {}, f"truncated properties ({_why(exc)})")
        if problem is None and end != len(payload):
            problem = (
                "properties run past the end of the frame"
                if end > len(payload)
                else f"{len(payload) - end} trailing bytes after the properties"
            )
        return DecodedHeader(class_id, weight, body_size, props, problem)

    # --- encoding -------------------------------------------------------------------------------

    def _entry(self, name: str | tuple[int, int]) -> _Entry:
        entry = self._entries.get((name[0] << 16) | name[1]) if isinstance(name, tuple) else self._by_name.get(name)
        if entry is None:
            raise KeyError(f"no method {name!r} in spec {self.spec.version}")
        return entry

    def encode_method(self, name: str | tuple[int, int], args: dict[str, Any] | None = None) -> bytes:
        """The payload of a method frame: class id, method id and the packed arguments."""
        m = self._entry(name).method
        return _IDS.pack(m.class_index, m.index) + self._entry(name).encode(args or {})

    def encode_header(self, class_id: int, body_size: int, properties: dict[str, Any] | None = None) -> bytes:
        encode = self._penc.get(class_id)
        flags_and_props = encode(properties or {}) if encode else b"\x00\x00"
        return struct.pack(">HHQ", class_id, 0, body_size) + flags_and_props

    def method_frame(self, channel: int, name: str | tuple[int, int], **args: Any) -> bytes:
        return encode_frame(FRAME_METHOD, channel, self.encode_method(name, args))

    def content_frames(
        self, channel: int, body: bytes, properties: dict[str, Any] | None = None, class_id: int = 60,
        frame_max: int = 131072,
    ) -> bytes:  # fmt: skip
        """Header frame and body frames for one message, bodies split to fit ``frame_max``."""
        out = [encode_frame(FRAME_HEADER, channel, self.encode_header(class_id, len(body), properties))]
        chunk = max(1, frame_max - 8)
        out += [encode_frame(FRAME_BODY, channel, body[i : i + chunk]) for i in range(0, len(body), chunk)]
        return b"".join(out)


def _why(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _unknown_flags(words: list[int], known: int) -> str | None:
    for i, w in enumerate(words):
        usable = max(0, min(15, known - 15 * i))
        allowed = sum(1 << (15 - b) for b in range(usable)) | 1
        if w & ~allowed & 0xFFFF:
            return f"property flag word {i} sets bits 0x{w & ~allowed & 0xFFFF:04x} for properties the spec does not define"
    return None


@cache
def _codec_for_path(path: str) -> Codec:
    spec = load_spec(path)
    p = Path(path)
    if p.parent == bundled_spec_path().parent and p.name in SHIPPED:
        module = importlib.import_module(f"amqpscope.dissect.generated.{SHIPPED[p.name]}")
        if module.__dict__.get("SPEC_DIGEST", spec_digest(spec)) == spec_digest(spec):
            return Codec(spec, module)
    return Codec(spec, compile_module(spec, p.name))


def get_codec(spec_path: str | Path | None = None) -> Codec:
    """The codec for a spec file (default: the shipped 0-9-1 with RabbitMQ's extensions)."""
    return _codec_for_path(str(Path(spec_path) if spec_path else bundled_spec_path(DEFAULT_SPEC)))

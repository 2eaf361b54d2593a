"""One spec, ready for the native core and for the Python face.

``Codec`` holds the loaded spec model, the tables the core executes (compiled once per spec by
:mod:`amqpscope.dissect.tables`) and the encoders tests and synthetic captures write frames with.
Decoding happens in the core (``amqpscope._native``); ``decode_method``/``decode_header`` here hand
single payloads to it, for notebooks and tests.
"""

from __future__ import annotations

import struct
from functools import cache, cached_property
from pathlib import Path
from typing import Any, NamedTuple

from .. import _native
from .encode import encode_fields, encode_properties
from .spec import DEFAULT_SPEC, Method, Spec, bundled_spec_path, load_spec
from .tables import to_json
from .wire import FRAME_BODY, FRAME_HEADER, FRAME_METHOD, encode_frame

_IDS = struct.Struct(">HH")


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


class Codec:
    """The spec model, its core tables and encoders for every method and content class."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self._by_key = {m.key: m for m in spec.methods()}
        self._by_name = {m.full_name: m for m in self._by_key.values()}
        self._props = {c.index: c.properties for c in spec.classes}

    @cached_property
    def tables(self) -> str:
        """The spec as the JSON tables the native core executes."""
        return to_json(self.spec)

    @cached_property
    def validation(self) -> str:
        """The spec's grammars, asserts, rules and pairing as the JSON tables the core's
        validator executes."""
        from amqpscope.validate.tables import validation_tables  # only runs that validate need it

        return validation_tables(self.spec)

    @cached_property
    def _decoders(self) -> Any:
        return _native.Codec(self.tables)

    def method(self, class_id: int, method_id: int) -> Method | None:
        return self._by_key.get((class_id << 16) | method_id)

    # --- decoding single payloads (the core's decoders) -----------------------------------------

    def decode_method(self, payload: bytes) -> DecodedMethod:
        class_id, method_id, name, known, args, problem = self._decoders.decode_method(payload)
        return DecodedMethod(
            class_id, method_id, name, self.method(class_id, method_id) if known else None, args, problem
        )

    def decode_header(self, payload: bytes) -> DecodedHeader:
        return DecodedHeader(*self._decoders.decode_header(payload))

    def decode_table_body(self, body: bytes) -> dict[str, Any]:
        return self._decoders.decode_table_body(body)  # type: ignore[no-any-return]

    # --- encoding -------------------------------------------------------------------------------

    def _method(self, name: str | tuple[int, int]) -> Method:
        m = self._by_key.get((name[0] << 16) | name[1]) if isinstance(name, tuple) else self._by_name.get(name)
        if m is None:
            raise KeyError(f"no method {name!r} in spec {self.spec.version}")
        return m

    def encode_method(self, name: str | tuple[int, int], args: dict[str, Any] | None = None) -> bytes:
        """The payload of a method frame: class id, method id and the packed arguments."""
        m = self._method(name)
        return _IDS.pack(m.class_index, m.index) + encode_fields(m.fields, args or {})

    def encode_header(self, class_id: int, body_size: int, properties: dict[str, Any] | None = None) -> bytes:
        props = self._props.get(class_id)
        flags_and_props = encode_properties(props, properties or {}) if props else b"\x00\x00"
        return struct.pack(">HHQ", class_id, 0, body_size) + flags_and_props

    def method_frame(self, channel: int, name: str | tuple[int, int], **args: Any) -> bytes:
        return encode_frame(FRAME_METHOD, channel, self.encode_method(name, args))

    def content_frames(
        self,
        channel: int,
        body: bytes,
        properties: dict[str, Any] | None = None,
        class_id: int = 60,
        frame_max: int = 131072,
    ) -> bytes:
        """Header frame and body frames for one message, bodies split to fit ``frame_max``."""
        out = [encode_frame(FRAME_HEADER, channel, self.encode_header(class_id, len(body), properties))]
        chunk = max(1, frame_max - 8)
        out += [encode_frame(FRAME_BODY, channel, body[i : i + chunk]) for i in range(0, len(body), chunk)]
        return b"".join(out)


@cache
def _codec_for_path(path: str) -> Codec:
    return Codec(load_spec(path))


def get_codec(spec_path: str | Path | None = None) -> Codec:
    """The codec for a spec file (default: the shipped 0-9-1 with RabbitMQ's extensions)."""
    return _codec_for_path(str(Path(spec_path) if spec_path else bundled_spec_path(DEFAULT_SPEC)))

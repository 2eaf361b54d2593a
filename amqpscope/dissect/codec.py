"""One spec, ready for the native core and for the Python face.

``Codec`` holds the loaded spec model, the tables the core executes (compiled once per spec by
:mod:`amqpscope.dissect.tables`) and the spec's Scapy layers (:mod:`amqpscope.scapy`, built from the
same tables), which are the one encoder tests and synthetic captures write frames with.
Decoding happens in the core (``amqpscope._native``); ``decode_method``/``decode_header`` here hand
single payloads to it, for notebooks and tests.
"""

from __future__ import annotations

from functools import cache, cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import _native
from .cache import Compiled
from .cache import compiled as cached_tables
from .specfiles import DEFAULT_SPEC, bundled_spec_path

if TYPE_CHECKING:
    from amqpscope.scapy.layers import Layers

    from .spec import Method, Spec


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
    """The spec model, its core tables and its Scapy layers (the encoders)."""

    def __init__(self, spec: Spec | None = None, *, path: Path | None = None) -> None:
        """From a loaded spec model, or from a spec file (``path``): then the model is loaded only
        when something asks for it, and the core's tables come from the on-disk cache
        (:mod:`amqpscope.dissect.cache`) when it holds them for this file."""
        if spec is None and path is None:
            raise ValueError("Codec needs a spec or a spec file")
        if spec is not None:
            self.spec = spec
        self.path = path

    @cached_property
    def spec(self) -> Spec:
        from .spec import load_spec

        assert self.path is not None
        return load_spec(self.path)

    @cached_property
    def _by_key(self) -> dict[int, Method]:
        return {m.key: m for m in self.spec.methods()}

    @cached_property
    def _compiled(self) -> Compiled | None:
        """Both documents at once from the cache, for a codec made from a file."""
        if self.path is None:
            return None
        return cached_tables(self.path, lambda: Compiled(self._core_tables(), self._validation_tables()))

    def _core_tables(self) -> str:
        from .tables import to_json

        return to_json(self.spec)

    def _validation_tables(self) -> str:
        from amqpscope.validate.tables import validation_tables  # only runs that validate need it

        return validation_tables(self.spec)

    @cached_property
    def tables(self) -> str:
        """The spec as the JSON tables the native core executes."""
        return self._compiled.tables if self._compiled is not None else self._core_tables()

    @cached_property
    def validation(self) -> str:
        """The spec's grammars, asserts, rules and pairing as the JSON tables the core's
        validator executes."""
        return self._compiled.validation if self._compiled is not None else self._validation_tables()

    @cached_property
    def layers(self) -> Layers:
        """The spec's Scapy layers (imported on first use: decoding needs no Scapy)."""
        from amqpscope.scapy.layers import build_layers

        return build_layers(self.spec)

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

    # --- encoding (the Scapy layers) -------------------------------------------------------------

    def encode_method(self, name: str | tuple[int, int], args: dict[str, Any] | None = None) -> bytes:
        """The payload of a method frame: class id, method id and the packed arguments."""
        return bytes(self.layers.method(name)(**(args or {})))

    def encode_header(self, class_id: int, body_size: int, properties: dict[str, Any] | None = None) -> bytes:
        return bytes(self.layers.header(class_id)(class_id=class_id, body_size=body_size, **(properties or {})))

    def method_frame(self, channel: int, name: str | tuple[int, int], **args: Any) -> bytes:
        return bytes(self.layers.framed(self.layers.method(name)(**args), channel))

    def content_frames(
        self,
        channel: int,
        body: bytes,
        properties: dict[str, Any] | None = None,
        class_id: int = 60,
        frame_max: int = 131072,
    ) -> bytes:
        """Header frame and body frames for one message, bodies split to fit ``frame_max``."""
        layers = self.layers
        header = layers.header(class_id)(class_id=class_id, body_size=len(body), **(properties or {}))
        out = [bytes(layers.framed(header, channel))]
        chunk = max(1, frame_max - 8)
        out += [bytes(layers.framed(layers.body(load=body[i : i + chunk]), channel)) for i in range(0, len(body), chunk)]
        return b"".join(out)


@cache
def _codec_for_path(path: str) -> Codec:
    codec = Codec(path=Path(path))
    codec.tables  # noqa: B018 - a bad spec file fails here, before anything is written
    return codec


def get_codec(spec_path: str | Path | None = None) -> Codec:
    """The codec for a spec file (default: the shipped 0-9-1 with RabbitMQ's extensions)."""
    return _codec_for_path(str(Path(spec_path) if spec_path else bundled_spec_path(DEFAULT_SPEC)))

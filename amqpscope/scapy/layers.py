"""Scapy layers built from a spec's compiled tables: nothing generated, nothing ``exec``'d.

:func:`build_layers` turns one spec (the model and the tables ``dissect.tables`` compiles for the
core) into Packet classes made with ``type()``: a frame layer (type, channel, size, frame-end), a
protocol header, one layer per method with its arguments in wire order (bits packed as the tables
say), one content header layer per class with properties, the body and the heartbeat, and a raw
layer that holds what could not be dissected and why.

Crafted frames follow each other in one Scapy chain (``AMQP / BasicPublish / AMQP / BasicHeader /
AMQP / AMQPBody``): each frame layer writes its frame-end after the layer it carries, then the
frames after it, in a loop. Dissected, the frames of one segment are the list of an
``AMQPSegment``, each dissected alone: Scapy walks a chain recursively (dissection, ``show``,
``copy``, ``summary``), and pika puts hundreds of frames in one segment.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable
from typing import Any, ClassVar, NamedTuple

from scapy.base_classes import Gen
from scapy.fields import ByteEnumField, ConditionalField, Field, IntField, ShortField, StrField, StrFixedLenField
from scapy.layers.inet import TCP
from scapy.packet import (
    NoPayload,
    Packet,
    Padding,
    bind_bottom_up,
    bind_top_down,
    split_bottom_up,
    split_top_down,
)
from scapy.volatile import VolatileValue

from amqpscope.dissect.spec import Spec
from amqpscope.dissect.tables import compile_tables
from amqpscope.dissect.wire import (
    DEFAULT_MAX_FRAME,
    FRAME_BODY,
    FRAME_END,
    FRAME_HEADER,
    FRAME_HEARTBEAT,
    FRAME_METHOD,
    FRAME_TYPE_NAMES,
    HEADER_SIZE,
    PROTOCOL_VERSIONS,
    encode_protocol_header,
)

from .fields import (
    BitField,
    BitPropertyField,
    FieldError,
    FrameEndField,
    NoteField,
    NumberField,
    PropertyFlagsField,
    TableField,
    VersionField,
    field_for,
    property_condition,
    zero,
)
from .redact import SECRETS

_FRAME = struct.Struct(">BHI")
_SUMMARY_FIELDS = 4
_SUMMARY_TEXT = 40
_SUMMARY_FRAMES = 4


# --- how a stream of bytes splits into frames ---------------------------------------------------


def frame_problem(data: bytes) -> str | None:
    """Why ``data`` does not start with a whole, well-formed frame (or protocol header); None
    when it does."""
    n = len(data)
    if data[:4] == b"AMQP"[: min(n, 4)] and n < 8:
        return f"protocol header cut short: {n} of 8 bytes"
    if data.startswith(b"AMQP"):
        return None
    if n < HEADER_SIZE + 1:
        return f"frame cut short: {n} bytes, a frame has at least {HEADER_SIZE + 1}"
    ftype, _channel, size = _FRAME.unpack_from(data)
    kind = FRAME_TYPE_NAMES.get(ftype, f"type-{ftype}")
    if size > DEFAULT_MAX_FRAME:
        return f"{kind} frame declares {size} payload bytes, more than any peer allows"
    if HEADER_SIZE + size + 1 > n:
        return f"{kind} frame cut short: {n} of {HEADER_SIZE + size + 1} bytes"
    end = data[HEADER_SIZE + size]
    if end != FRAME_END:
        return f"frame-end is {end:#04x}, not {FRAME_END:#04x}"
    return None


def unit_length(data: bytes) -> int:
    """The length of the protocol header or frame ``data`` starts with (it must be whole)."""
    if data.startswith(b"AMQP"):
        return 8
    return HEADER_SIZE + _FRAME.unpack_from(data)[2] + 1


class Split(NamedTuple):
    """How much of a buffer is whole frames: ``done`` bytes are; ``need`` is the buffer length
    the next frame wants (None: nothing is pending); ``bad`` when what follows can never be one."""

    done: int
    need: int | None
    bad: bool


def split(data: bytes) -> Split:
    pos = 8 if data.startswith(b"AMQP") and len(data) >= 8 else 0
    n = len(data)
    if pos == 0 and data[:4] == b"AMQP"[: min(n, 4)] and n < 8:
        return Split(0, 8, False)
    while pos < n:
        if n - pos < HEADER_SIZE:
            return Split(pos, pos + HEADER_SIZE + 1, False)
        _type, _channel, size = _FRAME.unpack_from(data, pos)
        end = pos + HEADER_SIZE + size + 1
        if size > DEFAULT_MAX_FRAME:
            return Split(pos, None, True)
        if end > n:
            return Split(pos, end, False)
        if data[end - 1] != FRAME_END:
            return Split(pos, None, True)
        pos = end
    return Split(pos, None, False)


# --- the spec-independent behaviour of the layers ------------------------------------------------


class AMQPLayer(Packet):
    """What every AMQP layer shares: the layers of its spec, and a summary that lets every
    frame of a chain (and TCP) speak, not only the last one."""

    _layers: ClassVar[Layers]
    # pkt[RawLayer], haslayer(MethodLayer): the bases match the classes each spec builds
    match_subclass = True

    def _summary(self, text: str) -> tuple[str, list[type[Packet]]]:
        """``mysummary``'s answer: the text and the layers whose summaries are wanted too
        (Scapy's ``_do_summary`` reads the pair, its annotation says ``str``)."""
        return text, [TCP, *self._layers.classes]


def _settle(pkt: Packet) -> None:
    """Mark a crafted layer without sets or random values as explicit: Scapy would otherwise
    build it through ``next(iter(pkt))``, which clones it and every layer after it (slow, and
    as deep as the chain)."""
    if pkt.explicit:
        return
    for name, value in pkt.fields.items():
        if isinstance(value, (Gen, VolatileValue)) or (isinstance(value, list) and not pkt.get_field(name).islist):
            return
    if not any(isinstance(v, VolatileValue) for v in pkt.default_fields.values()):
        pkt.explicit = 1


class FrameBodyLayer(AMQPLayer):
    """What one frame carries (a method, a content header or body, a heartbeat, raw bytes)."""

    def extract_padding(self, s: bytes) -> tuple[bytes, bytes | None]:
        if s:
            raise FieldError(f"{len(s)} trailing bytes after the {self.name}")
        return b"", None

    def do_build(self) -> bytes:
        _settle(self)
        return super().do_build()

    def do_build_payload(self) -> bytes:
        # the frame writes its frame-end and then what follows it
        if isinstance(self.underlayer, FrameLayer):
            return b""
        return super().do_build_payload()


class FrameLayer(AMQPLayer):
    """A frame: type, channel, payload size, the payload (the next layer), frame-end."""

    name = "AMQP"
    fields_desc: ClassVar[list[Any]] = [
        ByteEnumField("type", FRAME_HEARTBEAT, FRAME_TYPE_NAMES),
        ShortField("channel", 0),
        IntField("size", None),
        FrameEndField("frame_end", FRAME_END, "size"),
    ]

    @classmethod
    def tcp_reassemble(cls, data: bytes, metadata: dict[str, Any], session: dict[str, Any]) -> Packet | None:
        """Scapy's ``TCPSession`` hook: the whole frames buffered so far (the rest waits as
        padding for the next segment), or None until one is whole. A stream that cannot be
        framed, or one that ends, is handed over as it is (a raw layer says why)."""
        if not data:
            return None
        # (no "tcp_min_len" hint: Scapy would not call back at the end of the stream either)
        done, _need, bad = split(data)
        if bad or metadata.get("tcp_end"):
            return cls(data)
        if done == 0:
            return None
        pkt = cls(data[:done])
        if done < len(data):
            pkt.add_payload(Padding(data[done:]))
        return pkt

    def do_dissect_payload(self, s: bytes) -> None:
        size = self.getfieldval("size")
        inner = self._layers.frame_body(self, s[:size])
        self.add_payload(inner)
        rest = s[size + 1 :]
        if rest:  # only when made by hand: dissection puts the frames of a segment in AMQPSegment
            inner.add_payload(self._layers.frame(rest, _internal=1, _underlayer=inner))

    def do_build(self) -> bytes:
        out = bytearray()
        _settle(self)
        # a layer with sets of values (Scapy's implicit packets) builds its first instance
        frame: Packet = self if self.explicit else next(iter(self))
        # frames after this one are built in the same loop, for the same reason as dissection
        while isinstance(frame, FrameLayer):
            inner = frame.payload
            if isinstance(inner, FrameBodyLayer):
                body, after = inner.do_build(), inner.payload
            else:
                body, after = (b"" if isinstance(inner, NoPayload) else inner.do_build()), NoPayload()
            size = frame.getfieldval("size")
            end = frame.getfieldval("frame_end")
            out += _FRAME.pack(
                frame.getfieldval("type"), frame.getfieldval("channel"), len(body) if size is None else size
            )
            out += body + bytes((FRAME_END if end is None else end,))
            frame = after
        return bytes(out) + (b"" if isinstance(frame, NoPayload) else frame.do_build())

    def build_padding(self) -> bytes:
        layer: Packet = self
        while not isinstance(layer.payload, NoPayload):
            layer = layer.payload
        return b"" if layer is self else layer.build_padding()

    def mysummary(self) -> Any:
        return self._summary(f"AMQP ch={self.getfieldval('channel')}")


class FramesField(Field[Any, Any]):
    """The frames of one segment, each dissected alone (a chain of hundreds of frames would go
    deeper than the recursion Scapy's own walks over layers can afford)."""

    islist = 1
    holds_packets = 1

    def __init__(self, name: str) -> None:
        super().__init__(name, [], "B")

    def i2len(self, pkt: Packet, x: Any) -> int:
        return sum(len(bytes(f)) for f in x or [])

    def addfield(self, pkt: Packet, s: bytes, val: Any) -> bytes:
        return s + b"".join(bytes(f) for f in val or [])

    def getfield(self, pkt: Packet, s: bytes) -> tuple[bytes, Any]:
        layers: Layers = pkt._layers
        frames: list[Packet] = []
        while s:
            problem = frame_problem(s)
            if problem is not None:
                frames.append(layers.raw(s, reason=problem, _internal=1, _parent=pkt))
                break
            n = unit_length(s)
            frames.append(layers.frame(s[:n], _internal=1, _parent=pkt))
            s = s[n:]
        return b"", frames

    def i2repr(self, pkt: Packet | None, x: Any) -> str:
        return f"{len(x or [])} frames"


class SegmentLayer(AMQPLayer):
    """Several frames (and a protocol header) that came in one segment, in ``frames``."""

    name = "AMQP frames"
    fields_desc: ClassVar[list[Any]] = [FramesField("frames")]

    def mysummary(self) -> Any:
        frames = self.getfieldval("frames") or []
        shown = [" / ".join(_chain_summaries(f)) for f in frames[:_SUMMARY_FRAMES]]
        more = f" (+{len(frames) - _SUMMARY_FRAMES} frames)" if len(frames) > _SUMMARY_FRAMES else ""
        return self._summary(" | ".join(shown) + more)


def _chain_summaries(pkt: Packet) -> list[str]:
    out = []
    layer: Packet = pkt
    while layer:
        text = layer.mysummary()
        out.append(text[0] if isinstance(text, tuple) else text or type(layer).__name__)
        layer = layer.payload
    return out


class ProtocolHeaderLayer(AMQPLayer):
    """``AMQP`` and four octets of version; the frames after it are its payload."""

    name = "AMQP protocol header"

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        return self._layers.frame

    def mysummary(self) -> Any:
        version = PROTOCOL_VERSIONS.get(b"AMQP" + bytes(self.getfieldval("version")), "unknown")
        return self._summary(f"AMQP protocol header {version}")


class RawLayer(FrameBodyLayer):
    """Bytes that could not be dissected, and why (``reason``)."""

    name = "AMQP raw"
    fields_desc: ClassVar[list[Any]] = [NoteField("reason", None), StrField("load", b"")]

    def do_dissect(self, s: bytes) -> bytes:
        self.fields["reason"] = frame_problem(s)
        self.fields["load"] = s
        self.raw_packet_cache = s
        self.explicit = 1
        return b""

    def mysummary(self) -> Any:
        return self._summary(f"raw {len(self.getfieldval('load') or b'')} bytes: {self.getfieldval('reason')}")


class BodyLayer(FrameBodyLayer):
    """A content body frame's payload."""

    name = "AMQP body"
    fields_desc: ClassVar[list[Any]] = [StrField("load", b"")]

    def mysummary(self) -> Any:
        return self._summary(f"body {len(self.getfieldval('load') or b'')} bytes")


class HeartbeatLayer(FrameBodyLayer):
    name = "AMQP heartbeat"
    fields_desc: ClassVar[list[Any]] = []

    def mysummary(self) -> Any:
        return self._summary("heartbeat")


class MethodLayer(FrameBodyLayer):
    """A method frame's payload: class and method ids, then the arguments in wire order."""

    method: ClassVar[str]
    reserved: ClassVar[frozenset[str]]

    def mysummary(self) -> Any:
        shown = []
        for f in self.fields_desc[2:]:
            if f.name in self.reserved or isinstance(f, TableField):
                continue
            text = f.i2repr(self, self.getfieldval(f.name))
            shown.append(f"{f.name}={text[:_SUMMARY_TEXT]}{'…' if len(text) > _SUMMARY_TEXT else ''}")
            if len(shown) == _SUMMARY_FIELDS:
                break
        return self._summary(" ".join([self.method, *shown]))


class ContentHeaderLayer(FrameBodyLayer):
    """A content header frame's payload: class, weight, body size, flags, the properties set."""

    def mysummary(self) -> Any:
        props = [f.name for f in self.fields_desc[4:] if self.getfieldval(f.name) is not None]
        text = f"{self.name} body_size={self.getfieldval('body_size')}"
        return self._summary(text + (f" {'+'.join(props)}" if props else ""))


class BodySizeField(NumberField):
    """``body_size``; ``None`` adds up the body frames that follow the header in the chain."""

    def __init__(self, name: str) -> None:
        super().__init__(name, None, "longlong")

    def i2m(self, pkt: Packet | None, x: Any) -> int:
        if x is not None or pkt is None:
            return int(x or 0)
        total, frame = 0, pkt.payload
        while isinstance(frame, FrameLayer) and isinstance(frame.payload, BodyLayer):
            total += len(frame.payload.getfieldval("load") or b"")
            frame = frame.payload.payload
        return total


def _read_names(reads: list[dict[str, Any]]) -> Iterable[str]:
    for read in reads:
        if "var" in read:
            yield read["name"]
        else:
            yield from (item[0] for item in read["items"])


def _frame_dispatch(cls: type[FrameLayer], _pkt: bytes | None = None, *args: Any, **kwargs: Any) -> type[Packet]:
    """The class ``cls(data)`` really makes: the protocol header, a frame, or raw bytes."""
    if not _pkt:
        return cls
    data = bytes(_pkt)
    if frame_problem(data) is not None:
        return cls._layers.raw
    if unit_length(data) < len(data):
        return cls._layers.segment
    return cls._layers.protocol_header if data.startswith(b"AMQP") else cls


# --- one spec's layers ---------------------------------------------------------------------------


# names a spec's field cannot take: Packet's own attributes would hide it, or the layer's framing fields
_TAKEN = frozenset(dir(Packet)) | frozenset(Packet.__slots__)
_METHOD_IDS = ("class_index", "method_index")
_HEADER_FIELDS = ("class_id", "weight", "body_size", "property_flags")


def _check_names(owner: str, names: Iterable[str], framing: tuple[str, ...]) -> None:
    for name in names:
        if name in _TAKEN or name in framing:
            raise ValueError(f"{owner}: a field named {name!r} would hide Scapy's or the layer's own {name!r}")


def camel(name: str) -> str:
    """``basic.publish`` → ``BasicPublish``, ``connection.start-ok`` → ``ConnectionStartOk``."""
    return "".join(p[:1].upper() + p[1:] for p in re.split(r"[^0-9A-Za-z]+", name) if p)


class Layers:
    """The Scapy layers of one spec; :func:`build_layers` makes them."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.tables = compile_tables(spec)
        self.version = str(self.tables["version"])
        self.classes: list[type[Packet]] = []
        self.frame = self._make("AMQP", FrameLayer, {"dispatch_hook": classmethod(_frame_dispatch)})
        self.raw = self._make("AMQPRaw", RawLayer, {})
        self.body = self._make("AMQPBody", BodyLayer, {})
        self.heartbeat = self._make("AMQPHeartbeat", HeartbeatLayer, {})
        self.segment = self._make("AMQPSegment", SegmentLayer, {})
        version = (
            encode_protocol_header(self.version)[4:] if self.version in PROTOCOL_VERSIONS.values() else b"\0\0\0\0"
        )
        self.protocol_header = self._make(
            "AMQPProtocolHeader",
            ProtocolHeaderLayer,
            {"fields_desc": [StrFixedLenField("magic", b"AMQP", 4), VersionField("version", version)]},
        )
        self.methods: dict[str, type[MethodLayer]] = {}
        self.by_ids: dict[tuple[int, int], type[MethodLayer]] = {}
        fields_of = {m.full_name: m.fields for m in spec.methods()}
        for m in self.tables["methods"]:
            reserved = frozenset(f.ident for f in fields_of[m["name"]] if f.reserved)
            cls = self._make(
                camel(m["name"]),
                MethodLayer,
                {
                    "name": m["name"],
                    "method": m["name"],
                    "reserved": reserved,
                    "fields_desc": self._method_fields(m),
                },
            )
            self.methods[m["name"]] = cls
            self.by_ids[(m["class"], m["method"])] = cls
            bind_top_down(self.frame, cls, type=FRAME_METHOD)
        class_names = {c.index: c.name for c in spec.classes}
        self.headers: dict[int, type[ContentHeaderLayer]] = {}
        for c in self.tables["classes"]:
            if c["properties"]:
                name = class_names[c["class"]]
                self.headers[c["class"]] = self._make(
                    camel(name) + "Header",
                    ContentHeaderLayer,
                    {"name": f"{name} header", "fields_desc": self._header_fields(c["class"], c["properties"])},
                )
        self.content_header = self._make(
            "AMQPContentHeader",
            ContentHeaderLayer,
            {"name": "content header", "fields_desc": self._header_fields(0, [])},
        )
        for header in [*self.headers.values(), self.content_header]:
            bind_top_down(self.frame, header, type=FRAME_HEADER)
        bind_top_down(self.frame, self.body, type=FRAME_BODY)
        bind_top_down(self.frame, self.heartbeat, type=FRAME_HEARTBEAT)

    def _make(self, name: str, base: type[AMQPLayer], namespace: dict[str, Any]) -> Any:
        cls = type(name, (base,), {"_layers": self, **namespace})
        self.classes.append(cls)
        return cls

    @staticmethod
    def _method_fields(m: dict[str, Any]) -> list[Field[Any, Any]]:
        _check_names(m["name"], _read_names(m["reads"]), _METHOD_IDS)
        out: list[Field[Any, Any]] = [
            NumberField("class_index", m["class"], "short"),
            NumberField("method_index", m["method"], "short"),
        ]
        for read in m["reads"]:
            if "var" in read:
                secret = m["name"] if SECRETS.get(m["name"]) == read["name"] else None
                out.append(field_for(read["name"], read["var"], zero(read["var"]), secret))
                continue
            items = read["items"]
            for i, (name, amqp_type, offset, bit) in enumerate(items):
                if amqp_type == "bit":
                    last = i + 1 == len(items) or items[i + 1][2] != offset
                    out.append(BitField(name, False, bit, last))
                else:
                    out.append(field_for(name, amqp_type, 0))
        return out

    @staticmethod
    def _header_fields(class_id: int, props: list[list[str]]) -> list[Any]:
        _check_names(f"class {class_id} properties", (name for name, _ in props), _HEADER_FIELDS)
        out: list[Any] = [
            NumberField("class_id", class_id, "short"),
            NumberField("weight", 0, "short"),
            BodySizeField("body_size"),
            PropertyFlagsField("property_flags", [name for name, _ in props]),
        ]
        for i, (name, amqp_type) in enumerate(props):
            fld = BitPropertyField(name, None) if amqp_type == "bit" else field_for(name, amqp_type, None)
            out.append(ConditionalField(fld, property_condition("property_flags", i, name)))
        return out

    # --- dissection ------------------------------------------------------------------------------

    def frame_body(self, frame: Packet, body: bytes) -> Packet:
        """The layer a frame's payload dissects to; raw bytes with the reason when it does not."""
        ftype = frame.getfieldval("type")
        cls: type[Packet] | None = None
        reason = None
        if ftype == FRAME_METHOD:
            if len(body) < 4:
                reason = f"method frame of {len(body)} bytes: no class and method ids"
            else:
                ids = (int.from_bytes(body[:2], "big"), int.from_bytes(body[2:4], "big"))
                cls = self.by_ids.get(ids)
                reason = None if cls else f"method {ids[0]}.{ids[1]} is not in spec {self.version}"
        elif ftype == FRAME_HEADER:
            if len(body) < 2:
                reason = f"content header of {len(body)} bytes: no class id"
            else:
                cls = self.headers.get(int.from_bytes(body[:2], "big"), self.content_header)
        elif ftype == FRAME_BODY:
            cls = self.body
        elif ftype == FRAME_HEARTBEAT:
            cls = self.heartbeat
            reason = f"heartbeat frame with {len(body)} payload bytes" if body else None
            cls = None if reason else cls
        else:
            reason = f"{FRAME_TYPE_NAMES.get(ftype, 'unknown')} frame (type {ftype}): not dissected"
        if cls is not None:
            try:
                return cls(body, _internal=1, _underlayer=frame)
            except Exception as exc:  # any failure of a dissector is a reason, never an exception
                what = getattr(cls, "_name", None) or cls.__name__
                reason = f"{what}: {exc}" if isinstance(exc, ValueError) else f"{what}: {exc!r}"
        return self.raw(body, reason=reason, _internal=1, _underlayer=frame)

    # --- lookups ---------------------------------------------------------------------------------

    def method(self, name: str | tuple[int, int]) -> type[MethodLayer]:
        cls = self.by_ids.get(name) if isinstance(name, tuple) else self.methods.get(name)
        if cls is None:
            raise KeyError(f"no method {name!r} in spec {self.version}")
        return cls

    def framed(self, inner: Packet, channel: int = 0, **fields: Any) -> Packet:
        """``frame(channel=…) / inner`` without the copies ``/`` makes (for encoders in loops)."""
        frame = self.frame(channel=channel, **fields)
        frame.add_payload(inner)
        return frame

    def header(self, class_id: int) -> type[ContentHeaderLayer]:
        return self.headers.get(class_id, self.content_header)

    def named(self) -> dict[str, type[Packet]]:
        """Every layer by its class name (``AMQP``, ``BasicPublish``, ``BasicHeader``, …)."""
        return {cls.__name__: cls for cls in self.classes}

    # --- binding ---------------------------------------------------------------------------------

    def bind(self, ports: Iterable[int] = (5672,)) -> None:
        """Dissect TCP traffic to or from these ports as AMQP (and build TCP/AMQP with them)."""
        for port in ports:
            bind_bottom_up(TCP, self.frame, dport=port)
            bind_bottom_up(TCP, self.frame, sport=port)
            # built as TCP()/AMQP(), a frame goes to the server (the last port bound)
            bind_top_down(TCP, self.frame, dport=port)

    def unbind(self, ports: Iterable[int] = (5672,)) -> None:
        for port in ports:
            split_bottom_up(TCP, self.frame, dport=port)
            split_bottom_up(TCP, self.frame, sport=port)
            split_top_down(TCP, self.frame, dport=port)


def frames(pkt: Packet) -> list[Packet]:
    """The AMQP units of a packet in stream order: each frame (a ``FrameLayer`` with what it
    carries as payload), protocol header, and stream-level ``RawLayer``, whether they came as a
    chain (crafted, or one per segment) or in an ``AMQPSegment``."""
    out: list[Packet] = []
    layer: Packet = pkt
    while layer:
        if isinstance(layer, SegmentLayer):
            for unit in layer.getfieldval("frames") or []:
                out += frames(unit)
        elif isinstance(layer, (FrameLayer, ProtocolHeaderLayer)) or (
            isinstance(layer, RawLayer) and not isinstance(layer.underlayer, FrameLayer)
        ):
            out.append(layer)
        layer = layer.payload
    return out


def build_layers(spec: Spec) -> Layers:
    """The Scapy layers of ``spec``: any 0-9/0-9-1 spec, a ``--spec`` file's included."""
    return Layers(spec)

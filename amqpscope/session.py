"""Connections: TCP flow events in, AMQP events out.

Per flow this decides whether it is AMQP (protocol header, a configured port, or frames confirmed
by the stream heuristic), which side is the client, and keeps what was negotiated (frame-max,
channel-max, heartbeat, properties, user, vhost). Per channel it assembles content (method, header,
body frames) into whole messages. Credentials are parsed here and redacted before any event leaves,
unless the caller asks to show them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from hashlib import sha256
from typing import Any

from .dissect.codec import Codec
from .dissect.stream import (
    FrameItem,
    FrameStream,
    GapItem,
    HeaderItem,
    MalformedItem,
    ResyncItem,
    StreamAccounting,
    StreamItem,
)
from .dissect.values import _table_body
from .dissect.wire import DEFAULT_MAX_FRAME, FRAME_BODY, FRAME_HEADER, FRAME_HEARTBEAT, FRAME_METHOD, FRAME_TYPE_NAMES
from .events import C2S, S2C, Connection, Event, Frame, Gap, Malformed, Message, ProtocolHeader, Resync
from .packets import Endpoint, TcpClose, TcpData, TcpEvent, TcpGap, TcpOpen

REDACTED = "[redacted]"
_ACCOUNTING_FIELDS = ("stream_bytes", "frame_bytes", "header_bytes", "gap_bytes", "skipped_bytes", "pending_bytes",
                      "frames")  # fmt: skip


def vars_of(acc: StreamAccounting) -> dict[str, int]:
    return {name: getattr(acc, name) for name in _ACCOUNTING_FIELDS}
DETECT_LIMIT = 256 * 1024  # bytes per direction the heuristic may look at before a flow is not AMQP
_SECRET_ARGS = {"connection.start-ok": "response", "connection.secure-ok": "response",
                "connection.update-secret": "new_secret"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Options:
    ports: frozenset[int] = frozenset({5672})
    show_credentials: bool = False
    keep_bodies: bool = True  # keep message bodies in memory for --body preview/full
    max_body_kept: int = 16 * 1024 * 1024


def _ep(e: Endpoint) -> str:
    return f"[{e[0]}]:{e[1]}" if ":" in e[0] else f"{e[0]}:{e[1]}"


class _Content:
    """A message being assembled on one channel (a plain slotted class: one is made per message)."""

    __slots__ = ("args", "body_size", "chunks", "first_packet", "frames", "method", "properties", "received", "sha")

    def __init__(self, method: str, args: dict[str, Any], first_packet: int) -> None:
        self.method = method
        self.args = args
        self.first_packet = first_packet
        self.properties: dict[str, Any] | None = None
        self.body_size = 0
        self.received = 0
        self.frames = 1
        self.chunks: list[bytes] = []
        self.sha: Any = None


class Conn:
    """One TCP flow carrying (or maybe carrying) AMQP."""

    def __init__(self, sess: Session, ev: TcpOpen) -> None:
        self.sess = sess
        self.id = ev.flow
        self.first_packet, self.first_ts = ev.packet, ev.ts_ns
        ports = sess.options.ports
        client, server = ev.client, ev.server
        if not ev.syn_seen and client[1] in ports and server[1] not in ports:
            client, server = server, client  # mid-stream: the well-known port is the server's
        self.client, self.server = client, server
        self.syn_seen = ev.syn_seen
        self.amqp: bool | None = True if (server[1] in ports or client[1] in ports) else None
        max_frame = DEFAULT_MAX_FRAME
        known = sess.codec.method
        self.streams = {
            client: FrameStream(lambda c, m: known(c, m) is not None, ev.syn_seen, max_frame),
            server: FrameStream(lambda c, m: known(c, m) is not None, ev.syn_seen, max_frame),
        }
        self.pending: list[Event] = []  # events held until the flow is known to be AMQP
        self.opened = False
        self.closed = False
        self.version: str | None = None
        self.info: dict[str, Any] = {}
        self.frames = {C2S: 0, S2C: 0}
        self.nbytes = {C2S: 0, S2C: 0}
        self.contents: dict[tuple[str, int], _Content] = {}
        self.close_seen = False
        self.last_packet, self.last_ts = ev.packet, ev.ts_ns
        self._decode_method = sess.codec.decode_method
        self._decode_header = sess.codec.decode_header
        self._keep_bodies = sess.options.keep_bodies
        self._max_kept = sess.options.max_body_kept

    # --- direction ------------------------------------------------------------------------------

    def dir_of(self, src: Endpoint) -> str:
        return C2S if src == self.client else S2C

    def _swap(self) -> None:
        self.client, self.server = self.server, self.client

    # --- input ----------------------------------------------------------------------------------

    def data(self, ev: TcpData) -> list[Event]:
        self.last_packet, self.last_ts = ev.packet, ev.ts_ns
        stream = self.streams.get(ev.src)
        if stream is None:
            return []
        if self.amqp is False:
            stream.accounting.stream_bytes += len(ev.data)
            stream.accounting.skipped_bytes += len(ev.data)
            return []
        items = stream.feed(ev.data, ev.packet, ev.ts_ns)
        self.nbytes[self.dir_of(ev.src)] += len(ev.data)
        if self.amqp is None:
            self._detect(ev.src, stream, items)
        return self._emit(ev.src, items)

    def gap(self, ev: TcpGap) -> list[Event]:
        stream = self.streams.get(ev.src)
        if stream is None or self.amqp is False:
            return []
        return self._emit(ev.src, stream.gap(ev.size, ev.packet, ev.ts_ns))

    def add_accounting(self, total: StreamAccounting) -> None:
        for stream in self.streams.values():
            for name in _ACCOUNTING_FIELDS:
                setattr(total, name, getattr(total, name) + getattr(stream.accounting, name))

    def close(self, how: str, packet: int, ts_ns: int) -> list[Event]:
        if self.closed:
            return []
        out: list[Event] = []
        for src, stream in self.streams.items():
            out += self._emit(src, stream.finish())
        if self.amqp is None:
            self.amqp = False  # never confirmed: not reported
        if self.amqp and not self.closed:
            if not self.opened:
                # a flow on an AMQP port that ended before any byte of AMQP (SYN then RST: a refused
                # connection): still a connection, and every close follows its open
                self.opened = True
                out = [self._open_event(), *self.pending, *out]
                self.pending = []
            for (d, ch), content in list(self.contents.items()):
                out.append(self._message(d, ch, content, packet, ts_ns, complete=False))
            self.contents.clear()
            out.append(self._close_event(how, packet, ts_ns))
            self.closed = True
        return out

    # --- detection ------------------------------------------------------------------------------

    def _detect(self, src: Endpoint, stream: FrameStream, items: list[StreamItem]) -> None:
        for item in items:
            if isinstance(item, HeaderItem):
                self.amqp = item.version != "" and True
                if src != self.client:
                    self._swap()  # the protocol header is the client's
                return
        if any(isinstance(i, FrameItem) for i in items) and stream.synced_once:
            self.amqp = True
            self._infer_direction(src, items)
            return
        if self.syn_seen and src == self.client and stream.accounting.stream_bytes >= 8:
            self.amqp = False  # a client whose stream starts with anything but "AMQP" is not AMQP
        elif stream.accounting.stream_bytes > DETECT_LIMIT:
            self.amqp = False

    def _infer_direction(self, src: Endpoint, items: list[StreamItem]) -> None:
        """Mid-stream without a known port: the chassis of the first methods tells who sent them."""
        for item in items:
            if isinstance(item, FrameItem) and item.type == FRAME_METHOD and len(item.payload) >= 4:
                p = item.payload
                m = self.sess.codec.method((p[0] << 8) | p[1], (p[2] << 8) | p[3])
                if m is None:
                    continue
                senders = m.sent_by()
                if len(senders) == 1:
                    if ("client" in senders) != (src == self.client):
                        self._swap()
                    return

    # --- events ---------------------------------------------------------------------------------

    def _emit(self, src: Endpoint, items: list[StreamItem]) -> list[Event]:
        if self.amqp is False or not items:
            return []
        d = self.dir_of(src)
        out: list[Event] = []
        if self.amqp and not self.opened:
            self.opened = True
            out.append(self._open_event())
            out += self.pending
            self.pending = []
        frame = self._frame
        cid, contents, new_frame = self.id, self.contents, _new_frame
        for item in items:
            t = type(item)
            if t is FrameItem:
                if item[0] != FRAME_BODY:
                    frame(d, item, out)  # type: ignore[arg-type]
                    continue
                # body frames, most frames of a busy capture, right here: one call less per frame
                _, channel, payload, packet, ts_ns, resync = item  # type: ignore[misc]
                out.append(new_frame(packet, ts_ns / 1e9, cid, d, channel, "body", len(payload), None, None, None, None,
                                     None, None, resync, None, payload))  # fmt: skip
                content = contents.get((d, channel))
                if content is None or content.properties is None:
                    continue
                content.frames += 1
                content.received += len(payload)
                content.sha.update(payload)
                if self._keep_bodies and content.received <= self._max_kept:
                    content.chunks.append(payload)
                if content.received >= content.body_size:
                    del contents[(d, channel)]
                    out.append(self._message(d, channel, content, packet, ts_ns, complete=True))
            elif t is HeaderItem:
                self.version = self.version or item.version  # type: ignore[union-attr]
                out.append(ProtocolHeader(packet=item.packet, ts=item.ts_ns / 1e9, conn=self.id, dir=d,
                                          version=item.version, raw=item.raw.hex()))  # type: ignore[union-attr]
            elif t is GapItem:
                out.append(Gap(packet=item.packet, ts=item.ts_ns / 1e9, conn=self.id, dir=d,
                               size=item.size, lost_frame=item.lost_frame))  # type: ignore[union-attr]
            elif t is ResyncItem:
                out.append(Resync(packet=item.packet, ts=item.ts_ns / 1e9, conn=self.id, dir=d,
                                  skipped=item.skipped, reason=item.reason))  # type: ignore[union-attr]
            elif t is MalformedItem:
                out.append(Malformed(packet=item.packet, ts=item.ts_ns / 1e9, conn=self.id, dir=d,
                                     reason=item.reason, offset=item.offset))  # type: ignore[union-attr]
        if self.amqp is None:
            self.pending += out
            return []
        return out

    def _frame(self, d: str, item: FrameItem, out: list[Event]) -> None:
        """Append the event of a frame other than a body (``_emit`` does those) and a message it
        completes to ``out``. The per-frame hot path: events are built with positional constructors,
        and method/header payloads seen before reuse their decode."""
        ftype, channel, payload, packet, ts_ns, resync = item
        ts = ts_ns / 1e9
        if ftype == FRAME_METHOD:
            cache = self.sess.method_cache
            hit = cache.get(payload) if len(payload) <= _CACHED_PAYLOAD else None
            if hit is None:
                hit = self._decode_method(payload)
                # connection.* arguments carry credentials and negotiation: never shared or cached
                if hit[3] is not None and hit[0] != 10 and len(payload) <= _CACHED_PAYLOAD:
                    if len(cache) >= _CACHE_ENTRIES:
                        cache.clear()
                    cache[payload] = hit
            class_id, method_id, name, method, args, problem = hit
            if method is not None and class_id == 10:
                args = self._negotiation(name, args, d)
            out.append(_new_frame(packet, ts, self.id, d, channel, "method", len(payload), class_id, method_id, name,
                                  args, None, None, resync, problem, None))  # fmt: skip
            if method is None or not method.content:
                return
            key = (d, channel)
            prev = self.contents.pop(key, None)
            if prev is not None:
                out.append(self._message(d, channel, prev, packet, ts_ns, complete=False))
            self.contents[key] = _Content(name, args, packet)
            return
        if ftype == FRAME_HEADER:
            cache = self.sess.header_cache
            small = len(payload) <= _CACHED_HEADER
            hit = cache.get(payload) if small else None
            if hit is None:
                hit = self._decode_header(payload)
                if small:
                    if len(cache) >= _CACHE_ENTRIES:
                        cache.clear()
                    cache[payload] = hit
            class_id, _weight, body_size, props, problem = hit
            out.append(_new_frame(packet, ts, self.id, d, channel, "header", len(payload), class_id, None, None, None,
                                  body_size, props, resync, problem, None))  # fmt: skip
            content = self.contents.get((d, channel))
            if content is None or content.properties is not None:
                return
            content.properties = props
            content.body_size = body_size
            content.frames += 1
            content.sha = sha256()
            if body_size == 0:
                del self.contents[(d, channel)]
                out.append(self._message(d, channel, content, packet, ts_ns, complete=True))
            return
        name = "heartbeat" if ftype == FRAME_HEARTBEAT else FRAME_TYPE_NAMES.get(ftype, f"unknown-{ftype}")
        out.append(_new_frame(packet, ts, self.id, d, channel, name, len(payload), None, None, None, None, None, None,
                              resync, None, None))  # fmt: skip

    def _message(self, d: str, channel: int, c: _Content, packet: int, ts_ns: int, complete: bool) -> Message:
        body = b"".join(c.chunks) if c.chunks else (b"" if c.properties is not None else None)
        return _new_message(packet, ts_ns / 1e9, self.id, d, channel, c.method, c.args, c.properties or {},
                            c.body_size, c.received, complete and c.received == c.body_size, c.first_packet,
                            c.frames, c.sha.hexdigest() if c.sha is not None else None, body)  # fmt: skip

    # --- connection-level state -----------------------------------------------------------------

    def _negotiation(self, name: str, args: dict[str, Any], d: str) -> dict[str, Any]:
        info = self.info
        if name == "connection.start":
            info["server_properties"] = args.get("server_properties")
            info["version"] = f"{args.get('version_major')}-{args.get('version_minor')}"
        elif name == "connection.start-ok":
            info["client_properties"] = args.get("client_properties")
            mech = args.get("mechanism")
            info["mechanism"] = mech if isinstance(mech, str) else None
            user, password = parse_credentials(info["mechanism"], args.get("response"))
            info["user"], info["password"] = user, password
            if not self.sess.options.show_credentials:
                args = dict(args, response=redact_response(info["mechanism"], user, args.get("response")))
        elif name in ("connection.secure-ok", "connection.update-secret"):
            if not self.sess.options.show_credentials:
                key = _SECRET_ARGS[name]
                args = dict(args, **{key: REDACTED})
        elif name == "connection.tune":
            info["server_tune"] = (args.get("channel_max"), args.get("frame_max"), args.get("heartbeat"))
        elif name == "connection.tune-ok":
            info["channel_max"] = args.get("channel_max")
            info["frame_max"] = args.get("frame_max")
            info["heartbeat"] = args.get("heartbeat")
        elif name == "connection.open":
            info["vhost"] = args.get("virtual_host")
        elif name == "connection.close":
            info.setdefault("close_code", args.get("reply_code"))
            info.setdefault("close_text", args.get("reply_text"))
            info.setdefault("close_by", "client" if d == C2S else "server")
            self.close_seen = True
        return args

    def _open_event(self) -> Connection:
        return Connection(packet=self.first_packet, ts=self.first_ts / 1e9, conn=self.id, state="open",
                          client=_ep(self.client), server=_ep(self.server), syn_seen=self.syn_seen)  # fmt: skip

    def _close_event(self, how: str, packet: int, ts_ns: int) -> Connection:
        info = self.info
        cp = info.get("client_properties") or {}
        sp = info.get("server_properties") or {}
        acc = {d: self.streams[ep].accounting for d, ep in ((C2S, self.client), (S2C, self.server))}
        return Connection(
            packet=packet, ts=ts_ns / 1e9, conn=self.id, state="close", client=_ep(self.client),
            server=_ep(self.server), syn_seen=self.syn_seen, version=self.version or info.get("version"),
            ended="connection.close" if self.close_seen and how in ("fin", "eof", "rst") else how,
            frame_max=info.get("frame_max"), channel_max=info.get("channel_max"), heartbeat=info.get("heartbeat"),
            mechanism=info.get("mechanism"), user=info.get("user"),
            password=info.get("password") if self.sess.options.show_credentials else None,
            vhost=info.get("vhost"), client_product=_s(cp.get("product")), client_version=_s(cp.get("version")),
            client_platform=_s(cp.get("platform")), server_product=_s(sp.get("product")),
            server_version=_s(sp.get("version")), close_code=info.get("close_code"),
            close_text=info.get("close_text"), close_by=info.get("close_by"),
            frames_c2s=acc[C2S].frames, frames_s2c=acc[S2C].frames,
            bytes_c2s=acc[C2S].stream_bytes, bytes_s2c=acc[S2C].stream_bytes,
            client_properties=cp or None, server_properties=sp or None,
        )  # fmt: skip


def _positional(cls: type, names: tuple[str, ...]) -> Callable[..., Any]:
    """A positional constructor for a frozen slotted event class: the fields ``names`` in that order,
    every other field its default. It skips ``type.__call__`` and keyword parsing, which cost more
    than setting the slots; the instances are ordinary (frozen) instances of ``cls``."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = set(names) - set(fields)
    if unknown:
        raise TypeError(f"{cls.__name__} has no fields {sorted(unknown)}")
    ns: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    lines = []
    for i, (name, f) in enumerate(fields.items()):
        owner = next(k for k in cls.__mro__ if name in k.__dict__)
        ns[f"s{i}"] = owner.__dict__[name].__set__
        if name in names:
            lines.append(f"    s{i}(o, {name})")
        elif f.default is not dataclasses.MISSING:
            ns[f"d{i}"] = f.default
            lines.append(f"    s{i}(o, d{i})")
        else:
            raise TypeError(f"{cls.__name__}.{name} has no default and is not set")
    exec(f"def make({', '.join(names)}):\n    o = _new(_cls)\n" + "\n".join(lines) + "\n    return o\n", ns)
    return ns["make"]  # type: ignore[no-any-return]


_new_frame = _positional(Frame, ("packet", "ts", "conn", "dir", "channel", "type", "size", "class_id", "method_id",
                                 "method", "args", "body_size", "properties", "resync", "problem", "payload"))  # fmt: skip
_new_message = _positional(Message, ("packet", "ts", "conn", "dir", "channel", "method", "args", "properties",
                                     "body_size", "body_received", "complete", "first_packet", "frames", "body_sha256",
                                     "body"))  # fmt: skip
_CACHED_PAYLOAD = 256  # method payloads up to this size are looked up before decoding
_CACHED_HEADER = 1024  # the same for content headers: the caches hold at most a few MiB
_CACHE_ENTRIES = 4096  # per cache; cleared when full (deliveries differ by tag and would only churn)


def _s(v: Any) -> str | None:
    if v is None:
        return None
    return v if isinstance(v, str) else str(v)


def parse_credentials(mechanism: str | None, response: Any) -> tuple[str | None, str | None]:
    """User and password from a start-ok response (PLAIN: authzid NUL user NUL password;
    AMQPLAIN: a field table without its length prefix holding LOGIN and PASSWORD)."""
    raw = response.encode() if isinstance(response, str) else response
    if not isinstance(raw, (bytes, bytearray)):
        return None, None
    if mechanism == "PLAIN":
        parts = bytes(raw).split(b"\x00")
        if len(parts) == 3:
            return parts[1].decode(errors="replace"), parts[2].decode(errors="replace")
        return None, None
    if mechanism == "AMQPLAIN":
        try:
            table = _table_body(bytes(raw), 0, len(raw), 0)
        except Exception:
            return None, None
        user, password = table.get("LOGIN"), table.get("PASSWORD")
        return (user if isinstance(user, str) else None), (password if isinstance(password, str) else None)
    return None, None


def redact_response(mechanism: str | None, user: str | None, response: Any) -> Any:
    if mechanism == "PLAIN" and user is not None:
        return f"\x00{user}\x00{REDACTED}"
    if mechanism == "EXTERNAL" or not response:
        return response
    return REDACTED


class Session:
    """All connections of one capture (or live interface)."""

    def __init__(self, codec: Codec, options: Options | None = None) -> None:
        self.codec = codec
        self.options = options or Options()
        self.conns: dict[int, Conn] = {}
        self._closed = StreamAccounting()
        # decoded method and header payloads by their bytes: a busy capture repeats the same publish
        # and the same properties thousands of times. The dicts in them are shared between events,
        # which is why event args and properties are read-only by contract.
        self.method_cache: dict[bytes, Any] = {}
        self.header_cache: dict[bytes, Any] = {}

    def accounting(self) -> StreamAccounting:
        """Byte accounting summed over every AMQP stream, closed or still open."""
        total = StreamAccounting(**vars_of(self._closed))
        for conn in self.conns.values():
            if conn.amqp:
                conn.add_accounting(total)
        return total

    def handle(self, ev: TcpEvent) -> list[Event]:
        t = type(ev)
        if t is TcpData:
            conn = self.conns.get(ev.flow)
            return conn.data(ev) if conn else []  # type: ignore[arg-type]
        if t is TcpOpen:
            self.conns[ev.flow] = Conn(self, ev)  # type: ignore[arg-type]
            return []
        if t is TcpGap:
            conn = self.conns.get(ev.flow)
            return conn.gap(ev) if conn else []  # type: ignore[arg-type]
        if t is TcpClose:
            conn = self.conns.pop(ev.flow, None)
            if conn is None:
                return []
            out = conn.close(ev.how, ev.packet, ev.ts_ns)  # type: ignore[union-attr]
            if conn.amqp:
                conn.add_accounting(self._closed)
            return out
        return []

    def handle_all(self, events: Iterable[TcpEvent]) -> list[Event]:
        out: list[Event] = []
        for ev in events:
            out += self.handle(ev)
        return out

"""What diagnoses are made from: per connection, the plain facts gathered from the event stream.

``Collector.feed`` keeps only what a cause needs (the client's identity, the handshake stage,
closes and the requests they answer, the client's pending synchronous requests, declarations,
returns, cancels, blocked periods, findings, ledger entries, the last frame each way, how TCP
ended); it does not track delivery tags or confirms: those come from the core's ledger events. The
family modules (``closes``, ``causality``, ``endings``, ``handshake``, ``flow``, ``network``,
``ledger``) turn a finished ``ConnFacts`` into diagnoses with pure functions.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from ..dissect.spec import default_spec
from ..events import C2S, S2C, Connection, Event, Finding, Frame, Ledger, Message, ProtocolHeader, Tls
from .model import Who

MAX_DELIVERIES = 100_000  # deliveries remembered per connection (the oldest forgotten first)
MAX_RELEASED = 100_000  # released message bodies remembered per capture

MAX_KEPT = 200  # packets, declarations and returns kept per connection (counts stay exact)
CLOSED = ("channel closed", "connection closed")  # ledger release outcomes of a close
MAX_LEDGER = 10_000  # ledger records kept per connection until it is diagnosed (those causes read)
REQUEUED = ("nack", "reject")  # settle outcomes that can requeue
MAX_SENT = 4096  # method frames remembered per connection by packet (what a finding's frame was)
MAX_RECENT = 64  # the client's last methods per connection (what an asynchronous close answers)
MAX_STEPS = 16  # the last handshake methods per connection (a looping secure exchange keeps only its end)
HANDSHAKE = frozenset({"connection.start", "connection.start-ok", "connection.secure", "connection.secure-ok",
                       "connection.tune", "connection.tune-ok", "connection.open"})  # fmt: skip
# the core's words for the sides of a TCP end, as directions: the side that sent the segment
_SIDE = {"client": C2S, "server": S2C}


@cache
def sync_replies() -> dict[str, frozenset[str]]:
    """Synchronous requests a client sends, with the replies that answer them (the spec's
    ``<response>``): a request stays pending on its channel until one of them comes."""
    out: dict[str, frozenset[str]] = {}
    for c in default_spec().classes:
        for m in c.methods:
            if m.synchronous and m.responses and "client" in m.sent_by():
                out[m.full_name] = frozenset(f"{c.name}.{r}" for r in m.responses)
    return out


@dataclass(frozen=True, slots=True)
class TcpEnd:
    """How TCP ended, from the core's close event: the first FIN and the first RST, each with the
    direction of the side that sent it (c2s: the client) and its packet."""

    fin_by: str | None = None
    fin_packet: int | None = None
    rst_by: str | None = None
    rst_packet: int | None = None

    @classmethod
    def of(cls, ev: Connection) -> TcpEnd:
        # the fields are the core's (fin_by/fin_packet/rst_by/rst_packet); older cores lack them
        fin, rst = getattr(ev, "fin_by", None), getattr(ev, "rst_by", None)
        return cls(_SIDE.get(fin) if fin else None, getattr(ev, "fin_packet", None),
                   _SIDE.get(rst) if rst else None, getattr(ev, "rst_packet", None))  # fmt: skip

    @property
    def known(self) -> bool:
        return self.fin_by is not None or self.rst_by is not None

    def first(self) -> tuple[str, str, int] | None:
        """(direction, "fin" | "rst", packet) of the segment that ended TCP first."""
        ends = [(p, how, d) for d, how, p in ((self.fin_by, "fin", self.fin_packet), (self.rst_by, "rst",
                self.rst_packet)) if d is not None and p is not None]  # fmt: skip
        if not ends:
            return None
        p, how, d = min(ends)
        return d, how, p

    def answer(self) -> tuple[str, str, int] | None:
        """The other side's FIN or RST after the first one (its reaction), when there is one."""
        first = self.first()
        if first is None:
            return None
        for d, how, p in ((self.rst_by, "rst", self.rst_packet), (self.fin_by, "fin", self.fin_packet)):
            if d is not None and p is not None and d != first[0] and p > first[2]:
                return d, how, p
        return None

    def record(self) -> dict[str, Any]:
        side = {C2S: "client", S2C: "broker"}
        return {"fin_by": side.get(self.fin_by or ""), "fin_packet": self.fin_packet,
                "rst_by": side.get(self.rst_by or ""), "rst_packet": self.rst_packet}  # fmt: skip


@dataclass(slots=True)
class Close:
    """A connection.close or channel.close and what followed it."""

    channel: int  # 0 for connection.close
    by: str  # c2s | s2c
    code: int
    text: str
    class_id: int
    method_id: int
    packet: int
    ts: float
    opened: bool  # the connection was open (open-ok seen) when it came
    # a server close: the client's request it answers (causality.request: the pending synchronous
    # request on that channel, or the frame of the method the close names); None when none fits
    request: Frame | None = None
    earlier: Declare | None = None  # when ``request`` redeclares an entity: its first declaration
    explained_by: list[Finding] = field(default_factory=list)  # violation findings it answers
    ok_packet: int | None = None  # the peer's close-ok


@dataclass(slots=True)
class Declare:
    conn: int
    channel: int
    method: str  # queue.declare | exchange.declare
    name: str
    args: dict[str, Any]
    packet: int
    ts: float


@dataclass(slots=True)
class Returned:
    channel: int
    exchange: str
    routing_key: str
    code: int
    text: str
    packets: list[int] = field(default_factory=list)
    count: int = 0
    confirms: bool = False  # the channel was in confirm mode when the broker returned them
    first: float = 0.0
    last: float = 0.0


@dataclass(slots=True)
class Blocked:
    reason: str | None
    packet: int
    ts: float
    end_packet: int | None = None
    end_ts: float | None = None
    publishes: int = 0
    publish_packets: list[int] = field(default_factory=list)


@dataclass(slots=True)
class Cancelled:
    channel: int
    consumer_tag: str
    queue: str | None
    packet: int
    ts: float
    deleted_by: Declare | None = None  # the queue.delete that removed the queue (method "queue.delete")


@dataclass(slots=True)
class Released:
    """Deliveries of one channel released by one close, and where they came back (the same queue
    and the same body, delivered again with redelivered=true)."""

    conn: int
    channel: int
    outcome: str
    close_packet: int
    packets: list[int] = field(default_factory=list)
    first: float = 0.0
    count: int = 0
    held_s: float = 0.0  # the longest a released delivery had been held unacked
    redelivered: list[tuple[int, int | None, int, float]] = field(default_factory=list)  # (conn, ch, packet, ts)
    queues: set[str] = field(default_factory=set)  # the queues the released deliveries came from


class Published:
    """Publish times to the default exchange by routing key (a queue name), bounded, for 'messages
    were waiting' evidence."""

    MAX_KEYS, MAX_TIMES = 10_000, 100_000

    def __init__(self) -> None:
        self.times: dict[str, list[float]] = {}

    def add(self, routing_key: str, ts: float) -> None:
        t = self.times.get(routing_key)
        if t is None:
            if len(self.times) >= self.MAX_KEYS:
                return
            t = self.times[routing_key] = []
        if len(t) < self.MAX_TIMES:
            if t and ts < t[-1]:
                bisect.insort(t, ts)
            else:
                t.append(ts)

    def between(self, routing_key: str, since: float, until: float) -> int:
        t = self.times.get(routing_key, [])
        return bisect.bisect_right(t, until) - bisect.bisect_left(t, since)


@dataclass(slots=True)
class Requeues:
    """One message's rejects/nacks with requeue on a connection (poison-message)."""

    channel: int
    routing_key: str
    first: Ledger
    last: Ledger
    count: int = 0
    outcomes: set[str] = field(default_factory=set)
    packets: list[int] = field(default_factory=list)


@dataclass(slots=True)
class ConnFacts:
    who: Who
    start_ts: float
    start_packet: int
    heartbeat: int = 0
    server: str | None = None  # the broker's product and version, for quirks of the broker
    opened: bool = False
    stage: str | None = None  # the last connection.* method of the handshake seen
    confirm_channels: set[int] = field(default_factory=set)
    open_channels: set[int] = field(default_factory=set)
    last_frame: dict[str, tuple[float, int]] = field(default_factory=dict)  # dir → (ts, packet)
    closes: list[Close] = field(default_factory=list)
    returns: dict[tuple[int, str, str, int], Returned] = field(default_factory=dict)
    blocked: list[Blocked] = field(default_factory=list)
    # publishes since the broker's last frame: RabbitMQ sends connection.blocked when a publish
    # arrives during an alarm, so the publishes just before it are the first ones it holds
    recent_publishes: list[int] = field(default_factory=list)
    cancels: list[Cancelled] = field(default_factory=list)
    violations: list[Finding] = field(default_factory=list)
    silences: list[Finding] = field(default_factory=list)  # heartbeat.silence findings
    ledger: list[Ledger] = field(default_factory=list)  # the core's ledger events of this connection
    requeues: dict[str, Requeues] = field(default_factory=dict)  # body sha256 → its requeueing settles
    # (channel, delivery tag) → (body sha256, routing key, exchange) of its deliveries (bounded):
    # how ledger entries, which name tags, are tied to a message across redeliveries
    # (queue or None, body sha256, routing key, exchange) by (channel, delivery tag)
    delivered: dict[tuple[int, int], tuple[str | None, str, str, str]] = field(default_factory=dict)
    # channel → the client's unanswered synchronous requests, oldest first (the broker answers in order)
    pending: dict[int, deque[Frame]] = field(default_factory=dict)
    recent: deque[Frame] = field(default_factory=lambda: deque(maxlen=MAX_RECENT))  # the client's last methods
    # (dir, channel, packet) → (class id, method id) of the methods in it: what a finding was about
    sent: OrderedDict[tuple[str, int, int], set[tuple[int, int]]] = field(default_factory=OrderedDict)
    consumers: dict[tuple[int, str], str] = field(default_factory=dict)  # (channel, tag) → queue
    pending_consume: dict[int, str] = field(default_factory=dict)  # channel → queue of a consume awaiting ok
    pending_get: dict[int, str] = field(default_factory=dict)  # channel → queue of a basic.get awaiting its answer
    header: str | None = None  # the client's protocol header version ("0-9-1", "1.0", …)
    header_packet: int | None = None
    server_header: str | None = None  # the broker's protocol header (its answer to an unsupported one)
    stage_packet: int | None = None  # the packet of ``stage``
    # (method, dir, packet) of the handshake methods: which of them a side had seen before it ended TCP
    steps: deque[tuple[str, str, int]] = field(default_factory=lambda: deque(maxlen=MAX_STEPS))
    stage_ts: float | None = None
    ended: str | None = None  # the Connection close event's "ended"
    end_ts: float | None = None
    end_packet: int | None = None
    tcp: TcpEnd = field(default_factory=TcpEnd)
    opening: str | None = None  # what a connection that never spoke AMQP 0-9-1 started with (the core's)
    syn_seen: bool = True  # the capture has the connection's start (else its first bytes are not known)
    # a TLS connection (the core's tls event): the version the server chose (None: no ServerHello)
    # and the bytes the server sent; a plain broker answers a ClientHello with its 8-byte AMQP header
    tls_version: str | None = None
    tls_bytes_s2c: int | None = None
    bytes_c2s: int = 0  # the client's stream bytes
    open_at_end: set[int] = field(default_factory=set)

    @property
    def was_open(self) -> bool:
        """connection.open-ok seen, or the capture started after the handshake (frames, none of it)."""
        return self.opened or (self.stage is None and self.header is None and bool(self.last_frame))


def _text(v: Any) -> str:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return v if isinstance(v, str) else ""


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


class Collector:
    """Facts of every connection of one capture (connection ids are the capture's own)."""

    def __init__(self, stall_s: float = 0.0) -> None:
        self.stall_s = stall_s  # shorter at-limit spells are not kept: no cause reads them
        self.conns: dict[int, ConnFacts] = {}
        # declarations by (vhost, method, name): the first declaration of an entity, and queue
        # deletes by (vhost, queue), across connections (a consumer is cancelled by another's delete)
        self.declared: dict[tuple[str, str, str], Declare] = {}
        self.deleted: dict[tuple[str, str], Declare] = {}
        self.vhost: dict[int, str] = {}
        self.published = Published()
        # released by a close, waiting to be seen redelivered (unacked-requeued): by (conn, channel,
        # the close's packet), and the same by (vhost, queue, body sha256) of each released delivery
        self.released: dict[tuple[int, int, int], Released] = {}
        self._released_bodies: dict[tuple[str, str, str], tuple[int, int, int]] = {}

    def facts(self, ev: Event) -> ConnFacts:
        f = self.conns.get(ev.conn)
        if f is None:
            f = self.conns[ev.conn] = ConnFacts(Who(conn=ev.conn), ev.ts, ev.packet)
        return f

    def feed(self, ev: Event) -> None:
        t = type(ev)
        if t is Frame:
            self._frame(ev)  # type: ignore[arg-type]
        elif t is Connection:
            self._connection(ev)  # type: ignore[arg-type]
        elif t is Finding:
            self._finding(ev)  # type: ignore[arg-type]
        elif t is Message:
            self._message(ev)  # type: ignore[arg-type]
        elif t is Ledger:
            self._ledger(ev)  # type: ignore[arg-type]
        elif t is ProtocolHeader:
            self._header(ev)  # type: ignore[arg-type]
        elif t is Tls:
            f = self.facts(ev)
            f.tls_version, f.tls_bytes_s2c = ev.version, ev.bytes_s2c  # type: ignore[attr-defined]

    def published_between(self, queue: str, since: float, until: float) -> int:
        return self.published.between(queue, since, until)

    def _header(self, ev: ProtocolHeader) -> None:
        f = self.facts(ev)
        if ev.dir == S2C:
            f.server_header = ev.version
        elif f.header is None:
            f.header, f.header_packet = ev.version, ev.packet

    def _message(self, ev: Message) -> None:
        args = ev.args
        if ev.method == "basic.publish":
            if not _text(args.get("exchange")):  # the default exchange routes by queue name
                self.published.add(_text(args.get("routing_key")), ev.ts)
            return
        if ev.method not in ("basic.deliver", "basic.get-ok") or ev.body_sha256 is None:
            return
        f = self.facts(ev)
        ch = ev.channel or 0
        if ev.method == "basic.deliver":
            queue = f.consumers.get((ch, _text(args.get("consumer_tag"))))
        else:
            queue = f.pending_get.pop(ch, None)
        if len(f.delivered) >= MAX_DELIVERIES:
            del f.delivered[next(iter(f.delivered))]
        f.delivered[(ch, _int(args.get("delivery_tag")))] = (
            queue, ev.body_sha256, _text(args.get("routing_key")), _text(args.get("exchange")))
        if args.get("redelivered") and queue is not None:
            # a redelivery follows its queue: the same body from another queue is another message
            where = self._released_bodies.pop((self.vhost.get(ev.conn, "/"), queue, ev.body_sha256), None)
            r = self.released.get(where) if where is not None else None
            if r is not None and len(r.redelivered) < MAX_KEPT:
                r.redelivered.append((ev.conn, ev.channel, ev.packet, ev.ts))

    def _ledger(self, ev: Ledger) -> None:
        """Keep the records causes read, aggregated where they can be many (settles)."""
        f = self.facts(ev)
        entry = ev.entry
        if entry == "settle":
            if ev.requeue and ev.outcome in REQUEUED:
                self._requeue(f, ev)
            return
        keep = entry == "heartbeat" or (entry == "at-limit" and (ev.duration or 0.0) >= self.stall_s) or (
            entry == "release" and ev.outcome in CLOSED)  # fmt: skip
        if keep and len(f.ledger) < MAX_LEDGER:
            f.ledger.append(ev)
        if entry != "release" or ev.outcome not in CLOSED:
            return
        ch = ev.channel or 0
        delivered = f.delivered.get((ch, ev.tag or 0))
        key = (ev.conn, ch, ev.packet)
        r = self.released.get(key)
        if r is None:
            r = self.released[key] = Released(ev.conn, ch, ev.outcome or "", ev.packet, first=ev.ts)
        r.count += 1
        r.held_s = max(r.held_s, ev.duration or 0.0)
        if len(r.packets) < MAX_KEPT:
            r.packets.append(ev.packet)
        if delivered is None or delivered[0] is None:
            return  # its delivery (or the queue it came from) was not seen
        r.queues.add(delivered[0])
        if len(self._released_bodies) < MAX_RELEASED:
            self._released_bodies[(self.vhost.get(ev.conn, "/"), delivered[0], delivered[1])] = key

    def _requeue(self, f: ConnFacts, ev: Ledger) -> None:
        ch = ev.channel or 0
        body = f.delivered.get((ch, ev.tag or 0))
        if body is None:
            return  # its delivery was not seen (before the capture, after a gap)
        r = f.requeues.get(body[1])
        if r is None:
            if len(f.requeues) >= MAX_DELIVERIES:
                return
            r = f.requeues[body[1]] = Requeues(ch, body[2], ev, ev)
        r.count += 1
        r.last = ev
        r.outcomes.add(ev.outcome or "")
        if len(r.packets) < 20:
            r.packets += [p for p in (ev.packet, ev.ref_packet) if p is not None]

    def _connection(self, ev: Connection) -> None:
        f = self.facts(ev)
        w = f.who
        name = (ev.client_properties or {}).get("connection_name") if ev.client_properties else None
        f.who = Who(conn=ev.conn, client=ev.client, product=ev.client_product or w.product,
                    version=ev.client_version or w.version, name=_text(name) or w.name, user=ev.user or w.user,
                    vhost=ev.vhost or w.vhost)  # fmt: skip
        if ev.heartbeat:
            f.heartbeat = ev.heartbeat
        if ev.server_product:
            f.server = f"{ev.server_product} {ev.server_version or ''}".strip()
        if ev.state == "close":
            f.ended, f.end_ts, f.end_packet = ev.ended, ev.ts, ev.packet
            f.tcp = TcpEnd.of(ev)
            f.opening = getattr(ev, "opening", None)
            f.syn_seen, f.bytes_c2s = ev.syn_seen, ev.bytes_c2s
            f.open_at_end = set(f.open_channels)
            vhost = self.vhost.get(ev.conn, "/")
            # its exclusive queues went with it: a later declaration of the name starts afresh
            for key in [k for k, d in self.declared.items() if d.conn == ev.conn and k[0] == vhost
                        and d.args.get("exclusive")]:  # fmt: skip
                del self.declared[key]

    def _finding(self, ev: Finding) -> None:
        f = self.facts(ev)
        if ev.severity == "violation":
            # which close answers it is judged from the frames when the connection is diagnosed
            # (causality.link), not from the finding's peer_reaction text
            f.violations.append(ev)
        elif ev.rule == "heartbeat.silence":
            f.silences.append(ev)

    def _frame(self, ev: Frame) -> None:
        f = self.facts(ev)
        d = ev.dir or C2S
        f.last_frame[d] = (ev.ts, ev.packet)
        method = ev.method
        if d == S2C and method != "connection.blocked":
            f.recent_publishes.clear()
        if method is None:
            return
        args = ev.args or {}
        ch = ev.channel or 0
        if ev.class_id is not None and ev.method_id is not None:
            at = (d, ch, ev.packet)
            ids = f.sent.get(at)
            if ids is None:
                if len(f.sent) >= MAX_SENT:
                    f.sent.popitem(last=False)
                ids = f.sent[at] = set()
            ids.add((ev.class_id, ev.method_id))
        if d == C2S:
            f.recent.append(ev)
            if method in sync_replies() and not args.get("nowait"):
                waiting = f.pending.get(ch)
                if waiting is None:
                    waiting = f.pending[ch] = deque(maxlen=MAX_RECENT)
                waiting.append(ev)
        else:
            waiting = f.pending.get(ch)
            if waiting and method in sync_replies().get(waiting[0].method or "", ()):
                waiting.popleft()
        if method in HANDSHAKE and not f.opened:
            f.stage, f.stage_packet, f.stage_ts = method, ev.packet, ev.ts
            f.steps.append((method, d, ev.packet))
        if method == "connection.start" and d == S2C:
            props = args.get("server_properties") or {}
            product = _text(props.get("product"))
            if product:
                f.server = f"{product} {_text(props.get('version'))}".strip()
        elif method == "connection.start-ok":
            props = args.get("client_properties") or {}
            w = f.who
            f.who = Who(conn=w.conn, client=w.client, product=_text(props.get("product")) or w.product,
                        version=_text(props.get("version")) or _text(props.get("product_version")) or w.version,
                        name=_text(props.get("connection_name")) or w.name, user=w.user, vhost=w.vhost)  # fmt: skip
        elif method == "connection.tune-ok":
            f.heartbeat = _int(args.get("heartbeat"))
        elif method == "connection.open":
            self.vhost[ev.conn] = _text(args.get("virtual_host")) or "/"
        elif method == "connection.open-ok":
            f.opened = True
        elif method == "channel.open-ok":
            f.open_channels.add(ch)
            f.confirm_channels.discard(ch)  # a reopened channel number starts without confirms
        elif method == "channel.close-ok":
            f.open_channels.discard(ch)
            f.pending.pop(ch, None)
            for c in reversed(f.closes):
                if c.channel == ch and c.by != d and c.ok_packet is None:
                    c.ok_packet = ev.packet
                    break
        elif method == "connection.close-ok":
            for c in reversed(f.closes):
                if c.channel == 0 and c.by != d and c.ok_packet is None:
                    c.ok_packet = ev.packet
                    break
        elif method == "confirm.select-ok":
            f.confirm_channels.add(ch)
        elif method in ("connection.close", "channel.close"):
            self._close(f, ev, method, d, ch, args)
        elif method in ("queue.declare", "exchange.declare") and d == C2S:
            name = _text(args.get("queue" if method == "queue.declare" else "exchange"))
            dec = Declare(ev.conn, ch, method, name, dict(args), ev.packet, ev.ts)
            if name and not args.get("passive"):
                self.declared.setdefault((self.vhost.get(ev.conn, "/"), method, name), dec)
        elif method == "queue.delete" and d == C2S:
            q = _text(args.get("queue"))
            self.deleted[(self.vhost.get(ev.conn, "/"), q)] = Declare(ev.conn, ch, method, q, dict(args),
                                                                      ev.packet, ev.ts)  # fmt: skip
            for key in [k for k in self.declared if k[0] == self.vhost.get(ev.conn, "/") and k[2] == q
                        and k[1] == "queue.declare"]:  # fmt: skip
                del self.declared[key]  # a later declaration starts afresh
        elif method == "basic.consume" and d == C2S:
            f.pending_consume[ch] = _text(args.get("queue"))
        elif method == "basic.get" and d == C2S:
            f.pending_get[ch] = _text(args.get("queue"))
        elif method == "basic.get-empty":
            f.pending_get.pop(ch, None)
        elif method == "basic.consume-ok":
            if ch in f.pending_consume:
                f.consumers[(ch, _text(args.get("consumer_tag")))] = f.pending_consume.pop(ch)
        elif method == "basic.cancel" and d == S2C:
            tag = _text(args.get("consumer_tag"))
            queue = f.consumers.get((ch, tag))
            deleted = self.deleted.get((self.vhost.get(ev.conn, "/"), queue)) if queue is not None else None
            f.cancels.append(Cancelled(ch, tag, queue, ev.packet, ev.ts, deleted))
        elif method == "basic.return":
            rkey = (ch, _text(args.get("exchange")), _text(args.get("routing_key")), _int(args.get("reply_code")))
            r = f.returns.get(rkey)
            if r is None:
                r = f.returns[rkey] = Returned(ch, rkey[1], rkey[2], rkey[3], _text(args.get("reply_text")),
                                               first=ev.ts)  # fmt: skip
            r.count += 1
            r.last = ev.ts
            r.confirms = r.confirms or ch in f.confirm_channels
            if len(r.packets) < MAX_KEPT:
                r.packets.append(ev.packet)
        elif method == "connection.blocked":
            if not f.blocked or f.blocked[-1].end_ts is not None:
                held = f.recent_publishes[:MAX_KEPT]
                f.blocked.append(Blocked(_text(args.get("reason")) or None, ev.packet, ev.ts, publishes=len(held),
                                         publish_packets=held))  # fmt: skip
        elif method == "connection.unblocked":
            if f.blocked and f.blocked[-1].end_ts is None:
                f.blocked[-1].end_ts, f.blocked[-1].end_packet = ev.ts, ev.packet
        elif method == "basic.publish" and not (f.blocked and f.blocked[-1].end_ts is None):
            if len(f.recent_publishes) < MAX_KEPT:
                f.recent_publishes.append(ev.packet)
        elif method == "basic.publish":
            b = f.blocked[-1]
            b.publishes += 1
            if len(b.publish_packets) < MAX_KEPT:
                b.publish_packets.append(ev.packet)

    def _close(self, f: ConnFacts, ev: Frame, method: str, d: str, ch: int, args: dict[str, Any]) -> None:
        c = Close(channel=ch if method == "channel.close" else 0, by=d, code=_int(args.get("reply_code")),
                  text=_text(args.get("reply_text")), class_id=_int(args.get("class_id")),
                  method_id=_int(args.get("method_id")), packet=ev.packet, ts=ev.ts, opened=f.opened)  # fmt: skip
        if d == S2C:
            c.request = request_of(f, c)
        req = c.request
        if req is not None and req.method in ("queue.declare", "exchange.declare"):
            # looked up now: the entity may be deleted and declared afresh before the connection ends
            ra = req.args or {}
            name = _text(ra.get("queue" if req.method == "queue.declare" else "exchange"))
            c.earlier = self.earlier_declaration(Declare(req.conn, req.channel or 0, req.method, name, dict(ra),
                                                         req.packet, req.ts))  # fmt: skip
        if len(f.closes) < MAX_KEPT:
            f.closes.append(c)

    def earlier_declaration(self, d: Declare) -> Declare | None:
        """The first declaration of the same entity in the same vhost, when it is another frame."""
        first = self.declared.get((self.vhost.get(d.conn, "/"), d.method, d.name))
        return first if first is not None and first.packet != d.packet else None


def request_of(f: ConnFacts, c: Close) -> Frame | None:
    """The client's request a server close answers, or None: never merely the last frame.

    A close that names a method (class and method id) answers the pending synchronous request of
    that method on its channel (any channel for connection.close: channel.open past channel_max),
    else the client's latest frame of that method there (an asynchronous one: basic.publish,
    basic.ack). A close naming no method answers the channel's pending request, if any (for the
    connection: none, but the channel.open a channel_max refusal names in its text)."""
    ids = (c.class_id, c.method_id)
    if c.class_id == 0 and c.channel == 0 and c.code == 530 and "channel_max" in c.text:
        # RabbitMQ 3.10 names no method when a channel.open reaches channel_max: the text does
        opens = [p for w in f.pending.values() for p in w if p.method == "channel.open"]
        return max(opens, key=lambda p: p.packet) if opens else None
    if c.class_id == 0:
        waiting = f.pending.get(c.channel) if c.channel else None
        return waiting[0] if waiting else None

    def fits(fr: Frame) -> bool:
        return (fr.class_id, fr.method_id) == ids and (c.channel == 0 or (fr.channel or 0) == c.channel)

    # the oldest unanswered request of that method: the broker answers a channel's requests in order
    pending = [next(p for p in w if fits(p)) for ch, w in f.pending.items()
               if (c.channel in (0, ch)) and any(fits(p) for p in w)]  # fmt: skip
    if pending:
        return min(pending, key=lambda p: p.packet)
    return next((fr for fr in reversed(f.recent) if fits(fr)), None)

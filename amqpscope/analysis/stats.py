"""One streaming pass over decoded events that feeds every analysis and builds the report.

``Analyzer.feed`` does O(1) work per event (plus the size of what a close or a multiple ack
settles); ``Analyzer.report()`` returns a JSON-ready dict. Several capture files can be fed in
turn: ``next_file()`` shifts connection ids so that connection 0 of the second file is not
mistaken for connection 0 of the first.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .. import _native
from ..diagnose import Diagnoser
from ..dissect.codec import get_codec
from ..dissect.spec import Spec
from ..dissect.tables import to_json
from ..events import C2S, Connection, Event, Finding, Frame, Ledger, Message
from .audit import SecurityAudit
from .channels import ChannelTable
from .common import MAX_LISTED, client_version
from .confirms import ENTRIES as CONFIRM_ENTRIES
from .confirms import ConfirmLedger
from .deliveries import ENTRIES as DELIVERY_ENTRIES
from .deliveries import DeliveryLedger
from .flowcontrol import METHODS as FLOW_METHODS
from .flowcontrol import FlowControl
from .heartbeats import HeartbeatAnalyzer
from .percentiles import TimeSeries
from .rpc import RpcPairing
from .tracing import Tracer

# Methods whose arguments name a queue, exchange or routing key worth counting.
QUEUE_METHODS = frozenset({"queue.declare", "queue.bind", "queue.unbind", "queue.purge", "queue.delete",
                           "basic.consume", "basic.get"})  # fmt: skip
SETTLE_METHODS = frozenset({"basic.ack", "basic.nack", "basic.reject"})
# frames counted as sent by the delivery and confirm analyses (the ledger counts what they settle)
COUNTED_FRAMES = frozenset({"basic.ack", "basic.nack", "basic.reject", "basic.cancel", "basic.publish"})
MAX_NAMES = 10_000  # distinct exchange/queue/routing-key names kept; the rest are counted as "(other)"


@dataclass(frozen=True, slots=True)
class ConnectionSummary:
    conn: int
    file: int
    client: str
    server: str
    client_product: str | None
    client_version: str | None
    user: str | None
    vhost: str | None
    mechanism: str | None
    frame_max: int | None
    channel_max: int | None
    heartbeat: int | None
    close_code: int | None
    close_text: str | None
    close_by: str | None
    ended: str | None
    start: float
    end: float
    frames_c2s: int
    frames_s2c: int
    bytes_c2s: int
    bytes_s2c: int
    channels_opened: int


class _Names:
    """Counts per name with a bounded number of names."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def add(self, name: str) -> None:
        if name in self.counts or len(self.counts) < MAX_NAMES:
            self.counts[name] = self.counts.get(name, 0) + 1
        else:
            self.counts["(other)"] = self.counts.get("(other)", 0) + 1

    def top(self, duration: float, n: int = 50) -> list[dict[str, Any]]:
        items = sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
        return [{"name": k, "count": v, "rate_per_s": round(v / duration, 3) if duration > 0 else None}
                for k, v in items]  # fmt: skip


class Analyzer:
    """``ledger_in_stream``: the events come from a decoder with the ledger on (``Options(ledger=
    True)``) and carry the core's ledger events; otherwise the Analyzer runs the core's ledger on
    them itself (``_native.Ledger``), and ledger events in them are ignored."""

    def __init__(self, spec: Spec | None = None, ledger_in_stream: bool = False) -> None:
        self.spec = spec or get_codec().spec
        self._own_ledger: Any = None
        if not ledger_in_stream:
            tables = get_codec().tables if spec is None else to_json(spec)
            self._own_ledger = _native.Ledger(tables)
        self._last_packet = 0
        self.rpc = RpcPairing()
        self.confirms = ConfirmLedger()
        self.deliveries = DeliveryLedger()
        self.heartbeats = HeartbeatAnalyzer()
        self.tracer = Tracer()
        self.audit = SecurityAudit()
        self.channels = ChannelTable()
        self.flow = FlowControl()
        self.diagnoser = Diagnoser()
        self.methods: dict[str, int] = {}
        self.frame_types: dict[str, int] = {}
        self.findings: dict[str, int] = {}
        self.findings_by_severity: dict[str, int] = {}
        self.exchanges = _Names()
        self.queues = _Names()
        self.routing_keys = _Names()
        self.reply_codes: dict[str, int] = {}
        self.events = 0
        self.gaps = 0
        self.malformed = 0
        self.resyncs = 0
        self.first_ts: float | None = None
        self.last_ts: float | None = None
        self.connections: list[ConnectionSummary] = []
        self.connections_total = 0
        self.channels_opened = 0
        self._open: dict[int, tuple[float, int]] = {}  # conn → (first ts, channels opened)
        self._file = 0
        self._offset = 0
        self._max_conn = -1
        self.series = {name: TimeSeries() for name in ("publish", "deliver", "ack")}
        self.body_bytes = 0
        self.messages = 0

    def next_file(self) -> None:
        """Start a new capture file: its connection ids follow on from this one's."""
        self._file += 1
        self._offset = self._max_conn + 1
        self.diagnoser.next_file(None, self._offset)

    def feed_all(self, events: Iterable[Event]) -> Analyzer:
        for ev in events:
            self.feed(ev)
        return self

    def feed(self, ev: Event) -> None:
        t = type(ev)
        own = self._own_ledger
        if t is Ledger:
            if own is None:
                self._ledger(ev, self._conn(ev.conn))  # type: ignore[arg-type]
            return
        if own is None:
            self._event(ev)
            return
        records = own.feed(ev)
        # what a connection close releases is the connection's ledger: read before the close
        closing = t is Connection and ev.state == "close"  # type: ignore[attr-defined]
        if not closing:
            self._event(ev)
        for rec in records:
            self._ledger(rec, self._conn(rec.conn))
        if closing:
            self._event(ev)

    def _conn(self, conn: int) -> int:
        return conn + self._offset if self._offset and conn >= 0 else conn

    def _ledger(self, ev: Ledger, conn: int) -> None:
        self.diagnoser.feed(ev)
        entry = ev.entry
        if entry in DELIVERY_ENTRIES:
            self.deliveries.feed(ev, conn)
        elif entry in CONFIRM_ENTRIES:
            self.confirms.feed(ev, conn)
        elif entry == "pair":
            self.rpc.feed(ev, conn)
        elif entry == "heartbeat":
            self.heartbeats.feed(ev, conn)

    def _event(self, ev: Event) -> None:
        self.events += 1
        self.diagnoser.feed(ev)
        if ev.packet > self._last_packet:
            self._last_packet = ev.packet
        conn = ev.conn
        if self._offset and conn >= 0:
            conn += self._offset
        if conn > self._max_conn:
            self._max_conn = conn
        ts = ev.ts
        if ts:
            if self.first_ts is None or ts < self.first_ts:
                self.first_ts = ts
            if self.last_ts is None or ts > self.last_ts:
                self.last_ts = ts
        t = type(ev)
        if t is Frame:
            self._frame(ev, conn)  # type: ignore[arg-type]
        elif t is Message:
            msg: Message = ev  # type: ignore[assignment]
            self.messages += 1
            self.body_bytes += msg.body_size
            self.tracer.feed(msg, conn)
            if msg.method == "basic.return":
                self.confirms.message(msg, conn)
                self._reply_code("basic.return", msg.args.get("reply_code"))
        elif t is Connection:
            self._connection(ev, conn)  # type: ignore[arg-type]
        elif t is Finding:
            f: Finding = ev  # type: ignore[assignment]
            self.findings[f.rule] = self.findings.get(f.rule, 0) + 1
            self.findings_by_severity[f.severity] = self.findings_by_severity.get(f.severity, 0) + 1
        elif ev.kind == "gap":
            self.gaps += 1
        elif ev.kind == "malformed":
            self.malformed += 1
        elif ev.kind == "resync":
            self.resyncs += 1

    def _frame(self, ev: Frame, conn: int) -> None:
        ftype = ev.type
        self.frame_types[ftype] = self.frame_types.get(ftype, 0) + 1
        if ftype == "body":
            return
        if ev.channel:
            self.channels.feed(ev, conn)
        method = ev.method
        if ftype != "method" or method is None:
            return
        self.methods[method] = self.methods.get(method, 0) + 1
        if method in COUNTED_FRAMES:
            self.deliveries.frame(ev, conn)
            self.confirms.frame(ev, conn)
        elif not ev.channel and method.startswith("connection."):
            self.heartbeats.frame(ev, conn)
        if method in FLOW_METHODS and (self.flow.open or method != "basic.publish"):
            self.flow.feed(ev, conn)
        args = ev.args or {}
        if method == "basic.publish":
            self.exchanges.add(str(args.get("exchange", "")) or "(default)")
            self.routing_keys.add(str(args.get("routing_key", "")))
            self.series["publish"].add(ev.ts)
        elif method == "basic.deliver" or method == "basic.get-ok":
            self.series["deliver"].add(ev.ts)
        elif method in SETTLE_METHODS:
            if ev.dir == C2S:
                self.series["ack"].add(ev.ts)
        elif method in QUEUE_METHODS:
            if args.get("queue"):
                self.queues.add(str(args["queue"]))
        elif method == "channel.open":
            self.channels_opened += 1
            first, n = self._open.get(conn, (ev.ts, 0))
            self._open[conn] = (first, n + 1)
        elif method == "connection.close" or method == "channel.close":
            self._reply_code(method, args.get("reply_code"))

    def _reply_code(self, method: str, code: Any) -> None:
        key = f"{method} {code}"
        self.reply_codes[key] = self.reply_codes.get(key, 0) + 1

    def _connection(self, ev: Connection, conn: int) -> None:
        if ev.state == "open":
            self._open.setdefault(conn, (ev.ts, 0))
            return
        first, channels = self._open.pop(conn, (ev.ts, 0))
        at_eof = ev.ended == "eof"
        self.deliveries.connection_ended(conn)
        self.channels.connection_ended(conn, ev.ts, at_eof)
        self.flow.connection_ended(conn, ev.ts)
        self.heartbeats.connection_ended(ev, conn)
        self.audit.connection_ended(ev, conn)
        self.connections_total += 1
        if len(self.connections) < MAX_LISTED:
            self.connections.append(ConnectionSummary(
                conn, self._file, ev.client, ev.server, ev.client_product,
                client_version(ev.client_version, ev.client_properties), ev.user, ev.vhost,
                ev.mechanism, ev.frame_max, ev.channel_max, ev.heartbeat, ev.close_code, ev.close_text, ev.close_by,
                ev.ended, first, ev.ts, ev.frames_c2s, ev.frames_s2c, ev.bytes_c2s, ev.bytes_s2c, channels))  # fmt: skip

    def finish(self) -> None:
        end = self.last_ts or 0.0
        if self._own_ledger is not None:
            # events without their connections' closes (hand-made ones): held as at a capture's end
            for rec in self._own_ledger.finish(self._last_packet, end):
                self._ledger(rec, self._conn(rec.conn))
        self.channels.finish(end)
        self.flow.finish(end)
        self.tracer.finish()
        self.diagnoser.finish()

    @property
    def duration(self) -> float:
        if self.first_ts is None or self.last_ts is None:
            return 0.0
        return self.last_ts - self.first_ts

    def report(self) -> dict[str, Any]:
        """The JSON report; call ``finish()`` first (``analyse`` does)."""
        from dataclasses import asdict

        d = self.duration
        rpc = self.rpc.result()
        causes = self.diagnoser.result()
        not_seen = self.diagnoser.blind.records()
        return {
            # before anything: what the capture does not show (gaps, undecrypted TLS, truncation)
            "not_seen": not_seen,
            # first: what went wrong, ranked by impact (docs/diagnose.md), then the quirks
            "diagnosis": {"nothing_wrong": not causes and not not_seen, "causes": [c.to_record() for c in causes],
                          "quirks": [q.to_record() for q in self.diagnoser.quirk_list()]},
            "capture": {
                "start": self.first_ts, "end": self.last_ts, "duration_s": round(d, 6), "events": self.events,
                "frames": sum(self.frame_types.values()), "frame_types": dict(sorted(self.frame_types.items())),
                "messages": self.messages, "body_bytes": self.body_bytes, "gaps": self.gaps,
                "malformed": self.malformed, "resyncs": self.resyncs,
            },
            "connections": [asdict(c) for c in sorted(self.connections, key=lambda c: c.conn)],
            "connections_total": self.connections_total,
            "channels_opened": self.channels_opened,
            "channels": self.channels.result(),
            "methods": dict(sorted(self.methods.items())),
            "reply_codes": dict(sorted(self.reply_codes.items())),
            "exchanges": self.exchanges.top(d),
            "queues": self.queues.top(d),
            "routing_keys": self.routing_keys.top(d),
            "rates_per_s": {k: (round(sum(b.count for b in s.buckets.values()) / d, 3) if d > 0 else None)
                            for k, s in self.series.items()},
            "confirms": self.confirms.result(),
            "deliveries": self.deliveries.result(),
            "rpc": rpc["methods"],
            "rpc_unanswered": rpc["unanswered"],
            "rpc_unanswered_total": rpc["unanswered_total"],
            "rpc_unexpected_replies": rpc["unexpected_replies"],
            "heartbeats": self.heartbeats.result(),
            "blocked": self.flow.result(),
            "tracing": self.tracer.result(),
            "security": self.audit.result(),
            "findings": dict(sorted(self.findings.items())),
            "findings_by_severity": dict(sorted(self.findings_by_severity.items())),
        }  # fmt: skip


def analyse(events: Iterable[Event], spec: Spec | None = None) -> Analyzer:
    """Run every analysis over ``events``: ``analyse(amqpscope.read(path)).report()``."""
    a = Analyzer(spec)
    a.feed_all(events)
    a.finish()
    return a

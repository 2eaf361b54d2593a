"""Request/response pairing of synchronous methods, per channel and direction, with latency.

The spec names each synchronous method's responses (``Method.responses``). A reply answers the
oldest pending request from the other peer on the same channel whose responses include it; AMQP
allows one outstanding synchronous request per channel, but pipelining clients (and no-wait
mix-ups) make a short queue the honest model. Requests with no-wait set expect nothing.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from ..dissect.spec import Spec
from ..events import Frame
from .common import MAX_LISTED, ConnKeyed, flag, other
from .percentiles import Reservoir

# basic.recover is synchronous in practice (RabbitMQ answers recover-ok) but the 0-9-1 XML gives
# it no <response> element, so the pair is added by hand.
EXTRA_RESPONSES: dict[str, tuple[str, ...]] = {"basic.recover": ("basic.recover-ok",)}


@dataclass(frozen=True, slots=True)
class Pending:
    method: str
    ts: float
    packet: int


@dataclass(frozen=True, slots=True)
class Unanswered:
    conn: int
    channel: int
    dir: str
    method: str
    packet: int
    ts: float
    outcome: str  # "no reply (capture ended|connection ended)" | "channel.close by peer" | "connection.close by peer"


@dataclass(slots=True)
class MethodStats:
    count: int = 0
    answered: int = 0
    unanswered: int = 0
    closed: int = 0  # answered by a channel/connection close instead of the reply (an error)
    no_wait: int = 0
    latency: Reservoir | None = None

    def reservoir(self) -> Reservoir:
        if self.latency is None:
            self.latency = Reservoir()
        return self.latency


class RpcPairing:
    def __init__(self, spec: Spec) -> None:
        self.responses: dict[str, tuple[str, ...]] = {}
        for m in spec.methods():
            if m.synchronous and m.responses:
                self.responses[m.full_name] = tuple(f"{m.class_name}.{r}" for r in m.responses)
        self.responses.update(EXTRA_RESPONSES)
        self.reply_names = {r for rs in self.responses.values() for r in rs}
        # every method feed reads: requests, replies and the closes that end waiting
        self.watched = frozenset({*self.responses, *self.reply_names, "channel.close", "connection.close"})
        # (conn, channel, dir of the request) → requests waiting for a reply
        self.pending: ConnKeyed[tuple[int, int, str], deque[Pending]] = ConnKeyed()
        self.stats: dict[str, MethodStats] = {}
        self.unanswered: list[Unanswered] = []
        self.unanswered_total = 0
        self.unexpected_replies: dict[str, int] = {}

    def _stat(self, method: str) -> MethodStats:
        st = self.stats.get(method)
        if st is None:
            st = self.stats[method] = MethodStats()
        return st

    def feed(self, ev: Frame, conn: int) -> None:
        method = ev.method
        if method is None or ev.dir is None:
            return
        channel = ev.channel or 0
        if method in self.reply_names and self._answer(ev, conn, channel, method):
            return
        if method in ("channel.close", "connection.close"):
            # the peer gave up on the channel/connection: whatever the other side still waits for
            # is answered by this close (an error), not left unanswered
            self._close_pending(conn, channel if method == "channel.close" else None, other(ev.dir), method)
        responses = self.responses.get(method)
        if responses is None:
            if method in self.reply_names:
                self.unexpected_replies[method] = self.unexpected_replies.get(method, 0) + 1
            return
        st = self._stat(method)
        st.count += 1
        if flag(ev.args, "no_wait", "nowait"):
            st.no_wait += 1
            return
        self.pending.setdefault((conn, channel, ev.dir), deque()).append(Pending(method, ev.ts, ev.packet))

    def _answer(self, ev: Frame, conn: int, channel: int, reply: str) -> bool:
        key = (conn, channel, other(ev.dir))
        queue = self.pending.get(key)
        if not queue:
            return False
        for i, req in enumerate(queue):
            if reply in self.responses[req.method]:
                del queue[i]
                if not queue:
                    del self.pending[key]
                st = self._stat(req.method)
                st.answered += 1
                st.reservoir().add(max(0.0, ev.ts - req.ts))
                return True
        return False

    def _close_pending(self, conn: int, channel: int | None, req_dir: str, why: str) -> None:
        for key in [
            k for k in self.pending.keys_of(conn) if k[2] == req_dir and (channel is None or k[1] == channel)
        ]:
            for req in self.pending.pop(key):
                # the close itself is pending from the other side and is not an error here
                st = self._stat(req.method)
                st.closed += 1
                self._list(conn, key[1], req_dir, req, f"{why} by peer")

    def connection_ended(self, conn: int, at_eof: bool = False) -> None:
        """The connection is gone (or the capture ended): requests still pending never got a reply."""
        outcome = "no reply (capture ended)" if at_eof else "no reply (connection ended)"
        for key in self.pending.keys_of(conn):
            for req in self.pending.pop(key):
                self._stat(req.method).unanswered += 1
                self._list(conn, key[1], key[2], req, outcome)

    def _list(self, conn: int, channel: int, direction: str, req: Pending, outcome: str) -> None:
        self.unanswered_total += 1
        if len(self.unanswered) < MAX_LISTED:
            self.unanswered.append(Unanswered(conn, channel, direction, req.method, req.packet, req.ts, outcome))

    def finish(self) -> None:
        for conn in self.pending.conns():
            self.connection_ended(conn, at_eof=True)

    def result(self) -> dict[str, object]:
        methods: dict[str, object] = {}
        for name in sorted(self.stats):
            st = self.stats[name]
            lat = st.latency.summary() if st.latency else Reservoir().summary()
            methods[name] = {
                "count": st.count, "answered": st.answered, "unanswered": st.unanswered,
                "closed_by_peer": st.closed, "no_wait": st.no_wait,
                "latency_ms": {k: lat[k] for k in ("p50", "p90", "p99", "max")},
            }  # fmt: skip
        return {
            "methods": methods,
            "unanswered": [
                {
                    "conn": u.conn,
                    "channel": u.channel,
                    "dir": u.dir,
                    "method": u.method,
                    "packet": u.packet,
                    "ts": u.ts,
                    "outcome": u.outcome,
                }
                for u in self.unanswered
            ],
            "unanswered_total": self.unanswered_total,
            "unexpected_replies": dict(sorted(self.unexpected_replies.items())),
        }

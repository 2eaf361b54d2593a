"""Request/response pairing of synchronous methods: the core ledger's ``pair`` records, aggregated.

Which method answers which comes from the spec tables (the errata in ``dissect/errata.py``, the
one list of them); the pairing itself (a reply answers the oldest waiting request it belongs to,
per connection, channel and direction; no-wait; closes from the peer; what the end leaves
unanswered) is the core's ledger (``crates/amqpscope-core/src/ledger/pairing.rs``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..events import Ledger
from .common import MAX_LISTED
from .percentiles import Reservoir

CLOSED = frozenset({"channel.close by peer", "connection.close by peer"})


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
    def __init__(self) -> None:
        self.stats: dict[str, MethodStats] = {}
        self.unanswered: list[Unanswered] = []
        self.unanswered_total = 0
        self.unexpected_replies: dict[str, int] = {}

    def _stat(self, method: str) -> MethodStats:
        st = self.stats.get(method)
        if st is None:
            st = self.stats[method] = MethodStats()
        return st

    def feed(self, ev: Ledger, conn: int) -> None:
        outcome = ev.outcome or ""
        if ev.request is None:  # a reply nobody waited for
            name = ev.method or ""
            self.unexpected_replies[name] = self.unexpected_replies.get(name, 0) + 1
            return
        st = self._stat(ev.request)
        st.count += 1
        if outcome == "answered":
            st.answered += 1
            st.reservoir().add(ev.latency or 0.0)
            return
        if outcome == "no-wait":
            st.no_wait += 1
            return
        if outcome in CLOSED:
            st.closed += 1
        else:
            st.unanswered += 1
        self.unanswered_total += 1
        if len(self.unanswered) < MAX_LISTED:
            asked = ev.ts - (ev.duration or 0.0)
            self.unanswered.append(Unanswered(conn, ev.channel or 0, ev.dir or "", ev.request, ev.ref_packet or 0,
                                              asked, outcome))  # fmt: skip

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

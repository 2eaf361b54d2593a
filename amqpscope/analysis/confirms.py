"""Publisher confirms: the core ledger's confirm records, aggregated.

Publish numbering from confirm.select, the server's basic.ack/basic.nack with ``multiple`` and
tag 0, returns matched to their publish and publishes dropped at a close are kept once, in the
core's ledger (``crates/amqpscope-core/src/ledger/confirms.rs``); this module counts its
``confirm``, ``unconfirmed``, ``bad-confirm`` and ``return`` records, and the frames themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..events import C2S, S2C, Frame, Ledger, Message
from .common import MAX_LISTED
from .percentiles import Reservoir, TimeSeries

ENTRIES = frozenset({"confirm", "unconfirmed", "bad-confirm", "return"})


@dataclass(frozen=True, slots=True)
class Unconfirmed:
    conn: int
    channel: int
    seq: int
    packet: int
    ts: float
    exchange: str
    routing_key: str
    returned: bool
    fate: str  # "open at end" | "channel closed" | "connection closed"


@dataclass(slots=True)
class ConfirmTotals:
    published: int = 0  # every basic.publish, confirm mode or not
    published_confirm: int = 0
    ack_frames: int = 0
    ack_multiple: int = 0
    nack_frames: int = 0
    nack_multiple: int = 0
    acked: int = 0  # publishes settled by acks
    nacked: int = 0
    returned: int = 0
    returned_then_acked: int = 0
    return_unmatched: int = 0  # a return in confirm mode matching no unconfirmed publish (ack came first?)
    unknown_tag: int = 0  # ack/nack naming nothing outstanding
    select_not_seen: int = 0  # ack/nack frames on a channel whose confirm.select is not in the capture
    not_judged: int = 0  # ack/nack after a gap, or of publishes beyond the core's limits
    lost_at_close: int = 0


class ConfirmLedger:
    def __init__(self) -> None:
        self.totals = ConfirmTotals()
        self.latency = Reservoir()
        self.latency_series = TimeSeries()
        self.per_channel: dict[tuple[int, int], dict[str, int]] = {}
        self.unconfirmed: list[Unconfirmed] = []
        self.unconfirmed_total = 0
        self.return_codes: dict[int, int] = {}

    def _count(self, conn: int, channel: int, what: str, n: int = 1) -> None:
        d = self.per_channel.setdefault((conn, channel), {})
        d[what] = d.get(what, 0) + n

    def frame(self, ev: Frame, conn: int) -> None:
        """Publishes and the server's ack/nack frames as sent."""
        method, t = ev.method, self.totals
        if method == "basic.publish" and ev.dir == C2S:
            t.published += 1
        elif method in ("basic.ack", "basic.nack") and ev.dir == S2C:
            multiple = bool((ev.args or {}).get("multiple"))
            if method == "basic.ack":
                t.ack_frames += 1
                t.ack_multiple += multiple
            else:
                t.nack_frames += 1
                t.nack_multiple += multiple
            self._count(conn, ev.channel or 0, "ack_frames" if method == "basic.ack" else "nack_frames")

    def message(self, ev: Message, conn: int) -> None:
        """basic.return: counted with its reply code (the ledger matches it to its publish)."""
        if ev.method != "basic.return":
            return
        self.totals.returned += 1
        code = int(ev.args.get("reply_code", 0) or 0)
        self.return_codes[code] = self.return_codes.get(code, 0) + 1
        self._count(conn, ev.channel or 0, "returned")

    def feed(self, ev: Ledger, conn: int) -> None:
        entry, channel, t = ev.entry, ev.channel or 0, self.totals
        if entry == "confirm":
            t.published_confirm += 1
            self._count(conn, channel, "published")
            lat = ev.latency or 0.0
            self.latency.add(lat)
            self.latency_series.add(ev.ts, lat)
            if ev.outcome == "ack":
                t.acked += 1
                t.returned_then_acked += ev.returned
                self._count(conn, channel, "acked")
            else:
                t.nacked += 1
                self._count(conn, channel, "nacked")
        elif entry == "unconfirmed":
            t.published_confirm += 1
            self._count(conn, channel, "published")
            self.unconfirmed_total += 1
            fate = ev.outcome or ""
            if fate != "open at end":
                t.lost_at_close += 1
            if len(self.unconfirmed) < MAX_LISTED:
                published = ev.ts - (ev.duration or 0.0)
                self.unconfirmed.append(Unconfirmed(conn, channel, ev.tag or 0, ev.ref_packet or 0, published,
                                                    ev.exchange or "", ev.routing_key or "", ev.returned,
                                                    fate))  # fmt: skip
        elif entry == "bad-confirm":
            if ev.outcome == "select not seen":
                # a capture that starts after confirm.select: the publish numbering is unknown
                t.select_not_seen += 1
            elif ev.outcome == "unknown tag":
                t.unknown_tag += 1
            else:
                t.not_judged += 1
        elif entry == "return" and ev.outcome == "unmatched":
            t.return_unmatched += 1

    def result(self) -> dict[str, Any]:
        t = self.totals
        return {
            "published": t.published,
            "published_in_confirm_mode": t.published_confirm,
            "acked": t.acked,
            "nacked": t.nacked,
            "returned": t.returned,
            "returned_then_acked": t.returned_then_acked,
            "return_unmatched": t.return_unmatched,
            "ack_frames": t.ack_frames,
            "ack_multiple": t.ack_multiple,
            "nack_frames": t.nack_frames,
            "nack_multiple": t.nack_multiple,
            "unknown_tag": t.unknown_tag,
            "select_not_seen": t.select_not_seen,
            "not_judged": t.not_judged,
            "outstanding": self.unconfirmed_total - t.lost_at_close,
            "lost_at_close": t.lost_at_close,
            "return_codes": {str(k): v for k, v in sorted(self.return_codes.items())},
            "latency_ms": self.latency.summary(),
            "per_channel": [{"conn": c, "channel": ch, **v} for (c, ch), v in sorted(self.per_channel.items())],
            "unconfirmed": [
                {
                    "conn": u.conn,
                    "channel": u.channel,
                    "seq": u.seq,
                    "packet": u.packet,
                    "ts": u.ts,
                    "exchange": u.exchange,
                    "routing_key": u.routing_key,
                    "returned": u.returned,
                    "fate": u.fate,
                }
                for u in self.unconfirmed
            ],
        }

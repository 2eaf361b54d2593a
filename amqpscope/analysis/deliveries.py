"""Consumer deliveries: the core ledger's delivery records, aggregated.

The settling rules (RabbitMQ's ``collect_acks``: ``multiple``, tag 0, recover, transactions,
releases at close, bad acks classified as unknown tag / already settled / wrong channel) are
applied once, in the core's ledger (``crates/amqpscope-core/src/ledger/deliveries.rs``); this
module counts its ``deliver``, ``settle``, ``bad-ack``, ``release``, ``rollback``, ``qos``,
``consumer`` and ``at-limit`` records, and the ack frames themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..events import C2S, S2C, Frame, Ledger
from .common import MAX_LISTED
from .percentiles import Reservoir, TimeSeries

ENTRIES = frozenset({"deliver", "settle", "bad-ack", "release", "rollback", "qos", "consumer", "at-limit"})
MAX_CHANNEL_SERIES = 32  # channels whose in-flight is kept over time (for plots): the busiest ones
# release outcomes as the report lists an unacked delivery's fate
FATES = {"channel closed": "released: channel closed", "connection closed": "released: connection closed",
         "open at end": "open at end"}  # fmt: skip
# bad acks the capture cannot judge (a gap, deliveries the core's limits did not keep)
NOT_JUDGED = frozenset({"after gap", "untracked"})


@dataclass(frozen=True, slots=True)
class Unacked:
    conn: int
    channel: int
    delivery_tag: int
    consumer_tag: str | None  # None: fetched with basic.get
    packet: int
    ts: float
    exchange: str
    routing_key: str
    redelivered: bool
    fate: str  # "open at end" | "released: channel closed" | "released: connection closed"


@dataclass(frozen=True, slots=True)
class BadAck:
    conn: int
    channel: int
    method: str
    delivery_tag: int
    multiple: bool
    packet: int
    problem: str  # "unknown tag" | "already settled" | "wrong channel (outstanding on channel N)"


@dataclass(slots=True)
class InFlightTrack:
    """One channel's unacked consumer deliveries over time, with the prefetch that applies."""

    series: TimeSeries
    limit: int = 0
    peak: int = 0


@dataclass(slots=True)
class DeliveryTotals:
    delivered: int = 0
    via_deliver: int = 0
    via_get: int = 0
    no_ack: int = 0
    redelivered: int = 0
    acked: int = 0
    nacked: int = 0
    rejected: int = 0
    requeued: int = 0
    ack_frames: int = 0
    ack_multiple: int = 0
    nack_frames: int = 0
    nack_multiple: int = 0
    reject_frames: int = 0
    unknown_tag: int = 0
    double_ack: int = 0
    wrong_channel: int = 0
    not_judged: int = 0  # acks after a gap, or of deliveries beyond the core's limits
    recovered: int = 0  # unacked deliveries voided (requeued) by basic.recover
    rolled_back: int = 0  # acks undone by tx.rollback
    before_capture: int = 0  # settles of deliveries made before a mid-channel capture started
    released_at_close: int = 0
    server_cancels: int = 0
    over_prefetch: int = 0


class DeliveryLedger:
    def __init__(self) -> None:
        self.totals = DeliveryTotals()
        self.latency = Reservoir()
        self.latency_series = TimeSeries()
        self.in_flight_series = TimeSeries()
        self.in_flight_total = 0
        self._levels: dict[tuple[int, int], int] = {}  # each channel's in-flight, as last reported
        self.channel_series: dict[tuple[int, int], InFlightTrack] = {}
        self._floor = 0  # no tracked channel peaked below this (peaks only grow, so it is a lower bound)
        self.unacked: list[Unacked] = []
        self.unacked_total = 0
        self.unacked_by_consumer: dict[str, int] = {}
        self.bad_acks: list[BadAck] = []
        self.per_channel: dict[tuple[int, int], dict[str, Any]] = {}
        self.consumers: dict[tuple[int, int, str], dict[str, Any]] = {}

    def _chan(self, conn: int, channel: int) -> dict[str, Any]:
        d = self.per_channel.get((conn, channel))
        if d is None:
            d = self.per_channel[(conn, channel)] = {"max_in_flight": 0, "time_at_prefetch_limit_s": 0.0}
        return d

    def _count(self, conn: int, channel: int, what: str, n: int = 1) -> None:
        d = self._chan(conn, channel)
        d[what] = d.get(what, 0) + n

    def frame(self, ev: Frame, conn: int) -> None:
        """Acknowledgement frames as sent (the ledger's records count the deliveries they settle)."""
        method, args = ev.method, ev.args or {}
        t = self.totals
        if ev.dir == C2S:
            multiple = bool(args.get("multiple"))
            if method == "basic.ack":
                t.ack_frames += 1
                t.ack_multiple += multiple
            elif method == "basic.nack":
                t.nack_frames += 1
                t.nack_multiple += multiple
            elif method == "basic.reject":
                t.reject_frames += 1
        elif ev.dir == S2C and method == "basic.cancel":
            t.server_cancels += 1
            self._count(conn, ev.channel or 0, "server_cancels")

    def feed(self, ev: Ledger, conn: int) -> None:
        entry, channel, t = ev.entry, ev.channel or 0, self.totals
        if entry == "deliver":
            t.delivered += 1
            t.redelivered += ev.redelivered
            self._count(conn, channel, "delivered")
            if ev.redelivered:
                self._count(conn, channel, "redelivered")
            if ev.method == "basic.get-ok":
                t.via_get += 1
            else:
                t.via_deliver += 1
            if ev.outcome == "no-ack":
                t.no_ack += 1
            elif ev.outcome == "over prefetch":
                t.over_prefetch += 1
                self._count(conn, channel, "over_prefetch")
            if ev.consumer_tag is not None and ev.outcome != "no-ack":
                self._level(conn, channel, ev)
        elif entry == "settle":
            lat = ev.latency or 0.0
            self.latency.add(lat)
            self.latency_series.add(ev.ts, lat)
            what = {"ack": "acked", "nack": "nacked", "reject": "rejected"}[ev.outcome or "ack"]
            setattr(t, what, getattr(t, what) + 1)
            if ev.requeue and ev.outcome != "ack":
                t.requeued += 1
            self._count(conn, channel, what)
            if ev.consumer_tag is not None:
                self._level(conn, channel, ev)
        elif entry == "bad-ack":
            self._bad(ev, conn, channel)
        elif entry == "release":
            self._release(ev, conn, channel)
        elif entry == "rollback":
            t.rolled_back += ev.count
            self._count(conn, channel, "rolled_back", ev.count)
        elif entry == "qos":
            d = self._chan(conn, channel)
            d.setdefault("prefetch", 0)
            d.setdefault("global_prefetch", 0)
            d["global_prefetch" if ev.outcome == "channel" else "prefetch"] = ev.limit or 0
        elif entry == "consumer":
            key = (conn, channel, ev.consumer_tag or "")
            if key in self.consumers or len(self.consumers) < MAX_LISTED:
                self.consumers[key] = {
                    "conn": conn, "channel": channel, "consumer_tag": ev.consumer_tag or "",
                    "no_ack": ev.outcome == "no-ack", "prefetch": ev.limit or 0, "delivered": ev.count,
                    "max_in_flight": ev.in_flight or 0,
                }  # fmt: skip
        elif entry == "at-limit":
            d = self._chan(conn, channel)
            d["time_at_prefetch_limit_s"] = round(d["time_at_prefetch_limit_s"] + (ev.duration or 0.0), 6)

    def _bad(self, ev: Ledger, conn: int, channel: int) -> None:
        t, why = self.totals, ev.outcome or ""
        if why == "before capture":
            # the channel was open before the capture: the tag was delivered before it too
            t.before_capture += 1
            self._count(conn, channel, "before_capture")
            return
        if why in NOT_JUDGED:
            t.not_judged += 1
            return
        if why == "wrong channel":
            t.wrong_channel += 1
            problem = f"wrong channel (outstanding on channel {ev.ref_channel})"
        elif why == "unknown tag":
            t.unknown_tag += 1
            problem = why
        else:
            t.double_ack += 1
            problem = why
        self._count(conn, channel, "bad_acks")
        if len(self.bad_acks) < MAX_LISTED:
            self.bad_acks.append(BadAck(conn, channel, ev.method or "", ev.tag or 0, ev.multiple, ev.packet, problem))

    def _release(self, ev: Ledger, conn: int, channel: int) -> None:
        if ev.consumer_tag is not None:
            self._level(conn, channel, ev)
        if ev.outcome == "recovered":
            self.totals.recovered += 1
            self._count(conn, channel, "recovered")
            return
        fate = FATES.get(ev.outcome or "", ev.outcome or "")
        if fate != "open at end":
            self.totals.released_at_close += 1
        else:
            who = f"{conn}/{channel}/{ev.consumer_tag if ev.consumer_tag is not None else '(get)'}"
            self.unacked_by_consumer[who] = self.unacked_by_consumer.get(who, 0) + 1
        self.unacked_total += 1
        if len(self.unacked) < MAX_LISTED:
            delivered = ev.ts - (ev.duration or 0.0)
            self.unacked.append(Unacked(conn, channel, ev.tag or 0, ev.consumer_tag, ev.ref_packet or 0, delivered,
                                        ev.exchange or "", ev.routing_key or "", ev.redelivered, fate))  # fmt: skip

    def _level(self, conn: int, channel: int, ev: Ledger) -> None:
        """A channel's unacked consumer deliveries as the ledger reports them, and their sum."""
        key, level = (conn, channel), ev.in_flight or 0
        self.in_flight_total += level - self._levels.get(key, 0)
        self._levels[key] = level
        self.in_flight_series.add(ev.ts, float(self.in_flight_total))
        d = self._chan(conn, channel)
        if level > d["max_in_flight"]:
            d["max_in_flight"] = level
        track = self.channel_series.get(key)
        if track is None and level > self._floor:
            track = self._track(key, level)
        if track is not None:
            track.series.add(ev.ts, float(level))
            if ev.entry == "deliver" and ev.limit is not None:
                track.limit = ev.limit
            if level > track.peak:
                track.peak = level

    def _track(self, key: tuple[int, int], level: int) -> InFlightTrack | None:
        """Start following a channel, in place of the least busy one when all places are taken."""
        tracks = self.channel_series
        if len(tracks) >= MAX_CHANNEL_SERIES:
            low = min(tracks, key=lambda k: tracks[k].peak)
            if tracks[low].peak >= level:
                self._floor = tracks[low].peak
                return None
            del tracks[low]
            self._floor = min((t.peak for t in tracks.values()), default=0)
        track = tracks[key] = InFlightTrack(TimeSeries())
        return track

    def connection_ended(self, conn: int) -> None:
        for key in [k for k in self._levels if k[0] == conn]:
            del self._levels[key]

    def result(self) -> dict[str, Any]:
        t = self.totals
        per_channel = [{"conn": c, "channel": ch, **v} for (c, ch), v in sorted(self.per_channel.items())]
        return {
            "delivered": t.delivered, "via_deliver": t.via_deliver, "via_get": t.via_get, "no_ack": t.no_ack,
            "acked": t.acked, "nacked": t.nacked, "rejected": t.rejected, "requeued": t.requeued,
            "redelivered": t.redelivered, "ack_frames": t.ack_frames, "ack_multiple": t.ack_multiple,
            "nack_frames": t.nack_frames, "nack_multiple": t.nack_multiple, "reject_frames": t.reject_frames,
            "unknown_tag": t.unknown_tag, "double_ack": t.double_ack, "wrong_channel": t.wrong_channel,
            "not_judged": t.not_judged,
            "recovered": t.recovered, "rolled_back": t.rolled_back, "before_capture": t.before_capture,
            "released_at_close": t.released_at_close,
            "server_cancels": t.server_cancels, "over_prefetch": t.over_prefetch,
            "outstanding": self.unacked_total - t.released_at_close,
            "unacked_by_consumer": dict(sorted(self.unacked_by_consumer.items())),
            "max_in_flight": max((v.get("max_in_flight", 0) for v in self.per_channel.values()), default=0),
            "latency_ms": self.latency.summary(),
            "per_channel": per_channel,
            "consumers": [self.consumers[k] for k in sorted(self.consumers)],
            "unacked": [
                {"conn": u.conn, "channel": u.channel, "delivery_tag": u.delivery_tag, "consumer_tag": u.consumer_tag,
                 "packet": u.packet, "ts": u.ts, "exchange": u.exchange, "routing_key": u.routing_key,
                 "redelivered": u.redelivered, "fate": u.fate}
                for u in self.unacked
            ],
            "bad_acks": [
                {"conn": b.conn, "channel": b.channel, "method": b.method, "delivery_tag": b.delivery_tag,
                 "multiple": b.multiple, "packet": b.packet, "problem": b.problem}
                for b in self.bad_acks
            ],
        }  # fmt: skip

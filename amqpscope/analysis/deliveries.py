"""Consumer delivery ledger: deliver/get-ok against ack/nack/reject, per channel.

Delivery tags are per channel and increase, so each channel keeps a dict of the unsettled
deliveries in tag order. The settling rules are RabbitMQ's (``rabbit_channel:collect_acks``):
``multiple`` with tag 0 settles everything outstanding (nothing outstanding is not an error);
any other tag must itself be outstanding, ``multiple`` then also settling every smaller tag.
A tag that is not outstanding is answered with 406 "unknown delivery tag"; it is classified as
an ack on the wrong channel (the tag is outstanding on another channel of the connection), a
double ack (the tag was delivered here before) or an unknown tag (never delivered here).

Inside a transaction (tx.select) an ack takes the deliveries off the channel at once, but they
stay in flight until tx.commit; tx.rollback puts them back, unacked, as RabbitMQ does.

In-flight counts consumer deliveries only (basic.get is not limited by prefetch). basic.qos is
applied with RabbitMQ's meaning: ``global_=0`` sets the limit of consumers started after it,
``global_=1`` a limit shared by the whole channel.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..events import C2S, S2C, Frame
from .common import MAX_LISTED, ConnKeyed
from .percentiles import Reservoir, TimeSeries

# the methods feed reads (the analyzer passes no others)
METHODS = frozenset({"basic.deliver", "basic.get-ok", "basic.consume-ok", "basic.get-empty", "basic.cancel",
                     "basic.recover-ok", "basic.ack", "basic.nack", "basic.reject", "basic.qos", "basic.consume",
                     "basic.get", "basic.recover-async", "tx.select", "tx.commit", "tx.rollback", "channel.close-ok",
                     "channel.open"})  # fmt: skip
MAX_CHANNEL_SERIES = 32  # channels whose in-flight is kept over time (for plots): the busiest ones


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
class _Delivery:
    ts: float
    packet: int
    consumer_tag: str | None
    exchange: str
    routing_key: str
    redelivered: bool


@dataclass(slots=True)
class InFlightTrack:
    """One channel's unacked consumer deliveries over time, with the prefetch that applies."""

    series: TimeSeries
    limit: int = 0
    peak: int = 0


@dataclass(slots=True)
class _Consumer:
    no_ack: bool
    prefetch: int  # this consumer's own limit (basic.qos global_=0 before it started); 0 = none
    in_flight: int = 0
    max_in_flight: int = 0
    delivered: int = 0


@dataclass(slots=True)
class _TxAck:
    kind: str  # ack | nack | reject
    requeue: bool
    ts: float
    items: list[tuple[int, _Delivery]]


@dataclass(slots=True)
class _Channel:
    outstanding: dict[int, _Delivery] = field(default_factory=dict)
    opened: bool = False  # channel.open is in the capture (else it started mid-channel)
    first_tag: int = 0  # the first delivery tag seen on the channel
    max_tag: int = 0
    in_flight: int = 0  # outstanding consumer deliveries (basic.get is not limited by prefetch)
    prefetch: int = 0  # global_=0: the limit given to consumers started from now on
    global_prefetch: int = 0  # global_=1: one limit for the channel
    max_in_flight: int = 0
    over_prefetch: int = 0  # deliveries beyond the applicable limit
    at_limit_since: float | None = None
    time_at_limit: float = 0.0
    consumers: dict[str, _Consumer] = field(default_factory=dict)
    pending_consume: deque[tuple[str, bool]] = field(default_factory=deque)
    pending_get_no_ack: deque[bool] = field(default_factory=deque)
    tx: bool = False
    tx_acks: list[_TxAck] = field(default_factory=list)


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
    recovered: int = 0  # unacked deliveries voided (requeued) by basic.recover
    rolled_back: int = 0  # acks undone by tx.rollback
    before_capture: int = 0  # settles of deliveries made before a mid-channel capture started
    released_at_close: int = 0
    server_cancels: int = 0
    over_prefetch: int = 0


class DeliveryLedger:
    def __init__(self) -> None:
        self.channels: ConnKeyed[tuple[int, int], _Channel] = ConnKeyed()
        self.totals = DeliveryTotals()
        self.latency = Reservoir()
        self.latency_series = TimeSeries()
        self.in_flight_series = TimeSeries()
        self.in_flight_total = 0
        self.channel_series: dict[tuple[int, int], InFlightTrack] = {}
        self._floor = 0  # no tracked channel peaked below this (peaks only grow, so it is a lower bound)
        self.unacked: list[Unacked] = []
        self.unacked_total = 0
        self.unacked_by_consumer: dict[str, int] = {}
        self.bad_acks: list[BadAck] = []
        self.per_channel: dict[tuple[int, int], dict[str, Any]] = {}
        self.consumers: dict[tuple[int, int, str], dict[str, Any]] = {}

    def _ch(self, conn: int, channel: int) -> _Channel:
        ch = self.channels.get((conn, channel))
        if ch is None:
            ch = self.channels[(conn, channel)] = _Channel()
        return ch

    def _count(self, conn: int, channel: int, what: str, n: int = 1) -> None:
        d = self.per_channel.setdefault((conn, channel), {})
        d[what] = d.get(what, 0) + n

    def feed(self, ev: Frame, conn: int) -> None:
        method, args, channel = ev.method, ev.args or {}, ev.channel or 0
        if method is None:
            return
        if ev.dir == S2C:
            if method in ("basic.deliver", "basic.get-ok"):
                self._deliver(ev, conn, channel, args, method == "basic.get-ok")
            elif method == "basic.consume-ok":
                ch = self._ch(conn, channel)
                tag, no_ack = ch.pending_consume.popleft() if ch.pending_consume else ("", False)
                self._consumer(ch, str(args.get("consumer_tag") or tag), no_ack)
            elif method == "basic.get-empty":
                ch = self._ch(conn, channel)
                if ch.pending_get_no_ack:
                    ch.pending_get_no_ack.popleft()
            elif method == "basic.cancel":
                self.totals.server_cancels += 1
                self._count(conn, channel, "server_cancels")
            elif method == "basic.recover-ok":
                self._release(conn, channel, None, ev.ts)
        elif ev.dir == C2S:
            if method in ("basic.ack", "basic.nack", "basic.reject"):
                self._settle(ev, conn, channel, method, args)
            elif method == "basic.qos":
                # prefetch_count 0 = unlimited; RabbitMQ gives a global_=0 limit to later consumers
                ch = self._ch(conn, channel)
                count = int(args.get("prefetch_count", 0) or 0)
                if args.get("global_") or args.get("global"):
                    ch.global_prefetch = count
                else:
                    ch.prefetch = count
                d = self.per_channel.setdefault((conn, channel), {})
                d["prefetch"] = ch.prefetch
                d["global_prefetch"] = ch.global_prefetch
                self._limit(ch, ev.ts)
            elif method == "basic.consume":
                tag, no_ack = str(args.get("consumer_tag") or ""), bool(args.get("no_ack"))
                ch = self._ch(conn, channel)
                if args.get("no_wait") and tag:
                    self._consumer(ch, tag, no_ack)
                else:
                    ch.pending_consume.append((tag, no_ack))
            elif method == "basic.get":
                self._ch(conn, channel).pending_get_no_ack.append(bool(args.get("no_ack")))
            elif method == "basic.recover-async":
                self._release(conn, channel, None, ev.ts)
            elif method == "tx.select":
                self._ch(conn, channel).tx = True
            elif method == "tx.commit":
                self._commit(conn, channel, ev.ts)
            elif method == "tx.rollback":
                self._rollback(conn, channel, ev.ts)
        if method in ("channel.close-ok", "channel.open"):
            self._release(conn, channel, "released: channel closed", ev.ts)
            self.channels.pop((conn, channel), None)
            if method == "channel.open":
                self._ch(conn, channel).opened = True

    @staticmethod
    def _consumer(ch: _Channel, tag: str, no_ack: bool) -> None:
        ch.consumers[tag] = _Consumer(no_ack, ch.prefetch)

    def _deliver(self, ev: Frame, conn: int, channel: int, args: dict[str, Any], via_get: bool) -> None:
        t = self.totals
        ch = self._ch(conn, channel)
        tag = int(args.get("delivery_tag", 0) or 0)
        redelivered = bool(args.get("redelivered"))
        t.delivered += 1
        t.redelivered += redelivered
        ch.max_tag = max(ch.max_tag, tag)
        if not ch.first_tag:
            ch.first_tag = tag
        self._count(conn, channel, "delivered")
        if redelivered:
            self._count(conn, channel, "redelivered")
        consumer: _Consumer | None = None
        tag_name: str | None = None
        if via_get:
            t.via_get += 1
            no_ack = ch.pending_get_no_ack.popleft() if ch.pending_get_no_ack else False
        else:
            t.via_deliver += 1
            tag_name = str(args.get("consumer_tag", ""))
            consumer = ch.consumers.get(tag_name)
            if consumer is None:  # consume-ok not seen (capture started later): assume manual acks
                consumer = ch.consumers[tag_name] = _Consumer(False, ch.prefetch)
            consumer.delivered += 1
            no_ack = consumer.no_ack
        if no_ack:
            t.no_ack += 1  # settled on delivery: nothing to acknowledge
            return
        ch.outstanding[tag] = _Delivery(ev.ts, ev.packet, tag_name, str(args.get("exchange", "")),
                                        str(args.get("routing_key", "")), redelivered)  # fmt: skip
        if consumer is None:
            return
        over = (consumer.prefetch and consumer.in_flight >= consumer.prefetch) or (
            ch.global_prefetch and ch.in_flight >= ch.global_prefetch
        )
        if over:
            ch.over_prefetch += 1
            t.over_prefetch += 1
        consumer.in_flight += 1
        consumer.max_in_flight = max(consumer.max_in_flight, consumer.in_flight)
        ch.in_flight += 1
        ch.max_in_flight = max(ch.max_in_flight, ch.in_flight)
        self._in_flight(conn, channel, ch, +1, ev.ts)

    def _in_flight(self, conn: int, channel: int, ch: _Channel, delta: int, ts: float) -> None:
        self.in_flight_total += delta
        self.in_flight_series.add(ts, float(self.in_flight_total))
        key = (conn, channel)
        track = self.channel_series.get(key)
        if track is None and ch.in_flight > self._floor:
            track = self._track(key, ch.in_flight)
        if track is not None:
            track.series.add(ts, float(ch.in_flight))
            track.limit = ch.global_prefetch or max((c.prefetch for c in ch.consumers.values()), default=0)
            if ch.in_flight > track.peak:
                track.peak = ch.in_flight
        self._limit(ch, ts)

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

    @staticmethod
    def _at_limit(ch: _Channel) -> bool:
        if ch.global_prefetch and ch.in_flight >= ch.global_prefetch:
            return True
        return any(c.prefetch and c.in_flight >= c.prefetch for c in ch.consumers.values())

    def _limit(self, ch: _Channel, ts: float) -> None:
        """Accumulate the time a channel spends with a prefetch exhausted (the broker stops sending)."""
        at_limit = self._at_limit(ch)
        if at_limit and ch.at_limit_since is None:
            ch.at_limit_since = ts
        elif not at_limit and ch.at_limit_since is not None:
            ch.time_at_limit += ts - ch.at_limit_since
            ch.at_limit_since = None

    def _settle(self, ev: Frame, conn: int, channel: int, method: str, args: dict[str, Any]) -> None:
        t = self.totals
        tag = int(args.get("delivery_tag", 0) or 0)
        multiple = bool(args.get("multiple")) and method != "basic.reject"
        requeue = bool(args.get("requeue"))
        kind = method.split(".")[1]
        if kind == "ack":
            t.ack_frames += 1
            t.ack_multiple += multiple
        elif kind == "nack":
            t.nack_frames += 1
            t.nack_multiple += multiple
        else:
            t.reject_frames += 1
        ch = self._ch(conn, channel)
        if multiple and tag == 0:
            settled = list(ch.outstanding)  # "everything so far"; nothing outstanding is fine
        elif tag not in ch.outstanding:
            self._bad(ev, conn, channel, ch, method, tag, multiple)
            return
        elif multiple:
            settled = []
            for dtag in ch.outstanding:
                if dtag > tag:
                    break
                settled.append(dtag)
        else:
            settled = [tag]
        items = [(dtag, ch.outstanding.pop(dtag)) for dtag in settled]
        if ch.tx:
            ch.tx_acks.append(_TxAck(kind, requeue, ev.ts, items))  # takes effect at tx.commit
            return
        self._apply(conn, channel, ch, kind, requeue, ev.ts, items)

    def _apply(self, conn: int, channel: int, ch: _Channel, kind: str, requeue: bool, ts: float,
               items: list[tuple[int, _Delivery]]) -> None:  # fmt: skip
        t = self.totals
        for _dtag, d in items:
            lat = max(0.0, ts - d.ts)
            self.latency.add(lat)
            self.latency_series.add(ts, lat)
            if d.consumer_tag is not None:
                c = ch.consumers.get(d.consumer_tag)
                if c is not None and c.in_flight:
                    c.in_flight -= 1
                ch.in_flight -= 1
                self._in_flight(conn, channel, ch, -1, ts)
        n = len(items)
        if kind == "ack":
            t.acked += n
        elif kind == "nack":
            t.nacked += n
        else:
            t.rejected += n
        if requeue and kind != "ack":
            t.requeued += n
        if n:
            self._count(conn, channel, {"ack": "acked", "nack": "nacked", "reject": "rejected"}[kind], n)
        self._limit(ch, ts)

    def _commit(self, conn: int, channel: int, ts: float) -> None:
        ch = self.channels.get((conn, channel))
        if ch is None:
            return
        for a in ch.tx_acks:
            self._apply(conn, channel, ch, a.kind, a.requeue, a.ts, a.items)
        ch.tx_acks.clear()

    def _rollback(self, conn: int, channel: int, ts: float) -> None:
        ch = self.channels.get((conn, channel))
        if ch is None or not ch.tx_acks:
            return
        back = [item for a in ch.tx_acks for item in a.items]
        self.totals.rolled_back += len(back)
        self._count(conn, channel, "rolled_back", len(back))
        ch.tx_acks.clear()
        merged = dict(sorted([*ch.outstanding.items(), *back]))  # tags stay in order
        ch.outstanding = merged

    def _bad(self, ev: Frame, conn: int, channel: int, ch: _Channel, method: str, tag: int, multiple: bool) -> None:
        t = self.totals
        if not ch.opened and tag and (not ch.first_tag or tag < ch.first_tag):
            # the channel was open before the capture: the tag was delivered before it too
            t.before_capture += 1
            self._count(conn, channel, "before_capture")
            return
        elsewhere = None
        if tag:
            elsewhere = next((c for (_, c) in self.channels.keys_of(conn)
                              if c != channel and tag in self.channels[(conn, c)].outstanding), None)  # fmt: skip
        if elsewhere is not None:
            t.wrong_channel += 1
            problem = f"wrong channel (outstanding on channel {elsewhere})"
        elif tag == 0 or tag > ch.max_tag:
            t.unknown_tag += 1
            problem = "unknown tag"
        else:
            t.double_ack += 1
            problem = "already settled"
        self._count(conn, channel, "bad_acks")
        if len(self.bad_acks) < MAX_LISTED:
            self.bad_acks.append(BadAck(conn, channel, method, tag, multiple, ev.packet, problem))

    def _release(self, conn: int, channel: int | None, fate: str | None, ts: float) -> None:
        """Drop what a channel still holds: the broker requeues it (recover, close) or the capture ends.

        ``fate`` None is basic.recover: the unacked deliveries are voided (requeued, redelivered
        with new tags); acks held by an open transaction are not in that set and stay."""
        keys = [(conn, channel)] if channel is not None else self.channels.keys_of(conn)
        for key in keys:
            ch = self.channels.get(key)
            if ch is None:
                continue
            if fate is not None and ch.tx_acks:
                # acks of an unfinished transaction die with the channel: their deliveries are unacked
                back = [item for a in ch.tx_acks for item in a.items]
                ch.tx_acks.clear()
                ch.outstanding = dict(sorted([*ch.outstanding.items(), *back]))
            consumed = 0
            for dtag, d in ch.outstanding.items():
                if d.consumer_tag is not None:
                    consumed += 1
                    c = ch.consumers.get(d.consumer_tag)
                    if c is not None and c.in_flight:
                        c.in_flight -= 1
                if fate is None:
                    continue
                if fate != "open at end":
                    self.totals.released_at_close += 1
                else:
                    who = f"{key[0]}/{key[1]}/{d.consumer_tag if d.consumer_tag is not None else '(get)'}"
                    self.unacked_by_consumer[who] = self.unacked_by_consumer.get(who, 0) + 1
                self.unacked_total += 1
                if len(self.unacked) < MAX_LISTED:
                    self.unacked.append(Unacked(key[0], key[1], dtag, d.consumer_tag, d.packet, d.ts, d.exchange,
                                                d.routing_key, d.redelivered, fate))  # fmt: skip
            if fate is None and ch.outstanding:
                self.totals.recovered += len(ch.outstanding)
                self._count(key[0], key[1], "recovered", len(ch.outstanding))
            ch.outstanding.clear()
            if consumed:
                ch.in_flight -= consumed
                self._in_flight(key[0], key[1], ch, -consumed, ts)
            self._limit(ch, ts)
            if fate is not None:
                self._flush_channel(key, ch, ts)

    def _flush_channel(self, key: tuple[int, int], ch: _Channel, ts: float) -> None:
        if ch.at_limit_since is not None:
            ch.time_at_limit += ts - ch.at_limit_since
            ch.at_limit_since = None
        if not (ch.max_in_flight or ch.consumers or key in self.per_channel):
            return
        d = self.per_channel.setdefault(key, {})
        d["max_in_flight"] = max(d.get("max_in_flight", 0), ch.max_in_flight)
        d["time_at_prefetch_limit_s"] = round(d.get("time_at_prefetch_limit_s", 0.0) + ch.time_at_limit, 6)
        if ch.over_prefetch:
            d["over_prefetch"] = d.get("over_prefetch", 0) + ch.over_prefetch
        ch.time_at_limit = 0.0
        ch.over_prefetch = 0
        for tag, c in ch.consumers.items():
            if len(self.consumers) < MAX_LISTED:
                self.consumers[(key[0], key[1], tag)] = {
                    "conn": key[0], "channel": key[1], "consumer_tag": tag, "no_ack": c.no_ack,
                    "prefetch": c.prefetch, "delivered": c.delivered, "max_in_flight": c.max_in_flight,
                }  # fmt: skip

    def connection_ended(self, conn: int, ts: float, at_eof: bool = False) -> None:
        self._release(conn, None, "open at end" if at_eof else "released: connection closed", ts)
        for key in self.channels.keys_of(conn):
            del self.channels[key]

    def finish(self, ts: float) -> None:
        for conn in self.channels.conns():
            self.connection_ended(conn, ts, at_eof=True)

    def result(self) -> dict[str, Any]:
        t = self.totals
        per_channel = [{"conn": c, "channel": ch, **v} for (c, ch), v in sorted(self.per_channel.items())]
        return {
            "delivered": t.delivered, "via_deliver": t.via_deliver, "via_get": t.via_get, "no_ack": t.no_ack,
            "acked": t.acked, "nacked": t.nacked, "rejected": t.rejected, "requeued": t.requeued,
            "redelivered": t.redelivered, "ack_frames": t.ack_frames, "ack_multiple": t.ack_multiple,
            "nack_frames": t.nack_frames, "nack_multiple": t.nack_multiple, "reject_frames": t.reject_frames,
            "unknown_tag": t.unknown_tag, "double_ack": t.double_ack, "wrong_channel": t.wrong_channel,
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

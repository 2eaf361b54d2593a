"""Consumer delivery ledger: deliver/get-ok against ack/nack/reject, per channel.

Delivery tags are per channel and increase, so each channel keeps a dict of the unsettled
deliveries in tag order; ``multiple`` settles a prefix of it (tag 0 with multiple: all). A tag
above the highest ever delivered is unknown; a tag at or below it that is not outstanding was
already settled (double ack), belonged to a no-ack delivery or was voided by basic.recover: the
broker answers both with 406 "unknown delivery tag". When the tag is outstanding on another
channel of the same connection the ack most likely went to the wrong channel.

In-flight is counted against the basic.qos prefetch of the channel (RabbitMQ applies a
non-global prefetch per consumer; with one consumer per channel, the usual case, they agree).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from ..events import C2S, S2C, Frame
from .common import MAX_LISTED
from .percentiles import Reservoir, TimeSeries


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
class _Channel:
    outstanding: dict[int, _Delivery] = field(default_factory=dict)
    max_tag: int = 0
    in_flight: int = 0  # outstanding consumer deliveries (basic.get is not limited by prefetch)
    prefetch: int = 0
    max_in_flight: int = 0
    at_limit_since: float | None = None
    time_at_limit: float = 0.0
    consumers: dict[str, bool] = field(default_factory=dict)  # consumer tag → no_ack
    pending_consume: deque[tuple[str, bool]] = field(default_factory=deque)
    pending_get_no_ack: deque[bool] = field(default_factory=deque)


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
    released_at_close: int = 0
    server_cancels: int = 0


class DeliveryLedger:
    def __init__(self) -> None:
        self.channels: dict[tuple[int, int], _Channel] = {}
        self.totals = DeliveryTotals()
        self.latency = Reservoir()
        self.latency_series = TimeSeries()
        self.in_flight_series = TimeSeries()
        self.in_flight_total = 0
        self.unacked: list[Unacked] = []
        self.unacked_total = 0
        self.bad_acks: list[BadAck] = []
        self.per_channel: dict[tuple[int, int], dict[str, Any]] = {}

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
                ch.consumers[str(args.get("consumer_tag") or tag)] = no_ack
            elif method == "basic.get-empty":
                ch = self._ch(conn, channel)
                if ch.pending_get_no_ack:
                    ch.pending_get_no_ack.popleft()
            elif method == "basic.cancel":
                self.totals.server_cancels += 1
            elif method == "basic.recover-ok":
                self._release(conn, channel, None, ev.ts)
            elif method == "basic.qos-ok":
                pass
        elif ev.dir == C2S:
            if method in ("basic.ack", "basic.nack", "basic.reject"):
                self._settle(ev, conn, channel, method, args)
            elif method == "basic.qos":
                # prefetch_count 0 = unlimited; the limit applies to what is delivered after it
                ch = self._ch(conn, channel)
                ch.prefetch = int(args.get("prefetch_count", 0) or 0)
                self.per_channel.setdefault((conn, channel), {})["prefetch"] = ch.prefetch
                self._limit(ch, ev.ts)
            elif method == "basic.consume":
                tag, no_ack = str(args.get("consumer_tag") or ""), bool(args.get("no_ack"))
                ch = self._ch(conn, channel)
                if args.get("no_wait") and tag:
                    ch.consumers[tag] = no_ack
                else:
                    ch.pending_consume.append((tag, no_ack))
            elif method == "basic.get":
                self._ch(conn, channel).pending_get_no_ack.append(bool(args.get("no_ack")))
            elif method == "basic.recover-async":
                self._release(conn, channel, None, ev.ts)
        if method in ("channel.close-ok", "channel.open"):
            self._release(conn, channel, "released: channel closed", ev.ts)
            self.channels.pop((conn, channel), None)

    def _deliver(self, ev: Frame, conn: int, channel: int, args: dict[str, Any], via_get: bool) -> None:
        t = self.totals
        ch = self._ch(conn, channel)
        tag = int(args.get("delivery_tag", 0) or 0)
        redelivered = bool(args.get("redelivered"))
        t.delivered += 1
        t.redelivered += redelivered
        ch.max_tag = max(ch.max_tag, tag)
        self._count(conn, channel, "delivered")
        consumer: str | None
        if via_get:
            t.via_get += 1
            no_ack = ch.pending_get_no_ack.popleft() if ch.pending_get_no_ack else False
            consumer = None
        else:
            t.via_deliver += 1
            consumer = str(args.get("consumer_tag", ""))
            no_ack = ch.consumers.get(consumer, False)
        if redelivered:
            self._count(conn, channel, "redelivered")
        if no_ack:
            t.no_ack += 1  # settled on delivery: nothing to acknowledge
            return
        ch.outstanding[tag] = _Delivery(ev.ts, ev.packet, consumer, str(args.get("exchange", "")),
                                        str(args.get("routing_key", "")), redelivered)  # fmt: skip
        if not via_get:
            ch.in_flight += 1
            self._in_flight(+1, ev.ts)
            ch.max_in_flight = max(ch.max_in_flight, ch.in_flight)
            self._limit(ch, ev.ts)

    def _in_flight(self, delta: int, ts: float) -> None:
        self.in_flight_total += delta
        self.in_flight_series.add(ts, float(self.in_flight_total))

    def _limit(self, ch: _Channel, ts: float) -> None:
        """Accumulate the time a channel spends with prefetch exhausted (the broker stops sending)."""
        at_limit = ch.prefetch > 0 and ch.in_flight >= ch.prefetch
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
        if multiple:
            settled = []
            for dtag in ch.outstanding:
                if tag and dtag > tag:
                    break
                settled.append(dtag)
        else:
            settled = [tag] if tag in ch.outstanding else []
        if not settled:
            self._bad(ev, conn, channel, ch, method, tag, multiple)
            return
        for dtag in settled:
            d = ch.outstanding.pop(dtag)
            lat = max(0.0, ev.ts - d.ts)
            self.latency.add(lat)
            self.latency_series.add(ev.ts, lat)
            if d.consumer_tag is not None:
                ch.in_flight -= 1
                self._in_flight(-1, ev.ts)
        n = len(settled)
        if kind == "ack":
            t.acked += n
        elif kind == "nack":
            t.nacked += n
        else:
            t.rejected += n
        if requeue and kind != "ack":
            t.requeued += n
        self._count(conn, channel, {"ack": "acked", "nack": "nacked", "reject": "rejected"}[kind], n)
        self._limit(ch, ev.ts)

    def _bad(self, ev: Frame, conn: int, channel: int, ch: _Channel, method: str, tag: int, multiple: bool) -> None:
        t = self.totals
        elsewhere = next((c for (cn, c), other in self.channels.items()
                          if cn == conn and c != channel and tag in other.outstanding), None)  # fmt: skip
        if elsewhere is not None:
            t.wrong_channel += 1
            problem = f"wrong channel (outstanding on channel {elsewhere})"
        elif tag > ch.max_tag or (tag == 0 and not multiple):
            t.unknown_tag += 1
            problem = "unknown tag"
        else:
            t.double_ack += 1
            problem = "already settled"
        self._count(conn, channel, "bad_acks")
        if len(self.bad_acks) < MAX_LISTED:
            self.bad_acks.append(BadAck(conn, channel, method, tag, multiple, ev.packet, problem))

    def _release(self, conn: int, channel: int | None, fate: str | None, ts: float) -> None:
        """Drop what a channel still holds: the broker requeues it (recover, close) or the capture ends."""
        keys = [(conn, channel)] if channel is not None else [k for k in self.channels if k[0] == conn]
        for key in keys:
            ch = self.channels.get(key)
            if ch is None:
                continue
            for dtag, d in ch.outstanding.items():
                if fate is None:
                    self.totals.recovered += 1
                    continue
                if fate != "open at end":
                    self.totals.released_at_close += 1
                self.unacked_total += 1
                if len(self.unacked) < MAX_LISTED:
                    self.unacked.append(Unacked(key[0], key[1], dtag, d.consumer_tag, d.packet, d.ts, d.exchange,
                                                d.routing_key, d.redelivered, fate))  # fmt: skip
            if ch.in_flight:
                self._in_flight(-ch.in_flight, ts)
            ch.outstanding.clear()
            ch.in_flight = 0
            self._limit(ch, ts)
            self._flush_channel(key, ch)

    def _flush_channel(self, key: tuple[int, int], ch: _Channel) -> None:
        d = self.per_channel.setdefault(key, {})
        d["max_in_flight"] = max(d.get("max_in_flight", 0), ch.max_in_flight)
        d["time_at_prefetch_limit_s"] = round(d.get("time_at_prefetch_limit_s", 0.0) + ch.time_at_limit, 6)
        ch.time_at_limit = 0.0

    def connection_ended(self, conn: int, ts: float, at_eof: bool = False) -> None:
        self._release(conn, None, "open at end" if at_eof else "released: connection closed", ts)
        for key in [k for k in self.channels if k[0] == conn]:
            del self.channels[key]

    def finish(self, ts: float) -> None:
        for conn in {k[0] for k in self.channels}:
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
            "recovered": t.recovered, "released_at_close": t.released_at_close, "server_cancels": t.server_cancels,
            "outstanding": self.unacked_total - t.released_at_close,
            "max_in_flight": max((v.get("max_in_flight", 0) for v in self.per_channel.values()), default=0),
            "latency_ms": self.latency.summary(),
            "per_channel": per_channel,
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

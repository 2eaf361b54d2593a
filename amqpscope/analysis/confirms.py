"""Publisher-confirm ledger: publish sequence numbers, server acks/nacks, returns, latency.

After confirm.select(-ok) a channel numbers its publishes 1, 2, 3… (the spec's delivery-tag for
confirms); the server's basic.ack/basic.nack name those numbers, ``multiple`` settling every
number up to the tag and tag 0 with multiple meaning "everything so far". Unconfirmed publishes
are kept in a dict per channel and dropped as soon as they are settled, so memory follows what is
outstanding. A basic.return (mandatory, unroutable) comes before the ack of the same publish.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..events import C2S, S2C, Frame, Message
from .common import MAX_LISTED, ConnKeyed
from .percentiles import Reservoir, TimeSeries

# the methods feed_frame reads (the analyzer passes no others)
METHODS = frozenset({"basic.publish", "basic.ack", "basic.nack", "confirm.select", "confirm.select-ok",
                     "channel.close-ok", "channel.open"})  # fmt: skip


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
class _Publish:
    ts: float
    packet: int
    exchange: str
    routing_key: str
    returned: bool = False


@dataclass(slots=True)
class _Channel:
    confirming: bool = False
    select_pending: bool = False
    next_seq: int = 1
    outstanding: dict[int, _Publish] = field(default_factory=dict)  # insertion order = seq order


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
    lost_at_close: int = 0


class ConfirmLedger:
    def __init__(self) -> None:
        self.channels: ConnKeyed[tuple[int, int], _Channel] = ConnKeyed()
        self.totals = ConfirmTotals()
        self.latency = Reservoir()
        self.latency_series = TimeSeries()
        self.per_channel: dict[tuple[int, int], dict[str, int]] = {}
        self.unconfirmed: list[Unconfirmed] = []
        self.unconfirmed_total = 0
        self.return_codes: dict[int, int] = {}

    def _ch(self, conn: int, channel: int) -> _Channel:
        key = (conn, channel)
        ch = self.channels.get(key)
        if ch is None:
            ch = self.channels[key] = _Channel()
        return ch

    def _count(self, conn: int, channel: int, what: str, n: int = 1) -> None:
        d = self.per_channel.setdefault((conn, channel), {})
        d[what] = d.get(what, 0) + n

    def feed_frame(self, ev: Frame, conn: int) -> None:
        method, args, channel = ev.method, ev.args or {}, ev.channel or 0
        if method == "basic.publish" and ev.dir == C2S:
            self.totals.published += 1
            ch = self.channels.get((conn, channel))
            if ch is not None and (ch.confirming or ch.select_pending):
                self.totals.published_confirm += 1
                self._count(conn, channel, "published")
                ch.outstanding[ch.next_seq] = _Publish(ev.ts, ev.packet, str(args.get("exchange", "")),
                                                      str(args.get("routing_key", "")))  # fmt: skip
                ch.next_seq += 1
        elif method in ("basic.ack", "basic.nack") and ev.dir == S2C:
            self._settle(ev, conn, channel, method == "basic.ack", args)
        elif method == "confirm.select" and ev.dir == C2S:
            ch = self._ch(conn, channel)
            # numbering starts with the select: publishes pipelined behind it are already counted
            ch.select_pending = True
            if args.get("nowait"):
                ch.confirming = True
        elif method == "confirm.select-ok" and ev.dir == S2C:
            ch = self._ch(conn, channel)
            ch.confirming, ch.select_pending = True, False
        elif method in ("channel.close-ok", "channel.open"):
            # a channel that closes loses its confirm mode; a reopened one numbers from 1 again
            self._drop(conn, channel, "channel closed")

    def feed_message(self, ev: Message, conn: int) -> None:
        """basic.return: mark the oldest outstanding publish with that exchange and routing key."""
        if ev.method != "basic.return":
            return
        self.totals.returned += 1
        code = int(ev.args.get("reply_code", 0) or 0)
        self.return_codes[code] = self.return_codes.get(code, 0) + 1
        channel = ev.channel or 0
        self._count(conn, channel, "returned")
        ch = self.channels.get((conn, channel))
        if ch is None:
            return
        exchange, rk = ev.args.get("exchange", ""), ev.args.get("routing_key", "")
        for pub in ch.outstanding.values():
            if not pub.returned and pub.exchange == exchange and pub.routing_key == rk:
                pub.returned = True
                return
        if ch.confirming:
            self.totals.return_unmatched += 1

    def _settle(self, ev: Frame, conn: int, channel: int, ack: bool, args: dict[str, Any]) -> None:
        tag = int(args.get("delivery_tag", 0) or 0)
        multiple = bool(args.get("multiple"))
        t = self.totals
        if ack:
            t.ack_frames += 1
            t.ack_multiple += multiple
        else:
            t.nack_frames += 1
            t.nack_multiple += multiple
        self._count(conn, channel, "ack_frames" if ack else "nack_frames")
        ch = self.channels.get((conn, channel))
        if ch is None:
            # a capture that starts after confirm.select: the publish numbering is unknown, so
            # these acks cannot be matched (and are not the peer's mistake)
            t.select_not_seen += 1
            return
        if not ch.outstanding:
            if not (multiple and tag == 0):
                t.unknown_tag += 1
            return
        if multiple:
            # outstanding is in seq order, so settled ones are a prefix; tag 0 means all of them
            settled = []
            for seq in ch.outstanding:
                if tag and seq > tag:
                    break
                settled.append(seq)
        else:
            settled = [tag] if tag in ch.outstanding else []
        if not settled:
            t.unknown_tag += 1
            return
        for seq in settled:
            pub = ch.outstanding.pop(seq)
            lat = max(0.0, ev.ts - pub.ts)
            self.latency.add(lat)
            self.latency_series.add(ev.ts, lat)
            if ack:
                t.acked += 1
                t.returned_then_acked += pub.returned
            else:
                t.nacked += 1
        self._count(conn, channel, "acked" if ack else "nacked", len(settled))

    def _drop(self, conn: int, channel: int | None, fate: str) -> None:
        keys = [(conn, channel)] if channel is not None else self.channels.keys_of(conn)
        for key in keys:
            ch = self.channels.pop(key, None)
            if ch is None:
                continue
            for seq, pub in ch.outstanding.items():
                self.unconfirmed_total += 1
                if fate != "open at end":
                    self.totals.lost_at_close += 1
                if len(self.unconfirmed) < MAX_LISTED:
                    self.unconfirmed.append(Unconfirmed(key[0], key[1], seq, pub.packet, pub.ts, pub.exchange,
                                                        pub.routing_key, pub.returned, fate))  # fmt: skip

    def connection_ended(self, conn: int, at_eof: bool = False) -> None:
        self._drop(conn, None, "open at end" if at_eof else "connection closed")

    def finish(self) -> None:
        for conn in self.channels.conns():
            self._drop(conn, None, "open at end")

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

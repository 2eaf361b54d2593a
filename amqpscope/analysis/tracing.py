"""Tracing across connections: publish → deliveries (fan-out, latency) and RPC request → reply.

A message is recognised on delivery by the exchange and routing key it was published with (the
deliver carries both) plus the best identity it has: message-id, else correlation-id, else the
body's sha256. Publishes are kept in an insertion-ordered dict capped at ``capacity`` entries, the
oldest evicted first, so memory is bounded even when most publishes are never delivered in view.

RPC requests are publishes carrying both reply-to and correlation-id; the reply is a later publish
with the same correlation-id addressed to that reply-to (RabbitMQ's direct reply-to rewrites
``amq.rabbitmq.reply-to`` to a per-channel name, so any ``amq.rabbitmq.reply-to.*`` key matches),
and the round trip ends when the reply is delivered on the requester's connection.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import asdict, dataclass
from typing import Any

from ..events import Message
from .common import MAX_LISTED
from .percentiles import Reservoir

DIRECT_REPLY_TO = "amq.rabbitmq.reply-to"


@dataclass(slots=True)
class _Pub:
    conn: int
    channel: int
    ts: float
    packet: int
    # the readers that received it (hashes of conn, channel, consumer): None, one, or a set for a
    # fan-out. Memory matters: most publishes reach one reader, and up to ``capacity`` are kept.
    delivered_to: int | set[int] | None = None

    def reached(self, where: int) -> bool:
        d = self.delivered_to
        return d is not None and (d == where if type(d) is int else where in d)  # type: ignore[operator]

    def reach(self, where: int) -> None:
        d = self.delivered_to
        if d is None:
            self.delivered_to = where
        elif type(d) is int:
            self.delivered_to = {d, where}
        else:
            d.add(where)  # type: ignore[union-attr]

    def fanout(self) -> int:
        d = self.delivered_to
        return 0 if d is None else 1 if type(d) is int else len(d)  # type: ignore[arg-type]


@dataclass(slots=True)
class _Req:
    conn: int
    channel: int
    ts: float
    packet: int
    reply_to: str
    replied_at: float | None = None
    reply_conn: int = -1
    reply_packet: int = 0


@dataclass(frozen=True, slots=True)
class RpcPair:
    correlation_id: str
    reply_to: str
    request_conn: int
    request_channel: int
    request_packet: int
    reply_conn: int
    reply_packet: int
    service_ms: float  # request published → reply published
    round_trip_ms: float | None  # request published → reply delivered to the requester


@dataclass(frozen=True, slots=True)
class UnansweredRpc:
    conn: int
    channel: int
    packet: int
    ts: float
    correlation_id: str
    reply_to: str
    state: str  # "no reply published" | "reply published, not seen delivered"


def identity(msg: Message) -> int | None:
    """Exchange, routing key and the best id the message has, hashed: a small int per kept publish
    (a 64-bit hash; a collision among the publishes kept at once is vanishingly unlikely)."""
    props = msg.properties or {}
    for prefix, value in (("mid", props.get("message_id")), ("cid", props.get("correlation_id")),
                          ("sha", msg.body_sha256)):  # fmt: skip
        if value:
            return hash((msg.args.get("exchange", ""), msg.args.get("routing_key", ""), prefix, str(value)))
    return None


def _reply_matches(reply_to: str, routing_key: str) -> bool:
    if reply_to == routing_key:
        return True
    return reply_to.startswith(DIRECT_REPLY_TO) and routing_key.startswith(DIRECT_REPLY_TO)


class Tracer:
    def __init__(self, capacity: int = 200_000) -> None:
        self.capacity = capacity
        self.pubs: OrderedDict[int, _Pub | list[_Pub]] = OrderedDict()  # a list only for repeats
        self.pub_count = 0
        self.latency = Reservoir()
        self.matched = 0
        self.cross_connection = 0
        self.redelivered_matched = 0
        self.unmatched_deliveries = 0
        self.fanout: dict[int, int] = {}  # deliveries per publish → publishes
        self.evicted = 0
        self.reqs: OrderedDict[str, _Req] = OrderedDict()
        self.rpc_requests = 0
        self.rpc_replied = 0
        self.rpc_completed = 0
        self.rpc_direct = 0
        self.rpc_service = Reservoir()
        self.rpc_round_trip = Reservoir()
        self.rpc_unanswered: list[UnansweredRpc] = []
        self.rpc_pairs: list[RpcPair] = []
        self.rpc_unanswered_total = 0

    def feed(self, msg: Message, conn: int) -> None:
        if msg.method == "basic.publish":
            self._publish(msg, conn)
        elif msg.method in ("basic.deliver", "basic.get-ok"):
            self._deliver(msg, conn)

    def _publish(self, msg: Message, conn: int) -> None:
        props = msg.properties or {}
        cid, reply_to = props.get("correlation_id"), props.get("reply_to")
        if cid:
            self._rpc_publish(msg, conn, str(cid), str(reply_to) if reply_to else None)
        key = identity(msg)
        if key is None:
            return
        entry = _Pub(conn, msg.channel or 0, msg.ts, msg.packet)
        had = self.pubs.get(key)
        if had is None:
            self.pubs[key] = entry
        elif type(had) is list:
            had.append(entry)
        else:
            self.pubs[key] = [had, entry]  # type: ignore[list-item]
        self.pub_count += 1
        while self.pub_count > self.capacity:
            _, gone = self.pubs.popitem(last=False)
            old = gone if type(gone) is list else [gone]
            self.pub_count -= len(old)
            self.evicted += len(old)
            for p in old:
                self._fanout(p)  # type: ignore[arg-type]

    def _fanout(self, p: _Pub) -> None:
        n = p.fanout()
        self.fanout[n] = self.fanout.get(n, 0) + 1

    def _deliver(self, msg: Message, conn: int) -> None:
        key = identity(msg)
        had = self.pubs.get(key) if key is not None else None
        lst: list[_Pub] | None = None if had is None else had if isinstance(had, list) else [had]
        # one consumer reads one queue: a fan-out reaching two queues consumed on the same channel
        # is two deliveries of one publish (basic.get names no queue; it counts as one reader)
        where = hash((conn, msg.channel or 0, msg.args.get("consumer_tag", "(get)")))
        if not lst:
            self.unmatched_deliveries += 1
        elif msg.args.get("redelivered"):
            self.redelivered_matched += 1
        else:
            # the oldest publish of that identity not yet delivered here: identical messages
            # published twice are delivered in order on one queue
            pub = next((p for p in lst if not p.reached(where)), None)
            if pub is None:
                self.unmatched_deliveries += 1
            else:
                pub.reach(where)
                self.matched += 1
                self.cross_connection += pub.conn != conn
                self.latency.add(max(0.0, msg.ts - pub.ts))
        self._rpc_deliver(msg, conn)

    def _rpc_publish(self, msg: Message, conn: int, cid: str, reply_to: str | None) -> None:
        req = self.reqs.get(cid)
        rk = str(msg.args.get("routing_key", ""))
        if req is not None and req.replied_at is None and _reply_matches(req.reply_to, rk):
            req.replied_at, req.reply_conn, req.reply_packet = msg.ts, conn, msg.first_packet
            self.rpc_replied += 1
            self.rpc_service.add(max(0.0, msg.ts - req.ts))
            return
        if reply_to:
            self.rpc_requests += 1
            self.rpc_direct += reply_to.startswith(DIRECT_REPLY_TO)
            self.reqs[cid] = _Req(conn, msg.channel or 0, msg.ts, msg.packet, reply_to)
            while len(self.reqs) > self.capacity:
                old_cid, old = self.reqs.popitem(last=False)
                self._rpc_lost(old_cid, old)

    def _rpc_deliver(self, msg: Message, conn: int) -> None:
        cid = (msg.properties or {}).get("correlation_id")
        req = self.reqs.get(str(cid)) if cid else None
        if req is None or req.conn != conn or req.replied_at is None:
            return
        if not _reply_matches(req.reply_to, str(msg.args.get("routing_key", ""))):
            return
        del self.reqs[str(cid)]
        self.rpc_completed += 1
        self.rpc_round_trip.add(max(0.0, msg.ts - req.ts))
        self._pair(str(cid), req, msg.ts)

    def _pair(self, cid: str, req: _Req, delivered_at: float | None) -> None:
        if len(self.rpc_pairs) >= MAX_LISTED or req.replied_at is None:
            return
        self.rpc_pairs.append(RpcPair(
            cid, req.reply_to, req.conn, req.channel, req.packet, req.reply_conn, req.reply_packet,
            round(max(0.0, req.replied_at - req.ts) * 1000, 3),
            None if delivered_at is None else round(max(0.0, delivered_at - req.ts) * 1000, 3)))  # fmt: skip

    def _rpc_lost(self, cid: str, req: _Req) -> None:
        self._pair(cid, req, None)
        self.rpc_unanswered_total += 1
        if len(self.rpc_unanswered) < MAX_LISTED:
            state = "no reply published" if req.replied_at is None else "reply published, not seen delivered"
            self.rpc_unanswered.append(UnansweredRpc(req.conn, req.channel, req.packet, req.ts, cid, req.reply_to,
                                                     state))  # fmt: skip

    def finish(self) -> None:
        for had in self.pubs.values():
            for p in had if type(had) is list else [had]:
                self._fanout(p)  # type: ignore[arg-type]
        self.pubs.clear()
        for cid, req in self.reqs.items():
            self._rpc_lost(cid, req)
        self.reqs.clear()

    def result(self) -> dict[str, Any]:
        return {
            "messages": {
                "matched_deliveries": self.matched,
                "cross_connection": self.cross_connection,
                "redelivered": self.redelivered_matched,
                "unmatched_deliveries": self.unmatched_deliveries,
                "fanout": {str(k): v for k, v in sorted(self.fanout.items())},
                "evicted": self.evicted,
                "publish_to_deliver_ms": self.latency.summary(),
            },
            "rpc": {
                "requests": self.rpc_requests,
                "direct_reply_to": self.rpc_direct,
                "replied": self.rpc_replied,
                "completed": self.rpc_completed,
                "unanswered": self.rpc_unanswered_total,
                "service_ms": self.rpc_service.summary(),
                "round_trip_ms": self.rpc_round_trip.summary(),
                "pairs": [asdict(p) for p in self.rpc_pairs],
                "unanswered_list": [
                    {
                        "conn": u.conn,
                        "channel": u.channel,
                        "packet": u.packet,
                        "ts": u.ts,
                        "correlation_id": u.correlation_id,
                        "reply_to": u.reply_to,
                        "state": u.state,
                    }
                    for u in self.rpc_unanswered
                ],
            },
        }

"""Work held up or messages sent back by the broker: connection.blocked, basic.return and the
broker's basic.cancel."""

from __future__ import annotations

from .facts import Collector, ConnFacts
from .model import Diagnosis, Thresholds, make

# RabbitMQ's direct reply-to pseudo queue: 3.10 answers a mandatory reply to it with 312 NO_ROUTE
# although it delivers the reply (shared capture s14): reported, but not as a loss.
_DIRECT_REPLY_TO = "amq.rabbitmq.reply-to"


def _s(n: int, word: str) -> str:
    plural = word + ("es" if word.endswith(("sh", "s", "ch")) else "s")
    return f"{n} {word if n == 1 else plural}"


def blocked(facts: ConnFacts, th: Thresholds) -> list[Diagnosis]:
    out = []
    who = facts.who
    for b in facts.blocked:
        end = b.end_ts if b.end_ts is not None else (facts.end_ts or b.ts)
        dur = end - b.ts
        if b.end_ts is not None and dur < th.blocked_s:
            continue
        still = "" if b.end_ts is not None else ", still blocked when the capture or connection ended"
        packets = [b.packet, *b.publish_packets[:20]] + ([b.end_packet] if b.end_packet else [])
        out.append(make("publisher-blocked", who, channel=None, packets=packets, since=b.ts, until=end,
                        summary=f"{who.phrase()} was blocked by the broker ({b.reason or 'no reason given'}) "
                        f"for {dur:.1f} s{still}; {_s(b.publishes, 'publish')} held (sent after the alarm, "
                        f"up to unblocking)",
                        broker_action=f"sent connection.blocked (packet {b.packet})"
                        + (f" and connection.unblocked (packet {b.end_packet})" if b.end_packet else "")
                        + "; held the publishes until unblocked",
                        details={"reason": b.reason, "duration_s": round(dur, 6), "publishes_held": b.publishes}))
    return out


def returned(facts: ConnFacts) -> list[Diagnosis]:
    out = []
    who = facts.who
    for r in facts.returns.values():
        confirms = r.confirms
        reply_to = r.routing_key.startswith(_DIRECT_REPLY_TO)
        hid = " Confirms are on for this channel and RabbitMQ still acks returned messages, so a publisher " \
            "relying on confirms alone lost them silently." if confirms and not reply_to else ""  # fmt: skip
        note = " (RabbitMQ 3.10 returns replies to direct reply-to although it delivers them: likely no loss)" \
            if reply_to else ""  # fmt: skip
        out.append(make("unroutable", who, channel=r.channel, packets=r.packets, since=r.first, until=r.last,
                        severity="notice" if reply_to else None,
                        summary=f"{who.phrase()}: {_s(r.count, 'mandatory publish')} to exchange "
                        f"'{r.exchange or '(default)'}' with routing key '{r.routing_key}' on channel {r.channel} "
                        f"came back {r.code} {r.text}{note}.{hid}",
                        broker_action=f"sent basic.return {r.code} {r.text} ×{r.count}"
                        + (" and confirmed the messages (basic.ack)" if confirms else ""),
                        details={"exchange": r.exchange, "routing_key": r.routing_key, "reply_code": r.code,
                                 "count": r.count, "confirms_on": confirms, "confirms_hid_loss": confirms
                                 and not reply_to}))  # fmt: skip
    return out


def cancelled(facts: ConnFacts, col: Collector) -> list[Diagnosis]:
    out = []
    who = facts.who
    for c in facts.cancels:
        d = c.deleted_by
        queue = f" on queue '{c.queue}'" if c.queue else ""
        if d is not None and d.ts <= c.ts:
            by = "this connection" if d.conn == who.conn else f"connection {d.conn}"
            other = col.conns.get(d.conn)
            if other is not None and d.conn != who.conn:
                by += f" ({other.who.phrase()})"
            cause = f": the queue was deleted by {by} (queue.delete, packet {d.packet})"
            packets = [d.packet, c.packet]
            since = d.ts
        else:
            cause, packets, since = " (the queue was deleted, or its node went down, outside the capture)", \
                [c.packet], c.ts  # fmt: skip
        out.append(make("consumer-cancelled", who, channel=c.channel, packets=packets, since=since, until=c.ts,
                        summary=f"the broker cancelled consumer '{c.consumer_tag}'{queue} of {who.phrase()} on "
                        f"channel {c.channel}{cause}; it receives nothing more until it consumes again",
                        broker_action=f"sent basic.cancel (packet {c.packet})",
                        details={"consumer_tag": c.consumer_tag, "queue": c.queue,
                                 "deleted_at": d.packet if d is not None else None}))  # fmt: skip
    return out

"""Causes read from the core's ledger events: consumer-stalled, poison-message, unacked-requeued.

The ledger (``crates/amqpscope-core/src/ledger``) is the one record of delivery tags, settles and
releases; nothing here replays acks. A redelivered message is recognised by the queue it comes
from and the SHA-256 of its body (the ``message`` event of its delivery): the same body from
another queue is another message.
"""

from __future__ import annotations

from .facts import CLOSED, Collector, ConnFacts, Released
from .model import Diagnosis, Thresholds, make
from .model import plural as _s


def seconds(s: float) -> str:
    """A duration in words a reader can compare: '40 ms', '2.5 s'."""
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.1f} s"


def _consumer(facts: ConnFacts, channel: int) -> tuple[str, str | None]:
    """'consumer 'tag' on queue 'q'' for a channel, and the queue."""
    found = [(tag, q) for (ch, tag), q in facts.consumers.items() if ch == channel]
    if not found:
        return f"the consumer on channel {channel}", None
    tag, q = found[-1]
    return f"consumer '{tag}' on queue '{q}'", q


def stalled(facts: ConnFacts, col: Collector, th: Thresholds) -> list[Diagnosis]:
    out = []
    who = facts.who
    for ev in facts.ledger:
        if ev.entry != "at-limit":
            continue
        duration = ev.duration or 0.0
        if duration < th.stall_s:
            continue
        ch = ev.channel or 0
        limit = ev.limit
        since = ev.ts - duration
        name, queue = _consumer(facts, ch)
        waiting = col.published_between(queue, since, ev.ts) if queue else 0
        released = [r for r in facts.ledger if r.entry == "release" and r.channel == ch
                    and r.outcome in CLOSED and since <= r.ts <= ev.ts]  # fmt: skip
        wait = (f"; {_s(waiting, 'message was', 'messages were')} published to '{queue}' meanwhile" if waiting
                else "; the capture shows no message published to its queue meanwhile")  # fmt: skip
        rel = (f"; its {_s(len(released), 'unacked delivery was', 'unacked deliveries were')} released when "
               f"the {(released[0].outcome or 'channel').split()[0]} closed" if released else "")  # fmt: skip
        at = f" of {_s(limit, 'unacked delivery', 'unacked deliveries')}" if limit else ""
        packets = [ev.packet, *[r.packet for r in released[:20]], *[r.ref_packet for r in released[:20]
                                                                      if r.ref_packet is not None]]  # fmt: skip
        out.append(make("consumer-stalled", who, channel=ch, packets=packets, since=since, until=ev.ts,
                        severity=None if waiting else "notice",
                        summary=f"{name} of {who.phrase()} sat at its prefetch limit"
                        f"{at} for "
                        f"{duration:.1f} s without settling any{wait}{rel}",
                        broker_action="sent it nothing beyond its prefetch: the messages stayed queued"
                        + (" until the close requeued its deliveries" if released else ""),
                        details={"duration_s": round(duration, 6), "prefetch": limit, "queue": queue,
                                 "published_meanwhile": waiting, "released_at_close": len(released)}))
    return out


def poison(facts: ConnFacts, th: Thresholds) -> list[Diagnosis]:
    """One message (by body hash) rejected or nacked with requeue at least ``poison_redeliveries``
    times on this connection."""
    out = []
    who = facts.who
    for digest, r in facts.requeues.items():
        if r.count < th.poison_redeliveries:
            continue
        name, queue = _consumer(facts, r.channel)
        verbs = "/".join("nacked" if h == "nack" else "rejected" for h in sorted(r.outcomes))
        span = r.last.ts - r.first.ts
        out.append(make("poison-message", who, channel=r.channel, packets=r.packets, since=r.first.ts,
                        until=r.last.ts,
                        summary=f"{who.phrase()} {verbs} the same message (routing key '{r.routing_key}', body "
                        f"sha256 {digest[:12]}…) with requeue {r.count} times in {span:.3f} s on channel "
                        f"{r.channel} ({name}): it comes straight back and, with a small prefetch, holds up every "
                        "message behind it",
                        broker_action=f"redelivered it at once with redelivered=true, {r.count} times",
                        details={"requeues": r.count, "body_sha256": digest, "routing_key": r.routing_key,
                                 "queue": queue}))  # fmt: skip
    return out


def requeued(col: Collector) -> list[tuple[Released, Diagnosis]]:
    """Deliveries released by a close and seen again, from the same queue with the same body and
    redelivered=true, on any channel (the same connection's included)."""
    out = []
    for r in col.released.values():
        if not r.redelivered:
            continue
        facts = col.conns.get(r.conn)
        if facts is None:
            continue
        who = facts.who
        name, queue = _consumer(facts, r.channel)
        if queue is None:  # fetched with basic.get: no consumer
            queue = next(iter(r.queues)) if len(r.queues) == 1 else None
            name = f"channel {r.channel}"
        others = sorted({f"connection {c} channel {ch}" if c != r.conn else f"channel {ch} of the same connection"
                         for c, ch, _, _ in r.redelivered})  # fmt: skip
        last = max(ts for *_, ts in r.redelivered)
        packets = r.packets[:20] + [p for _, _, p, _ in r.redelivered[:20]]
        queues = ", ".join(f"'{q}'" for q in sorted(r.queues))
        d = make("unacked-requeued", who, channel=r.channel, packets=packets, since=r.first, until=last,
                 summary=f"{_s(r.count, 'delivery', 'deliveries')} to {name} of {who.phrase()}, unacked when "
                 f"its {r.outcome.split()[0]} closed (held up to {seconds(r.held_s)}), went back to queue"
                 f"{'s' if len(r.queues) != 1 else ''} {queues} and {_s(len(r.redelivered), 'was', 'were')} "
                 f"redelivered to {', '.join(others[:5])}: if the first consumer had acted on them, they are "
                 "processed twice; make handlers idempotent and ack promptly",
                 broker_action=f"requeued the released deliveries and redelivered {len(r.redelivered)} with "
                 "redelivered=true",
                 details={"released": r.count, "redelivered": len(r.redelivered), "queue": queue,
                          "queues": sorted(r.queues), "outcome": r.outcome, "close_packet": r.close_packet,
                          "redelivered_to": sorted({(c, ch) for c, ch, _, _ in r.redelivered},
                                                   key=lambda x: (x[0], x[1] or 0))})  # fmt: skip
        out.append((r, d))
    return out

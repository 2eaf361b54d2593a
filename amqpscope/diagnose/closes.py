"""Causes the broker states itself: a channel.close or connection.close with an error code.

The reply code and RabbitMQ's reply text say what happened (``replies`` reads the texts RabbitMQ
3.10 sends); the request a close answers is the one it names (``facts.request_of``), and a
violation is part of a close's cause only when the close answers it (``causality``).
"""

from __future__ import annotations

import re
from typing import Any

from ..events import C2S, S2C
from .facts import Close, Collector, ConnFacts, Declare
from .model import CONNECTION, Diagnosis, make
from .replies import Refusal, read

_NAMES = {311: "CONTENT_TOO_LARGE", 312: "NO_ROUTE", 313: "NO_CONSUMERS", 320: "CONNECTION_FORCED",
          402: "INVALID_PATH", 403: "ACCESS_REFUSED", 404: "NOT_FOUND", 405: "RESOURCE_LOCKED",
          406: "PRECONDITION_FAILED", 501: "FRAME_ERROR", 502: "SYNTAX_ERROR", 503: "COMMAND_INVALID",
          504: "CHANNEL_ERROR", 505: "UNEXPECTED_FRAME", 506: "RESOURCE_ERROR", 530: "NOT_ALLOWED",
          540: "NOT_IMPLEMENTED", 541: "INTERNAL_ERROR"}  # fmt: skip
_INEQUIVALENT = re.compile(r"inequivalent arg '([^']+)'")
_CHANNEL_MAX = re.compile(r"\((\d+)\)")


def code_name(code: int) -> str:
    return f"{code} {_NAMES.get(code, '')}".strip()


def _what(c: Close) -> str:
    scope = "the connection" if c.channel == 0 else f"channel {c.channel}"
    return f"closed {scope} with {code_name(c.code)} (packet {c.packet})"


def _request(c: Close) -> str:
    r = c.request
    if r is None or not r.method:
        return ""
    args = r.args or {}
    target = args.get("queue") or args.get("exchange")
    return f" after {r.method}" + (f" of '{target}'" if isinstance(target, str) and target else "") \
        + f" (packet {r.packet})"


def value(v: Any) -> str:
    """A declared value as the operator writes it: no Python reprs."""
    if v is None:
        return "not set"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    if isinstance(v, str):
        return f"'{v}'"
    return str(v)


def causes(facts: ConnFacts, col: Collector) -> list[Diagnosis]:
    out: list[Diagnosis] = []
    for c in facts.closes:
        if c.by != S2C or c.code in (0, 200):
            continue
        d = _diagnose(facts, col, c)
        if d is not None:
            out.append(d)
    return out


def _released_at(facts: ConnFacts, c: Close) -> tuple[float, list[int]]:
    """When the oldest delivery a channel close released was delivered, and the deliveries' packets
    (the core ledger's release records of that close)."""
    rel = [r for r in facts.ledger if r.entry == "release" and (r.channel or 0) == c.channel and r.packet >= c.packet]
    since = min((r.ts - (r.duration or 0.0) for r in rel), default=c.ts)
    return since, [r.ref_packet for r in rel[:20] if r.ref_packet is not None]


def _diagnose(facts: ConnFacts, col: Collector, c: Close) -> Diagnosis | None:
    who = facts.who
    ch = c.channel if c.channel else None
    packets = [c.packet] + ([c.request.packet] if c.request is not None else [])
    end = facts.end_ts if c.channel == 0 and facts.end_ts is not None else c.ts
    action = f"{_what(c)}: \"{c.text}\""
    base: dict[str, Any] = {"reply_code": c.code, "reply_text": c.text, "class_id": c.class_id,
                            "method_id": c.method_id,
                            "request_packet": c.request.packet if c.request is not None else None}  # fmt: skip
    since = c.request.ts if c.request is not None else c.ts
    user = f" user '{who.user}'" if who.user else ""
    reading = read(c.code, c.text)

    if c.channel == 0 and c.code == 403 and not c.opened:
        advice = "check the credentials and the auth mechanism (`rabbitmqctl authenticate_user`)"
        if c.request is None and facts.stage in ("connection.start-ok", "connection.secure-ok"):
            # the credentials it refuses: the refusal lasted from them to the close (RabbitMQ waits)
            packets.append(facts.stage_packet or c.packet)
            since = facts.stage_ts or since
        return make("login-refused", who, channel=None, packets=packets, since=since, until=end,
                    summary=f"{who.phrase()}: the broker refused the login of{user or ' the client'} "
                    f"({c.text or code_name(c.code)}) before connection.open; {advice}", broker_action=action,
                    details={**base, "advice": advice, "blamed": "client"})  # fmt: skip
    if c.code == 530 and "channel_max" in c.text:
        n = _CHANNEL_MAX.search(c.text)
        opened = c.request is not None and c.request.method == "channel.open"
        which = f" (channel.open of channel {c.request.channel}, packet {c.request.packet})" \
            if opened and c.request is not None else ""  # fmt: skip
        return make("channel-limit", who, channel=None, packets=packets, since=since, until=end,
                    summary=f"{who.phrase()} opened more channels than the negotiated channel_max"
                    f"{' (' + n.group(1) + ')' if n else ''}{which}; the broker closed the whole connection: "
                    "check for a channel leak (channels opened and never closed; RabbitMQ counts open channels, "
                    "not channel numbers)", broker_action=action,
                    details={**base, "channels_open": len(facts.open_channels), "blamed": "client",
                             "channel_open_packet": c.request.packet if opened and c.request else None})  # fmt: skip
    if reading is not None and reading.kind == Refusal.EXCLUSIVE and c.code == 405:
        same = _same_holder(c)
        if same is not None:
            return _inequivalent(facts, c, same, packets, action, base)
        if c.earlier is None:
            # the first declaration is not in the capture: the broker's words leave both open (a
            # holder elsewhere, or its own redeclaration with another flag), so no rule is claimed
            return make("channel-closed", who, channel=ch, packets=packets, since=since, until=end,
                        summary=f"{who.phrase()}: the broker closed channel {ch} with {code_name(c.code)}"
                        f"{_request(c)}: the queue is locked, declared exclusive by another connection or "
                        f"with another exclusive flag (its first declaration is not in the capture); "
                        f"{reading.advice}", broker_action=action,
                        details={**base, "advice": reading.advice, "refusal": reading.kind.value,
                                 "blamed": "client"})  # fmt: skip
    if reading is not None and reading.kind not in (Refusal.EXCLUSIVE, Refusal.LOGIN) and c.code in (403, 530):
        where = f" on channel {ch}" if ch else ""
        return make("access-refused", who, channel=ch, packets=packets, since=since, until=end,
                    impact=CONNECTION if c.channel == 0 else None,
                    summary=f"{who.phrase()}{user and ' as' + user}: the broker refused {reading.what}{where}"
                    f"{_request(c)}; {reading.advice}", broker_action=action,
                    details={**base, "resource": reading.resource, "refusal": reading.kind.value,
                             "advice": reading.advice, "blamed": "client"})  # fmt: skip
    if c.code == 406 and "acknowledgement" in c.text and "timed out" in c.text:
        held_since, deliveries = _released_at(facts, c)
        return make("ack-timeout", who, channel=ch, packets=packets + deliveries, since=held_since, until=end,
                    summary=f"{who.phrase()} held a delivery on channel {ch} unacked for {c.ts - held_since:.1f} s, "
                    "past the broker's consumer_timeout; the broker closed the channel and requeued its unacked "
                    "deliveries; check for slow processing or a forgotten ack", broker_action=action,
                    details={**base, "held_s": round(c.ts - held_since, 6), "blamed": "client"})  # fmt: skip
    if c.explained_by:
        f = c.explained_by[0]
        packets += [p for v in c.explained_by for p in v.packets]
        blamed = "client" if f.dir == C2S else "broker"
        advice = reading.advice if reading is not None else "fix the client code path that sends it"
        return make("client-protocol-error", who, channel=ch, packets=packets, since=f.ts, until=end,
                    summary=f"{who.phrase()} broke rule {f.rule} on channel {f.channel or 0} "
                    f"(packet {f.packet}): {f.message}", broker_action=action,
                    details={**base, "rules": [v.rule for v in c.explained_by], "finding_packet": f.packet,
                             "advice": advice, "blamed": blamed})  # fmt: skip
    m = _INEQUIVALENT.search(c.text) if c.code == 406 else None
    if c.code == 406 and (m or "inequivalent" in c.text):
        return _precondition(facts, c, packets, action, base, m.group(1) if m else None)
    if c.code == 406:
        return make("precondition-failed", who, channel=ch, packets=packets, since=since, until=end,
                    summary=f"{who.phrase()}: a precondition failed on channel {ch}{_request(c)}: {c.text}",
                    broker_action=action, details={**base, "blamed": "client"})  # fmt: skip
    if c.channel == 0:
        why = " (an operator, a policy or a node shutdown closed it)" if c.code == 320 else ""
        advice = f"; {reading.advice}" if reading is not None else ""
        return make("connection-closed", who, channel=None, packets=packets, since=since, until=end,
                    summary=f"the broker closed the connection of {who.phrase()} with {code_name(c.code)}"
                    f"{why}{_request(c)}: {c.text}{advice}", broker_action=action,
                    details={**base, "blamed": "broker" if c.code in (320, 541) else "client",
                             **({"advice": reading.advice} if reading else {})})  # fmt: skip
    advice = f"; {reading.advice}" if reading is not None else ""
    return make("channel-closed", who, channel=ch, packets=packets, since=since, until=end,
                summary=f"{who.phrase()}: the broker closed channel {ch} with {code_name(c.code)}"
                f"{_request(c)}: {c.text}{advice}", broker_action=action,
                details={**base, "blamed": "client", **({"advice": reading.advice} if reading else {})})  # fmt: skip


_FLAGS = ("durable", "exclusive", "auto_delete", "internal", "type")


def _differs(now: dict[str, Any], then: dict[str, Any]) -> list[str]:
    out = [f"{flag} {value(then.get(flag))} → {value(now.get(flag))}" for flag in _FLAGS
           if flag in now and now.get(flag) != then.get(flag)]  # fmt: skip
    a_now, a_then = now.get("arguments") or {}, then.get("arguments") or {}
    out += [f"{key} {value(a_then.get(key))} → {value(a_now.get(key))}" for key in sorted(set(a_now) | set(a_then))
            if a_now.get(key) != a_then.get(key)]  # fmt: skip
    return out


def _same_holder(c: Close) -> Declare | None:
    """The first declaration of a queue redeclared on the same connection (405 from its holder)."""
    e, r = c.earlier, c.request
    if e is None or r is None or r.method != "queue.declare" or e.conn != r.conn:
        return None
    return e


def _inequivalent(facts: ConnFacts, c: Close, earlier: Declare, packets: list[int], action: str,
                  base: dict[str, Any]) -> Diagnosis:  # fmt: skip
    """RabbitMQ answers 405 RESOURCE_LOCKED to a connection that redeclares its own exclusive
    queue with another exclusive flag: the holder is that connection, the cause the changed flag."""
    who = facts.who
    differs = _differs(c.request.args or {} if c.request is not None else {}, earlier.args)
    advice = "declare the queue with the same flags every time (or delete it first)"
    return make("inequivalent-redeclaration", who, channel=c.channel or None, packets=[*packets, earlier.packet],
                since=earlier.ts, until=c.ts,
                summary=f"{who.phrase()} redeclared its own queue '{earlier.name}' on channel {c.channel} with "
                f"{', '.join(differs) or 'other flags'} (first declared in packet {earlier.packet} on this "
                f"connection); RabbitMQ answers an inequivalent redeclaration of an exclusive queue with "
                f"405 RESOURCE_LOCKED although this connection holds it; {advice}", broker_action=action,
                details={**base, "differs": differs, "declared_at": earlier.packet, "holder": earlier.conn,
                         "advice": advice, "blamed": "client"})  # fmt: skip


def _precondition(facts: ConnFacts, c: Close, packets: list[int], action: str, base: dict[str, Any],
                  arg: str | None) -> Diagnosis:  # fmt: skip
    who = facts.who
    r = c.request
    differs: list[str] = []
    earlier = c.earlier
    name = None
    if r is not None and r.method in ("queue.declare", "exchange.declare"):
        name = (r.args or {}).get("queue" if r.method == "queue.declare" else "exchange")
    if earlier is not None and r is not None:
        differs = _differs(r.args or {}, earlier.args)
        packets.append(earlier.packet)
    elif arg:
        differs.append(arg)
    kind = (r.method or "").split(".")[0] if r is not None and r.method else "entity"
    what = f"{kind} '{name}'" if name else "an entity"
    first = ""
    if earlier is not None and r is not None:
        by = "" if earlier.conn == r.conn else f" by connection {earlier.conn}"
        first = f" (first declared in packet {earlier.packet}{by})"
    base = {**base, "differs": differs, "declared_at": earlier.packet if earlier is not None else None,
            "blamed": "client"}  # fmt: skip
    return make("precondition-failed", who, channel=c.channel or None, packets=packets,
                since=earlier.ts if earlier is not None else c.ts, until=c.ts,
                summary=f"{who.phrase()} redeclared {what} on channel {c.channel} with different "
                f"{'properties' if not differs else ', '.join(differs)}{first}; the broker keeps the first "
                "declaration", broker_action=action, details=base)  # fmt: skip

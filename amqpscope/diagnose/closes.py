"""Causes the broker states itself: a channel.close or connection.close with an error code.

The reply code and RabbitMQ's reply text say what happened (observed texts, see
reference/broker-behaviour.md); a violation finding the validator matched to the close says which
client request broke which rule.
"""

from __future__ import annotations

import re
from typing import Any

from ..events import S2C
from .facts import Close, Collector, ConnFacts
from .model import CONNECTION, Diagnosis, make

_NAMES = {311: "CONTENT_TOO_LARGE", 312: "NO_ROUTE", 313: "NO_CONSUMERS", 320: "CONNECTION_FORCED",
          402: "INVALID_PATH", 403: "ACCESS_REFUSED", 404: "NOT_FOUND", 405: "RESOURCE_LOCKED",
          406: "PRECONDITION_FAILED", 501: "FRAME_ERROR", 502: "SYNTAX_ERROR", 503: "COMMAND_INVALID",
          504: "CHANNEL_ERROR", 505: "UNEXPECTED_FRAME", 506: "RESOURCE_ERROR", 530: "NOT_ALLOWED",
          540: "NOT_IMPLEMENTED", 541: "INTERNAL_ERROR"}  # fmt: skip
_INEQUIVALENT = re.compile(r"inequivalent arg '([^']+)'")
_RESOURCE = re.compile(r"access to (queue|exchange|topic) '([^']*)' in vhost '([^']*)'")
_VHOST = re.compile(r"access to vhost '([^']*)'")


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


def causes(facts: ConnFacts, col: Collector) -> list[Diagnosis]:
    out: list[Diagnosis] = []
    for c in facts.closes:
        if c.by != S2C or c.code in (0, 200):
            continue
        d = _diagnose(facts, col, c)
        if d is not None:
            out.append(d)
    return out


def _diagnose(facts: ConnFacts, col: Collector, c: Close) -> Diagnosis | None:
    who = facts.who
    ch = c.channel if c.channel else None
    packets = [c.packet] + ([c.request.packet] if c.request is not None else [])
    end = facts.end_ts if c.channel == 0 and facts.end_ts is not None else c.ts
    action = f"{_what(c)}: \"{c.text}\""
    base: dict[str, Any] = {"reply_code": c.code, "reply_text": c.text, "class_id": c.class_id,
                            "method_id": c.method_id}  # fmt: skip
    since = c.request.ts if c.request is not None else c.ts
    user = f" user '{who.user}'" if who.user else ""

    if c.channel == 0 and c.code == 403 and not c.opened:
        return make("login-refused", who, channel=None, packets=packets, since=since, until=end,
                    summary=f"{who.phrase()}: the broker refused the login of{user or ' the client'} "
                    f"({c.text or code_name(c.code)}) before connection.open; check the credentials and "
                    "the auth mechanism", broker_action=action, details=base)  # fmt: skip
    if c.code == 530 and "channel_max" in c.text:
        n = re.search(r"\((\d+)\)", c.text)
        return make("channel-limit", who, channel=None, packets=packets, since=facts.start_ts, until=end,
                    summary=f"{who.phrase()} opened more channels than the negotiated channel_max"
                    f"{' (' + n.group(1) + ')' if n else ''}; the broker closed the whole connection: "
                    "a channel leak", broker_action=action,
                    details={**base, "channels_open": len(facts.open_channels)})  # fmt: skip
    vhost = _VHOST.search(c.text)
    if vhost or c.code == 403:
        res = _RESOURCE.search(c.text)
        if res:
            what = f"{res.group(1)} '{res.group(2)}' in vhost '{res.group(3)}'"
            base["resource"] = {"kind": res.group(1), "name": res.group(2), "vhost": res.group(3)}
        elif vhost:
            what = f"vhost '{vhost.group(1)}'"
            base["resource"] = {"kind": "vhost", "name": vhost.group(1), "vhost": vhost.group(1)}
        else:
            what = "a resource"
        where = f" on channel {ch}" if ch else ""
        return make("access-refused", who, channel=ch, packets=packets, since=since, until=end,
                    impact=CONNECTION if c.channel == 0 else None,
                    summary=f"{who.phrase()}{user and ' as' + user}: access to {what} refused{where}"
                    f"{_request(c)}; check the user's permissions", broker_action=action,
                    details=base)  # fmt: skip
    if c.code == 406 and "acknowledgement" in c.text and "timed out" in c.text:
        return make("ack-timeout", who, channel=ch, packets=packets, since=c.ts, until=end,
                    summary=f"{who.phrase()} held a delivery on channel {ch} unacked past the broker's "
                    "consumer_timeout; the broker closed the channel and requeued its unacked deliveries",
                    broker_action=action, details=base)  # fmt: skip
    if c.explained_by:
        f = c.explained_by[0]
        packets += [p for v in c.explained_by for p in v.packets]
        return make("client-protocol-error", who, channel=ch, packets=packets, since=f.ts, until=end,
                    summary=f"{who.phrase()} broke rule {f.rule} on channel {ch if ch is not None else 0}: "
                    f"{f.message}", broker_action=action,
                    details={**base, "rules": [v.rule for v in c.explained_by]})  # fmt: skip
    m = _INEQUIVALENT.search(c.text) if c.code == 406 else None
    if c.code == 406 and (m or "inequivalent" in c.text):
        return _precondition(facts, col, c, packets, action, base, m.group(1) if m else None)
    if c.code == 406:
        return make("precondition-failed", who, channel=ch, packets=packets, since=since, until=end,
                    summary=f"{who.phrase()}: a precondition failed on channel {ch}{_request(c)}: {c.text}",
                    broker_action=action, details=base)  # fmt: skip
    if c.channel == 0:
        why = " (an operator or a policy closed it)" if c.code == 320 else ""
        return make("connection-closed", who, channel=None, packets=packets, since=c.ts, until=end,
                    summary=f"the broker closed the connection of {who.phrase()} with {code_name(c.code)}"
                    f"{why}: {c.text}", broker_action=action, details=base)  # fmt: skip
    return make("channel-closed", who, channel=ch, packets=packets, since=since, until=end,
                summary=f"{who.phrase()}: the broker closed channel {ch} with {code_name(c.code)}"
                f"{_request(c)}: {c.text}", broker_action=action, details=base)  # fmt: skip


_FLAGS = ("durable", "exclusive", "auto_delete", "internal", "type")


def _precondition(facts: ConnFacts, col: Collector, c: Close, packets: list[int], action: str,
                  base: dict[str, Any], arg: str | None) -> Diagnosis:  # fmt: skip
    who = facts.who
    r = c.request
    differs: list[str] = []
    earlier = c.earlier
    name = None
    if r is not None and r.method in ("queue.declare", "exchange.declare"):
        name = (r.args or {}).get("queue" if r.method == "queue.declare" else "exchange")
    if earlier is not None and r is not None:
        now, then = r.args or {}, earlier.args
        for flag in _FLAGS:
            if flag in now and now.get(flag) != then.get(flag):
                differs.append(f"{flag} {then.get(flag)!r} → {now.get(flag)!r}")
        a_now, a_then = now.get("arguments") or {}, then.get("arguments") or {}
        for key in sorted(set(a_now) | set(a_then)):
            if a_now.get(key) != a_then.get(key):
                differs.append(f"{key} {a_then.get(key)!r} → {a_now.get(key)!r}")
        packets.append(earlier.packet)
    elif arg:
        differs.append(arg)
    kind = (r.method or "").split(".")[0] if r is not None and r.method else "entity"
    what = f"{kind} '{name}'" if name else "an entity"
    first = f" (first declared at packet {earlier.packet}{'' if earlier.conn == c.request.conn else f' by connection {earlier.conn}'})" \
        if earlier is not None and c.request is not None else ""  # fmt: skip
    base = {**base, "differs": differs, "declared_at": earlier.packet if earlier is not None else None}
    return make("precondition-failed", who, channel=c.channel or None, packets=packets,
                since=earlier.ts if earlier is not None else c.ts, until=c.ts,
                summary=f"{who.phrase()} redeclared {what} on channel {c.channel} with different "
                f"{'properties' if not differs else ', '.join(differs)}{first}; the broker keeps the first "
                "declaration", broker_action=action, details=base)  # fmt: skip

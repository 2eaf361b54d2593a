"""The data the core's semantic rules execute (`crates/amqpscope-core/src/validate/rules*`).

`rules_tables(spec)` is what the core's rules know about particular methods, as data: which
handler of the functional rules a (direction, method) goes to, the spec's reply codes, the client
rules a server's refusal proves, the reserved-name rules, and the few RabbitMQ behaviours the
rules rely on, each with its source. The checker's tables put it under key ``"rules"``.

RabbitMQ's answers where they differ from the spec's rule are in ONE table, `RABBITMQ_CODES`.
"""

from __future__ import annotations

import re
from typing import Any

from amqpscope.dissect.spec import Assert, Field, Method, Spec

C2S, S2C = "c2s", "s2c"

# --- the functional rules: (direction, method) -> handler of rules/deliveries.rs … -----------------
# The handlers keep the per-channel state the spec's rules are about (delivery-tag non-zero,
# confirm mode, tx.commit/tx.rollback transacted, basic.consume consumer-tag, the queue-known rules
# of queue.bind/unbind/purge/delete, channel.flow-ok active). Delivery tags, confirms and prefetch
# (basic.ack multiple.exists, delivery-tag channel-local, basic.qos prefetch-count) are the core
# ledger's: the validator words its outcomes (rules/deliveries.rs from_ledger).
HANDLERS: dict[tuple[str, str], str] = {
    (S2C, "basic.deliver"): "deliver", (S2C, "basic.get-ok"): "deliver",
    (S2C, "basic.ack"): "confirm", (S2C, "basic.nack"): "confirm",
    (C2S, "tx.select"): "select", (C2S, "confirm.select"): "select",
    (C2S, "tx.commit"): "transacted", (C2S, "tx.rollback"): "transacted",
    (S2C, "queue.declare-ok"): "declare-ok", (C2S, "queue.declare"): "declare",
    (C2S, "queue.bind"): "queue-known", (C2S, "queue.unbind"): "queue-known", (C2S, "queue.purge"): "queue-known",
    (C2S, "queue.delete"): "queue-known",
    (C2S, "basic.consume"): "consume", (S2C, "basic.consume-ok"): "consume-ok",
    (C2S, "basic.cancel"): "cancel", (S2C, "basic.cancel"): "cancel", (S2C, "basic.cancel-ok"): "cancel-ok",
    (C2S, "channel.flow"): "flow", (S2C, "channel.flow"): "flow", (C2S, "channel.flow-ok"): "flow",
    (S2C, "channel.flow-ok"): "flow",
    # only their not-implemented checks below: deliveries, acks, confirms and prefetch are the
    # ledger's (the validator reads its outcomes)
    (C2S, "basic.qos"): "none", (C2S, "basic.publish"): "none", (C2S, "basic.recover-async"): "none",
}  # fmt: skip

# What RabbitMQ answers with 540 NOT_IMPLEMENTED (a connection error). Source: RabbitMQ's
# conformance table and rabbit_channel (checklist §4: "immediate=true", "prefetch_size!=0",
# "requeue=false", "active=false is not supported by the server"). (direction, method, field,
# "truthy"|"falsy", message): reported as info where the field is set or not set.
NOT_IMPLEMENTED: tuple[tuple[str, str, str, str, str], ...] = (
    (C2S, "basic.qos", "prefetch_size", "truthy", "basic.qos with prefetch-size (RabbitMQ answers 540)"),
    (C2S, "channel.flow", "active", "falsy", "channel.flow active=0 from the client (RabbitMQ answers 540)"),
    (C2S, "basic.publish", "immediate", "truthy", "basic.publish with immediate=1 (RabbitMQ: 540)"),
    (C2S, "basic.recover-async", "requeue", "falsy", "basic.recover-async requeue=0 (RabbitMQ answers 540)"),
)

# RabbitMQ's extensions the server sends only to clients that announced a capability in start-ok's
# client-properties (RabbitMQ's "consumer cancel notify" and "blocked connection notifications").
CAPABILITIES = {"basic.cancel": "consumer_cancel_notify", "connection.blocked": "connection.blocked",
                "connection.unblocked": "connection.blocked"}  # fmt: skip

# Soft errors that may come on connection.close without a warning: RabbitMQ sends 403 on
# connection.close for an authentication failure (capability authentication_failure_close,
# broker behaviour observed: broker-behaviour.md "wrong password"), which the checklist documents.
SOFT_ON_CONNECTION_CLOSE = ("access-refused",)

# --- suspects: requests the server's reply decides -----------------------------------------------------

SUSPECT_NAMES = ("exchange.declare", "exchange.delete", "queue.declare", "basic.publish", "exchange.declare-ok",
                 "queue.declare-ok", "channel.close")  # fmt: skip
# The spec's standard exchange types (0-9-1 §3.1.3; RabbitMQ's built-ins) and the exchanges every
# server has (the default exchange and the amq.* ones, exchange.declare.exchange "reserved").
STANDARD_TYPES = ("direct", "fanout", "topic", "headers")
STANDARD_EXCHANGES = ("", "amq.direct", "amq.fanout", "amq.topic", "amq.headers", "amq.match")
# exchange -> type known before anything is declared
KNOWN_TYPES = {"amq.direct": "direct", "amq.fanout": "fanout", "amq.topic": "topic", "amq.headers": "headers",
               "amq.match": "headers"}  # fmt: skip
MAX_SUSPECTS = 16  # suspect publishes per channel

# --- exclusive queues --------------------------------------------------------------------------------

QUEUE_USERS = ("queue.declare", "queue.bind", "queue.unbind", "queue.purge", "queue.delete", "basic.consume",
               "basic.get")  # fmt: skip
EXCLUSIVE_NAMES = (*QUEUE_USERS, "queue.declare-ok")

# --- refusals: client rules the server's refusal proves ----------------------------------------------

# A rule the client must keep ("The client MUST NOT attempt to bind a queue that does not exist")
# as opposed to one the server keeps ("The server MUST NOT delete a queue that has consumers").
_CLIENT_RULE = re.compile(r"\b(client|peer)\b[^.]*\b(MUST|MAY NOT)\b", re.IGNORECASE)
# access-refused is left out: RabbitMQ refuses what a user's permissions forbid with 403 as well
_CONFIRMABLE = ("not-found", "resource-locked", "precondition-failed")

# --- RabbitMQ's answers where the spec's rule says another code -----------------------------------------
# finding rule id -> (the reply code RabbitMQ sends, as a spec constant name, the source). The
# only place this knowledge lives; the core puts the code in the finding's `rabbitmq_code`.
RABBITMQ_CODES: dict[str, tuple[str, str]] = {
    "exchange.declare.exchange.assert-notnull": (
        "access-refused",
        "broker code: rabbit_channel check_not_default_exchange, 'operation not permitted on the default "
        "exchange' (declaring '' is declaring the default exchange)"),
    "exchange.declare.type.typed": (
        "precondition-failed",
        "broker behaviour observed: 406 \"inequivalent arg 'type'\"; errata §6 (checklist §3 row 4)"),
}  # fmt: skip

# An assert restates a rule of its field: its failure takes that rule's reply code (the rule's
# on-failure, else the code given here for a rule whose XML names none). assert kind -> rule name.
ASSERT_RULES = {"notnull": "syntax", "length": "syntax", "regexp": "syntax", "le": "upper-limit"}
# Rules whose XML has no on-failure, with the code a conforming peer answers with:
# connection.tune-ok channel-max/frame-max "upper-limit" ("the server MUST close the connection"):
# tune values above the server's are not-allowed (the catalogue's own rule
# connection.tune-ok.frame-max.upper-limit; RabbitMQ rabbit_reader: not_allowed, "negotiated
# channel_max = … is higher than the maximum allowed value").
RULE_CODES = {"connection.tune-ok.channel-max.upper-limit": "not-allowed",
              "connection.tune-ok.frame-max.upper-limit": "not-allowed"}  # fmt: skip


def rule_id(scope: str, name: str) -> str:
    return f"{scope.removeprefix('domain:')}.{name}".replace(" ", "-")


def assert_code(spec: Spec, m: Method, f: Field, a: Assert) -> tuple[str, int] | None:
    """The spec rule an assert restates and its reply code, or None (then: syntax-error).

    The core applies it when it makes an assert finding (checker.rs through
    ``RulesTables::assert_code``, key "assert_codes"), with RabbitMQ's own code from
    ``RABBITMQ_CODES`` (issue 16: exchange.declare '' -> 406, RabbitMQ 403; tune-ok channel-max
    above the offer -> 530; tests/test_validate_issue16.py).
    """
    want = ASSERT_RULES.get(a.check)
    rule = next((r for r in f.rules if r.name == want), None) if want else None
    if rule is None:
        return None
    rid = rule_id(rule.scope, rule.name)
    const = rule.on_failure or RULE_CODES.get(rid)
    code = spec.constant(const) if const else None
    return (rid, code) if code is not None else None


def assert_rule_id(m: Method, f: Field, a: Assert) -> str:
    """The id the core gives the finding of an assert (before its `.syntax` renaming)."""
    return f"{m.full_name}.{f.name}.assert-{a.check}".replace(" ", "-")


def assert_codes(spec: Spec) -> dict[str, dict[str, Any]]:
    """assert finding id -> {"rule": the spec rule it restates, "code": that rule's code}."""
    out: dict[str, dict[str, Any]] = {}
    for m in spec.methods():
        for f in m.fields:
            for a in f.asserts:
                found = assert_code(spec, m, f, a)
                if found is not None:
                    out[assert_rule_id(m, f, a)] = {"rule": found[0], "code": found[1]}
    return out


def refusal_rules(spec: Spec) -> list[dict[str, Any]]:
    """(request, reply code) -> the client rules of that request whose on-failure is that code."""
    out: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for m in spec.methods():
        located = [(r, None) for r in m.rules] + [(r, f) for f in m.fields for r in f.rules]
        for r, f in located:
            if r.on_failure not in _CONFIRMABLE or not _CLIENT_RULE.search(r.text):
                continue
            code = spec.constant(r.on_failure)
            if code is None:
                continue
            rid = f"{r.scope}.{r.name}".replace(" ", "-")
            first = r.text.split(". ")[0].rstrip(".")
            out.setdefault((m.full_name, code), []).append(
                {"rule": rid, "field": f.ident if f else None, "name": r.name, "text": first}
            )
    return [{"method": k[0], "code": k[1], "rules": v} for k, v in out.items()]


def _reserved_names(spec: Spec) -> dict[str, list[str]]:
    """method -> [field ident, rule id] of its field's "reserved" rule (names starting "amq."):
    exchange.declare exchange and queue.declare queue in 0-9-1; 0-9 names the queue's rule
    "reserved-prefix" (the Python validator used the 0-9-1 ids for every spec)."""
    out: dict[str, list[str]] = {}
    for m in spec.methods():
        for f in m.fields:
            for r in f.rules:
                if r.name.startswith("reserved") and '"amq."' in r.text:
                    out.setdefault(m.full_name, [f.ident, rule_id(r.scope, r.name)])
    return out


def _round_trips(spec: Spec) -> dict[str, str]:
    """reply -> request of the connection class's requests but close (start, secure, tune, open,
    update-secret): how fast a peer answers them bounds how long a connection.close takes to reach
    it and its frames to come back (frames after connection.close, lifecycle.rs CloseWatch)."""
    out: dict[str, str] = {}
    for c in spec.classes:
        if c.name != "connection":
            continue
        for m in c.methods:
            if m.name == "close":
                continue
            for r in m.responses:
                out[f"{c.name}.{r}"] = m.full_name
    return out


def rules_tables(spec: Spec) -> dict[str, Any]:
    """Everything the core's rules execute for ``spec``, JSON-ready."""
    rabbit = {}
    for rid, (const, _source) in RABBITMQ_CODES.items():
        code = spec.constant(const)
        if code is not None:
            rabbit[rid] = code
    handlers: dict[str, dict[str, str]] = {C2S: {}, S2C: {}}
    for (d, name), h in HANDLERS.items():
        handlers[d][name] = h
    not_implemented = [{"dir": d, "method": m, "field": f, "when": w, "message": msg}
                       for d, m, f, w, msg in NOT_IMPLEMENTED]  # fmt: skip
    return {
        "handlers": handlers,
        "not_implemented": not_implemented,
        "capabilities": CAPABILITIES,
        "soft_on_connection_close": list(SOFT_ON_CONNECTION_CLOSE),
        "suspect_names": list(SUSPECT_NAMES),
        "reserved": _reserved_names(spec),
        "standard_types": list(STANDARD_TYPES),
        "standard_exchanges": list(STANDARD_EXCHANGES),
        "known_types": KNOWN_TYPES,
        "max_suspects": MAX_SUSPECTS,
        "queue_users": list(QUEUE_USERS),
        "exclusive_names": list(EXCLUSIVE_NAMES),
        "refusals": refusal_rules(spec),
        "reply_success": spec.constant("reply-success", 200),
        "frame_min_size": spec.constant("frame-min-size", 4096) or 4096,
        # reply codes with a class, in the spec's order (close_codes takes the first of a value)
        "error_constants": [[c.name, c.value, c.cls] for c in spec.constants.values() if c.cls],
        "method_ids": {m.full_name: [m.class_index, m.index] for m in spec.methods()},
        "rabbitmq_codes": rabbit,
        "assert_codes": assert_codes(spec),
        "round_trips": _round_trips(spec),
        "spec_version": spec.version,
    }

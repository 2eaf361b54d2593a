"""Semantic rules a passive observer can decide (checklist §3 "yes"/"partly", §3.1).

Each function looks at one decoded method frame with the state of its connection and channel.
Rule ids come from the spec (``<scope>.<rule name>``) so they are stable across releases.
"""

from __future__ import annotations

import re
from collections import deque
from typing import Any, NamedTuple

from amqpscope.dissect.spec import Spec
from amqpscope.events import Finding, Frame

from .findings import INFO, VIOLATION, WARNING, Catalogue
from .state import ChanState, ConnState, World

C2S, S2C = "c2s", "s2c"


# --- lifecycle: open, close, close discipline --------------------------------------------------------


def connection_close(cat: Catalogue, cs: ConnState, ev: Frame, name: str, out: list[Finding]) -> str:
    """Close discipline of the connection. Returns "skip" (in-flight frame, ignore), "claimed" or ""."""
    d = ev.dir
    closer = cs.closing
    if closer is None:
        if name == "connection.close":
            cs.closing = d
        return ""
    if d != closer:
        if name == "connection.close-ok" or name == "connection.close":
            if name == "connection.close-ok":
                cs.closed = True
            return "skip" if name == "connection.close" else ""
        return "skip"  # in flight when the close was sent: the closer discards it, legal
    if name == "connection.close-ok":
        return "skip"  # answering a crossing close
    if ev.type == "method":
        out.append(cat.finding(ev, "connection.close.stability", VIOLATION,
                               f"{name} sent after this peer's connection.close (only close-ok may follow)"))
        return "claimed"
    return "skip"


def channel_lifecycle(cat: Catalogue, ch: ChanState, ev: Frame, name: str, out: list[Finding]) -> str:
    """channel.open state, use before open/after close, channel close discipline."""
    d = ev.dir
    if ch.closing is not None:
        if d != ch.closing:
            if name == "channel.close":
                ch.crossing += 1  # crossing closes: both sides answer with close-ok
                return "skip"
            if name == "channel.close-ok":
                _closed(ch)
                return "skip"
            return "skip"  # in flight when the close was sent
        if name == "channel.close-ok" and ch.crossing:
            ch.crossing -= 1
            if not ch.crossing and not ch.open:
                ch.closing = None
            return "skip"
        out.append(cat.finding(ev, "channel.close.stability", VIOLATION,
                               f"{name} sent after this peer's channel.close (only close-ok may follow)"))
        return "claimed"
    if name == "channel.open":
        if ch.open:
            out.append(cat.finding(ev, "channel.open.state", VIOLATION, f"channel.open on open channel {ev.channel}"))
            return "claimed"
        ch.open = True
        return ""
    if not ch.open:
        if name == "channel.close-ok" and ch.crossing:
            ch.crossing -= 1
            return "skip"
        out.append(cat.finding(ev, "channel.not-open", VIOLATION, f"{name} on channel {ev.channel}, which is not open"))
        return "claimed"
    if name == "channel.close":
        ch.closing = d
    return ""


def _closed(ch: ChanState) -> None:
    """The channel number is free again: forget everything but pending crossing close-oks."""
    crossing, closing = ch.crossing, ch.closing
    run = ch.run
    if run is not None:
        run.state, run.flights = 0, []
    ch.__init__(run)  # type: ignore[misc]
    ch.crossing = crossing
    ch.closing = closing if crossing else None


# --- connection negotiation -------------------------------------------------------------------------


def negotiation(cat: Catalogue, spec: Spec, cs: ConnState, ev: Frame, name: str, args: dict[str, Any],
                out: list[Finding]) -> None:  # fmt: skip
    if name == "connection.start":
        cs.mechanisms = _words(args.get("mechanisms"))
        cs.locales = _words(args.get("locales"))
    elif name == "connection.start-ok":
        mech, loc = _text(args.get("mechanism")), _text(args.get("locale"))
        if cs.mechanisms is not None and mech and mech not in cs.mechanisms:
            out.append(cat.finding(ev, "connection.start-ok.mechanism.validity", VIOLATION,
                                   f"mechanism {mech!r} is not one of {cs.mechanisms}"))
        if cs.locales is not None and loc and loc not in cs.locales:
            out.append(cat.finding(ev, "connection.start-ok.locale.validity", VIOLATION,
                                   f"locale {loc!r} is not one of {cs.locales}"))
        props = args.get("client_properties")
        caps = props.get("capabilities") if isinstance(props, dict) else None
        cs.capabilities = {str(k) for k, v in caps.items() if v is True} if isinstance(caps, dict) else set()
    elif name == "connection.tune":
        for k, v in args.items():
            cs.ctx[f"tune.{k.replace('_', '-')}"] = v
    elif name == "connection.tune-ok":
        fm, offered = args.get("frame_max") or 0, cs.ctx.get("tune.frame-max") or 0
        minimum = spec.constant("frame-min-size", 4096) or 4096
        if fm and fm < minimum:
            out.append(cat.finding(ev, "connection.tune-ok.frame-max.minimum", VIOLATION,
                                   f"frame-max {fm} is below frame-min-size {minimum}"))
        elif offered and (fm == 0 or fm > offered):
            out.append(cat.finding(ev, "connection.tune-ok.frame-max.upper-limit", VIOLATION,
                                   f"frame-max {fm} is more than {offered} offered in tune"))
        cs.tuned = True
        cs.heartbeat = args.get("heartbeat") or 0
        cs.frame_max = fm or offered
        cs.channel_max = args.get("channel_max") or cs.ctx.get("tune.channel-max") or 0


def _text(v: Any) -> str:
    return v.decode("latin-1") if isinstance(v, (bytes, bytearray)) else str(v or "")


def _words(v: Any) -> list[str]:
    return _text(v).split()


# --- reply codes on close ---------------------------------------------------------------------------


def close_codes(cat: Catalogue, spec: Spec, ev: Frame, name: str, args: dict[str, Any], out: list[Finding]) -> None:
    code = args.get("reply_code")
    if not isinstance(code, int) or code in (0, spec.constant("reply-success", 200)):
        return  # 0 is the reply-code notnull assert's business
    const = next((c for c in spec.constants.values() if c.value == code and c.cls), None)
    if const is None:
        out.append(cat.finding(ev, "close.reply-code", WARNING, f"{name} with reply code {code}, not a defined constant"))
    elif name == "channel.close" and const.cls == "hard-error":
        out.append(cat.finding(ev, "close.reply-code", WARNING, f"hard-error {code} ({const.name}) on channel.close"))
    elif name == "connection.close" and const.cls == "soft-error" and const.name != "access-refused":
        # RabbitMQ sends 403 on connection.close for an authentication failure (capability
        # authentication_failure_close), which the checklist documents: not reported
        out.append(cat.finding(ev, "close.reply-code", WARNING, f"soft-error {code} ({const.name}) on connection.close"))
    cid, mid = args.get("class_id") or 0, args.get("method_id") or 0
    if (cid or mid) and cat.spec.method_by_ids().get((cid, mid)) is None:
        out.append(cat.finding(ev, "close.method-id", WARNING, f"{name} names class {cid} method {mid}, which does not exist"))


# --- functional classes -----------------------------------------------------------------------------


def functional(cat: Catalogue, cs: ConnState, ch: ChanState, ev: Frame, name: str, args: dict[str, Any],
               nowait: bool, out: list[Finding]) -> None:  # fmt: skip
    f = _HANDLERS.get((ev.dir or "", name))
    if f is not None:
        f(cat, cs, ch, ev, args, nowait, out)


def _deliver(cat: Catalogue, cs: ConnState, ch: ChanState, ev: Frame, args: dict[str, Any], nowait: bool,
             out: list[Finding]) -> None:  # fmt: skip
    tag = args.get("delivery_tag") or 0
    if ev.method == "basic.get-ok":
        no_ack = ch.gets.popleft() if ch.gets else False
    else:
        no_ack = ch.consumers.get(str(args.get("consumer_tag")), False)
    if tag == 0:
        out.append(cat.finding(ev, "delivery-tag.non-zero", VIOLATION, f"{ev.method} with delivery-tag 0"))
        return
    if not no_ack:
        ch.unacked.add(tag)
        ctag = str(args.get("consumer_tag"))
        limit = ch.limits.get(ctag) if ev.method == "basic.deliver" and not ch.tx else None
        if limit:
            ch.owner[tag] = ctag
            n = ch.outstanding[ctag] = ch.outstanding.get(ctag, 0) + 1
            if n > limit:
                out.append(cat.finding(ev, "basic.qos.prefetch-count.01", VIOLATION,
                                       f"{n} unacknowledged deliveries to consumer {ctag!r}, whose prefetch-count "
                                       f"is {limit}"))  # fmt: skip
    ch.max_tag = max(ch.max_tag, tag)


def _get(cat: Catalogue, cs: ConnState, ch: ChanState, ev: Frame, args: dict[str, Any], nowait: bool,
         out: list[Finding]) -> None:  # fmt: skip
    ch.gets.append(bool(args.get("no_ack")))


def _get_empty(cat: Catalogue, cs: ConnState, ch: ChanState, ev: Frame, args: dict[str, Any], nowait: bool,
               out: list[Finding]) -> None:  # fmt: skip
    if ch.gets:
        ch.gets.popleft()


def _settle(cat: Catalogue, cs: ConnState, ch: ChanState, ev: Frame, args: dict[str, Any], nowait: bool,
            out: list[Finding]) -> None:  # fmt: skip
    """Client ack/nack/reject against the channel's delivery-tag ledger."""
    tag = args.get("delivery_tag") or 0
    multiple = bool(args.get("multiple"))
    method = ev.method or ""
    rid = f"{method}.multiple.exists" if method != "basic.reject" else "basic.ack.multiple.exists"
    if multiple:
        settled = {t for t in ch.unacked if t <= tag} if tag else set(ch.unacked)
        if settled or tag == 0:
            ch.unacked -= settled
            if ch.tx:
                ch.tx_settled |= settled
            if ch.owner:
                for t in settled:
                    _release(ch, t)
            return
    elif tag in ch.unacked:
        ch.unacked.discard(tag)
        if ch.tx:
            ch.tx_settled.add(tag)
        if ch.owner:
            _release(ch, tag)
        return
    if tag and tag <= ch.max_tag:
        why = f"delivery-tag {tag} was already acknowledged or was delivered with no-ack"
    else:
        other = next((n for n, c in cs.chans.items() if c is not ch and tag in c.unacked), None)
        if other is not None:
            out.append(cat.finding(ev, "delivery-tag.channel-local", VIOLATION,
                                   f"{method} on channel {ev.channel} of delivery-tag {tag} issued on channel {other}"))
            return
        why = f"delivery-tag {tag} was never delivered on channel {ev.channel}"
    out.append(cat.finding(ev, rid, VIOLATION, f"{method}: {why}"))


def _release(ch: ChanState, tag: int) -> None:
    ctag = ch.owner.pop(tag, None)
    if ctag is not None:
        ch.outstanding[ctag] -= 1


def _qos(cat: Catalogue, cs: ConnState, ch: ChanState, ev: Frame, args: dict[str, Any], nowait: bool,
         out: list[Finding]) -> None:  # fmt: skip
    if ev.dir == C2S:
        ch.qos.append((int(args.get("prefetch_count") or 0), bool(args.get("global_"))))
        if args.get("prefetch_size"):
            out.append(cat.finding(ev, "rabbitmq.not-implemented", INFO, "basic.qos with prefetch-size (RabbitMQ "
                                   "answers 540)"))  # fmt: skip
    elif ch.qos:
        count, glob = ch.qos.popleft()
        if not glob:
            # global=0: a limit for each consumer created from now on (RabbitMQ; the spec's per-channel
            # reading is stricter, so checking per consumer never reports what either reading allows)
            ch.prefetch = count


def _flow(cat: Catalogue, cs: ConnState, ch: ChanState, ev: Frame, args: dict[str, Any], nowait: bool,
          out: list[Finding]) -> None:  # fmt: skip
    d = ev.dir or C2S
    active = bool(args.get("active"))
    if ev.method == "channel.flow":
        ch.flow[d] = active
        if d == C2S and not active:
            out.append(cat.finding(ev, "rabbitmq.not-implemented", INFO, "channel.flow active=0 from the client "
                                   "(RabbitMQ answers 540)"))  # fmt: skip
        return
    asked = ch.flow.pop(S2C if d == C2S else C2S, None)
    if asked is not None and asked != active:
        out.append(cat.finding(ev, "channel.flow-ok.active", VIOLATION,
                               f"channel.flow-ok active={int(active)} confirms a channel.flow active={int(asked)}"))


def _confirm(cat: Catalogue, cs: ConnState, ch: ChanState, ev: Frame, args: dict[str, Any], nowait: bool,
             out: list[Finding]) -> None:  # fmt: skip
    """Server ack/nack of publishes (confirm mode): tags count publishes from 1."""
    if not ch.confirm:
        out.append(cat.finding(ev, "basic.ack.confirm-mode", VIOLATION, f"{ev.method} from the server on a channel "
                               "not in confirm mode"))
        return
    tag = args.get("delivery_tag") or 0
    if tag == 0:
        out.append(cat.finding(ev, "delivery-tag.non-zero", VIOLATION, f"{ev.method} from the server with delivery-tag 0"))
        return
    if args.get("multiple"):
        unconfirmed, low = ch.unconfirmed, ch.confirmed_below
        if tag - low < len(unconfirmed):
            # tags below `low` were all settled before: look only at the tags since, not at the
            # whole window of outstanding publishes on every ack
            done = {t for t in range(low, tag + 1) if t in unconfirmed}
        else:
            done = {t for t in unconfirmed if t <= tag}
        ch.confirmed_below = max(low, tag + 1)  # nothing at or below tag is left unconfirmed
        if done or tag in unconfirmed:
            unconfirmed -= done
            return
    elif tag in ch.unconfirmed:
        ch.unconfirmed.discard(tag)
        return
    why = "was already confirmed" if tag <= ch.published else f"is above the {ch.published} publishes so far"
    out.append(cat.finding(ev, f"{ev.method}.multiple.exists", VIOLATION, f"{ev.method} of publish {tag}, which {why}"))


def _publish(cat: Catalogue, cs: ConnState, ch: ChanState, ev: Frame, args: dict[str, Any], nowait: bool,
             out: list[Finding]) -> None:  # fmt: skip
    if ch.confirm:
        ch.published += 1
        ch.unconfirmed.add(ch.published)
    if args.get("immediate"):
        out.append(cat.finding(ev, "rabbitmq.not-implemented", INFO, "basic.publish with immediate=1 (RabbitMQ: 540)"))


def _select(cat: Catalogue, cs: ConnState, ch: ChanState, ev: Frame, args: dict[str, Any], nowait: bool,
            out: list[Finding]) -> None:  # fmt: skip
    # set on the request, not the -ok: a pipelining client may commit before select-ok arrives
    if ev.method == "tx.select":
        ch.tx = True
    else:
        ch.confirm = True


def _transacted(cat: Catalogue, cs: ConnState, ch: ChanState, ev: Frame, args: dict[str, Any], nowait: bool,
                out: list[Finding]) -> None:  # fmt: skip
    if not ch.tx:
        out.append(cat.finding(ev, f"{ev.method}.transacted", VIOLATION, f"{ev.method} on a channel without tx.select"))
        return
    if ev.method == "tx.rollback":
        ch.unacked |= ch.tx_settled  # acks inside a rolled-back transaction never happened
    ch.tx_settled.clear()


def _recover(cat: Catalogue, cs: ConnState, ch: ChanState, ev: Frame, args: dict[str, Any], nowait: bool,
             out: list[Finding]) -> None:  # fmt: skip
    # recover requeues every unacknowledged delivery; they come back with new tags, the old ones are void
    ch.unacked.clear()
    ch.tx_settled.clear()
    ch.owner.clear()
    ch.outstanding.clear()


def _declare_ok(cat: Catalogue, cs: ConnState, ch: ChanState, ev: Frame, args: dict[str, Any], nowait: bool,
                out: list[Finding]) -> None:  # fmt: skip
    ch.queue_known = True


def _declare(cat: Catalogue, cs: ConnState, ch: ChanState, ev: Frame, args: dict[str, Any], nowait: bool,
             out: list[Finding]) -> None:  # fmt: skip
    if nowait and args.get("queue"):
        ch.queue_known = True  # no declare-ok will come; RabbitMQ still remembers the name


def _queue_known(cat: Catalogue, cs: ConnState, ch: ChanState, ev: Frame, args: dict[str, Any], nowait: bool,
                 out: list[Finding]) -> None:  # fmt: skip
    if not args.get("queue") and not ch.queue_known:
        out.append(cat.finding(ev, f"{ev.method}.queue.queue-known", VIOLATION,
                               f"{ev.method} with an empty queue name and no queue declared on channel {ev.channel}"))


def _consume(cat: Catalogue, cs: ConnState, ch: ChanState, ev: Frame, args: dict[str, Any], nowait: bool,
             out: list[Finding]) -> None:  # fmt: skip
    tag, no_ack = str(args.get("consumer_tag") or ""), bool(args.get("no_ack"))
    if tag and tag in ch.consumers:
        out.append(cat.finding(ev, "basic.consume.consumer-tag.01", VIOLATION,
                               f"consumer tag {tag!r} is already active on channel {ev.channel}"))
        return
    if nowait:
        if tag:
            ch.consumers[tag] = no_ack
            if ch.prefetch:
                ch.limits[tag] = ch.prefetch
    else:
        ch.consumes.append((tag, no_ack))


def _consume_ok(cat: Catalogue, cs: ConnState, ch: ChanState, ev: Frame, args: dict[str, Any], nowait: bool,
                out: list[Finding]) -> None:  # fmt: skip
    no_ack = ch.consumes.popleft()[1] if ch.consumes else False
    tag = str(args.get("consumer_tag") or "")
    ch.consumers[tag] = no_ack
    if ch.prefetch:
        ch.limits[tag] = ch.prefetch


def capability(cat: Catalogue, cs: ConnState, ev: Frame, name: str, out: list[Finding]) -> None:
    """RabbitMQ's extensions the server sends only to clients that announced them in start-ok's
    client-properties capabilities (consumer-cancel notification, blocked connection notification)."""
    need = _CAPABILITIES.get(name)
    if need is None or ev.dir != S2C or cs.capabilities is None or need in cs.capabilities:
        return
    # not in the spec: a client that did not ask may not understand the method
    out.append(cat.finding(ev, "capability.not-announced", WARNING,
                           f"server sent {name}, but the client did not announce the {need!r} capability"))


_CAPABILITIES = {"basic.cancel": "consumer_cancel_notify", "connection.blocked": "connection.blocked",
                 "connection.unblocked": "connection.blocked"}  # fmt: skip


def _cancel(cat: Catalogue, cs: ConnState, ch: ChanState, ev: Frame, args: dict[str, Any], nowait: bool,
            out: list[Finding]) -> None:  # fmt: skip
    tag = str(args.get("consumer_tag") or "")
    if ev.dir == C2S and tag not in ch.consumers:
        other = next((n for n, c in cs.chans.items() if c is not ch and tag in c.consumers), None)
        if other is not None:
            out.append(cat.finding(ev, "basic.consume.consumer-tag.02", VIOLATION,
                                   f"basic.cancel on channel {ev.channel} of consumer {tag!r} created on channel {other}"))
            return
    if nowait or ev.dir == S2C:
        ch.consumers.pop(tag, None)


def _cancel_ok(cat: Catalogue, cs: ConnState, ch: ChanState, ev: Frame, args: dict[str, Any], nowait: bool,
               out: list[Finding]) -> None:  # fmt: skip
    ch.consumers.pop(str(args.get("consumer_tag") or ""), None)


def _not_implemented(what: str):  # type: ignore[no-untyped-def]
    def check(cat: Catalogue, cs: ConnState, ch: ChanState, ev: Frame, args: dict[str, Any], nowait: bool,
              out: list[Finding]) -> None:  # fmt: skip
        bad = {"basic.qos": args.get("prefetch_size"), "channel.flow": args.get("active") is False,
               "basic.recover-async": args.get("requeue") is False}.get(ev.method or "")  # fmt: skip
        if bad:
            out.append(cat.finding(ev, "rabbitmq.not-implemented", INFO, f"{what} (RabbitMQ answers 540)"))

    return check


_HANDLERS: dict[tuple[str, str], Any] = {
    (S2C, "basic.deliver"): _deliver, (S2C, "basic.get-ok"): _deliver, (C2S, "basic.get"): _get,
    (S2C, "basic.get-empty"): _get_empty,
    (C2S, "basic.ack"): _settle, (C2S, "basic.nack"): _settle, (C2S, "basic.reject"): _settle,
    (S2C, "basic.ack"): _confirm, (S2C, "basic.nack"): _confirm,
    (C2S, "basic.publish"): _publish, (C2S, "tx.select"): _select, (C2S, "confirm.select"): _select,
    (C2S, "tx.commit"): _transacted, (C2S, "tx.rollback"): _transacted, (C2S, "basic.recover"): _recover,
    (S2C, "queue.declare-ok"): _declare_ok, (C2S, "queue.declare"): _declare,
    (C2S, "queue.bind"): _queue_known, (C2S, "queue.unbind"): _queue_known, (C2S, "queue.purge"): _queue_known,
    (C2S, "queue.delete"): _queue_known,
    (C2S, "basic.consume"): _consume, (S2C, "basic.consume-ok"): _consume_ok,
    (C2S, "basic.cancel"): _cancel, (S2C, "basic.cancel"): _cancel, (S2C, "basic.cancel-ok"): _cancel_ok,
    (C2S, "basic.qos"): _qos, (S2C, "basic.qos-ok"): _qos,
    (C2S, "channel.flow"): _flow, (S2C, "channel.flow"): _flow, (C2S, "channel.flow-ok"): _flow,
    (S2C, "channel.flow-ok"): _flow,
    (C2S, "basic.recover-async"): _not_implemented("basic.recover-async requeue=0"),
}  # fmt: skip



# --- checks the server's reply decides (checklist §3 "partly") -----------------------------------------

_RESERVED = {"exchange.declare": ("exchange", "exchange.declare.exchange.reserved"),
             "queue.declare": ("queue", "queue.declare.queue.reserved")}  # fmt: skip
SUSPECT_NAMES = frozenset({"exchange.declare", "exchange.delete", "queue.declare", "basic.publish",
                           "exchange.declare-ok", "queue.declare-ok", "channel.close"})  # fmt: skip
_STANDARD_TYPES = frozenset({"direct", "fanout", "topic", "headers"})
_STANDARD_EXCHANGES = frozenset({"", "amq.direct", "amq.fanout", "amq.topic", "amq.headers", "amq.match"})
MAX_SUSPECTS = 16


def suspects(cat: Catalogue, world: World, ch: ChanState, ev: Frame, name: str, args: dict[str, Any],
             out: list[Finding]) -> None:  # fmt: skip
    """Requests that break a rule only if the server's state says so, decided by its reply.

    A non-passive declare of an ``amq.`` name is legal when that exchange or queue already exists
    (amq.direct …), which only the server knows: a declare-ok clears it, a channel.close that
    refuses exactly that request (the oldest unanswered one) confirms the violation. A publish to
    an exchange nobody in the capture declared is confirmed by a channel.close 404 that arrives
    while no synchronous request is outstanding (RabbitMQ closes the channel asynchronously).
    """
    if ev.dir == C2S:
        what = _RESERVED.get(name)
        if what is not None and not args.get("passive"):
            value = str(args.get(what[0]) or "")
            if value.startswith("amq."):
                ch.suspects.append((what[1], ev.packet, f"{name} of {value!r}, a name reserved for standard "
                                                        f"{what[0]}s, without passive"))
        if name == "exchange.declare":
            ex, kind = str(args.get("exchange") or ""), str(args.get("type") or "")
            world.exchanges.add(ex)
            known = world.types.get(ex)
            if args.get("passive"):
                pass
            elif known is not None and kind != known:
                # RabbitMQ answers 406 (inequivalent arg 'type'), the spec 530 (errata §6)
                out.append(cat.finding(ev, "exchange.declare.type.typed", VIOLATION,
                                       f"exchange {ex!r} redeclared as {kind!r}; it was declared {known!r}"))
            elif kind not in _STANDARD_TYPES and not kind.startswith("x-"):
                ch.suspects.append(("exchange.declare.type.support", ev.packet,
                                    f"exchange.declare of type {kind!r}, which the server does not support"))
            if known is None and kind and not args.get("passive") and not args.get("auto_delete"):
                world.types[ex] = kind  # auto-delete exchanges vanish unseen: their type is not kept
        elif name == "exchange.delete":
            world.types.pop(str(args.get("exchange") or ""), None)
        elif name == "basic.publish":
            ex = str(args.get("exchange") or "")
            if ex not in _STANDARD_EXCHANGES and ex not in world.exchanges and len(ch.suspects) < MAX_SUSPECTS:
                ch.suspects.append(("basic.publish.exchange.must-exist", ev.packet,
                                    f"basic.publish to exchange {ex!r}, which does not exist"))
        return
    if not ch.suspects:
        return
    if name in ("exchange.declare-ok", "queue.declare-ok"):
        # the declares answered so far were legal (the name existed, the type is supported): those
        # older than the oldest request still outstanding (pairing has taken this reply's off)
        prefix = name.removesuffix("-ok") + "."
        head = ch.pending[C2S][0].packet if ch.pending[C2S] else None
        ch.suspects = [s for s in ch.suspects if not (s[0].startswith(prefix) and (head is None or s[1] < head))]
    elif name == "channel.close":
        head = ch.pending[C2S][0].packet if ch.pending[C2S] else None
        code = args.get("reply_code")
        text = str(args.get("reply_text") or "")
        confirmed = [s for s in ch.suspects if s[1] == head]
        if not confirmed and head is None and code == cat.get("basic.publish.exchange.must-exist").code:
            publishes = [s for s in ch.suspects if s[0] == "basic.publish.exchange.must-exist"]
            named = [s for s in publishes if s[2].split("'")[1] in text]  # RabbitMQ names the exchange
            confirmed = (named or publishes)[:1]
        _confirm_suspects(cat, ev, "channel.close", code, confirmed, out)
        ch.suspects.clear()


def suspects_on_connection_close(cat: Catalogue, cs: ConnState, ev: Frame, args: dict[str, Any],
                                 out: list[Finding]) -> None:  # fmt: skip
    """A hard error refusing a request (e.g. an unsupported exchange type, 503): the close names the
    refused method; the channel whose oldest outstanding request it is, is the one."""
    ids = (args.get("class_id"), args.get("method_id"))
    for n, ch in cs.chans.items():
        head = ch.pending[C2S][0] if ch.pending[C2S] else None
        if not ch.suspects or head is None or ids != _method_ids(cat, head.method):
            continue
        confirmed = [s for s in ch.suspects if s[1] == head.packet]
        _confirm_suspects(cat, ev, "connection.close", args.get("reply_code"), confirmed, out, channel=n)
        ch.suspects.clear()


def _method_ids(cat: Catalogue, name: str) -> tuple[int, int] | None:
    try:
        m = cat.spec.find_method(name)
    except KeyError:
        return None
    return m.class_index, m.index


def _confirm_suspects(cat: Catalogue, ev: Frame, close: str, code: Any, confirmed: list[tuple[str, int, str]],
                      out: list[Finding], channel: int | None = None) -> None:  # fmt: skip
    for rid, packet, message in confirmed:
        want = cat.get(rid).code
        verdict = "matches" if code == want else f"expected {want}"
        out.append(Finding(packet=packet, ts=ev.ts, conn=ev.conn, dir=C2S,
                           channel=ev.channel if channel is None else channel, rule=rid, severity=VIOLATION,
                           code=want, message=message, packets=(packet, ev.packet),
                           peer_reaction=f"server sent {close} {code} at packet {ev.packet}: {verdict}"))  # fmt: skip


# --- client rules the server's refusal proves ----------------------------------------------------------

# A rule the client must keep ("The client MUST NOT attempt to bind a queue that does not exist")
# as opposed to one the server keeps ("The server MUST NOT delete a queue that has consumers").
_CLIENT_RULE = re.compile(r"\b(client|peer)\b[^.]*\b(MUST|MAY NOT)\b", re.IGNORECASE)
# access-refused is left out: RabbitMQ refuses what a user's permissions forbid with 403 as well
_CONFIRMABLE = ("not-found", "resource-locked", "precondition-failed")


class Refusal(NamedTuple):
    rule: str
    field: str | None  # identifier of the field the rule is about
    name: str  # the rule's name
    text: str


def refusal_rules(spec: Spec) -> dict[tuple[str, int], tuple[Refusal, ...]]:
    """(request, reply code) -> the client rules of that request whose on-failure is that code."""
    out: dict[tuple[str, int], list[Refusal]] = {}
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
            out.setdefault((m.full_name, code), []).append(Refusal(rid, f.ident if f else None, r.name, first))
    return {k: tuple(v) for k, v in out.items()}


def refused(cs: ConnState, ch: ChanState, refusals: dict[tuple[str, int], tuple[Refusal, ...]], ev: Frame,
            args: dict[str, Any], out: list[Finding]) -> None:  # fmt: skip
    """The server closes the channel instead of answering the oldest outstanding request: when the
    code is the on-failure of one of that request's client rules, the close proves the client broke
    it (a queue.bind of a queue that does not exist, answered with 404)."""
    head = ch.pending[C2S][0] if ch.pending[C2S] else None
    code = args.get("reply_code")
    if head is None or not isinstance(code, int) or head.packet in cs.flagged:
        return  # nothing outstanding, or already reported from what the capture showed
    candidates = refusals.get((head.method, code))
    if not candidates:
        return
    hargs = head.args or {}
    text = str(args.get("reply_text") or "")
    quoted = [c for c in candidates if c.field and hargs.get(c.field) and f"'{hargs.get(c.field)}'" in text]
    pool = quoted or list(candidates)
    # an empty queue name means the channel's last declared queue: then "queue-known" is the rule
    pool.sort(key=lambda c: (c.name == "queue-known") == bool(c.field and hargs.get(c.field)))
    rule = pool[0]
    value = hargs.get(rule.field) if rule.field else None
    what = f" {rule.field.replace('_', '-')} {value!r}" if rule.field else ""
    out.append(Finding(packet=head.packet, ts=ev.ts, conn=ev.conn, dir=C2S, channel=ev.channel, rule=rule.rule,
                       severity=VIOLATION, code=code, message=f"{head.method}{what} refused with {code}: {rule.text}",
                       packets=(head.packet, ev.packet),
                       peer_reaction=f"server sent channel.close {code} at packet {ev.packet}: matches"))  # fmt: skip


# --- exclusive queues across connections -------------------------------------------------------------

_QUEUE_USERS = frozenset({"queue.declare", "queue.bind", "queue.unbind", "queue.purge", "queue.delete",
                          "basic.consume", "basic.get"})  # fmt: skip
EXCLUSIVE_NAMES = _QUEUE_USERS | {"queue.declare-ok"}


def exclusive(cat: Catalogue, world: World, ev: Frame, name: str, args: dict[str, Any], nowait: bool,
              out: list[Finding]) -> None:
    """queue.declare exclusive: no other connection may use the queue while its owner is open."""
    key = (ev.conn, ev.channel or 0)
    if ev.dir == S2C:
        if name == "queue.declare-ok":
            flags = world.declares.get(key)
            if flags and flags.popleft():
                world.exclusive[str(args.get("queue") or "")] = ev.conn
        return
    if name not in _QUEUE_USERS:
        return
    queue = str(args.get("queue") or "")
    owner = world.exclusive.get(queue)
    if owner is not None and owner != ev.conn:
        out.append(cat.finding(ev, "queue.declare.exclusive.exclusive", VIOLATION,
                               f"{name} of queue {queue!r}, declared exclusive by connection {owner}, "
                               "which is still open"))
    elif name == "queue.declare":
        if nowait:
            if args.get("exclusive") and queue:
                world.exclusive[queue] = ev.conn
        else:
            world.declares.setdefault(key, deque()).append(bool(args.get("exclusive")))
    elif name == "queue.delete" and owner == ev.conn:
        del world.exclusive[queue]

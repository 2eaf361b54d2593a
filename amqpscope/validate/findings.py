"""Rule ids, severities and reply codes: the catalogue the core's validator reports findings by.

Spec rules get ids from where the spec puts them (``<scope>.<rule name>``, e.g.
``basic.ack.multiple.exists``) and their reply code from ``on-failure`` resolved through the
spec's constants. Checks the XML does not name (frame rules, grammars, pairing) have ids of their
own, listed in `OWN_RULES` with the code a conforming peer would answer with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from amqpscope.events import Finding

if TYPE_CHECKING:
    from amqpscope.dissect.spec import Spec

VIOLATION, DEVIATION, WARNING, INFO = "violation", "deviation", "warning", "info"
# Not a fault of the traffic: what the capture does not show (BLIND_RULES). Below warning, so that
# `validate --fail-on warning` is about the traffic; `--fail-on not-seen` also fails on blindness.
NOT_SEEN = "not-seen"
SEVERITIES = (VIOLATION, DEVIATION, WARNING, NOT_SEEN, INFO)
RANK = {s: i for i, s in enumerate(SEVERITIES)}  # lower is worse


def at_or_above(severity: str, threshold: str) -> bool:
    return RANK[severity] <= RANK[threshold]


def counted(n: int, severity: str) -> str:
    """'2 violations', '1 warning', '3 not seen'."""
    if severity == NOT_SEEN:
        return f"{n} not seen"
    return f"{n} {severity}{'s' if n != 1 else ''}"


def not_seen(f: Finding) -> bool:
    """The finding says what the capture does not show, not what the traffic did wrong."""
    return f.severity == NOT_SEEN


# Rules that are not <rule> elements: id -> (constant name of the reply code or None, what it checks).
OWN_RULES: dict[str, tuple[str | None, str]] = {
    "frame.end": ("frame-error", "frame-end octet is 0xCE"),
    "frame.malformed": ("frame-error", "bytes that cannot be framed"),
    "frame.type": ("frame-error", "frame type is one the spec defines"),
    "frame.heartbeat-channel": ("frame-error", "heartbeats only on channel 0"),
    "frame.heartbeat-size": ("frame-error", "heartbeats have an empty payload"),
    "frame.connection-channel": ("command-invalid", "connection methods only on channel 0"),
    "frame.channel-zero": ("channel-error", "no other methods and no content on channel 0"),
    "frame.max-size": ("frame-error", "frame size (payload + 8) within the negotiated frame-max"),
    "frame.min-size": ("frame-error", "frames before tune-ok within frame-min-size"),
    "frame.channel-max": ("channel-error", "channel numbers within the negotiated channel-max"),
    "frame.undecodable": ("syntax-error", "method or header payload decodes exactly"),
    "content.sequence": ("unexpected-frame", "header after a content method, then bodies, nothing else between"),
    "content.class-id": ("unexpected-frame", "content header class-id equals the method's class"),
    "content.body-size": ("frame-error", "body frames sum exactly to the header's body-size"),
    "protocol.header-version": (None, "the client's protocol header names the spec's version"),
    "protocol.header-reply": (None, "the server answers an unsupported header with its own header"),
    "protocol.header-missing": (None, "the client starts with the protocol header, not with frames"),
    "connection.close.handshake": (None, "before open-ok an error closes the socket without a close method"),
    "grammar.connection": ("command-invalid", "channel 0 follows the connection grammar"),
    "grammar.channel": ("command-invalid", "each channel follows the channel grammar"),
    "method.direction": ("command-invalid", "the method is sent by a peer its chassis allows"),
    "method.unknown": ("command-invalid", "the method exists in the spec"),
    "sync.unexpected-reply": ("command-invalid", "a reply answers an outstanding request"),
    "sync.wrong-reply": ("command-invalid", "the reply is one the request's <response> names"),
    "sync.pipelined": (None, "a synchronous request waits for the previous reply"),
    "channel.not-open": ("channel-error", "channel used only between open and close"),
    "connection.close-ok.missing": (None, "connection.close is answered with close-ok"),
    "connection.close.missing": (None, "an open connection ends with connection.close, not a dropped socket"),
    "channel.close-ok.missing": (None, "channel.close is answered with close-ok (or a connection close)"),
    "close.reply-code": (None, "close reply codes are defined constants of the right class"),
    "close.method-id": (None, "close names a real class and method, or 0/0"),
    "delivery-tag.non-zero": (None, "the server never sends delivery-tag 0"),
    "delivery-tag.channel-local": ("precondition-failed", "acks refer to tags of the same channel"),
    "basic.ack.confirm-mode": ("command-invalid", "server acks only on channels in confirm mode"),
    "connection.start-ok.mechanism.validity": (None, "the mechanism is one the server offered"),
    "connection.start-ok.locale.validity": (None, "the locale is one the server offered"),
    "connection.tune-ok.frame-max.minimum": ("not-allowed", "negotiated frame-max 0 or >= frame-min-size"),
    "connection.tune-ok.frame-max.upper-limit": ("not-allowed", "tune-ok frame-max <= tune frame-max"),
    "rabbitmq.not-implemented": ("not-implemented", "RabbitMQ answers 540 to this"),
    "channel.flow-ok.active": (None, "flow-ok confirms the active value of the flow it answers"),
    "field.reserved": (None, "reserved fields are zero or empty"),
    "capability.not-announced": (None, "RabbitMQ extension methods only to clients that announced the capability"),
    "heartbeat.silence": (None, "a peer is never silent for two negotiated heartbeat intervals"),
    "connection.frame-after-close-received": (None, "no client method after its TCP ACK covered the server's "
                                              "connection.close"),
    # what the capture does not show (severity not-seen; crates/amqpscope-core/src/validate/rules/blind.rs)
    "capture.gap": (None, "every byte of a connection is in the capture (its gaps, and the messages they cut)"),
    "capture.midstream-start": (None, "the capture holds each connection from its start"),
    "capture.truncated": (None, "the capture file ends with a whole record"),
    "tls.undecrypted": (None, "every record of a TLS connection is decrypted (--tls-keylog with its keys)"),
    "tls.keylog-unmatched": (None, "a --tls-keylog file holds the keys of some TLS connection of the run"),
}

# The rules whose findings are of severity NOT_SEEN (the core's, and the key log's made by the CLI).
BLIND_RULES = ("capture.truncated", "tls.keylog-unmatched", "tls.undecrypted", "capture.midstream-start",
               "capture.gap")  # fmt: skip


@dataclass(frozen=True, slots=True)
class RuleInfo:
    id: str
    code: int | None
    text: str


class Catalogue:
    """Every rule id the validator may report, with its reply code, for one spec."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.rules: dict[str, RuleInfo] = {}
        for rid, (const, text) in OWN_RULES.items():
            self.rules[rid] = RuleInfo(rid, spec.constant(const) if const else None, text)
        for scope, rule in _spec_rules(spec):
            rid = f"{scope.removeprefix('domain:')}.{rule.name}".replace(" ", "-")
            code = spec.constant(rule.on_failure) if rule.on_failure else None
            self.rules.setdefault(rid, RuleInfo(rid, code, rule.text))

    def get(self, rid: str) -> RuleInfo:
        info = self.rules.get(rid)
        if info is None:  # an assert id or a rule the running spec lacks: no code
            info = self.rules[rid] = RuleInfo(rid, None, "")
        return info


def _spec_rules(spec: Spec):  # type: ignore[no-untyped-def]
    for d in spec.domains.values():
        for r in d.rules:
            yield r.scope, r
    for c in spec.classes:
        for r in c.rules:
            yield r.scope, r
        for m in c.methods:
            for r in m.rules:
                yield r.scope, r
            for f in m.fields:
                for r in f.rules:
                    yield r.scope, r


# --- what RabbitMQ accepts ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tolerated:
    """A spec deviation the broker accepts: findings of ``rules`` (whose message contains
    ``contains``, when given) are quirks, not causes. ``when="unanswered"`` narrows it further: only
    when the peer did not close in reaction; ``when="never"``: never chosen from the finding alone
    (``diagnose`` picks it by id, with ``tolerance``, when the frames around it decide)."""

    id: str
    rules: tuple[str, ...]
    summary: str
    source: str  # the broker's code or the observed behaviour that says it is accepted
    contains: str | None = None
    when: str | None = None


# Each source names the broker version and the behaviour that shows it accepts the deviation.
_RABBITMQ = "RabbitMQ 3.10"

# The one table of broker tolerance, beside the rule ids above; `validate` marks these findings as
# quirks and `diagnose` counts them per client library instead of reporting causes.
BROKER_TOLERATES: tuple[Tolerated, ...] = (
    Tolerated("empty-reply-text",
              ("channel.close.reply-text.assert-notnull", "connection.close.reply-text.assert-notnull"),
              "empty reply text on channel.close/connection.close",
              f"{_RABBITMQ} answers with close-ok and only logs the client's reply text (seen with AMQPStorm, "
              "py-amqp and aiormq)"),
    Tolerated("reply-code-zero",
              ("channel.close.reply-code.assert-notnull", "connection.close.reply-code.assert-notnull"),
              "reply code 0 on a normal channel.close/connection.close",
              f"{_RABBITMQ} answers with close-ok (seen with pika's channel.close, AMQPStorm's and py-amqp's "
              "connection.close)"),
    Tolerated("reply-code-zero", ("close.reply-code",), "reply code 0 on a normal close",
              f"{_RABBITMQ} answers with close-ok", contains="reply code 0,"),
    Tolerated("out-of-band-zero", ("field.reserved",), "'0' instead of an empty string in channel.open's "
              "reserved out-of-band field", f"{_RABBITMQ} ignores the field and answers with channel.open-ok "
              "(seen with pamqp: AMQPStorm, aio-pika)", contains="channel.open reserved-1"),
    Tolerated("insist-bit", ("field.reserved",), "the insist bit set in connection.open",
              f"{_RABBITMQ} ignores insist and answers with connection.open-ok (seen with pika, rabbitmq-c)",
              contains="connection.open reserved-2"),
    Tolerated("empty-locale", ("connection.start-ok.locale.validity",), "an empty locale in connection.start-ok",
              f"{_RABBITMQ} never checks the locale and goes on with connection.tune (streadway/amqp sends an "
              "empty one)", contains="locale ''"),
    Tolerated("unknown-locale", ("connection.start-ok.locale.validity",),
              "a locale in connection.start-ok that the broker did not offer",
              f"{_RABBITMQ} never checks the locale and goes on with connection.tune", when="unanswered"),
    Tolerated("frame-max-overrun", ("frame.max-size",), "body frames a little over the negotiated frame-max",
              f"{_RABBITMQ} checks frame sizes against its own frame_max with some slack and reads them "
              "(seen with AMQPStorm)", when="unanswered"),
    Tolerated("channel-above-max", ("frame.channel-max",), "a channel number above the negotiated channel-max",
              f"{_RABBITMQ} counts open channels, not channel numbers: it answers with channel.open-ok while "
              "fewer than channel_max channels are open", when="unanswered"),
    Tolerated("close-ok-not-sent", ("connection.close-ok.missing", "channel.close-ok.missing"),
              "the client drops TCP instead of answering the broker's close with close-ok",
              f"{_RABBITMQ} closes the socket anyway (seen with pika after 403/530/320, rabbitmq-c after a "
              "channel.close 403)"),
    # the same findings when TCP shows that the side that sent the close dropped the socket before
    # the answer could come: ``diagnose`` picks it by id (the finding alone cannot tell)
    Tolerated("close-then-drop", ("connection.close-ok.missing", "channel.close-ok.missing"),
              "the side that sent the close drops TCP right after it, before the close-ok can come",
              f"{_RABBITMQ} answers the client's FIN with RST (it closes sockets with linger 0) and frees the "
              "connection (seen with aiormq)", when="never"),
    Tolerated("tcp-close-without-close", ("connection.close.missing",),
              "the client ends TCP without connection.close after closing its channels",
              f"{_RABBITMQ} logs 'client unexpectedly closed TCP connection', answers the FIN with RST (linger 0) "
              "and frees the connection (seen with pika)", contains="with no channel open"),
    Tolerated("close-during-handshake", ("connection.close.handshake",),
              "the broker sends connection.close during the handshake instead of closing the socket",
              f"{_RABBITMQ} sends connection.close to clients announcing authentication_failure_close (its "
              "extension of the spec)"),
)  # fmt: skip


def tolerance(quirk: str) -> Tolerated:
    """The table entry of a quirk id (for a quirk chosen by more than the finding, close-then-drop)."""
    return next(t for t in BROKER_TOLERATES if t.id == quirk)


def tolerated(f: Finding, answered: bool | None = None) -> Tolerated | None:
    """The table entry that makes finding ``f`` a quirk, or None: the finding alone decides (the
    core's messages carry what an entry needs, e.g. whether channels were open at a TCP close).
    ``answered``: whether the peer's close answered the finding, when the caller judged it from the
    frames (``diagnose`` does: a close with another code on another request answers nothing);
    otherwise the finding's own ``peer_reaction`` says."""
    for t in BROKER_TOLERATES:
        if t.when == "never" or f.rule not in t.rules or (t.contains is not None and t.contains not in f.message):
            continue
        if t.when == "unanswered":
            if answered is None:
                answered = f.peer_reaction is not None and "no close" not in f.peer_reaction
            if answered:
                continue
        return t
    return None

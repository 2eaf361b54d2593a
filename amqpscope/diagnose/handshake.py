"""Connections that ended before connection.open-ok, and TCP connections on the AMQP port that
never spoke AMQP 0-9-1: the stage reached, who ended it, and what that stage's end usually means.

A broker's connection.close with an error code during the handshake is its own cause
(``closes``: login-refused, access-refused to a vhost); this module judges the rest from the last
handshake method seen and the TCP end (first FIN/RST and by whom).
"""

from __future__ import annotations

from ..events import C2S, S2C
from .endings import PARTY, segment, tcp_details
from .facts import ConnFacts
from .model import NOTICE, WARNING, Diagnosis, make

# the core's ``opening`` (what a connection that never spoke 0-9-1 started with), as words
OPENINGS = {
    "amqp-1.0": "an AMQP 1.0 protocol header: an AMQP 1.0 client (Qpid Proton, an Azure Service Bus or "
                "ActiveMQ client) on a 0-9-1 port; RabbitMQ 3.10 speaks 1.0 only with the rabbitmq_amqp1_0 plugin",
    "amqp-0-10": "an AMQP 0-10 protocol header: a Qpid client of the 0-10 protocol, which RabbitMQ does not speak",
    "amqp-other": "an AMQP protocol header of a version RabbitMQ does not speak",
    "tls": "a TLS handshake (AMQPS) that the broker answered in plain AMQP: a TLS client on a port without TLS",
    "http": "an HTTP request: a browser, a health check or a management API client pointed at the AMQP port "
            "(the management UI listens on 15672)",
    "other": "bytes that are not AMQP: another protocol pointed at the AMQP port",
    "nothing": "nothing at all: a port probe or a TCP health check (a load balancer's), or a client that gave "
               "up before speaking",
}  # fmt: skip
# a client protocol header that names another protocol, for events of an older core (no ``opening``)
_HEADER_OPENINGS = {"1.0": "amqp-1.0", "0-10": "amqp-0-10"}


def opening(facts: ConnFacts) -> str | None:
    """What a connection that never spoke AMQP 0-9-1 started with, or None. The core says so
    (``opening``); for events without it: a header of another protocol, or, for a connection whose
    start is in the capture, no AMQP at all (nothing sent, or bytes that were not AMQP)."""
    if not facts.syn_seen and facts.header is None:
        return None  # the capture started after its first bytes: what it started with is not known
    if facts.opening is not None:
        return facts.opening
    if facts.header is not None:
        return _HEADER_OPENINGS.get(facts.header)
    if facts.opened or facts.stage is not None or not facts.syn_seen or facts.last_frame or facts.end_ts is None:
        return None
    return "nothing" if facts.bytes_c2s == 0 else "other"


# stage reached → (its name, why the client ends there, why the broker ends there)
STAGES: dict[str | None, tuple[str, str, str]] = {
    None: ("before the protocol header",
           "it gave up before speaking (a connect timeout, a TCP health check)",
           "the listener refused the connection (a connection limit, the node shutting down)"),
    "header": ("after the protocol header",
               "it gave up waiting for connection.start (its connect timeout) or expected TLS",
               "the listener refused the connection before connection.start (a connection limit, a TLS-only "
               "listener, the node shutting down)"),
    "connection.start": ("after connection.start",
                         "none of the offered mechanisms or locales suits it, it checked the server's properties "
                         "and gave up, or its own handshake timeout passed",
                         "the client did not answer connection.start within the broker's handshake_timeout "
                         "(10 s by default)"),
    "connection.start-ok": ("after connection.start-ok",
                            "its own timeout waiting for the broker passed",
                            "a refused login by a client that did not announce authentication_failure_close"),
    "connection.secure": ("after connection.secure",
                          "it cannot answer the authentication challenge",
                          "the client did not answer the challenge within the handshake_timeout"),
    "connection.secure-ok": ("after connection.secure-ok",
                             "its own timeout waiting for the broker passed",
                             "the challenge's answer was refused (a failed login)"),
    "connection.tune": ("after connection.tune",
                        "it does not accept the broker's frame_max, channel_max or heartbeat, or its own "
                        "timeout passed",
                        "the client did not answer connection.tune within the handshake_timeout"),
    "connection.tune-ok": ("after connection.tune-ok",
                           "it gave up before sending connection.open",
                           "tune-ok values it refuses (a frame_max below its minimum or above its offer), or no "
                           "connection.open within the handshake_timeout"),
    "connection.open": ("after connection.open",
                        "it gave up waiting for connection.open-ok (its own timeout)",
                        "a virtual host that does not exist or the user may not use (RabbitMQ usually says so "
                        "with connection.close 530), or a node shutting down"),
}  # fmt: skip


def handshake(facts: ConnFacts) -> list[Diagnosis]:
    """not-amqp, login-refused (a TCP close after start-ok) or handshake-aborted, for a connection
    that never reached connection.open-ok."""
    if facts.was_open or facts.end_ts is None or facts.ended not in ("fin", "rst", "connection.close"):
        return []  # open, or still going when the capture ended
    started = opening(facts)
    plain = facts.server_header is not None or (facts.tls_version is None and bool(facts.tls_bytes_s2c))
    if started == "tls" and not plain:
        return []  # a TLS connection captured without its keys: not seen, not a fault (blind.py says so)
    if started is not None:
        return [_not_amqp(facts, started)]
    if any(c.channel == 0 and c.by == S2C and c.code not in (0, 200) for c in facts.closes):
        return []  # the broker said why (closes: login-refused, access-refused, connection-closed)
    if facts.stage is None and facts.header is None and not facts.syn_seen:
        return []  # the capture started after whatever this connection said
    who, tcp = facts.who, facts.tcp
    closed = next((c for c in facts.closes if c.channel == 0), None)
    first = tcp.first()
    if closed is not None:
        by, how, cutoff, act = closed.by, f"sent connection.close {closed.code} (packet {closed.packet})", \
            closed.packet, "connection.close"  # fmt: skip
    elif first is not None:
        by, how = first[0], f"{'closed' if first[1] == 'fin' else 'reset'} TCP ({segment(first[1], first[2])})"
        cutoff, act = first[2], first[1].upper()
    else:
        by, how, cutoff, act = None, f"ended the connection ({facts.ended})", None, ""
    reached = stage_reached(facts, cutoff)
    if reached is None:
        return []  # the capture started after what this connection said before its end
    stage, at, late = reached
    name, client_why, broker_why = STAGES.get(stage, (f"after {stage}", "", ""))
    packets = [p for p in (at,) if p is not None]
    if closed is not None:
        packets.append(closed.packet)
    elif first is not None:
        packets.append(first[2])
    elif facts.end_packet is not None:
        packets.append(facts.end_packet)
    if late is not None:
        # the other side's step crossed the ender's end: the ender never saw it, so the reasons
        # that read that step (its mechanisms, its tune values) do not apply
        done = f" {_done(stage, by)}," if stage is not None else ""
        how = f"{how}{done} before {_step(late)} arrived (packet {late[2]})"
        packets.append(late[2])
    if by in (S2C, None) and stage in ("connection.start-ok", "connection.secure-ok") and closed is None:
        return [make("login-refused", who, channel=None, packets=packets, since=facts.start_ts, until=facts.end_ts,
                     summary=f"{who.phrase()}: the broker {how} right after {stage}: a refused login by a client "
                     "that did not announce authentication_failure_close; check the credentials and the auth "
                     "mechanism", broker_action=f"{how} without connection.close",
                     details=tcp_details(facts, "client", stage=stage))]  # fmt: skip
    party = PARTY.get(by or "", "unknown")
    # a client ending its own handshake is often its application giving up (a cancelled task, a test)
    client_why = f"{client_why}, or the application abandoned the attempt" if client_why else client_why
    why = client_why if by == C2S else broker_why if by == S2C else f"{client_why}; or {broker_why}"
    ender = "the client" if by == C2S else "the broker" if by == S2C else "one side"
    answer = tcp.answer()
    action = how if by != C2S else f"answered the client's FIN with RST (packet {answer[2]}): linger 0" \
        if answer is not None and answer[1] == "rst" else "nothing: the client ended it"  # fmt: skip
    if late is not None and by == C2S and late[1] == S2C:
        action = f"{action}; its {_step(late, own=True)} (packet {late[2]}) came after the client's {act}"
    return [make("handshake-aborted", who, channel=None, packets=packets, since=facts.start_ts, until=facts.end_ts,
                 severity=WARNING if by == C2S else None,
                 summary=f"the handshake of {who.phrase()} ended {name}: {ender} {how}"
                 + (f"; likely {why}" if why else ""), broker_action=action,
                 details=tcp_details(facts, party, stage=stage or "none", ended_by=party,
                                     **_late(late)))]  # fmt: skip


Step = tuple[str, str, int]  # (a connection.* method or "header", dir, packet)


def stage_reached(facts: ConnFacts, cutoff: int | None) -> tuple[str | None, int | None, Step | None] | None:
    """The handshake stage the side that ended the connection had reached when it ended it at
    packet ``cutoff`` (its FIN, RST or connection.close): the last step at or before that packet,
    the step's packet, and the first step that arrived after it (the other side's, never seen by
    the ender). None when no step came before and the capture missed the connection's start."""
    steps = [("header", C2S, facts.header_packet)] if facts.header_packet is not None else []
    steps = sorted(steps + list(facts.steps), key=lambda s: s[2])
    before = [s for s in steps if cutoff is None or s[2] <= cutoff]
    after = [s for s in steps if cutoff is not None and s[2] > cutoff]
    if before:
        return before[-1][0], before[-1][2], after[0] if after else None
    if facts.header is None and not facts.syn_seen:
        return None
    return None, None, after[0] if after else None


def _step(step: Step, own: bool = False) -> str:
    what = "protocol header" if step[0] == "header" else step[0]
    return what if own else f"the {PARTY[step[1]]}'s {what}"


def _done(stage: str, by: str | None) -> str:
    """What the ender had done last: 'after sending connection.start-ok' or 'after receiving …'."""
    if stage == "header":
        return "after sending its protocol header" if by == C2S else "after receiving the client's protocol header"
    sent = (stage in _CLIENT_STEPS) == (by == C2S)
    return f"after {'sending' if sent else 'receiving'} {stage}"


# the handshake methods a client sends (the others are the broker's)
_CLIENT_STEPS = frozenset({"connection.start-ok", "connection.secure-ok", "connection.tune-ok", "connection.open"})


def _late(late: Step | None) -> dict[str, object]:
    if late is None:
        return {}
    return {"arrived_after_end": {"method": _step(late, own=True), "by": PARTY[late[1]], "packet": late[2]}}


def _not_amqp(facts: ConnFacts, started: str) -> Diagnosis:
    who = facts.who
    what = OPENINGS.get(started, OPENINGS["other"])
    first = facts.tcp.first()
    packets = [p for p in (facts.header_packet,) if p is not None]
    if first is not None:
        packets.append(first[2])
        end = f"; {PARTY[first[0]]} ended it ({segment(first[1], first[2])})"
    else:
        end = ""
    answer = f"answered with its own protocol header (AMQP {facts.server_header})" if facts.server_header else \
        f"answered with {facts.tls_bytes_s2c} bytes that are no TLS (its AMQP header)" if started == "tls" else ""  # fmt: skip
    if first is not None and first[0] == S2C:
        closing = f"{'closed' if first[1] == 'fin' else 'reset'} the connection ({segment(first[1], first[2])})"
        answer = f"{answer} and {closing}" if answer else closing
    return make("not-amqp", who, channel=None, packets=packets or [facts.start_packet], since=facts.start_ts,
                until=facts.end_ts or facts.start_ts, severity=NOTICE if started == "nothing" else None,
                summary=f"a TCP connection from {who.client or 'an unknown client'} to the AMQP port never spoke "
                f"AMQP 0-9-1: it started with {what}{end}",
                broker_action=answer or "nothing seen", details=tcp_details(facts, "client", opening=started))  # fmt: skip

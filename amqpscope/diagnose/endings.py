"""How an open connection ended when no AMQP close says why: from TCP, who sent the first FIN or
RST (the core's close event), and who had gone silent.

RabbitMQ closes sockets with SO_LINGER 0: it answers a client's FIN with RST, after a normal close
as after a client that just drops its socket. So the side that ended TCP first is the one that
acted, and the RST after it is the broker's answer, not a crash or a network fault (the broker's
behaviour on the wire: docs/diagnose.md, "How a connection ended").
"""

from __future__ import annotations

from typing import Any

from ..events import C2S, S2C
from .facts import ConnFacts
from .model import Diagnosis, Thresholds, Who, make, plural

PARTY = {C2S: "client", S2C: "broker"}
_HOW = {"fin": "closed TCP (FIN", "rst": "reset TCP (RST"}


def other(d: str) -> str:
    return S2C if d == C2S else C2S


def segment(how: str, packet: int) -> str:
    """'FIN, packet 12' / 'RST, packet 12'."""
    return f"{how.upper()}, packet {packet}"


def ending(facts: ConnFacts) -> dict[str, Any]:
    """How a connection ended, as plain data: its AMQP close (who sent connection.close, at which
    packet, and the close-ok's packet or None) and its TCP end (first FIN and RST, by whom)."""
    close = next((c for c in facts.closes if c.channel == 0), None)
    amqp = None if close is None else {"by": PARTY[close.by], "packet": close.packet, "close_ok_packet": close.ok_packet}
    return {"amqp_close": amqp, "tcp": facts.tcp.record()}


def tcp_details(facts: ConnFacts, blamed: str, **more: Any) -> dict[str, Any]:
    return {"blamed": blamed, **ending(facts), **more}


def ended(facts: ConnFacts, th: Thresholds, explained: bool) -> list[Diagnosis]:
    """heartbeat-timeout, client-closed-tcp and connection-lost of a connection that was open.

    ``explained``: another cause of this connection already tells why it ended (a client that
    resets TCP after the broker's channel.close 403, rabbitmq-c, is not a lost connection)."""
    if not facts.was_open or facts.ended not in ("rst", "fin") or facts.end_ts is None:
        return []
    first = facts.tcp.first()
    timeout = heartbeat(facts, th, first)
    if timeout is not None:
        return [timeout]
    if explained:
        return []
    if first is None:
        return _lost_unknown(facts)
    by, how, packet = first
    if by == C2S and not facts.open_at_end:
        return []  # every channel was closed: the client ending TCP without close is a quirk
    if by == C2S and how == "fin":
        return [_client_closed(facts, packet)]
    return [_lost(facts, by, how, packet)]


def heartbeat(facts: ConnFacts, th: Thresholds, first: tuple[str, str, int] | None) -> Diagnosis | None:
    """One side silent past the heartbeat timeout, and the other side then ended TCP."""
    if not facts.heartbeat or facts.end_ts is None:
        return None
    end, who = facts.end_ts, facts.who
    limit = th.heartbeat_factor * facts.heartbeat
    for d in (C2S, S2C):
        # a reset by the other side is its timeout acting: RabbitMQ checks once per interval, so
        # the silence it acts on can be a little under the factor's limit as the capture times it
        slack = 0.9 if first is not None and first[0] != d and first[1] == "rst" else 1.0
        last = _silent(facts, d, limit * slack, end)
        if last is None or (first is not None and first[0] == d):
            continue  # the silent side ending TCP itself is no timeout of the other's
        actor = PARTY[other(d)]
        if first is not None:
            act = f"{_HOW[first[1]]}, packet {first[2]})"
            packets = [last[1], first[2]]
        else:
            act = "ended TCP" + (f" (packet {facts.end_packet})" if facts.end_packet is not None else "")
            packets = [last[1]] + ([facts.end_packet] if facts.end_packet is not None else [])
        silent = who.phrase() if d == C2S else f"the broker, talking to {who.phrase()},"
        summary = (f"{silent} sent nothing for {end - last[0]:.1f} s (its last frame: packet {last[1]}) with a "
                   f"negotiated heartbeat of {facts.heartbeat} s (a timeout of {th.heartbeat_factor:g} × "
                   f"{facts.heartbeat} s); the {actor} then {act} without connection.close"
                   + (f"; check for a blocked event loop or thread in the client{_PIKA if _is_pika(who) else ''}, "
                      "long GC pauses, the network" if d == C2S else "; check the broker's load and the network"))  # fmt: skip
        action = f"{act} without connection.close (its heartbeat timeout)" if d == C2S \
            else "kept sending heartbeats until the client ended the connection"  # fmt: skip
        return make("heartbeat-timeout", who, channel=None, packets=packets, since=last[0], until=end,
                    summary=summary, broker_action=action,
                    details=tcp_details(facts, PARTY[d], silent=PARTY[d], acted=actor,
                                        silence_s=round(end - last[0], 6),
                                        heartbeat_s=facts.heartbeat))  # fmt: skip
    return None


_PIKA = " (pika's BlockingConnection sends heartbeats only while it processes events)"


def _is_pika(who: Who) -> bool:
    return (who.product or "").lower().startswith("pika")


def _silent(facts: ConnFacts, d: str, limit: float, end: float) -> tuple[float, int] | None:
    """(time, packet) of direction ``d``'s last frame when it was silent for more than ``limit``
    seconds up to the TCP end: from the core ledger's ``heartbeat`` record of that direction (its
    ``idle`` and ``ref_packet``), or, for events without ledger records, from the last frame seen."""
    for r in facts.ledger:
        if r.entry == "heartbeat" and r.dir == d:
            if r.idle is None or r.idle <= limit:
                return None
            return end - r.idle, r.ref_packet if r.ref_packet is not None else r.packet
    last = facts.last_frame.get(d)
    return last if last is not None and end - last[0] > limit else None


def _channels(facts: ConnFacts) -> tuple[list[int], str]:
    chans = sorted(facts.open_at_end)
    listed = ", ".join(map(str, chans[:10])) + (" …" if len(chans) > 10 else "")
    return chans, f"{plural(len(chans), 'channel was', 'channels were')} open ({listed})"


def _last(facts: ConnFacts) -> tuple[float, int]:
    return max(facts.last_frame.values(), default=(facts.start_ts, facts.start_packet))


def _client_closed(facts: ConnFacts, fin: int) -> Diagnosis:
    who, tcp = facts.who, facts.tcp
    chans, open_ = _channels(facts)
    answer = tcp.answer()
    packets = [fin] + ([answer[2]] if answer is not None else [])
    reply = ""
    action = "dropped the connection's channels, requeueing their unacked deliveries"
    if answer is not None and answer[1] == "rst":
        reply = (f"; the broker's RST (packet {answer[2]}) is its answer (RabbitMQ closes sockets with linger 0), "
                 "not a network fault")  # fmt: skip
        action = f"answered the client's FIN with RST (packet {answer[2]}) and {action}"
    elif answer is not None:
        action = f"closed its side too (FIN, packet {answer[2]}) and {action}"
    last = _last(facts)
    return make("client-closed-tcp", who, channel=None, packets=packets, since=last[0], until=facts.end_ts or last[0],
                summary=f"{who.phrase()} closed TCP (FIN, packet {fin}) without connection.close while {open_}"
                f"{reply}; check that the client closes its connections (connection.close) before it drops the "
                "socket or exits", broker_action=action,
                details=tcp_details(facts, "client", open_channels=chans[:100]))  # fmt: skip


def _lost(facts: ConnFacts, by: str, how: str, packet: int) -> Diagnosis:
    who = facts.who
    chans, open_ = _channels(facts)
    last = _last(facts)
    if by == C2S:
        summary = (f"{who.phrase()} reset TCP (RST, packet {packet}) without connection.close while {open_}: a "
                   "killed or crashed process, or a socket closed with unread data")  # fmt: skip
        action = "nothing on the wire; it drops the connection's channels, requeueing their unacked deliveries"
    else:
        verb = "closed" if how == "fin" else "reset"
        summary = (f"the broker's side {verb} the TCP connection of {who.phrase()} ({segment(how, packet)}) without "
                   f"connection.close and without a heartbeat timeout the capture shows"
                   + (f", while {open_}" if chans else "")
                   + ": a broker node that stopped or crashed, a proxy or load balancer in between (idle timeout), "
                   "or the network")  # fmt: skip
        action = f"{verb} TCP ({segment(how, packet)}) without connection.close"
    return make("connection-lost", who, channel=None, packets=[last[1], packet], since=last[0],
                until=facts.end_ts or last[0], summary=summary, broker_action=action,
                details=tcp_details(facts, PARTY[by], ended=facts.ended, open_channels=chans[:100]))  # fmt: skip


def _lost_unknown(facts: ConnFacts) -> list[Diagnosis]:
    """No TCP facts (events of an older core): lost when channels were open, by whom unknown."""
    if not facts.open_at_end:
        return []
    who = facts.who
    chans, open_ = _channels(facts)
    how = "reset (RST)" if facts.ended == "rst" else "closed (FIN)"
    last = _last(facts)
    packets = [last[1]] + ([facts.end_packet] if facts.end_packet is not None else [])
    return [make("connection-lost", who, channel=None, packets=packets, since=last[0], until=facts.end_ts or last[0],
                 summary=f"the TCP connection of {who.phrase()} was {how} without the AMQP close handshake while "
                 f"{open_}; which side ended it first is not in the events: a crashed client, a killed process "
                 "or the network", broker_action="nothing on the wire; it drops the connection's channels, "
                 "requeueing their unacked deliveries",
                 details=tcp_details(facts, "unknown", ended=facts.ended, open_channels=chans[:100]))]  # fmt: skip


def close_ok_dropper(facts: ConnFacts, closer: str) -> bool | None:
    """Whether the side that sent a close dropped TCP first (before the other side's close-ok
    could come): True (the closer's doing), False (the other side's), None (TCP not known)."""
    first = facts.tcp.first()
    return None if first is None else first[0] == closer

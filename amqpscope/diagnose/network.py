"""How a connection ended when no AMQP close says why, and protocol errors no close answered."""

from __future__ import annotations

from ..events import C2S, S2C
from .facts import ConnFacts
from .model import CLIENT, Diagnosis, Thresholds, make

_PEER = {C2S: "client", S2C: "broker"}


def ended(facts: ConnFacts, th: Thresholds, explained: bool) -> list[Diagnosis]:
    """heartbeat-timeout, login-refused without a close, connection-lost (when nothing explains it).

    ``explained``: another cause of this connection already tells why it ended (a client that
    resets TCP after the broker's channel.close 403, rabbitmq-c, is not a lost connection)."""
    if facts.ended not in ("rst", "fin") or facts.end_ts is None:
        return []
    who, end = facts.who, facts.end_ts
    how = "reset (RST)" if facts.ended == "rst" else "closed (FIN)"
    packets = [facts.end_packet] if facts.end_packet is not None else []
    if facts.heartbeat:
        limit = th.heartbeat_factor * facts.heartbeat
        for d in (C2S, S2C):
            last = _silent(facts, d, limit, end)
            if last is not None:
                other = _PEER[S2C if d == C2S else C2S]
                return [make("heartbeat-timeout", who, channel=None, packets=[last[1], *packets], since=last[0],
                             until=end, summary=f"the {_PEER[d]} of {who.phrase()} sent nothing for "
                             f"{end - last[0]:.1f} s, more than {th.heartbeat_factor:g} × the negotiated "
                             f"heartbeat of {facts.heartbeat} s; the {other} then {how} the TCP connection "
                             "without connection.close (a blocked event loop or a dead peer)",
                             broker_action=f"{how} the TCP connection without connection.close" if d == C2S
                             else "kept sending heartbeats until the client dropped the connection",
                             details={"silent": _PEER[d], "silence_s": round(end - last[0], 6),
                                      "heartbeat_s": facts.heartbeat})]  # fmt: skip
    if facts.closes and any(c.channel == 0 for c in facts.closes):
        return []
    if not facts.opened and facts.stage == "connection.start-ok":
        return [make("login-refused", who, channel=None, packets=packets, since=facts.start_ts, until=end,
                     summary=f"{who.phrase()}: the broker {how} the connection right after connection.start-ok: "
                     "a refused login by a client that did not announce authentication_failure_close",
                     broker_action=f"{how} the TCP connection without connection.close")]  # fmt: skip
    if explained or not facts.open_at_end:
        return []  # every channel was closed: a client ending TCP without close is a quirk
    chans = sorted(facts.open_at_end)
    last = max((v for v in facts.last_frame.values()), default=(facts.start_ts, facts.start_packet))
    return [make("connection-lost", who, channel=None, packets=[last[1], *packets], since=last[0], until=end,
                 summary=f"the TCP connection of {who.phrase()} was {how} without the AMQP close handshake while "
                 f"{len(chans)} channel{'s were' if len(chans) != 1 else ' was'} open ({', '.join(map(str, chans[:10]))}"
                 f"{' …' if len(chans) > 10 else ''}): a crashed client, a killed process or the network",
                 broker_action="nothing on the wire; it drops the connection's channels, requeueing their unacked "
                 "deliveries", details={"ended": facts.ended, "open_channels": chans[:100]})]  # fmt: skip


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


def protocol_errors(facts: ConnFacts, used: set[int]) -> list[Diagnosis]:
    """Violation findings no close answered (``used``: ids of findings a close diagnosis took)."""
    out = []
    who = facts.who
    for f in facts.violations:
        if id(f) in used:
            continue
        cause = "client-protocol-error" if f.dir == C2S else "broker-protocol-error"
        reaction = f.peer_reaction or "no reaction recorded"
        out.append(make(cause, who, channel=f.channel, packets=f.packets, since=f.ts, until=f.ts, impact=CLIENT,
                        severity="warning",
                        summary=f"{who.phrase() if f.dir == C2S else 'the broker, talking to ' + who.phrase() + ','}"
                        f" broke rule {f.rule}"
                        f"{'' if f.channel is None else f' on channel {f.channel}'}: {f.message}",
                        broker_action=reaction if f.dir == C2S else f"the client: {reaction}",
                        details={"rule": f.rule, "code": f.code}))  # fmt: skip
    return out

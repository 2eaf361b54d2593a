"""Protocol errors no close answered: a violation stays a cause of its own (ranked under client
behaviour), with the reaction "none seen" when no close of the peer answers it (``causality``)."""

from __future__ import annotations

from ..events import C2S
from .facts import ConnFacts
from .model import CLIENT, Diagnosis, make


def protocol_errors(facts: ConnFacts, used: set[int]) -> list[Diagnosis]:
    """Violation findings no close answered (``used``: ids of findings a close diagnosis took)."""
    out = []
    who = facts.who
    for f in facts.violations:
        if id(f) in used:
            continue
        client = f.dir == C2S
        cause = "client-protocol-error" if client else "broker-protocol-error"
        peer = "the broker" if client else "the client"
        out.append(make(cause, who, channel=f.channel, packets=f.packets, since=f.ts, until=f.ts, impact=CLIENT,
                        severity="warning",
                        summary=f"{who.phrase() if client else 'the broker, talking to ' + who.phrase() + ','}"
                        f" broke rule {f.rule}"
                        f"{'' if f.channel is None else f' on channel {f.channel}'} (packet {f.packet}): {f.message}",
                        broker_action=f"none seen: {peer} did not close for it" if client
                        else "the client: none seen (it did not close for it)",
                        details={"rule": f.rule, "code": f.code, "finding_packet": f.packet, "reaction": None,
                                 "blamed": "client" if client else "broker"}))  # fmt: skip
    return out

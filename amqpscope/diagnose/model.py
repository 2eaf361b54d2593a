"""The plain data of a diagnosis: causes, quirks, thresholds and the order they are shown in.

A ``Diagnosis`` is one cause an operator can act on; a ``Quirk`` is a spec deviation the broker
accepts, counted per client library. Both are records (``to_record``) for JSONL, JSON, Parquet and
the HTML report, so every output shows the same words.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Impact groups, in the order the issue ranks causes: what ended a connection first, then a
# channel, then work that stalled, then messages lost or returned, then the rest.
CONNECTION, CHANNEL, STALLED, LOST, CLIENT = 0, 1, 2, 3, 4
IMPACTS = ("connection closed or reset", "channel closed", "stalled or blocked work",
           "lost or returned messages", "client behaviour")  # fmt: skip

CRITICAL, ERROR, WARNING, NOTICE = "critical", "error", "warning", "notice"
SEVERITIES = (CRITICAL, ERROR, WARNING, NOTICE)

# Every cause id the diagnoser may report, with its impact group and default severity.
CAUSES: dict[str, tuple[int, str]] = {
    "login-refused": (CONNECTION, CRITICAL),
    "channel-limit": (CONNECTION, CRITICAL),
    "heartbeat-timeout": (CONNECTION, CRITICAL),
    "connection-closed": (CONNECTION, CRITICAL),
    "connection-lost": (CONNECTION, CRITICAL),
    "client-closed-tcp": (CONNECTION, WARNING),
    "handshake-aborted": (CONNECTION, ERROR),
    "not-amqp": (CONNECTION, WARNING),
    "access-refused": (CHANNEL, ERROR),
    "precondition-failed": (CHANNEL, ERROR),
    "inequivalent-redeclaration": (CHANNEL, ERROR),
    "ack-timeout": (CHANNEL, ERROR),
    "channel-closed": (CHANNEL, ERROR),
    "client-protocol-error": (CHANNEL, ERROR),
    "broker-protocol-error": (CHANNEL, ERROR),
    "consumer-stalled": (STALLED, WARNING),
    "publisher-blocked": (STALLED, WARNING),
    "consumer-cancelled": (STALLED, WARNING),
    "poison-message": (STALLED, WARNING),
    "unroutable": (LOST, WARNING),
    "unacked-requeued": (LOST, WARNING),
}


def plural(n: int, one: str, many: str) -> str:
    """'1 delivery' / '2 deliveries': the count with the word that agrees with it."""
    return f"{n} {one if n == 1 else many}"


@dataclass(frozen=True, slots=True)
class Thresholds:
    """What counts as a cause; each is a ``diagnose`` option (docs/diagnose.md)."""

    stall_s: float = 5.0  # consumer-stalled: seconds at the prefetch limit with nothing settled
    poison_redeliveries: int = 5  # poison-message: requeueing rejects/nacks of one message
    heartbeat_factor: float = 2.0  # heartbeat-timeout: silence longer than this many intervals
    blocked_s: float = 0.0  # publisher-blocked: shortest blocked period reported


@dataclass(frozen=True, slots=True, kw_only=True)
class Who:
    """The client of a connection as the operator knows it."""

    conn: int
    client: str | None = None  # "ip:port"
    product: str | None = None
    version: str | None = None
    name: str | None = None  # connection_name from the client properties, when announced
    user: str | None = None
    vhost: str | None = None

    def library(self) -> str:
        if not self.product:
            return "unknown client"
        return f"{self.product} {self.version}" if self.version else self.product

    def phrase(self) -> str:
        """'client 127.0.0.1:5000 (pika 1.4.4, "orders")' for the summary sentence."""
        bits = [self.library()] if self.product else []
        if self.name:
            bits.append(f'"{self.name}"')
        where = self.client or f"connection {self.conn}"
        return f"client {where}" + (f" ({', '.join(bits)})" if bits else "")


@dataclass(frozen=True, slots=True, kw_only=True)
class Diagnosis:
    kind = "diagnosis"
    cause: str
    severity: str
    conn: int
    client: str | None
    channel: int | None
    packets: tuple[int, ...]
    since: float
    until: float
    summary: str
    broker_action: str
    product: str | None = None
    connection_name: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    impact: int = CLIENT  # the group it is ranked in (IMPACTS)
    file: str | None = None

    def to_record(self) -> dict[str, Any]:
        return {"kind": "diagnosis", "cause": self.cause, "severity": self.severity, "impact": IMPACTS[self.impact],
                "conn": self.conn, "client": self.client, "product": self.product,
                "connection_name": self.connection_name, "channel": self.channel, "packets": list(self.packets),
                "since": self.since, "until": self.until, "duration_s": round(self.until - self.since, 6),
                "summary": self.summary, "broker_action": self.broker_action, "details": self.details,
                **({"file": self.file} if self.file is not None else {})}  # fmt: skip


def make(cause: str, who: Who, *, channel: int | None, packets: tuple[int, ...] | list[int], since: float,
         until: float, summary: str, broker_action: str, severity: str | None = None,
         details: dict[str, Any] | None = None, impact: int | None = None) -> Diagnosis:  # fmt: skip
    return Diagnosis(cause=cause, severity=severity or CAUSES[cause][1], conn=who.conn, client=who.client,
                     channel=channel, packets=tuple(sorted(set(packets))), since=since, until=until,
                     summary=summary, broker_action=broker_action, product=who.library() if who.product else None,
                     connection_name=who.name, details=details or {},
                     impact=CAUSES[cause][0] if impact is None else impact)  # fmt: skip


@dataclass(slots=True, kw_only=True)
class Quirk:
    """One tolerated deviation of one client library: every occurrence counted, a few packets kept."""

    kind = "quirk"
    quirk: str  # the tolerance table's id
    rule: str  # the validator's rule id
    library: str
    summary: str
    source: str
    count: int = 0
    connections: set[int] = field(default_factory=set)
    packets: list[int] = field(default_factory=list)
    file: str | None = None

    def to_record(self) -> dict[str, Any]:
        return {"kind": "quirk", "quirk": self.quirk, "rule": self.rule, "library": self.library,
                "count": self.count, "connections": sorted(self.connections), "packets": self.packets,
                "summary": self.summary, "broker_accepts": self.source,
                **({"file": self.file} if self.file is not None else {})}  # fmt: skip


SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}


def ranked(found: list[Diagnosis]) -> list[Diagnosis]:
    """Most impact first; within a group the worse severity, then the earliest."""
    return sorted(found, key=lambda d: (d.impact, SEVERITY_RANK.get(d.severity, 9), d.since, d.conn,
                                        d.channel if d.channel is not None else -1))  # fmt: skip

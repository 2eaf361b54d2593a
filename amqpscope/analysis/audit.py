"""Security audit: who connected, with what, and which credentials crossed the wire in the clear.

Passwords come from the decoder only when the user asked for them (``show_credentials``); the
audit never reads the start-ok response itself, so a report cannot leak what was not asked for.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..events import Connection
from .common import MAX_LISTED, client_version

PLAINTEXT_MECHANISMS = frozenset({"PLAIN", "AMQPLAIN"})
LOOPBACK = ("127.", "[::1]", "::1", "localhost")


@dataclass(frozen=True, slots=True)
class AuditEntry:
    conn: int
    client: str
    server: str
    user: str | None
    vhost: str | None
    mechanism: str | None
    password: str | None  # only with --show-credentials
    client_product: str | None
    client_version: str | None
    client_platform: str | None
    server_product: str | None
    server_version: str | None
    plaintext_credentials: bool
    guest: bool
    outcome: str  # "ok" | "authentication refused" | "vhost refused" | "closed before login"
    issues: tuple[str, ...]


def _outcome(ev: Connection) -> str:
    if ev.user is None:
        return "closed before login"
    if ev.close_by == "server" and ev.close_code == 403 and ev.vhost is None:
        return "authentication refused"
    if ev.close_by == "server" and ev.close_code == 530:
        return "vhost refused"
    return "ok"


class SecurityAudit:
    def __init__(self) -> None:
        self.entries: list[AuditEntry] = []
        self.users: dict[str, int] = {}
        self.vhosts: dict[str, int] = {}
        self.mechanisms: dict[str, int] = {}
        self.clients: dict[str, int] = {}
        self.issues: dict[str, int] = {}
        self.total = 0

    def connection_ended(self, ev: Connection, conn: int) -> None:
        self.total += 1
        mech = (ev.mechanism or "").upper() or None
        version = client_version(ev.client_version, ev.client_properties)
        plaintext = mech in PLAINTEXT_MECHANISMS and ev.user is not None
        guest = ev.user == "guest"
        outcome = _outcome(ev)
        issues: list[str] = []
        if plaintext:
            issues.append(f"credentials in plaintext ({mech} over unencrypted AMQP)")
        if guest:
            issues.append("guest account used")
            if not ev.client.startswith(LOOPBACK):
                issues.append("guest account from a non-loopback address")
        if outcome in ("authentication refused", "vhost refused"):
            issues.append(outcome)
        for name, table in ((ev.user, self.users), (ev.vhost, self.vhosts), (mech, self.mechanisms)):
            if name is not None:
                table[name] = table.get(name, 0) + 1
        if ev.client_product:
            lib = f"{ev.client_product} {version or ''}".strip()
            self.clients[lib] = self.clients.get(lib, 0) + 1
        for issue in issues:
            self.issues[issue] = self.issues.get(issue, 0) + 1
        if len(self.entries) < MAX_LISTED:
            self.entries.append(AuditEntry(
                conn, ev.client, ev.server, ev.user, ev.vhost, mech, ev.password, ev.client_product,
                version, ev.client_platform, ev.server_product, ev.server_version, plaintext, guest,
                outcome, tuple(issues)))  # fmt: skip

    def result(self) -> dict[str, Any]:
        return {
            "users": dict(sorted(self.users.items())),
            "vhosts": dict(sorted(self.vhosts.items())),
            "mechanisms": dict(sorted(self.mechanisms.items())),
            "client_libraries": dict(sorted(self.clients.items())),
            "issues": dict(sorted(self.issues.items())),
            "guest_connections": sum(e.guest for e in self.entries),
            "plaintext_credentials": sum(e.plaintext_credentials for e in self.entries),
            "connections": [dict(asdict(e), issues=list(e.issues)) for e in sorted(self.entries, key=lambda e: e.conn)],
        }

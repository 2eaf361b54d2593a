"""What the Scapy layer hides when it shows a packet: the credentials every amqpscope output
redacts (the core does it in ``session.rs``, ``negotiation`` and ``redact_response``; this is the
same rule for ``show()``, ``summary()`` and ``repr``). The packet's fields and bytes keep the real
values: only what is printed changes.

- ``connection.start-ok`` ``response``: PLAIN keeps the user (``\\0user\\0[redacted]``), an empty
  response or EXTERNAL's is shown as it is, anything else (AMQPLAIN's table included) is
  ``[redacted]``;
- ``connection.secure-ok`` ``response`` and ``connection.update-secret`` ``new_secret``: always
  ``[redacted]``.
"""

from __future__ import annotations

from typing import Any

REDACTED = "[redacted]"
# method -> the argument that carries a secret
SECRETS = {
    "connection.start-ok": "response",
    "connection.secure-ok": "response",
    "connection.update-secret": "new_secret",
}


def redacted(method: str, value: Any, mechanism: Any = None) -> Any:
    """The value of ``method``'s secret argument as amqpscope shows it."""
    if method != "connection.start-ok":
        return REDACTED
    raw = value.encode() if isinstance(value, str) else bytes(value or b"")
    if mechanism == "PLAIN":
        parts = raw.split(b"\0")
        if len(parts) == 3:
            return "\0" + parts[1].decode(errors="replace") + "\0" + REDACTED
    if mechanism == "EXTERNAL" or not raw:
        return value
    return REDACTED

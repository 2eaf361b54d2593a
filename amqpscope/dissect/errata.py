"""Where the spec XML is wrong about who sends a method or what answers it: listed here, once.

The validator's pairing (``validate/pairing.py``), the analytics and the core's ledger (through the
tables ``dissect/tables.py`` compiles) all read these; nothing else names a method by hand.

- ``connection.update-secret`` travels client → server and its ``-ok`` server → client, although the
  extended 0-9-1 XML's chassis say the opposite (the shipped XML is fixed; ``--spec FILE`` may not be).
- ``basic.recover`` is synchronous in practice (RabbitMQ answers ``recover-ok``), but the 0-9-1 XML
  gives it no ``<response>`` and no ``synchronous`` attribute.
"""

from __future__ import annotations

from .spec import Method, Spec

DIRECTION_FIXUPS: dict[str, frozenset[str]] = {
    "connection.update-secret": frozenset({"c2s"}),
    "connection.update-secret-ok": frozenset({"s2c"}),
}
RESPONSE_FIXUPS: dict[str, tuple[str, ...]] = {"basic.recover": ("recover-ok",)}


def senders(m: Method) -> frozenset[str]:
    """The directions ``m`` may travel in: ``c2s``, ``s2c``."""
    dirs = frozenset("c2s" if who == "client" else "s2c" for who in m.sent_by())
    return DIRECTION_FIXUPS.get(m.full_name, dirs)


def responses(m: Method) -> tuple[str, ...]:
    """The full names of the methods that answer ``m`` (none: nothing does)."""
    names = RESPONSE_FIXUPS.get(m.full_name) or m.responses
    return tuple(f"{m.class_name}.{r}" for r in names)


def synchronous(m: Method) -> bool:
    """A request the sender waits for an answer to."""
    return m.synchronous or m.full_name in RESPONSE_FIXUPS


def no_wait_field(m: Method) -> str | None:
    """The argument that tells the peer not to answer (``no_wait`` in most classes, ``nowait`` in confirm)."""
    return next((f.ident for f in m.fields if f.ident in ("no_wait", "nowait")), None)


def request_table(spec: Spec) -> dict[str, tuple[str, ...]]:
    """Synchronous requests → their responses: what the analytics and the core's ledger pair."""
    return {m.full_name: responses(m) for m in spec.methods() if synchronous(m) and responses(m)}

"""Small helpers every analysis module shares."""

from __future__ import annotations

from typing import Any

from ..events import C2S, S2C


def flag(args: dict[str, Any] | None, *names: str) -> bool:
    """True when any of ``names`` is set; the spec spells it no_wait in most classes, nowait in confirm."""
    if not args:
        return False
    return any(bool(args.get(n)) for n in names)


def other(direction: str | None) -> str:
    return S2C if direction == C2S else C2S


def ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


# How many example items (unanswered requests, unacked deliveries…) a report lists; counts stay exact.
MAX_LISTED = 200


def client_version(version: str | None, properties: dict[str, Any] | None) -> str | None:
    """The library version: py-amqp (kombu, celery) sends ``product_version`` instead of ``version``."""
    if version:
        return version
    v = (properties or {}).get("product_version")
    return v if isinstance(v, str) and v else None

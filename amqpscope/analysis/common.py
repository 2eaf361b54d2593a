"""Small helpers every analysis module shares."""

from __future__ import annotations

from typing import Any, TypeVar


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


K = TypeVar("K", bound=tuple)  # type: ignore[type-arg]
V = TypeVar("V")


class ConnKeyed(dict[K, V]):
    """A dict keyed by tuples that start with a connection id, which also finds a connection's keys.

    Tables per channel drop everything of a connection when it ends; scanning every key for that
    would make a capture with many concurrent connections quadratic.
    """

    def __init__(self) -> None:
        super().__init__()
        self._by_conn: dict[int, set[K]] = {}

    def __setitem__(self, key: K, value: V) -> None:
        if key not in self:
            self._by_conn.setdefault(key[0], set()).add(key)
        super().__setitem__(key, value)

    def __delitem__(self, key: K) -> None:
        super().__delitem__(key)
        self._forget(key)

    def setdefault(self, key: K, default: V) -> V:  # type: ignore[override]
        if key not in self:
            self[key] = default
        return self[key]

    def pop(self, key: K, *default: Any) -> Any:
        if key in self:
            self._forget(key)
        return super().pop(key, *default)

    def _forget(self, key: K) -> None:
        keys = self._by_conn.get(key[0])
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_conn[key[0]]

    def keys_of(self, conn: int) -> list[K]:
        """The keys of one connection, in order."""
        return sorted(self._by_conn.get(conn, ()))

    def conns(self) -> list[int]:
        return sorted(self._by_conn)

"""Back-pressure periods: connection.blocked … unblocked (RabbitMQ resource alarms) and
channel.flow active=0 … active=1, with how long each lasted and what was published meanwhile."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..events import C2S, Frame
from .common import MAX_LISTED

METHODS = frozenset({"connection.blocked", "connection.unblocked", "channel.flow", "basic.publish"})


@dataclass(frozen=True, slots=True)
class Period:
    conn: int
    channel: int  # 0 for connection.blocked
    kind: str  # "connection.blocked" | "channel.flow (server)" | "channel.flow (client)"
    reason: str | None
    start: float
    end: float | None  # None: still blocked when the connection or the capture ended
    duration_s: float
    publishes_during: int  # publishes the client sent anyway (RabbitMQ holds them back)


class FlowControl:
    def __init__(self) -> None:
        self.open: dict[tuple[int, int, str], tuple[float, str | None, int]] = {}  # → (start, reason, publishes)
        self.periods: list[Period] = []
        self.total = 0
        self.seconds: dict[str, float] = {}

    def feed(self, ev: Frame, conn: int) -> None:
        method = ev.method
        channel = ev.channel or 0
        if method == "basic.publish":
            for key in ((conn, 0, "connection.blocked"), (conn, channel, "channel.flow (server)")):
                if key in self.open:
                    start, reason, n = self.open[key]
                    self.open[key] = (start, reason, n + 1)
            return
        args = ev.args or {}
        if method == "connection.blocked":
            reason = args.get("reason")
            self.open.setdefault((conn, 0, method), (ev.ts, reason if isinstance(reason, str) else None, 0))
        elif method == "connection.unblocked":
            self._close((conn, 0, "connection.blocked"), ev.ts)
        elif method == "channel.flow":
            kind = f"channel.flow ({'client' if ev.dir == C2S else 'server'})"
            if args.get("active"):
                self._close((conn, channel, kind), ev.ts)
            else:
                self.open.setdefault((conn, channel, kind), (ev.ts, None, 0))

    def _close(self, key: tuple[int, int, str], ts: float | None, end_ts: float | None = None) -> None:
        entry = self.open.pop(key, None)
        if entry is None:
            return
        start, reason, n = entry
        until = ts if ts is not None else end_ts or start
        duration = max(0.0, until - start)
        self.seconds[key[2]] = self.seconds.get(key[2], 0.0) + duration
        self.total += 1
        if len(self.periods) < MAX_LISTED:
            self.periods.append(Period(key[0], key[1], key[2], reason, start, ts, round(duration, 6), n))

    def connection_ended(self, conn: int, ts: float) -> None:
        for key in [k for k in self.open if k[0] == conn]:  # few: only what is blocked right now
            self._close(key, None, ts)

    def finish(self, ts: float) -> None:
        for key in list(self.open):
            self._close(key, None, ts)

    def result(self) -> dict[str, Any]:
        return {
            "periods": self.total,
            "seconds": {k: round(v, 6) for k, v in sorted(self.seconds.items())},
            "list": [asdict(p) for p in self.periods],
        }

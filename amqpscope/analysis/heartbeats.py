"""Heartbeat and connection-end analysis: negotiated interval against observed silence.

Any frame counts as activity (the spec: a peer may treat any octet as a heartbeat), so the
silence of a direction is the longest gap between its frames after tune-ok. A direction silent
for more than two intervals is one the receiving peer should have closed for missed heartbeats
(the spec's rule, and RabbitMQ's: "missed heartbeats from client"). Silence that runs into the
end of the connection is measured separately (``idle_before_end``): a TCP FIN or RST after it
is a close for missed heartbeats (or by an idle-reaping proxy when no heartbeat was negotiated),
whereas silence followed by more traffic is a peer that should have closed and did not.
Connections ending on FIN or RST without connection.close are told apart from clean closes and
from closes that never got their close-ok.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..events import C2S, S2C, Connection, Frame
from .common import MAX_LISTED


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    conn: int
    client: str
    server: str
    proposed: int | None  # connection.tune heartbeat (server's proposal)
    negotiated: int | None  # connection.tune-ok heartbeat; 0 = off
    heartbeats_c2s: int
    heartbeats_s2c: int
    max_silence_c2s: float | None  # seconds, between frames of the direction (after tune-ok)
    max_silence_s2c: float | None
    idle_before_end_c2s: float | None  # last frame of the direction → TCP end (FIN/RST) or capture end
    idle_before_end_s2c: float | None
    missed: tuple[str, ...]  # directions silent > 2 intervals while the connection went on
    closed_for_missed: tuple[str, ...]  # directions silent > 2 intervals right up to a FIN/RST
    ended: str | None  # connection.close | fin | rst | eof | evicted
    close_ok: bool
    close_by: str | None
    verdict: str


@dataclass(slots=True)
class _Conn:
    proposed: int | None = None
    negotiated: int | None = None
    since: float | None = None  # tune-ok time: silence is measured from here
    last: dict[str, float] = field(default_factory=dict)
    silence: dict[str, float] = field(default_factory=dict)
    tail: dict[str, float] = field(default_factory=dict)
    beats: dict[str, int] = field(default_factory=lambda: {C2S: 0, S2C: 0})
    close_seen: bool = False
    close_ok: bool = False


class HeartbeatAnalyzer:
    def __init__(self) -> None:
        self.conns: dict[int, _Conn] = {}
        self.results: list[HeartbeatResult] = []
        self.counts: dict[str, int] = {}
        self.total = 0
        self.frames = 0
        self.negotiated: dict[str, int] = {}  # interval (s, "none" when tune-ok was not seen) → connections

    def _c(self, conn: int) -> _Conn:
        c = self.conns.get(conn)
        if c is None:
            c = self.conns[conn] = _Conn()
        return c

    def feed(self, ev: Frame, conn: int) -> None:
        c = self.conns.get(conn)
        if c is None:
            c = self.conns[conn] = _Conn()
        d = ev.dir or C2S
        ts = ev.ts
        if c.since is not None:
            # inline: this runs for every frame of the capture
            prev = c.last.get(d)
            if prev is not None and ts - prev > c.silence.get(d, 0.0):
                c.silence[d] = ts - prev
            c.last[d] = ts
        ftype = ev.type
        if ftype == "heartbeat":
            c.beats[d] = c.beats.get(d, 0) + 1
            return
        if ftype != "method" or ev.channel:
            return
        m = ev.method
        if m == "connection.tune":
            c.proposed = (ev.args or {}).get("heartbeat")
        elif m == "connection.tune-ok":
            c.negotiated = (ev.args or {}).get("heartbeat")
            c.since = ts
            c.last = {C2S: ts, S2C: ts}
        elif m == "connection.close":
            c.close_seen = True
        elif m == "connection.close-ok":
            c.close_ok = True

    def connection_ended(self, ev: Connection, conn: int) -> None:
        c = self.conns.pop(conn, None) or _Conn()
        if c.since is not None and ev.ended in ("fin", "rst", "eof"):
            # a peer that goes silent until TCP dies: that last silence is what got it closed
            for d in (C2S, S2C):
                prev = c.last.get(d)
                if prev is not None:
                    c.tail[d] = max(0.0, ev.ts - prev)
        hb = c.negotiated
        missed: tuple[str, ...] = ()
        closed_for: tuple[str, ...] = ()
        if hb:
            missed = tuple(d for d in (C2S, S2C) if c.silence.get(d, 0.0) > 2 * hb)
            closed_for = tuple(d for d in (C2S, S2C) if c.tail.get(d, 0.0) > 2 * hb)
        verdict = _verdict(hb, missed, closed_for, ev.ended, c.close_seen, c.close_ok, c.tail)
        self.counts[verdict] = self.counts.get(verdict, 0) + 1
        self.total += 1
        self.frames += c.beats.get(C2S, 0) + c.beats.get(S2C, 0)
        key = "none" if hb is None else str(hb)
        self.negotiated[key] = self.negotiated.get(key, 0) + 1
        if len(self.results) < MAX_LISTED:
            self.results.append(HeartbeatResult(
                conn, ev.client, ev.server, c.proposed, hb, c.beats.get(C2S, 0), c.beats.get(S2C, 0),
                _round(c.silence.get(C2S)), _round(c.silence.get(S2C)), _round(c.tail.get(C2S)),
                _round(c.tail.get(S2C)), missed, closed_for, ev.ended, c.close_ok, ev.close_by,
                verdict))  # fmt: skip

    def result(self) -> dict[str, Any]:
        return {
            "connections": [dict(asdict(r), missed=list(r.missed), closed_for_missed=list(r.closed_for_missed))
                            for r in sorted(self.results, key=lambda r: r.conn)],
            "verdicts": dict(sorted(self.counts.items())),
            "heartbeat_frames": self.frames,
            "negotiated": dict(sorted(self.negotiated.items())),
        }


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 6)


def _who(directions: tuple[str, ...]) -> str:
    # c2s silent: it is the server that misses the client's heartbeats, and the other way round
    return " and ".join("server" if d == C2S else "client" for d in directions)


def _verdict(hb: int | None, missed: tuple[str, ...], closed_for: tuple[str, ...], ended: str | None, close: bool,
             close_ok: bool, tail: dict[str, float]) -> str:  # fmt: skip
    if closed_for and not close:
        silent = " and ".join("client" if d == C2S else "server" for d in closed_for)
        if ended == "eof":
            return f"open at end of capture, {silent} silent > 2 × {hb} s ({_who(closed_for)} should close)"
        return f"{(ended or '').upper()} after missed heartbeats ({silent} silent > 2 × {hb} s)"
    if missed:
        return f"missed heartbeats, not closed ({_who(missed)} should have closed)"
    if ended == "eof":
        return "open at end of capture"
    if close and close_ok:
        return "clean close"
    if close:
        return f"connection.close without close-ok, then {ended if ended != 'connection.close' else 'TCP close'}"
    if ended in ("fin", "rst"):
        idle = min(tail.values()) if tail else 0.0
        after = f" after {idle:.1f} s idle" if idle >= 1.0 else ""
        return f"{ended.upper()} without connection.close{after}"
    return f"ended: {ended}"

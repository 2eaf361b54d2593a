"""Heartbeat and connection-end analysis: negotiated interval against observed silence.

The silences are measured once, in the core's ledger (``crates/amqpscope-core/src/ledger/
heartbeats.rs``): any frame counts as activity, and each direction's ``heartbeat`` record at the
end of the connection gives its heartbeat frames, its longest silence after tune-ok and the
silence that ran into the TCP end (``idle``). A direction silent for more than two intervals is
one the receiving peer should have closed for missed heartbeats (the spec's rule, and RabbitMQ's:
"missed heartbeats from client"); silence that runs into a TCP FIN or RST is a close for missed
heartbeats (or by an idle-reaping proxy when no heartbeat was negotiated), whereas silence
followed by more traffic is a peer that should have closed and did not. Connections ending on FIN
or RST without connection.close are told apart from clean closes and from closes that never got
their close-ok.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..events import C2S, S2C, Connection, Frame, Ledger
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


class HeartbeatAnalyzer:
    def __init__(self) -> None:
        self.proposed: dict[int, int | None] = {}
        self.closing: dict[int, tuple[bool, bool]] = {}  # conn → (connection.close seen, close-ok seen)
        self.records: dict[int, dict[str, Ledger]] = {}  # conn → direction → its heartbeat record
        self.results: list[HeartbeatResult] = []
        self.counts: dict[str, int] = {}
        self.total = 0
        self.frames = 0
        self.negotiated: dict[str, int] = {}  # interval (s, "none" when tune-ok was not seen) → connections

    def frame(self, ev: Frame, conn: int) -> None:
        """Connection methods (channel 0): the server's proposal and how the connection closed."""
        m = ev.method
        if m == "connection.tune":
            self.proposed[conn] = (ev.args or {}).get("heartbeat")
        elif m == "connection.close" or m == "connection.close-ok":
            close, ok = self.closing.get(conn, (False, False))
            self.closing[conn] = (close or m == "connection.close", ok or m == "connection.close-ok")

    def feed(self, ev: Ledger, conn: int) -> None:
        if ev.entry == "heartbeat" and ev.dir is not None:
            self.records.setdefault(conn, {})[ev.dir] = ev

    def connection_ended(self, ev: Connection, conn: int) -> None:
        rec = self.records.pop(conn, {})
        close_seen, close_ok = self.closing.pop(conn, (False, False))
        proposed = self.proposed.pop(conn, None)
        hb = next((r.limit for r in rec.values()), None)
        silence = {d: r.duration for d, r in rec.items() if r.duration is not None}
        tail = {d: r.idle for d, r in rec.items() if r.idle is not None}
        beats = {d: r.count for d, r in rec.items()}
        missed: tuple[str, ...] = ()
        closed_for: tuple[str, ...] = ()
        if hb:
            missed = tuple(d for d in (C2S, S2C) if silence.get(d, 0.0) > 2 * hb)
            closed_for = tuple(d for d in (C2S, S2C) if tail.get(d, 0.0) > 2 * hb)
        verdict = _verdict(hb, missed, closed_for, ev.ended, close_seen, close_ok, tail)
        self.counts[verdict] = self.counts.get(verdict, 0) + 1
        self.total += 1
        self.frames += beats.get(C2S, 0) + beats.get(S2C, 0)
        key = "none" if hb is None else str(hb)
        self.negotiated[key] = self.negotiated.get(key, 0) + 1
        if len(self.results) < MAX_LISTED:
            self.results.append(HeartbeatResult(
                conn, ev.client, ev.server, proposed, hb, beats.get(C2S, 0), beats.get(S2C, 0),
                _round(silence.get(C2S)), _round(silence.get(S2C)), _round(tail.get(C2S)),
                _round(tail.get(S2C)), missed, closed_for, ev.ended, close_ok, ev.close_by,
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

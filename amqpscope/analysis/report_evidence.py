"""The report's second pass: what the first pass could not keep because it did not yet know which
connections matter. Once the causes are known, the inputs they name are read again and kept are:
each diagnosed connection's ladder around its proving packets (``flow.Windows``), each direction's
frame times of a connection with a heartbeat cause (its silence timeline), and the TLS
connections that were not decrypted (for the report's "not seen" banner)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..capture import CaptureError
from ..events import C2S, Connection, Event, Frame, Tls
from .flow import Ladder, Windows, tcp_end_steps

LINKED = 30  # proving packets linked per cause (the ladder keeps a window around each)
HEARTBEAT_CAUSES = frozenset({"heartbeat-timeout"})
# frames closer than this to the previous one kept of their direction are not drawn one by one
BEAT_RESOLUTION = 0.005
MAX_BEAT_MARKS = 20_000

Source = Callable[[], Iterable[Event]]


@dataclass(slots=True)
class BeatLane:
    """One direction of a connection: when it sent heartbeats and other frames."""

    heartbeats: list[float] = field(default_factory=list)
    frames: list[float] = field(default_factory=list)  # other frames, thinned to BEAT_RESOLUTION


@dataclass(slots=True)
class BeatTimeline:
    conn: int
    interval: int  # the negotiated heartbeat, seconds
    start: float
    end: float | None = None
    lanes: dict[str, BeatLane] = field(default_factory=lambda: {C2S: BeatLane(), "s2c": BeatLane()})
    ends: list[tuple[float, str, str]] = field(default_factory=list)  # (ts, label, dir) of FIN/RST
    silent: str | None = None  # the direction the cause names silent (c2s/s2c)

    def feed(self, ev: Event) -> None:
        if isinstance(ev, Frame) and ev.dir in self.lanes:
            lane = self.lanes[ev.dir]
            if ev.type == "heartbeat":
                if len(lane.heartbeats) < MAX_BEAT_MARKS:
                    lane.heartbeats.append(ev.ts)
            elif not lane.frames or (ev.ts - lane.frames[-1] >= BEAT_RESOLUTION and len(lane.frames) < MAX_BEAT_MARKS):
                lane.frames.append(ev.ts)
        elif isinstance(ev, Connection) and ev.state == "close":
            self.end = ev.ts
            self.ends = [(s.ts, s.label, s.dir) for s in tcp_end_steps(ev)]
            if ev.heartbeat and not self.interval:
                self.interval = ev.heartbeat


@dataclass(frozen=True, slots=True)
class OpaqueTls:
    conn: int
    client: str
    server: str
    reason: str


@dataclass(slots=True)
class Evidence:
    ladders: dict[int, Ladder] = field(default_factory=dict)
    beats: dict[int, BeatTimeline] = field(default_factory=dict)
    opaque_tls: list[OpaqueTls] = field(default_factory=list)


def _input_of(conn: int, offsets: list[int]) -> int:
    return max(j for j, off in enumerate(offsets) if off <= conn)


def collect(sources: list[Source | None], offsets: list[int], report: dict[str, Any], start: float,
            tls_inputs: frozenset[int] = frozenset()) -> Evidence:  # fmt: skip
    """Read again the inputs a cause names (and ``tls_inputs``, whose TLS bytes were not all
    decrypted). ``sources[i]`` reads input i's events again (None: it cannot be read twice, as
    standard input); ``offsets[i]`` is what the report added to input i's connection ids."""
    proofs: dict[int, dict[int, set[int]]] = {}  # input → its own connection id → linked packets
    beats: dict[int, dict[int, Any]] = {}  # input → own connection id → the heartbeat cause
    for c in report["diagnosis"]["causes"]:
        i = _input_of(c["conn"], offsets)
        own = c["conn"] - offsets[i]
        proofs.setdefault(i, {}).setdefault(own, set()).update(c["packets"][:LINKED])
        if c["cause"] in HEARTBEAT_CAUSES:
            beats.setdefault(i, {})[own] = c
    out = Evidence()
    for i in sorted(set(proofs) | tls_inputs):
        read = sources[i] if i < len(sources) else None
        if read is None:
            continue
        windows = {conn: Windows(conn + offsets[i], packets) for conn, packets in proofs.get(i, {}).items()}
        lines = {conn: BeatTimeline(conn + offsets[i], int(c.get("details", {}).get("heartbeat_s") or 0), c["since"],
                                    silent=_silent_dir(c))
                 for conn, c in beats.get(i, {}).items()}  # fmt: skip
        firsts: dict[int, float] = {}
        # the first pass already reported this input's error, if any: the events before it are
        # all there is, and the error is not said twice
        with contextlib.suppress(CaptureError):
            for ev in read():
                w = windows.get(ev.conn)
                if w is not None:
                    w.feed(ev)
                line = lines.get(ev.conn)
                if line is not None:
                    firsts.setdefault(ev.conn, ev.ts)
                    line.feed(ev)
                if type(ev) is Tls and not ev.decrypted:
                    out.opaque_tls.append(OpaqueTls(ev.conn + offsets[i], ev.client, ev.server,
                                                    ev.reason or "not decrypted"))  # fmt: skip
        for conn, w in windows.items():
            if w.seen:
                out.ladders[conn + offsets[i]] = w.finish(start)
        for conn, line in lines.items():
            line.start = firsts.get(conn, line.start)
            out.beats[conn + offsets[i]] = line
    return out


def _silent_dir(cause: dict[str, Any]) -> str | None:
    who = (cause.get("details") or {}).get("silent")
    return C2S if who == "client" else "s2c" if who == "broker" else None

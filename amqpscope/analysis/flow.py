"""Ladder (sequence) diagrams of one connection: text for a terminal, Mermaid and SVG to export.

Only method frames, heartbeats, stream problems and the TCP end (FIN/RST, when the connection
ended on it rather than on connection.close) become steps; content headers and bodies are folded
into the method they belong to (as a byte count), so a publish is one arrow, not three. Times are
seconds from the capture's start (its first event, of any connection), the one time base of every
output. ``build`` caps the number of steps (``limit``) so that a long capture cannot exhaust
memory; ``Windows`` keeps, in bounded memory, only the stretches around given packets (the
report's evidence) and counts what it leaves out.
"""

from __future__ import annotations

import html
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

from ..events import C2S, S2C, Connection, Event, Frame, Gap, Malformed, Resync
from ..output.summary import args_summary

# start-ok's response holds the credentials (redacted by the decoder unless asked for); a
# picture never needs them
_HIDE = {"connection.start-ok": ("mechanism", "locale")}
_CODED = frozenset({"connection.close", "channel.close", "basic.return"})
_CONTENT = frozenset({"basic.publish", "basic.deliver", "basic.get-ok", "basic.return"})
TCP_ENDS = ("fin", "rst")
# a content header is folded into its method while the method is among the last few steps
FOLD_WINDOW = 16
MIN_ELIDED = 3  # shorter stretches between kept rows are shown, not elided


class StepKind(Enum):
    METHOD = "method"
    HEARTBEAT = "heartbeat"
    NOTE = "note"  # a gap, resync or malformed stretch of one direction
    TCP_END = "tcp"  # a FIN or RST segment


def _alert(ev: Frame) -> bool:
    return ev.method in _CODED and (ev.args or {}).get("reply_code") not in (0, 200, None)


@dataclass(frozen=True, slots=True)
class Step:
    ts: float
    packet: int
    dir: str  # c2s | s2c | "" (a note, or a TCP end whose sender is not known)
    channel: int
    label: str
    alert: bool = False  # an error reply (a close or return with a code other than 0/200), an RST
    kind: StepKind = StepKind.METHOD
    through: int = 0  # the last packet of the content folded into it (0: none)


@dataclass(frozen=True, slots=True)
class Elided:
    """Steps left out between two shown ones: how many, and the time they span."""

    count: int
    since: float
    until: float


@dataclass(frozen=True, slots=True)
class Ladder:
    conn: int
    client: str
    server: str
    steps: tuple[Step, ...]
    truncated: bool
    start: float  # the capture's start: step times are shown as seconds from it
    # step index → the steps left out just before it (index len(steps): after the last one)
    elided: dict[int, Elided] = field(default_factory=dict)
    # a proving packet that is no step (a body frame, a TCP ACK) → the packet of the step it lands on
    aliases: dict[int, int] = field(default_factory=dict)

    def rows(self) -> Iterable[Step | Elided]:
        """The steps with the elided stretches between them, in order."""
        for i, s in enumerate(self.steps):
            gap = self.elided.get(i)
            if gap is not None:
                yield gap
            yield s
        tail = self.elided.get(len(self.steps))
        if tail is not None:
            yield tail


def _label(ev: Frame) -> str:
    if ev.type == "heartbeat":
        return "heartbeat"
    keys = _HIDE.get(ev.method or "")
    args = {k: v for k, v in (ev.args or {}).items() if keys is None or k in keys}
    text = f"{ev.method} {args_summary(ev.method, args)}".strip()
    return text if len(text) <= 90 else text[:89] + "…"


def _sender(by: object, ev: Connection) -> str:
    """c2s/s2c from a sender named as a side ("client", "server"/"broker") or as its address."""
    if by in ("client", C2S) or (by and by == ev.client):
        return C2S
    if by in ("server", "broker", S2C) or (by and by == ev.server):
        return S2C
    return ""


def tcp_end_steps(ev: Connection) -> list[Step]:
    """The FIN and RST rows of a connection's close event. The close event may say who sent each
    and in which packet (``fin_by``/``fin_packet``, ``rst_by``/``rst_packet``); without them it
    says only how the connection ended (``ended``) and the packet of that end."""
    out = []
    for flag in TCP_ENDS:
        packet = getattr(ev, f"{flag}_packet", None)
        if packet is None and ev.ended == flag:
            packet = ev.packet
        if packet is None:
            continue
        d = _sender(getattr(ev, f"{flag}_by", None), ev)
        ts = getattr(ev, f"{flag}_ts", None) or ev.ts
        label = f"TCP {flag.upper()}" + ("" if d else " (sender not recorded)")
        out.append(Step(ts, packet, d, 0, label, flag == "rst", StepKind.TCP_END))
    return sorted(out, key=lambda s: s.packet)


class _Stepper:
    """One connection's events → steps, with content headers folded into their method."""

    def __init__(self, channels: frozenset[int] | None = None) -> None:
        self.channels = channels
        self.pending: deque[list[Step]] = deque()  # recent steps, each in a cell a header can amend
        self.content: dict[tuple[str, int], list[Step]] = {}  # (dir, channel) → its content method's cell
        self.client = self.server = ""
        self.close: Connection | None = None

    def feed(self, ev: Event) -> list[Step]:
        """The steps that are final now (older than the folding window)."""
        step: Step | None = None
        if isinstance(ev, Connection):
            self.client, self.server = ev.client, ev.server
            if ev.state == "close":
                self.close = ev
            return []
        if self.channels is not None and ev.channel and ev.channel not in self.channels:
            return []
        if isinstance(ev, Frame):
            ch = ev.channel or 0
            if ev.type in ("header", "body"):
                cell = self.content.get((ev.dir or "", ch))
                if cell is not None:
                    s = cell[0]
                    label = f"{s.label} [{ev.body_size} B]" if ev.type == "header" else s.label
                    cell[0] = Step(s.ts, s.packet, s.dir, s.channel, label, s.alert, s.kind, ev.packet)
                return []
            if ev.type in ("method", "heartbeat"):
                kind = StepKind.HEARTBEAT if ev.type == "heartbeat" else StepKind.METHOD
                step = Step(ev.ts, ev.packet, ev.dir or C2S, ch, _label(ev), _alert(ev), kind)
        elif isinstance(ev, (Gap, Malformed, Resync)):
            step = Step(ev.ts, ev.packet, "", ev.channel or 0, f"{ev.kind} ({ev.dir})", kind=StepKind.NOTE)
        if step is None:
            return []
        cell = [step]
        self.pending.append(cell)
        if isinstance(ev, Frame) and ev.method in _CONTENT:
            self.content[(ev.dir or "", ev.channel or 0)] = cell
        out = []
        while len(self.pending) > FOLD_WINDOW:
            out.append(self._pop())
        return out

    def _pop(self) -> Step:
        cell = self.pending.popleft()
        for key in [k for k, c in self.content.items() if c is cell]:
            del self.content[key]
        return cell[0]

    def finish(self, tcp: bool | frozenset[int] = True) -> list[Step]:
        """The steps still held, then the TCP end rows: all of them (``tcp`` True), none (False),
        or those that are evidence (a set of proving packets): the connection ended on a FIN or
        RST rather than on connection.close, or a proof names the segment."""
        out = [self._pop() for _ in range(len(self.pending))]
        ev = self.close
        if ev is not None and tcp is not False:
            for s in tcp_end_steps(ev):
                if tcp is True or ev.ended in TCP_ENDS or s.packet in tcp:
                    out.append(s)
        return out


def build(events: Iterable[Event], conn: int | None = None, limit: int = 2000,
          channels: frozenset[int] | None = None) -> Ladder | None:  # fmt: skip
    """The ladder of connection ``conn`` (default: the first AMQP connection seen), optionally
    only the steps on ``channels`` (channel 0, the connection's own, is always kept). A TCP end
    is a step when the connection ended on it (no connection.close)."""
    steps: list[Step] = []
    chosen = conn
    start: float | None = None
    stepper = _Stepper(channels)
    seen = False
    dropped = 0

    def take(new: list[Step]) -> None:
        nonlocal dropped
        room = max(0, limit - len(steps))
        steps.extend(new[:room])
        dropped += len(new) - min(room, len(new))

    for ev in events:
        if start is None and ev.ts:
            start = ev.ts
        if chosen is None and isinstance(ev, Frame):
            chosen = ev.conn
        if ev.conn != chosen:
            continue
        seen = True
        take(stepper.feed(ev))
    if chosen is None or not seen:
        return None
    take(stepper.finish(tcp=frozenset()))
    return Ladder(chosen, stepper.client or "client", stepper.server or "server", tuple(steps), dropped > 0,
                  start or 0.0)  # fmt: skip


class Windows:
    """The ladder of one connection as the report shows it: its first ``head`` steps, ``context``
    steps either side of each proving packet, its last ``context`` steps, and a count of every
    stretch left out. Memory holds the kept steps and ``context`` more, however long the connection."""

    def __init__(self, conn: int, proofs: Iterable[int], head: int = 12, context: int = 4) -> None:
        self.conn = conn
        self.proofs = sorted(set(proofs))
        self.head, self.context = head, context
        self.stepper = _Stepper()
        self.steps: list[Step] = []
        self.elided: dict[int, Elided] = {}
        self.aliases: dict[int, int] = {}
        # the last steps not kept: ``context`` of them, and a few more so that no stretch shorter
        # than MIN_ELIDED is left out (the rows would take no more room than the note)
        self.recent: deque[Step] = deque()
        self.skipped: list[float] = []  # first and last time of the steps dropped since the last kept one
        self.dropped = 0  # how many
        self.after = 0  # steps still to keep after a proof
        self.seen = 0
        self._next = 0  # index in proofs of the next proof not yet reached

    def feed(self, ev: Event) -> None:
        for s in self.stepper.feed(ev):
            self._step(s)

    def _proof(self, s: Step) -> bool:
        """Whether a proving packet is this step's, or lands on it: a packet of its content, or
        one before it that is no step of its own."""
        hit = False
        end = max(s.packet, s.through)
        while self._next < len(self.proofs) and self.proofs[self._next] <= end:
            p = self.proofs[self._next]
            if p != s.packet:
                self.aliases[p] = s.packet
            hit = True
            self._next += 1
        return hit

    def _step(self, s: Step) -> None:
        self.seen += 1
        if self._proof(s) or self.seen <= self.head or s.kind is StepKind.TCP_END or s.alert:
            self._keep_recent()
            self._keep(s)
            self.after = self.context
        elif self.after > 0:
            self._keep(s)
            self.after -= 1
        else:
            self.recent.append(s)
            if len(self.recent) > self.context + MIN_ELIDED - 1:
                self._drop(self.recent.popleft())

    def _drop(self, s: Step) -> None:
        if not self.dropped:
            self.skipped = [s.ts, s.ts]
        self.skipped[1] = s.ts
        self.dropped += 1

    def _keep_recent(self) -> None:
        if self.dropped:  # a stretch is left out: it takes all but the last ``context`` held
            while len(self.recent) > self.context:
                self._drop(self.recent.popleft())
        while self.recent:
            self._keep(self.recent.popleft())

    def _keep(self, s: Step) -> None:
        if self.dropped:
            self.elided[len(self.steps)] = Elided(self.dropped, self.skipped[0], self.skipped[1])
            self.dropped = 0
        self.steps.append(s)

    def finish(self, start: float) -> Ladder:
        for s in self.stepper.finish(tcp=frozenset(self.proofs)):
            self._step(s)
        self._keep_recent()  # the connection's last steps: how it ended
        if self.dropped:
            self.elided[len(self.steps)] = Elided(self.dropped, self.skipped[0], self.skipped[1])
        last = self.steps[-1].packet if self.steps else 0
        for p in self.proofs[self._next:]:
            self.aliases[p] = last  # after the last step (the capture's end): lands on the last row
        return Ladder(self.conn, self.stepper.client or "client", self.stepper.server or "server", tuple(self.steps),
                      False, start, dict(self.elided), dict(self.aliases))  # fmt: skip


def _elided_text(e: Elided, start: float) -> str:
    return f"… {e.count:,} row{'s' if e.count != 1 else ''} not shown ({e.since - start:.6f}–{e.until - start:.6f} s) …"


def to_text(ladder: Ladder, width: int = 100) -> str:
    """Arrows between a client and a server column, one line per step."""
    span = max(30, width - 24)
    lines = [f"connection {ladder.conn}: {ladder.client} ⇄ {ladder.server} (seconds from the capture's start)",
             f"{'time (s)':>10} {'ch':>3}  {'client':<{span // 2}}{'server':>{span - span // 2}}"]  # fmt: skip
    for s in ladder.rows():
        if isinstance(s, Elided):
            lines.append(f"{'':14}  {_elided_text(s, ladder.start):^{span}}")
            continue
        t = f"{s.ts - ladder.start:10.6f} {s.channel:>3}  "
        text = f"!! {s.label}" if s.alert else s.label
        label = text if len(text) <= span - 6 else text[: span - 7] + "…"
        if not s.dir:
            lines.append(t + f"{'~~ ' + label + ' ~~':^{span}}")
            continue
        fill = span - len(label) - 4
        left, right = fill // 2, fill - fill // 2
        if s.dir == C2S:
            lines.append(t + "─" * left + " " + label + " " + "─" * right + "─▶")
        else:
            lines.append(t + "◀─" + "─" * left + " " + label + " " + "─" * right)
    if ladder.truncated:
        lines.append(f"… truncated after {len(ladder.steps)} steps")
    return "\n".join(lines) + "\n"


def _mermaid_text(s: str) -> str:
    # Mermaid message text ends at a newline and treats ';' and '#' specially
    return s.replace(";", ",").replace("#", "").replace("\n", " ")


def to_mermaid(ladder: Ladder) -> str:
    out = ["sequenceDiagram", f"    participant C as Client {_mermaid_text(ladder.client)}",
           f"    participant S as Server {_mermaid_text(ladder.server)}"]  # fmt: skip
    for s in ladder.rows():
        if isinstance(s, Elided):
            out.append(f"    Note over C,S: {_mermaid_text(_elided_text(s, ladder.start))}")
            continue
        mark = "⚠ " if s.alert else ""
        text = _mermaid_text(f"{s.ts - ladder.start:.6f}s ch{s.channel} {mark}{s.label}")
        if not s.dir:
            out.append(f"    Note over C,S: {text}")
        else:
            arrow = "-->>" if s.kind is StepKind.HEARTBEAT else "->>"  # heartbeats dashed, both ways
            out.append(f"    C{arrow}S: {text}" if s.dir == C2S else f"    S{arrow}C: {text}")
    if ladder.truncated:
        out.append(f"    Note over C,S: truncated after {len(ladder.steps)} steps")
    return "\n".join(out) + "\n"


def to_svg(ladder: Ladder, row: int = 22, width: int = 1000) -> str:
    """A standalone SVG: two lifelines, one arrow per step, labels above the arrows."""
    rows = list(ladder.rows())
    left, right, top = 170, width - 130, 60
    height = top + row * (len(rows) + 1) + 20
    esc = html.escape
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        'font-family="monospace" font-size="11">',
        '<defs><marker id="arr" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#333"/></marker></defs>',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{left}" y="20" text-anchor="middle" font-weight="bold">client {esc(ladder.client)}</text>',
        f'<text x="{right}" y="20" text-anchor="middle" font-weight="bold">server {esc(ladder.server)}</text>',
        f'<line x1="{left}" y1="30" x2="{left}" y2="{height - 10}" stroke="#999"/>',
        f'<line x1="{right}" y1="30" x2="{right}" y2="{height - 10}" stroke="#999"/>',
        '<text x="8" y="45" fill="#666">time (s)  ch</text>',
    ]
    mid = (left + right) / 2
    for i, s in enumerate(rows):
        y = top + row * i
        if isinstance(s, Elided):
            parts.append(f'<text x="{mid}" y="{y + 4}" text-anchor="middle" fill="#777">'
                         f"{esc(_elided_text(s, ladder.start))}</text>")  # fmt: skip
            continue
        parts.append(f'<text x="8" y="{y + 4}" fill="#666">{s.ts - ladder.start:9.6f} {s.channel:>3}</text>')
        if not s.dir:
            parts.append(f'<text x="{mid}" y="{y + 4}" text-anchor="middle" fill="#b00">~ {esc(s.label)} ~</text>')
            continue
        x1, x2 = (left, right) if s.dir == C2S else (right, left)
        beat = s.kind is StepKind.HEARTBEAT
        colour = "#2a6" if beat else "#c00" if s.alert else ("#06c" if s.dir == C2S else "#c60")
        dash = ' stroke-dasharray="4 3"' if beat else ""
        parts.append(f'<line x1="{x1}" y1="{y + 6}" x2="{x2}" y2="{y + 6}" stroke="{colour}"{dash} '
                     'marker-end="url(#arr)"/>')  # fmt: skip
        weight = ' font-weight="bold"' if s.alert else ""
        parts.append(f'<text x="{mid}" y="{y + 2}" text-anchor="middle" fill="{colour}"{weight}>{esc(s.label)}</text>')
    if ladder.truncated:
        parts.append(f'<text x="{left}" y="{height - 4}">truncated after {len(ladder.steps)} steps</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"

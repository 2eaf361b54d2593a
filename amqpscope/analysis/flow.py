"""Ladder (sequence) diagrams of one connection: text for a terminal, Mermaid and SVG to export.

Only method frames, heartbeats and stream problems become steps; content headers and bodies are
folded into the method they belong to (as a byte count), so a publish is one arrow, not three.
The number of steps is capped (``limit``) so that a long capture cannot exhaust memory.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from dataclasses import dataclass

from ..events import C2S, Connection, Event, Frame, Gap, Malformed, Resync
from ..output.summary import args_summary

# start-ok's response holds the credentials (redacted by the decoder unless asked for); a
# picture never needs them
_HIDE = {"connection.start-ok": ("mechanism", "locale")}
_CODED = frozenset({"connection.close", "channel.close", "basic.return"})


def _alert(ev: Frame) -> bool:
    return ev.method in _CODED and (ev.args or {}).get("reply_code") not in (0, 200, None)


@dataclass(frozen=True, slots=True)
class Step:
    ts: float
    packet: int
    dir: str  # c2s | s2c | "" for notes (gaps, resyncs)
    channel: int
    label: str
    alert: bool = False  # an error reply (a close or return with a code other than 0/200)


@dataclass(frozen=True, slots=True)
class Ladder:
    conn: int
    client: str
    server: str
    steps: tuple[Step, ...]
    truncated: bool
    start: float


def _label(ev: Frame) -> str:
    if ev.type == "heartbeat":
        return "heartbeat"
    keys = _HIDE.get(ev.method or "")
    args = {k: v for k, v in (ev.args or {}).items() if keys is None or k in keys}
    text = f"{ev.method} {args_summary(ev.method, args)}".strip()
    return text if len(text) <= 90 else text[:89] + "…"


def build(events: Iterable[Event], conn: int | None = None, limit: int = 2000,
          channels: frozenset[int] | None = None) -> Ladder | None:  # fmt: skip
    """The ladder of connection ``conn`` (default: the first AMQP connection seen), optionally
    only the steps on ``channels`` (channel 0, the connection's own, is always kept)."""
    steps: list[Step] = []
    client = server = ""
    chosen = conn
    truncated = False
    last_content: dict[tuple[str, int], int] = {}  # (dir, channel) → index of its content method
    seen = False
    for ev in events:
        if chosen is None and isinstance(ev, Frame):
            chosen = ev.conn
        if ev.conn != chosen:
            continue
        seen = True
        if isinstance(ev, Connection):
            client, server = ev.client, ev.server
            continue
        step: Step | None = None
        if channels is not None and ev.channel and ev.channel not in channels:
            continue
        if isinstance(ev, Frame):
            ch = ev.channel or 0
            if ev.type == "header":
                i = last_content.get((ev.dir or "", ch))
                if i is not None and i < len(steps):
                    s = steps[i]
                    steps[i] = Step(s.ts, s.packet, s.dir, s.channel, f"{s.label} [{ev.body_size} B]", s.alert)
                continue
            if ev.type in ("method", "heartbeat"):
                step = Step(ev.ts, ev.packet, ev.dir or C2S, ch, _label(ev), _alert(ev))
                if ev.method in ("basic.publish", "basic.deliver", "basic.get-ok", "basic.return"):
                    last_content[(ev.dir or "", ch)] = len(steps)
        elif isinstance(ev, (Gap, Malformed, Resync)):
            step = Step(ev.ts, ev.packet, "", ev.channel or 0, f"{ev.kind} ({ev.dir})")
        if step is None:
            continue
        if len(steps) >= limit:
            truncated = True
            continue  # keep reading for the connection's addresses
        steps.append(step)
    if chosen is None or not seen:
        return None
    start = steps[0].ts if steps else 0.0
    return Ladder(chosen, client or "client", server or "server", tuple(steps), truncated, start)


def to_text(ladder: Ladder, width: int = 100) -> str:
    """Arrows between a client and a server column, one line per step."""
    span = max(30, width - 24)
    lines = [f"connection {ladder.conn}: {ladder.client} ⇄ {ladder.server}",
             f"{'time (s)':>10} {'ch':>3}  {'client':<{span // 2}}{'server':>{span - span // 2}}"]  # fmt: skip
    for s in ladder.steps:
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
    for s in ladder.steps:
        mark = "⚠ " if s.alert else ""
        text = _mermaid_text(f"+{s.ts - ladder.start:.6f}s ch{s.channel} {mark}{s.label}")
        if not s.dir:
            out.append(f"    Note over C,S: {text}")
        else:
            arrow = "-->>" if s.label == "heartbeat" else "->>"  # heartbeats dashed, both ways
            out.append(f"    C{arrow}S: {text}" if s.dir == C2S else f"    S{arrow}C: {text}")
    if ladder.truncated:
        out.append(f"    Note over C,S: truncated after {len(ladder.steps)} steps")
    return "\n".join(out) + "\n"


def to_svg(ladder: Ladder, row: int = 22, width: int = 1000) -> str:
    """A standalone SVG: two lifelines, one arrow per step, labels above the arrows."""
    left, right, top = 170, width - 130, 60
    height = top + row * (len(ladder.steps) + 1) + 20
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
    for i, s in enumerate(ladder.steps):
        y = top + row * i
        parts.append(f'<text x="8" y="{y + 4}" fill="#666">{s.ts - ladder.start:9.6f} {s.channel:>3}</text>')
        mid = (left + right) / 2
        if not s.dir:
            parts.append(f'<text x="{mid}" y="{y + 4}" text-anchor="middle" fill="#b00">~ {esc(s.label)} ~</text>')
            continue
        x1, x2 = (left, right) if s.dir == C2S else (right, left)
        colour = "#2a6" if s.label == "heartbeat" else "#c00" if s.alert else ("#06c" if s.dir == C2S else "#c60")
        dash = ' stroke-dasharray="4 3"' if s.label == "heartbeat" else ""
        parts.append(f'<line x1="{x1}" y1="{y + 6}" x2="{x2}" y2="{y + 6}" stroke="{colour}"{dash} '
                     'marker-end="url(#arr)"/>')  # fmt: skip
        weight = ' font-weight="bold"' if s.alert else ""
        parts.append(f'<text x="{mid}" y="{y + 2}" text-anchor="middle" fill="{colour}"{weight}>{esc(s.label)}</text>')
    if ladder.truncated:
        parts.append(f'<text x="{left}" y="{height - 4}">truncated after {len(ladder.steps)} steps</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"

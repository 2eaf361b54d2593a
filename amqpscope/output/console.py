"""The terminal view: one line per method, messages folded in, ``-V`` for full argument trees."""

from __future__ import annotations

from typing import Any, TextIO, cast

from rich.console import Console
from rich.markup import escape
from rich.tree import Tree

from ..events import Connection, Event, Finding, Frame, Gap, Malformed, Message, ProtocolHeader, Resync
from .records import body_view
from .summary import _fmt, summary
from .wrap import print_hanging
from .writers import Writer, clock

_STYLE = {"c2s": "cyan", "s2c": "magenta"}
_SEVERITY = {"violation": "bold red", "deviation": "yellow", "warning": "yellow", "info": "blue"}
_HANG = len("00:00:00.000000 #0   C→S    ch0  ")


class ConsoleWriter(Writer):
    def __init__(self, console: Console, body: str = "preview", verbose: bool = False) -> None:
        super().__init__(cast(TextIO, console.file), body)
        self.console = console
        self.verbose = verbose

    def write(self, ev: Event, rec: dict[str, Any]) -> None:
        if isinstance(ev, Frame) and ev.type in ("header", "body") and not self.verbose:
            return  # folded into the message line
        d = ev.dir or ""
        arrow = {"c2s": "C→S", "s2c": "S→C"}.get(d, "   ")
        ch = "" if ev.channel is None else f"ch{ev.channel}"
        style = _style(ev)
        line = (
            f"[dim]{clock(ev.ts)}[/] [bold]#{ev.conn:<3}[/] [{_STYLE.get(d, 'white')}]{arrow}[/] {ch:>6}  "
            f"[{style}]{escape(summary(ev))}[/]"
        )
        if isinstance(ev, Message) and self.body != "none" and ev.body:
            view = body_view(ev.body, ev.properties.get("content_type"), 64 if self.body == "preview" else None)
            if view:
                shown = view.get("text", view.get("hex", ""))
                line += f"  [dim]{escape(repr(shown) if 'text' in view else shown)}[/]"
        if self.console.is_terminal:
            # wrapped under the summary, past the time, connection, direction and channel columns
            print_hanging(self.console, line, _HANG)
        else:
            self.console.print(line, highlight=False, soft_wrap=True)  # a file or pipe: one line per event
        if self.verbose:
            tree = _tree(ev)
            if tree is not None:
                self.console.print(tree)


def _style(ev: Event) -> str:
    if isinstance(ev, Finding):
        return _SEVERITY.get(ev.severity, "white")
    if isinstance(ev, (Gap, Malformed)):
        return "bold red"
    if isinstance(ev, Resync):
        return "yellow"
    if isinstance(ev, Frame):
        if ev.problem:
            return "red"
        if ev.type == "heartbeat":
            return "dim"
        if ev.method and ev.method.endswith(".close") and (ev.args or {}).get("reply_code") not in (None, 0, 200):
            return "bold red"
    if isinstance(ev, (Connection, ProtocolHeader)):
        return "green"
    if isinstance(ev, Message):
        return "white" if ev.complete else "red"
    return "white"


def _add(tree: Tree, key: str, value: Any) -> None:
    if isinstance(value, dict):
        sub = tree.add(f"[bold]{escape(key)}[/]")
        for k, v in value.items():
            _add(sub, str(k), v)
    elif isinstance(value, list):
        sub = tree.add(f"[bold]{escape(key)}[/] ({len(value)})")
        for i, v in enumerate(value):
            _add(sub, f"[{i}]", v)
    else:
        tree.add(f"{escape(key)}: {escape(_fmt(value))}")


def _tree(ev: Event) -> Tree | None:
    tree = Tree("", hide_root=True, guide_style="dim")
    if isinstance(ev, Frame):
        if ev.args:
            _add(tree, "arguments", ev.args)
        if ev.properties:
            _add(tree, "properties", ev.properties)
        if ev.tls is not None:
            version, suite, rec = ev.tls
            tree.add(f"[dim]tls: {escape(version)} {escape(suite)}, record {rec} of {ev.dir}[/]")
    elif isinstance(ev, Message):
        _add(tree, "properties", ev.properties)
    elif isinstance(ev, Connection) and ev.state == "close":
        for key in ("version", "frame_max", "channel_max", "heartbeat", "mechanism", "user", "vhost"):
            if getattr(ev, key) is not None:
                _add(tree, key, getattr(ev, key))
    else:
        return None
    return tree if tree.children else None

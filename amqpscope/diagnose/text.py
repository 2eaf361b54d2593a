"""Diagnoses for people: the same records ``--format jsonl`` writes, as numbered lines on a console
(``diagnose``, the top of ``stats``, the live summary of ``sniff``)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape

from ..output.wrap import print_hanging
from .blind import lines as not_seen_lines

STYLE = {"critical": "bold red", "error": "red", "warning": "yellow", "notice": "blue"}


def cause_lines(i: int, d: dict[str, Any]) -> list[str]:
    """Rich markup for one cause record: a heading line, the sentence, what the broker did."""
    style = STYLE.get(d["severity"], "white")
    ch = "" if d["channel"] is None else f" ch{d['channel']}"
    where = f"{d['file']}: " if d.get("file") else ""
    packets = ", ".join(f"#{p}" for p in d["packets"][:12]) + (" …" if len(d["packets"]) > 12 else "")
    return [f"{i:>2}. [{style}]{d['severity'].upper():8}[/] [bold]{d['cause']}[/]  {escape(where)}conn {d['conn']}"
            f"{ch}  {d['until'] - d['since']:.3f} s  packets {packets}",
            f"    {escape(d['summary'])}", f"    [dim]broker: {escape(d['broker_action'])}[/]"]  # fmt: skip


HANG = 4  # a cause's text starts after "NN. ": its lines wrap under it, not at column 0


def print_cause(console: Console, i: int, d: dict[str, Any]) -> None:
    """One cause, each of its lines wrapped with a hanging indent at the console's width."""
    for line in cause_lines(i, d):
        print_hanging(console, line, HANG)


def render(console: Console, causes: list[dict[str, Any]], quirks: list[dict[str, Any]], title: str = "",
           not_seen: list[dict[str, Any]] | None = None) -> None:  # fmt: skip
    """``not_seen``: what the capture did not show (blind.py records), said first; then "nothing
    wrong" becomes "no cause found in what the capture shows"."""
    if title:
        console.print(f"[bold]{title}[/]")
    for line in not_seen_lines(not_seen or []):
        print_hanging(console, line, HANG + 2)
    if not causes and not_seen:
        console.print("no cause found [bold]in what the capture shows[/]" + (" (quirks below)" if quirks else ""))
    elif not causes:
        console.print("[green]nothing wrong[/]: no cause found" + (" (quirks below)" if quirks else ""))
    for i, d in enumerate(causes, 1):
        print_cause(console, i, d)
    if quirks:
        print_hanging(console, f"[bold]quirks[/] (spec deviations the broker accepts; `validate --strict` lists "
                               f"them): {sum(q['count'] for q in quirks)}", HANG)  # fmt: skip
        for q in quirks:
            where = f"{q['file']}: " if q.get("file") else ""
            n = len(q["connections"])
            # "  " then the quirk; its continuation lines under the library name's text
            print_hanging(console, f"  {escape(where)}{escape(q['library'])}: {q['quirk']} ×{q['count']} on {n} "
                                   f"connection{'s' if n != 1 else ''} — {escape(q['summary'])} "
                                   f"[dim](first #{q['packets'][0]})[/]", HANG)  # fmt: skip

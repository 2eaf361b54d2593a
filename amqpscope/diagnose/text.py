"""Diagnoses for people: the same records ``--format jsonl`` writes, as numbered lines on a console
(``diagnose``, the top of ``stats``, the live summary of ``sniff``)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape

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


def render(console: Console, causes: list[dict[str, Any]], quirks: list[dict[str, Any]], title: str = "") -> None:
    if title:
        console.print(f"[bold]{title}[/]")
    if not causes:
        console.print("[green]nothing wrong[/]: no cause found" + (" (quirks below)" if quirks else ""))
    for i, d in enumerate(causes, 1):
        for line in cause_lines(i, d):
            console.print(line)
    if quirks:
        console.print(f"[bold]quirks[/] (spec deviations the broker accepts; `validate --strict` lists them): "
                      f"{sum(q['count'] for q in quirks)}")  # fmt: skip
        for q in quirks:
            where = f"{q['file']}: " if q.get("file") else ""
            n = len(q["connections"])
            console.print(f"  {escape(where)}{escape(q['library'])}: {q['quirk']} ×{q['count']} on {n} "
                          f"connection{'s' if n != 1 else ''} — {escape(q['summary'])} "
                          f"[dim](first #{q['packets'][0]})[/]")  # fmt: skip

"""``amqpscope validate``: check captures against the spec's grammars, asserts and rules."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import IO, Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from amqpscope.events import Finding
from amqpscope.filter import Predicate
from amqpscope.output.records import dumps
from amqpscope.validate.findings import RANK, SEVERITIES, at_or_above, counted, tolerated

from .common import (
    EXIT_FINDINGS,
    CaptureRun,
    display_filter,
    format_option,
    input_options,
    load_codec,
    open_output,
    options_from,
    output_option,
    run_guarded,
    selection_options,
    validate_with,
    wrote,
)

_STYLE = {"violation": "bold red", "deviation": "yellow", "warning": "yellow", "info": "blue"}
OCCURRENCES_MIN = 36  # columns below which the first occurrences are no column of their own


@dataclass(slots=True)
class _Group:
    rule: str
    severity: str
    code: int | None
    count: int = 0
    first: list[tuple[str, Finding]] = field(default_factory=list)  # (file, finding), a few
    quirk: str | None = None  # the broker-tolerance table's id: RabbitMQ accepts this deviation


def _summary_line(counts: dict[str, int], quirks: int = 0) -> str:
    parts = [counted(counts[s], s) for s in SEVERITIES if counts.get(s)]
    line = ", ".join(parts) if parts else "no findings"
    return line + (f" ({quirks} of them quirks RabbitMQ accepts)" if quirks else "")


def _where(path: str, f: Finding, several: bool) -> str:
    loc = f"{path}:" if several else ""
    ch = "" if f.channel is None else f" ch{f.channel}"
    return f"{loc}#{f.packet} conn {f.conn}{ch}"


def _render(out: IO[str], groups: list[_Group], counts: dict[str, int], files: tuple[str, ...], first: int,
            quirks: int = 0) -> None:  # fmt: skip
    console = Console(file=out, highlight=False, emoji=False, width=None if out.isatty() else 160)
    several = len(files) > 1
    if not groups:
        console.print("[green]no findings[/]: every connection follows the spec's grammars, asserts and rules")
        return
    # the rule id is what a user copies (to look it up, to --fail-on…): never wrapped nor cut; the
    # broker-tolerance id under it likewise. Below OCCURRENCES_MIN columns for the occurrences, they
    # go under the rule, and the code under the severity
    rule_w = max(max(len(g.rule), len(f"(quirk: {g.quirk})") if g.quirk else 0) for g in groups)
    sev_w = len("violation")
    narrow = console.width - (16 + sev_w + rule_w + len("code") + len("count")) < OCCURRENCES_MIN
    table = Table(title="Findings by rule", title_justify="left", show_lines=True)
    table.add_column("severity", no_wrap=True, overflow="fold", min_width=sev_w)
    if narrow:
        table.add_column("rule, first occurrences", min_width=min(rule_w, console.width - sev_w - 15),
                         overflow="fold", ratio=1)  # fmt: skip
    else:
        table.add_column("rule", no_wrap=True, overflow="fold", min_width=rule_w)
        table.add_column("code", justify="right", no_wrap=True)
    table.add_column("count", justify="right", no_wrap=True)
    if not narrow:
        table.add_column("first occurrences", ratio=1)
    for g in groups:
        lines = []
        for path, f in g.first[:first]:
            line = f"{escape(_where(path, f, several))}: {escape(f.message)}"
            if f.peer_reaction:
                line += f"\n  [dim]↳ {escape(f.peer_reaction)}[/]"
            lines.append(line)
        style = _STYLE.get(g.severity, "white") if g.quirk is None else "dim"
        rule = g.rule if g.quirk is None else f"{g.rule}\n[dim](quirk: {g.quirk})[/]"
        code = "" if g.code is None else str(g.code)
        if narrow:
            label = g.severity + (f"\ncode {code}" if code else "")
            table.add_row(f"[{style}]{label}[/]", f"[bold]{rule}[/]\n" + "\n".join(lines), str(g.count))
        else:
            table.add_row(f"[{style}]{g.severity}[/]", rule, code, str(g.count), "\n".join(lines))
    console.print(table)
    console.print(f"[bold]{_summary_line(counts, quirks)}[/] in {len(files)} file{'s' if several else ''}")


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(allow_dash=True, readable=False))
@input_options
@selection_options
@format_option(["auto", "text", "jsonl", "json"], help="text: a report grouped by rule; jsonl: one JSON object per "
               "finding; json: one document (findings, counts, files); auto is text on a terminal, jsonl otherwise.")
@output_option()
@click.option("--fail-on", type=click.Choice(list(SEVERITIES)), default="violation", show_default=True,
              help="Exit 1 when a finding of this severity or a worse one exists.")
@click.option("--min-severity", type=click.Choice(list(SEVERITIES)), default="info", show_default=True,
              help="Report only findings of this severity or a worse one.")
@click.option("--first", type=click.IntRange(min=1), default=3, show_default=True,
              help="First occurrences shown per rule (text report).")
@click.option("--strict", is_flag=True, help="Show every finding as the spec judges it, without marking the "
              "deviations RabbitMQ accepts as quirks.")  # fmt: skip
def validate(files: tuple[str, ...], spec: str | None, ports: tuple[int, ...], show_credentials: bool, fmt: str,
             output: str | None, fail_on: str, min_severity: str, first: int, strict: bool) -> None:  # fmt: skip
    """Check AMQP in capture FILES against the spec: grammars, asserts, frame rules, semantic rules.

    Exit status: 0 no finding at or above --fail-on; 1 such findings exist; 2 usage or spec error;
    3-6 capture errors (unreadable, not a capture, truncated, corrupt).
    """

    def run() -> int:
        codec = load_codec(spec)
        keep = display_filter(codec)
        capture = CaptureRun(files, codec, options_from(ports, show_credentials, keep_bodies=False))
        validate_with(capture)
        out = open_output(output) if output else sys.stdout
        try:
            code = _run(capture, out, fmt, keep, fail_on, min_severity, first, strict)
        finally:
            if output:
                out.close()
        if output:
            wrote(output, "the findings")
        return code

    run_guarded(run)


def _run(capture: CaptureRun, out: IO[str], fmt: str, keep: Predicate | None, fail_on: str, min_severity: str,
         first: int, strict: bool) -> int:  # fmt: skip
    """Read the findings of ``capture`` (those ``keep`` keeps) and write them in format ``fmt``."""
    files = capture.files
    chosen = fmt if fmt != "auto" else ("text" if out.isatty() else "jsonl")
    groups: dict[tuple[str, str, str | None], _Group] = {}
    counts: dict[str, int] = {}
    everything: list[dict[str, Any]] = []  # json: one document
    failing = False
    quirks = 0
    for ev in capture.events(kinds=("finding",)):
        f: Finding = ev  # type: ignore[assignment]
        if keep is not None and not keep(f.to_record()):
            continue
        # what the broker accepts is one table beside the rule ids (validate/findings.py)
        tolerance = None if strict else tolerated(f)
        quirk = tolerance.id if tolerance is not None else None
        if not at_or_above(f.severity, min_severity):
            continue
        path = capture.stats[-1][0] if capture.stats else ""
        counts[f.severity] = counts.get(f.severity, 0) + 1
        quirks += quirk is not None
        # a deviation the broker accepts does not fail a run (unless --strict)
        failing = failing or (quirk is None and at_or_above(f.severity, fail_on))
        if chosen in ("jsonl", "json"):
            # "quirk": the tolerance table's id, null for a finding RabbitMQ does not accept
            rec = {**f.to_record(), "quirk": quirk, "file": path}
            if chosen == "jsonl":
                out.write(dumps(rec) + "\n")
            else:
                everything.append(rec)
            continue
        g = groups.get((f.rule, f.severity, quirk))
        if g is None:
            g = groups[(f.rule, f.severity, quirk)] = _Group(f.rule, f.severity, f.code, quirk=quirk)
        g.count += 1
        if len(g.first) < first:
            g.first.append((path, f))
    if chosen == "text":
        ordered = sorted(groups.values(), key=lambda g: (g.quirk is not None, RANK[g.severity], -g.count, g.rule))
        _render(out, ordered, counts, files, first, quirks)
    elif chosen == "json":
        out.write(dumps({"findings": everything, "by_severity": counts, "quirks": quirks, "files": list(files),
                         "summary": _summary_line(counts, quirks)}) + "\n")  # fmt: skip
    if capture.exit_code:
        return capture.exit_code
    return EXIT_FINDINGS if failing else 0

"""``amqpscope diagnose``: the causes an operator can act on, ranked by impact, then the quirks."""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import IO, Any

import click
from rich.console import Console

from amqpscope.diagnose import Diagnoser, Diagnosis, Quirk, Thresholds
from amqpscope.diagnose.text import render
from amqpscope.output.records import dumps

from .common import (
    CaptureRun,
    display_filter,
    format_option,
    input_options,
    kept,
    load_codec,
    open_output,
    options_from,
    output_option,
    run_guarded,
    selection_options,
    validate_with,
    wrote,
)


def threshold_options(f: Any) -> Any:
    d = Thresholds()
    f = click.option("--blocked-threshold", "blocked_s", type=click.FloatRange(min=0), default=d.blocked_s,
                     show_default=True, help="publisher-blocked: shortest blocked period reported (s).")(f)
    f = click.option("--heartbeat-factor", type=click.FloatRange(min=1), default=d.heartbeat_factor,
                     show_default=True, help="heartbeat-timeout: silence longer than this many negotiated "
                     "heartbeat intervals.")(f)  # fmt: skip
    f = click.option("--poison-redeliveries", type=click.IntRange(min=2), default=d.poison_redeliveries,
                     show_default=True, help="poison-message: requeueing rejects of one message.")(f)
    f = click.option("--stall-threshold", "stall_s", type=click.FloatRange(min=0), default=d.stall_s,
                     show_default=True, help="consumer-stalled: seconds at the prefetch limit with nothing "
                     "settled.")(f)  # fmt: skip
    return f


def thresholds_from(kw: dict[str, Any]) -> Thresholds:
    return Thresholds(stall_s=kw["stall_s"], poison_redeliveries=kw["poison_redeliveries"],
                      heartbeat_factor=kw["heartbeat_factor"], blocked_s=kw["blocked_s"])  # fmt: skip


def run_diagnosis(files: tuple[str, ...], spec: str | None, ports: tuple[int, ...], show_credentials: bool,
                  thresholds: Thresholds) -> tuple[Diagnoser, CaptureRun]:  # fmt: skip
    """Decode FILES with validation and feed every event (that ``-Y`` keeps) to one Diagnoser."""
    codec = load_codec(spec)
    keep = display_filter(codec)
    # the core's ledger events: what consumer-stalled, poison-message and unacked-requeued read
    options = replace(options_from(ports, show_credentials, keep_bodies=False), ledger=True)
    capture = CaptureRun(files, codec, options)
    validate_with(capture)
    diag = Diagnoser(thresholds)
    seen = 0
    for ev in kept(capture.events(), keep):
        if len(capture.stats) != seen:  # a new file: connection ids restart
            seen = len(capture.stats)
            diag.next_file(capture.stats[-1][0] if len(files) > 1 else None)
        diag.feed(ev)
    diag.finish()
    return diag, capture


def render_text(out: IO[str], found: list[Diagnosis], quirks: list[Quirk],
                not_seen: list[dict[str, Any]] | None = None) -> None:  # fmt: skip
    console = Console(file=out, highlight=False, emoji=False, width=None if out.isatty() else 160)
    render(console, [d.to_record() for d in found], [q.to_record() for q in quirks], not_seen=not_seen)


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(allow_dash=True, readable=False))
@input_options
@selection_options
@format_option(["auto", "text", "jsonl", "json"], help="text for people, one JSON object per cause and quirk, or "
               "one JSON document; auto is text on a terminal, jsonl otherwise.")
@output_option()
@threshold_options
def diagnose(files: tuple[str, ...], spec: str | None, ports: tuple[int, ...], show_credentials: bool, fmt: str,
             output: str | None, **kw: Any) -> None:  # fmt: skip
    """What went wrong in capture FILES: one entry per cause, ranked by impact, with the packets that
    prove it and what the broker did; then the quirks the broker accepts, per client library.

    Exit status: 0 (also when causes are found); 2 usage or spec error; 3-6 capture errors.
    """

    def run() -> int:
        out = open_output(output) if output else sys.stdout
        try:
            diag, capture = run_diagnosis(files, spec, ports, show_credentials, thresholds_from(kw))
            _write(out, fmt, diag.result(), diag.quirk_list(), files, diag.blind.records())
        finally:
            if output:
                out.close()
        if output:
            wrote(output, "the diagnosis")
        return capture.exit_code

    run_guarded(run)


def _write(out: IO[str], fmt: str, found: list[Diagnosis], quirks: list[Quirk], files: tuple[str, ...],
           not_seen: list[dict[str, Any]]) -> None:  # fmt: skip
    """What was not seen, then the causes and quirks, in format ``fmt`` (auto: text on a terminal,
    else JSON lines)."""
    chosen = fmt if fmt != "auto" else ("text" if out.isatty() else "jsonl")
    if chosen == "jsonl":
        for r in not_seen:
            out.write(dumps(r) + "\n")
        for d in found:
            out.write(dumps(d.to_record()) + "\n")
        for q in quirks:
            out.write(dumps(q.to_record()) + "\n")
    elif chosen == "json":
        out.write(dumps({"not_seen": not_seen, "causes": [d.to_record() for d in found],
                         "quirks": [q.to_record() for q in quirks], "files": list(files),
                         "nothing_wrong": not found and not not_seen}) + "\n")  # fmt: skip
    else:
        render_text(out, found, quirks, not_seen)

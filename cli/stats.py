"""``amqpscope stats``: conversation analytics of captures as tables or JSON."""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import IO, Any, TypeVar

import click
from rich.console import Console

from amqpscope.analysis.stats import Analyzer
from amqpscope.analysis.tables import render
from amqpscope.diagnose import Diagnoser, Thresholds
from amqpscope.output.records import dumps

from .common import CaptureRun, fail, input_options, load_codec, options_from, run_guarded, validate_with
from .diagnose import threshold_options, thresholds_from
from .tables import capture_option, run_tables_analysis, tables_dirs

F = TypeVar("F", bound=Any)


def run_analysis(files: tuple[str, ...], spec: str | None, ports: tuple[int, ...], show_credentials: bool,
                 validate: bool = True, thresholds: Thresholds | None = None) -> tuple[Analyzer, CaptureRun]:  # fmt: skip
    """Decode FILES and feed every event to one Analyzer (bodies are hashed, not kept).

    With ``validate`` the core's findings come with the events, so they are counted by rule; the
    core's ledger events (acks, confirms, pairs, heartbeats) come with them too. FILES may instead
    be directories of Parquet tables: their events are read back, not decoded (cli/tables.py)."""
    codec = load_codec(spec)
    if tables_dirs(files):
        return run_tables_analysis(files, codec, validate, thresholds)  # type: ignore[return-value]
    options = replace(options_from(ports, show_credentials, keep_bodies=False), ledger=True)
    capture = CaptureRun(files, codec, options)
    analyzer = Analyzer(codec.spec, ledger_in_stream=True)
    if thresholds is not None:
        analyzer.diagnoser = Diagnoser(thresholds)  # the diagnosis at the top: diagnose's options
    if validate:
        validate_with(capture)
    seen = 0
    for ev in capture.events():
        if len(capture.stats) != seen:  # a new file: keep its connection ids apart
            if seen:
                analyzer.next_file()
            seen = len(capture.stats)
        analyzer.feed(ev)
    analyzer.finish()
    return analyzer, capture


def open_output(path: str) -> IO[str]:
    """Open an output file up front, so a bad path fails in one line before any decoding."""
    try:
        return open(path, "w", encoding="utf-8")
    except OSError as exc:
        fail(f"cannot write '{path}': {exc.strerror or exc}")


def no_validate_option(f: F) -> F:
    return click.option("--no-validate", is_flag=True,
                        help="Skip spec validation (faster; the findings table stays empty).")(f)  # fmt: skip


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(allow_dash=True, readable=False))
@input_options
@click.option(
    "-T",
    "--format",
    "fmt",
    type=click.Choice(["auto", "rich", "json"]),
    default="auto",
    show_default=True,
    help="rich tables, or one JSON document; auto is rich on a terminal, json otherwise.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help="Write to FILE instead of standard output.",
)
@no_validate_option
@threshold_options
@capture_option
def stats(files: tuple[str, ...], spec: str | None, ports: tuple[int, ...], show_credentials: bool, fmt: str,
          output: str | None, no_validate: bool, **kw: Any) -> None:  # fmt: skip
    """Conversation analytics of capture FILES: methods, ledgers, latencies, heartbeats, audit.

    FILES may be directories of Parquet tables (``batch``, ``decode --format parquet``) instead."""

    def run() -> int:
        out = open_output(output) if output else sys.stdout
        try:
            analyzer, capture = run_analysis(files, spec, ports, show_credentials, not no_validate,
                                             thresholds_from(kw))  # fmt: skip
            if capture.error is not None and not analyzer.events:
                return capture.exit_code  # nothing could be read: the error is all there is to say
            report = analyzer.report()
            chosen = fmt
            if chosen == "auto":
                chosen = "rich" if out.isatty() else "json"
            if chosen == "json":
                out.write(dumps(report) + "\n")
            else:
                render(report, Console(file=out, highlight=False, emoji=False, width=None if out.isatty() else 160))
        finally:
            if output:
                out.close()
        return capture.exit_code

    run_guarded(run)

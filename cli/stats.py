"""``amqpscope stats``: conversation analytics of captures as tables or JSON."""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import Any, TypeVar

import click
from rich.console import Console

from amqpscope.analysis.stats import Analyzer
from amqpscope.analysis.tables import render
from amqpscope.diagnose import Diagnoser, Thresholds
from amqpscope.output.records import dumps

from .common import (
    CaptureRun,
    display_filter,
    fail,
    format_option,
    input_options,
    kept,
    load_codec,
    open_output,
    options_from,
    output_option,
    packet_count,
    run_guarded,
    selection_options,
    validate_with,
    wrote,
)
from .diagnose import threshold_options, thresholds_from
from .tables import capture_option, run_tables_analysis, tables_dirs

F = TypeVar("F", bound=Any)


def run_analysis(files: tuple[str, ...], spec: str | None, ports: tuple[int, ...], show_credentials: bool,
                 validate: bool = True, thresholds: Thresholds | None = None) -> tuple[Analyzer, CaptureRun]:  # fmt: skip
    """Decode FILES and feed every event to one Analyzer (bodies are hashed, not kept).

    With ``validate`` the core's findings come with the events, so they are counted by rule; the
    core's ledger events (acks, confirms, pairs, heartbeats) come with them too. FILES may instead
    be directories of Parquet tables: their events are read back, not decoded (cli/tables.py).
    ``-Y`` and ``-c`` of the running command select the events analysed."""
    codec = load_codec(spec)
    keep = display_filter(codec)
    if tables_dirs(files):
        if packet_count() is not None:
            fail("-c/--count reads the first packets of capture files, not of Parquet tables")
        return run_tables_analysis(files, codec, validate, thresholds, keep)  # type: ignore[return-value]
    options = replace(options_from(ports, show_credentials, keep_bodies=False), ledger=True)
    capture = CaptureRun(files, codec, options)
    analyzer = Analyzer(codec.spec, ledger_in_stream=True)
    if thresholds is not None:
        analyzer.diagnoser = Diagnoser(thresholds)  # the diagnosis at the top: diagnose's options
    if validate:
        validate_with(capture)
    seen = 0
    for ev in kept(capture.events(), keep):
        if len(capture.stats) != seen:  # a new file: keep its connection ids apart
            if seen:
                analyzer.next_file()
            seen = len(capture.stats)
        analyzer.feed(ev)
    analyzer.finish()
    return analyzer, capture


def no_validate_option(f: F) -> F:
    return click.option("--no-validate", is_flag=True,
                        help="Skip spec validation (faster; the findings table stays empty).")(f)  # fmt: skip


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(allow_dash=True, readable=False))
@input_options
@selection_options
@format_option(["auto", "text", "json", "jsonl"], help="text: tables; json: one document; jsonl: one JSON object "
               "per section ({\"section\": name, \"data\": …}); auto is text on a terminal, json otherwise.")
@output_option()
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
                chosen = "text" if out.isatty() else "json"
            if chosen == "json":
                out.write(dumps(report) + "\n")
            elif chosen == "jsonl":
                for section, data in report.items():
                    out.write(dumps({"section": section, "data": data}) + "\n")
            else:
                render(report, Console(file=out, highlight=False, emoji=False, width=None if out.isatty() else 160))
        finally:
            if output:
                out.close()
        if output:
            wrote(output, "the statistics")
        return capture.exit_code

    run_guarded(run)

"""``amqpscope stats``: conversation analytics of captures as tables or JSON."""

from __future__ import annotations

import sys

import click
from rich.console import Console

from amqpscope.analysis.stats import Analyzer
from amqpscope.analysis.tables import render
from amqpscope.output.records import dumps

from .common import CaptureRun, input_options, load_codec, options_from, run_guarded


def run_analysis(files: tuple[str, ...], spec: str | None, ports: tuple[int, ...],
                 show_credentials: bool) -> tuple[Analyzer, CaptureRun]:  # fmt: skip
    """Decode FILES and feed every event to one Analyzer (bodies are hashed, not kept)."""
    codec = load_codec(spec)
    capture = CaptureRun(files, codec, options_from(ports, show_credentials, keep_bodies=False))
    analyzer = Analyzer(codec.spec)
    seen = 0
    for ev in capture.events():
        if len(capture.stats) != seen:  # a new file: keep its connection ids apart
            if seen:
                analyzer.next_file()
            seen = len(capture.stats)
        analyzer.feed(ev)
    analyzer.finish()
    return analyzer, capture


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(allow_dash=True))
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
def stats(files: tuple[str, ...], spec: str | None, ports: tuple[int, ...], show_credentials: bool, fmt: str,
          output: str | None) -> None:  # fmt: skip
    """Conversation analytics of capture FILES: methods, ledgers, latencies, heartbeats, audit."""

    def run() -> int:
        analyzer, capture = run_analysis(files, spec, ports, show_credentials)
        report = analyzer.report()
        out = open(output, "w", encoding="utf-8") if output else sys.stdout  # noqa: SIM115
        try:
            chosen = fmt
            if chosen == "auto":
                chosen = "rich" if out.isatty() else "json"
            if chosen == "json":
                out.write(dumps(report) + "\n")
            else:
                render(report, Console(file=out, highlight=False, width=None if out.isatty() else 160))
        finally:
            if output:
                out.close()
        return capture.exit_code

    run_guarded(run)

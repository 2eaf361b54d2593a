"""``amqpscope report``: one self-contained HTML page with the stats tables and plots."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable
from typing import Any

import click

from amqpscope.analysis.html import render_html
from amqpscope.analysis.report_evidence import collect
from amqpscope.analysis.report_seen import from_run, tls_inputs
from amqpscope.events import Event
from amqpscope.pipeline import decode_batches

from .common import CaptureRun, input_options, run_guarded, selection_options, wrote
from .diagnose import threshold_options, thresholds_from
from .stats import no_validate_option, open_output, run_analysis
from .tables import TablesRun, capture_option


def _capture_sources(files: tuple[str, ...], capture: CaptureRun) -> list[Callable[[], Iterable[Event]] | None]:
    def again(path: str) -> Iterable[Event]:
        return (ev for batch in decode_batches(path, capture.codec, capture.options) for ev in batch)

    return [None if f == "-" else functools.partial(again, f) for f in files]  # stdin cannot be read twice


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(allow_dash=True, readable=False))
@input_options
@selection_options
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, writable=True), required=True, help="The HTML file to write."
)
@no_validate_option
@threshold_options
@capture_option
def report(files: tuple[str, ...], spec: str | None, ports: tuple[int, ...], show_credentials: bool,
           output: str, no_validate: bool, **kw: Any) -> None:  # fmt: skip
    """Write an HTML report (no external resources) of capture FILES (or Parquet tables directories)."""

    def run() -> int:
        with open_output(output) as fh:
            analyzer, capture = run_analysis(files, spec, ports, show_credentials, not no_validate,
                                             thresholds_from(kw))  # fmt: skip
            if capture.error is not None and not analyzer.events:
                fh.close()
                os.unlink(output)  # nothing could be read: no empty page left behind
                return capture.exit_code
            report = analyzer.report()
            sources: list[Callable[[], Iterable[Event]] | None]
            if isinstance(capture, TablesRun):
                title = ", ".join(capture.titles)
                sources = list(capture.read_again)
            else:
                title = ", ".join("standard input" if f == "-" else os.path.basename(f) for f in files)
                sources = _capture_sources(files, capture)
            evidence = collect(sources, analyzer.diagnoser.file_offsets, report, report["capture"]["start"] or 0.0,
                               tls_inputs(capture))  # fmt: skip
            fh.write(render_html(analyzer, report, title, evidence, from_run(analyzer, capture, evidence.opaque_tls)))
        wrote(output, "the HTML report")
        return capture.exit_code

    run_guarded(run)

"""``amqpscope report``: one self-contained HTML page with the stats tables and plots."""

from __future__ import annotations

import os

import click

from amqpscope.analysis.html import render_html

from .common import input_options, run_guarded
from .stats import no_validate_option, open_output, run_analysis
from .tables import TablesRun, capture_option


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(allow_dash=True, readable=False))
@input_options
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, writable=True), required=True, help="The HTML file to write."
)
@no_validate_option
@capture_option
def report(files: tuple[str, ...], spec: str | None, ports: tuple[int, ...], show_credentials: bool,
           output: str, no_validate: bool) -> None:  # fmt: skip
    """Write an HTML report (no external resources) of capture FILES (or Parquet tables directories)."""

    def run() -> int:
        with open_output(output) as fh:
            analyzer, capture = run_analysis(files, spec, ports, show_credentials, not no_validate)
            if capture.error is not None and not analyzer.events:
                fh.close()
                os.unlink(output)  # nothing could be read: no empty page left behind
                return capture.exit_code
            if isinstance(capture, TablesRun):
                title = ", ".join(capture.titles)
            else:
                title = ", ".join("standard input" if f == "-" else os.path.basename(f) for f in files)
            fh.write(render_html(analyzer, analyzer.report(), title))
        return capture.exit_code

    run_guarded(run)

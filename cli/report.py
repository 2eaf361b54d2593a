"""``amqpscope report``: one self-contained HTML page with the stats tables and plots."""

from __future__ import annotations

import os

import click

from amqpscope.analysis.html import render_html

from .common import input_options, run_guarded
from .stats import run_analysis


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(allow_dash=True))
@input_options
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, writable=True), required=True, help="The HTML file to write."
)
def report(files: tuple[str, ...], spec: str | None, ports: tuple[int, ...], show_credentials: bool,
           output: str) -> None:  # fmt: skip
    """Write an HTML report (no external resources) of capture FILES."""

    def run() -> int:
        analyzer, capture = run_analysis(files, spec, ports, show_credentials)
        title = ", ".join(os.path.basename(f) for f in files)
        page = render_html(analyzer, analyzer.report(), title)
        with open(output, "w", encoding="utf-8") as fh:
            fh.write(page)
        return capture.exit_code

    run_guarded(run)

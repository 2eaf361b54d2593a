"""``amqpscope flow``: a ladder diagram of one connection's methods (text, Mermaid or SVG)."""

from __future__ import annotations

import shutil
import sys

import click

from amqpscope.analysis.flow import build, to_mermaid, to_svg, to_text

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
    run_guarded,
    selection_options,
    wrote,
)


@click.command()
@click.argument("file", type=click.Path(allow_dash=True, readable=False))
@input_options
@click.option("--conn", type=click.IntRange(min=0), default=None, help="Connection id (default: the first one).")
@selection_options
@format_option(["text", "mermaid", "svg"], default=None,
               help="Default: svg for -o *.svg, mermaid for -o *.mmd/*.md, else text.")
@output_option()
@click.option("--channel", "channels", type=click.IntRange(min=0), multiple=True,
              help="Only these channels (repeatable); channel 0 is always shown.")
@click.option("--limit", type=click.IntRange(min=1), default=2000, show_default=True, help="At most N steps.")
def flow(file: str, spec: str | None, ports: tuple[int, ...], show_credentials: bool, conn: int | None,
         fmt: str | None, output: str | None, channels: tuple[int, ...], limit: int) -> None:  # fmt: skip
    """Draw the ladder (sequence) diagram of a connection in capture FILE."""

    def run() -> int:
        codec = load_codec(spec)
        keep = display_filter(codec)
        capture = CaptureRun((file,), codec, options_from(ports, show_credentials, keep_bodies=False))
        ladder = build(kept(capture.events(), keep), conn, limit, frozenset(channels) if channels else None)
        if ladder is None:
            if capture.error is not None:
                return capture.exit_code  # its one error line is printed already
            fail("no AMQP connection in the capture" if conn is None else f"no connection {conn} in the capture")
        chosen = fmt or ("svg" if output and output.endswith(".svg") else
                         "mermaid" if output and output.endswith((".mmd", ".md")) else "text")  # fmt: skip
        if chosen == "text":
            width = shutil.get_terminal_size((100, 24)).columns if sys.stdout.isatty() and not output else 100
            text = to_text(ladder, max(60, width))
        else:
            text = {"mermaid": to_mermaid, "svg": to_svg}[chosen](ladder)
        if output:
            with open_output(output) as fh:
                fh.write(text)
            wrote(output, {"text": "the ladder", "mermaid": "the Mermaid diagram", "svg": "the SVG diagram"}[chosen])
        else:
            sys.stdout.write(text)
        return capture.exit_code

    run_guarded(run)

"""``amqpscope decode``: captures to AMQP frames, methods and messages."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import IO, Any

import click

from amqpscope.events import Event
from amqpscope.filter import compile_filter
from amqpscope.output.records import record
from amqpscope.output.writers import WRITERS, JsonlWriter, Writer

from .common import (
    CaptureRun,
    compression_option,
    deprecated,
    fail,
    format_option,
    input_options,
    load_codec,
    open_output,
    options_from,
    output_option,
    run_guarded,
    tls_keylog_text,
    validate_with,
    wrote,
)

STREAM_FORMATS = ["auto", "text", "jsonl", "json", "csv", "table"]  # also sniff's
FORMATS = [*STREAM_FORMATS, "parquet"]
FORMAT_NAMES = {"text": "text", "jsonl": "JSON lines", "json": "JSON", "csv": "CSV", "table": "text table"}


def make_writer(fmt: str, body: str | None, verbose: bool, out: IO[str] | None = None) -> Writer:
    """The writer for --format; without --body the terminal view previews bodies, the others leave them out."""
    out = out or sys.stdout
    if fmt == "auto":
        fmt = "text" if out.isatty() else "jsonl"
    if fmt in ("text", "rich"):
        # rich only for the terminal view: JSON lines to a pipe start without it
        from rich.console import Console

        from amqpscope.output.console import ConsoleWriter

        return ConsoleWriter(Console(file=out, highlight=False, emoji=False), body=body or "preview", verbose=verbose)
    return WRITERS[fmt](out, body or "none")


class _Progress:
    """A progress bar on stderr for files that take more than a moment (terminal only)."""

    def __init__(self, files: tuple[str, ...], enabled: bool) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self.files = files
        self.bar: Any = None  # a rich Progress, made once decoding takes more than a second
        self.start = time.monotonic()

    def wrap(self, events: Iterator[Event], position: Any) -> Iterator[Event]:
        if not self.enabled:
            return events  # no generator layer in between: this loop runs once per event
        return self._wrap(events, position)

    def _wrap(self, events: Iterator[Event], position: Any) -> Iterator[Event]:
        total = sum(_size(f) for f in self.files)
        task = None
        for i, ev in enumerate(events):
            if i & 1023 == 0:
                if self.bar is None and time.monotonic() - self.start > 1.0 and total:
                    from rich.console import Console
                    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn

                    self.bar = Progress(TextColumn("decoding"), BarColumn(), DownloadColumn(), TimeRemainingColumn(),
                                        console=Console(stderr=True), transient=True)  # fmt: skip
                    self.bar.start()
                    task = self.bar.add_task("decode", total=total)
                if self.bar is not None and task is not None:
                    self.bar.update(task, completed=position())
            yield ev
        if self.bar is not None:
            self.bar.stop()


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size if path != "-" else 0
    except OSError:
        return 0


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(allow_dash=True, readable=False))
@input_options
@format_option(FORMATS, help="Output format; auto is text on a terminal, jsonl otherwise; parquet writes the "
              "tables of 'amqpscope batch' under --out-dir DIR (no Spark).")
@output_option("Write the events to FILE instead of standard output (not with parquet: --out-dir).")
@click.option("--out-dir", default=None, metavar="DIR", type=click.Path(file_okay=False),
              help="Folder of the Parquet tables of --format parquet.")
@click.option("--out", "old_out", default=None, hidden=True, type=click.Path())  # deprecated: -o / --out-dir
@click.option("-V", "--verbose", is_flag=True, help="Full tree of arguments and properties (rich view).")
@click.option("-c", "--count", type=click.IntRange(min=1), default=None, help="Stop after reading N packets.")
@click.option("-Y", "--filter", "display_filter", default=None, metavar="EXPR",
              help="Display filter, e.g. 'basic.publish', 'channel == 3 and not heartbeat', 'args.reply_code >= 400'.")
@click.option("--body", type=click.Choice(["none", "preview", "full"]), default=None,
              help="Message bodies: text by content type, else hex (default: preview on a terminal, none otherwise).")
@click.option("--stats", is_flag=True, help="End with an accounting record: where every stream byte went.")
@click.option("--no-progress", is_flag=True, help="No progress bar on stderr.")
@click.option("--no-validate", is_flag=True, help="No inline findings (spec validation, see 'amqpscope validate').")
@click.option("--ledger", is_flag=True,
              help="Also the core's ledger events: settled deliveries, bad acks, confirms, request/response pairs, "
                   "heartbeat misses (see docs/analytics.md).")  # fmt: skip
@compression_option
@click.option("--threads", type=click.IntRange(min=1), default=None, metavar="N",
              help="With --format parquet, decode N capture slices at once (default: one per CPU; a capture "
                   "over 64 MB is split by TCP flow as 'amqpscope batch' splits it).")  # fmt: skip
@click.option("--diagnose", is_flag=True,
              help="With --format parquet, also the diagnoses table (one row per cause, as 'amqpscope diagnose' "
                   "reports it; needs validation). Python then reads every event: many times slower.")  # fmt: skip
def decode(files: tuple[str, ...], spec: str | None, ports: tuple[int, ...], show_credentials: bool, fmt: str,
           output: str | None, out_dir: str | None, old_out: str | None, verbose: bool, count: int | None,
           display_filter: str | None, body: str | None,
           stats: bool, no_progress: bool, no_validate: bool, ledger: bool, diagnose: bool,
           compression: str, threads: int | None) -> None:  # fmt: skip
    """Decode AMQP in capture FILES (pcap, pcapng, compressed; - for stdin)."""
    if old_out is not None:
        deprecated("--out", "--out-dir DIR (parquet) or -o/--output FILE")
        output = output or old_out
    if fmt == "parquet" and out_dir is None and output is not None:
        deprecated("-o DIR with --format parquet", "--out-dir DIR")
        out_dir, output = output, None
    if fmt == "parquet" or out_dir is not None:
        given = {"-Y/--filter": display_filter is not None, "--body": body is not None, "-c/--count": count is not None,
                 "--stats": stats, "-V/--verbose": verbose, "--show-credentials": show_credentials}  # fmt: skip
        run_guarded(lambda: _parquet(files, out_dir, fmt, spec, ports, not no_validate, diagnose, compression, threads,
                                     [name for name, on in given.items() if on]))  # fmt: skip
    if diagnose:
        fail("--diagnose is for --format parquet (diagnose's own command: amqpscope diagnose)")
    if threads is not None:
        fail("--threads is for --format parquet (the other formats keep the capture's event order)")

    def run() -> int:
        codec = load_codec(spec)
        predicate = compile_filter(display_filter, codec.spec)
        out = open_output(output) if output else None
        writer = make_writer(fmt, body, verbose, out)
        options = options_from(ports, show_credentials, keep_bodies=writer.body != "none")
        capture = CaptureRun(files, codec, replace(options, ledger=ledger))
        capture.max_packets = count
        if not no_validate:
            validate_with(capture)
        progress = _Progress(files, enabled=(not no_progress and not isinstance(writer, JsonlWriter)) or False)
        try:
            body_mode, write = writer.body, writer.write
            if isinstance(writer, JsonlWriter) and predicate is None:
                # JSON lines straight from the core, findings included: no Python object per event
                writer.write_bytes(capture.jsonl(body_mode))
            else:
                events = progress.wrap(capture.events(), capture.position)
                for ev in events:
                    rec = ev.to_record() if body_mode == "none" else record(ev, body_mode)
                    if predicate is None or predicate(rec):
                        write(ev, rec)
            if stats:
                for _path, st in capture.stats:
                    ev = st.accounting_event()
                    writer.write(ev, record(ev))
        finally:
            writer.close()
            if out is not None:
                out.close()
        if out is not None:
            kind = fmt if fmt != "auto" else "jsonl"
            wrote(out.name, FORMAT_NAMES.get(kind, kind))
        return capture.exit_code

    run_guarded(run)


def _parquet(files: tuple[str, ...], out: str | None, fmt: str, spec: str | None, ports: tuple[int, ...],
             validate: bool, diagnose: bool, compression: str, threads: int | None, refused: list[str]) -> int:  # fmt: skip
    """``--format parquet --out-dir DIR``: the tables of ``amqpscope batch``, written in this process."""
    if fmt != "parquet":
        fail("--out-dir is for --format parquet (the other formats write to -o FILE or standard output)")
    if out is None:
        fail("--format parquet needs --out-dir DIR")
    if refused:
        fail(f"{', '.join(refused)}: not with --format parquet (its tables hold every event, never credentials)")
    if "-" in files:
        fail("--format parquet reads capture files, not standard input")
    # pyarrow imports numpy, whose OpenBLAS starts a thread per core that spins ~0.1 CPU-s at start:
    # nothing here does linear algebra
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if diagnose and not validate:
        fail("--diagnose needs validation (not with --no-validate)")
    try:
        from amqpscope.spark.job import JobError, summary
        from amqpscope.spark.local import write_tables
    except ImportError as exc:
        fail(f"--format parquet needs pyarrow (pip install 'amqpscope[parquet]'): {exc}")
    from amqpscope.spark.inputs import InputError

    load_codec(spec)  # a bad spec is one line before anything is written
    try:
        result = write_tables(files, out, spec=spec, ports=frozenset({5672, *ports}), validate=validate,
                              tls_keylog=tls_keylog_text(), diagnose=diagnose, compression=compression,
                              threads=threads)  # fmt: skip
    except (InputError, JobError) as exc:
        fail(str(exc))
    for line in summary(result):
        if line.startswith("error: "):
            click.echo(f"amqpscope: {line}", err=True)  # as decode reports a damaged capture
        else:
            click.echo(line)
    wrote(out, "Parquet tables")
    return result.exit_code  # the first damaged capture's, as for the other formats

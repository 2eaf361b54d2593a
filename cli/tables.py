"""``stats``/``report`` over Parquet tables: a directory written by ``batch`` or
``decode --format parquet`` instead of capture files (``amqpscope.spark.reader``)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import click

from amqpscope.analysis.stats import Analyzer
from amqpscope.diagnose import Diagnoser, Thresholds
from amqpscope.dissect.codec import Codec
from amqpscope.events import Event
from amqpscope.filter import Predicate

from .common import fail, kept

F = TypeVar("F", bound=Any)
_selected: list[str] = []


def _keep(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> None:
    _selected[:] = value


def capture_option(f: F) -> F:
    return click.option("--capture", "captures", multiple=True, expose_value=False, callback=_keep,
                        metavar="ID|GLOB",
                        help="Tables directories: only the captures of this id (c…) or whose URI matches this "
                             "glob (repeatable).")(f)  # fmt: skip


def tables_dirs(files: tuple[str, ...]) -> bool:
    """Whether FILES are tables directories (all of them); a mix with captures is an error."""
    from amqpscope.spark.reader import is_tables_dir

    dirs = [is_tables_dir(f) for f in files]
    if any(dirs) and not all(dirs):
        fail("give either capture files or directories of Parquet tables, not both")
    if _selected and not all(dirs):
        fail("--capture selects captures of Parquet tables directories")
    return bool(dirs) and all(dirs)


class TablesRun:
    """What ``CaptureRun`` tells the commands: the first damaged capture's exit code."""

    def __init__(self) -> None:
        self.error: str | None = None
        self.exit_code = 0
        self.titles: list[str] = []
        self.read_again: list[Callable[[], Iterator[Event]]] = []  # each capture's events, in order


def run_tables_analysis(dirs: tuple[str, ...], codec: Codec, validate: bool, thresholds: Thresholds | None = None,
                        keep: Predicate | None = None) -> tuple[Analyzer, TablesRun]:  # fmt: skip
    """Feed the events of every selected capture of DIRS (in URI order) that ``keep`` keeps (``-Y``)
    to one Analyzer."""
    from amqpscope.spark.reader import TablesError, capture_events, list_captures

    run = TablesRun()
    analyzer = Analyzer(codec.spec, ledger_in_stream=True)
    if thresholds is not None:
        analyzer.diagnoser = Diagnoser(thresholds)  # the diagnosis at the top: diagnose's options
    first = True
    try:
        for root in dirs:
            caps = list_captures(root, _selected)
            if not caps:
                fail(f"{root}: no capture" + (" matches --capture" if _selected else ""))
            for cap in caps:
                if not first:
                    analyzer.next_file()
                first = False
                run.titles.append(cap.capture.rsplit("/", 1)[-1])
                run.read_again.append(functools.partial(capture_events, root, cap, codec.spec, findings=validate))
                for ev in kept(capture_events(root, cap, codec.spec, findings=validate), keep):
                    analyzer.feed(ev)
                if cap.error is not None:
                    click.echo(f"amqpscope: error: {cap.error} (in the tables of {cap.capture})", err=True)
                    if run.error is None:
                        run.error, run.exit_code = cap.error, cap.exit_code
    except TablesError as exc:
        fail(str(exc))
    analyzer.finish()
    return analyzer, run

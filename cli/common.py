"""What every subcommand shares: input options, opening captures, one-line errors, exit codes.

Exit codes: 0 fine; 1 findings at or above --fail-on (validate); 2 usage, spec or filter error;
3 capture unreadable; 4 not a capture; 5 truncated capture; 6 corrupt capture; 11 no packet of a
supported link type; 130 interrupted. (Capture arguments are ``click.Path(readable=False)`` so that
an unreadable file is exit 3 with one line, not click's three-line usage error.)
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any, NoReturn, TypeVar

import click

from amqpscope.capture import CaptureError
from amqpscope.dissect.codec import Codec, get_codec
from amqpscope.dissect.specfiles import SpecError
from amqpscope.events import Event, Finding
from amqpscope.filter import FilterError, Predicate, compile_filter
from amqpscope.keylogs import KeylogWatch, NotAKeylog, read_checked
from amqpscope.pipeline import Options, RunStats, decode_batches, jsonl_batches

EXIT_FINDINGS, EXIT_USAGE, EXIT_INTERRUPTED = 1, 2, 130
F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    click.echo(f"amqpscope: error: {message}", err=True)
    sys.exit(code)


def warn(message: str) -> None:
    click.echo(f"amqpscope: warning: {message}", err=True)


def deprecated(old: str, new: str) -> None:
    """The one-line notice of an old spelling that still works for one release."""
    click.echo(f"amqpscope: warning: {old} is deprecated and goes in the next release; use {new}", err=True)


# old -T names, kept for one release: the human view is "text" in every command
OLD_FORMATS = {"rich": "text"}


class FormatChoice(click.Choice):  # type: ignore[type-arg]
    """``-T/--format`` names; an old one is accepted, with the notice, as its new name. Help and
    completion list the new names only."""

    def __init__(self, choices: list[str], old: dict[str, str] | None = None) -> None:
        super().__init__(choices)
        self.old = OLD_FORMATS if old is None else old

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value in self.old and value not in self.choices:
            new = self.old[value]
            deprecated(f"--format {value}", f"--format {new}")
            return new
        return super().convert(value, param, ctx)


def format_option(choices: list[str], help: str, default: str | None = "auto") -> Callable[[F], F]:
    """``-T/--format``: the same option name, and the same format names, in every command."""
    return click.option("-T", "--format", "fmt", type=FormatChoice(choices), default=default,
                        show_default=default is not None, help=help)  # fmt: skip


def output_option(help: str = "Write to FILE instead of standard output.", required: bool = False) -> Callable[[F], F]:
    """``-o/--output FILE``: always a file (a folder is ``--out-dir``)."""
    # not click.Path(dir_okay=False): decode's deprecated "-o DIR" of parquet is an existing folder
    return click.option("-o", "--output", type=click.Path(), default=None, required=required,
                        metavar="FILE", help=help)  # fmt: skip


def open_output(path: str, binary: bool = False) -> IO[Any]:
    """Open an output file up front, so a bad path fails in one line before any decoding."""
    try:
        return open(path, "wb") if binary else open(path, "w", encoding="utf-8")
    except OSError as exc:
        fail(f"cannot write '{path}': {exc.strerror or exc}")


def wrote(path: str, what: str) -> None:
    """Say on stderr what a command wrote to a file or folder (stdout stays the data's)."""
    try:
        size = os.path.getsize(path) if not os.path.isdir(path) else None
    except OSError:
        size = None
    click.echo(f"amqpscope: wrote {what} to {path}" + ("" if size is None else f" ({_bytes(size)})"), err=True)


def _bytes(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    return f"{n / 1024:.1f} KiB" if n < 1 << 20 else f"{n / (1 << 20):.1f} MiB"


def _keep_meta(key: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    def keep(ctx: click.Context, _param: click.Parameter, value: Any) -> None:
        ctx.meta[key] = value

    return keep


def selection_options(f: F) -> F:
    """``-Y EXPR`` and ``-c N`` of the commands that read captures, as decode has them: only the
    events the filter keeps are read (checked, analysed, drawn), only the first N packets."""
    f = click.option("-c", "--count", type=click.IntRange(min=1), default=None, expose_value=False,
                     callback=_keep_meta("amqpscope.count"), metavar="N",
                     help="Stop after reading N packets.")(f)  # fmt: skip
    return click.option("-Y", "--filter", "display_filter", default=None, expose_value=False, metavar="EXPR",
                        callback=_keep_meta("amqpscope.filter"),
                        help="Display filter (as for decode, docs/decode.md): only the events it keeps are read.")(f)  # fmt: skip


def _meta(key: str) -> Any:
    ctx = click.get_current_context(silent=True)
    return ctx.meta.get(key) if ctx is not None else None


def packet_count() -> int | None:
    """``-c N`` of the running command (None: every packet)."""
    return _meta("amqpscope.count")  # type: ignore[no-any-return]


def display_filter(codec: Codec) -> Predicate | None:
    """``-Y EXPR`` of the running command, compiled against the command's spec (an unknown name is
    a FilterError: exit 2 with the nearest names)."""
    return compile_filter(_meta("amqpscope.filter"), codec.spec)


def kept(events: Iterable[Event], predicate: Predicate | None) -> Iterator[Event]:
    """The events whose records ``predicate`` keeps (all of them without one)."""
    if predicate is None:
        yield from events
        return
    for ev in events:
        if predicate(ev.to_record()):
            yield ev


def spec_option(f: F) -> F:
    return click.option("--spec", "spec", type=click.Path(dir_okay=False), default=None,
                        help="AMQP 0-9/0-9-1 spec XML to decode with (default: 0-9-1 + RabbitMQ extensions).")(f)  # fmt: skip


def _keep_keylogs(ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]) -> None:
    ctx.meta["amqpscope.tls_keylog"] = value


def tls_keylog_files() -> tuple[str, ...]:
    """The ``--tls-keylog`` files of the running command."""
    ctx = click.get_current_context(silent=True)
    return tuple(ctx.meta.get("amqpscope.tls_keylog", ())) if ctx is not None else ()


def tls_keylog_text() -> str:
    """The text of the ``--tls-keylog`` files (an unreadable one, or one with no key line, is a
    usage error, exit 2: amqpscope/keylogs.py)."""
    try:
        return read_checked(tls_keylog_files())
    except OSError as exc:
        fail(f"cannot read TLS key log: {exc.filename}: {exc.strerror}")
    except NotAKeylog as exc:
        fail(str(exc))


def compression_option(f: F) -> F:
    from amqpscope.spark import COMPRESSIONS, DEFAULT_COMPRESSION

    return click.option("--compression", type=click.Choice(COMPRESSIONS), default=DEFAULT_COMPRESSION,
                        show_default=True, help="Parquet compression (zstd: half the size, more CPU).")(f)  # fmt: skip


def tls_keylog_option(f: F) -> F:
    return click.option("--tls-keylog", "tls_keylog", type=click.Path(dir_okay=False), multiple=True,
                        expose_value=False, callback=_keep_keylogs, metavar="FILE",
                        help="NSS key log (SSLKEYLOGFILE) to decrypt AMQP over TLS with (repeatable).")(f)  # fmt: skip


def input_options(f: F) -> F:
    f = tls_keylog_option(f)
    f = click.option("--port", "ports", type=click.IntRange(1, 65535), multiple=True, metavar="N",
                     help="Treat TCP port N as AMQP (repeatable). AMQP is also detected on any port.")(f)  # fmt: skip
    f = click.option("--show-credentials", is_flag=True, help="Show passwords from connection.start-ok.")(f)
    return spec_option(f)


def validate_with(capture: CaptureRun) -> None:
    """Inline findings for ``capture``: the core's validator follows each event with its findings."""
    capture.options = dataclasses.replace(capture.options, validate=True)


def load_codec(spec: str | None) -> Codec:
    try:
        return get_codec(spec)
    except SpecError as exc:
        fail(str(exc))


def options_from(ports: tuple[int, ...], show_credentials: bool, keep_bodies: bool = True,
                 follow_keylogs: bool = False) -> Options:  # fmt: skip
    """The decode options of the running command. ``follow_keylogs`` (live runs): the
    ``--tls-keylog`` files are read by the core as they grow, and may not exist yet."""
    ports_ = frozenset({5672, *ports})
    if follow_keylogs:
        files = tls_keylog_files()
        for f in files:
            if os.path.isdir(f):
                fail(f"cannot read TLS key log: {f}: is a directory")
            if not os.path.exists(f):
                warn(f"TLS key log {f} does not exist yet: read once it appears")
        return Options(ports=ports_, show_credentials=show_credentials, keep_bodies=keep_bodies,
                       tls_follow=tuple(os.path.abspath(f) for f in files))  # fmt: skip
    return Options(ports=ports_, show_credentials=show_credentials, keep_bodies=keep_bodies,
                   tls_keylog=tls_keylog_text())  # fmt: skip


class UnsupportedLinkType(CaptureError):
    """Every packet is of a link type the decoder does not know: nothing could be decoded."""

    exit_code = 11  # 7-10 are the live capture's errors (sniff)


class CaptureRun:
    """Decode several capture files in turn; remembers the first capture error for the exit code."""

    def __init__(self, files: tuple[str, ...], codec: Codec, options: Options) -> None:
        self.files = files
        self.codec = codec
        self.options = options
        self.error: CaptureError | None = None
        self.stats: list[tuple[str, RunStats]] = []
        self.max_packets: int | None = packet_count()  # -c N of the commands with selection_options
        self._done = 0  # files finished, for progress over several files
        self.keylogs = KeylogWatch(tls_keylog_files())  # what the TLS connections made of them

    def position(self) -> int:
        """Bytes of the input files finished so far (for the progress bar)."""
        return sum(_size(f) for f in self.files[: self._done])

    def events(self, kinds: Iterable[str] | None = None) -> Iterator[Event]:
        """Every file's events in turn; with ``kinds`` only events of those kinds."""
        return itertools.chain.from_iterable(self.batches(kinds))

    def batches(self, kinds: Iterable[str] | None = None) -> Iterator[list[Event]]:
        """The events of every file in lists (see ``pipeline.decode_batches``)."""
        wanted = None if kinds is None else frozenset(kinds)
        # the tls events judge the key logs, whatever the caller reads
        asked = wanted if wanted is None or not self.keylogs.files else wanted | {"tls"}
        for path in self.files:
            for batch in self._each(path, lambda stats, p=path: decode_batches(  # type: ignore[misc]
                    p, self.codec, self.options, stats, self.max_packets, kinds=asked)):
                self.keylogs.see(batch)
                yield batch if asked == wanted else [ev for ev in batch if ev.kind in wanted]  # type: ignore[operator]
        finding = self._keylogs_judged()
        if finding is not None and self.options.validate and (wanted is None or "finding" in wanted):
            yield [finding]

    def jsonl(self, body: str) -> Iterator[bytes]:
        """The JSON lines of every file's events (findings included when validating), written by
        the core (no filter)."""
        for path in self.files:
            for batch in self._each(path, lambda stats, p=path: jsonl_batches(  # type: ignore[misc]
                    p, self.codec, self.options, stats, body, self.max_packets)):
                self.keylogs.see_jsonl(batch)
                yield batch
        self._keylogs_judged()

    def _keylogs_judged(self) -> Finding | None:
        """At the end of the run: key logs that matched no TLS connection are a warning on stderr,
        and a ``tls.keylog-unmatched`` finding (amqpscope/keylogs.py). Not judged when the run was
        cut (a capture error, ``-c``) before any TLS connection."""
        if not self.keylogs.tls and (self.error is not None or self.max_packets is not None):
            return None
        finding = self.keylogs.finding()
        if finding is not None:
            warn(finding.message)
        return finding

    def _each(self, path: str, decode: Callable[[RunStats], Iterator[T]]) -> Iterator[T]:
        stats = RunStats()
        self.stats.append((path, stats))
        try:
            yield from decode(stats)
            unsupported = sorted(k.rsplit(" ", 1)[1] for k in stats.skipped if k.startswith("unsupported link"))
            if unsupported and not stats.tcp_packets:
                raise UnsupportedLinkType(
                    f"capture '{path}' has no packet of a supported link type (link type {', '.join(unsupported)})"
                )
        except CaptureError as exc:
            click.echo(f"amqpscope: error: {exc}", err=True)
            self.error = self.error or exc
        finally:
            self._done += 1

    @property
    def exit_code(self) -> int:
        return self.error.exit_code if self.error else 0


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size if path != "-" else 0
    except OSError:
        return 0


def run_guarded(body: Callable[[], int]) -> NoReturn:
    """Run a command body: one-line errors, quiet on a closed pipe, 130 on Ctrl-C."""
    try:
        code = body()
    except FilterError as exc:
        fail(str(exc))
    except SpecError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        click.echo("amqpscope: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except BrokenPipeError:
        # the reader went away (| head): stop quietly, as Unix tools do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(0)
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    sys.exit(code)

"""What every subcommand shares: input options, opening captures, one-line errors, exit codes.

Exit codes: 0 fine; 1 findings at or above --fail-on (validate); 2 usage, spec or filter error;
3 capture unreadable; 4 not a capture; 5 truncated capture; 6 corrupt capture; 11 no packet of a
supported link type; 130 interrupted. (Capture arguments are ``click.Path(readable=False)`` so that
an unreadable file is exit 3 with one line, not click's three-line usage error.)
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Callable, Iterator
from typing import IO, Any, NoReturn, TypeVar

import click

from amqpscope.capture import CaptureError, CaptureUnreadable, read_packets
from amqpscope.dissect.codec import Codec, get_codec
from amqpscope.dissect.spec import Spec, SpecError
from amqpscope.events import Event
from amqpscope.filter import FilterError
from amqpscope.packets import RawPacket
from amqpscope.pipeline import RunStats, decode_batches
from amqpscope.session import Options
from amqpscope.validate.beside import BesideStage, usable_cores
from amqpscope.validate.validator import Validator

EXIT_FINDINGS, EXIT_USAGE, EXIT_INTERRUPTED = 1, 2, 130
F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    click.echo(f"amqpscope: error: {message}", err=True)
    sys.exit(code)


def warn(message: str) -> None:
    click.echo(f"amqpscope: warning: {message}", err=True)


def spec_option(f: F) -> F:
    return click.option("--spec", "spec", type=click.Path(dir_okay=False), default=None,
                        help="AMQP 0-9/0-9-1 spec XML to decode with (default: 0-9-1 + RabbitMQ extensions).")(f)  # fmt: skip


def input_options(f: F) -> F:
    f = click.option("--port", "ports", type=click.IntRange(1, 65535), multiple=True,
                     help="Treat TCP port N as AMQP (repeatable). AMQP is also detected on any port.")(f)  # fmt: skip
    f = click.option("--show-credentials", is_flag=True, help="Show passwords from connection.start-ok.")(f)
    return spec_option(f)


def jobs_option(f: F) -> F:
    return click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
                        help="Processes. 2 (the default with two or more cores): a helper process decodes each file "
                        "again to validate it, beside this one. 1: one process.")(f)  # fmt: skip


def validate_with(capture: CaptureRun, spec: Spec, jobs: int | None) -> None:
    """Inline findings for ``capture``: from a helper process when there is a core for it."""
    capture.validator = Validator(spec)
    capture.beside = (jobs or usable_cores()) >= 2


def load_codec(spec: str | None) -> Codec:
    try:
        return get_codec(spec)
    except SpecError as exc:
        fail(str(exc))


def options_from(ports: tuple[int, ...], show_credentials: bool, keep_bodies: bool = True) -> Options:
    return Options(ports=frozenset({5672, *ports}), show_credentials=show_credentials, keep_bodies=keep_bodies)


def open_capture(path: str) -> IO[bytes]:
    try:
        return open(path, "rb")  # closed by CaptureRun
    except OSError as exc:
        raise CaptureUnreadable(f"cannot read capture '{path}': {exc.strerror or exc}") from None


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
        self.max_packets: int | None = None
        self.validator: Validator | None = None  # inline findings, as the first stage
        self.beside = False  # ... computed by a helper process that decodes each file again
        self._consumed = 0  # bytes of earlier files, for progress over several files
        self._fh: Any = None

    def position(self) -> int:
        """Bytes of input consumed so far (for the progress bar)."""
        try:
            return self._consumed + (self._fh.tell() if self._fh is not None else 0)
        except (OSError, ValueError):
            return self._consumed

    def events(self, stages: tuple[Callable[[Iterator[Event]], Iterator[Event]], ...] = ()) -> Iterator[Event]:
        return itertools.chain.from_iterable(self.batches(stages))

    def batches(self, stages: tuple[Callable[[Iterator[Event]], Iterator[Event]], ...] = ()) -> Iterator[list[Event]]:
        """The events of every file in lists (see ``decode_batches``)."""
        for path in self.files:
            stats = RunStats()
            self.stats.append((path, stats))
            try:
                source: Any = sys.stdin.buffer if path == "-" else open_capture(path)
                self._fh = None if path == "-" else source
                yield from decode_batches(self._packets(source), self.codec, self.options, stats,
                                          self._validation(path) + stages)  # fmt: skip
                unsupported = sorted(k.rsplit(" ", 1)[1] for k in stats.skipped if k.startswith("unsupported link"))
                if unsupported and not stats.tcp_packets:
                    raise UnsupportedLinkType(
                        f"capture '{path}' has no packet of a supported link type (link type {', '.join(unsupported)})"
                    )
            except CaptureError as exc:
                click.echo(f"amqpscope: error: {exc}", err=True)
                self.error = self.error or exc
            finally:
                if self._fh is not None:
                    self._consumed += os.fstat(self._fh.fileno()).st_size
                    self._fh.close()
                    self._fh = None

    def _packets(self, source: Any) -> Iterator[RawPacket]:
        packets = read_packets(source)
        return packets if self.max_packets is None else itertools.islice(packets, self.max_packets)

    def _validation(self, path: str) -> tuple[Callable[[Iterator[Event]], Iterator[Event]], ...]:
        if self.validator is None:
            return ()
        if not self.beside or path == "-" or not os.path.isfile(path):
            return (self.validator.stage,)  # stdin, a pipe or a device cannot be read a second time
        inline = self.validator.stage

        def validated() -> Iterator[list[Event]]:  # runs in the helper process
            packets = self._packets(open_capture(path))
            return decode_batches(packets, self.codec, self.options, RunStats(), (inline,))

        return (BesideStage(validated, inline, warn),)

    @property
    def exit_code(self) -> int:
        return self.error.exit_code if self.error else 0


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

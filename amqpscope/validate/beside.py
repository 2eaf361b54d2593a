"""Validation beside the decoder: the validator's findings from a second process.

Checking every frame against the spec costs about as much as decoding and writing it. On a machine
with a second core, ``decode`` forks a helper that decodes the same capture file again with the
validator and sends back only the findings (few), each with its place in the event stream: the
number of events before it. The main process decodes and writes, and splices the findings in
where the inline stage (``Validator.stage``) would have put them, so the output is the same
event for event. Decoding is deterministic and the helper is a fork (same spec, options and
hash seed), so both processes see the same events in the same order; every message of the helper
names the packet of its last event, and the main process checks it.

The cost is CPU: the capture is read and decoded twice, so this only pays where the helper gets a
core of its own. Input that cannot be read twice (stdin, a pipe, a live interface) is validated
inline.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection, Pipe

from amqpscope.events import Event, Finding
from amqpscope.validate.validator import Stage

CHUNK = 8192  # events per message from the helper: few messages, and the main process rarely waits

# (events so far, packet of the last of them, [(events before the finding, finding)], done)
Progress = tuple[int, int, list[tuple[int, Finding]], bool]


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class BesideStage:
    """A pipeline stage with the inline validator's ``batches`` form for one capture file.

    ``decode`` runs in the helper: the file's batches through ``inline``, the validator's own
    stage, which also validates here when no helper can be started. ``warn`` reports (one line)
    when the helper stops early or disagrees: the findings from that point on are missing, the
    events are not.
    """

    def __init__(self, decode: Callable[[], Iterator[list[Event]]], inline: Stage, warn: Callable[[str], None]) -> None:
        self.decode = decode
        self.inline = inline
        self.warn = warn

    def __call__(self, events: Iterator[Event]) -> Iterator[Event]:
        for evs in self.batches([ev] for ev in events):
            yield from evs

    def batches(self, batches: Iterator[list[Event]]) -> Iterator[list[Event]]:
        try:
            helper = _Helper(self.decode)
        except OSError as exc:  # no process to spare (EAGAIN, ENOMEM): validate here
            self.warn(f"cannot start the validation helper ({exc.strerror or exc}): validating in this process")
            yield from self.inline.batches(batches)
            return
        try:
            yield from _splice(batches, helper, self.warn)
        finally:
            helper.stop()


def _splice(batches: Iterator[list[Event]], helper: _Helper, warn: Callable[[str], None]) -> Iterator[list[Event]]:
    got = _Received(helper, warn)
    seen = 0  # events of this process so far
    for evs in batches:
        end = seen + len(evs)
        got.wait(end)
        if got.state is _DONE and got.known < end:
            got.lose(f"the validation helper decoded {got.known} events where this process decoded more: "
                     "no findings after them")  # fmt: skip
        while got.checks and got.checks[0][0] < end:  # ``lose`` empties them
            index, packet = got.checks.pop(0)
            mine = evs[index - seen].packet
            if mine != packet:
                got.lose(f"the validation helper decoded packet {packet} where this process decoded packet {mine}: "
                         "no findings after it", drop=True)  # fmt: skip
        pending = got.pending
        if not pending or pending[0][0] > end:
            seen = end
            yield evs
            continue
        out: list[Event] = []
        at = 0
        while pending and pending[0][0] <= end:
            index, finding = pending.pop(0)
            out += evs[at : index - seen]
            at = index - seen
            out.append(finding)
        out += evs[at:]
        seen = end
        yield out
    # the end of the input: the findings of the inline stage's ``finish``, and the count agreed
    got.wait(math.inf)
    if got.state is _DONE and got.known != seen:
        got.lose(f"the validation helper decoded {got.known} events where this process decoded {seen}", drop=True)
    yield [f for index, f in got.pending if index <= seen]


class _Received:
    """What the helper has said so far."""

    def __init__(self, helper: _Helper, warn: Callable[[str], None]) -> None:
        self.helper = helper
        self.warn = warn
        self.state = _LIVE
        self.known = 0  # the helper's findings are known for the events before this index
        self.pending: list[tuple[int, Finding]] = []  # (events before the finding, finding), in order
        self.checks: list[tuple[int, int]] = []  # (index of an event, its packet in the helper)

    def wait(self, upto: float) -> None:
        """Receive until the findings of the first ``upto`` events are known, or the helper is done
        or lost."""
        while self.state is _LIVE and self.known < upto:
            got = self.helper.receive()
            if got is None:
                self.lose(f"the validation helper stopped after {self.known} events: no findings after them")
                return
            self.known, last_packet, found, done = got
            if self.known:
                self.checks.append((self.known - 1, last_packet))
            self.pending += found
            if done:
                self.state = _DONE

    def lose(self, message: str, drop: bool = False) -> None:
        """Stop listening (one warning); ``drop`` the findings not placed yet: they may be wrong."""
        self.warn(message)
        self.state = _LOST
        self.checks = []
        if drop:
            self.pending = []
        self.helper.stop()


_LIVE, _DONE, _LOST = "live", "done", "lost"


class _Helper:
    """The forked helper process and the read end of its pipe."""

    def __init__(self, decode: Callable[[], Iterator[list[Event]]]) -> None:
        reader, writer = Pipe(duplex=False)
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child process (its work is checked through the parent)
            reader.close()
            _child(decode, writer)
        writer.close()
        self.pid: int | None = pid
        self.conn: Connection = reader

    def receive(self) -> Progress | None:
        try:
            return self.conn.recv()  # type: ignore[no-any-return]
        except (EOFError, OSError):
            return None

    def stop(self) -> None:
        if self.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)  # done, or not needed any more
            os.waitpid(self.pid, 0)
            self.pid = None
            self.conn.close()


def _child(decode: Callable[[], Iterator[list[Event]]], conn: Connection) -> None:  # pragma: no cover
    """Decode with the validator, send the findings; leave with ``os._exit``: the child shares the
    parent's buffered output objects and must neither flush them nor run the parent's exit
    handlers. Ctrl-C reaches the whole process group: the parent reports it, the child just ends."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    code = 0
    count, last, found, sent = 0, 0, [], 0
    try:
        try:
            for evs in decode():
                for ev in evs:
                    if ev.__class__ is Finding:
                        found.append((count, ev))
                    else:
                        count += 1
                        last = ev.packet
                if count - sent >= CHUNK:
                    conn.send((count, last, found, False))
                    found, sent = [], count
        except Exception:  # a capture error: the parent meets it at the same event
            pass
        conn.send((count, last, found, True))
    except BaseException:  # the parent went away (broken pipe) or anything else
        code = 1
    finally:
        os._exit(code)


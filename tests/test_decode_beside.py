"""Validation beside the decoder (``decode -j 2``): the same events and findings, in the same places,
as the inline validator, on every shared capture and on damaged variants; a helper that dies or
disagrees costs findings, with a warning, never events."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import variants
from amqpscope.cli import common
from amqpscope.cli.common import CaptureRun

from amqpscope.capture import CaptureError, read_packets
from amqpscope.dissect.codec import get_codec
from amqpscope.events import Event, Finding, Frame
from amqpscope.session import Options
from amqpscope.validate import beside
from amqpscope.validate.beside import BesideStage
from amqpscope.validate.beside import _Helper as Helper
from amqpscope.validate.validator import Validator
from tests.conftest import CAPTURES

AMQPSCOPE = str(Path(sys.executable).parent / "amqpscope")
ERRORS = Path(__file__).resolve().parents[1] / "samples" / "errors.pcap"
needs_captures = pytest.mark.skipif(not CAPTURES.is_dir(), reason="shared captures not present")
SHARED = sorted(CAPTURES.glob("*.pcap")) if CAPTURES.is_dir() else []
CODEC = get_codec()
VALIDATOR = Validator(CODEC.spec)


def events(path: Path, beside_: bool, warnings: list[str] | None = None) -> tuple[list[Event], CaptureError | None]:
    run = CaptureRun((str(path),), CODEC, Options())
    run.validator, run.beside = VALIDATOR, beside_
    forks: list[int] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(common, "warn", (warnings if warnings is not None else []).append)
        mp.setattr(beside, "_Helper", lambda decode: forks.append(1) or Helper(decode))
        out = list(run.events())
    assert len(forks) == (1 if beside_ else 0)  # the helper process really did the validation
    return out, run.error


def assert_same(path: Path) -> int:
    inline, err1 = events(path, False)
    warned: list[str] = []
    parallel, err2 = events(path, True, warned)
    assert warned == []
    assert parallel == inline
    assert type(err1) is type(err2)
    return sum(type(e) is Finding for e in inline)


@needs_captures
@pytest.mark.parametrize("path", SHARED, ids=lambda p: p.name[:3])
def test_shared_captures_same_as_inline(path: Path) -> None:
    assert_same(path)


@needs_captures
def test_findings_are_spliced_in_place() -> None:
    # s09 has findings in the middle of the stream, s11 at the connection's end (channel.close-ok
    # missing), which the validator holds until the capture shows the end
    assert assert_same(CAPTURES / "s09_pika_errors.pcap") > 0
    assert assert_same(CAPTURES / "s11_amqptools_basic.pcap") > 0


@needs_captures
@pytest.mark.parametrize("damage", ["midstream", "drop", "truncate", "gz"])
def test_damaged_variants_same_as_inline(damage: str, tmp_path: Path) -> None:
    src = CAPTURES / "s04_pika_consumer_acks.pcap"
    dst = tmp_path / ("v.pcap.gz" if damage == "gz" else "v.pcap")
    if damage == "midstream":
        variants.cut_first(src, dst, 12)
    elif damage == "drop":
        variants.drop_packets(src, dst, [30, 31])
    elif damage == "truncate":
        variants.truncate_bytes(src, dst, 700)
    else:
        variants.compress(src, dst, "gz")
    assert_same(dst)


@needs_captures
@pytest.mark.parametrize("seed", range(6))
def test_random_damage_same_as_inline(seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # findings-rich captures with random packets dropped and duplicated, small helper messages
    monkeypatch.setattr(beside, "CHUNK", 5)
    rng = random.Random(seed)
    src = CAPTURES / ("s09_pika_errors.pcap", "s11_amqptools_basic.pcap", "s02_pika_confirms.pcap")[seed % 3]
    n = sum(1 for _ in read_packets(src))
    dropped, doubled = tmp_path / "d.pcap", tmp_path / "dd.pcap"
    variants.drop_packets(src, dropped, rng.sample(range(1, n + 1), k=max(1, n // 15)))
    variants.duplicate(dropped, doubled, rng.sample(range(1, n // 2), k=3))
    assert_same(doubled)


def test_several_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a helper message every few events: many messages, findings across their borders
    monkeypatch.setattr(beside, "CHUNK", 3)
    for path in [*SHARED[:4], ERRORS]:
        assert_same(path)


# --- the splice on its own: a fake helper ------------------------------------------------------


def frame(packet: int) -> Frame:
    return Frame(packet=packet, ts=0.0, conn=0, dir="c2s", channel=1, type="heartbeat", size=0)


def finding(packet: int) -> Finding:
    return Finding(packet=packet, ts=0.0, conn=0, dir="c2s", channel=1, rule="r", severity="warning", code=None,
                   message="m", packets=(packet,))  # fmt: skip


class FakeHelper:
    def __init__(self, messages: list[Any]) -> None:
        self.messages = list(messages)
        self.stopped = False

    def receive(self) -> Any:
        return self.messages.pop(0) if self.messages else None

    def stop(self) -> None:
        self.stopped = True


def splice(batches: list[list[Event]], messages: list[Any]) -> tuple[list[Event], list[str]]:
    warned: list[str] = []
    out = [ev for evs in beside._splice(iter(batches), FakeHelper(messages), warned.append) for ev in evs]  # type: ignore[arg-type]
    return out, warned


def test_splice_places_findings_after_their_event() -> None:
    f = [frame(i) for i in range(1, 7)]
    a, b, c, z = finding(2), finding(3), finding(6), finding(9)
    # batches [1 2] [3 4 5] [6]; findings after event 2 (index 2), after 3 (index 3), after 6, and at the end
    messages = [(4, 4, [(2, a), (3, b)], False), (6, 6, [(6, c), (6, z)], True)]
    out, warned = splice([f[0:2], f[2:5], f[5:6]], messages)
    assert out == [f[0], f[1], a, f[2], b, f[3], f[4], f[5], c, z]
    assert warned == []


def test_splice_helper_that_dies_keeps_every_event() -> None:
    f = [frame(i) for i in range(1, 7)]
    out, warned = splice([f[0:2], f[2:4], f[4:6]], [(2, 2, [(1, finding(1))], False)])
    assert [e for e in out if type(e) is Frame] == f
    assert len(warned) == 1 and "stopped after 2 events" in warned[0]


def test_splice_disagreeing_helper_is_reported_and_ignored() -> None:
    f = [frame(i) for i in range(1, 5)]
    out, warned = splice([f[0:2], f[2:4]], [(2, 7, [(2, finding(2))], False), (4, 4, [(4, finding(4))], True)])
    assert out == f
    assert len(warned) == 1 and "decoded packet 7 where this process decoded packet 2" in warned[0]


def test_splice_helper_with_fewer_events_is_reported() -> None:
    f = [frame(i) for i in range(1, 5)]
    out, warned = splice([f[0:2], f[2:4]], [(3, 3, [], True)])
    assert [e for e in out if type(e) is Frame] == f
    assert len(warned) == 1 and "decoded 3 events" in warned[0]


# --- the command line --------------------------------------------------------------------------


def cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([AMQPSCOPE, "decode", "--format", "jsonl", *args], input=stdin, capture_output=True)


def test_cli_jobs_1_and_2_write_the_same(tmp_path: Path) -> None:
    sample = ERRORS
    one, two = cli("-j", "1", str(sample)), cli("-j", "2", str(sample))
    assert one.returncode == two.returncode == 0
    assert one.stdout == two.stdout and b'"kind":"finding"' in two.stdout
    assert two.stderr == b""
    # stdin cannot be read twice: validated inline, the same output
    piped = cli("-j", "2", "-", stdin=sample.read_bytes())
    assert piped.stdout == one.stdout
    # several files (a helper each), and -c: the helper stops after the same packets
    hello = ERRORS.with_name("hello.pcap")
    for args in (["-c", "40", str(sample)], [str(hello), str(sample)], ["-c", "25", str(sample), str(hello)]):
        one, two = cli("-j", "1", *args), cli("-j", "2", *args)
        assert one.returncode == two.returncode == 0 and two.stderr == b""
        assert one.stdout == two.stdout, args


def test_cli_named_pipe_is_read_once(tmp_path: Path) -> None:
    # a FIFO (or <(zcat x.pcap.gz)) has a path but cannot be read twice: validated inline
    fifo = tmp_path / "capture.fifo"
    os.mkfifo(fifo)
    feeder = subprocess.Popen(["sh", "-c", f"cat {ERRORS} > {fifo}"])
    two = cli("-j", "2", str(fifo))
    feeder.wait()
    assert two.returncode == 0 and two.stderr == b""
    assert two.stdout == cli("-j", "1", str(ERRORS)).stdout


@needs_captures
def test_cli_truncated_capture_same_output_and_exit_code(tmp_path: Path) -> None:
    dst = tmp_path / "t.pcap"
    variants.truncate_bytes(CAPTURES / "s09_pika_errors.pcap", dst, 300)
    one, two = cli("-j", "1", str(dst)), cli("-j", "2", str(dst))
    assert one.returncode == two.returncode != 0
    assert one.stdout == two.stdout
    assert one.stderr == two.stderr


def test_killed_helper_costs_findings_not_events(monkeypatch: pytest.MonkeyPatch) -> None:
    sample = ERRORS
    inline, _ = events(sample, False)

    def dying() -> Iterator[list[Event]]:
        os.kill(os.getpid(), signal.SIGKILL)  # in the helper: it dies before it says anything
        yield []

    warned: list[str] = []
    stage = BesideStage(dying, VALIDATOR.stage, warned.append)
    run = CaptureRun((str(sample),), CODEC, Options())
    got = [ev for evs in stage.batches(run.batches()) for ev in evs]
    assert [e for e in got if type(e) is not Finding] == [e for e in inline if type(e) is not Finding]
    assert len(warned) == 1 and "stopped after 0 events" in warned[0]


def test_no_helper_validates_inline(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_fork() -> int:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", no_fork)
    inline, _ = events(ERRORS, False)
    warned: list[str] = []
    stage = BesideStage(lambda: iter(()), VALIDATOR.stage, warned.append)
    run = CaptureRun((str(ERRORS),), CODEC, Options())
    got = [ev for evs in stage.batches(run.batches()) for ev in evs]
    assert got == inline
    assert warned == ["cannot start the validation helper (Resource temporarily unavailable): validating in this process"]


@needs_captures
def test_stats_jobs_1_and_2_report_the_same() -> None:
    path = str(CAPTURES / "s09_pika_errors.pcap")
    one, two = (subprocess.run([AMQPSCOPE, "stats", "-T", "json", "-j", j, path], capture_output=True) for j in "12")
    assert one.returncode == two.returncode == 0
    assert one.stdout == two.stdout and b'"findings"' in one.stdout

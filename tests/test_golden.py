"""Golden outputs of the core: the JSON lines (bodies in full, with the byte accounting) of the
shipped samples and of variants that exercise the stream-start, gap and resync rules, compared byte
for byte with ``tests/golden/*.jsonl``. A change of behaviour shows up here as a diff to read; when it
is intended, regenerate with ``AMQPSCOPE_UPDATE_GOLDEN=1 pytest tests/test_golden.py`` and commit the
new files with the change that explains them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
import variants

from amqpscope.output.records import dumpb_line, record
from amqpscope.pipeline import RunStats, jsonl_batches

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).parent / "golden"
HELLO = ROOT / "samples" / "hello.pcap"


def _data(src: Path) -> list[int]:
    return [i for i, _seg in variants.data_packets(src)]


# name -> how to build the input from the samples (None: the sample itself)
CASES: dict[str, Callable[[Path], Path] | None] = {
    "hello": None,
    "confirms": None,
    "errors": None,
    # the handshake not captured: the client's protocol header and the server's connection.start start
    # their streams (no resync, version from the header)
    "hello-after-handshake": lambda d: _made(d, lambda p: variants.cut_first(HELLO, p, _data(HELLO)[0] - 1)),
    # the client's header not captured either: its side resyncs, the server's starts at connection.start
    "hello-after-header": lambda d: _made(d, lambda p: variants.cut_first(HELLO, p, _data(HELLO)[1] - 1)),
    # a whole packet lost between frames: a gap, nothing else lost
    "hello-drop": lambda d: _made(d, lambda p: variants.drop_packets(HELLO, p, [_data(HELLO)[6]])),
    # a stream that begins inside a frame
    "hello-mid-frame": lambda d: _made(d, lambda p: variants.trim_payload(HELLO, p, _data(HELLO)[2], 5)),
}


def _made(tmp: Path, build: Callable[[Path], object]) -> Path:
    dst = tmp / "input.pcap"
    build(dst)
    return dst


def output(path: Path) -> bytes:
    stats = RunStats()
    out = b"".join(jsonl_batches(path, stats=stats, body="full"))
    return out + dumpb_line(record(stats.accounting_event()))


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name: str, tmp_path: Path) -> None:
    make = CASES[name]
    src = ROOT / "samples" / f"{name}.pcap" if make is None else make(tmp_path)
    got = output(src)
    golden = GOLDEN / f"{name}.jsonl"
    if os.environ.get("AMQPSCOPE_UPDATE_GOLDEN"):
        golden.write_bytes(got)
    want = golden.read_bytes()
    if got != want:
        for i, (a, b) in enumerate(zip(want.splitlines(), got.splitlines(), strict=False)):
            assert b == a, f"{name}: line {i + 1} differs"
        assert len(got.splitlines()) == len(want.splitlines()), f"{name}: line count"

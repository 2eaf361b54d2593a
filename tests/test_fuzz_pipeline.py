"""A short, fixed-seed run of the mutation fuzzer (tools/fuzz.py) as part of the test suite.

The long runs (a million executions and more) are documented in docs/robustness.md; this keeps
the fuzzer itself working and catches regressions on the same kinds of damage: bit flips, byte
insertions and deletions, truncated files, dropped / duplicated / reordered packets, mutated
payloads and spliced captures, through capture reading, decoding, records and summaries, and
(fewer) through the ``decode`` command itself.
"""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load_fuzz() -> Any:
    spec = importlib.util.spec_from_file_location("amqpscope_tools_fuzz", ROOT / "tools" / "fuzz.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


fuzz = _load_fuzz()


@pytest.fixture(scope="module")
def corpus() -> Any:
    # only the samples shipped in the repository: the run is the same on every checkout
    return fuzz.build_corpus(sorted((ROOT / "samples").glob("*.pcap")))


def _run(corpus: Any, target: str, execs: int, seed: int) -> Any:
    crashes: list[str] = []

    def note(t: str, s: int, data: bytes, exc: BaseException) -> None:
        crashes.append(f"{t} seed {s}: {type(exc).__name__}: {exc}")

    tally = fuzz.fuzz(target, corpus, seed, execs, None, None, fuzz.DEFAULT_LIMIT_S.get(target, 2.0), note)
    assert tally.execs == execs
    assert not crashes, "\n".join(crashes[:10])
    return tally


def test_pipeline_mutations(corpus: Any) -> None:
    tally = _run(corpus, "pipeline", 2000, 20261123)
    assert tally.max_exec_s < 5.0


@pytest.mark.parametrize("target", ["frame", "method", "header", "table", "stream"])
def test_codec_mutations(corpus: Any, target: str) -> None:
    _run(corpus, target, 3000, 77)


def test_cli_mutations(corpus: Any) -> None:
    _run(corpus, "cli", 40, 5)


def test_mutations_are_reproducible(corpus: Any) -> None:
    """The same seed builds the same input, so a saved seed replays its crash."""
    a = fuzz.make_input("pipeline", random.Random(123), corpus)
    b = fuzz.make_input("pipeline", random.Random(123), corpus)
    c = fuzz.make_input("pipeline", random.Random(124), corpus)
    assert a == b and a != c


def test_a_crash_is_caught_and_saved(corpus: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The harness itself: an exception in a target is counted and saved with its seed."""

    def boom(data: bytes, codec: Any) -> None:
        if data[:1] == b"\x01":
            raise ZeroDivisionError("planted")

    monkeypatch.setattr(fuzz, "run_frame", boom)
    tally = fuzz.fuzz("frame", corpus, 0, 300, None, tmp_path, 2.0)
    assert tally.crashes > 0 and any(s.startswith("ZeroDivisionError") for s in tally.signatures)
    saved = sorted(tmp_path.glob("frame-*.txt"))
    assert saved and "planted" in saved[0].read_text() and "--replay" in saved[0].read_text()
    assert saved[0].with_suffix(".bin").read_bytes()[:1] == b"\x01"


def test_hang_is_cut_by_the_time_limit(corpus: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def spin(data: bytes, codec: Any) -> None:
        while True:
            pass

    monkeypatch.setattr(fuzz, "run_frame", spin)
    tally = fuzz.fuzz("frame", corpus, 0, 2, None, None, 0.2)
    assert tally.crashes == 2
    assert all(sig.startswith("ExecTimeout") for sig in tally.signatures)

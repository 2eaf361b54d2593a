"""Nothing lost: every byte of every AMQP stream ends in a frame, a protocol header, a gap, a
skipped (malformed / resync) region, or is pending at the end of the capture.

The accounting (``decode --stats``, the ``accounting`` record; ``dissect/stream.py``) counts
``stream_bytes`` (bytes fed to the AMQP dissector, i.e. captured) and ``gap_bytes`` (bytes the
capture lost, never fed), and must satisfy::

    stream_bytes == frame_bytes + header_bytes + skipped_bytes + pending_bytes

Checked on every shared capture and sample, against independent counts (reassembled payload
bytes, the frame records themselves), and on damaged variants (tests/variants.py): dropped
packets (gap_bytes equals the payload bytes removed), mid-stream starts, duplicated and reordered
packets, a truncated file, pcapng and compressed copies.
"""

from __future__ import annotations

import bisect
import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
import variants
from click.testing import CliRunner
from conftest import CAPTURES

from amqpscope.capture import CaptureError, read_packets
from amqpscope.pipeline import Options, RunStats, decode_packets
from amqpscope.testing.tcpwalk import TcpData
from cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = sorted((ROOT / "samples").glob("*.pcap"))
SHARED = sorted(CAPTURES.glob("*.pcap")) if CAPTURES.is_dir() else []
ALL = SHARED + SAMPLES
PORTS = ["--port", "5673", "--port", "25672"]
OPTIONS = Options(ports=frozenset({5672, 5673, 25672}))
FIELDS = ("stream_bytes", "frame_bytes", "header_bytes", "gap_bytes", "skipped_bytes", "pending_bytes", "frames")


def _cli_records(path: Path) -> list[dict[str, Any]]:
    result = CliRunner().invoke(cli, ["decode", "--stats", "-T", "jsonl", "--no-progress", "--no-validate", *PORTS,
                                      str(path)])  # fmt: skip
    assert result.exit_code == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def _balanced(acc: dict[str, int]) -> bool:
    return acc["stream_bytes"] == acc["frame_bytes"] + acc["header_bytes"] + acc["skipped_bytes"] + acc["pending_bytes"]


def _api(path: Path) -> tuple[dict[str, int], list[Any]]:
    stats = RunStats()
    events: list[Any] = []
    with contextlib.suppress(CaptureError):  # the accounting of what was read is still complete
        for ev in decode_packets(read_packets(path), options=OPTIONS, stats=stats):
            events.append(ev)
    return {f: getattr(stats.accounting, f) for f in FIELDS}, events


def _payload_total(path: Path) -> int:
    """Reassembled payload bytes of every flow, counted by an independent reassembly (tests/variants.py:
    amqpscope.testing.tcpwalk, no dissector)."""
    s = variants.streams(path)
    return sum(len(e.data) for e in s.events if isinstance(e, TcpData))


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_stats_accounting_on_real_captures(path: Path) -> None:
    recs = _cli_records(path)
    acc = recs[-1]
    assert acc["kind"] == "accounting"
    assert _balanced(acc), acc
    # independent counts: the frame and header records, and the reassembled payload
    frames = [r for r in recs if r["kind"] == "frame"]
    headers = [r for r in recs if r["kind"] == "protocol-header"]
    assert acc["frames"] == len(frames)
    assert acc["frame_bytes"] == sum(r["size"] + 8 for r in frames)
    assert acc["header_bytes"] == 8 * len(headers)
    assert acc["stream_bytes"] == _payload_total(path)  # every flow of these captures is AMQP
    # clean captures: nothing lost, skipped or left over
    assert acc["gap_bytes"] == acc["skipped_bytes"] == acc["pending_bytes"] == 0


def _droppable(path: Path, how_many: int, every: int = 7) -> tuple[list[int], int]:
    """Data packets in the middle of their direction (later data follows in it); their payload total."""
    data = variants.data_packets(path)
    last: dict[tuple[Any, Any], int] = {}
    for idx, seg in data:
        last[(seg.src, seg.dst)] = idx
    picked: list[int] = []
    removed = 0
    for n, (idx, seg) in enumerate(data):
        if n % every == every // 2 and idx < last[(seg.src, seg.dst)] and len(picked) < how_many:
            picked.append(idx)
            removed += len(seg.payload)
    return picked, removed


def _small(names: tuple[str, ...]) -> list[Path]:
    return [p for p in ALL if p.name.startswith(names)]


DAMAGE = _small(("s01", "s04", "s05", "s07", "s09", "s13", "hello", "confirms", "errors"))


@pytest.mark.parametrize("path", DAMAGE, ids=lambda p: p.name)
def test_dropped_packets_gap_bytes_equal_bytes_removed(path: Path, tmp_path: Path) -> None:
    original, _ = _api(path)
    picked, removed = _droppable(path, 4)
    assert picked
    dst = tmp_path / "dropped.pcap"
    variants.drop_packets(path, dst, picked)
    acc, events = _api(dst)
    assert _balanced(acc), acc
    assert acc["gap_bytes"] == removed
    assert acc["stream_bytes"] + acc["gap_bytes"] == original["stream_bytes"]
    gaps = [ev for ev in events if ev.kind == "gap"]
    assert sum(ev.size for ev in gaps) == removed  # type: ignore[attr-defined]
    assert acc["frames"] < original["frames"]


@pytest.mark.parametrize("path", DAMAGE, ids=lambda p: p.name)
def test_mid_stream_start(path: Path, tmp_path: Path) -> None:
    dst = tmp_path / "cut.pcap"
    variants.cut_first(path, dst, 5)
    acc, _ = _api(dst)
    assert _balanced(acc), acc
    assert acc["gap_bytes"] == 0
    assert acc["stream_bytes"] == _payload_total(dst)


@pytest.mark.parametrize("path", DAMAGE, ids=lambda p: p.name)
def test_duplicated_and_reordered_packets_change_nothing(path: Path, tmp_path: Path) -> None:
    original, _ = _api(path)
    data = variants.data_packets(path)
    some = [idx for idx, _ in data[1::9]]
    dup = tmp_path / "dup.pcap"
    variants.duplicate(path, dup, some)
    swapped = tmp_path / "swap.pcap"
    variants.swap_adjacent(path, swapped, data[len(data) // 2][0])
    for variant in (dup, swapped):
        acc, _ = _api(variant)
        assert _balanced(acc), acc
        assert acc == original


@pytest.mark.parametrize("path", _small(("s02", "s11", "confirms")), ids=lambda p: p.name)
def test_format_and_compression_copies_account_the_same(path: Path, tmp_path: Path) -> None:
    original, _ = _api(path)
    ng = tmp_path / "copy.pcapng"
    variants.to_pcapng(path, ng)
    gz = tmp_path / "copy.pcap.gz"
    variants.compress(path, gz, "gz")
    for copy in (ng, gz):
        assert _api(copy)[0] == original


@pytest.mark.parametrize("path", _small(("s03", "s08", "hello")), ids=lambda p: p.name)
def test_truncated_file_accounting_still_balances(path: Path, tmp_path: Path) -> None:
    """decode --stats on a truncated capture: exit 5, and the accounting record of what was read."""
    dst = tmp_path / "trunc.pcap"
    variants.truncate_bytes(path, dst, 40)
    result = CliRunner().invoke(cli, ["decode", "--stats", "-T", "jsonl", "--no-progress", "--no-validate", *PORTS,
                                      str(dst)])  # fmt: skip
    assert result.exit_code == 5
    acc = json.loads(result.stdout.splitlines()[-1])
    assert acc["kind"] == "accounting" and _balanced(acc) and acc["stream_bytes"] > 0


def test_gap_inside_a_large_body_frame_is_skipped_not_resynced(tmp_path: Path) -> None:
    """s05's body frames are 131 KB: a packet lost inside one leaves the rest of that frame to be
    skipped by its declared size (skipped_bytes), the next frame is in sync again (no resync)."""
    path = next((p for p in ALL if p.name.startswith("s05")), None)
    if path is None:
        pytest.skip("s05 (shared captures) not available")
    lay = variants.layout(path)
    inside = []  # packets whose bytes lie strictly inside one frame (not its header, not its end)
    for key, chunks in lay.chunks.items():
        spans = sorted((sp.start, sp.end) for sp in lay.spans if (sp.flow, sp.dir) == key)
        starts = [a for a, _ in spans]
        for packet, start, end in chunks:
            i = bisect.bisect_right(starts, start) - 1
            if i >= 0 and spans[i][0] + 7 < start and end < spans[i][1] - 1:
                inside.append((packet, end - start))
    assert len(inside) > 10
    victim, removed = inside[len(inside) // 2]
    dst = tmp_path / "s05-drop.pcap"
    variants.drop_packets(path, dst, [victim])
    acc, events = _api(dst)
    assert _balanced(acc) and acc["gap_bytes"] == removed
    assert acc["skipped_bytes"] > 0
    gaps = [ev for ev in events if ev.kind == "gap"]
    assert len(gaps) == 1 and gaps[0].lost_frame is not None  # type: ignore[attr-defined]
    assert not [ev for ev in events if ev.kind == "resync"]

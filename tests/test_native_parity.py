"""The native core against the Python per-packet modules, event by event, until the Python modules go.

Every shared capture, every sample and damaged variants of each (tests/variants.py) are decoded by
both; the JSON lines (every event, bodies included) and the byte accounting must be identical, and so
must the capture error (class and message) of a damaged file.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import variants

from amqpscope import _native
from amqpscope.capture import CaptureError, read_packets
from amqpscope.dissect.codec import get_codec
from amqpscope.dissect.tables import compile_tables
from amqpscope.output.records import dumpb_line, record
from amqpscope.pipeline import RunStats, decode_packets
from amqpscope.pipeline import Options

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "captures"
CAPTURES = sorted(SHARED.glob("*.pcap")) + sorted((ROOT / "samples").glob("*.pcap"))
SMALL = [p for p in CAPTURES if p.stat().st_size < 1_000_000]

Variant = Callable[[Path, Path], Any]


def _drop_every(n: int) -> Variant:
    def make(src: Path, dst: Path) -> Any:
        count = sum(1 for _ in read_packets(src))
        return variants.drop_packets(src, dst, range(n, count + 1, n))

    return make


def _cut_third(src: Path, dst: Path) -> Any:
    count = sum(1 for _ in read_packets(src))
    return variants.cut_first(src, dst, count // 3)


VARIANTS: dict[str, Variant] = {
    "cut5": lambda s, d: variants.cut_first(s, d, 5),
    "cut-third": _cut_third,
    "drop7": _drop_every(7),
    "drop3": _drop_every(3),
    "swap": lambda s, d: variants.swap_adjacent(s, d, 6),
    "dup": lambda s, d: variants.duplicate(s, d, [4, 9, 10]),
    "pcapng": lambda s, d: variants.to_pcapng(s, d, 6),
    "pcapng2": variants.to_pcapng_two_interfaces,
    "ns": variants.to_nanosecond,
    "be": variants.to_big_endian,
    "gz": lambda s, d: variants.compress(s, d, "gz"),
    "bz2": lambda s, d: variants.compress(s, d, "bz2"),
    "xz": lambda s, d: variants.compress(s, d, "xz"),
    "trunc": lambda s, d: variants.truncate_bytes(s, d, 5),
    "sll": lambda s, d: variants.to_link(s, d, "sll"),
    "sll2": lambda s, d: variants.to_link(s, d, "sll2"),
    "null": lambda s, d: variants.to_link(s, d, "null"),
    "raw": lambda s, d: variants.to_link(s, d, "raw"),
    "ipv6": variants.to_ipv6,
    "port": variants.rewrite_port,
    "qinq": lambda s, d: variants.add_vlan(s, d, (0x88A8, 0x8100)),
    "pad": variants.pad_ethernet,
}

CODEC = get_codec()
TABLES = json.dumps(compile_tables(CODEC.spec), separators=(",", ":"))


def python_side(path: Path, body: str) -> tuple[bytes, dict[str, int], str | None]:
    stats = RunStats()
    lines: list[bytes] = []
    error = None
    try:
        for ev in decode_packets(read_packets(path), CODEC, Options(), stats):
            lines.append(dumpb_line(record(ev, body)))
    except CaptureError as exc:
        error = f"{type(exc).__name__}: {exc}"
    acc = {k: getattr(stats.accounting, k) for k in ("stream_bytes", "frame_bytes", "header_bytes", "gap_bytes",
                                                      "skipped_bytes", "pending_bytes", "frames")}  # fmt: skip
    return b"".join(lines), acc, error


def native_side(path: Path, body: str) -> tuple[bytes, dict[str, int], str | None]:
    error = None
    chunks: list[bytes] = []
    dec = None
    try:
        dec = _native.Decoder(str(path), TABLES)
        while (chunk := dec.jsonl(body)) is not None:
            chunks.append(chunk)
    except CaptureError as exc:
        error = f"{type(exc).__name__}: {exc}"
    acc = dict(dec.stats()["accounting"]) if dec is not None else {}
    return b"".join(chunks), acc, error


def assert_same(path: Path, body: str = "preview") -> None:
    py_lines, py_acc, py_err = python_side(path, body)
    rs_lines, rs_acc, rs_err = native_side(path, body)
    assert rs_err == py_err
    if rs_lines != py_lines:
        py_list, rs_list = py_lines.splitlines(), rs_lines.splitlines()
        for i, (a, b) in enumerate(zip(py_list, rs_list, strict=False)):
            assert b == a, f"line {i + 1} differs"
        assert len(rs_list) == len(py_list)
    if py_err is None:
        assert rs_acc == py_acc


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_capture(path: Path) -> None:
    assert_same(path, "full")


@pytest.mark.parametrize("name", sorted(VARIANTS))
@pytest.mark.parametrize("path", SMALL, ids=lambda p: p.name)
def test_variant(path: Path, name: str, tmp_path: Path) -> None:
    dst = tmp_path / f"{path.stem}.{name}"
    VARIANTS[name](path, dst)
    assert_same(dst)

"""Counts made from the shared captures' tshark CSVs (Wireshark's decode) and their packet
timestamps, independently of amqpscope's analysis: what the analytics tests compare with."""

from __future__ import annotations

import csv
from collections import defaultdict, deque
from pathlib import Path

from amqpscope.capture import TruncatedCapture, read_packets
from amqpscope.dissect.codec import get_codec
from amqpscope.dissect.errata import request_table


def rows(captures_dir: Path, name: str) -> list[dict[str, str]]:
    with open(captures_dir / f"{name}.tshark.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def settled(rows: list[dict[str, str]], method: str, direction: str) -> int:
    """Deliveries (or publishes) settled by ``method`` frames, counted from their tags: a single
    ack settles its tag, a multiple one every tag up to its own not settled before, per channel."""
    done: dict[tuple[str, str], set[int]] = defaultdict(set)
    n = 0
    for r in rows:
        if r["dir"] != direction or r["name"] not in ("Basic.Ack", "Basic.Nack", "Basic.Reject"):
            continue
        seen, tag = done[(r["stream"], r["channel"])], int(r["delivery_tag"] or 0)
        new = {t for t in range(1, tag + 1) if t not in seen} if r["multiple"] == "1" else {tag} - seen
        seen |= new
        n += len(new) if r["name"] == method else 0
    return n


def request_latencies(captures_dir: Path, name: str) -> dict[str, list[float]]:
    """Request → reply times from the capture's packet timestamps and the oracle's frame numbers:
    each reply answers the oldest request of its channel that it belongs to."""
    ts = {p.index: p.ts_ns / 1e9 for p in read_packets(captures_dir / name)}
    table = request_table(get_codec().spec)
    title = {f"{m.split('.')[0].title()}.{m.split('.')[1].title()}": m for m in
             {*table, *(r for rs in table.values() for r in rs)}}  # fmt: skip
    waiting: dict[tuple[str, str, str], deque[tuple[str, float]]] = defaultdict(deque)
    out: dict[str, list[float]] = defaultdict(list)
    for r in rows(captures_dir, name):
        method = title.get(r["name"])
        if method is None:
            continue
        t = ts[int(r["frame"])]
        asked = waiting[(r["stream"], r["channel"], "S2C" if r["dir"] == "C2S" else "C2S")]
        hit = next((q for q in asked if method in table[q[0]]), None)
        if hit is not None:
            asked.remove(hit)
            out[hit[0]].append(t - hit[1])
            continue
        # the broker's own basic.cancel goes no-wait (the oracle has no no-wait column)
        if method in table and not (r["name"] == "Basic.Cancel" and r["dir"] == "S2C"):
            waiting[(r["stream"], r["channel"], r["dir"])].append((method, t))
    return out


def last_packet(path: Path) -> int:
    """The number of the last whole packet of a capture (a truncated one included)."""
    last = 0
    try:
        for p in read_packets(path):
            last = p.index
    except TruncatedCapture:
        pass
    return last

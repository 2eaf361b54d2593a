"""Throughput of read_packets + parse_segment + TcpReassembler versus dpkt.

Usage: python bench/capture_read.py [CAPTURE ...]
Default: the largest shared capture (s05) and a synthetic concatenation of all shared
captures repeated until it holds >= 300k packets (written to a temp file).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import dpkt

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from amqpscope.capture import read_packets
from amqpscope.net import SegmentParser
from amqpscope.pcapwrite import write_pcap
from amqpscope.reassembly import TcpReassembler

CAPTURES = Path(__file__).resolve().parents[2] / "shared" / "captures"


def ours(path: Path) -> tuple[int, int]:
    parser = SegmentParser()
    parse = parser.parse
    r = TcpReassembler()
    feed = r.feed
    n = nbytes = 0
    for p in read_packets(path):
        n += 1
        seg = parse(p)
        if seg is not None:
            for e in feed(seg):
                d = getattr(e, "data", None)
                if d is not None:
                    nbytes += len(d)
    r.finish()
    return n, nbytes


def ours_read_only(path: Path) -> tuple[int, int]:
    n = 0
    for _ in read_packets(path):
        n += 1
    return n, 0


def dpkt_parse(path: Path) -> tuple[int, int]:
    """dpkt reader + Ethernet/IP/TCP decode (no reassembly): a lower bound for a dpkt pipeline."""
    n = nbytes = 0
    with open(path, "rb") as f:
        for _, buf in dpkt.pcap.Reader(f):
            n += 1
            tcp = dpkt.ethernet.Ethernet(buf).data.data
            if isinstance(tcp, dpkt.tcp.TCP):
                nbytes += len(tcp.data)
    return n, nbytes


def dpkt_read_only(path: Path) -> tuple[int, int]:
    n = 0
    with open(path, "rb") as f:
        for _ in dpkt.pcap.Reader(f):
            n += 1
    return n, 0


def timed(fn, path: Path, repeat: int = 3) -> tuple[float, int, int]:  # type: ignore[no-untyped-def]
    best = float("inf")
    n = b = 0
    for _ in range(repeat):
        t = time.perf_counter()
        n, b = fn(path)
        best = min(best, time.perf_counter() - t)
    return best, n, b


def concatenation(dst: Path, min_packets: int = 300_000) -> Path:
    recs: list[tuple[int, bytes]] = []
    base = [(p.ts_ns, p.data) for f in sorted(CAPTURES.glob("s*.pcap")) if "s05" not in f.name for p in read_packets(f)]
    ts = 0
    while len(recs) < min_packets:
        for _, data in base:
            ts += 1000
            recs.append((ts, data))
    write_pcap(dst, recs)
    return dst


def report(path: Path) -> None:
    size = path.stat().st_size / 2**20
    t_o, n, b = timed(ours, path)
    t_r, _, _ = timed(ours_read_only, path)
    t_d, _, _ = timed(dpkt_parse, path)
    t_dr, _, _ = timed(dpkt_read_only, path)
    print(f"{path.name}: {n} packets, {size:.1f} MiB, {b} reassembled bytes")
    print(f"  read only:       ours {n / t_r:>10,.0f} pkt/s   dpkt {n / t_dr:>10,.0f} pkt/s   ratio {t_dr / t_r:.2f}x")
    print(
        f"  full lower half: ours {n / t_o:>10,.0f} pkt/s ({size / t_o:.0f} MiB/s)   "
        f"dpkt parse only {n / t_d:>10,.0f} pkt/s   ratio {t_d / t_o:.2f}x"
    )


def main() -> None:
    paths = [Path(a) for a in sys.argv[1:]]
    with tempfile.TemporaryDirectory() as tmp:
        if not paths:
            paths = [CAPTURES / "s05_pika_large_bodies.pcap", concatenation(Path(tmp) / "concat.pcap")]
        for p in paths:
            report(p)


if __name__ == "__main__":
    main()

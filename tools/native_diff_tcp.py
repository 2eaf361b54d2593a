#!/usr/bin/env python3
"""Differential check of the native capture → segment → TCP reassembly path against the Python one.

For every capture (shared captures, samples) and damaged or transformed variants of them (written to a
temporary directory with tests/variants.py and a few generators here), prints the TCP events of the
Python pipeline (read_packets → SegmentParser → TcpReassembler, finish included) in the line format of
``crates/amqpscope-core/examples/tcp_events.rs`` and compares it with that program's output: every
event, the counters, and the capture error (class, exit code, message, packets_read) of a bad file.

    python tools/native_diff_tcp.py                 # builds the example (cargo, release) first
    python tools/native_diff_tcp.py --bin PATH --keep DIR --only s03

Exit status 0 when every file matches.
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import lzma
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import variants  # noqa: E402

from amqpscope.capture import CaptureError, read_packets  # noqa: E402
from amqpscope.net import SegmentParser  # noqa: E402
from amqpscope.packets import Endpoint, RawPacket, TcpClose, TcpData, TcpEvent, TcpGap, TcpOpen  # noqa: E402
from amqpscope.pcapwrite import tcp_packet, write_pcap  # noqa: E402
from amqpscope.reassembly import TcpReassembler  # noqa: E402

SHARED = ROOT.parent / "shared" / "captures"
if not SHARED.is_dir():
    SHARED = Path("/work/shared/captures")
SAMPLES = ROOT / "samples"
if not any(SAMPLES.glob("*.pcap")):
    SAMPLES = Path("/work/main/samples")


# --- the Python side, in the example's line format ----------------------------------------------------


def _ep(e: Endpoint) -> str:
    a, p = e
    return f"[{a}]:{p}" if ":" in a else f"{a}:{p}"


def _line(e: TcpEvent) -> str:
    if isinstance(e, TcpData):
        return f"data {e.flow} {_ep(e.src)} {_ep(e.dst)} {len(e.data)} {zlib.crc32(e.data):08x} {e.packet} {e.ts_ns}"
    if isinstance(e, TcpOpen):
        return f"open {e.flow} {_ep(e.client)} {_ep(e.server)} {int(e.syn_seen)} {e.packet} {e.ts_ns}"
    if isinstance(e, TcpGap):
        return f"gap {e.flow} {_ep(e.src)} {_ep(e.dst)} {e.size} {e.packet} {e.ts_ns}"
    assert isinstance(e, TcpClose)
    return f"close {e.flow} {e.how} {e.packet} {e.ts_ns}"


LIMIT_ARGS = {  # example flag -> TcpReassembler keyword
    "--max-flows": "max_flows",
    "--idle-timeout-ns": "idle_timeout_ns",
    "--ooo-bytes": "max_buffer_per_dir",
    "--ooo-segments": "max_segments_per_dir",
    "--ooo-total": "max_buffer_total",
    "--linger-ns": "closed_linger_ns",
}


def python_lines(path: Path, limits: dict[str, int]) -> list[str]:
    kwargs = {LIMIT_ARGS[k]: v for k, v in limits.items()}
    parser = SegmentParser()
    r = TcpReassembler(**kwargs)
    out: list[str] = []
    packets = tcp = 0
    error = None
    try:
        for p in read_packets(path):
            packets += 1
            seg = parser.parse(p)
            if seg is not None:
                tcp += 1
                out.extend(_line(e) for e in r.feed(seg))
    except CaptureError as exc:
        error = f"error {type(exc).__name__} {exc.exit_code} {exc} | packets_read {getattr(exc, 'packets_read', 0)}"
    except Exception as exc:  # a Python failure that is no capture error: reported as a mismatch
        error = f"error PYTHON-{type(exc).__name__} {exc}"
    out.extend(_line(e) for e in r.finish())
    out.append(f"packets {packets}")
    out.append(f"tcp {tcp}")
    out += [f"skipped {k}\t{v}" for k, v in sorted(parser.skipped.items())]
    out += [f"notes {k}\t{v}" for k, v in sorted(parser.notes.items())]
    out += [f"unsupported {k}\t{v}" for k, v in sorted(parser.unsupported_linktypes.items())]
    out += [f"stats {k}\t{v}" for k, v in sorted(r.stats.items())]
    out.append(f"buffered {r.buffered_bytes}")
    if error:
        out.append(error)
    return out


def native_lines(binary: Path, path: Path, limits: dict[str, int]) -> list[str]:
    args = [str(binary), str(path)]
    for k, v in limits.items():
        args += [k, str(v)]
    proc = subprocess.run(args, capture_output=True, timeout=600)
    if proc.returncode != 0:
        return [f"native exited {proc.returncode}: {proc.stderr.decode(errors='replace').strip()[-500:]}"]
    return proc.stdout.decode().splitlines()


# --- variants ------------------------------------------------------------------------------------------


def _packets(src: Path) -> tuple[list[RawPacket], int]:
    pkts = list(read_packets(src))
    return pkts, (pkts[0].linktype if pkts else 1)


def _write(dst: Path, pkts: Iterable[RawPacket], lt: int) -> None:
    write_pcap(dst, [(p.ts_ns, p.data) for p in pkts], lt)


def shuffle_window(seed: int, window: int) -> Callable[[Path, Path], Any]:
    """Packets shuffled within consecutive windows (timestamps travel with the packets)."""

    def make(src: Path, dst: Path) -> None:
        rng = random.Random(seed)
        pkts, lt = _packets(src)
        out: list[RawPacket] = []
        for i in range(0, len(pkts), window):
            part = pkts[i : i + window]
            rng.shuffle(part)
            out += part
        _write(dst, out, lt)

    return make


def drop_dup(seed: int, drop: float, dup: float) -> Callable[[Path, Path], Any]:
    def make(src: Path, dst: Path) -> None:
        rng = random.Random(seed)
        pkts, lt = _packets(src)
        out: list[RawPacket] = []
        for p in pkts:
            if rng.random() < drop:
                continue
            out.append(p)
            if rng.random() < dup:
                out.append(p)
        _write(dst, out, lt)

    return make


def late_dup(seed: int, n: int, delay: int) -> Callable[[Path, Path], Any]:
    """Copies of random packets re-sent ``delay`` packets later (old retransmissions)."""

    def make(src: Path, dst: Path) -> None:
        rng = random.Random(seed)
        pkts, lt = _packets(src)
        out = list(pkts)
        for _ in range(n):
            if not pkts:
                break
            i = rng.randrange(len(pkts))
            out.insert(min(len(out), i + delay), pkts[i])
        _write(dst, out, lt)

    return make


def mutate(seed: int, n: int) -> Callable[[Path, Path], Any]:
    """``n`` random bytes of the file changed (headers included): parse decisions and bad lengths."""

    def make(src: Path, dst: Path) -> None:
        rng = random.Random(seed)
        data = bytearray(src.read_bytes())
        for _ in range(n):
            i = rng.randrange(24, len(data)) if len(data) > 24 else rng.randrange(len(data))
            data[i] = rng.randrange(256)
        dst.write_bytes(bytes(data))

    return make


def compressed(kind: str, cut: float | int | None = None, tail: bytes = b"", flip: float | None = None,
               members: int = 1) -> Callable[[Path, Path], Any]:  # fmt: skip
    """Compress (gz, bz2, xz), optionally in several members/streams, then cut (a fraction of the size or
    a byte count from the end), append ``tail``, or flip the byte at ``flip`` (fraction of the size)."""
    comps: dict[str, Callable[[bytes], bytes]] = {"gz": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}
    comp = comps[kind]

    def make(src: Path, dst: Path) -> None:
        raw = src.read_bytes()
        step = -(-len(raw) // members)
        z = b"".join(comp(raw[i : i + step]) for i in range(0, len(raw), step))
        if isinstance(cut, float):
            z = z[: int(len(z) * cut)]
        elif isinstance(cut, int):
            z = z[:-cut]
        if flip is not None:
            b = bytearray(z)
            i = int(len(b) * flip)
            b[i] ^= 0x5A
            z = bytes(b)
        dst.write_bytes(z + tail)

    return make


def resegment(seed: int, extra: float = 0.3, alter: float = 0.5, spread: int = 8) -> Callable[[Path, Path], Any]:
    """Rebuilt TCP packets plus extra segments: random sub-ranges of the recent bytes of a direction
    (overlapping what was sent, sometimes with altered content), sent up to ``spread`` packets later,
    and some packets moved later. Exercises trimming, held-segment replacement and the order in
    which overlapping held segments are taken."""

    def make(src: Path, dst: Path) -> None:
        rng = random.Random(seed)
        parser = SegmentParser()
        recs: list[tuple[int, bytes]] = []
        pending: list[tuple[int, int, bytes]] = []  # (due index, ts, frame)
        for p in read_packets(src):
            seg = parser.parse(p)
            if seg is None:
                continue
            frame = tcp_packet(seg.src, seg.dst, seg.seq, seg.ack, seg.flags, seg.payload)
            if rng.random() < 0.1:
                pending.append((len(recs) + rng.randint(1, spread), p.ts_ns, frame))
            else:
                recs.append((p.ts_ns, frame))
            if seg.payload and rng.random() < extra:
                a = rng.randrange(len(seg.payload))
                b = rng.randrange(a, len(seg.payload)) + 1
                back = rng.randint(0, 40)
                data = seg.payload[a:b]
                if rng.random() < alter:
                    data = bytes(x ^ 0x20 for x in data)
                seq = (seg.seq + a - back) & 0xFFFFFFFF
                data = bytes(back) + data if back else data
                extra_frame = tcp_packet(seg.src, seg.dst, seq, seg.ack, seg.flags & ~0x07, data)
                pending.append((len(recs) + rng.randint(0, spread), p.ts_ns, extra_frame))
            due = [x for x in pending if x[0] <= len(recs)]
            pending = [x for x in pending if x[0] > len(recs)]
            recs += [(ts, f) for _, ts, f in due]
        recs += [(ts, f) for _, ts, f in pending]
        write_pcap(dst, recs, 1)

    return make


def random_variant(seed: int) -> tuple[str, Callable[[Path, Path], Any], dict[str, int]]:
    """A random damage (or several chained) and random reassembly bounds."""
    rng = random.Random(seed)
    kind = rng.choice(["shuffle", "dropdup", "latedup", "reseg", "reseg", "mutate", "ng-mutate"])
    if kind == "shuffle":
        make = shuffle_window(seed, rng.randint(2, 40))
    elif kind == "dropdup":
        make = drop_dup(seed, rng.random() * 0.4, rng.random() * 0.3)
    elif kind == "latedup":
        make = late_dup(seed, rng.randint(1, 50), rng.randint(1, 100))
    elif kind == "reseg":
        make = resegment(seed, rng.random(), rng.random(), rng.randint(1, 30))
    elif kind == "mutate":
        make = mutate(seed, rng.randint(1, 30))
    else:
        make = then(variants.to_pcapng_two_interfaces, mutate(seed, rng.randint(1, 30)))
    limits: dict[str, int] = {}
    if rng.random() < 0.5:
        limits["--ooo-bytes"] = rng.choice([100, 1000, 5000, 100000])
        limits["--ooo-segments"] = rng.choice([1, 2, 5, 50])
        limits["--ooo-total"] = rng.choice([500, 3000, 50000])
    if rng.random() < 0.3:
        limits["--max-flows"] = rng.choice([1, 2, 3])
    if rng.random() < 0.3:
        limits["--idle-timeout-ns"] = rng.choice([1_000_000, 50_000_000, 1_000_000_000])
        limits["--linger-ns"] = rng.choice([0, 1_000_000, 100_000_000])
    return f"rand{seed}-{kind}", make, limits


def then(first: Callable[[Path, Path], Any], second: Callable[[Path, Path], Any]) -> Callable[[Path, Path], Any]:
    """``second`` applied to the result of ``first``."""

    def make(src: Path, dst: Path) -> None:
        tmp = dst.with_suffix(dst.suffix + ".step")
        first(src, tmp)
        second(tmp, dst)
        tmp.unlink()

    return make


def _drop_every(n: int) -> Callable[[Path, Path], Any]:
    def make(src: Path, dst: Path) -> Any:
        count = sum(1 for _ in read_packets(src))
        return variants.drop_packets(src, dst, range(n, count + 1, n))

    return make


def _cut_third(src: Path, dst: Path) -> Any:
    count = sum(1 for _ in read_packets(src))
    return variants.cut_first(src, dst, count // 3)


def _sll_pcapng(src: Path, dst: Path) -> None:
    tmp = dst.with_suffix(".sll")
    variants.to_link(src, tmp, "sll")
    variants.to_pcapng(tmp, dst, 6)
    tmp.unlink()


def _ipv6_pcapng_gz(src: Path, dst: Path) -> None:
    tmp = dst.with_suffix(".v6")
    variants.to_ipv6(src, tmp, "sll2")
    ng = dst.with_suffix(".ng")
    variants.to_pcapng(tmp, ng, 9)
    variants.compress(ng, dst, "gz")
    tmp.unlink()
    ng.unlink()


def _pcapng_cut(remove: int) -> Callable[[Path, Path], Any]:
    def make(src: Path, dst: Path) -> None:
        tmp = dst.with_suffix(".ng")
        variants.to_pcapng(src, tmp, 6)
        variants.truncate_bytes(tmp, dst, remove)
        tmp.unlink()

    return make


VARIANTS: dict[str, Callable[[Path, Path], Any]] = {
    # tests/test_native_parity.py's set
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
    # more formats and links
    "pcapng-ns": lambda s, d: variants.to_pcapng(s, d, 9),
    "pcapng-sll": _sll_pcapng,
    "ipv6-sll2-pcapng-gz": _ipv6_pcapng_gz,
    "ipv6-null": lambda s, d: variants.to_ipv6(s, d, "null"),
    "ipv6-raw": lambda s, d: variants.to_ipv6(s, d, "raw"),
    "vlan": variants.add_vlan,
    # reassembly: loss, reordering, duplication
    "shuffle4": shuffle_window(1, 4),
    "shuffle16": shuffle_window(2, 16),
    "dropdup": drop_dup(3, 0.1, 0.1),
    "drop30": drop_dup(4, 0.3, 0.0),
    "latedup": late_dup(5, 20, 30),
    "reseg": resegment(6),
    "reseg-far": resegment(7, extra=0.6, alter=0.8, spread=40),
    # cut files
    "trunc1": lambda s, d: variants.truncate_bytes(s, d, 1),
    "trunc100": lambda s, d: variants.truncate_bytes(s, d, 100),
    "trunc-half": lambda s, d: d.write_bytes(s.read_bytes()[: s.stat().st_size // 2]),
    "pcapng-trunc7": _pcapng_cut(7),
    "pcapng-trunc200": _pcapng_cut(200),
    # compression: cut streams, members, trailing bytes, corruption
    "gz-cut-third": compressed("gz", 1 / 3),
    "gz-cut-90": compressed("gz", 0.9),
    "gz-cut-trailer4": compressed("gz", 4),
    "gz-cut-trailer8": compressed("gz", 8),
    "gz-members": compressed("gz", members=3),
    "gz-pad": compressed("gz", tail=b"\0" * 7),
    "gz-garbage": compressed("gz", tail=b"garbage"),
    "gz-crc": compressed("gz", flip=0.9999),
    "gz-flip": compressed("gz", flip=0.5),
    "bz2-cut-half": compressed("bz2", 0.5),
    "bz2-cut-end": compressed("bz2", 3),
    "bz2-streams": compressed("bz2", members=2),
    "bz2-garbage": compressed("bz2", tail=b"garbage, not a stream"),
    "bz2-flip": compressed("bz2", flip=0.5),
    "xz-cut-half": compressed("xz", 0.5),
    "xz-cut-end": compressed("xz", 3),
    "xz-streams": compressed("xz", members=2),
    "xz-garbage": compressed("xz", tail=b"garbage, not a stream"),
    "xz-pad": compressed("xz", tail=b"\0" * 4),
    "xz-flip": compressed("xz", flip=0.5),
    # random byte damage
    "mutate1": mutate(11, 1),
    "mutate5": mutate(12, 5),
    "mutate20": mutate(13, 20),
    "mutate50": mutate(14, 50),
    "pcapng-mutate5": then(lambda s, d: variants.to_pcapng(s, d, 9), mutate(15, 5)),
    "pcapng2-mutate20": then(variants.to_pcapng_two_interfaces, mutate(16, 20)),
    "sll2-ipv6-mutate20": then(lambda s, d: variants.to_ipv6(s, d, "sll2"), mutate(17, 20)),
    "null-mutate20": then(lambda s, d: variants.to_link(s, d, "null"), mutate(18, 20)),
}

# For captures over 1 MB (s05): faults past the first 1 MiB read call, where Python has handed packets over.
BIG_VARIANTS = ("gz", "pcapng", "trunc", "trunc-half", "shuffle16", "dropdup", "mutate20", "gz-cut-third",
                "gz-cut-90", "gz-flip", "bz2-cut-half", "bz2-flip", "xz-cut-half", "xz-flip")  # fmt: skip

# Run with small reassembly bounds: LRU eviction, buffer bounds, linger and idle eviction paths.
LIMITED: dict[str, dict[str, int]] = {
    "tiny-buffers": {"--ooo-bytes": 3000, "--ooo-segments": 3, "--ooo-total": 5000},
    "one-flow": {"--max-flows": 1},
    "idle": {"--idle-timeout-ns": 50_000_000, "--linger-ns": 10_000_000},
    "tight": {
        "--ooo-total": 500,
        "--ooo-bytes": 2000,
        "--idle-timeout-ns": 1_000_000,
        "--linger-ns": 0,
        "--max-flows": 2,
    },
}
LIMITED_ON = ("shuffle16", "dropdup", "drop30", "latedup", "swap", "cut5", "reseg", "reseg-far")


def bad_files(d: Path) -> list[Path]:
    """The faulty files tests/test_bad_files.py builds (directory and missing file included)."""
    import test_bad_files as tb

    out = []
    for name, (make, _code, _expect) in tb.CASES.items():
        sub = d / ("bad-" + name.replace(" ", "-"))
        sub.mkdir()
        out.append(make(sub))
    # and a few of test_capture.py's
    p = d / "gzip-of-text.gz"
    p.write_bytes(gzip.compress(b"plain text " * 100))
    out.append(p)
    p = d / "empty.gz"
    p.write_bytes(gzip.compress(b""))
    out.append(p)
    p = d / "short.xz"
    p.write_bytes(b"\xfd7zXZ\x00")
    out.append(p)
    p = d / "bzh.txt"
    p.write_bytes(b"BZh? not bzip2 at all")
    out.append(p)
    p = d / "stdin-like.txt"
    p.write_bytes(b"GET / HTTP/1.1\r\n\r\n")
    out.append(p)
    p = d / "pcapng-bad-bom.pcapng"
    p.write_bytes(struct.pack("<IIIHHq", 0x0A0D0D0A, 28, 0x11223344, 1, 0, -1) + struct.pack("<I", 28))
    out.append(p)
    p = d / "pcapng-epb-no-idb.pcapng"
    shb = struct.pack("<IIIHHq", 0x0A0D0D0A, 28, 0x1A2B3C4D, 1, 0, -1) + struct.pack("<I", 28)
    body = struct.pack("<IIIII", 0, 0, 0, 4, 4) + b"wxyz"
    p.write_bytes(shb + struct.pack("<II", 6, len(body) + 12) + body + struct.pack("<I", len(body) + 12))
    out.append(p)
    p = d / "weird name 'quoted'.pcap"
    p.write_bytes(b"\xd4\xc3\xb2\xa1\x02\x00")
    out.append(p)
    return out


ZLIB_PREFIX = "Error -3 while decompressing data: "
I64_MAX, I64_MIN = (1 << 63) - 1, -(1 << 63)


def _compat_v6(m: re.Match[str]) -> str:
    """``[::a.b.c.d]`` (inet_ntop's IPv4-compatible form) as Rust's Ipv6Addr prints it."""
    a, b, c, d = (int(x) for x in m.group(1).split("."))
    hi, lo = (a << 8) | b, (c << 8) | d
    return f"[::{hi:x}:{lo:x}]" if hi else f"[::{lo:x}]"


def _normalized(line: str, what: set[str]) -> str:
    fields = line.split(" ")
    if fields[0] in ("open", "data", "gap", "close") and fields[-1].lstrip("-").isdigit():
        ts = int(fields[-1])
        if not I64_MIN <= ts <= I64_MAX:
            fields[-1] = str(I64_MAX if ts > 0 else I64_MIN)
            what.add("timestamp beyond i64 nanoseconds (corrupt pcapng time), saturated")
    out = " ".join(fields)
    compat = re.sub(r"\[::(\d+\.\d+\.\d+\.\d+)\]", _compat_v6, out)
    if compat != out:
        what.add("IPv4-compatible IPv6 address text (types.rs Endpoint Display vs inet_ntop)")
    return compat


def known_difference(py: list[str], rs: list[str]) -> str | None:
    """Differences understood and accepted here (the report says where each belongs):

    * zlib-rs names a deflate data error met in its fast path "repeated call with bad state" where zlib
      (Python) names the error itself: same class, exit code and packets, the message's last words differ;
    * a corrupt pcapng timestamp past the range of i64 nanoseconds: Python's int has no bound, the
      core's Packet.ts_ns saturates;
    * ``::a.b.c.d`` addresses: glibc's inet_ntop prints the deprecated IPv4-compatible form, Rust's
      Ipv6Addr Display does not (Endpoint's Display in types.rs decides the core's text).
    """
    if len(py) != len(rs):
        return None
    what: set[str] = set()
    for a, b in zip(py, rs, strict=True):
        if a == b:
            continue
        if _normalized(a, what) == b:
            continue
        if a.startswith("error CorruptCapture") and ZLIB_PREFIX in a and f"{ZLIB_PREFIX}repeated call" in b:
            what.add("zlib-rs message for a corrupt deflate stream")
            continue
        return None
    return "; ".join(sorted(what)) or None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", type=Path, help="the built tcp_events example (default: cargo build --release)")
    ap.add_argument("--keep", type=Path, help="write the variants here and keep them")
    ap.add_argument("--only", help="only captures whose name contains this")
    ap.add_argument("--show", type=int, default=3, help="differing lines shown per file")
    ap.add_argument("--seeds", type=int, default=0, help="random damage variants per small capture")
    args = ap.parse_args()

    binary = args.bin
    if binary is None:
        subprocess.run(["cargo", "build", "-q", "--release", "-p", "amqpscope-core", "--example", "tcp_events"],
                       cwd=ROOT, check=True)  # fmt: skip
        binary = ROOT / "target" / "release" / "examples" / "tcp_events"

    captures = sorted(SHARED.glob("*.pcap")) + sorted(SAMPLES.glob("*.pcap"))
    if args.only:
        captures = [c for c in captures if args.only in c.name]
    tmp = args.keep or Path(tempfile.mkdtemp(prefix="native-diff-tcp-"))
    tmp.mkdir(parents=True, exist_ok=True)

    jobs: list[tuple[str, Path, dict[str, int]]] = []
    for cap in captures:
        jobs.append((cap.name, cap, {}))
        small = cap.stat().st_size < 1_000_000
        names = VARIANTS if small else BIG_VARIANTS
        for name in names:
            dst = tmp / f"{cap.stem}.{name}"
            try:
                VARIANTS[name](cap, dst)
            except Exception as exc:  # a variant builder that cannot handle this capture
                print(f"skip {dst.name}: {type(exc).__name__}: {exc}")
                continue
            jobs.append((dst.name, dst, {}))
            if name in LIMITED_ON and small:
                for lname, limits in LIMITED.items():
                    jobs.append((f"{dst.name} [{lname}]", dst, limits))
        if small:
            for i in range(args.seeds):
                seed = zlib.crc32(f"{cap.name}:{i}".encode())
                name, make, limits = random_variant(seed)
                dst = tmp / f"{cap.stem}.{name}"
                make(cap, dst)
                jobs.append((f"{dst.name} {limits or ''}", dst, limits))
    if not args.only:
        bad = tmp / "bad"
        bad.mkdir(exist_ok=True)
        for p in bad_files(bad):
            jobs.append((f"bad/{p.parent.name}/{p.name}", p, {}))

    files = events = mismatched = known = 0
    errors = 0
    for label, path, limits in jobs:
        py = python_lines(path, limits)
        rs = native_lines(binary, path, limits)
        files += 1
        events += sum(1 for line in py if line.split(" ", 1)[0] in ("open", "data", "gap", "close"))
        errors += any(line.startswith("error ") for line in py)
        if py != rs and (why := known_difference(py, rs)):
            known += 1
            print(f"known difference {label}: {why}")
        elif py != rs:
            mismatched += 1
            print(f"MISMATCH {label}: python {len(py)} lines, native {len(rs)} lines")
            shown = 0
            for i in range(max(len(py), len(rs))):
                a = py[i] if i < len(py) else "<none>"
                b = rs[i] if i < len(rs) else "<none>"
                if a != b:
                    print(f"  line {i + 1}\n    python: {a}\n    native: {b}")
                    shown += 1
                    if shown >= args.show:
                        break
    print(
        f"{files} files ({errors} ending in a capture error), {events} TCP events compared, "
        f"{mismatched} mismatched, {known} known differences"
    )
    if args.keep is None:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if mismatched else 0


if __name__ == "__main__":
    sys.exit(main())

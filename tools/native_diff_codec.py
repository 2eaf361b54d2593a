"""Differential check of the native frame walker and codec against the Python ones.

For every capture (the shared ones, the samples and damaged variants of them) the Python pipeline
(read_packets → SegmentParser → TcpReassembler) gives each flow direction's chunks and gaps. They
go to an input file, with fuzzed method/header payloads and table bodies; the Python FrameStream
and codecs (0-9-1 and 0-9) dump what they make of it, the Rust example `codec_diff` dumps the same
from the same input, and the two dumps are compared item by item.

    PYTHONPATH=. python tools/native_diff_codec.py [--keep DIR] [--fuzz N] [--bench]
"""

from __future__ import annotations

import argparse
import json
import random
import struct
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from amqpscope.capture import read_packets  # noqa: E402
from amqpscope.dissect.codec import get_codec  # noqa: E402
from amqpscope.dissect.spec import bundled_spec_path  # noqa: E402
from amqpscope.dissect.stream import (  # noqa: E402
    FrameItem,
    FrameStream,
    GapItem,
    HeaderItem,
    MalformedItem,
    ResyncItem,
)
from amqpscope.dissect.tables import tables_json  # noqa: E402
from amqpscope.dissect.values import Problem, Timestamp, _table_body  # noqa: E402
from amqpscope.net import SegmentParser  # noqa: E402
from amqpscope.packets import TcpData, TcpGap, TcpOpen  # noqa: E402
from amqpscope.reassembly import TcpReassembler  # noqa: E402

import variants  # noqa: E402

CAPTURES = sorted(Path("/work/shared/captures").glob("*.pcap")) + sorted(Path("/work/main/samples").glob("*.pcap"))


def fnv(data: bytes) -> str:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def value(v: Any) -> Any:
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, Timestamp):
        return {"ts": int(v)}
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return {"f": "nan" if v != v else struct.pack(">d", v).hex()}
    if isinstance(v, Decimal):
        return {"dec": str(v)}
    if isinstance(v, Problem):
        return {"problem": str(v)}
    if isinstance(v, str):
        return v
    if isinstance(v, bytes):
        return {"hex": v.hex()}
    if isinstance(v, dict):
        return {"t": [[k, value(x)] for k, x in v.items()]}
    if isinstance(v, list):
        return {"a": [value(x) for x in v]}
    raise TypeError(type(v))


def dump_method(codec: Any, p: bytes) -> Any:
    m = codec.decode_method(p)
    content = m.method.content if m.method else False
    return [m.class_id, m.method_id, m.name, m.method is not None, content, value(m.args), m.problem]


def dump_header(codec: Any, p: bytes) -> Any:
    h = codec.decode_header(p)
    return [h.class_id, h.weight, h.body_size, value(h.properties), h.problem]


def dump_item(item: Any) -> Any:
    if isinstance(item, HeaderItem):
        return ["header", item.version, item.raw.hex(), item.packet, item.ts_ns]
    if isinstance(item, FrameItem):
        return ["frame", item.type, item.channel, len(item.payload), fnv(item.payload), item.packet, item.ts_ns, item.resync]
    if isinstance(item, GapItem):
        return ["gap", item.size, item.lost_frame, item.packet, item.ts_ns]
    if isinstance(item, ResyncItem):
        return ["resync", item.skipped, item.reason, item.packet, item.ts_ns]
    if isinstance(item, MalformedItem):
        return ["malformed", item.reason, item.offset, item.packet, item.ts_ns]
    raise TypeError(type(item))


class Reference:
    """Writes the input file and the Python dump side by side."""

    def __init__(self, inp: Any, out: Any) -> None:
        self.inp, self.out = inp, out
        self.codecs = [get_codec(bundled_spec_path("amqp0-9-1.xml")), get_codec(bundled_spec_path("amqp0-9.xml"))]
        self.known = self.codecs[0].method
        self.payloads: list[tuple[str, bytes]] = []
        self.items = 0

    def emit(self, obj: Any) -> None:
        self.out.write(json.dumps(obj) + "\n")

    def items_of(self, d: int, items: list[Any]) -> None:
        for it in items:
            self.items += 1
            self.emit({"d": d, "item": dump_item(it)})
            if isinstance(it, FrameItem) and it.type in (1, 2):
                self.decode("M" if it.type == 1 else "H", it.payload, keep=True)

    def decode(self, kind: str, p: bytes, keep: bool = False) -> None:
        if keep and len(self.payloads) < 200_000:
            self.payloads.append((kind, p))
        if kind == "M":
            self.emit({"m": [dump_method(c, p) for c in self.codecs]})
        elif kind == "H":
            self.emit({"h": [dump_header(c, p) for c in self.codecs]})
        else:
            self.emit({"tb": value(_table_body(p, 0, len(p), 0))})

    def capture(self, path: Path, mangle: random.Random | None = None) -> None:
        """``mangle``: damage the reassembled bytes (flip, insert, split chunks) to drive the
        walker through malformed frames and resyncs the captures alone do not reach."""
        name = path.name + (".mangled" if mangle else "")
        self.inp.write(f"C {name}\n")
        self.emit({"capture": name})
        parser, reasm = SegmentParser(), TcpReassembler()
        syn: dict[int, bool] = {}
        dirs: dict[tuple[int, Any], tuple[int, FrameStream]] = {}

        def direction(flow: int, src: Any) -> tuple[int, FrameStream]:
            if (flow, src) not in dirs:
                d = len(dirs)
                at_start = syn.get(flow, False)
                self.inp.write(f"S {d} {int(at_start)}\n")
                dirs[(flow, src)] = (d, FrameStream(lambda c, m: self.known(c, m) is not None, at_start))
            return dirs[(flow, src)]

        def events(evs: list[Any]) -> None:
            for ev in evs:
                if isinstance(ev, TcpOpen):
                    syn[ev.flow] = ev.syn_seen
                elif isinstance(ev, TcpData):
                    d, s = direction(ev.flow, ev.src)
                    for piece in _mangled(bytes(ev.data), mangle):
                        self.inp.write(f"D {d} {ev.packet} {ev.ts_ns} {piece.hex()}\n")
                        self.items_of(d, s.feed(piece, ev.packet, ev.ts_ns))
                elif isinstance(ev, TcpGap):
                    d, s = direction(ev.flow, ev.src)
                    self.inp.write(f"G {d} {ev.size} {ev.packet} {ev.ts_ns}\n")
                    self.items_of(d, s.gap(ev.size, ev.packet, ev.ts_ns))

        try:
            for pkt in read_packets(path):
                seg = parser.parse(pkt)
                if seg is not None:
                    events(reasm.feed(seg))
        except Exception as exc:  # damaged variants end with a capture error: keep what was read
            self.inp.write(f"X {type(exc).__name__}\n")
            self.emit({"capture_error": type(exc).__name__})
        events(reasm.finish())
        for d, s in dirs.values():
            self.inp.write(f"E {d}\n")
            self.items_of(d, s.finish())
            a = s.accounting
            acc = [a.stream_bytes, a.frame_bytes, a.header_bytes, a.gap_bytes, a.skipped_bytes, a.pending_bytes, a.frames]
            self.emit({"d": d, "end": acc, "version": s.version, "synced_once": s.synced_once})

    def fuzz(self, n: int, seed: int = 1) -> None:
        rnd = random.Random(seed)
        pool = self.payloads
        if not pool:
            return
        for _ in range(n):
            kind, p = pool[rnd.randrange(len(pool))]
            b = bytearray(p)
            how = rnd.randrange(4)
            if how in (0, 2) and b:
                del b[rnd.randrange(len(b) + 1) :]
            if how in (1, 2) and b:
                for _ in range(rnd.randrange(1, 4)):
                    b[rnd.randrange(len(b))] = rnd.randrange(256)
            if how == 3:
                kind = "T"
                start = rnd.randrange(len(b) + 1)
                b = b[start : start + rnd.randrange(len(b) - start + 1)]
                if b and rnd.randrange(2):
                    b[rnd.randrange(len(b))] = rnd.randrange(256)
            self.inp.write(f"{kind} {bytes(b).hex()}\n")
            self.decode(kind, bytes(b))


def _mangled(data: bytes, rnd: random.Random | None) -> list[bytes]:
    if rnd is None or not data:
        return [data]
    b = bytearray(data)
    if rnd.random() < 0.05:
        b[rnd.randrange(len(b))] = rnd.randrange(256)
    if rnd.random() < 0.02:
        at = rnd.randrange(len(b) + 1)
        b[at:at] = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 20)))
    if rnd.random() < 0.3 and len(b) > 2:
        cuts = sorted(rnd.sample(range(1, len(b)), min(len(b) - 1, rnd.randrange(1, 4))))
        return [bytes(b[i:j]) for i, j in zip([0, *cuts], [*cuts, len(b)], strict=True)]
    return [bytes(b)]


def build_variants(tmp: Path) -> list[Path]:
    out: list[Path] = []
    for src in CAPTURES:
        stem = src.stem
        n = sum(1 for _ in read_packets(src))
        data = [i for i, _ in variants.data_packets(src)]
        jobs = [
            ("cut5", lambda d: variants.cut_first(src, d, min(5, n - 1))),
            ("drop", lambda d: variants.drop_packets(src, d, data[3::5])),
            ("swap", lambda d: variants.swap_adjacent(src, d, max(1, min(n - 1, 10)))),
            ("dup", lambda d: variants.duplicate(src, d, data[2::4])),
            ("trunc", lambda d: variants.truncate_bytes(src, d, 777)),
        ]
        for name, job in jobs:
            dst = tmp / f"{stem}.{name}.pcap"
            try:
                job(dst)
                out.append(dst)
            except Exception as exc:  # a variant that does not apply to this capture
                print(f"skip {dst.name}: {exc}", file=sys.stderr)
    return out


def compare(expected: Path, got: Path) -> tuple[int, list[str]]:
    bad: list[str] = []
    n = 0
    with expected.open() as fe, got.open() as fg:
        for i, (le, lg) in enumerate(zip(fe, fg, strict=False)):
            n += 1
            if json.loads(le) != json.loads(lg):
                bad.append(f"line {i + 1}:\n  python: {le.strip()[:600]}\n  rust:   {lg.strip()[:600]}")
        rest_e, rest_g = sum(1 for _ in fe), sum(1 for _ in fg)
    if rest_e or rest_g:
        bad.append(f"length differs: python has {rest_e} more lines, rust {rest_g} more")
    return n, bad


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keep", type=Path, default=None, help="work directory to keep (default: a temp dir)")
    ap.add_argument("--fuzz", type=int, default=30000)
    ap.add_argument("--bench", action="store_true", help="also time the Rust decoders (release build)")
    opts = ap.parse_args()
    tmp = opts.keep or Path(tempfile.mkdtemp(prefix="native-diff-"))
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "tables-0-9-1.json").write_text(tables_json(bundled_spec_path("amqp0-9-1.xml")))
    (tmp / "tables-0-9.json").write_text(tables_json(bundled_spec_path("amqp0-9.xml")))
    inputs = CAPTURES + build_variants(tmp)
    t0 = time.perf_counter()
    with (tmp / "input.txt").open("w") as inp, (tmp / "python.jsonl").open("w") as out:
        ref = Reference(inp, out)
        for path in inputs:
            ref.capture(path)
        rnd = random.Random(7)
        for path in CAPTURES:
            for _ in range(3):
                ref.capture(path, rnd)
        inp.write("C fuzz\n")
        ref.emit({"capture": "fuzz"})
        ref.fuzz(opts.fuzz)
    print(f"python: {len(inputs)} captures, {ref.items} stream items, {opts.fuzz} fuzz cases in {time.perf_counter() - t0:.1f}s")
    build = ["cargo", "build", "--release", "-q", "-p", "amqpscope-core", "--example", "codec_diff"]
    subprocess.run(build, cwd=ROOT, check=True)
    exe = ROOT / "target" / "release" / "examples" / "codec_diff"
    args = [str(exe), str(tmp / "tables-0-9-1.json"), str(tmp / "tables-0-9.json"), str(tmp / "input.txt")]
    with (tmp / "rust.jsonl").open("w") as out:
        subprocess.run(args, stdout=out, check=True)
    n, bad = compare(tmp / "python.jsonl", tmp / "rust.jsonl")
    for b in bad[:20]:
        print(b)
    print(f"compared {n} lines: {len(bad)} mismatches (work dir {tmp})")
    if opts.bench:
        subprocess.run([*args, "--bench"], check=True)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())

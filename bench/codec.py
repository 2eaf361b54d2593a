"""Decode throughput of amqpscope's native codec versus pamqp on the same real bytes.

Usage: python bench/codec.py [--payloads N] [--repeats R] [--capture FILE ...]

Two levels, each against pamqp 4 (``pamqp.frame.unmarshal``), ratios above 1 meaning we are faster:

* payloads: every method and content-header frame of the seed captures (the shared captures
  ``../shared/captures/*.pcap``, else ``samples/*.pcap``), split into frames by the independent
  test tooling (``testing.tcpwalk`` + ``testing.frames``) and cycled up to N frames.
  "ours" is ``Codec.decode_method`` / ``Codec.decode_header`` on each payload: one call into the
  core (``amqpscope._native``) per payload and the Python result it builds; pamqp unmarshals the
  whole frame (its 7-byte header and frame-end octet cost it little). Only frames both decode
  cleanly are used, and both must agree on ids, body sizes and a few properties.
* captures: ``decode_source`` over each capture (the core reads the file, reassembles TCP, frames
  and decodes everything, Python gets event objects) against the dpkt + pamqp script of
  ``bench/dpkt_pamqp.py`` run in process (dpkt parsing, a small reassembler, pamqp per frame).
  Both count the AMQP frames they decoded; bench/decode.py times the whole ``amqpscope decode``
  command (output included) against tshark and the same script on one large capture.

Each timing is CPU time (process_time), the best of R rounds in which the decoders take turns: the
machine may be shared, and the best round is the least disturbed one.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

from native_build import ensure_release_core  # noqa: E402

ensure_release_core()  # before the core is loaded: the figures are the release build's (docs/build.md)

import dpkt_pamqp  # noqa: E402
from pamqp.exceptions import UnmarshalingException  # noqa: E402
from pamqp.frame import unmarshal  # noqa: E402

from amqpscope.capture import read_packets  # noqa: E402
from amqpscope.dissect.codec import Codec, get_codec  # noqa: E402
from amqpscope.dissect.wire import FRAME_HEADER, FRAME_METHOD  # noqa: E402
from amqpscope.events import Frame  # noqa: E402
from amqpscope.pipeline import Options, decode_source  # noqa: E402
from amqpscope.testing import tcpwalk  # noqa: E402
from amqpscope.testing.frames import RawFrame, decode_frame  # noqa: E402

SHARED_CAPTURES = ROOT.parent / "shared" / "captures"


def seed_captures() -> list[Path]:
    files = sorted(SHARED_CAPTURES.glob("*.pcap")) if SHARED_CAPTURES.is_dir() else []
    return files or sorted((ROOT / "samples").glob("*.pcap"))


def server_port(path: Path) -> int:
    """The port the first AMQP protocol header was sent to (5672 if none is seen)."""
    for seg in tcpwalk.segments(path):
        if seg.payload.startswith(b"AMQP"):
            return seg.dst[1]
    return 5672


# --- payloads ------------------------------------------------------------------------------------


def frames_of(path: Path) -> list[tuple[int, bytes, bytes]]:
    """(type, whole frame, payload) of every method and header frame of a capture, by the test tooling."""
    streams: dict[tuple[int, Any], list[bytes]] = {}
    segs = (seg for p in read_packets(path) if (seg := tcpwalk.parse(p)) is not None)
    for ev in tcpwalk.walk(segs):
        if isinstance(ev, tcpwalk.TcpData):
            streams.setdefault((ev.flow, ev.src), []).append(ev.data)
    out = []
    for chunks in streams.values():
        s = b"".join(chunks)
        off = 8 if s.startswith(b"AMQP") else 0
        while isinstance(r := decode_frame(s, off), RawFrame):
            if r.type in (FRAME_METHOD, FRAME_HEADER):
                out.append((r.type, s[off : r.end], r.payload))
            off = r.end
    return out


def agree(codec: Codec, ftype: int, frame: bytes, payload: bytes) -> bool:
    """Both decoders read the frame cleanly and agree on what it is."""
    try:
        _, _, theirs = unmarshal(frame)
    except UnmarshalingException:
        return False
    if ftype == FRAME_METHOD:
        m = codec.decode_method(payload)
        if m.problem is not None or m.method is None:
            return False
        assert (m.class_id, m.method_id) == divmod(theirs.index, 1 << 16), (m.name, theirs.name)
        return True
    h = codec.decode_header(payload)
    if h.problem is not None:
        return False
    props = theirs.properties
    assert (h.class_id, h.body_size) == (theirs.class_id, theirs.body_size)
    for key in ("content_type", "delivery_mode", "message_id", "correlation_id", "reply_to"):
        assert h.properties.get(key) == (getattr(props, key) or None), key
    return True


Decoder = Callable[[Codec, list[tuple[int, bytes, bytes]]], int]


def ours_payloads(codec: Codec, frames: list[tuple[int, bytes, bytes]]) -> int:
    dm, dh, method = codec.decode_method, codec.decode_header, FRAME_METHOD
    for ftype, _, payload in frames:
        if ftype == method:
            dm(payload)
        else:
            dh(payload)
    return len(frames)


def pamqp_frames(codec: Codec, frames: list[tuple[int, bytes, bytes]]) -> int:
    for _, frame, _ in frames:
        unmarshal(frame)
    return len(frames)


def interleaved_best(fns: dict[str, Callable[[], int]], repeats: int) -> dict[str, tuple[float, int]]:
    """Best CPU time of each function over ``repeats`` rounds, the functions taking turns in every
    round so that a burst of load from other processes hits all of them alike."""
    best = {label: (float("inf"), 0) for label in fns}
    for _ in range(repeats):
        for label, fn in fns.items():
            gc.collect()
            t0 = time.process_time()
            n = fn()
            secs = time.process_time() - t0
            if secs < best[label][0]:
                best[label] = (secs, n)
    return best


def bench_payloads(codec: Codec, files: list[Path], n: int, repeats: int) -> None:
    found = [f for path in files for f in frames_of(path)]
    clean = [f for f in found if agree(codec, *f)]
    print(f"\n[payloads] {len(clean)} of {len(found)} method/header frames of {len(files)} captures decoded "
          f"cleanly by both and agreeing; cycled to {n} frames per run")  # fmt: skip
    for label, ftypes in (("methods", {FRAME_METHOD}), ("headers", {FRAME_HEADER}),
                          ("both", {FRAME_METHOD, FRAME_HEADER})):  # fmt: skip
        base = [f for f in clean if f[0] in ftypes]
        if not base:
            continue
        work = (base * (n // len(base) + 1))[:n]
        fns: dict[str, Callable[[], int]] = {
            "ours (Codec.decode_*)": lambda w=work: ours_payloads(codec, w),  # type: ignore[misc]
            "pamqp.frame.unmarshal": lambda w=work: pamqp_frames(codec, w),  # type: ignore[misc]
        }
        res = {k: count / secs for k, (secs, count) in interleaved_best(fns, repeats).items()}
        ours, theirs = res["ours (Codec.decode_*)"], res["pamqp.frame.unmarshal"]
        print(f"  {label:8s} ours {ours:12,.0f} frames/s   pamqp {theirs:12,.0f} frames/s   ratio {ours / theirs:.2f}x")


# --- whole captures ------------------------------------------------------------------------------


def ours_capture(codec: Codec, path: Path, ports: frozenset[int], bodies: bool) -> int:
    options = Options(ports=ports, keep_bodies=bodies)
    return sum(1 for ev in decode_source(path, codec, options) if isinstance(ev, Frame))


def dpkt_capture(path: Path, port: int) -> int:
    counts = dpkt_pamqp.run(str(path), port, None)
    return sum(v for k, v in counts.items() if k not in ("ProtocolHeader", "undecodable"))


def bench_captures(codec: Codec, files: list[Path], repeats: int) -> None:
    print("\n[captures] decode_source (native, events to Python) vs dpkt + pamqp (bench/dpkt_pamqp.py), in process;")
    print("  ours: bodies not kept (decode without --body, stats, validate); +bodies: body bytes handed to Python")
    total = {"ours": 0.0, "ours+bodies": 0.0, "dpkt": 0.0}
    for path in files:
        port = server_port(path)
        ports = frozenset({port})
        fns = {"ours": lambda p=path, ps=ports: ours_capture(codec, p, ps, False),  # type: ignore[misc]
               "ours+bodies": lambda p=path, ps=ports: ours_capture(codec, p, ps, True),  # type: ignore[misc]
               "dpkt": lambda p=path, po=port: dpkt_capture(p, po)}  # type: ignore[misc]  # fmt: skip
        best = interleaved_best(fns, repeats)
        for k in total:
            total[k] += best[k][0]
        (o_secs, o_frames), (b_secs, _), (d_secs, d_frames) = best["ours"], best["ours+bodies"], best["dpkt"]
        mb = path.stat().st_size / 1e6
        same = "" if o_frames == d_frames else f"  (frames differ: ours {o_frames}, dpkt+pamqp {d_frames})"
        print(f"  {path.name:32s} {mb:6.2f} MB {o_frames:5d} frames  ours {o_secs * 1e3:7.1f} ms "
              f"(+bodies {b_secs * 1e3:7.1f})  dpkt+pamqp {d_secs * 1e3:7.1f} ms  "
              f"ratio {d_secs / max(o_secs, 1e-9):5.2f}x ({d_secs / max(b_secs, 1e-9):5.2f}x){same}")  # fmt: skip
    print(f"  all: ours {total['ours']:.3f} s (+bodies {total['ours+bodies']:.3f} s), dpkt+pamqp {total['dpkt']:.3f} s: "
          f"ratio {total['dpkt'] / max(total['ours'], 1e-9):.2f}x ({total['dpkt'] / max(total['ours+bodies'], 1e-9):.2f}x)")  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--payloads", type=int, default=100_000, help="frames per payload run")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--capture", type=Path, action="append", default=[], help="capture(s) instead of the seeds")
    ap.add_argument("--skip", default="", help="comma-separated: payloads, captures")
    opts = ap.parse_args()
    codec = get_codec()
    files = opts.capture or seed_captures()
    skip = set(opts.skip.split(","))
    print(f"best CPU time of {opts.repeats} interleaved rounds, Python {sys.version.split()[0]}")
    if "payloads" not in skip:
        bench_payloads(codec, files, opts.payloads, opts.repeats)
    if "captures" not in skip:
        bench_captures(codec, files, opts.repeats)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

#!/usr/bin/env python3
"""Speed and memory of ``amqpscope decode`` against tshark, a dpkt + pamqp script and a bare Rust frame
walk, in one run, on one or more captures.

Record the captures first: ``python bench/record_large.py`` (bench/data/large.pcap, loopback MTU 64 KiB)
and ``python bench/record_large.py --mtu 1500 --out bench/data/large-mtu1500.pcap`` (Ethernet-sized
segments, reordering).

Commands timed (each a separate process, wall clock and CPU, peak RSS from ``/usr/bin/time -f %M``):

* amqpscope:   ``amqpscope decode --format jsonl FILE > /dev/null`` (inline validation, the default) and
  ``--no-validate`` (JSON lines written by the native core, full arguments and properties)
* tshark:      ``tshark -r FILE [-d tcp.port==PORT,amqp] [-o tcp.reassemble_out_of_order:TRUE] -Y amqp -T fields
  -e amqp.method.method > OUT``; out-of-order reassembly is switched on for captures with Ethernet-sized
  segments (no TCP payload over 9000 bytes), where segments really arrive out of order
* dpkt+pamqp:  ``python bench/dpkt_pamqp.py FILE --port PORT --jsonl > /dev/null`` (frames decoded with
  arguments and written as JSON lines: the same work), and the same without ``--jsonl`` (decode only)
* framewalk:   ``target/release/framewalk FILE > /dev/null`` (bench/framewalk: a std-only pcap reader,
  reassembler and frame walk printing one short JSON line per frame; the floor)

Frames are counted independently (``amqpscope.testing.sniffer.count_amqp_frames``: its own reassembly and
frame walk, no codec) and each tool's own count is shown beside it: tshark silently loses frames when one
TCP segment holds hundreds of them, so its field output only counts what it saw (method frames).

The machine may be shared: every command runs ``--repeat`` times, in rounds that run every command once
(a slow spell of the host hits all tools alike), and the best (lowest) wall time is kept, with the peak
RSS of that run. ``--half`` also decodes the first half of each capture's packets (written next to it) to
show that memory does not grow with the capture's size. Ratios above 1 mean amqpscope is faster.

* validate, stats: ``amqpscope validate -T jsonl FILE`` and ``amqpscope stats --format json FILE`` on the
  same capture, shown against the decode with validation


AMQPS (``--tls FILE``): the same workload recorded over TLS 1.3 with AES-128-GCM
(``python bench/record_large.py --tls``: bench/data/large-tls13.pcap and its key log
large-tls13.keys) against the plaintext recording (``--plain FILE``, default bench/data/large.pcap),
in one run: ``amqpscope decode --format jsonl --no-validate --tls-keylog KEYS`` of the TLS capture,
the same without TLS of the plaintext one, and tshark decrypting and decoding the TLS capture
(``-o tls.keylog_file:KEYS -d tcp.port==PORT,tls -d tls.port==PORT,amqp -Y amqp -T fields -e
amqp.method.method``). Targets (issue #21): TLS decode ≤ 1.5× the plaintext decode's time and ≤ 0.25×
tshark's.

Usage: python bench/decode.py [FILE ...] [--repeat N] [--half]
                              [--skip validate,commands,tshark,dpkt,dpkt-count,framewalk]
       python bench/decode.py --tls bench/data/large-tls13.pcap [--plain bench/data/large.pcap] [--repeat N]
"""

from __future__ import annotations

import argparse
import compileall
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from native_build import ensure_release_core  # noqa: E402

ensure_release_core()  # before the core is loaded: the figures are the release build's (docs/build.md)

from amqpscope.capture import read_packets  # noqa: E402
from amqpscope.pcapwrite import write_pcap  # noqa: E402
from amqpscope.testing.sniffer import count_amqp_frames  # noqa: E402
from amqpscope.testing.tcpwalk import segments  # noqa: E402

PY = sys.executable
AMQPSCOPE = str(Path(PY).parent / "amqpscope")
TSHARK_DEEP_TREE = 100_000  # gui.max_tree_depth for the "deep" tshark run (default 500)


def server_port(path: Path) -> int:
    """The port the first AMQP protocol header was sent to."""
    for seg in segments(path):
        if seg.index > 100_000:
            break
        if seg.payload.startswith(b"AMQP"):
            return seg.dst[1]
    raise SystemExit(f"{path}: no AMQP protocol header in the first 100000 packets")


def timed(cmd: list[str], stdout: str) -> tuple[float, int, int, float]:
    """(wall seconds, peak RSS KiB, exit code, CPU seconds) of one run; stdout to the file ``stdout``."""
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss, open(stdout, "wb") as out:
        t = time.perf_counter()
        proc = subprocess.run(["/usr/bin/time", "-f", "%M %U %S", "-o", rss.name, *cmd], stdout=out,
                              stderr=subprocess.PIPE, check=False)  # fmt: skip
        wall = time.perf_counter() - t
        text = Path(rss.name).read_text().strip().splitlines()
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr.decode(errors="replace")[-2000:])
    rss_kib, user, system = text[-1].split() if text else ("0", "0", "0")
    return wall, int(rss_kib), proc.returncode, float(user) + float(system)


CPU: dict[tuple[str, ...], float] = {}  # best CPU seconds per command, for the CPU-time table


def best(cmd: list[str], repeat: int, stdout: str = os.devnull) -> tuple[float, int, list[float]]:
    return interleaved([(cmd, stdout)], repeat)[0]


def interleaved(cmds: list[tuple[list[str], str]], repeat: int) -> list[tuple[float, int, list[float]]]:
    """Every command ``repeat`` times, in rounds (each round runs them all, one after the other), so
    that a slow spell of a shared machine hits every tool alike; per command the best wall time, the
    peak RSS of that run and every run's wall time."""
    runs: list[list[tuple[float, int, int, float]]] = [[] for _ in cmds]
    for _round in range(repeat):
        for i, (cmd, stdout) in enumerate(cmds):
            run = timed(cmd, stdout)
            if run[2] != 0 and not (run[2] == 1 and cmd[1:2] == ["validate"]):  # validate: 1 = findings
                raise SystemExit(f"command failed ({run[2]}): {' '.join(cmd)}")
            runs[i].append(run)
    out = []
    for (cmd, _stdout), mine in zip(cmds, runs, strict=True):
        walls = [w for w, _r, _c, _cpu in mine]
        i = walls.index(min(walls))
        CPU[tuple(cmd)] = min(cpu for *_x, cpu in mine)
        out.append((walls[i], mine[i][1], walls))
    return out


def half_capture(path: Path) -> Path:
    dst = path.with_name(path.stem + "-half.pcap")
    packets = list(read_packets(path))
    write_pcap(dst, ((p.ts_ns, p.data) for p in packets[: len(packets) // 2]), packets[0].linktype)
    return dst


def our_count(path: Path, port: int, extra: tuple[str, ...] = ()) -> int:
    """Frames in our JSONL output (an untimed run, counted line by line)."""
    cmd = [AMQPSCOPE, "decode", "--format", "jsonl", "--no-validate", "--port", str(port), *extra, str(path)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    n = sum(1 for line in proc.stdout if line.startswith(b'{"kind":"frame"'))
    proc.wait()
    return n


def segmented(path: Path) -> bool:
    """True for captures of Ethernet-sized segments: no TCP payload of the first packets beyond a jumbo
    frame (a loopback at MTU 1500 still shows a few GSO segments of 2-4 KiB; at MTU 64 KiB they
    reach 64 KiB)."""
    largest = max((len(seg.payload) for seg in itertools.islice(segments(path), 100_000)), default=0)
    return largest <= 9000


def framewalk() -> str:
    """The floor's binary, built (release) if needed."""
    subprocess.run(["cargo", "build", "-q", "--release", "-p", "framewalk"], cwd=ROOT, check=True)
    return str(ROOT / "target" / "release" / "framewalk")


def bench_capture(path: Path, args: argparse.Namespace, skip: set[str], floor: str | None) -> None:
    port = server_port(path)
    size = path.stat().st_size
    ooo = segmented(path)
    print(f"\n=== capture: {path} ({size / 2**20:.1f} MiB), AMQP server port {port}, best of {args.repeat} runs each")
    print(f"machine: {os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at start")
    t = time.perf_counter()
    truth = count_amqp_frames(path)
    methods = truth["frames"] - truth["content-header"] - truth["content-body"] - truth["heartbeat"]
    print(f"independent count ({time.perf_counter() - t:.1f} s): {truth['frames']} AMQP frames "
          f"({methods} method, {truth['content-header']} header, {truth['content-body']} body, "
          f"{truth['heartbeat']} heartbeat) + {truth['protocol-header']} protocol headers, "
          f"{truth['connections']} connections, {truth.get('unfilled-gaps', 0)} unfilled gaps")  # fmt: skip

    ours_cmd = [AMQPSCOPE, "decode", "--format", "jsonl", "--port", str(port), str(path)]
    decode_as = [] if port == 5672 else ["-d", f"tcp.port=={port},amqp"]
    reorder = ["-o", "tcp.reassemble_out_of_order:TRUE"] if ooo else []
    tshark_cmd = ["tshark", "-r", str(path), *decode_as, *reorder, "-Y", "amqp", "-T", "fields", "-e",
                  "amqp.method.method"]  # fmt: skip
    dpkt_cmd = [PY, str(ROOT / "bench" / "dpkt_pamqp.py"), str(path), "--port", str(port), "--jsonl"]
    fd, tshark_out = tempfile.mkstemp(suffix=".txt")
    os.close(fd)
    fd, walk_out = tempfile.mkstemp(suffix=".jsonl")
    os.close(fd)
    # (name, command line shown, command, where its stdout goes)
    plan: list[tuple[str, str, list[str], str]] = [
        ("amqpscope --no-validate", "amqpscope decode --format jsonl --no-validate FILE > /dev/null",
         [*ours_cmd[:-1], "--no-validate", str(path)], os.devnull)]  # fmt: skip
    if "validate" not in skip:
        plan.append(("amqpscope", "amqpscope decode --format jsonl FILE > /dev/null", ours_cmd, os.devnull))
    if "commands" not in skip:
        # the same capture through the other commands: findings alone, and the analytics report
        plan.append(("amqpscope validate", "amqpscope validate -T jsonl FILE > /dev/null",
                     [AMQPSCOPE, "validate", "-T", "jsonl", "--port", str(port), str(path)], os.devnull))  # fmt: skip
        plan.append(("amqpscope stats", "amqpscope stats --format json FILE > /dev/null",
                     [AMQPSCOPE, "stats", "--format", "json", "--port", str(port), str(path)], os.devnull))  # fmt: skip
    if "tshark" not in skip:
        plan.append(("tshark", " ".join(tshark_cmd) + " > OUT", tshark_cmd, tshark_out))
    if "dpkt" not in skip:
        plan.append(("dpkt+pamqp", "python bench/dpkt_pamqp.py FILE --port PORT --jsonl > /dev/null", dpkt_cmd,
                     os.devnull))  # fmt: skip
    if "dpkt-count" not in skip:
        plan.append(("dpkt+pamqp (no output)", "python bench/dpkt_pamqp.py FILE --port PORT", dpkt_cmd[:-1],
                     os.devnull))  # fmt: skip
    if floor is not None:
        plan.append(("framewalk (floor)", "target/release/framewalk FILE > OUT", [floor, str(path)], walk_out))
    results = interleaved([(cmd, out) for _n, _l, cmd, out in plan], args.repeat)

    seen: dict[str, str] = {"amqpscope --no-validate": f"{our_count(path, port)} of {truth['frames']} frames",
                            "amqpscope": "(the same frames, with inline findings)",
                            "amqpscope validate": "(findings only)", "amqpscope stats": "(one JSON report)",
                            "dpkt+pamqp (no output)": "(decode only, writes nothing)"}  # fmt: skip
    if "tshark" not in skip:
        got = sum(len(line.split(b",")) for line in Path(tshark_out).read_bytes().splitlines() if line.strip())
        seen["tshark"] = f"{got} of {methods} method frames"
    if floor is not None:
        walked = len(Path(walk_out).read_bytes().splitlines())
        seen["framewalk (floor)"] = f"{walked} of {truth['frames']} frames"
    Path(tshark_out).unlink()
    Path(walk_out).unlink()
    if "dpkt" not in skip:
        proc = subprocess.run(dpkt_cmd[:-1], capture_output=True, check=True)
        seen["dpkt+pamqp"] = f"{json.loads(proc.stderr.decode().strip().splitlines()[-1])['frames']} of " \
                             f"{truth['frames']} frames"  # fmt: skip
    rows = [(name, line, wall, rss, walls, seen[name], cmd)
            for (name, line, cmd, _out), (wall, rss, walls) in zip(plan, results, strict=True)]  # fmt: skip

    print()
    print(f"{'tool':<24} {'best s':>8} {'CPU s':>7} {'frames/s':>11} {'MB/s/core':>10} {'peak RSS':>10}  "
          f"{'runs (s)':<20} frames seen")  # fmt: skip
    for name, _line, wall, peak, times, seen_by, cmd in rows:
        cpu = CPU[tuple(cmd)]
        print(f"{name:<24} {wall:>8.2f} {cpu:>7.2f} {truth['frames'] / wall:>11,.0f} {size / 1e6 / cpu:>10.1f} "
              f"{peak / 1024:>7.1f} MiB  {' '.join(f'{w:.2f}' for w in times):<20} {seen_by}")  # fmt: skip
    print()
    decode_wall = next((wall for name, _l, wall, *_x in rows if name == "amqpscope"), None)
    for name, _line, wall, *_x in rows:
        if name in ("amqpscope validate", "amqpscope stats") and decode_wall:
            print(f"{name}: {wall / decode_wall:.2f}x the time of amqpscope decode (validation on)")
    for ours_name, _ours_line, ours_wall, _r, _t, _s, ours_cmd_ in rows:
        if ours_name not in ("amqpscope", "amqpscope --no-validate"):
            continue
        ours_cpu = CPU[tuple(ours_cmd_)]
        for name, _line, wall, _rss, _walls, _seen, cmd in rows:
            if name.startswith("amqpscope"):
                continue
            print(f"{ours_name}: {name} / amqpscope wall {wall / ours_wall:.2f}x, CPU {CPU[tuple(cmd)] / ours_cpu:.2f}x"
                  f"   (amqpscope / {name}: wall {ours_wall / wall:.2f}x)")  # fmt: skip
    print()
    for name, line, *_ in rows:
        print(f"  {name}: {line}")
    if args.half:
        half = half_capture(path)
        cmd = [AMQPSCOPE, "decode", "--format", "jsonl", "--no-validate", "--port", str(port)]
        (h_wall, h_rss, _), (f_wall, f_rss, _) = interleaved([([*cmd, str(half)], os.devnull),
                                                              ([*cmd, str(path)], os.devnull)], args.repeat)  # fmt: skip
        print("\nmemory against capture size (amqpscope decode --format jsonl --no-validate > /dev/null):")
        print(f"  half ({half.stat().st_size / 2**20:.1f} MiB): {h_wall:.2f} s, peak RSS {h_rss / 1024:.1f} MiB")
        print(f"  full ({size / 2**20:.1f} MiB): {f_wall:.2f} s, peak RSS {f_rss / 1024:.1f} MiB")
        half.unlink()
    print(f"\nload average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def compile_project() -> None:
    """Byte-compile amqpscope and cli once, as installing a wheel does: an editable install under
    PYTHONDONTWRITEBYTECODE would otherwise recompile every module in every timed run (~0.1 s)."""
    for package in ("amqpscope", "cli"):
        compileall.compile_dir(ROOT / package, quiet=1)


def tls_server_port(path: Path) -> int:
    """The port the first SYN (without ACK) went to: the broker's TLS listener."""
    for seg in itertools.islice(segments(path), 100_000):
        if seg.flags & 0x12 == 0x02:
            return seg.dst[1]
    raise SystemExit(f"{path}: no SYN in the first 100000 packets")


def tshark_methods(out: str) -> int:
    """Method frames tshark printed: one line per packet, its frames' method ids joined by commas
    (a content frame's empty value is not a method)."""
    return sum(1 for line in Path(out).read_bytes().splitlines() for v in line.split(b",") if v.strip())


def our_methods(cmd: list[str]) -> int:
    """Method frames in our JSON lines, for the same count as tshark's."""
    out = subprocess.run(cmd, stdout=subprocess.PIPE, check=True).stdout
    return sum(1 for line in out.splitlines() if line.startswith(b'{"kind":"frame"') and b'"method":"' in line)


def bench_tls(path: Path, plain: Path, keys: Path, args: argparse.Namespace) -> None:
    """TLS decode against the plaintext decode of the same workload and against tshark's decryption."""
    port, plain_port = tls_server_port(path), server_port(plain)
    size, plain_size = path.stat().st_size, plain.stat().st_size
    print(f"\n=== AMQPS: {path} ({size / 2**20:.1f} MiB, TLS port {port}, key log {keys}) against {plain} "
          f"({plain_size / 2**20:.1f} MiB), best of {args.repeat} runs each")  # fmt: skip
    print(f"machine: {os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at start")
    truth = count_amqp_frames(plain)
    print(f"independent count of the plaintext recording: {truth['frames']} AMQP frames")
    tls_cmd = [AMQPSCOPE, "decode", "--format", "jsonl", "--no-validate", "--tls-keylog", str(keys), str(path)]
    plain_cmd = [AMQPSCOPE, "decode", "--format", "jsonl", "--no-validate", "--port", str(plain_port), str(plain)]
    tshark_cmd = ["tshark", "-r", str(path), "-o", f"tls.keylog_file:{keys}", "-d", f"tcp.port=={port},tls", "-d",
                  f"tls.port=={port},amqp", "-Y", "amqp", "-T", "fields", "-e", "amqp.method.method"]  # fmt: skip
    # With its default preferences tshark stops dissecting a packet after 500 protocol layers
    # ("Dissector bug ... gui_max_tree_depth" on stderr): a 64 KiB loopback packet of TLS records full
    # of small AMQP frames is cut short, so tshark does a fraction of the work. The deep variant lifts
    # that limit so tshark decodes what it can; both are timed, and the methods each printed counted.
    deep_cmd = [*tshark_cmd[:3], "-o", f"gui.max_tree_depth:{TSHARK_DEEP_TREE}", *tshark_cmd[3:]]
    fd, tshark_out = tempfile.mkstemp(suffix=".txt")
    os.close(fd)
    fd, deep_out = tempfile.mkstemp(suffix=".txt")
    os.close(fd)
    plan = [("amqpscope TLS 1.3", f"amqpscope decode --format jsonl --no-validate --tls-keylog {keys.name} FILE",
             tls_cmd, os.devnull, size),
            ("amqpscope plaintext", "amqpscope decode --format jsonl --no-validate PLAIN", plain_cmd, os.devnull,
             plain_size)]  # fmt: skip
    if "tshark" not in args.skip:
        plan.append(("tshark TLS 1.3", " ".join(tshark_cmd[:-4]) + " ... -e amqp.method.method > OUT", tshark_cmd,
                     tshark_out, size))  # fmt: skip
        plan.append(("tshark TLS 1.3 deep", " ".join(deep_cmd[:-4]) + " ... -e amqp.method.method > OUT", deep_cmd,
                     deep_out, size))  # fmt: skip
    results = interleaved([(cmd, out) for _n, _l, cmd, out, _s in plan], args.repeat)
    ours_tls = our_count(path, port, ("--tls-keylog", str(keys)))
    seen = {"amqpscope TLS 1.3": f"{ours_tls} frames (plaintext recording: {truth['frames']})",
            "amqpscope plaintext": f"{our_count(plain, plain_port)} of {truth['frames']} frames"}  # fmt: skip
    if "tshark" not in args.skip:
        seen["tshark TLS 1.3"] = f"{tshark_methods(tshark_out)} method frames"
        seen["tshark TLS 1.3 deep"] = f"{tshark_methods(deep_out)} method frames"
    seen["amqpscope TLS 1.3"] += f", {our_methods(tls_cmd)} method frames"
    Path(tshark_out).unlink()
    Path(deep_out).unlink()
    print()
    print(f"{'tool':<22} {'best s':>8} {'CPU s':>7} {'MB/s/core':>10} {'peak RSS':>10}  {'runs (s)':<20} frames seen")
    walls: dict[str, float] = {}
    cpus: dict[str, float] = {}
    for (name, _line, cmd, _out, nbytes), (wall, peak, times) in zip(plan, results, strict=True):
        walls[name], cpus[name] = wall, CPU[tuple(cmd)]
        print(f"{name:<22} {wall:>8.2f} {cpus[name]:>7.2f} {nbytes / 1e6 / cpus[name]:>10.1f} {peak / 1024:>7.1f} MiB  "
              f"{' '.join(f'{w:.2f}' for w in times):<20} {seen[name]}")  # fmt: skip
    print()
    tls, plain_name = "amqpscope TLS 1.3", "amqpscope plaintext"
    ratio = walls[tls] / walls[plain_name]
    print(f"TLS / plaintext: wall {ratio:.2f}x, CPU {cpus[tls] / cpus[plain_name]:.2f}x "
          f"(target <= 1.5x: {'met' if ratio <= 1.5 else 'NOT met'})")  # fmt: skip
    if "tshark" not in args.skip:
        for name in ("tshark TLS 1.3", "tshark TLS 1.3 deep"):
            ratio = walls[tls] / walls[name]
            print(f"TLS / {name + ':':<20} wall {ratio:.3f}x, CPU {cpus[tls] / cpus[name]:.3f}x "
                  f"(target <= 0.25x: {'met' if ratio <= 0.25 else 'NOT met'})")  # fmt: skip
    print()
    for name, line, *_ in plan:
        print(f"  {name}: {line}")
    print(f"\nload average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("captures", nargs="*", type=Path, default=[ROOT / "bench" / "data" / "large.pcap"])
    ap.add_argument("--repeat", type=int, default=3, help="runs per command; the best is kept (default 3)")
    ap.add_argument("--half", action="store_true", help="also measure the first half of each capture")
    ap.add_argument("--skip", default="",
                    help="comma-separated: validate, commands, tshark, dpkt, dpkt-count, framewalk")  # fmt: skip
    ap.add_argument("--tls", type=Path, default=None, metavar="FILE",
                    help="AMQPS recording (record_large.py --tls); its key log FILE.keys beside it")  # fmt: skip
    ap.add_argument("--tls-keylog", type=Path, default=None, metavar="KEYS", help="the --tls capture's key log")
    ap.add_argument("--plain", type=Path, default=ROOT / "bench" / "data" / "large.pcap", metavar="FILE",
                    help="the same workload in plaintext, for --tls (default bench/data/large.pcap)")  # fmt: skip
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    args.skip = skip
    compile_project()
    if args.tls is not None:
        keys = args.tls_keylog or args.tls.with_suffix(".keys")
        for path in (args.tls, keys, args.plain):
            if not path.exists():
                raise SystemExit(f"{path} not found: run bench/record_large.py (--tls) first")
        bench_tls(args.tls, args.plain, keys, args)
        if args.captures == ap.get_default("captures"):
            return 0
    for path in args.captures:
        if not path.exists():
            raise SystemExit(f"{path} not found: run bench/record_large.py first")
    floor = framewalk() if "framewalk" not in skip else None
    for path in args.captures:
        bench_capture(path, args, skip, floor)
    return 0


if __name__ == "__main__":
    sys.exit(main())

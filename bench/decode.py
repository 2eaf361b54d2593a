#!/usr/bin/env python3
"""Speed and memory of ``amqpscope decode`` against tshark and a dpkt + pamqp script, in one run.

Record the capture first: ``python bench/record_large.py --messages 300000`` (bench/data/large.pcap).

Commands timed (each a separate process, wall clock, peak RSS from ``/usr/bin/time -f %M``):

* ours:        ``amqpscope decode --format jsonl FILE > /dev/null``: with two or more cores the
  validator runs in a helper process that decodes the file a second time (``-j 2``), so its CPU
  time is that of both processes and its peak RSS that of the larger one (they are about the same
  size: the total is about twice); also ``-j 1`` (one process) and ``--no-validate``
* tshark:      ``tshark -r FILE [-d tcp.port==PORT,amqp] -Y amqp -T fields -e amqp.method.method > OUT``
* dpkt+pamqp:  ``python bench/dpkt_pamqp.py FILE --port PORT --jsonl > /dev/null`` (frames decoded with
  arguments and written as JSON lines: the same work), and the same without ``--jsonl`` (decode only).

Frames are counted independently (``amqpscope.testing.sniffer.count_amqp_frames``: its own reassembly
and frame walk, no codec) and each tool's own count is shown beside it: tshark 4.0 silently loses
frames when one TCP segment holds hundreds of them, so its field output only counts what it saw
(method frames: the values in the ``amqp.method.method`` column).

The machine may be shared: every command runs ``--repeat`` times, in rounds that run every command
once (a slow spell of the host hits all tools alike), and the best (lowest) wall time is kept, with
the peak RSS of that run. ``--half`` also decodes the first half of the packets (written
next to the capture) to show that memory does not grow with the capture's size.

Ratios above 1 mean amqpscope is faster. Wall and CPU (user + system) seconds are both shown: on a
shared machine the CPU time is the steadier of the two.

Usage: python bench/decode.py [FILE] [--repeat N] [--half] [--skip single,no-validate,tshark,dpkt,dpkt-count]
"""

from __future__ import annotations

import argparse
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

from amqpscope.capture import read_packets  # noqa: E402
from amqpscope.pcapwrite import write_pcap  # noqa: E402
from amqpscope.testing.sniffer import count_amqp_frames  # noqa: E402
from amqpscope.testing.tcpwalk import segments  # noqa: E402

PY = sys.executable
AMQPSCOPE = str(Path(PY).parent / "amqpscope")


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
            if run[2] != 0:
                raise SystemExit(f"command failed ({run[2]}): {' '.join(cmd)}")
            runs[i].append(run)
    out = []
    for (cmd, _stdout), mine in zip(cmds, runs, strict=True):
        walls = [w for w, _r, _c, _cpu in mine]
        i = walls.index(min(walls))
        CPU[tuple(cmd)] = min(cpu for *_x, cpu in mine)
        out.append((walls[i], mine[i][1], walls))
    return out


def tree_rss_peak(cmd: list[str]) -> float:
    """Peak of the summed RSS (MiB) of a command and its descendants, sampled every 0.1 s: decode's
    validation helper is a second process, which ``/usr/bin/time`` reports only as the larger of two."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    peak = 0
    while proc.poll() is None:
        total = 0
        for pid in _tree(proc.pid):
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            total += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS")), 0)
        peak = max(peak, total)
        time.sleep(0.1)
    return peak / 1024


def _tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def half_capture(path: Path) -> Path:
    dst = path.with_name(path.stem + "-half.pcap")
    packets = list(read_packets(path))
    write_pcap(dst, ((p.ts_ns, p.data) for p in packets[: len(packets) // 2]), packets[0].linktype)
    return dst


def our_count(path: Path, port: int) -> int:
    """Frames in our JSONL output (an untimed run, counted line by line)."""
    cmd = [AMQPSCOPE, "decode", "--format", "jsonl", "--port", str(port), str(path)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    n = sum(1 for line in proc.stdout if line.startswith(b'{"kind":"frame"'))
    proc.wait()
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("capture", nargs="?", type=Path, default=ROOT / "bench" / "data" / "large.pcap")
    ap.add_argument("--repeat", type=int, default=3, help="runs per command; the best is kept (default 3)")
    ap.add_argument("--half", action="store_true", help="also measure the first half of the capture")
    ap.add_argument("--skip", default="", help="comma-separated: single, no-validate, tshark, dpkt, dpkt-count")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    path: Path = args.capture
    if not path.exists():
        raise SystemExit(f"{path} not found: run bench/record_large.py first")
    port = server_port(path)
    size = path.stat().st_size
    print(f"capture: {path} ({size / 2**20:.1f} MiB), AMQP server port {port}, best of {args.repeat} runs each")
    print(f"machine: {os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at start")

    t = time.perf_counter()
    truth = count_amqp_frames(path)
    methods = truth["frames"] - truth["content-header"] - truth["content-body"] - truth["heartbeat"]
    print(f"independent count ({time.perf_counter() - t:.1f} s): {truth['frames']} AMQP frames "
          f"({methods} method, {truth['content-header']} header, {truth['content-body']} body, "
          f"{truth['heartbeat']} heartbeat) + {truth['protocol-header']} protocol headers, "
          f"{truth['connections']} connections")  # fmt: skip

    ours_cmd = [AMQPSCOPE, "decode", "--format", "jsonl", str(path)]
    decode_as = [] if port == 5672 else ["-d", f"tcp.port=={port},amqp"]
    tshark_cmd = ["tshark", "-r", str(path), *decode_as, "-Y", "amqp", "-T", "fields", "-e", "amqp.method.method"]
    dpkt_cmd = [PY, str(ROOT / "bench" / "dpkt_pamqp.py"), str(path), "--port", str(port), "--jsonl"]
    dpkt_count_cmd = dpkt_cmd[:-1]

    # (name, command line shown, command, where its stdout goes)
    fd, tshark_out = tempfile.mkstemp(suffix=".txt")
    os.close(fd)
    plan: list[tuple[str, str, list[str], str]] = [("amqpscope", "amqpscope decode --format jsonl FILE > /dev/null",
                                                    ours_cmd, os.devnull)]  # fmt: skip
    if "single" not in skip:
        plan.append(("amqpscope -j 1", "amqpscope decode --format jsonl -j 1 FILE > /dev/null",
                     [*ours_cmd[:-1], "-j", "1", str(path)], os.devnull))  # fmt: skip
    if "no-validate" not in skip:
        plan.append(("amqpscope --no-validate", "amqpscope decode --format jsonl --no-validate FILE > /dev/null",
                     [*ours_cmd[:-1], "--no-validate", str(path)], os.devnull))  # fmt: skip
    if "tshark" not in skip:
        plan.append(("tshark", " ".join(tshark_cmd) + " > OUT", tshark_cmd, tshark_out))
    if "dpkt" not in skip:
        plan.append(("dpkt+pamqp", "python bench/dpkt_pamqp.py FILE --port PORT --jsonl > /dev/null", dpkt_cmd,
                     os.devnull))  # fmt: skip
    if "dpkt-count" not in skip:
        plan.append(("dpkt+pamqp (no output)", "python bench/dpkt_pamqp.py FILE --port PORT", dpkt_count_cmd,
                     os.devnull))  # fmt: skip
    results = interleaved([(cmd, out) for _n, _l, cmd, out in plan], args.repeat)

    seen: dict[str, str] = {"amqpscope": f"{our_count(path, port)} of {truth['frames']} frames",
                            "amqpscope -j 1": "(same output, one process)",
                            "amqpscope --no-validate": "(same frames, no inline findings)",
                            "dpkt+pamqp (no output)": "(decode only, writes nothing)"}  # fmt: skip
    if "tshark" not in skip:
        got = sum(len(line.split(b",")) for line in Path(tshark_out).read_bytes().splitlines() if line.strip())
        seen["tshark"] = f"{got} of {methods} method frames"
    Path(tshark_out).unlink()
    if "dpkt" not in skip:
        proc = subprocess.run(dpkt_count_cmd, capture_output=True, check=True)
        seen["dpkt+pamqp"] = f"{json.loads(proc.stderr.decode().strip().splitlines()[-1])['frames']} of " \
                             f"{truth['frames']} frames"  # fmt: skip
    rows: list[tuple[str, str, float, int, list[float], str]] = []
    cmds: list[list[str]] = []
    for (name, line, cmd, _out), (wall, rss, walls) in zip(plan, results, strict=True):
        rows.append((name, line, wall, rss, walls, seen[name]))
        cmds.append(cmd)

    print()
    print(
        f"{'tool':<24} {'best s':>8} {'CPU s':>7} {'frames/s':>10} {'peak RSS':>10}  runs (s)             frames seen"
    )
    for (name, _cmd, wall, peak, times, seen_by), cmd in zip(rows, cmds, strict=True):
        print(f"{name:<24} {wall:>8.2f} {CPU[tuple(cmd)]:>7.2f} {truth['frames'] / wall:>10,.0f} "
              f"{peak / 1024:>7.1f} MiB  {' '.join(f'{w:.2f}' for w in times):<20} {seen_by}")  # fmt: skip
    print()
    for ref in [i for i, row in enumerate(rows) if row[0].startswith("amqpscope")]:
        ours, ours_cpu = rows[ref][2], CPU[tuple(cmds[ref])]
        for (name, _cmd, wall, _rss, _walls, _seen), cmd in zip(rows, cmds, strict=True):
            if name.startswith("amqpscope"):
                continue
            cpu = CPU[tuple(cmd)]
            print(f"{name} / {rows[ref][0]}: wall {wall / ours:.2f}x, CPU {cpu / ours_cpu:.2f}x")
    print()
    for name, line, *_ in rows:
        print(f"  {name}: {line}")
    print(f"\namqpscope decode with its validation helper: peak RSS of both processes together "
          f"{tree_rss_peak(ours_cmd):.1f} MiB (sampled every 0.1 s)")

    if args.half:
        half = half_capture(path)
        h_wall, h_rss, _ = best([AMQPSCOPE, "decode", "--format", "jsonl", str(half)], args.repeat)
        print()
        print("memory against capture size (amqpscope decode --format jsonl > /dev/null):")
        print(f"  half ({half.stat().st_size / 2**20:.1f} MiB): {h_wall:.2f} s, peak RSS {h_rss / 1024:.1f} MiB")
        print(f"  full ({size / 2**20:.1f} MiB): {rows[0][2]:.2f} s, peak RSS {rows[0][3] / 1024:.1f} MiB")
        half.unlink()
    print(f"\nload average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

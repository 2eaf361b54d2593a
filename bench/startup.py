#!/usr/bin/env python3
"""How long amqpscope takes to start: ``amqpscope --help`` and ``amqpscope decode samples/hello.pcap``
against ``tshark -r samples/hello.pcap`` and a bare ``python -c pass``, in one run.

Each command runs ``--repeat`` times in rounds (every command once per round, so a slow spell of a
shared machine hits all alike); the best wall time and the CPU time (user + system) of that run are
kept. The spec tables cache is warmed first (a first run compiles the spec once, see
amqpscope/dissect/cache.py), and the bytecode is compiled, as a wheel install leaves it.

    python bench/startup.py [--repeat 15]

Target (issue #31): --help and the decode of hello.pcap <= 0.25 s.
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "hello.pcap"


def _run(cmd: list[str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    exe = str(Path(sys.executable).with_name("amqpscope"))
    compileall.compile_dir(str(ROOT / "amqpscope"), quiet=1)
    compileall.compile_dir(str(ROOT / "cli"), quiet=1)
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "amqpscope --help": [exe, "--help"],
        "amqpscope decode hello.pcap": [exe, "decode", str(SAMPLE)],
        "amqpscope decode -T text hello.pcap": [exe, "decode", "-T", "text", str(SAMPLE)],
    }
    if shutil.which("tshark"):
        commands["tshark -r hello.pcap"] = ["tshark", "-r", str(SAMPLE)]
    for cmd in commands.values():
        _run(cmd)  # warm: the spec tables cache, the page cache
    best: dict[str, tuple[float, float]] = {}
    for _ in range(args.repeat):
        for name, cmd in commands.items():
            wall, cpu = _run(cmd)
            if name not in best or wall < best[name][0]:
                best[name] = (wall, cpu)
    print(f"load average {os.getloadavg()[0]:.1f}, best of {args.repeat}")
    ref = best.get("tshark -r hello.pcap")
    for name, (wall, cpu) in best.items():
        ratio = f"  {ref[0] / wall:5.2f}x tshark" if ref and name.startswith("amqpscope") else ""
        target = "  (target <= 0.25 s)" if name in ("amqpscope --help", "amqpscope decode hello.pcap") else ""
        print(f"{name:38s} {wall:6.3f} s wall {cpu:6.3f} s CPU{ratio}{target}")


if __name__ == "__main__":
    main()

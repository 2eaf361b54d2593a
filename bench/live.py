"""Live capture at rate: the highest tcpreplay rate at which ``amqpscope sniff`` loses nothing, against
``tshark -i lo`` on the same replay, in the same run.

    python bench/live.py RECORDING.pcap [--rates 50000,100000,200000,max] [--modes validate,no-validate]
                         [--backend auto] [--together] [--buffer 256] [--json out.json]

For every rate, each capturer is run on its own replay (``--together``: all at once on one replay;
on a 2-core machine they then compete for the CPU): started, given time to open the interface, the
recording replayed onto ``lo`` with ``tcpreplay --pps=N -i lo``, then left to drain (until its output
stops growing for ``--quiet`` seconds) and stopped with SIGINT.

What counts as lossless: the capturer reports 0 dropped, it received every packet of the recording,
and (amqpscope) it decoded as many AMQP frames as decoding the recording file does. ``lag`` is how
long after the end of the replay the capturer still had work; ``decode rate`` the recording's
packets over (replay time + lag): above the replay rate it keeps up, below it the kernel buffer (``-B``)
absorbs the difference for as long as it is large enough.

The recording stays where it is (never committed; see bench/record_large.py). A copy with its server
port moved to a port nobody listens on (``tcprewrite --portmap``) is what is replayed, so that the
replay reaches no socket on this machine (a broker listening on the recorded port would answer it).
Needs root (tcpreplay injects on lo), tcpreplay, dumpcap/tshark. The load average is printed with
every row: on a shared machine other work competes for the same cores.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, str(ROOT / "tests" / "run_cli.py")]


def moved_copy(path: str, port: int, tmp: Path) -> tuple[str, int]:
    """The recording with server port ``port`` moved to a free one: (copy, new port)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    out = tmp / "replay.pcap"
    subprocess.run(["tcprewrite", f"--portmap={port}:{free}", "--fixcsum", f"--infile={path}", f"--outfile={out}"],
                   check=True, capture_output=True)  # fmt: skip
    return str(out), free


def file_facts(path: str, ports: list[int]) -> dict[str, Any]:
    """Packets and AMQP frames of decoding the recording itself (the reference)."""
    sys.path.insert(0, str(ROOT))
    from amqpscope.pipeline import Options, RunStats, jsonl_batches

    st = RunStats()
    frames = 0
    for chunk in jsonl_batches(path, None, Options(ports=frozenset(ports)), st):
        frames += chunk.count(b'"kind":"frame"')
    return {"packets": st.packets, "frames": frames}


def recording_filter(path: str) -> tuple[str, list[int]]:
    """A capture filter for the recording's server port (where its first SYN goes)."""
    out = subprocess.run(["tcpdump", "-nr", path, "-c", "1", "tcp[tcpflags] == tcp-syn"], capture_output=True,
                         text=True).stdout  # fmt: skip
    m = re.search(r" > [\d.]+\.(\d+):", out)
    port = int(m.group(1)) if m else 5672
    return f"tcp port {port}", [port]


class Capturer:
    """A capture process whose output file is watched for growth."""

    def __init__(self, name: str, cmd: list[str], out: Path, ready: str) -> None:
        self.name, self.cmd, self.out_path = name, cmd, out
        self._out = open(out, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(cmd, stdout=self._out, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd="/")
        self.err: list[str] = []
        self._ready = threading.Event()
        self._marker = ready
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode(errors="replace")
            self.err.append(line)
            if self._marker in line:
                self._ready.set()

    def wait_ready(self, timeout: float = 30) -> None:
        if not self._ready.wait(timeout):
            raise SystemExit(f"{self.name} did not start: {''.join(self.err)}")

    def size(self) -> int:
        try:
            return self.out_path.stat().st_size
        except OSError:
            return 0

    def stop(self) -> float:
        t = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._out.close()
        time.sleep(0.2)
        return time.monotonic() - t

    @property
    def stderr(self) -> str:
        return "".join(self.err)


def drain(caps: list[Capturer], quiet: float, t_end: float) -> dict[str, float]:
    """Wait until each capturer's output stops growing for ``quiet`` s; its lag after the replay."""
    last = {c.name: (c.size(), time.monotonic()) for c in caps}
    lag: dict[str, float] = {}
    while len(lag) < len(caps):
        time.sleep(0.1)
        now = time.monotonic()
        for c in caps:
            if c.name in lag:
                continue
            size = c.size()
            if size != last[c.name][0]:
                last[c.name] = (size, now)
            elif now - last[c.name][1] >= quiet:
                lag[c.name] = max(0.0, last[c.name][1] - t_end)
    return lag


def replay(path: str, rate: str) -> dict[str, float]:
    cmd = ["tcpreplay", "-i", "lo", "--topspeed" if rate == "max" else f"--pps={rate}", path]
    t0 = time.monotonic()
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    took = time.monotonic() - t0
    m = re.search(r"Rated: ([\d.]+) Bps, ([\d.]+) Mbps, ([\d.]+) pps", res.stdout)
    sent = re.search(r"Actual: (\d+) packets", res.stdout)
    return {
        "seconds": took,
        "mbps": float(m.group(2)) if m else 0.0,
        "pps": float(m.group(3)) if m else 0.0,
        "sent": int(sent.group(1)) if sent else 0,
    }


_SUMMARY = re.compile(r"(\d+) packets captured, (\d+) decoded, (\d+) AMQP frames.*?; (\d+) dropped \(([^)]*)\)")


def sniff_result(c: Capturer) -> dict[str, Any]:
    m = _SUMMARY.search(c.stderr)
    if not m:
        return {"error": c.stderr.strip()[-300:]}
    captured, decoded, frames, dropped = map(int, m.groups()[:4])
    return {"captured": captured, "decoded": decoded, "frames": frames, "dropped": dropped, "drops": m.group(5)}


def tshark_result(c: Capturer) -> dict[str, Any]:
    err = c.stderr
    captured = re.search(r"(\d+) packets? captured", err)
    dropped = re.search(r"(\d+) packets? dropped", err)
    text = c.out_path.read_text(errors="replace")
    frames = None
    rows = re.findall(r"\|\s*[\d.]+\s*<>\s*(?:[\d.]+|Dur)\s*\|\s*(\d+)\s*\|", text)
    if rows:
        frames = int(rows[-1])
    return {
        "captured": int(captured.group(1)) if captured else None,
        "dropped": int(dropped.group(1)) if dropped else 0,
        "frames": frames,
    }


def main() -> None:
    from native_build import ensure_release_core

    ensure_release_core()  # the figures are the release build's (docs/build.md)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recording")
    ap.add_argument("--rates", default="50000,100000,150000,200000,max")
    ap.add_argument("--modes", default="validate,no-validate", help="amqpscope runs: validate, no-validate")
    ap.add_argument("--backend", default="auto", help="sniff --capture-backend")
    ap.add_argument("--buffer", type=int, default=256, help="kernel buffer in MiB (-B), for sniff and tshark")
    ap.add_argument("--no-tshark", action="store_true")
    ap.add_argument("--together", action="store_true", help="all capturers on one replay (they share the CPU)")
    ap.add_argument("--quiet", type=float, default=3.0, help="seconds without output growth that end a drain")
    ap.add_argument("--json", default=None, help="also write the results as JSON to this file")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("tcpreplay needs root")
    tmp = Path(tempfile.mkdtemp(prefix="amqpscope-live-bench-"))
    _, (port,) = recording_filter(args.recording)
    recording, free = moved_copy(args.recording, port, tmp)
    bpf, ports = f"tcp port {free}", [free]
    ref = file_facts(recording, ports)
    print(f"recording {args.recording} (port {port} moved to {free}): {ref['packets']} packets, {ref['frames']} "
          f"AMQP frames; filter {bpf!r}")  # fmt: skip
    modes = [m for m in args.modes.split(",") if m]
    results: list[dict[str, Any]] = []

    def make(kind: str) -> Capturer:
        out = tmp / f"{kind}.out"
        if kind == "tshark":
            cmd = ["tshark", "-i", "lo", "-B", str(args.buffer), "-f", bpf, "-q",
                   *[a for p in ports for a in ("-d", f"tcp.port=={p},amqp")],
                   "-z", "io,stat,0,COUNT(amqp.type)amqp.type"]  # fmt: skip
            return Capturer(kind, cmd, out, "Capturing on")
        extra = ["--no-validate"] if kind == "no-validate" else []
        cmd = [*CLI, "sniff", "-i", "lo", "-f", bpf, *[a for p in ports for a in ("--port", str(p))],
               "-T", "jsonl", "-B", str(args.buffer), "--capture-backend", args.backend, *extra]  # fmt: skip
        return Capturer(f"amqpscope {kind}", cmd, out, "capturing on")

    kinds = [*modes, *([] if args.no_tshark else ["tshark"])]
    for rate in args.rates.split(","):
        groups = [kinds] if args.together else [[k] for k in kinds]
        for group in groups:
            caps = [make(k) for k in group]
            for c in caps:
                c.wait_ready()
            time.sleep(1.0)
            load0 = os.getloadavg()[0]
            rep = replay(recording, rate)
            t_end = time.monotonic()
            lags = drain(caps, args.quiet, t_end)
            for c in caps:
                stop_s = c.stop()
                res = tshark_result(c) if c.name == "tshark" else sniff_result(c)
                # tshark -q prints only at the end: its work after the replay shows as its stop time
                lag = lags[c.name] + stop_s if c.name == "tshark" else lags[c.name]
                total = rep["seconds"] + lag
                row = {"rate": rate, "capturer": c.name, "replay": rep, "lag_s": round(lag, 2), "load": load0,
                       "decode_pps": round(ref["packets"] / total) if total else None, **res}  # fmt: skip
                got_all = res.get("captured") == ref["packets"] if c.name == "tshark" else res.get("decoded") == ref["packets"]
                row["lossless"] = bool(res.get("dropped") == 0 and got_all and res.get("frames") == ref["frames"])
                results.append(row)
                print(f"rate {rate:>7} ({rep['pps']:>9,.0f} pps, {rep['mbps']:6.1f} Mbit/s, {rep['seconds']:5.1f} s) "
                      f"{c.name:<24} captured {res.get('captured')} frames {res.get('frames')} dropped "
                      f"{res.get('dropped')} ({res.get('drops', '')}) lag {lag:5.1f} s, decode {row['decode_pps']:,} "
                      f"pkt/s -> {'LOSSLESS' if row['lossless'] else 'LOSS'} (load {load0:.1f})", flush=True)  # fmt: skip
    best: dict[str, Any] = {}
    for r in results:
        if r["lossless"]:
            cur = best.get(r["capturer"])
            if cur is None or r["replay"]["pps"] > cur["replay"]["pps"]:
                best[r["capturer"]] = r
    print("\nhighest lossless replay rate:")
    for name in {r["capturer"] for r in results}:
        b = best.get(name)
        print(f"  {name:<24} " + ("none" if b is None else
              f"{b['replay']['pps']:,.0f} packets/s ({b['replay']['mbps']:.1f} Mbit/s), lag {b['lag_s']} s"))  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps({"reference": ref, "results": results}, indent=2))
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

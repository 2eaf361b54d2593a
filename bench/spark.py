#!/usr/bin/env python3
"""Throughput of ``amqpscope batch`` on local[1] and local[2] against one process, same run.

The archive is N copies (symlinks) of one capture: bench/data/large.pcap when it exists (recorded
by bench/record_large.py), otherwise every shared capture. For each validation setting asked for
(``--validate off,on``) this measures, one after the other:

* one process: ``amqpscope decode --format parquet -o DIR`` (the job's tables, written by the same
  worker code in one process, no Spark), which decodes slices on a thread per core; the same with
  ``--threads 1`` (one slice at a time, encoded on a writer thread beside it); and the same on one
  core (``taskset -c 0``: one thread, decoding and encoding), the baseline a second core is
  measured against;
* ``amqpscope decode --format jsonl`` with the same validation setting, JSON lines to /dev/null;
  and the same with ``--ledger``, the records the tables hold (the ledger table's among them);
* the batch job on ``local[1]`` and ``local[2]``, each in a fresh process (its own JVM). Spark's
  start-up (session, plus starting the Python workers with amqpscope imported and the spec
  compiled: once per worker process, whatever the archive) is measured and reported separately
  from the job.

Throughput is capture bytes per second (start-up excluded for the Spark jobs; shown included too).
The machine this runs on may be shared, so CPU seconds are reported too (of every process of a
variant: for Spark the driver, the JVM and the Python workers, read from /proc), which load does
not inflate as it does wall time.
Usage: python bench/spark.py [--copies 16] [--validate off,on] [--repeat 1] [--capture FILE]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from native_build import ensure_release_core  # noqa: E402

ensure_release_core()  # before the core is loaded: the figures are the release build's (docs/build.md)

LARGE = ROOT / "bench" / "data" / "large.pcap"
SHARED = ROOT.parent / "shared" / "captures"


def make_archive(sources: list[Path], copies: int, where: Path) -> list[Path]:
    files = []
    for k in range(copies):
        for src in sources:
            link = where / f"copy{k:03d}_{src.name}"
            link.symlink_to(src.resolve())
            files.append(link)
    return files


def cli_run(args: list[str], stdout: Any = subprocess.DEVNULL, pin: bool = False) -> dict[str, Any]:
    """``amqpscope ARGS`` in a child process: wall time and the child's CPU seconds. ``pin``: on
    one core (``taskset -c 0``), its threads included."""
    exe = Path(sys.executable).with_name("amqpscope")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-c", "from amqpscope.cli.main import main; main()"]
    if pin:
        cmd = ["taskset", "-c", "0", *cmd]
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run([*cmd, *args], stdout=stdout, stderr=subprocess.PIPE, text=True)
    d = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"amqpscope {' '.join(args[:3])} failed: {proc.stderr[-2000:]}")
    return {"seconds": time.perf_counter() - t, "cpu": d.ru_utime + d.ru_stime - c.ru_utime - c.ru_stime}


def cli_parquet(files: list[Path], out: Path, validate: bool, pin: bool = False, threads: int | None = None
                ) -> dict[str, Any]:  # fmt: skip
    if out.exists():
        shutil.rmtree(out)
    flags = ([] if validate else ["--no-validate"]) + ([] if threads is None else ["--threads", str(threads)])
    return cli_run(["decode", "--format", "parquet", "-o", str(out), *flags, *map(str, files)], pin=pin)


def cli_jsonl(files: list[Path], validate: bool, ledger: bool = False) -> dict[str, Any]:
    flags = ([] if validate else ["--no-validate"]) + (["--ledger"] if ledger else [])
    return cli_run(["decode", "--format", "jsonl", "--no-progress", *flags, *map(str, files)])


def spark_child(master: str, archive: str, out: str, driver_memory: str, validate: bool) -> dict[str, Any]:
    """Runs in its own process: one JVM per master, so start-up is measured cold each time."""
    t0 = time.perf_counter()
    from amqpscope.spark.job import JobOptions, get_session, run_job

    spark = get_session(master, driver_memory=driver_memory)
    t1 = time.perf_counter()
    cores = int(spark.sparkContext.defaultParallelism)
    # start the Python workers and import the decoder in them, as the job's first tasks would
    spark.range(0, cores, 1, cores).mapInArrow(_warm, "id long").collect()
    t2, c2 = time.perf_counter(), tree_cpu()
    result = run_job(JobOptions(inputs=(archive,), out=out, validate=validate), spark)
    t3, c3 = time.perf_counter(), tree_cpu()  # the JVM and the Python workers are still alive here
    spark.stop()
    roles = {role: c3[role] - c2[role] for role in c3}
    return {"master": master, "session_s": t1 - t0, "warmup_s": t2 - t1, "job_s": t3 - t2, "rows": result.rows,
            "slices": result.slices, "tasks": result.partitions, "cpu": sum(roles.values()), "roles": roles}  # fmt: skip


def spark_run(master: str, tmpd: Path, driver_memory: str, validate: bool) -> dict[str, Any]:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    out = tempfile.mkdtemp(prefix=f"out-{master}-", dir=tmpd)
    proc = subprocess.run([sys.executable, __file__, "--child", master, "--archive", str(tmpd / "archive"),
                           "--out", out, "--driver-memory", driver_memory, *([] if validate else ["--no-validate"])],
                          capture_output=True, text=True, env=env)  # fmt: skip
    shutil.rmtree(out, ignore_errors=True)
    if proc.returncode != 0:
        sys.exit(f"spark {master} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def best(runs: int, measure: Callable[[], dict[str, Any]], key: str = "seconds") -> dict[str, Any]:
    """The fastest of ``runs`` measurements: the least disturbed by whatever else the host runs."""
    return min((measure() for _ in range(max(1, runs))), key=lambda r: r[key])


def tree_cpu() -> dict[str, float]:
    """CPU seconds (user + system) of this process and all its live descendants, from /proc, by
    role (``driver``, ``jvm``, ``workers``): the JVM and the Python workers are not children that
    Python waits for."""
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, float, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            name, rest = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)
            fields = rest.split()
        except OSError:
            continue
        stats[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick, name.split("(", 1)[1])
    mine, grew = {os.getpid()}, True
    while grew:
        grew = False
        for pid, (ppid, _cpu, _name) in stats.items():
            if ppid in mine and pid not in mine:
                mine.add(pid)
                grew = True
    roles = {"driver": 0.0, "jvm": 0.0, "workers": 0.0}
    for p in mine:
        if p in stats:
            role = "driver" if p == os.getpid() else "jvm" if stats[p][2] == "java" else "workers"
            roles[role] += stats[p][1]
    return roles


def _warm_worker() -> None:
    """What a Python worker does once, whatever its tasks: import the decoder and pyarrow's
    conversions (pa.array imports pandas, ~0.2 s), compile the spec and the validation tables."""
    import pyarrow as pa

    from amqpscope.dissect.codec import get_codec
    from amqpscope.spark import worker  # noqa: F401  (imports the decoder)

    pa.array([1])
    codec = get_codec()
    _ = codec.tables, codec.validation


def _warm(batches: Any) -> Any:
    _warm_worker()
    yield from batches


def load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def measure(a: argparse.Namespace, files: list[Path], tmpd: Path, mb: float, validate: bool) -> None:
    setting = "on" if validate else "off"
    print(f"\n== validation {setting} (load average {load()})")
    rows: list[tuple[str, float, float, str]] = []
    one = best(a.repeat, lambda: cli_parquet(files, tmpd / "parquet", validate))
    rows.append(("one process: decode --format parquet", one["seconds"], one["cpu"], "a thread per core"))
    single = best(a.repeat, lambda: cli_parquet(files, tmpd / "parquet", validate, threads=1))
    rows.append(("one process, --threads 1", single["seconds"], single["cpu"], "and its writer thread"))
    pinned = best(a.repeat, lambda: cli_parquet(files, tmpd / "parquet", validate, pin=True))
    rows.append(("one process on one core", pinned["seconds"], pinned["cpu"], "taskset -c 0: one thread"))
    jsonl = best(a.repeat, lambda: cli_jsonl(files, validate))
    rows.append(("decode --format jsonl", jsonl["seconds"], jsonl["cpu"], "to /dev/null"))
    # the tables hold the ledger's records; the JSON lines only with --ledger
    same = best(a.repeat, lambda: cli_jsonl(files, validate, ledger=True))
    rows.append(("decode --format jsonl --ledger", same["seconds"], same["cpu"], "the tables' records"))
    spark_runs = []
    for master in a.masters.split(","):
        run = best(a.repeat, functools.partial(spark_run, master, tmpd, a.driver_memory, validate), key="job_s")
        spark_runs.append(run)
        cpu_by = ", ".join(f"{role} {secs:.1f}" for role, secs in run["roles"].items())
        rows.append((f"batch job {master}", run["job_s"], run["cpu"],
                     f"{run['slices']} slices, {run['tasks']} tasks; CPU s: {cpu_by}"))  # fmt: skip
    base = one["seconds"]
    print(f"{'variant':<40}{'seconds':>9}{'MB/s':>8}{'x one':>7}{'CPU s':>8}{'CPU s/MB':>10}{'cores':>7}  notes")
    for name, secs, cpu, note in rows:
        print(f"{name:<40}{secs:>9.1f}{mb / secs:>8.1f}{base / secs:>7.2f}{cpu:>8.1f}{cpu / mb:>10.4f}"
              f"{cpu / secs:>7.2f}  {note}")  # fmt: skip
    print("(batch jobs: Spark's start-up excluded; 'x one' is throughput over the one-process parquet decode;")
    print(" 'cores': CPU s / seconds, the cores a variant kept busy: with --threads 1 the one process encodes")
    print(" Parquet on a second thread; a Spark task, and each of the one process's threads, encodes on the")
    print(" thread that decodes)")
    for run in spark_runs:
        start = run["session_s"] + run["warmup_s"]
        print(f"spark start-up {run['master']}: {start:.1f} s (session {run['session_s']:.1f} s, python workers "
              f"{run['warmup_s']:.1f} s); job incl. start-up: {mb / (run['job_s'] + start):.1f} MB/s, "
              f"{base / (run['job_s'] + start):.2f}x one process")  # fmt: skip
    by = {r["master"]: r for r in spark_runs}
    if "local[2]" in by:
        job = by["local[2]"]["job_s"]
        print(f"local[2] steady state: {mb / job:.1f} MB/s (target >= 100), {base / job:.2f}x one process "
              f"(target >= 1.6x), {pinned['seconds'] / job:.2f}x one process on one core"
              + (f", {by['local[1]']['job_s'] / job:.2f}x local[1]" if "local[1]" in by else ""))
    print(f"decode --format parquet / --format jsonl (validation {setting}): {one['seconds'] / jsonl['seconds']:.2f}x "
          f"the time (target <= 1.3x), {one['cpu'] / jsonl['cpu']:.2f}x the CPU; with --threads 1 "
          f"{single['seconds'] / jsonl['seconds']:.2f}x the time")  # fmt: skip
    print(f"  against --format jsonl --ledger (the same records as the tables): {one['seconds'] / same['seconds']:.2f}x "
          f"the time, {one['cpu'] / same['cpu']:.2f}x the CPU")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--capture", type=Path, default=None, help="capture to copy (default: bench/data/large.pcap)")
    p.add_argument("--copies", type=int, default=16)
    p.add_argument("--masters", default="local[1],local[2]")
    p.add_argument("--driver-memory", default="1g")
    p.add_argument("--validate", default="off,on", help="validation settings to measure: off, on or off,on")
    p.add_argument("--repeat", type=int, default=1,
                   help="runs of each variant, the fastest kept (this machine's speed drifts by 20%% and more)")  # fmt: skip
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--archive", default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)
    p.add_argument("--no-validate", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        print(json.dumps(spark_child(a.child, a.archive, a.out, a.driver_memory, not a.no_validate)))
        return

    if a.capture is not None:
        sources, what = [a.capture], str(a.capture)
    elif LARGE.exists():
        sources, what = [LARGE], "bench/data/large.pcap"
    else:
        sources = sorted(SHARED.glob("*.pcap"))
        what = f"the {len(sources)} shared captures (bench/data/large.pcap not recorded)"
    with tempfile.TemporaryDirectory(prefix="amqpscope-bench-") as tmp:
        tmpd = Path(tmp)
        (tmpd / "archive").mkdir()
        files = make_archive(sources, a.copies, tmpd / "archive")
        mb = sum(f.stat().st_size for f in files) / 1e6
        print(f"archive: {a.copies} copies of {what}: {len(files)} files, {mb:.1f} MB; fastest of {a.repeat} "
              f"run(s) per variant; machine: {os.cpu_count()} cores, load average {load()} at start")  # fmt: skip
        for setting in a.validate.split(","):
            measure(a, files, tmpd, mb, setting.strip() == "on")
        print(f"load average {load()} at end")


if __name__ == "__main__":
    main()

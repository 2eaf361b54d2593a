#!/usr/bin/env python3
"""Throughput of ``amqpscope batch`` on local[1] and local[2] against single-process decode.

The archive is N copies (symlinks) of one capture: bench/data/large.pcap when it exists (recorded
by bench/record_large.py), otherwise every shared capture. In the same run this measures:

* single-process decode: ``decode_packets`` with the validator stage, the work each executor does
  per capture, and nothing else (no output);
* ``amqpscope decode --format jsonl -j 1`` (validation on, in the same process; JSONL to
  /dev/null): the command line's single-process decode with its output;
* the worker path without Spark: what each task runs per capture (``worker.write_slice``: decode,
  validate, build the Arrow tables, write the Parquet files), one capture after the other;
* the batch job on ``local[1]`` and ``local[2]``, each in a fresh process (its own JVM). Spark's
  start-up (session, plus starting the Python workers with amqpscope imported, pyarrow's pandas
  shim loaded and the spec compiled: once per worker process, whatever the archive) is measured
  and reported separately from the job.

Throughput is capture bytes per second of the job (start-up excluded, and shown included too).
The machine this runs on may be shared, so CPU seconds are reported too (the job's: the driver,
the JVM and the Python workers, read from /proc), which load does not inflate as it does wall time.
Usage: python bench/spark.py [--copies 4] [--repeat 2] [--capture FILE] [--masters local[1],local[2]]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import resource
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


def single_decode(files: list[Path]) -> dict[str, Any]:
    from amqpscope.capture import read_packets
    from amqpscope.dissect.codec import get_codec
    from amqpscope.pipeline import Options, decode_packets
    from amqpscope.validate.validator import Validator

    codec = get_codec()
    validator = Validator(codec.spec)
    events = 0
    t, c = time.perf_counter(), time.process_time()
    for f in files:
        for _ev in decode_packets(read_packets(f), codec, Options(keep_bodies=False), stages=(validator.stage,)):
            events += 1
    return {"seconds": time.perf_counter() - t, "cpu": time.process_time() - c, "events": events}


def cli_decode(files: list[Path]) -> dict[str, Any]:
    """``amqpscope decode --format jsonl -j 1`` over the archive: validation on, as by default, but
    in one process (by default a second core validates beside it: not a single-process decode)."""
    exe = Path(sys.executable).with_name("amqpscope")
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    with open(os.devnull, "w") as sink:
        proc = subprocess.run([str(exe), "decode", "--format", "jsonl", "-j", "1", "--no-progress",
                               *map(str, files)], stdout=sink, stderr=subprocess.PIPE, text=True)  # fmt: skip
    if proc.returncode != 0:
        sys.exit(f"amqpscope decode failed: {proc.stderr[-2000:]}")
    d = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"seconds": time.perf_counter() - t, "cpu": d.ru_utime + d.ru_stime - c.ru_utime - c.ru_stime}


def single_tables(files: list[Path], out: Path) -> dict[str, Any]:
    """The job's worker path in this process, without Spark: ``write_slice`` (decode, validate,
    build the Arrow tables, write the Parquet files) for every capture, one after the other."""
    from amqpscope.spark.inputs import list_inputs, open_output
    from amqpscope.spark.worker import JobConfig, Slice, write_slice

    caps = list_inputs([str(f) for f in files])
    slices = tuple(Slice(c.uri, c.capture_id, c.size) for c in caps)
    config = JobConfig(partitions=(slices,))
    fs, root = open_output(str(out))
    _warm_worker()  # as the Spark runs' start-up does for their Python workers
    rows = 0
    t, c = time.perf_counter(), time.process_time()
    for sl in slices:
        rows += sum(write_slice(sl, config, fs, root, 0).column("rows").to_pylist())
    return {"seconds": time.perf_counter() - t, "cpu": time.process_time() - c, "rows": rows}


def spark_child(master: str, archive: str, out: str, driver_memory: str) -> dict[str, Any]:
    """Runs in its own process: one JVM per master, so start-up is measured cold each time."""
    t0 = time.perf_counter()
    from amqpscope.spark.job import JobOptions, get_session, run_job

    spark = get_session(master, driver_memory=driver_memory)
    t1 = time.perf_counter()
    cores = int(spark.sparkContext.defaultParallelism)
    # start the Python workers and import the decoder in them, as the job's first tasks would
    spark.range(0, cores, 1, cores).mapInArrow(_warm, "id long").collect()
    t2, c2 = time.perf_counter(), tree_cpu()
    result = run_job(JobOptions(inputs=(archive,), out=out), spark)
    t3, c3 = time.perf_counter(), tree_cpu()  # the JVM and the Python workers are still alive here
    spark.stop()
    roles = {role: c3[role] - c2[role] for role in c3}
    return {"master": master, "session_s": t1 - t0, "warmup_s": t2 - t1, "job_s": t3 - t2, "rows": result.rows,
            "slices": result.slices, "tasks": result.partitions, "cpu": sum(roles.values()), "roles": roles}  # fmt: skip


def spark_run(master: str, tmpd: Path, driver_memory: str) -> dict[str, Any]:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    out = tempfile.mkdtemp(prefix=f"out-{master}-", dir=tmpd)
    proc = subprocess.run([sys.executable, __file__, "--child", master, "--archive", str(tmpd / "archive"),
                           "--out", out, "--driver-memory", driver_memory],
                          capture_output=True, text=True, env=env)  # fmt: skip
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
    conversions (pa.array imports pandas, ~0.2 s), compile the spec and the validator."""
    import pyarrow as pa

    from amqpscope.spark import worker

    pa.array([1])
    worker._validator(None)


def _warm(batches: Any) -> Any:
    _warm_worker()
    yield from batches


def load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--capture", type=Path, default=None, help="capture to copy (default: bench/data/large.pcap)")
    p.add_argument("--copies", type=int, default=4)
    p.add_argument("--masters", default="local[1],local[2]")
    p.add_argument("--driver-memory", default="1g")
    p.add_argument("--no-tables-baseline", action="store_true", help="skip the worker path without Spark")
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs of each variant, the fastest kept (this machine's speed drifts by 20%% and more)",
    )
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--archive", default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        print(json.dumps(spark_child(a.child, a.archive, a.out, a.driver_memory)))
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
        size = sum(f.stat().st_size for f in files)
        mb = size / 1e6
        print(
            f"archive: {a.copies} copies of {what}: {len(files)} files, {mb:.1f} MB; "
            f"fastest of {a.repeat} run(s) per variant"
        )
        print(f"machine: {os.cpu_count()} cores, load average {load()} at start")
        rows: list[tuple[str, float, str, float]] = []

        single = best(a.repeat, lambda: single_decode(files))
        rows.append(("single-process decode (+validate)", single["seconds"], f"{single['events']} events",
                     single["cpu"]))  # fmt: skip
        cli = best(a.repeat, lambda: cli_decode(files))
        rows.append(("amqpscope decode --format jsonl (1 process)", cli["seconds"], "JSONL to /dev/null", cli["cpu"]))
        if not a.no_tables_baseline:
            (tmpd / "tables").mkdir()
            tables = best(a.repeat, lambda: single_tables(files, tmpd / "tables"))
            rows.append(("worker path without Spark (1 process)", tables["seconds"], f"{tables['rows']} rows",
                         tables["cpu"]))  # fmt: skip
        spark_runs = []
        for master in a.masters.split(","):
            run = best(a.repeat, functools.partial(spark_run, master, tmpd, a.driver_memory), key="job_s")
            spark_runs.append(run)
            total_rows = sum(run["rows"].values())
            cpu_by = ", ".join(f"{role} {secs:.1f}" for role, secs in run["roles"].items())
            rows.append((f"batch job {master}", run["job_s"], f"{total_rows} rows, {run['slices']} slices, "
                         f"{run['tasks']} tasks; CPU s: {cpu_by}", run["cpu"]))  # fmt: skip

        base = single["seconds"]
        print(f"{'variant':<44}{'seconds':>9}{'MB/s':>9}{'x single':>10}{'CPU s':>8}{'CPU s/MB':>10}  notes")
        for name, secs, note, cpu in rows:
            print(f"{name:<44}{secs:>9.1f}{mb / secs:>9.1f}{base / secs:>10.2f}{cpu:>8.1f}{cpu / mb:>10.3f}  {note}")
        print("(batch job rows: Spark's start-up excluded; 'x single' is throughput over single-process decode)")
        for run in spark_runs:
            start = run["session_s"] + run["warmup_s"]
            print(f"spark start-up {run['master']}: {start:.1f} s (session {run['session_s']:.1f} s, "
                  f"python workers {run['warmup_s']:.1f} s); job incl. start-up: {mb / (run['job_s'] + start):.1f} "
                  f"MB/s, {base / (run['job_s'] + start):.2f}x single-process decode")  # fmt: skip
        by = {r["master"]: r for r in spark_runs}
        if "local[2]" in by:
            job = by["local[2]"]["job_s"]
            print(f"local[2] (start-up excluded) vs single-process decode (no output): {base / job:.2f}x "
                  f"(target >= 1.6x); vs amqpscope decode --format jsonl: {cli['seconds'] / job:.2f}x"
                  + (f"; vs the worker path without Spark: {tables['seconds'] / job:.2f}x" if not a.no_tables_baseline
                     else ""))  # fmt: skip
            if "local[1]" in by:
                print(f"local[2] vs local[1]: {by['local[1]']['job_s'] / job:.2f}x")
        if "local[1]" in by:
            cpu = by["local[1]"]["cpu"]
            print(f"CPU per MB: single-process decode {single['cpu'] / mb:.3f} s, amqpscope decode --format jsonl "
                  f"{cli['cpu'] / mb:.3f} s"
                  + (f", worker path without Spark {tables['cpu'] / mb:.3f} s" if not a.no_tables_baseline else "")
                  + f", batch job local[1] {cpu / mb:.3f} s (all processes of the job); on 2 idle cores local[2] "
                  f"could reach {2 * single['cpu'] / cpu:.2f}x single-process decode, "
                  f"{2 * cli['cpu'] / cpu:.2f}x amqpscope decode --format jsonl")  # fmt: skip
        print(f"load average {load()} at end")


if __name__ == "__main__":
    main()

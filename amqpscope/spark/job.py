"""The driver of ``amqpscope batch``: captures in, Parquet datasets out, on any Spark.

Runs three ways, all through ``run_job``:

* ``amqpscope batch INPUT... --out DIR`` starts an embedded local Spark (``local[*]``);
* ``python -m amqpscope.spark.job INPUT... --out DIR [--master URL]`` is the same without click;
* ``spark-submit [--master URL] amqpscope/spark/job.py INPUT... --out DIR`` uses the session that
  spark-submit configured (cluster, memory, shipped code).

The driver only lists inputs and plans: it never reads a capture. The plan is a tuple of
partitions, each a tuple of capture slices (``worker.Slice``); ``spark.range(P)`` with one id per
partition is mapped by ``worker.run_partitions`` in one ``mapInArrow`` stage whose tasks decode
their slices and write the Parquet files of every table into a staging directory. The driver
collects the manifest of those files and commits them: every table is partitioned by
``capture_date``/``capture_id``, and each partition this run wrote replaces the partition of the
same name (dynamic partition overwrite), so running again over a capture replaces exactly its
rows; partitions of a rerun capture that the new run did not write (a capture that is no longer
truncated has no ``errors`` rows) are deleted afterwards.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from amqpscope.spark import COMPRESSIONS, DEFAULT_COMPRESSION
from amqpscope.spark.inputs import Capture, InputError, is_local, list_inputs, parse_size
from amqpscope.spark.schema import PARTITION_COLUMNS, SCHEMA_VERSION, TABLES, describe, fingerprint, spark_schema
from amqpscope.spark.worker import MANIFEST_SCHEMA, JobConfig, Slice, run_partitions, table_names

MANIFEST = "_amqpscope.json"  # beside the tables; the leading "_" hides it from Spark and globs
DEFAULT_SPLIT_BYTES = 64 << 20
PARTITIONS_PER_CORE = 4  # tasks per core: enough to even out captures of different sizes

# Everything but errors from Spark's loggers goes (log4j2 properties); see spark-notes §6.
_LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.nativecode.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativecode.level = error
logger.pygw.name = org.apache.spark.api.python.PythonGatewayServer
logger.pygw.level = error
"""


class JobError(Exception):
    """A problem with the job as a whole (inputs, output directory): one line for the user."""


@dataclass(frozen=True)
class JobOptions:
    inputs: tuple[str, ...]
    out: str
    master: str | None = None  # None: the active/spark-submit session, else local[*]
    spec: str | None = None
    ports: frozenset[int] = frozenset({5672})
    split_bytes: int = DEFAULT_SPLIT_BYTES  # captures above this may be split by TCP flow
    partitions: int | None = None  # Spark tasks; default PARTITIONS_PER_CORE per core
    driver_memory: str | None = None
    conf: tuple[tuple[str, str], ...] = ()
    tls_keylog: str = field(default="", repr=False)  # NSS key log text, shipped to every task
    validate: bool = True  # the core validator's findings (in the same decode)
    diagnose: bool = False  # also the diagnoses table (the Python diagnoser over every event: slow)
    compression: str = DEFAULT_COMPRESSION  # of the Parquet files (COMPRESSIONS)


@dataclass
class JobResult:
    out: str
    captures: int
    slices: int
    partitions: int
    rows: dict[str, int] = field(default_factory=dict)  # table -> rows written this run
    errors: list[tuple[str, str]] = field(default_factory=list)  # (capture, message)
    exit_code: int = 0  # the CLI's exit code of the first damaged capture (0: none)
    deleted: int = 0  # stale partitions removed
    seconds: float = 0.0


# --- session --------------------------------------------------------------------------------------


def local_master(master: str | None) -> bool:
    return master is None or master.startswith("local")


def get_session(master: str | None = None, driver_memory: str | None = None,
                conf: Sequence[tuple[str, str]] = (), app: str = "amqpscope-batch") -> Any:  # fmt: skip
    """The active session if there is one (spark-submit, notebooks, tests), else a new one.

    A new local session binds to loopback only and stays quiet; the Python workers run this
    interpreter, so they see the same amqpscope, pyarrow and pandas as the driver.
    """
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app)
    if master is None and "spark.master" not in dict(conf) and not _submitted():
        master = "local[*]"
    if master is not None:
        builder = builder.master(master)
    if local_master(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = (builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
                   .config("spark.ui.enabled", "false"))  # fmt: skip
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    # pyarrow imports numpy, whose OpenBLAS starts a thread per core in every Python worker that
    # spins ~0.1 CPU-s at start; nothing in a task does linear algebra
    builder = builder.config("spark.executorEnv.OPENBLAS_NUM_THREADS", "1")
    builder = builder.config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{_log4j_file()}")
    if driver_memory:
        builder = builder.config("spark.driver.memory", driver_memory)
    for key, value in conf:
        builder = builder.config(key, value)
    return builder.getOrCreate()


def _submitted() -> bool:
    """Started by spark-submit (its JVM is already up): the master and settings come from there."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def _log4j_file() -> str:
    path = os.path.join(tempfile.gettempdir(), f"amqpscope-log4j2-{os.getuid()}.properties")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(_LOG4J)
        os.replace(tmp, path)
    return path


# --- planning (pure) ------------------------------------------------------------------------------


def plan_slices(captures: Sequence[Capture], parallelism: int, split_bytes: int) -> list[Slice]:
    """Every capture as one slice, or as several when it alone would keep one core busy long
    after the others are done: above ``split_bytes`` and above one core's share of the input."""
    total = sum(c.size or 0 for c in captures)
    target = max(split_bytes, total / parallelism)
    out: list[Slice] = []
    for cap in captures:
        size = cap.size or 0
        count = max(1, min(parallelism, math.ceil(size / target))) if size > target else 1
        out += [Slice(cap.uri, cap.capture_id, cap.size, i, count) for i in range(count)]
    return out


def pack(slices: Sequence[Slice], partitions: int) -> tuple[tuple[Slice, ...], ...]:
    """Slices into at most ``partitions`` bins of even cost: heaviest first into the lightest bin
    (LPT); the bins keep the input order inside, and empty bins are dropped."""
    n = max(1, min(partitions, len(slices)))
    bins: list[list[tuple[int, Slice]]] = [[] for _ in range(n)]
    load = [0.0] * n
    for i, sl in sorted(enumerate(slices), key=lambda p: (-p[1].cost, p[0])):
        k = min(range(n), key=lambda j: (load[j], j))
        bins[k].append((i, sl))
        load[k] += sl.cost + 1  # +1: a task per tiny capture is not free either
    return tuple(tuple(sl for _, sl in sorted(b)) for b in bins if b)


# --- running --------------------------------------------------------------------------------------


def run_job(opts: JobOptions, spark: Any = None) -> JobResult:
    """Decode every input capture on Spark and write the datasets under ``opts.out``."""
    started = time.perf_counter()
    spark = spark or get_session(opts.master, opts.driver_memory, opts.conf)
    out = _normalise_out(opts.out, spark)
    _check_manifest(spark, out)
    try:
        captures = list_inputs(opts.inputs, spark)
    except InputError as exc:
        raise JobError(str(exc)) from None
    parallelism = max(1, int(spark.sparkContext.defaultParallelism))
    slices = plan_slices(captures, parallelism, opts.split_bytes)
    parts = pack(slices, opts.partitions or PARTITIONS_PER_CORE * parallelism)
    staging = f"{out}/_staging-{uuid.uuid4().hex[:12]}"
    config = JobConfig(partitions=parts, spec=opts.spec, ports=opts.ports, staging=staging,
                       tls_keylog=opts.tls_keylog, validate=opts.validate,
                       tables=table_names(opts.diagnose), compression=opts.compression,
                       writer_thread=False)  # fmt: skip
    result = JobResult(out=out, captures=len(captures), slices=len(slices), partitions=len(parts))
    try:
        manifest = (spark.range(0, len(parts), 1, len(parts))
                    .mapInArrow(partial(run_partitions, config), spark_schema(MANIFEST_SCHEMA)).collect())  # fmt: skip
        files = [r.asDict() for r in manifest]
        written = _commit(spark, out, staging, files)
    finally:
        fs, path = _fs(spark, staging)
        fs.delete(path, True)  # also the files of failed or speculative task attempts
    for name in config.tables:
        result.rows[name] = sum(f["rows"] for f in files if f["table"] == name)
    result.errors = sorted({(f["capture"], f["message"]) for f in files if f["table"] == "errors"})
    result.exit_code = min((f["exit_code"] for f in files if f["table"] == "errors"), default=0)
    result.deleted = _delete_stale(spark, out, {c.capture_id for c in captures}, written)
    _write_manifest(spark, out)
    result.seconds = time.perf_counter() - started
    return result


def _commit(spark: Any, out: str, staging: str, files: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """Move the files of the successful task attempts into place, partition by partition: each
    partition this run wrote replaces the partition of the same name (dynamic overwrite)."""
    parts: dict[tuple[str, str, str], list[str]] = {}
    for f in files:
        parts.setdefault((f["table"], f["capture_date"], f["capture_id"]), []).append(f["path"])
    Path = spark.sparkContext._jvm.org.apache.hadoop.fs.Path
    fs, _ = _fs(spark, out)
    for (table, date, capture_id), paths in sorted(parts.items()):
        target = Path(f"{out}/{table}/capture_date={date}/capture_id={capture_id}")
        if fs.exists(target):
            fs.delete(target, True)
        fs.mkdirs(target)
        for rel in paths:
            if not fs.rename(Path(f"{staging}/{rel}"), Path(target, rel.rsplit("/", 1)[1])):
                raise JobError(f"cannot move {staging}/{rel} into {target.toString()}")
    return set(parts)


def _normalise_out(out: str, spark: Any) -> str:
    """A full URI for the output, so the driver (Hadoop) and the executors (pyarrow) agree on it:
    a bare path is local with a local master, else on the cluster's default filesystem."""
    out = out.rstrip("/") or "/"
    if is_local(out) and not out.startswith("file:") and local_master(spark.sparkContext.master):
        return "file://" + os.path.abspath(out)
    fs, path = _fs(spark, out)
    uri = str(fs.makeQualified(path).toString())
    return "file://" + uri[len("file:") :] if uri.startswith("file:/") and not uri.startswith("file://") else uri


# --- the output directory through Hadoop's FileSystem (local, hdfs://, s3a:// alike) --------------


def _fs(spark: Any, path: str) -> tuple[Any, Any]:
    jvm = spark.sparkContext._jvm
    p = jvm.org.apache.hadoop.fs.Path(path)
    return p.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), p


def _manifest() -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, "fingerprint": fingerprint(), "partitioned_by": list(PARTITION_COLUMNS),
            "tables": {t: [line.split(".", 1)[1] for line in describe().splitlines() if line.startswith(t + ".")]
                       for t in TABLES}}  # fmt: skip


def _check_manifest(spark: Any, out: str) -> None:
    """Refuse to mix layouts: an archive written with another schema version needs a new DIR."""
    fs, path = _fs(spark, f"{out}/{MANIFEST}")
    if not fs.exists(path):
        return
    stream = fs.open(path)
    try:
        text = spark.sparkContext._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()
    try:
        found = json.loads(text).get("schema_version")
    except ValueError:
        raise JobError(f"{out}/{MANIFEST} is not an amqpscope manifest") from None
    if found != SCHEMA_VERSION:
        raise JobError(f"{out} holds tables of schema version {found}; this amqpscope writes version "
                       f"{SCHEMA_VERSION}: write to a new directory")  # fmt: skip


def _write_manifest(spark: Any, out: str) -> None:
    fs, path = _fs(spark, f"{out}/{MANIFEST}")
    stream = fs.create(path, True)
    try:
        stream.write(bytearray(json.dumps(_manifest(), indent=1).encode()))
    finally:
        stream.close()


def _delete_stale(spark: Any, out: str, ids: set[str], written: set[tuple[str, str, str]]) -> int:
    """Delete partitions of this run's captures that this run did not write."""
    deleted = 0
    for name in TABLES:
        fs, pattern = _fs(spark, f"{out}/{name}/capture_date=*/capture_id=*")
        for st in fs.globStatus(pattern) or []:
            p = st.getPath()
            capture_id = p.getName().split("=", 1)[1]
            date = p.getParent().getName().split("=", 1)[1]
            if capture_id in ids and (name, date, capture_id) not in written:
                fs.delete(p, True)
                deleted += 1
                parent = p.getParent()
                if not fs.listStatus(parent):
                    fs.delete(parent, True)
    return deleted


# --- command line (spark-submit / python -m) ------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="amqpscope.spark.job", description="Decode capture archives into Parquet on Spark.")
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="capture files, directories, globs or Hadoop URIs")
    p.add_argument("--out", required=True, help="output directory (local path or Hadoop URI)")
    p.add_argument("--master", default=None, help="Spark master URL (default: spark-submit's, else local[*])")
    p.add_argument("--spec", default=None, help="AMQP spec XML to decode with")
    p.add_argument("--port", type=int, action="append", default=[], help="treat TCP port N as AMQP (repeatable)")
    p.add_argument("--split-size", default="64m", help="split captures above this size by TCP flow (default 64m)")
    p.add_argument("--partitions", type=int, default=None, help="number of Spark tasks")
    p.add_argument("--driver-memory", default=None, help="e.g. 2g (embedded Spark only)")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting")
    p.add_argument("--no-validate", action="store_true", help="no findings table (skips the core's validator)")
    p.add_argument("--diagnose", action="store_true",
                   help="also the diagnoses table (needs validation; the Python diagnoser reads every event: slow)")
    p.add_argument("--compression", choices=COMPRESSIONS, default=DEFAULT_COMPRESSION,
                   help=f"Parquet compression (default {DEFAULT_COMPRESSION})")
    return p


def options_from_args(argv: Sequence[str] | None = None) -> JobOptions:
    p = _parser()
    a = p.parse_args(argv)
    try:
        split = parse_size(a.split_size)
    except ValueError as exc:
        p.error(str(exc))
    if a.diagnose and a.no_validate:
        p.error("--diagnose needs validation (not with --no-validate)")
    conf = []
    for item in a.conf:
        key, sep, value = item.partition("=")
        if not sep:
            p.error(f"--conf needs KEY=VALUE, got {item!r}")
        conf.append((key, value))
    return JobOptions(inputs=tuple(a.inputs), out=a.out, master=a.master, spec=a.spec,
                      ports=frozenset({5672, *a.port}), split_bytes=split, partitions=a.partitions,
                      driver_memory=a.driver_memory, conf=tuple(conf), validate=not a.no_validate,
                      diagnose=a.diagnose, compression=a.compression)  # fmt: skip


def summary(result: JobResult) -> list[str]:
    """The lines both command lines print when a job is done."""
    rows = ", ".join(f"{name} {n}" for name, n in result.rows.items())
    lines = [f"{result.captures} captures ({result.slices} slices, {result.partitions} tasks) in "
             f"{result.seconds:.1f} s -> {result.out}", f"rows: {rows}"]  # fmt: skip
    if result.deleted:
        lines.append(f"replaced: {result.deleted} stale partitions removed")
    lines += [f"error: {message}" for _capture, message in result.errors]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    opts = options_from_args(argv)
    try:
        result = run_job(opts)
    except JobError as exc:
        print(f"amqpscope: error: {exc}", file=sys.stderr)
        return 2
    for line in summary(result):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The Parquet tables of ``amqpscope batch`` without Spark: ``amqpscope decode --format parquet``.

One process, no Spark and no Java (the core encodes the files; pyarrow gives the schemas and the
filesystems): every capture slice is decoded by the same ``worker.write_slice`` a Spark task
runs, on a pool of threads (one per core), into a staging directory under ``DIR``, and each
capture's files are then moved into place with the same layout and the same rule as the Spark
job's commit: each partition (``TABLE/capture_date=…/capture_id=…``) written replaces the
partition of that name, and partitions of the same capture that this run did not write are
deleted. ``DIR/_amqpscope.json`` records the schema version; a directory of another version is
refused. So a directory can be written by either, and read by Spark, DuckDB or pandas alike.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

from pyarrow import fs as pafs

from . import DEFAULT_COMPRESSION
from .inputs import list_inputs, open_output
from .job import DEFAULT_SPLIT_BYTES, MANIFEST, JobError, JobResult, _manifest, plan_slices
from .schema import SCHEMA_VERSION, TABLES
from .worker import JobConfig, Slice, TablesWriteError, codec_for, table_names, write_slice


def available_cores() -> int:
    """The CPUs this process may run on (its affinity, as ``taskset`` or a container sets it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def write_tables(inputs: Sequence[str], out: str, spec: str | None = None, ports: frozenset[int] = frozenset({5672}),
                 validate: bool = True, tls_keylog: str = "", diagnose: bool = False,
                 compression: str = DEFAULT_COMPRESSION, threads: int | None = None,
                 split_bytes: int = DEFAULT_SPLIT_BYTES) -> JobResult:  # fmt: skip
    """Decode every capture named by ``inputs`` (files, directories, globs) into the tables under
    ``out`` (a local path, or a URI pyarrow.fs writes to). Damaged captures are ``errors`` rows.
    ``tls_keylog``: NSS key log text for every capture (each pcapng's own Decryption Secrets
    Block is used besides). ``diagnose``: also the ``diagnoses`` table (the Python diagnoser over
    every event, many times the decode's time).

    ``threads`` slices are decoded at once (default: one per CPU this process may use), planned
    as the Spark job plans its tasks (``job.plan_slices``: a capture above ``split_bytes`` and
    above one thread's share of the input is split by TCP flow), so the tables are those the
    Spark job writes with that parallelism. The core releases the GIL while it decodes and
    encodes, so the threads run on all cores. With fewer slices than cores, each slice encodes
    on a writer thread of its own beside its decode."""
    started = time.perf_counter()
    captures = list_inputs(inputs)  # InputError for a missing input
    filesystem, root = open_output(out)
    _check_manifest(filesystem, root)
    try:
        filesystem.create_dir(root, recursive=True)
    except OSError as exc:
        raise JobError(f"cannot write the tables under {out}: {exc.strerror or exc}") from None
    cores = available_cores()
    threads = threads or cores
    slices = plan_slices(captures, threads, split_bytes)
    running = max(1, min(threads, len(slices)))
    config = JobConfig(partitions=(), spec=spec, ports=ports, validate=validate, tls_keylog=tls_keylog,
                       tables=table_names(diagnose), compression=compression,
                       writer_thread=running < cores)  # fmt: skip
    result = JobResult(out=out, captures=len(captures), slices=len(slices), partitions=running)
    staging = f"{root}/_staging-{uuid.uuid4().hex[:12]}"
    codec_for(spec)  # compiled once, before the threads want it
    try:
        files_of = _decode_slices(slices, config, running, filesystem, root, staging)
    finally:
        if _exists(filesystem, staging):
            filesystem.delete_dir(staging)
    for cap in captures:  # input order: the first damaged capture's exit code
        for f in files_of.get(cap.uri, []):
            result.rows[f["table"]] = result.rows.get(f["table"], 0) + f["rows"]
            if f["table"] == "errors":
                result.errors.append((f["capture"], f["message"]))
                result.exit_code = result.exit_code or f["exit_code"]
    result.rows = {name: result.rows.get(name, 0) for name in config.tables}
    with filesystem.open_output_stream(f"{root}/{MANIFEST}") as f:
        f.write(json.dumps(_manifest(), indent=1).encode())
    result.seconds = time.perf_counter() - started
    return result


def _decode_slices(slices: Sequence[Slice], config: JobConfig, running: int, filesystem: Any, root: str,
                   staging: str) -> dict[str, list[dict[str, Any]]]:  # fmt: skip
    """Decode ``slices`` on ``running`` threads, heaviest first; each capture's files are moved
    into place as soon as its last slice is done, so an interrupted run keeps the captures it
    finished. The first failure (an output that cannot be written, Ctrl-C) stops the others at
    their next trip into the core and is raised. The files of each capture, by URI."""
    left = Counter(sl.uri for sl in slices)
    files_of: dict[str, list[dict[str, Any]]] = {}
    stop = threading.Event()
    with ThreadPoolExecutor(running, thread_name_prefix="amqpscope-slice") as pool:
        futures = {pool.submit(write_slice, sl, config, filesystem, staging, 0, stop): sl
                   for sl in sorted(slices, key=lambda sl: -sl.cost)}  # fmt: skip
        try:
            for done in as_completed(futures):
                sl = futures[done]
                try:
                    files_of.setdefault(sl.uri, []).extend(done.result())
                except TablesWriteError as exc:
                    raise JobError(str(exc)) from None
                left[sl.uri] -= 1
                if left[sl.uri] == 0:
                    written = _commit(filesystem, root, staging, files_of[sl.uri])
                    _delete_stale(filesystem, root, sl.capture_id, written)
        except BaseException:
            stop.set()
            for f in futures:
                f.cancel()
            raise
    return files_of


def _exists(filesystem: Any, path: str) -> bool:
    return bool(filesystem.get_file_info(path).type != pafs.FileType.NotFound)


def _check_manifest(filesystem: Any, root: str) -> None:
    path = f"{root}/{MANIFEST}"
    if not _exists(filesystem, path):
        return
    with filesystem.open_input_stream(path) as f:
        text = f.read().decode("utf-8", "replace")
    try:
        found = json.loads(text).get("schema_version")
    except (ValueError, AttributeError):
        raise JobError(f"{path} is not an amqpscope manifest") from None
    if found != SCHEMA_VERSION:
        raise JobError(f"{root} holds tables of schema version {found}; this amqpscope writes version "
                       f"{SCHEMA_VERSION}: write to a new directory")  # fmt: skip


def _commit(filesystem: Any, root: str, staging: str, files: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """Move one capture's files into place; each partition written replaces its namesake."""
    parts: dict[tuple[str, str], list[str]] = {}
    for f in files:
        parts.setdefault((f["table"], f"capture_date={f['capture_date']}/capture_id={f['capture_id']}"), []).append(f["path"])
    for (table, part), paths in sorted(parts.items()):
        target = f"{root}/{table}/{part}"
        if _exists(filesystem, target):
            filesystem.delete_dir(target)
        filesystem.create_dir(target, recursive=True)
        for rel in paths:
            filesystem.move(f"{staging}/{rel}", f"{target}/{rel.rsplit('/', 1)[1]}")
    return set(parts)


def _delete_stale(filesystem: Any, root: str, capture_id: str, written: set[tuple[str, str]]) -> None:
    """Partitions of the capture that this run did not write (an old ``errors`` row, an old date)."""
    for table in TABLES:
        base = f"{root}/{table}"
        if not _exists(filesystem, base):
            continue
        for day in filesystem.get_file_info(pafs.FileSelector(base)):
            if day.type != pafs.FileType.Directory or not day.base_name.startswith("capture_date="):
                continue
            path = f"{day.path}/capture_id={capture_id}"
            if (table, f"{day.base_name}/capture_id={capture_id}") in written or not _exists(filesystem, path):
                continue
            filesystem.delete_dir(path)
            if not filesystem.get_file_info(pafs.FileSelector(day.path)):
                filesystem.delete_dir(day.path)

"""The Parquet tables of ``amqpscope batch`` without Spark: ``amqpscope decode --format parquet``.

One process, no Spark and no Java (the core encodes the files; pyarrow gives the schemas and the
filesystems): every capture is decoded by the same
``worker.write_slice`` a Spark task runs, into a staging directory under ``DIR``, and its files
are then moved into place with the same layout and the same rule as the Spark job's commit: each
partition (``TABLE/capture_date=…/capture_id=…``) written replaces the partition of that name,
and partitions of the same capture that this run did not write are deleted. ``DIR/_amqpscope.json``
records the schema version; a directory of another version is refused. So a directory can be
written by either, and read by Spark, DuckDB or pandas alike.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from pyarrow import fs as pafs

from . import DEFAULT_COMPRESSION
from .inputs import Capture, list_inputs, open_output
from .job import MANIFEST, JobError, JobResult, _manifest
from .schema import SCHEMA_VERSION, TABLES
from .worker import JobConfig, Slice, TablesWriteError, table_names, write_slice


def write_tables(inputs: Sequence[str], out: str, spec: str | None = None, ports: frozenset[int] = frozenset({5672}),
                 validate: bool = True, progress: Callable[[Capture], None] | None = None,
                 tls_keylog: str = "", diagnose: bool = False,
                 compression: str = DEFAULT_COMPRESSION) -> JobResult:  # fmt: skip
    """Decode every capture named by ``inputs`` (files, directories, globs) into the tables under
    ``out`` (a local path, or a URI pyarrow.fs writes to). Damaged captures are ``errors`` rows.
    ``tls_keylog``: NSS key log text for every capture (each pcapng's own Decryption Secrets
    Block is used besides). ``diagnose``: also the ``diagnoses`` table (the Python diagnoser over
    every event, many times the decode's time)."""
    started = time.perf_counter()
    captures = list_inputs(inputs)  # InputError for a missing input
    filesystem, root = open_output(out)
    _check_manifest(filesystem, root)
    try:
        filesystem.create_dir(root, recursive=True)
    except OSError as exc:
        raise JobError(f"cannot write the tables under {out}: {exc.strerror or exc}") from None
    config = JobConfig(partitions=(), spec=spec, ports=ports, validate=validate, tls_keylog=tls_keylog,
                       tables=table_names(diagnose), compression=compression)
    result = JobResult(out=out, captures=len(captures), slices=len(captures), partitions=1)
    staging = f"{root}/_staging-{uuid.uuid4().hex[:12]}"
    try:
        for cap in captures:
            if progress is not None:
                progress(cap)
            sl = Slice(cap.uri, cap.capture_id, cap.size)
            try:
                files = write_slice(sl, config, filesystem, staging, 0)
            except TablesWriteError as exc:
                raise JobError(str(exc)) from None
            written = _commit(filesystem, root, staging, files)
            _delete_stale(filesystem, root, cap.capture_id, written)
            for f in files:
                result.rows[f["table"]] = result.rows.get(f["table"], 0) + f["rows"]
                if f["table"] == "errors":
                    result.errors.append((f["capture"], f["message"]))
                    result.exit_code = result.exit_code or f["exit_code"]
    finally:
        if _exists(filesystem, staging):
            filesystem.delete_dir(staging)
    result.rows = {name: result.rows.get(name, 0) for name in config.tables}
    with filesystem.open_output_stream(f"{root}/{MANIFEST}") as f:
        f.write(json.dumps(_manifest(), indent=1).encode())
    result.seconds = time.perf_counter() - started
    return result


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

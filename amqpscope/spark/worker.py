"""What runs on the executors: decode capture slices and write their Parquet files.

The input DataFrame is ``spark.range(P)`` with one id per partition; id ``p`` selects the list of
slices the driver packed into partition ``p`` (``JobConfig.partitions``). Each slice is decoded as
a stream and its rows go, batch by batch, straight into Parquet files under the job's staging
directory, one file per table, laid out as the final partition
(``TABLE/capture_date=D/capture_id=C/part-SLICE-ATTEMPT.parquet``). Rows never pass through the
JVM: Spark schedules the tasks and the driver receives only a small manifest (one row per file
written), from which it commits the files of the successful task attempts (``job.py``). Measured
on a 100 MB capture, handing the rows to Spark's own Parquet writer instead cost as much again as
the decoding.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from amqpscope.capture import CaptureError, CaptureUnreadable, read_packets
from amqpscope.dissect.codec import Codec, get_codec
from amqpscope.dissect.spec import DEFAULT_SPEC, bundled_spec_path
from amqpscope.events import Event
from amqpscope.pipeline import Options, RunStats, decode_batches
from amqpscope.validate.validator import Validator

from .inputs import open_output, open_stream
from .rows import TableRows
from .schema import PARTITION_COLUMNS, TABLE_OF_KIND, TABLES
from .split import FlowKey, flow_selector, hash_slice, plan_slices

UNKNOWN_DATE = "unknown"  # partition value for a capture without a single readable packet
EXIT_INTERNAL = 70  # an unexpected exception in the decoder (EX_SOFTWARE): a bug, reported as a row


@dataclass(frozen=True, slots=True)
class Slice:
    uri: str
    capture_id: str
    size: int | None
    index: int = 0
    count: int = 1

    @property
    def cost(self) -> float:
        return (self.size or 0) / self.count


@dataclass(frozen=True)
class JobConfig:
    """Everything a task needs; pickled by value into the ``mapInArrow`` closure."""

    partitions: tuple[tuple[Slice, ...], ...]
    staging: str = ""  # URI of the job's staging directory, where tasks write their files
    spec: str | None = None
    ports: frozenset[int] = frozenset({5672})
    batch_rows: int = 65536  # rows per Arrow batch: bounds executor memory whatever the file size
    plan_bytes: int = 32 << 20  # capture prefix weighed to split a capture by flow (split.py)
    tables: tuple[str, ...] = field(default_factory=lambda: tuple(TABLES))
    validate: bool = True  # run the validator stage: its findings fill the ``findings`` table
    tls_keylog: str = field(default="", repr=False)  # NSS key log text (batch --tls-keylog)


# What each task returns to the driver: one row per file it wrote.
MANIFEST_SCHEMA = pa.schema([
    pa.field("table", pa.string(), nullable=False),
    pa.field("capture", pa.string(), nullable=False),
    pa.field("capture_date", pa.string(), nullable=False),
    pa.field("capture_id", pa.string(), nullable=False),
    pa.field("path", pa.string(), nullable=False),  # relative to the staging directory
    pa.field("rows", pa.int64(), nullable=False),
    pa.field("message", pa.string()),  # errors only: the one-line error
])  # fmt: skip


_codecs: dict[str | None, Codec] = {}  # Python workers are reused across tasks: compile a spec once
_validators: dict[str | None, Validator] = {}


def _codec(spec: str | None) -> Codec:
    codec = _codecs.get(spec)
    if codec is None:
        codec = _codecs[spec] = get_codec(_spec_file(spec))
    return codec


def _spec_file(spec: str | None) -> str | None:
    """The spec file to build the codec from. Shipped with ``--py-files amqpscope.zip`` the
    package's spec is inside the zip, not a file the spec loader can open: extract it once."""
    if spec is not None or bundled_spec_path().is_file():
        return spec
    data = (resources.files("amqpscope.dissect") / "specs" / DEFAULT_SPEC).read_bytes()
    path = os.path.join(tempfile.gettempdir(), f"amqpscope-{hashlib.sha1(data).hexdigest()[:12]}-{DEFAULT_SPEC}")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    return path


def _validator(spec: str | None) -> Validator:
    """The validator compiled from a spec (its grammars), kept per worker; state is per capture."""
    v = _validators.get(spec)
    if v is None:
        v = _validators[spec] = Validator(_codec(spec).spec)
    return v


@functools.cache
def file_schema(table: str) -> pa.Schema:
    """A table's schema without the partition columns: those live in the directory names."""
    schema = TABLES[table].schema
    return pa.schema([f for f in schema if f.name not in PARTITION_COLUMNS], metadata=schema.metadata)


def run_partitions(config: JobConfig, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function: partition ids in, manifest rows of the files written out."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    attempt = ctx.taskAttemptId() if ctx is not None else 0
    fs, root = open_output(config.staging)
    for rb in batches:
        for pid in rb.column(0).to_pylist():
            for sl in config.partitions[pid]:
                yield write_slice(sl, config, fs, root, attempt)


def write_slice(sl: Slice, config: JobConfig, fs: Any, root: str, attempt: int) -> pa.RecordBatch:
    """Decode one slice into one Parquet file per table; the manifest of those files."""
    files: dict[str, tuple[Any, str, str]] = {}  # table -> (writer, relative path, capture_date)
    rows: dict[str, int] = {}
    message: dict[str, str | None] = {}
    try:
        for table, batch in decode_capture(sl, config):
            entry = files.get(table)
            if entry is None:
                date = batch.column(batch.schema.get_field_index("capture_date"))[0].as_py()
                folder = f"{table}/capture_date={date}/capture_id={sl.capture_id}"
                fs.create_dir(f"{root}/{folder}", recursive=True)
                rel = f"{folder}/part-{sl.index:05d}-{attempt}.parquet"
                writer = pq.ParquetWriter(f"{root}/{rel}", file_schema(table), filesystem=fs, compression="zstd")
                entry = files[table] = (writer, rel, date)
            keep = [i for i, name in enumerate(batch.schema.names) if name not in PARTITION_COLUMNS]
            entry[0].write_batch(pa.RecordBatch.from_arrays([batch.column(i) for i in keep],
                                                            schema=file_schema(table)))  # fmt: skip
            rows[table] = rows.get(table, 0) + batch.num_rows
            if table == "errors":
                message[table] = batch.column(batch.schema.get_field_index("message"))[0].as_py()
    finally:
        for writer, _rel, _date in files.values():
            writer.close()
    names = list(files)
    cols = {
        "table": names,
        "capture": [sl.uri] * len(names),
        "capture_date": [files[t][2] for t in names],
        "capture_id": [sl.capture_id] * len(names),
        "path": [files[t][1] for t in names],
        "rows": [rows[t] for t in names],
        "message": [message.get(t) for t in names],
    }
    return pa.RecordBatch.from_pydict(cols, schema=MANIFEST_SCHEMA)


def _first_date(uri: str) -> str:
    """The capture date of the first packet (UTC); the unknown date when there is none."""
    stream = open_stream(uri)
    try:
        first = next(read_packets(stream), None)
    except (CaptureError, OSError):
        first = None
    finally:
        stream.close()
    if first is None:
        return UNKNOWN_DATE
    return dt.datetime.fromtimestamp(first.ts_ns / 1e9, dt.UTC).strftime("%Y-%m-%d")


def _mine(sl: Slice, config: JobConfig) -> Callable[[FlowKey], bool] | None:
    """The flow filter of a slice (None: the whole capture). A read error in the planning
    prefix ends the plan early; the decode pass reports it."""
    if sl.count == 1:
        return None
    stream = open_stream(sl.uri)
    plan: dict[FlowKey, int] = {}
    try:
        plan = plan_slices(stream, sl.count, config.plan_bytes)
    except (CaptureError, OSError):
        pass
    finally:
        stream.close()
    return lambda key: plan.get(key, hash_slice(key, sl.count)) == sl.index


_UNSEEN: Any = object()


def decode_capture(sl: Slice, config: JobConfig) -> Iterator[tuple[str, pa.RecordBatch]]:
    """(table, batch) pairs of one capture slice; a read error becomes an ``errors`` row after
    the rows decoded before it."""
    started = time.perf_counter()
    constants = {"capture": sl.uri, "capture_id": sl.capture_id, "capture_date": UNKNOWN_DATE}
    rows = {name: TableRows(TABLES[name], constants) for name in config.tables}
    stats = RunStats()
    options = Options(ports=config.ports, show_credentials=False, keep_bodies=False, tls_keylog=config.tls_keylog)
    error: BaseException | None = None
    written = 0
    stream = None
    try:
        constants["capture_date"] = _first_date(sl.uri)
        stream = open_stream(sl.uri)
        mine = _mine(sl, config)
        codec = _codec(config.spec)
        # per slice: connection checks are exact; the few that look across connections
        # (exclusive queues, exchanges declared elsewhere) see only this slice's connections
        stages = (_validator(config.spec).stage,) if config.validate else ()
        batches = decode_batches(stream, codec, options, stats, stages=stages, select=flow_selector(mine))
        # event class -> the append of its table's buffer (None: not stored)
        sinks: dict[type, Callable[[Event], None] | None] = {}
        buffers = [(table, table.events) for table in rows.values() if table.table.classes]
        limit = room = config.batch_rows  # no buffer can be full before ``room`` more events came
        for evs in batches:  # lists of the events of one TCP event: a few, rarely hundreds
            for ev in evs:
                add = sinks.get(ev.__class__, _UNSEEN)
                if add is _UNSEEN:
                    table = rows.get(TABLE_OF_KIND.get(ev.kind, ""))
                    add = sinks[ev.__class__] = table.add if table is not None else None
                if add is not None:
                    add(ev)
            room -= len(evs)
            if room <= 0:
                for table, buf in buffers:
                    while len(buf) >= limit:
                        written += limit
                        yield table.table.name, table.cut(limit)
                room = limit - max((len(buf) for _table, buf in buffers), default=0)
    except OSError as exc:  # opening failed (local open or a remote filesystem)
        error = CaptureUnreadable(f"cannot read capture {sl.uri!r}: {exc.strerror or exc}")
    except Exception as exc:  # CaptureError, or a decoder bug: this capture stops, the job goes on
        error = exc
    finally:
        if stream is not None:
            stream.close()
    for name, table in rows.items():
        if name not in ("errors", "captures") and len(table):
            written += len(table)
            yield name, table.cut()
    if error is not None and "errors" in rows and _reports(error, sl):
        code = error.exit_code if isinstance(error, CaptureError) else EXIT_INTERNAL
        message = str(error) if isinstance(error, CaptureError) else f"{type(error).__name__}: {error}"
        rows["errors"].add_row({"slice": sl.index, "slices": sl.count, "error": type(error).__name__,
                                "exit_code": code, "message": message, "packets_read": stats.packets})  # fmt: skip
        yield "errors", rows["errors"].cut()
    if "captures" in rows:
        acc = stats.accounting_event().to_record()
        acc.update(slice=sl.index, slices=sl.count, size=sl.size, rows=written,
                   seconds=time.perf_counter() - started, ok=error is None)  # fmt: skip
        rows["captures"].add_row(acc)
        yield "captures", rows["captures"].cut()


def _reports(error: BaseException, sl: Slice) -> bool:
    """Every slice of a capture meets the same content error at the same packet: report it once.
    I/O errors and bugs may differ between slices, so each slice reports its own."""
    deterministic = isinstance(error, CaptureError) and not isinstance(error, CaptureUnreadable)
    return sl.index == 0 or not deterministic

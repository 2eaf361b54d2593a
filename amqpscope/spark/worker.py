"""What runs on the executors: decode capture slices and write their Parquet files.

The input DataFrame is ``spark.range(P)`` with one id per partition; id ``p`` selects the list of
slices the driver packed into partition ``p`` (``JobConfig.partitions``). Each slice is decoded as
a stream by the native core, which also builds the rows of the event tables as Arrow record
batches (``_native.Decoder.arrow``: no Python object per row). The batches go, collected into row
groups, straight into Parquet files under the job's staging directory, one file per table, laid
out as the final partition (``TABLE/capture_date=D/capture_id=C/part-SLICE-ATTEMPT.parquet``). Rows
never pass through the JVM: Spark schedules the tasks and the driver receives only a small manifest
(one row per file written), from which it commits the files of the successful task attempts
(``job.py``). ``amqpscope decode --format parquet`` runs the same ``write_slice`` in one process
(``local.py``).
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import os
import queue
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from amqpscope.capture import CaptureError, CaptureUnreadable, read_packets
from amqpscope.diagnose import Diagnoser, Diagnosis
from amqpscope.dissect.codec import Codec, get_codec
from amqpscope.dissect.spec import DEFAULT_SPEC, bundled_spec_path
from amqpscope.pipeline import Options, RunStats, open_decoder

from . import DEFAULT_COMPRESSION
from .inputs import open_output, open_stream
from .rows import records_batch
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
    batch_rows: int = 16384  # events per trip into the core (one Arrow batch per table): bounds memory
    plan_bytes: int = 32 << 20  # capture prefix weighed to split a capture by flow (split.py)
    tables: tuple[str, ...] = field(default_factory=lambda: table_names(diagnose=False))
    validate: bool = True  # run the validator stage: its findings fill the ``findings`` table
    tls_keylog: str = field(default="", repr=False)  # NSS key log text (batch --tls-keylog)
    compression: str = DEFAULT_COMPRESSION  # of the Parquet files (COMPRESSIONS)


# Written only when asked for (``--diagnose``): the diagnoser runs in Python over Python event
# objects of every frame, ~15x the time of the decode with the other tables.
OPTIONAL_TABLES = ("diagnoses",)


def table_names(diagnose: bool = False) -> tuple[str, ...]:
    """The tables a job writes: all but the optional ``diagnoses``, which ``diagnose`` adds."""
    return tuple(t for t in TABLES if diagnose or t not in OPTIONAL_TABLES)


# What each task returns to the driver: one row per file it wrote.
MANIFEST_SCHEMA = pa.schema([
    pa.field("table", pa.string(), nullable=False),
    pa.field("capture", pa.string(), nullable=False),
    pa.field("capture_date", pa.string(), nullable=False),
    pa.field("capture_id", pa.string(), nullable=False),
    pa.field("path", pa.string(), nullable=False),  # relative to the staging directory
    pa.field("rows", pa.int64(), nullable=False),
    pa.field("message", pa.string()),  # errors only: the one-line error
    pa.field("exit_code", pa.int32()),  # errors only: the CLI's exit code for it
])  # fmt: skip


_codecs: dict[str | None, Codec] = {}  # Python workers are reused across tasks: compile a spec once


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
    """Decode one slice into one Parquet file per table; the manifest of those files. The core's
    batches (``config.batch_rows`` events each) are collected into row groups of about
    ``ROW_GROUP_BYTES`` before they are written."""
    files: dict[str, TableFile] = {}
    constants = slice_constants(sl)
    writer = EncodingThread()
    try:
        for table, batch in decode_capture(sl, config, constants):
            out = files.get(table)
            if out is None:
                folder = f"{table}/capture_date={constants['capture_date']}/capture_id={sl.capture_id}"
                fs.create_dir(f"{root}/{folder}", recursive=True)
                rel = f"{folder}/part-{sl.index:05d}-{attempt}.parquet"
                out = files[table] = TableFile(fs, root, rel, file_schema(table), config.compression)
            writer.add(out, batch)
            if table == "errors":
                out.message = batch.column(batch.schema.get_field_index("message"))[0].as_py()
                out.exit_code = batch.column(batch.schema.get_field_index("exit_code"))[0].as_py()
        writer.finish()
    finally:
        writer.stop()
        for out in files.values():
            out.close()
    names = list(files)
    cols = {
        "table": names,
        "capture": [sl.uri] * len(names),
        "capture_date": [constants["capture_date"]] * len(names),
        "capture_id": [sl.capture_id] * len(names),
        "path": [files[t].rel for t in names],
        "rows": [files[t].rows for t in names],
        "message": [files[t].message for t in names],
        "exit_code": [files[t].exit_code for t in names],
    }
    return pa.RecordBatch.from_pydict(cols, schema=MANIFEST_SCHEMA)


class EncodingThread:
    """Parquet encoding on a second thread, while the core decodes the next batches: both release
    the GIL, so with a core to spare a slice takes about the longer of the two instead of their
    sum (the CPU time is the same). At most ``DEPTH`` batches wait; an encoding error is raised
    in the caller at its next ``add`` or at ``finish``."""

    # Batches of one trip into the core (16,384 events) are 0.1-4 MB. The writer takes a row group
    # at once (~9 ms for 8 MiB), about one trip's decode: with only 2 batches of room the decode
    # stopped at every row group; 8 (about two trips, ~15 MB) keep it going.
    DEPTH = 8

    def __init__(self) -> None:
        self.queue: queue.Queue[tuple[TableFile, pa.RecordBatch] | None] = queue.Queue(maxsize=self.DEPTH)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="amqpscope-parquet", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while (item := self.queue.get()) is not None:
            if self.error is None:
                try:
                    item[0].add(item[1])
                except BaseException as exc:  # handed to the caller
                    self.error = exc

    def add(self, out: TableFile, batch: pa.RecordBatch) -> None:
        if self.error is not None:
            raise self.error
        self.queue.put((out, batch))

    def finish(self) -> None:
        """Wait for the batches given; raise an encoding error."""
        self.stop()
        if self.error is not None:
            raise self.error

    def stop(self) -> None:
        if self.thread.is_alive():
            self.queue.put(None)
            self.thread.join()


ROW_GROUP_BYTES = 8 << 20  # Arrow bytes per Parquet row group (~1 MB once compressed): held until written
# Dictionary-encoded: the string columns of few distinct values. The others (numbers, messages,
# maps, ids) gain nothing from it after zstd, and skipping it saved ~10 % of the writing CPU.
DICTIONARY_COLUMNS = ("capture", "kind", "dir", "type", "method", "exchange", "routing_key", "queue",
                      "consumer_tag", "content_type", "content_encoding", "message_type", "app_id", "user_id",
                      "reply_to", "problem", "rule", "severity", "error", "state")  # fmt: skip


# Column statistics (min/max, null count) are written for the columns queries filter or sort on;
# on every column they cost ~8 % of the writing CPU and prune nothing.
STATISTICS_COLUMNS = ("seq", "packet", "ts", "time", "conn", "channel", "kind", "dir", "type", "method",
                      "first_packet", "entry", "ref_packet", "rule", "severity", "state", "error", "slice")  # fmt: skip


class TableFile:
    """One table's Parquet file of a slice: batches collected into row groups."""

    def __init__(self, fs: Any, root: str, rel: str, schema: pa.Schema, compression: str = DEFAULT_COMPRESSION) -> None:
        self.rel = rel
        dictionary = [name for name in DICTIONARY_COLUMNS if name in schema.names]
        statistics = [name for name in STATISTICS_COLUMNS if name in schema.names]
        self.writer = pq.ParquetWriter(f"{root}/{rel}", schema, filesystem=fs, compression=compression,
                                       use_dictionary=dictionary, write_statistics=statistics)  # fmt: skip
        self.pending: list[pa.RecordBatch] = []
        self.pending_bytes = 0
        self.rows = 0
        self.message: str | None = None  # errors only: the one-line error
        self.exit_code: int | None = None

    def add(self, batch: pa.RecordBatch) -> None:
        self.pending.append(batch)
        self.pending_bytes += batch.nbytes
        self.rows += batch.num_rows
        if self.pending_bytes >= ROW_GROUP_BYTES:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            table = pa.Table.from_batches(self.pending)
            self.writer.write_table(table, row_group_size=table.num_rows)
            self.pending, self.pending_bytes = [], 0

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self.writer.close()


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


CORE_TABLES = ("events", "messages", "connections", "ledger")  # built by the core (``Decoder.arrow``)


def slice_constants(sl: Slice) -> dict[str, str]:
    """The columns that are the same on every row of a slice (``capture_date`` is filled in by
    ``decode_capture`` before its first batch)."""
    return {"capture": sl.uri, "capture_id": sl.capture_id, "capture_date": UNKNOWN_DATE}


def decode_capture(sl: Slice, config: JobConfig, constants: dict[str, str] | None = None
                   ) -> Iterator[tuple[str, pa.RecordBatch]]:  # fmt: skip
    """(table, batch) pairs of one capture slice, in the tables' file schemas (without the
    partition columns); a read error becomes an ``errors`` row after the rows decoded before it.

    Every event table, findings included, is the core's Arrow batches: with validation on, the
    core's validator runs per slice (connection checks are exact; the few that look across
    connections, exclusive queues and exchanges declared elsewhere, see this slice's connections)."""
    started = time.perf_counter()
    constants = slice_constants(sl) if constants is None else constants
    validate = config.validate and "findings" in config.tables
    wanted = [name for name in config.tables if name in CORE_TABLES or (name == "findings" and validate)]
    schemas = {name: file_schema(name) for name in wanted}
    # diagnoses read Python events beside the batches: the findings and the ledger's records with
    # the frames they concern (without validation: none, like findings)
    diagnoser = Diagnoser() if "diagnoses" in config.tables and config.validate else None
    diagnosed: list[Diagnosis] = []
    stats = RunStats()
    options = Options(ports=config.ports, show_credentials=False, keep_bodies=False, tls_keylog=config.tls_keylog,
                      validate=validate or diagnoser is not None,
                      ledger="ledger" in wanted or diagnoser is not None)  # fmt: skip
    error: BaseException | None = None
    written = 0
    stream = None
    try:
        constants["capture_date"] = _first_date(sl.uri)
        stream = open_stream(sl.uri)
        mine = _mine(sl, config)
        dec = open_decoder(stream, _codec(config.spec), options, select=flow_selector(mine))
        try:
            if diagnoser is None:
                while (batches := dec.arrow(schemas, constants, TABLE_OF_KIND, config.batch_rows)) is not None:
                    for name, obj in batches.items():
                        batch = pa.record_batch(obj)
                        written += batch.num_rows
                        yield name, batch
            else:
                reads = Diagnoser.READS
                while (got := dec.arrow_events(schemas, constants, TABLE_OF_KIND, reads, config.batch_rows)) is not None:
                    batches, events = got
                    for name, obj in batches.items():
                        batch = pa.record_batch(obj)
                        written += batch.num_rows
                        yield name, batch
                    for ev in events:
                        diagnosed += diagnoser.feed(ev)
                diagnosed += diagnoser.finish()
        finally:
            stats.update(dec.stats())
    except OSError as exc:  # opening failed (local open or a remote filesystem)
        error = CaptureUnreadable(f"cannot read capture {sl.uri!r}: {exc.strerror or exc}")
    except Exception as exc:  # CaptureError, or a decoder bug: this capture stops, the job goes on
        error = exc
    finally:
        if stream is not None:
            stream.close()
    if diagnosed:
        written += len(diagnosed)
        yield "diagnoses", records_batch(file_schema("diagnoses"), [diagnosis_row(d) for d in diagnosed], constants)
    if error is not None and "errors" in config.tables and _reports(error, sl):
        code = error.exit_code if isinstance(error, CaptureError) else EXIT_INTERNAL
        message = str(error) if isinstance(error, CaptureError) else f"{type(error).__name__}: {error}"
        row = {"slice": sl.index, "slices": sl.count, "error": type(error).__name__, "exit_code": code,
               "message": message, "packets_read": stats.packets}  # fmt: skip
        yield "errors", records_batch(file_schema("errors"), [row], constants)
    if "captures" in config.tables:
        acc = stats.accounting_event().to_record()
        acc.update(slice=sl.index, slices=sl.count, size=sl.size, rows=written,
                   seconds=time.perf_counter() - started, ok=error is None)  # fmt: skip
        yield "captures", records_batch(file_schema("captures"), [acc], constants)


def diagnosis_row(d: Diagnosis) -> dict[str, Any]:
    """A ``diagnoses`` row: the diagnosis record, ``ts`` its start, details as a string map."""
    rec = d.to_record()
    rec["ts"] = d.since
    rec["details"] = [(k, v if isinstance(v, str) else json.dumps(v, default=str)) for k, v in d.details.items()]
    return rec


def _reports(error: BaseException, sl: Slice) -> bool:
    """Every slice of a capture meets the same content error at the same packet: report it once.
    I/O errors and bugs may differ between slices, so each slice reports its own."""
    deterministic = isinstance(error, CaptureError) and not isinstance(error, CaptureUnreadable)
    return sl.index == 0 or not deterministic

"""What runs on the executors: decode capture slices and write their Parquet files.

The input DataFrame is ``spark.range(P)`` with one id per partition; id ``p`` selects the list of
slices the driver packed into partition ``p`` (``JobConfig.partitions``). Each slice is decoded as
a stream by the native core, which also builds the rows of the event tables as Arrow record
batches and encodes them as Parquet (``_native.ParquetSink``: no Python object per row). The
encoded bytes go straight into files under the job's staging directory, one file per table, laid
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
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import pyarrow as pa

from amqpscope._native import ParquetSink
from amqpscope.capture import CaptureError, CaptureUnreadable, read_packets
from amqpscope.diagnose import Diagnoser, Diagnosis
from amqpscope.dissect.codec import Codec, get_codec
from amqpscope.dissect.spec import DEFAULT_SPEC, bundled_spec_path
from amqpscope.pipeline import Options, RunStats, open_decoder

from . import DEFAULT_COMPRESSION
from .inputs import open_output, open_stream
from .rows import records_json
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
    # events per trip into the core (one Arrow batch per table): 16,384 took 0.1-0.2 s more per
    # 100 MB of capture (the builders' columns no longer in cache); 2,048 gave local[2] 93.8-103.4
    # MB/s where 4,096 gave 85.4-98.1, with two tasks sharing the caches (docs/batch.md)
    batch_rows: int = 2048
    plan_bytes: int = 32 << 20  # capture prefix weighed to split a capture by flow (split.py)
    tables: tuple[str, ...] = field(default_factory=lambda: table_names(diagnose=False))
    validate: bool = True  # run the validator stage: its findings fill the ``findings`` table
    tls_keylog: str = field(default="", repr=False)  # NSS key log text (batch --tls-keylog)
    compression: str = DEFAULT_COMPRESSION  # of the Parquet files (COMPRESSIONS)
    # Encode on a thread of the core's own beside the decode: a one-process decode with a core to
    # spare ends sooner. Spark runs a task per core, so its tasks encode on the thread that
    # decodes: two concurrent decodes on 2 cores took 8 % less CPU and time that way.
    writer_thread: bool = True


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


def codec_for(spec: str | None) -> Codec:
    """The codec of ``spec``, compiled once per process."""
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
                yield pa.RecordBatch.from_pylist(write_slice(sl, config, fs, root, attempt), schema=MANIFEST_SCHEMA)


def write_slice(sl: Slice, config: JobConfig, fs: Any, root: str, attempt: int,
                stop: threading.Event | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """Decode one slice into one Parquet file per table that has rows; the manifest of those
    files (rows of ``MANIFEST_SCHEMA``). The core builds the tables as it decodes (GIL released)
    and encodes them, on a thread of its own with ``config.writer_thread``
    (``_native.ParquetSink``); the encoded bytes are written here as they come. A file that
    cannot be written raises ``TablesWriteError``; ``stop`` set ends the decode early with
    ``SliceCancelled`` (the one-process pool when another slice failed or on Ctrl-C)."""
    constants = slice_constants(sl)
    files = SliceFiles(fs, root, sl, attempt, constants)
    try:
        rows, error = decode_slice(sl, config, constants, files, stop)
    finally:
        files.close()
    return [{"table": t, "capture": sl.uri, "capture_date": constants["capture_date"], "capture_id": sl.capture_id,
             "path": files.rel[t], "rows": rows.get(t, 0),
             "message": error[0] if t == "errors" and error else None,
             "exit_code": error[1] if t == "errors" and error else None}
            for t in config.tables if t in files.rel]  # fmt: skip


class TablesWriteError(Exception):
    """A table's file could not be written (the output, not the capture): the slice fails."""


class SliceCancelled(Exception):
    """The slice's ``stop`` was set: its files are incomplete and must not be committed."""


class SliceFiles:
    """The files of one slice's tables, opened at their first bytes (a table without rows has
    no file), laid out as their final partition under ``root``."""

    def __init__(self, fs: Any, root: str, sl: Slice, attempt: int, constants: dict[str, str]) -> None:
        self.fs, self.root, self.sl, self.attempt, self.constants = fs, root, sl, attempt, constants
        self.rel: dict[str, str] = {}  # table -> path relative to root
        self.streams: dict[str, Any] = {}

    def write(self, parts: dict[str, bytes]) -> None:
        for table, data in parts.items():
            try:
                self._stream(table).write(data)
            except OSError as exc:
                raise TablesWriteError(f"cannot write the {table} table under {self.root}: "
                                       f"{exc.strerror or exc}") from None  # fmt: skip

    def _stream(self, table: str) -> Any:
        stream = self.streams.get(table)
        if stream is None:
            folder = f"{table}/capture_date={self.constants['capture_date']}/capture_id={self.sl.capture_id}"
            self.fs.create_dir(f"{self.root}/{folder}", recursive=True)
            self.rel[table] = f"{folder}/part-{self.sl.index:05d}-{self.attempt}.parquet"
            stream = self.streams[table] = self.fs.open_output_stream(f"{self.root}/{self.rel[table]}")
        return stream

    def close(self) -> None:
        for stream in self.streams.values():
            stream.close()


ROW_GROUP_ROWS = 1 << 15  # rows per Parquet row group (~1-2 MB compressed): 4x more took 0.15 s more per 100 MB (page faults)
# Dictionary-encoded: the string columns of few distinct values. The others (numbers, messages,
# maps, ids) gain nothing from it once compressed, and skipping it saved ~10 % of the writing CPU.
DICTIONARY_COLUMNS = ("capture", "kind", "dir", "type", "method", "exchange", "routing_key", "queue",
                      "consumer_tag", "content_type", "content_encoding", "message_type", "app_id", "user_id",
                      "reply_to", "problem", "rule", "severity", "error", "state")  # fmt: skip


# Column statistics (min/max, null count) are written for the columns queries filter or sort on;
# on every column they cost ~8 % of the writing CPU and prune nothing.
STATISTICS_COLUMNS = ("seq", "packet", "ts", "time", "conn", "channel", "kind", "dir", "type", "method",
                      "first_packet", "entry", "ref_packet", "rule", "severity", "state", "error", "slice")  # fmt: skip


# Columns of random values, which no codec shrinks: the codec's pass over them is spared (a SHA-256
# per message, 64 hex digits: snappy saved 3 % of their bytes for 0.05-0.08 CPU-s per 100 MB of
# the large capture).
UNCOMPRESSED_COLUMNS = ("body_sha256",)


def parquet_options(config: JobConfig) -> dict[str, Any]:
    """How the core encodes the files (``_native.ParquetSink``)."""
    return {"compression": config.compression, "dictionary": list(DICTIONARY_COLUMNS),
            "statistics": list(STATISTICS_COLUMNS), "uncompressed": list(UNCOMPRESSED_COLUMNS),
            "row_group_rows": ROW_GROUP_ROWS,
            "thread": config.writer_thread}  # fmt: skip


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


CORE_TABLES = ("events", "messages", "connections", "ledger")  # built by the core (``ParquetSink``)


def slice_constants(sl: Slice) -> dict[str, str]:
    """The columns that are the same on every row of a slice (``capture_date`` is filled in by
    ``decode_slice`` before its first batch)."""
    return {"capture": sl.uri, "capture_id": sl.capture_id, "capture_date": UNKNOWN_DATE}


def decode_slice(sl: Slice, config: JobConfig, constants: dict[str, str], files: SliceFiles,
                 stop: threading.Event | None = None) -> tuple[dict[str, int], tuple[str, int] | None]:  # fmt: skip
    """Decode one capture slice into ``files``: the rows of each table, and the slice's error
    (message, exit code) when a read error ended it (its ``errors`` row comes after the rows
    decoded before it).

    Every event table, findings included, is built by the core: with validation on, the core's
    validator runs per slice (connection checks are exact; the few that look across connections,
    exclusive queues and exchanges declared elsewhere, see this slice's connections)."""
    started = time.perf_counter()
    validate = config.validate and "findings" in config.tables
    wanted = [name for name in config.tables if name in CORE_TABLES or (name == "findings" and validate)]
    # diagnoses read Python events beside the tables: the findings and the ledger's records with
    # the frames they concern (without validation: none, like findings)
    diagnoser = Diagnoser() if "diagnoses" in config.tables and config.validate else None
    diagnosed: list[Diagnosis] = []
    stats = RunStats()
    options = Options(ports=config.ports, show_credentials=False, keep_bodies=False, tls_keylog=config.tls_keylog,
                      validate=validate or diagnoser is not None,
                      ledger="ledger" in wanted or diagnoser is not None)  # fmt: skip
    sink = ParquetSink({name: file_schema(name) for name in wanted}, constants, TABLE_OF_KIND,
                       parquet_options(config))  # fmt: skip
    error: BaseException | None = None
    stream = None
    try:
        constants["capture_date"] = _first_date(sl.uri)
        stream = open_stream(sl.uri)
        mine = _mine(sl, config)
        dec = open_decoder(stream, codec_for(config.spec), options, select=flow_selector(mine))
        try:
            reads = None if diagnoser is None else set(Diagnoser.READS)
            while (got := dec.to_sink(sink, config.batch_rows, reads)) is not None:
                if diagnoser is not None and isinstance(got, tuple):
                    for ev in got[1]:
                        diagnosed += diagnoser.feed(ev)
                files.write(sink.take())
                if stop is not None and stop.is_set():
                    raise SliceCancelled(sl.uri)
            if diagnoser is not None:
                diagnosed += diagnoser.finish()
        finally:
            stats.update(dec.stats())
    except (TablesWriteError, SliceCancelled):
        raise  # the output's failure or the run's end, not the capture's
    except OSError as exc:  # opening failed (local open or a remote filesystem)
        error = CaptureUnreadable(f"cannot read capture {sl.uri!r}: {exc.strerror or exc}")
    except Exception as exc:  # CaptureError, or a decoder bug: this capture stops, the job goes on
        error = exc
    finally:
        if stream is not None:
            stream.close()
    built = sink.end_events()
    written = sum(built.values())

    def write_rows(table: str, rows: list[dict[str, Any]]) -> None:
        sink.write(table, file_schema(table), records_json(file_schema(table), rows, constants))

    if diagnosed:
        written += len(diagnosed)
        write_rows("diagnoses", [diagnosis_row(d) for d in diagnosed])
    reported: tuple[str, int] | None = None
    if error is not None and "errors" in config.tables and _reports(error, sl):
        code = error.exit_code if isinstance(error, CaptureError) else EXIT_INTERNAL
        message = str(error) if isinstance(error, CaptureError) else f"{type(error).__name__}: {error}"
        row = {"slice": sl.index, "slices": sl.count, "error": type(error).__name__, "exit_code": code,
               "message": message, "packets_read": stats.packets}  # fmt: skip
        write_rows("errors", [row])
        reported = (message, code)
    if "captures" in config.tables:
        acc = stats.accounting_event().to_record()
        acc.update(slice=sl.index, slices=sl.count, size=sl.size, rows=written,
                   seconds=time.perf_counter() - started, ok=error is None)  # fmt: skip
        write_rows("captures", [acc])
    files.write(sink.take())
    last, rows_of = sink.close()
    files.write(last)
    return dict(rows_of), reported


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

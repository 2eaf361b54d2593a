"""What runs on the executors: decode capture slices into Arrow batches for ``mapInArrow``.

The input DataFrame is ``spark.range(P)`` with one id per partition; id ``p`` selects the list of
slices the driver packed into partition ``p`` (``JobConfig.partitions``). One ``mapInArrow`` stage
emits the rows of every table at once: each batch has a ``table`` column and one struct column per
table, only one of them filled, so the captures are read once and the driver splits the result
into datasets.
"""

from __future__ import annotations

import datetime as dt
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa

from amqpscope.capture import CaptureError, CaptureUnreadable, read_packets
from amqpscope.dissect.codec import Codec, get_codec
from amqpscope.events import Event
from amqpscope.packets import RawPacket
from amqpscope.pipeline import RunStats
from amqpscope.session import Options
from amqpscope.validate.validator import Validator

from .inputs import open_stream
from .rows import TableRows
from .schema import TABLE_OF_KIND, TABLES
from .split import FlowKey, decode_slice, hash_slice, plan_slices

TABLE_COLUMN = "table"
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
    spec: str | None = None
    ports: frozenset[int] = frozenset({5672})
    batch_rows: int = 65536  # rows per Arrow batch: bounds executor memory whatever the file size
    plan_bytes: int = 32 << 20  # capture prefix weighed to split a capture by flow (split.py)
    tables: tuple[str, ...] = field(default_factory=lambda: tuple(TABLES))
    validate: bool = True  # run the validator stage: its findings fill the ``findings`` table


def output_schema() -> pa.Schema:
    """``table`` plus one nullable struct per table."""
    return pa.schema([pa.field(TABLE_COLUMN, pa.string(), nullable=False)]
                     + [pa.field(t.name, pa.struct(list(t.schema))) for t in TABLES.values()])  # fmt: skip


_OUTPUT = output_schema()
_codecs: dict[str | None, Codec] = {}  # Python workers are reused across tasks: compile a spec once
_validators: dict[str | None, Validator] = {}


def _codec(spec: str | None) -> Codec:
    codec = _codecs.get(spec)
    if codec is None:
        codec = _codecs[spec] = get_codec(spec)
    return codec


def _validator(spec: str | None) -> Validator:
    """The validator compiled from a spec (its grammars), kept per worker; state is per capture."""
    v = _validators.get(spec)
    if v is None:
        v = _validators[spec] = Validator(_codec(spec).spec)
    return v


def wrap(table: str, batch: pa.RecordBatch) -> pa.RecordBatch:
    """One table's batch as an output batch (the other tables' structs are null)."""
    n = batch.num_rows
    arrays: list[pa.Array] = [pa.repeat(pa.scalar(table), n)]
    for f in _OUTPUT:
        if f.name == table:
            arrays.append(pa.StructArray.from_arrays(batch.columns, fields=list(batch.schema)))
        elif f.name != TABLE_COLUMN:
            arrays.append(pa.nulls(n, f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=_OUTPUT)


def run_partitions(config: JobConfig, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function: partition ids in, table rows out."""
    for rb in batches:
        for pid in rb.column(0).to_pylist():
            for sl in config.partitions[pid]:
                for table, batch in decode_capture(sl, config):
                    yield wrap(table, batch)


def _date(packet: RawPacket) -> str:
    return dt.datetime.fromtimestamp(packet.ts_ns / 1e9, dt.UTC).strftime("%Y-%m-%d")


def _mine(sl: Slice, config: JobConfig) -> Callable[[FlowKey], bool] | None:
    """The flow filter of a slice (None: the whole capture). A read error in the planning
    prefix ends the plan early; the decode pass reports it."""
    if sl.count == 1:
        return None
    stream = open_stream(sl.uri)
    plan: dict[FlowKey, int] = {}
    try:
        plan = plan_slices(read_packets(stream), sl.count, config.plan_bytes)
    except (CaptureError, OSError):
        pass
    finally:
        stream.close()
    return lambda key: plan.get(key, hash_slice(key, sl.count)) == sl.index


def decode_capture(sl: Slice, config: JobConfig) -> Iterator[tuple[str, pa.RecordBatch]]:
    """(table, batch) pairs of one capture slice; a read error becomes an ``errors`` row after
    the rows decoded before it."""
    started = time.perf_counter()
    constants = {"capture": sl.uri, "capture_id": sl.capture_id, "capture_date": UNKNOWN_DATE}
    rows = {name: TableRows(TABLES[name], constants) for name in config.tables}
    stats = RunStats()
    options = Options(ports=config.ports, show_credentials=False, keep_bodies=False)
    error: BaseException | None = None
    written = 0
    stream = None
    try:
        stream = open_stream(sl.uri)
        packets = read_packets(stream)
        first = next(packets, None)
        if first is not None:
            constants["capture_date"] = _date(first)
            packets = itertools.chain((first,), packets)
        events: Iterator[Event] = decode_slice(packets, _codec(config.spec), options, stats, _mine(sl, config))
        if config.validate:
            # per slice: connection checks are exact; the few that look across connections
            # (exclusive queues, exchanges declared elsewhere) see only this slice's connections
            events = _validator(config.spec).stage(events)
        for ev in events:
            name = TABLE_OF_KIND.get(ev.kind)
            table = rows.get(name) if name else None
            if table is None:
                continue
            table.add(ev)
            if len(table) >= config.batch_rows:
                written += len(table)
                yield table.table.name, table.cut()
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

"""The Parquet tables of ``amqpscope batch``, derived from the event model (``amqpscope.events``).

Nothing here lists event fields by hand: every table's columns come from ``dataclasses.fields`` of
the event classes it stores (fields with ``metadata record=False`` — payloads, bodies — excluded,
as in ``Event.to_record``), so a field added to ``events.py`` appears in the tables by itself.
``SCHEMA_FINGERPRINT`` pins the derived result: when ``events.py`` changes, the sync test fails
until ``SCHEMA_VERSION`` is bumped and the fingerprint updated, so readers of an archive always
learn about a change of layout.

Only pyarrow is imported: the Spark ``StructType`` is converted from the Arrow schema
(``spark_schema``), so the two can never disagree.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from amqpscope.events import (
    Accounting,
    Connection,
    Event,
    Finding,
    Frame,
    Gap,
    Ledger,
    Malformed,
    Message,
    ProtocolHeader,
    Resync,
    Tls,
)

SCHEMA_VERSION = 5  # 5: connections say how TCP ended (fin_by/_packet, rst_by/_packet) and the opening
SCHEMA_FINGERPRINT = "c3b87467a5700592"  # of describe(); see module doc before changing

# Partition columns, last in every table: the capture's UTC day (of its first packet) and a stable
# id of its URI. Rerunning the job over a capture overwrites exactly its partitions.
PARTITION_COLUMNS = ("capture_date", "capture_id")

# Never written, whatever the options: the Parquet archive is shared more widely than a terminal.
EXCLUDED_FIELDS = frozenset({"password"})

# Arguments and properties promoted to typed columns, so the usual queries need no map lookups.
# The ``args`` and ``properties`` maps hold the rest: a value its column holds (of the column's
# type) is not repeated in the map. Names must not clash with event fields: channel.close's class_id/method_id
# args are only in the map, and the ``type`` property becomes ``message_type``.
PROMOTED_ARGS: tuple[tuple[str, pa.DataType], ...] = (
    ("exchange", pa.string()),
    ("routing_key", pa.string()),
    ("queue", pa.string()),
    ("consumer_tag", pa.string()),
    ("delivery_tag", pa.int64()),
    ("multiple", pa.bool_()),
    ("requeue", pa.bool_()),
    ("redelivered", pa.bool_()),
    ("mandatory", pa.bool_()),
    ("no_ack", pa.bool_()),
    ("reply_code", pa.int64()),
    ("reply_text", pa.string()),
    ("message_count", pa.int64()),
    ("consumer_count", pa.int64()),
    ("prefetch_count", pa.int64()),
)
PROMOTED_PROPERTIES: tuple[tuple[str, str, pa.DataType], ...] = (  # (property, column, type)
    ("content_type", "content_type", pa.string()),
    ("content_encoding", "content_encoding", pa.string()),
    ("delivery_mode", "delivery_mode", pa.int64()),
    ("priority", "priority", pa.int64()),
    ("correlation_id", "correlation_id", pa.string()),
    ("reply_to", "reply_to", pa.string()),
    ("expiration", "expiration", pa.string()),
    ("message_id", "message_id", pa.string()),
    ("type", "message_type", pa.string()),
    ("user_id", "user_id", pa.string()),
    ("app_id", "app_id", pa.string()),
)

MAP = pa.map_(pa.string(), pa.string())
TIMESTAMP = pa.timestamp("us", tz="UTC")

# Scalar annotations of events.py → Arrow. Anything else makes derivation fail loudly (and the
# sync test with it) instead of silently writing a lossy column.
_SCALARS: dict[str, pa.DataType] = {
    "int": pa.int64(),
    "float": pa.float64(),
    "str": pa.string(),
    "bool": pa.bool_(),
    "dict[str, Any]": MAP,  # values: strings as is, anything else as JSON
    "tuple[int, ...]": pa.list_(pa.int64()),
}


@dataclass(frozen=True)
class Table:
    """One output dataset: its Arrow schema and the event classes whose rows it holds."""

    name: str
    schema: pa.Schema
    classes: tuple[type[Event], ...]
    promoted: bool = False  # has the PROMOTED_* columns (frames and messages)


def arrow_type(annotation: str) -> tuple[pa.DataType, bool]:
    """(type, nullable) of a dataclass field annotation as written in events.py."""
    parts = [p.strip() for p in annotation.split("|")]
    nullable = "None" in parts
    parts = [p for p in parts if p != "None"]
    if len(parts) != 1 or parts[0] not in _SCALARS:
        raise TypeError(f"no Parquet type for event field annotation {annotation!r}")
    return _SCALARS[parts[0]], nullable


def record_fields(cls: type[Event]) -> list[dataclasses.Field[Any]]:
    """The fields of ``cls`` that ``to_record`` outputs, minus the excluded ones."""
    return [f for f in dataclasses.fields(cls) if f.metadata.get("record", True) and f.name not in EXCLUDED_FIELDS]


_CAPTURE = [pa.field("capture", pa.string(), nullable=False)]  # the input URI
_PARTS = [pa.field(name, pa.string(), nullable=False) for name in PARTITION_COLUMNS]


def _event_table(name: str, classes: tuple[type[Event], ...], promoted: bool = False, seq: bool = True) -> Table:
    """Columns: capture, kind, ``seq``, the union of the classes' fields (first occurrence decides
    the order), ``time`` after ``ts``, promoted columns, then the partition columns.

    ``seq`` is the event's number in its decode (0, 1, … over the events of every table, per
    capture slice): ordering the rows of all tables by it gives back the decoder's event stream,
    which ``stats``/``report`` over the tables need (a ledger record between two frames)."""
    cols: dict[str, pa.Field] = {"capture": _CAPTURE[0], "kind": pa.field("kind", pa.string(), nullable=False)}
    if seq:
        cols["seq"] = pa.field("seq", pa.int64(), nullable=False)
    for cls in classes:
        for f in record_fields(cls):
            typ, nullable = arrow_type(str(f.type))
            nullable = nullable or (len(classes) > 1 and not all(f.name in _names(c) for c in classes))
            old = cols.get(f.name)
            if old is not None:
                if old.type != typ:
                    raise TypeError(f"{name}: field {f.name!r} has types {old.type} and {typ}")
                if nullable and not old.nullable:
                    cols[f.name] = old.with_nullable(True)
                continue
            cols[f.name] = pa.field(f.name, typ, nullable=nullable)
            if f.name == "ts":
                cols["time"] = pa.field("time", TIMESTAMP, nullable=False)  # ts as a SQL timestamp
    if promoted:
        for col, typ in PROMOTED_ARGS:
            _add_new(cols, pa.field(col, typ), name)
        for _prop, col, typ in PROMOTED_PROPERTIES:
            _add_new(cols, pa.field(col, typ), name)
    for f in _PARTS:
        _add_new(cols, f, name)
    meta = {b"amqpscope.table": name.encode(), b"amqpscope.schema_version": str(SCHEMA_VERSION).encode()}
    return Table(name, pa.schema(list(cols.values()), metadata=meta), classes, promoted)


def _names(cls: type[Event]) -> set[str]:
    return {f.name for f in record_fields(cls)}


def _add_new(cols: dict[str, pa.Field], field: pa.Field, table: str) -> None:
    if field.name in cols:
        raise TypeError(f"{table}: column {field.name!r} clashes with an event field")
    cols[field.name] = field


def _errors_table() -> Table:
    """Not events: one row per capture (slice) that could not be read to its end."""
    fields = [
        *_CAPTURE,
        pa.field("slice", pa.int32(), nullable=False),
        pa.field("slices", pa.int32(), nullable=False),
        pa.field("error", pa.string(), nullable=False),  # exception class, e.g. TruncatedCapture
        pa.field("exit_code", pa.int32(), nullable=False),  # the CLI's exit code for it
        pa.field("message", pa.string(), nullable=False),
        pa.field("packets_read", pa.int64(), nullable=False),  # rows of packets before it are kept
        *_PARTS,
    ]
    meta = {b"amqpscope.table": b"errors", b"amqpscope.schema_version": str(SCHEMA_VERSION).encode()}
    return Table("errors", pa.schema(fields, metadata=meta), ())


def _diagnoses_table() -> Table:
    """Not events: one row per cause ``diagnose`` reports (``amqpscope.diagnose.Diagnosis``), with
    the fields of its JSON record; ``ts``/``time`` are when the cause began (``since``)."""
    fields = [
        *_CAPTURE,
        pa.field("kind", pa.string(), nullable=False),  # "diagnosis"
        pa.field("cause", pa.string(), nullable=False),
        pa.field("severity", pa.string(), nullable=False),
        pa.field("impact", pa.string(), nullable=False),
        pa.field("conn", pa.int64(), nullable=False),
        pa.field("client", pa.string()),
        pa.field("product", pa.string()),
        pa.field("connection_name", pa.string()),
        pa.field("channel", pa.int64()),
        pa.field("packets", pa.list_(pa.int64()), nullable=False),
        pa.field("ts", pa.float64(), nullable=False),
        pa.field("time", TIMESTAMP, nullable=False),
        pa.field("since", pa.float64(), nullable=False),
        pa.field("until", pa.float64(), nullable=False),
        pa.field("duration_s", pa.float64(), nullable=False),
        pa.field("summary", pa.string(), nullable=False),
        pa.field("broker_action", pa.string(), nullable=False),
        pa.field("details", MAP),  # values: strings as is, anything else as JSON
        *_PARTS,
    ]
    meta = {b"amqpscope.table": b"diagnoses", b"amqpscope.schema_version": str(SCHEMA_VERSION).encode()}
    return Table("diagnoses", pa.schema(fields, metadata=meta), ())


def _captures_table() -> Table:
    """One row per decoded capture slice: the byte accounting plus what the task did."""
    base = _event_table("captures", (Accounting,), seq=False)
    extra = [
        pa.field("slice", pa.int32(), nullable=False),
        pa.field("slices", pa.int32(), nullable=False),
        pa.field("size", pa.int64()),  # file size in bytes (compressed size for .gz etc.)
        pa.field("rows", pa.int64(), nullable=False),  # rows written to the other tables
        pa.field("seconds", pa.float64(), nullable=False),
        pa.field("ok", pa.bool_(), nullable=False),
    ]
    fields = [f for f in base.schema if f.name not in PARTITION_COLUMNS] + extra + _PARTS
    return Table("captures", pa.schema(fields, metadata=base.schema.metadata), (Accounting,))


TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        _event_table("events", (Frame, ProtocolHeader, Gap, Resync, Malformed), promoted=True),
        _event_table("messages", (Message,), promoted=True),
        _event_table("connections", (Connection, Tls)),
        _event_table("findings", (Finding,)),
        _diagnoses_table(),
        _event_table("ledger", (Ledger,)),
        _errors_table(),
        _captures_table(),
    )
}

TABLE_OF_KIND: dict[str, str] = {cls.kind: t.name for t in TABLES.values() for cls in t.classes}


def describe() -> str:
    """A canonical text of every table's columns, the input of ``fingerprint``."""
    lines = []
    for t in TABLES.values():
        for f in t.schema:
            lines.append(f"{t.name}.{f.name}:{f.type}:{'null' if f.nullable else 'not null'}")
    return "\n".join(lines)


def fingerprint() -> str:
    return hashlib.sha256(describe().encode()).hexdigest()[:16]


def spark_schema(table: str | pa.Schema) -> Any:
    """The Spark ``StructType`` of a table (imports pyspark, so only call it where Spark runs)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    schema = TABLES[table].schema if isinstance(table, str) else table
    return from_arrow_schema(schema)

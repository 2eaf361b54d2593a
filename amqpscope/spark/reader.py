"""Events back from the Parquet tables, for ``stats`` and ``report`` over an archive.

A directory written by ``amqpscope batch`` or ``decode --format parquet`` (recognised by its
``_amqpscope.json``) holds, per capture, the rows of every event the decoder emitted: frames and
the like in ``events``, then ``messages``, ``connections`` (with TLS), ``findings`` and
``ledger``. Each row's ``seq`` is its event's number in the decode of its capture slice, so
merging the tables' rows by ``seq`` gives back the decoder's event stream, which is what the
Analyzer was fed when it ran on the capture itself (a ledger record lands between the same two
frames). Nothing is decoded again and only pyarrow is needed (``pyarrow.dataset``, one partition
at a time, read in batches: memory does not grow with the capture's size). Local directories
only: ``hdfs://`` or ``s3a://`` output is read where it is mounted.

The promoted columns' values are put back into ``args`` and ``properties`` (the maps hold only
the rest), in the spec's field order. Values come back as the events had them, with two limits of
the tables' map columns (``args``, ``properties``, connection properties: strings as they are,
anything else as JSON text): the arguments and properties are typed again from the spec (a field
of a string type stays text, any other is parsed from its JSON), and the values of field tables
(``headers``, ``arguments``, ``client_properties`` …) come back as their JSON text, not as nested
values.
Passwords are never in the tables. A capture the Spark job split into slices (by connection) has
its slices' streams merged by packet number: the order within each connection is exact, the
interleaving of connections of different slices is that of their packets.
"""

from __future__ import annotations

import fnmatch
import heapq
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds

from amqpscope.dissect.spec import Spec
from amqpscope.events import (
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

from .job import MANIFEST
from .schema import PARTITION_COLUMNS, PROMOTED_ARGS, PROMOTED_PROPERTIES, SCHEMA_VERSION, TABLES, record_fields

# The tables an analysis reads, in the order their rows are merged for equal keys (never needed:
# seq numbers are unique within a slice).
EVENT_TABLES = ("events", "messages", "connections", "findings", "ledger")
STRING_TYPES = frozenset({"shortstr", "longstr"})
MAP_COLUMNS = frozenset({"args", "properties", "client_properties", "server_properties"})
CLASSES: dict[str, type[Event]] = {cls.kind: cls for cls in (Frame, ProtocolHeader, Gap, Resync, Malformed, Message,
                                                              Connection, Tls, Finding, Ledger)}  # fmt: skip
# (key, column) of the promoted values of each map: ``args`` and ``properties`` hold the rest
PROMOTED_KEYS = {"args": [(c, c) for c, _ in PROMOTED_ARGS], "properties": [(p, c) for p, c, _ in PROMOTED_PROPERTIES]}
_SLICE = re.compile(r"part-(\d+)-")
_PARTITIONS = pa.schema([pa.field(name, pa.string()) for name in PARTITION_COLUMNS])
BATCH_ROWS = 8192


class TablesError(Exception):
    """Not a directory of amqpscope tables, or one of another schema version."""


@dataclass(frozen=True, slots=True)
class CaptureTables:
    """One capture of a tables directory."""

    capture: str  # the URI it was decoded from
    capture_id: str
    capture_date: str
    error: str | None = None  # the first ``errors`` row's message: it was not read to its end
    exit_code: int = 0


def is_tables_dir(path: str) -> bool:
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, MANIFEST))


def check_manifest(root: str) -> None:
    try:
        with open(os.path.join(root, MANIFEST), encoding="utf-8") as f:
            found = json.load(f).get("schema_version")
    except (OSError, ValueError, AttributeError) as exc:
        raise TablesError(f"{root}/{MANIFEST} is not an amqpscope manifest: {exc}") from None
    if found != SCHEMA_VERSION:
        raise TablesError(f"{root} holds tables of schema version {found}; this amqpscope reads version "
                          f"{SCHEMA_VERSION}")  # fmt: skip


def _dataset(root: str, table: str) -> ds.Dataset | None:
    path = os.path.join(root, table)
    if not os.path.isdir(path):
        return None
    # partition values as strings: a capture_date of "unknown" is not a date
    return ds.dataset(path, format="parquet", partitioning=ds.partitioning(_PARTITIONS, flavor="hive"),
                      exclude_invalid_files=False, ignore_prefixes=[".", "_"])  # fmt: skip


def list_captures(root: str, select: Sequence[str] = ()) -> list[CaptureTables]:
    """The captures of ``root``, by URI; ``select``: capture ids or globs on the URI (any matches)."""
    check_manifest(root)
    found: dict[str, tuple[str, str]] = {}  # capture_id → (uri, date)
    for table in ("captures", *EVENT_TABLES, "errors"):
        data = _dataset(root, table)
        if data is None:
            continue
        for frag in data.get_fragments():
            parts = ds.get_partition_keys(frag.partition_expression)
            cid, date = str(parts.get("capture_id")), str(parts.get("capture_date"))
            if cid in found:
                continue
            uri = frag.head(1, columns=["capture"]).column(0)
            if len(uri):
                found[cid] = (str(uri[0]), date)
    errors: dict[str, tuple[str, int]] = {}
    data = _dataset(root, "errors")
    if data is not None:
        for row in sorted(data.to_table(columns=["capture_id", "slice", "message", "exit_code"]).to_pylist(),
                          key=lambda r: (r["capture_id"], r["slice"])):  # fmt: skip
            errors.setdefault(row["capture_id"], (row["message"], row["exit_code"]))
    out = []
    for cid, (uri, date) in found.items():
        if select and not any(s == cid or fnmatch.fnmatchcase(uri, s) for s in select):
            continue
        message, code = errors.get(cid, (None, 0))
        out.append(CaptureTables(uri, cid, date, message, code))
    return sorted(out, key=lambda c: (c.capture, c.capture_id))


class _Typer:
    """Arguments and properties from map entries, typed by the spec."""

    def __init__(self, spec: Spec) -> None:
        self.methods = {m.full_name: {f.ident: f.type for f in m.fields} for m in spec.methods()}
        self.props = {c.index: {p.ident: p.type for p in c.properties} for c in spec.classes}

    @staticmethod
    def typed(entries: list[tuple[str, str]] | None, types: dict[str, str] | None) -> dict[str, Any] | None:
        if entries is None:
            return None
        out: dict[str, Any] = {}
        for key, text in entries:
            if types is not None and types.get(key) in STRING_TYPES:
                out[key] = text
                continue
            try:
                out[key] = json.loads(text)
            except ValueError:
                out[key] = text  # not JSON: a string (a field the spec does not know)
        return out

    @staticmethod
    def merged(rest: dict[str, Any] | None, held: dict[str, Any], types: dict[str, str] | None) -> dict[str, Any] | None:
        """A map's rest with the values its promoted columns held (``held``, non-null only) put
        back, in the spec's field order (the wire's), then what the spec does not name."""
        if not held:
            return rest
        out = dict(rest or {})
        out.update(held)
        if types is None:
            return out
        ordered = {k: out.pop(k) for k in types if k in out}
        ordered.update(out)
        return ordered

    @staticmethod
    def texts(entries: list[tuple[str, str]] | None) -> dict[str, Any] | None:
        return None if entries is None else dict(entries)


def _maker(cls: type[Event], names: set[str], typer: _Typer) -> Callable[[dict[str, list[Any]], int], Event]:
    """The event of row ``i`` of a batch's columns (``name → values``)."""
    fields = [f.name for f in record_fields(cls) if f.name in names]
    plain = [f for f in fields if f not in MAP_COLUMNS and f != "packets"]
    maps = [f for f in fields if f in MAP_COLUMNS]
    packets = "packets" in fields and cls is Finding
    defaulted = _DEFAULTED[cls]
    # (key, column) of the values the maps leave to promoted columns, when the table has them
    held = {src: [(key, col) for key, col in pairs if col in names] for src, pairs in PROMOTED_KEYS.items()}

    def promoted(cols: dict[str, list[Any]], i: int, src: str) -> dict[str, Any]:
        return {key: v for key, col in held[src] if (v := cols[col][i]) is not None}

    def make(cols: dict[str, list[Any]], i: int) -> Event:
        kw = {f: cols[f][i] for f in plain}
        if packets:
            kw["packets"] = tuple(cols["packets"][i] or ())
        for f in maps:
            entries = cols[f][i]
            if f == "args":
                types = typer.methods.get(cols["method"][i] or "")
                kw[f] = typer.merged(typer.typed(entries, types), promoted(cols, i, f), types)
            elif f == "properties":
                cid = cols["class_id"][i] if "class_id" in cols else None
                types = typer.props.get(cid if cid is not None else 60)
                kw[f] = typer.merged(typer.typed(entries, types), promoted(cols, i, f), types)
            else:
                kw[f] = typer.texts(entries)
        if cls is Message:
            kw["args"] = kw.get("args") or {}
            kw["properties"] = kw.get("properties") or {}
        for k in [k for k, v in kw.items() if v is None and k in defaulted]:
            del kw[k]  # a default, not a null: the column is null for other kinds of the table
        return cls(**kw)

    return make


def _defaulted(cls: type[Event]) -> frozenset[str]:
    import dataclasses

    return frozenset(f.name for f in dataclasses.fields(cls)
                     if f.default is not dataclasses.MISSING and f.default is not None)  # fmt: skip


_DEFAULTED = {cls: _defaulted(cls) for cls in CLASSES.values()}


def _rows(fragment: ds.Fragment, columns: list[str], table: str, typer: _Typer
          ) -> Iterator[tuple[int, int, Event]]:  # fmt: skip
    """(seq, packet, event) of one file, in its order; a batch of rows at a time, no read-ahead."""
    makers: dict[str, Callable[[dict[str, list[Any]], int], Event]] = {}
    names = set(columns)
    for batch in fragment.to_batches(columns=columns, batch_size=BATCH_ROWS, batch_readahead=0,
                                     fragment_readahead=0, use_threads=False):  # fmt: skip
        cols = {name: batch.column(j).to_pylist() for j, name in enumerate(batch.schema.names)}
        kinds, seqs, packets = cols["kind"], cols["seq"], cols["packet"]
        for i, kind in enumerate(kinds):
            make = makers.get(kind)
            if make is None:
                cls = CLASSES.get(kind)
                if cls is None:
                    raise TablesError(f"{table}: rows of kind {kind!r} are not events this amqpscope reads")
                make = makers[kind] = _maker(cls, names, typer)
            yield seqs[i], packets[i], make(cols, i)


def capture_events(root: str, cap: CaptureTables, spec: Spec, findings: bool = True) -> Iterator[Event]:
    """The events of one capture in the decoder's order (see the module doc)."""
    typer = _Typer(spec)
    slices: dict[int, list[Iterator[tuple[int, int, Event]]]] = {}
    for table in EVENT_TABLES:
        if table == "findings" and not findings:
            continue
        data = _dataset(root, table)
        if data is None:
            continue
        wanted = {"kind", "seq"} | {f.name for cls in TABLES[table].classes for f in record_fields(cls)}
        if TABLES[table].promoted:
            wanted |= {col for pairs in PROMOTED_KEYS.values() for _key, col in pairs}
        columns = [f.name for f in TABLES[table].schema if f.name in wanted]
        flt = ds.field("capture_id") == cap.capture_id
        for frag in data.get_fragments(filter=flt):
            m = _SLICE.search(os.path.basename(frag.path))
            index = int(m.group(1)) if m else 0
            slices.setdefault(index, []).append(_rows(frag, columns, table, typer))
    streams = [heapq.merge(*parts, key=lambda r: r[0]) for _, parts in sorted(slices.items())]
    merged: Iterable[tuple[int, int, Event]] = streams[0] if len(streams) == 1 else heapq.merge(
        *streams, key=lambda r: r[1])
    for _seq, _packet, ev in merged:
        yield ev

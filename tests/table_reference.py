"""The rows the Parquet tables must hold, built independently of the code that writes them: from
each event's ``to_record()`` (the JSON lines' dict), column by column of the declared schema
(``seq``, the event's number in its decode, is checked apart: ``check_rows``' ``seqs``). The
core's Arrow batches (test_native_arrow), the Spark job and ``decode --format parquet``
(test_spark) are all checked against these rows."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from amqpscope.events import Event
from amqpscope.output.records import dumps
from amqpscope.spark import schema

_PROMOTED = {col: (src, key, typ) for src, pairs in (
    ("args", [(c, c, t) for c, t in schema.PROMOTED_ARGS]),
    ("properties", schema.PROMOTED_PROPERTIES)) for key, col, typ in pairs}  # fmt: skip
_PY = {pa.string(): str, pa.int64(): int, pa.bool_(): bool}
MAPS = ("args", "properties", "client_properties", "server_properties")
# Not in the rows compared: ``time`` (checked from ``ts``) and ``seq`` (numbered per capture slice:
# a capture the Spark job splits numbers each slice's events from 0).
UNCOMPARED = frozenset({"time", "seq"})


def map_entries(d: dict[str, Any] | None) -> list[tuple[str, str]] | None:
    """A dict as the map column holds it, in the dict's order: strings as they are, every other
    value as the JSON text the JSON lines carry."""
    if d is None:
        return None
    return [(k, v if isinstance(v, str) else dumps(v)) for k, v in d.items()]


def _map(d: dict[str, Any] | None) -> tuple[tuple[str, str], ...] | None:
    entries = map_entries(d)
    return None if entries is None else tuple(sorted(entries))


_REST = ("args", "properties")  # in tables with promoted columns: what no promoted column holds


def _rest(src: str, d: dict[str, Any] | None) -> dict[str, Any] | None:
    if d is None:
        return None
    held = {key: typ for col, (s, key, typ) in _PROMOTED.items() if s == src}
    return {k: v for k, v in d.items() if not (k in held and type(v) is _PY[held[k]])}


def expected_row(table: schema.Table, uri: str, ev: Event) -> tuple[Any, ...]:
    """The row a table should hold for an event (without the partition columns and ``time``)."""
    rec = ev.to_record()
    out: list[Any] = []
    for f in table.schema:
        name = f.name
        if name in schema.PARTITION_COLUMNS or name in UNCOMPARED:
            continue
        if name == "capture":
            value: Any = uri
        elif name in rec and f.type == schema.MAP and table.promoted and name in _REST:
            value = _map(_rest(name, rec[name]))
        elif name in rec:
            value = _map(rec[name]) if f.type == schema.MAP else rec[name]
            if isinstance(value, list):
                value = tuple(value)
        elif name in _PROMOTED and table.promoted:
            src, key, typ = _PROMOTED[name]
            v = (rec.get(src) or {}).get(key)
            value = v if type(v) is _PY[typ] else None
        else:
            value = None
        out.append((name, value))
    return tuple(out)


def actual_rows(table: schema.Table, rows: Iterable[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """Rows read back (``to_pylist``) in the form of ``expected_row``."""
    out = []
    for r in rows:
        items = []
        for f in table.schema:
            if f.name in schema.PARTITION_COLUMNS or f.name in UNCOMPARED:
                continue
            v = r[f.name]
            if f.type == schema.MAP and v is not None:
                v = tuple(sorted(v))
            elif isinstance(v, list):
                v = tuple(v)
            items.append((f.name, v))
        out.append(tuple(items))
    return out


def check_rows(table: schema.Table, uri: str, events: list[Event], got: list[dict[str, Any]],
               seqs: list[int] | None = None) -> None:  # fmt: skip
    """Row for row, in order: the values of ``to_record``, map entries in the dict's own order,
    ``time`` from ``ts`` (microseconds, truncated) and, given ``seqs`` (each event's number in
    the decoder's stream), ``seq``."""
    assert len(got) == len(events), f"{table.name}: {len(got)} rows for {len(events)} events"
    if seqs is not None:
        assert [r["seq"] for r in got] == seqs, f"{table.name}: seq"
    want = [expected_row(table, uri, ev) for ev in events]
    have = actual_rows(table, got)
    for i, (a, b) in enumerate(zip(have, want, strict=True)):
        assert a == b, f"{table.name} row {i}: {dict(a)} != {dict(b)}"
    for ev, row in zip(events, got, strict=True):
        for name in MAPS:
            if name in row:
                d = getattr(ev, name, None)
                if table.promoted and name in _REST:
                    d = _rest(name, d)
                assert row[name] == map_entries(d), (table.name, name)
        assert row["time"] == dt.datetime.fromtimestamp(int(ev.ts * 1e6) / 1e6, dt.UTC)

"""Events → Arrow record batches, built column by column when a batch is cut.

``add`` only keeps the (immutable) event; ``cut`` builds the batch one event class at a time (a
batch is nearly always one class: frames, or messages). The fields of a class are read from all
its events in one pass by a loop compiled for the class (slot reads the interpreter specialises;
about twice as fast as one ``map(attrgetter(name))`` per column), a column the class does not have
is ``pa.nulls`` without a per-row step. A batch that mixes classes is built run by run and
concatenated when it has few runs (protocol headers where connections start), else class by class
and put back in event order by one ``take``.

Map columns (``args``, ``properties``, connection properties) are built once per distinct dict,
not once per row: the decoder shares dict objects between events (every header frame of a
publisher carries the same properties dict; a message has its method frame's args), so the rows
are grouped by the dict's identity (``id``, stable while the batch holds the events, found with
Arrow's ``dictionary_encode``), the distinct dicts become a small map array, and the column is a
``take`` of it. The promoted argument and property columns are taken from the same distinct dicts
with the same indices, so Python touches each distinct dict once. Columns that are the same for
the whole capture (capture URI, partition values) and ``time`` (derived from ``ts``) are
vectorised.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from amqpscope.events import Event
from amqpscope.output.records import dumps

from .schema import MAP, PROMOTED_ARGS, PROMOTED_PROPERTIES, Table, record_fields

_PY = {pa.string(): str, pa.int64(): int, pa.bool_(): bool}  # exact class checks, no coercion
_ARGS = {key: (key, _PY[typ]) for key, typ in PROMOTED_ARGS}  # argument -> (column, class)
_PROPS = {key: (col, _PY[typ]) for key, col, typ in PROMOTED_PROPERTIES}
_PROMOTED = frozenset(c for c, _ in _ARGS.values()) | frozenset(c for c, _ in _PROPS.values())
_SOURCES = {"args": _ARGS, "properties": _PROPS}


def _bool_text(v: bool) -> str:
    return "true" if v else "false"


# JSON text of the common scalars without a call into the JSON encoder (same text as ``dumps``)
_TEXT: dict[type, Any] = {str: str, int: int.__repr__, bool: _bool_text}


def map_items(d: dict[str, Any] | None) -> list[tuple[str, str]] | None:
    """A dict as map<string,string> entries: strings as they are, other values as JSON text."""
    if d is None:
        return None
    text = _TEXT.get
    return [(k, (text(v.__class__) or dumps)(v)) for k, v in d.items()]


def _text(v: Any) -> str:
    return (_TEXT.get(v.__class__) or dumps)(v)  # type: ignore[no-any-return]


class _Flat:
    """A column of dicts flattened: keys, raw values and the row of each entry."""

    def __init__(self, dicts: list[dict[str, Any] | None]) -> None:
        offsets = [0]
        keys: list[str] = []
        raw: list[Any] = []
        nulls = 0
        for d in dicts:
            if d is None:
                nulls += 1
            else:
                keys.extend(d)
                raw.extend(d.values())
            offsets.append(len(keys))
        self.n = len(dicts)
        self.raw = raw
        self.keys = pa.array(keys, pa.string())
        self.offsets = pa.array(offsets, pa.int32())
        self.mask = pa.array([d is None for d in dicts], pa.bool_()) if nulls else None

    def map_array(self, typ: pa.DataType = MAP) -> pa.Array:
        values = [v if v.__class__ is str else _text(v) for v in self.raw]
        return pa.MapArray.from_arrays(self.offsets, self.keys, pa.array(values, pa.string()), type=typ,
                                       mask=self.mask)  # fmt: skip

    def pick(self, spec: dict[str, tuple[str, type]]) -> dict[str, list[Any]]:
        """Typed columns of chosen keys: the entries are found by pyarrow (a C scan per key);
        Python touches only the entries that match."""
        out: dict[str, list[Any]] = {}
        parents: pa.Array | None = None
        raw = self.raw
        for key, (col, cls) in spec.items():
            found = pc.indices_nonzero(pc.equal(self.keys, key))
            if not len(found):
                continue
            if parents is None:
                parents = pc.list_parent_indices(pa.ListArray.from_arrays(self.offsets, self.keys))
            values: list[Any] = [None] * self.n
            for p, row in zip(found.to_pylist(), parents.take(found).to_pylist(), strict=True):
                v = raw[p]
                if v.__class__ is cls:
                    values[row] = v
            out[col] = values
        return out


def map_array(dicts: list[dict[str, Any] | None], typ: pa.DataType = MAP) -> pa.Array:
    """Dicts as one map<string,string> array, built from flat key and value lists (one C-level
    ``extend`` per row instead of a list of tuples per row); the values as ``map_items`` does."""
    return _Flat(dicts).map_array(typ)


def distinct(values: list[Any]) -> tuple[list[Any], pa.Array | None]:
    """The distinct objects of ``values`` by identity, in order of first appearance, and the
    index of each row's object among them (None when every row has its own object). Identity is
    only meaningful while ``values`` holds the objects: use the result at once."""
    ids = pa.array(map(id, values), pa.uint64(), size=len(values))
    enc = pc.dictionary_encode(ids)
    if len(enc.dictionary) == len(values):
        return values, None
    first = pc.index_in(enc.dictionary, value_set=ids)  # the row where each object first appears
    return [values[i] for i in first.to_pylist()], enc.indices


_FEW_RUNS = 16  # a mixed batch with up to this many runs of one class is built run by run


def _array(values: list[Any], typ: pa.DataType) -> pa.Array:
    if values.count(None) == len(values):  # a C loop: most columns are empty for most batches
        return pa.nulls(len(values), typ)
    return pa.array(values, typ)


def _taken(array: pa.Array, indices: pa.Array | None) -> pa.Array:
    return array if indices is None else array.take(indices)


class TableRows:
    """The rows of one table for one capture slice; ``add`` events, ``cut`` Arrow batches."""

    def __init__(self, table: Table, constants: dict[str, str]) -> None:
        self.table = table
        self.schema = table.schema
        self.constants = constants  # capture, capture_date, capture_id (filled in while decoding)
        self.events: list[Event] = []
        self.rows: list[dict[str, Any]] = []
        self.add = self.events.append  # the hot path: one call per decoded event
        self._fields: dict[type, frozenset[str]] = {}
        self._gatherers: dict[type, tuple[list[str], Callable[[list[Event]], list[list[Any]]]]] = {}
        # the columns built from event fields: not constant, not derived, not promoted
        skip = set(constants) | {"time"} | (_PROMOTED if table.promoted else set())
        self._columns = [f for f in self.schema if f.name not in skip]
        self._promoted = [f for f in self.schema if table.promoted and f.name in _PROMOTED]

    def __len__(self) -> int:
        return len(self.events) + len(self.rows)

    def add_row(self, row: dict[str, Any]) -> None:
        """A row that is not an event (errors, captures): missing columns are null."""
        self.rows.append(row)

    def _names(self, cls: type) -> frozenset[str]:
        names = self._fields.get(cls)
        if names is None:
            names = self._fields[cls] = frozenset(f.name for f in record_fields(cls)) if issubclass(cls, Event) else frozenset()
        return names

    def cut(self, limit: int | None = None) -> pa.RecordBatch:
        """The rows added so far (the first ``limit`` events, if given) as one batch in schema
        order; they leave the table."""
        events, rows = self.events, self.rows
        if limit is not None and len(events) > limit:
            events = events[:limit]
        n = len(events) + len(rows)
        if rows:
            columns: dict[str, Any] = {f.name: [r.get(f.name) for r in rows] for f in self.schema}
        else:
            columns = self._event_columns(events)
        arrays: list[pa.Array] = []
        for f in self.schema:
            if f.name in self.constants:
                arrays.append(pa.repeat(pa.scalar(self.constants[f.name], f.type), n))
            elif f.name == "time" and n:
                ts = columns["ts"]
                ts = ts if isinstance(ts, pa.Array) else pa.array(ts, pa.float64())
                micros = pc.cast(pc.multiply(ts, 1e6), pa.int64(), safe=False)
                arrays.append(micros.cast(f.type))
            else:
                values = columns.get(f.name)
                if values is None:
                    arrays.append(pa.nulls(n, f.type))
                elif isinstance(values, pa.Array):
                    arrays.append(values)
                else:
                    arrays.append(map_array(values, f.type) if f.type == MAP else _array(values, f.type))
        if events is self.events:
            self.events.clear()
        else:
            del self.events[: len(events)]
        self.rows.clear()
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _event_columns(self, events: list[Event]) -> dict[str, pa.Array]:
        """Every column but the constant ones and ``time``, as Arrow arrays of ``len(events)``."""
        if not events:
            return {}  # an empty batch: every column is pa.nulls(0)
        classes = set(map(type, events))
        if len(classes) == 1:
            return self._class_columns(events[0].__class__, events)
        # A mixed batch. Few runs of one class (protocol headers where connections start):
        # each run's columns, concatenated.
        types = list(map(type, events))
        starts = [0] + [i for i in range(1, len(types)) if types[i] is not types[i - 1]]
        if len(starts) <= _FEW_RUNS:
            ends = [*starts[1:], len(types)]
            runs = [self._class_columns(types[a], events[a:b]) for a, b in zip(starts, ends, strict=True)]
            return {name: pa.concat_arrays([r[name] for r in runs]) for name in runs[0]}
        # Many: each class's columns, concatenated, then put back in event order by one take.
        groups: dict[type, list[int]] = {}
        for i, e in enumerate(events):
            pos = groups.get(e.__class__)
            if pos is None:
                pos = groups[e.__class__] = []
            pos.append(i)
        parts = [self._class_columns(cls, [events[i] for i in pos]) for cls, pos in groups.items()]
        order = pc.sort_indices(pa.array([i for pos in groups.values() for i in pos], pa.int64()))
        return {name: pa.concat_arrays([p[name] for p in parts]).take(order) for name in parts[0]}

    def _gatherer(self, cls: type) -> tuple[list[str], Callable[[list[Event]], list[list[Any]]]]:
        """The fields of ``cls`` that are columns here, and a function that reads them all from a
        list of events in one pass (a loop compiled for the class: attribute reads of slots are
        specialised by the interpreter, about twice as fast as one ``map(attrgetter)`` per column)."""
        got = self._gatherers.get(cls)
        if got is None:
            names = [f.name for f in self._columns if f.name in self._names(cls)]
            lists = ", ".join(f"c{i}" for i in range(len(names)))
            src = ["def gather(events):"]
            src += [f"    c{i} = []; a{i} = c{i}.append" for i in range(len(names))]
            src += ["    for e in events:"] + [f"        a{i}(e.{name})" for i, name in enumerate(names)]
            src += [f"    return [{lists}]"]
            ns: dict[str, Any] = {}
            exec("\n".join(src), ns)  # the names are dataclass field names (identifiers)
            got = self._gatherers[cls] = (names, ns["gather"])
        return got

    def _class_columns(self, cls: type, events: list[Event]) -> dict[str, pa.Array]:
        n = len(events)
        names, gather = self._gatherer(cls)
        fields = dict(zip(names, gather(events), strict=True))
        promoted = self.table.promoted
        columns: dict[str, pa.Array] = {}
        for f in self._columns:
            name = f.name
            values = fields.get(name)
            if name == "kind":
                columns[name] = pa.repeat(pa.scalar(cls.kind, f.type), n)  # type: ignore[attr-defined]
            elif values is None:
                columns[name] = pa.nulls(n, f.type)
            elif f.type == MAP:
                if values.count(None) == n:
                    columns[name] = pa.nulls(n, f.type)
                    continue
                dicts, indices = distinct(values)
                flat = _Flat(dicts)
                columns[name] = _taken(flat.map_array(f.type), indices)
                if promoted and name in _SOURCES:  # the typed columns of this map, from the same dicts
                    for col, picked in flat.pick(_SOURCES[name]).items():
                        columns[col] = _taken(pa.array(picked, self.schema.field(col).type), indices)
            elif f.nullable:
                columns[name] = _array(values, f.type)
            else:
                columns[name] = pa.array(values, f.type)
        for f in self._promoted:
            if f.name not in columns:
                columns[f.name] = pa.nulls(n, f.type)
        return columns

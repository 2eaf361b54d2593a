"""The core's Arrow record batches (``_native.Decoder.arrow``): the rows of the Parquet tables.

This is the test that keeps the tables' schema (derived from the event model, schema.py) and the
event model in sync on the core's side: for every shared capture and sample, the batches the core
builds for the events, messages and connections tables, handed over through the Arrow PyCapsule
interface, must have exactly the declared schema (metadata included) and hold, row for row and
column by column, the values of the Python events of the same capture (``to_record``, the JSON
lines' dict; table_reference.py), with keep_bodies=False and show_credentials=False as the tables
are decoded. A field added to events.py fails here (the core does not fill it) and in
test_spark's fingerprint test.

Findings come from the core's validator, in the same decode: the findings table is checked the
same way (its ``packets`` column is a list of the proving packets).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import variants
from conftest import CAPTURES
from table_reference import check_rows

from amqpscope.capture import CaptureError, TruncatedCapture
from amqpscope.events import Event
from amqpscope.pipeline import Options, decode_source, open_decoder
from amqpscope.spark.schema import TABLE_OF_KIND, TABLES

native = pytest.importorskip("amqpscope._native")
if not hasattr(native, "ArrowBatch"):
    pytest.skip("amqpscope._native has no ArrowBatch (an older build)", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = sorted((ROOT / "samples").glob("*.pcap"))
SHARED = sorted(CAPTURES.glob("*.pcap")) if CAPTURES.is_dir() else []
ALL = SHARED + SAMPLES
NAMES = ("events", "messages", "connections", "findings")
OPTIONS = Options(ports=frozenset({5672, 5673, 25672}), show_credentials=False, keep_bodies=False, validate=True)
URI = "file:///captures/x.pcap"
CONSTANTS = {"capture": URI, "capture_id": "0123456789abcdef", "capture_date": "2024-11-25"}
SCHEMAS = {name: TABLES[name].schema for name in NAMES}


def core_tables(path: Path, batch_events: int = 4096) -> dict[str, pa.Table]:
    dec = open_decoder(path, options=OPTIONS)
    got: dict[str, list[pa.RecordBatch]] = {name: [] for name in NAMES}
    while (batches := dec.arrow(SCHEMAS, CONSTANTS, TABLE_OF_KIND, batch_events)) is not None:
        for name, obj in batches.items():
            got[name].append(pa.record_batch(obj))
    return {name: pa.Table.from_batches(got[name], schema=SCHEMAS[name]) for name in NAMES}


def python_events(path: Path) -> dict[str, list[Event]]:
    by_table: dict[str, list[Event]] = {name: [] for name in NAMES}
    for ev in decode_source(path, options=OPTIONS):
        name = TABLE_OF_KIND.get(ev.kind, "")
        if name in by_table:
            by_table[name].append(ev)
    return by_table


def stream_seqs(path: Path) -> dict[str, list[int]]:
    """Per table, the numbers in the decoder's stream of the events it holds: its ``seq`` column."""
    seqs: dict[str, list[int]] = {name: [] for name in NAMES}
    for i, ev in enumerate(decode_source(path, options=OPTIONS)):
        name = TABLE_OF_KIND.get(ev.kind, "")
        if name in seqs:
            seqs[name].append(i)
    return seqs


def check(have: dict[str, pa.Table], want: dict[str, list[Event]], what: str,
          seqs: dict[str, list[int]] | None = None) -> None:  # fmt: skip
    for name in NAMES:
        table = have[name]
        assert table.schema.equals(SCHEMAS[name], check_metadata=True), f"{what} {name}: schema"
        rows = table.to_pylist()
        check_rows(TABLES[name], URI, want[name], rows, None if seqs is None else seqs[name])
        for row in rows:
            assert (row["capture_id"], row["capture_date"]) == (CONSTANTS["capture_id"], CONSTANTS["capture_date"])


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_core_batches_hold_the_events_records(path: Path) -> None:
    want = python_events(path)
    check(core_tables(path), want, path.name, stream_seqs(path))
    assert want["events"]


@pytest.mark.parametrize("path", ALL[:3] + SAMPLES, ids=lambda p: p.name)
def test_small_batches_concatenate_to_the_same(path: Path) -> None:
    """Many calls of a few events each (batches mixing kinds): the pieces concatenate to the
    same tables."""
    check(core_tables(path, batch_events=7), python_events(path), path.name, stream_seqs(path))


def test_truncated_capture_hands_out_rows_before_the_error(tmp_path: Path) -> None:
    """The rows decoded before a read error come out first, then the capture error is raised:
    the rows of the Python events before the error."""
    dst = tmp_path / "cut.pcap"
    variants.truncate_bytes(ALL[0], dst, 100)
    want: dict[str, list[Event]] = {name: [] for name in NAMES}
    with pytest.raises(TruncatedCapture):
        for ev in decode_source(dst, options=OPTIONS):
            if TABLE_OF_KIND.get(ev.kind) in want:
                want[TABLE_OF_KIND[ev.kind]].append(ev)
    dec = open_decoder(dst, options=OPTIONS)
    got: dict[str, list[pa.RecordBatch]] = {name: [] for name in NAMES}
    with pytest.raises(TruncatedCapture):
        while (batches := dec.arrow(SCHEMAS, CONSTANTS, TABLE_OF_KIND)) is not None:
            for name, obj in batches.items():
                got[name].append(pa.record_batch(obj))
    check({n: pa.Table.from_batches(got[n], schema=SCHEMAS[n]) for n in NAMES}, want, "truncated")


def first_batches(**tables: pa.Schema) -> dict[str, Any] | None:
    dec = open_decoder(SAMPLES[0], options=OPTIONS)
    return dec.arrow(tables, CONSTANTS, TABLE_OF_KIND)  # type: ignore[no-any-return]


def test_capsule_interface() -> None:
    batches = first_batches(**SCHEMAS)
    assert batches is not None and set(batches) <= set(NAMES)
    obj = batches["events"]
    assert isinstance(obj, native.ArrowBatch)
    assert len(obj) == obj.num_rows > 0
    schema_capsule, array_capsule = obj.__arrow_c_array__()
    assert "arrow_schema" in repr(schema_capsule) and "arrow_array" in repr(array_capsule)
    del schema_capsule, array_capsule  # not consumed: the capsules release their structs
    # read twice: each read shares the core's buffers (no copy), so both see the same memory
    one, two = pa.record_batch(obj), pa.record_batch(obj)
    assert one.equals(two) and one.schema.equals(SCHEMAS["events"], check_metadata=True)
    for a, b in zip(one.columns, two.columns, strict=True):
        assert [x.address if x else 0 for x in a.buffers()] == [x.address if x else 0 for x in b.buffers()]
    # a requested schema is not applied by the core; pyarrow casts to it
    assert pa.record_batch(obj, schema=SCHEMAS["events"]).equals(one)


def test_unknown_column_is_an_error() -> None:
    schema = SCHEMAS["events"].append(pa.field("no_such_column", pa.string()))
    with pytest.raises(ValueError, match="no_such_column"):
        first_batches(events=schema)


def test_wrong_column_type_is_an_error() -> None:
    schema = SCHEMAS["events"]
    i = schema.get_field_index("packet")
    with pytest.raises(ValueError, match="packet"):
        first_batches(events=schema.set(i, pa.field("packet", pa.string())))


def test_findings_table_from_the_core() -> None:
    have = core_tables(CAPTURES / "s09_pika_errors.pcap") if SHARED else core_tables(SAMPLES[0])
    assert have["findings"].num_rows > 0
    assert all(isinstance(p, list) and p for p in have["findings"].column("packets").to_pylist())


def test_tables_not_asked_for_are_left_out() -> None:
    batches = first_batches(connections=SCHEMAS["connections"])
    assert batches is not None and set(batches) <= {"connections"}
    dec = open_decoder(SAMPLES[0], options=OPTIONS)
    with contextlib.suppress(CaptureError):
        while (b := dec.arrow({}, CONSTANTS, TABLE_OF_KIND)) is not None:
            assert b == {}


def _sink(thread: bool = True) -> Any:
    from amqpscope.spark.worker import JobConfig, file_schema, parquet_options

    schemas = {name: file_schema(name) for name in ("events", "messages")}
    return native.ParquetSink(schemas, CONSTANTS, TABLE_OF_KIND,
                              parquet_options(JobConfig(partitions=(), writer_thread=thread)))  # fmt: skip


@pytest.mark.parametrize("thread", [True, False])
def test_parquet_sink_files_read_back_as_the_batches(tmp_path: Path, thread: bool) -> None:
    """The sink's bytes, in the order handed out, are Parquet files holding the core's batches."""
    import pyarrow.parquet as pq

    path = SAMPLES[0]
    sink = _sink(thread)
    dec = open_decoder(path, options=OPTIONS)
    parts: dict[str, bytes] = {}
    while dec.to_sink(sink, 64) is not None:  # small trips: many batches, several row groups
        for name, data in sink.take().items():
            parts[name] = parts.get(name, b"") + data
    built = sink.end_events()
    last, rows = sink.close()
    for name, data in last.items():
        parts[name] = parts.get(name, b"") + data
    want = core_tables(path)
    assert rows == built == {name: want[name].num_rows for name in ("events", "messages")}
    for name, data in parts.items():
        (tmp_path / name).write_bytes(data)
        got = pq.read_table(tmp_path / name)
        assert got.schema.metadata == want[name].schema.metadata
        assert got.to_pylist() == want[name].select(got.column_names).to_pylist()


def test_parquet_sink_errors_are_one_line_values() -> None:
    sink = _sink()
    from amqpscope.spark.worker import file_schema

    with pytest.raises(ValueError, match=r"^errors: .*not a JSON array"):
        sink.write("errors", file_schema("errors"), b"not JSON")
    with pytest.raises(ValueError, match=r"^errors: .*column \"slice\": an integer expected"):
        sink.write("errors", file_schema("errors"), b'[{"slice": "one"}]')
    sink.end_events()
    sink.close()
    with pytest.raises(ValueError, match="closed"):
        sink.take()
    with pytest.raises(ValueError, match="closed"):
        sink.close()
    with pytest.raises(ValueError, match="unknown Parquet compression"):
        native.ParquetSink({}, CONSTANTS, TABLE_OF_KIND, {"compression": "brotli", "dictionary": [], "statistics": [],
                                                         "uncompressed": [], "row_group_rows": 10, "thread": False})  # fmt: skip


def test_build_floor_rebuilds_every_row_of_every_table() -> None:
    """bench/arrow.py's floor hook builds the tables as the core does and rebuilds every value of
    every column type the tables hold (a type it cannot rebuild is an error, not a skip)."""
    from amqpscope._native import _build_floor

    path = ALL[0]
    names = (*NAMES[:3], "ledger")
    options = Options(ports=OPTIONS.ports, show_credentials=False, keep_bodies=False, validate=False, ledger=True)
    rows, build, floor = _build_floor(open_decoder(path, options=options), {n: TABLES[n].schema for n in names},
                                      CONSTANTS, TABLE_OF_KIND, 64)  # fmt: skip
    dec = open_decoder(path, options=options)
    want = 0
    while (batches := dec.arrow({n: TABLES[n].schema for n in names}, CONSTANTS, TABLE_OF_KIND, 64)) is not None:
        want += sum(pa.record_batch(b).num_rows for b in batches.values())
    assert rows == want > 0
    assert build > 0 and floor > 0

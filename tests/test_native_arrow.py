"""The core's Arrow record batches (``_native.Decoder.arrow``) against rows.py's.

For every shared capture and sample, the batches the core builds for the events, messages and
connections tables, handed over through the Arrow PyCapsule interface and concatenated, must equal
(``pa.Table.equals``, schema and its metadata included) the batches ``amqpscope.spark.rows``
builds from the Python events of the same capture, driven as ``spark/worker.py`` drives it:
``TableRows(TABLES[name], constants)``, every event of the table's kinds added, ``cut()``. Both
with keep_bodies=False and show_credentials=False, as the Spark job decodes.

Findings come from the validator, which the core does not have yet: that table is not asked of
the core (asking is an error, as any column the core cannot fill).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import variants
from conftest import CAPTURES

from amqpscope.capture import CaptureError, TruncatedCapture
from amqpscope.pipeline import Options, decode_source, open_decoder
from amqpscope.spark.rows import TableRows
from amqpscope.spark.schema import TABLE_OF_KIND, TABLES

native = pytest.importorskip("amqpscope._native")
if not hasattr(native, "ArrowBatch"):
    pytest.skip("amqpscope._native has no ArrowBatch (an older build)", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = sorted((ROOT / "samples").glob("*.pcap"))
SHARED = sorted(CAPTURES.glob("*.pcap")) if CAPTURES.is_dir() else []
ALL = SHARED + SAMPLES
NAMES = ("events", "messages", "connections")
OPTIONS = Options(ports=frozenset({5672, 5673, 25672}), show_credentials=False, keep_bodies=False)
CONSTANTS = {"capture": "file:///captures/x.pcap", "capture_id": "0123456789abcdef", "capture_date": "2024-11-25"}
SCHEMAS = {name: TABLES[name].schema for name in NAMES}


def core_tables(path: Path, batch_events: int = 4096) -> dict[str, pa.Table]:
    dec = open_decoder(path, options=OPTIONS)
    got: dict[str, list[pa.RecordBatch]] = {name: [] for name in NAMES}
    while (batches := dec.arrow(SCHEMAS, CONSTANTS, TABLE_OF_KIND, batch_events)) is not None:
        for name, obj in batches.items():
            got[name].append(pa.record_batch(obj))
    return {name: pa.Table.from_batches(got[name], schema=SCHEMAS[name]) for name in NAMES}


def rows_tables(path: Path) -> dict[str, pa.Table]:
    rows = {name: TableRows(TABLES[name], dict(CONSTANTS)) for name in NAMES}
    for ev in decode_source(path, options=OPTIONS):
        table = rows.get(TABLE_OF_KIND.get(ev.kind, ""))
        if table is not None:
            table.add(ev)
    return {name: pa.Table.from_batches([rows[name].cut()]) for name in NAMES}


def assert_equal(have: pa.Table, want: pa.Table, what: str) -> None:
    if have.equals(want, check_metadata=True):
        return
    assert have.schema.equals(want.schema, check_metadata=True), f"{what}: schema\n{have.schema}\n{want.schema}"
    assert have.num_rows == want.num_rows, f"{what}: {have.num_rows} rows, rows.py {want.num_rows}"
    for name in want.schema.names:
        a, b = have[name].to_pylist(), want[name].to_pylist()
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert x == y, f"{what}: column {name!r} row {i}: {x!r} != {y!r}"
        assert have[name].equals(want[name]), f"{what}: column {name!r} (same values, other nulls or layout)"
    raise AssertionError(f"{what}: tables differ")


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_core_batches_equal_rows_py(path: Path) -> None:
    want = rows_tables(path)
    have = core_tables(path)
    for name in NAMES:
        assert_equal(have[name], want[name], f"{path.name} {name}")
    assert want["events"].num_rows > 0


@pytest.mark.parametrize("path", ALL[:3] + SAMPLES, ids=lambda p: p.name)
def test_small_batches_concatenate_to_the_same(path: Path) -> None:
    """Many calls of a few events each: the pieces concatenate to the same tables."""
    want = rows_tables(path)
    have = core_tables(path, batch_events=7)
    for name in NAMES:
        assert_equal(have[name], want[name], f"{path.name} {name}")


def test_truncated_capture_hands_out_rows_before_the_error(tmp_path: Path) -> None:
    """The rows decoded before a read error come out first, then the capture error is raised:
    the same rows rows.py gets from the events before the error."""
    src = ALL[0]
    dst = tmp_path / "cut.pcap"
    variants.truncate_bytes(src, dst, 100)
    rows = {name: TableRows(TABLES[name], dict(CONSTANTS)) for name in NAMES}
    with pytest.raises(TruncatedCapture):
        for ev in decode_source(dst, options=OPTIONS):
            table = rows.get(TABLE_OF_KIND.get(ev.kind, ""))
            if table is not None:
                table.add(ev)
    dec = open_decoder(dst, options=OPTIONS)
    got: dict[str, list[pa.RecordBatch]] = {name: [] for name in NAMES}
    with pytest.raises(TruncatedCapture):
        while (batches := dec.arrow(SCHEMAS, CONSTANTS, TABLE_OF_KIND)) is not None:
            for name, obj in batches.items():
                got[name].append(pa.record_batch(obj))
    for name in NAMES:
        have = pa.Table.from_batches(got[name], schema=SCHEMAS[name])
        assert_equal(have, pa.Table.from_batches([rows[name].cut()]), f"truncated {name}")


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


def test_findings_are_not_in_the_core() -> None:
    with pytest.raises(ValueError, match="finding"):
        first_batches(findings=TABLES["findings"].schema)


def test_tables_not_asked_for_are_left_out() -> None:
    batches = first_batches(connections=SCHEMAS["connections"])
    assert batches is not None and set(batches) <= {"connections"}
    dec = open_decoder(SAMPLES[0], options=OPTIONS)
    with contextlib.suppress(CaptureError):
        while (b := dec.arrow({}, CONSTANTS, TABLE_OF_KIND)) is not None:
            assert b == {}

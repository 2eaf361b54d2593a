"""The Spark batch job (``amqpscope batch``): Parquet tables equal to a single-process decode.

One job over the shared captures plus a damaged archive (a truncated capture, a file that is not
a capture, a gzip-compressed capture) is shared by the Spark tests, then run a second time into
the same directory. Planning, splitting and the schema are checked without Spark.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import gzip
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as pads
import pytest
from table_reference import actual_rows, expected_row

from amqpscope.capture import CaptureError, TruncatedCapture
from amqpscope.dissect.codec import get_codec
from amqpscope.events import EVENT_TYPES, Event, Frame
from amqpscope.output.records import dumps
from amqpscope.pipeline import Options, RunStats, decode_source
from amqpscope.spark import schema
from amqpscope.spark.inputs import Capture, list_inputs, local_path
from amqpscope.spark.job import JobOptions, pack, plan_slices, run_job
from amqpscope.spark.split import decode_slice, flow_key, hash_slice
from amqpscope.spark.split import plan_slices as plan_flows
from amqpscope.spark.worker import Slice

COMPARED = ("events", "messages", "connections", "findings", "ledger")  # event tables compared row by row


# --- single-process reference ---------------------------------------------------------------------


def reference_events(uri: str) -> tuple[list[Event], CaptureError | None]:
    """What one process decodes from a capture: every event until the capture error, if any."""
    events: list[Event] = []
    try:
        codec = get_codec()
        for ev in decode_source(local_path(uri), codec, Options(validate=True, ledger=True)):  # as `amqpscope decode` does
            events.append(ev)
    except CaptureError as exc:
        return events, exc
    return events, None


def read_table(out: Path, name: str) -> list[dict[str, Any]]:
    path = out / name
    if not path.exists():
        return []
    return pads.dataset(str(path), format="parquet", partitioning="hive").to_table().to_pylist()


def read_all(out: Path) -> dict[str, list[dict[str, Any]]]:
    return {name: read_table(out, name) for name in schema.TABLES}


def expected_tables(captures: list[Capture]) -> tuple[dict[str, Counter[tuple[Any, ...]]], dict[str, CaptureError]]:
    want: dict[str, Counter[tuple[Any, ...]]] = {name: Counter() for name in COMPARED}
    errors: dict[str, CaptureError] = {}
    for cap in captures:
        events, err = reference_events(cap.uri)
        if err is not None:
            errors[cap.uri] = err
        for ev in events:
            name = schema.TABLE_OF_KIND.get(ev.kind)
            if name in want:
                want[name][expected_row(schema.TABLES[name], cap.uri, ev)] += 1
    return want, errors


def assert_same(name: str, got: Counter[tuple[Any, ...]], want: Counter[tuple[Any, ...]]) -> None:
    missing, extra = want - got, got - want
    if missing or extra:
        first = next(iter(missing or extra))
        pytest.fail(f"{name}: {sum(missing.values())} rows missing, {sum(extra.values())} unexpected; "
                    f"first {'missing' if missing else 'unexpected'}: {dict(first)}")  # fmt: skip


# --- the shared job -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory, captures_dir: Path) -> Path:
    """Damaged and compressed captures beside the shared ones."""
    d = tmp_path_factory.mktemp("archive")
    whole = (captures_dir / "s04_pika_consumer_acks.pcap").read_bytes()
    (d / "truncated.pcap").write_bytes(whole[: len(whole) * 2 // 3])
    (d / "garbage.pcap").write_bytes(b"this is not a capture file\n" * 10)
    (d / "s03_copy.pcap.gz").write_bytes(gzip.compress((captures_dir / "s03_amqpstorm_tx.pcap").read_bytes()))
    return d


@pytest.fixture(scope="module")
def first_run(spark: Any, archive: Path, captures_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("batch") / "out"
    # split_bytes far below s05's 12 MB: its two connections decode as two slices in parallel
    opts = JobOptions(inputs=(str(captures_dir), str(archive)), out=str(out), split_bytes=1 << 20, diagnose=True)
    result = run_job(opts, spark)
    captures = list_inputs(opts.inputs)
    return {"out": out, "opts": opts, "result": result, "captures": captures, "tables": read_all(out)}


@pytest.mark.spark
def test_tables_equal_single_process_decode(first_run: dict[str, Any]) -> None:
    """Every row of events, messages and connections, all columns, equals the single-process
    decode of the same files (the truncated capture: the events before its broken end)."""
    assert first_run["result"].slices > first_run["result"].captures  # s05 really was split
    want, _errors = expected_tables(first_run["captures"])
    assert sum(want["events"].values()) > 6000
    for name in COMPARED:
        got = Counter(actual_rows(schema.TABLES[name], first_run["tables"][name]))
        assert_same(name, got, want[name])


def _plain(rows: Iterable[dict[str, Any]], drop: frozenset[str] = frozenset()) -> Counter[tuple[Any, ...]]:
    """Rows of a table without map columns (errors, captures) as comparable tuples."""
    return Counter(tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in r.items() if k not in drop))
                   for r in rows)  # fmt: skip


@pytest.mark.spark
def test_decode_parquet_equals_the_spark_job(first_run: dict[str, Any], tmp_path: Path) -> None:
    """``amqpscope decode --format parquet -o DIR`` over the same inputs, in this process without
    Spark: every table holds the Spark job's rows, partition columns included (``captures``: one
    row per slice, so the capture Spark split has one row here and two there)."""
    from amqpscope.cli.main import cli
    from click.testing import CliRunner

    out = tmp_path / "pq"
    res = CliRunner().invoke(cli, ["decode", "--format", "parquet", "--diagnose", "-o", str(out),
                                   *first_run["opts"].inputs])  # fmt: skip
    assert res.exit_code == 4, res.output  # garbage.pcap (4) comes before truncated.pcap (5)
    assert "rows: events " in res.output
    local, spark = read_all(out), first_run["tables"]
    for name in COMPARED:
        got = Counter(actual_rows(schema.TABLES[name], local[name]))
        assert_same(name, got, Counter(actual_rows(schema.TABLES[name], spark[name])))
        parts = Counter((r["capture"], r["capture_date"], r["capture_id"]) for r in local[name])
        assert parts == Counter((r["capture"], r["capture_date"], r["capture_id"]) for r in spark[name]), name
    assert _plain(local["errors"]) == _plain(spark["errors"])
    assert local["diagnoses"] and _plain(local["diagnoses"]) == _plain(spark["diagnoses"])
    split = {r["capture"] for r in spark["captures"] if r["slices"] > 1}
    assert split and {r["capture"] for r in local["captures"]} == {r["capture"] for r in spark["captures"]}
    keep = [r for r in spark["captures"] if r["capture"] not in split]
    assert _plain([r for r in local["captures"] if r["capture"] not in split], frozenset({"seconds"})) == _plain(
        keep, frozenset({"seconds"}))
    assert (out / "_amqpscope.json").read_text() == (first_run["out"] / "_amqpscope.json").read_text()


@pytest.mark.spark
def test_partition_and_time_columns(first_run: dict[str, Any]) -> None:
    by_uri = {c.uri: c for c in first_run["captures"]}
    for row in first_run["tables"]["events"]:
        cap = by_uri[row["capture"]]
        assert row["capture_id"] == cap.capture_id
        assert row["capture_date"] == dt.datetime.fromtimestamp(row["ts"], dt.UTC).strftime("%Y-%m-%d")
        assert abs(row["time"].timestamp() - row["ts"]) < 2e-6
        assert row["time"].tzinfo is not None  # written as TIMESTAMP_MICROS (UTC), not INT96


@pytest.mark.spark
def test_promoted_columns_answer_without_map_lookups(first_run: dict[str, Any]) -> None:
    """The typed columns carry the facts of captures/README.md (checked there against tshark)."""
    events = first_run["tables"]["events"]
    acks = [r for r in events if r["method"] == "basic.ack" and r["dir"] == "s2c"
            and r["capture"].endswith("/s02_pika_confirms.pcap")]  # fmt: skip
    assert (len(acks), sum(r["multiple"] for r in acks)) == (135, 38)
    closes = [r for r in events if r["method"] == "channel.close" and r["reply_code"] == 406]
    # each value in one place: the promoted ones are not repeated in the maps, the others are there
    assert closes and all(dict(r["args"]).keys() == {"class_id", "method_id"} for r in closes)
    publishes = [r for r in events if r["method"] == "basic.publish"]
    assert publishes and all(r["routing_key"] is not None and r["exchange"] is not None for r in publishes)
    assert all(dict(r["args"]).keys() == {"reserved_1", "immediate"} for r in publishes)
    props = [r for r in events if r["type"] == "header" and r["content_type"] is not None]
    assert props and all("content_type" not in dict(r["properties"] or ()) for r in props)


@pytest.mark.spark
def test_damaged_captures_give_error_rows_and_the_rest_decodes(first_run: dict[str, Any]) -> None:
    errors = {Path(r["capture"]).name: r for r in first_run["tables"]["errors"]}
    assert set(errors) == {"truncated.pcap", "garbage.pcap"}
    assert (errors["truncated.pcap"]["error"], errors["truncated.pcap"]["exit_code"]) == ("TruncatedCapture", 5)
    assert (errors["garbage.pcap"]["error"], errors["garbage.pcap"]["exit_code"]) == ("NotACapture", 4)
    _events, err = reference_events(errors["truncated.pcap"]["capture"])
    assert isinstance(err, TruncatedCapture) and errors["truncated.pcap"]["packets_read"] == err.packets_read
    assert errors["truncated.pcap"]["message"] == str(err)
    decoded = {Path(r["capture"]).name for r in first_run["tables"]["events"]}
    assert "truncated.pcap" in decoded and "s03_copy.pcap.gz" in decoded  # rows before the cut, gzip read
    assert len(decoded) == len(first_run["captures"]) - 1  # all but garbage.pcap
    assert sorted(Path(c).name for c, _ in first_run["result"].errors) == ["garbage.pcap", "truncated.pcap"]
    captures = first_run["tables"]["captures"]
    assert {Path(r["capture"]).name for r in captures if not r["ok"]} == {"truncated.pcap", "garbage.pcap"}


@pytest.mark.spark
def test_written_parquet_schema_is_the_declared_one(first_run: dict[str, Any]) -> None:
    for name, table in schema.TABLES.items():
        path = first_run["out"] / name
        if not path.exists():
            continue  # no rows (findings until a validator stage emits them)
        written = pads.dataset(str(path), format="parquet", partitioning="hive").schema
        declared = [(f.name, f.type) for f in table.schema if f.name not in schema.PARTITION_COLUMNS]
        assert [(f.name, f.type) for f in written if f.name not in schema.PARTITION_COLUMNS] == declared, name
    manifest = (first_run["out"] / "_amqpscope.json").read_text()
    assert f'"schema_version": {schema.SCHEMA_VERSION}' in manifest


@pytest.mark.spark
def test_stats_of_split_capture_tables(first_run: dict[str, Any], captures_dir: Path) -> None:
    """``stats`` over the job's tables of a capture it split into slices (s05: one connection a
    slice) equals ``stats`` of the capture: the slices' streams merge by packet."""
    import json

    from click.testing import CliRunner

    from cli.main import cli

    name = "s05_pika_large_bodies.pcap"
    files = pads.dataset(str(first_run["out"] / "events"), format="parquet", partitioning="hive").files
    capture_id = schema_capture_id(first_run["captures"], name)
    assert len([f for f in files if capture_id in f]) == 2  # really split in two
    runs = [CliRunner().invoke(cli, ["stats", "-T", "json", *args])
            for args in ([str(first_run["out"]), "--capture", f"*/{name}"], [str(captures_dir / name)])]  # fmt: skip
    assert [r.exit_code for r in runs] == [0, 0], runs[0].stderr
    got, want = (json.loads(r.stdout) for r in runs)
    assert got["methods"]["basic.publish"] > 0
    assert got == want


def schema_capture_id(captures: list[Capture], name: str) -> str:
    return next(c.capture_id for c in captures if c.uri.endswith("/" + name))


@pytest.mark.spark
def test_rerun_replaces_rows_never_duplicates(spark: Any, first_run: dict[str, Any], archive: Path,
                                              captures_dir: Path) -> None:  # fmt: skip
    """Run again into the same directory after the truncated capture was completed: every table
    equals the decode of the files as they are now; the old error row is gone."""
    out = first_run["out"]
    (archive / "truncated.pcap").write_bytes((captures_dir / "s04_pika_consumer_acks.pcap").read_bytes())
    result = run_job(first_run["opts"], spark)
    assert result.deleted >= 1  # the errors partition of the now complete capture
    tables = read_all(out)
    want, _errors = expected_tables(list_inputs(first_run["opts"].inputs))
    for name in COMPARED:
        assert_same(name, Counter(actual_rows(schema.TABLES[name], tables[name])), want[name])
    assert [Path(r["capture"]).name for r in tables["errors"]] == ["garbage.pcap"]
    assert len(tables["captures"]) == len(first_run["tables"]["captures"])


@pytest.mark.spark
def test_output_of_another_schema_version_is_refused(spark: Any, tmp_path: Path, captures_dir: Path) -> None:
    from amqpscope.spark.job import JobError

    (tmp_path / "_amqpscope.json").write_text('{"schema_version": 0}')
    with pytest.raises(JobError, match="schema version 0"):
        run_job(JobOptions(inputs=(str(captures_dir / "s08_pika_heartbeat.pcap"),), out=str(tmp_path)), spark)


# --- Hadoop listing, command line ----------------------------------------------------------------


@pytest.mark.spark
def test_hadoop_listing_matches_local_listing(spark: Any, captures_dir: Path) -> None:
    from amqpscope.spark.inputs import list_hadoop

    local = list_inputs([str(captures_dir)])
    hadoop = list_hadoop(spark, f"file://{captures_dir}/*.pcap")
    assert sorted(hadoop, key=lambda c: c.uri) == sorted(local, key=lambda c: c.uri)


def test_cli_help_does_not_import_pyspark() -> None:
    code = "import sys; from amqpscope.cli.main import cli; assert 'pyspark' not in sys.modules; cli(['--help'])"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "batch" in proc.stdout


@pytest.mark.spark
def test_cli_batch_bad_input_is_one_line(spark: Any, tmp_path: Path) -> None:
    from amqpscope.cli.main import cli
    from click.testing import CliRunner

    res = CliRunner().invoke(cli, ["batch", str(tmp_path / "missing"), "--out-dir", str(tmp_path / "o")])
    assert res.exit_code == 2
    assert res.output.strip().splitlines() == [f"amqpscope: error: no such file or directory: '{tmp_path / 'missing'}'"]


# --- decode --format parquet (no Spark) ---------------------------------------------------------


def _cli(*args: str) -> Any:
    from amqpscope.cli.main import cli
    from click.testing import CliRunner

    return CliRunner().invoke(cli, list(args))


@pytest.mark.parametrize("args,message", [
    (["--out-dir", "DIR"], "--out-dir is for --format parquet"),
    (["--format", "parquet"], "--format parquet needs --out-dir DIR"),
    (["--format", "parquet", "-o", "DIR", "-Y", "basic.publish"], "-Y/--filter: not with --format parquet"),
    (["--format", "parquet", "-o", "DIR", "--show-credentials"], "--show-credentials: not with --format parquet"),
    (["--threads", "2"], "--threads is for --format parquet"),
])  # fmt: skip
def test_decode_parquet_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    sample = Path(__file__).resolve().parents[1] / "samples" / "confirms.pcap"
    res = _cli("decode", *[str(tmp_path / "o") if a == "DIR" else a for a in args], str(sample))
    assert res.exit_code == 2 and message in res.output, res.output
    assert not (tmp_path / "o").exists()


def test_decode_parquet_unwritable_output_is_one_line(tmp_path: Path) -> None:
    sample = Path(__file__).resolve().parents[1] / "samples" / "confirms.pcap"
    (tmp_path / "file").write_text("not a directory")
    res = _cli("decode", "--format", "parquet", "--out-dir", str(tmp_path / "file" / "o"), str(sample))
    assert res.exit_code == 2, res.output
    assert res.output.startswith("amqpscope: error: cannot write the tables under ") and res.output.count("\n") == 1


def test_a_table_that_cannot_be_written_fails_the_slice_not_as_the_capture() -> None:
    """A full disk is the output's failure: not an ``errors`` row blaming the capture."""
    import errno

    from amqpscope.spark.worker import JobConfig, Slice, TablesWriteError, write_slice

    class FullDisk:
        def create_dir(self, path: str, recursive: bool = False) -> None:
            pass

        def open_output_stream(self, path: str) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

    sample = Path(__file__).resolve().parents[1] / "samples" / "confirms.pcap"
    with pytest.raises(TablesWriteError, match=r"cannot write the \w+ table under /out: No space left on device"):
        write_slice(Slice(str(sample), "0123456789abcdef", None), JobConfig(partitions=()), FullDisk(), "/out", 0)


def test_decode_parquet_needs_neither_spark_nor_java(tmp_path: Path) -> None:
    sample = Path(__file__).resolve().parents[1] / "samples" / "confirms.pcap"
    code = ("import sys; from amqpscope.cli.main import cli\n"
            "try:\n    cli(['decode', '--format', 'parquet', '-o', sys.argv[1], sys.argv[2]])\n"
            "except SystemExit as e:\n    assert e.code == 0, e.code\n"
            "assert not {'pyspark', 'py4j'} & set(sys.modules), 'spark imported'")  # fmt: skip
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("JAVA_HOME",)}
    env["PATH"] = "/usr/bin/nonexistent"  # no java to be found
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "o"), str(sample)], capture_output=True,
                          text=True, timeout=120, env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    events = read_table(tmp_path / "o", "events")
    assert events and {r["capture"] for r in events} == {f"file://{sample}"}


@pytest.mark.parametrize("flag, codec", [([], "SNAPPY"), (["--compression", "zstd"], "ZSTD"),
                                         (["--compression", "none"], "UNCOMPRESSED")])  # fmt: skip
def test_decode_parquet_compression(tmp_path: Path, flag: list[str], codec: str) -> None:
    """snappy unless asked (Spark's default); the rows are the same whatever the codec."""
    import pyarrow.parquet as pq
    from click.testing import CliRunner

    from cli.main import cli

    sample = Path(__file__).resolve().parents[1] / "samples" / "confirms.pcap"
    res = CliRunner().invoke(cli, ["decode", "--format", "parquet", "-o", str(tmp_path / "o"), *flag, str(sample)])
    assert res.exit_code == 0, res.output
    files = pads.dataset(str(tmp_path / "o" / "events"), format="parquet", partitioning="hive").files
    codecs = {pq.ParquetFile(f).metadata.row_group(0).column(j).compression for f in files
              for j in range(pq.ParquetFile(f).metadata.num_columns)}  # fmt: skip
    assert codecs == {codec}
    # the SHA-256 of each body does not compress: written without the codec whatever it is
    (messages,) = pads.dataset(str(tmp_path / "o" / "messages"), format="parquet", partitioning="hive").files
    meta = pq.ParquetFile(messages).metadata.row_group(0)
    by_column = {meta.column(j).path_in_schema: meta.column(j).compression for j in range(meta.num_columns)}
    assert by_column.pop("body_sha256") == "UNCOMPRESSED" and set(by_column.values()) == {codec}
    rows = read_table(tmp_path / "o", "events")
    assert len(rows) > 100 and {r["capture"] for r in rows} == {f"file://{sample}"}


def test_decode_parquet_equals_single_process_decode(tmp_path: Path, archive: Path, captures_dir: Path) -> None:
    """Without Spark too: every event table of ``decode --format parquet`` over the shared captures
    and the damaged archive equals the single-process decode with the validator (the findings
    made before a capture's broken end included)."""
    from amqpscope.spark.local import write_tables

    inputs = (str(captures_dir), str(archive))
    write_tables(inputs, str(tmp_path / "o"))
    tables = read_all(tmp_path / "o")
    want, errors = expected_tables(list_inputs(inputs))
    for name in COMPARED:
        assert_same(name, Counter(actual_rows(schema.TABLES[name], tables[name])), want[name])
    assert {r["capture"] for r in tables["errors"]} == set(errors)


def test_decode_parquet_on_threads_splits_captures_and_keeps_the_rows(tmp_path: Path, captures_dir: Path) -> None:
    """``decode --format parquet`` runs slices on a pool of threads: a capture split by flow
    gives one file per slice in its partition, and the same rows as one thread decoding it
    whole (only ``seq``, numbered per slice, differs; validation off: the few cross-connection
    checks see one slice's connections)."""
    from amqpscope.spark.local import write_tables

    inputs = [str(captures_dir / n) for n in ("s07_pika_many_channels.pcap", "s11_amqptools_basic.pcap")]
    one = write_tables(inputs, str(tmp_path / "one"), validate=False, threads=1)
    many = write_tables(inputs, str(tmp_path / "many"), validate=False, threads=3, split_bytes=1)
    assert (one.slices, one.partitions) == (2, 1) and many.slices > 3 and many.partitions == 3
    a, b = read_all(tmp_path / "one"), read_all(tmp_path / "many")
    strip = lambda rows: Counter(dumps({k: v for k, v in r.items() if k != "seq"}) for r in rows)  # noqa: E731
    for name in ("events", "messages", "ledger", "connections"):
        assert a[name] and strip(a[name]) == strip(b[name]), name
    # every slice reads every packet of its capture, and decodes its own flows
    packets = {r["capture"]: r["packets"] for r in a["captures"]}
    assert len(b["captures"]) == many.slices and all(r["packets"] == packets[r["capture"]] for r in b["captures"])
    parts = list((tmp_path / "many" / "events").glob("capture_date=*/capture_id=*/part-*.parquet"))
    assert len(parts) == many.slices and not list((tmp_path / "many").glob("_staging*"))


def test_a_stopped_slice_ends_early_and_a_failed_one_fails_the_run(tmp_path: Path) -> None:
    """The pool's first failure (a full disk, Ctrl-C) sets ``stop``: the other slices end at their
    next trip into the core instead of decoding their whole capture, and nothing is committed."""
    import errno
    import threading

    from pyarrow import fs as pafs

    from amqpscope.spark.job import JobError
    from amqpscope.spark.local import _decode_slices
    from amqpscope.spark.worker import JobConfig, SliceCancelled, write_slice

    sample = Path(__file__).resolve().parents[1] / "samples" / "confirms.pcap"
    stop = threading.Event()
    stop.set()
    config = JobConfig(partitions=(), validate=False, writer_thread=False, batch_rows=64)
    with pytest.raises(SliceCancelled):
        write_slice(Slice(str(sample), "0123456789abcdef", None), config, pafs.LocalFileSystem(), str(tmp_path), 0, stop)

    class FullDiskForSliceOne(pafs.LocalFileSystem):  # type: ignore[misc]
        def open_output_stream(self, path: str, *args: Any, **kwargs: Any) -> Any:
            if "/part-00001-" in path:
                raise OSError(errno.ENOSPC, "No space left on device")
            return super().open_output_stream(path, *args, **kwargs)

    slices = [Slice(str(sample), "0123456789abcdef", None, i, 2) for i in range(2)]
    with pytest.raises(JobError, match=r"cannot write the \w+ table under .*: No space left on device"):
        _decode_slices(slices, config, 2, FullDiskForSliceOne(), str(tmp_path / "o"), str(tmp_path / "staging"))
    assert not (tmp_path / "o").exists()


def test_decode_parquet_rerun_replaces_partitions(tmp_path: Path) -> None:
    """Into the same DIR again: a capture that became truncated gets its errors row, and loses
    it again once complete; rows are never duplicated."""
    sample = Path(__file__).resolve().parents[1] / "samples" / "confirms.pcap"
    whole = sample.read_bytes()
    cap, out = tmp_path / "c.pcap", tmp_path / "o"
    cap.write_bytes(whole)
    assert _cli("decode", "-T", "parquet", "-o", str(out), str(cap)).exit_code == 0
    first = read_all(out)
    cap.write_bytes(whole[: len(whole) // 2])
    res = _cli("decode", "-T", "parquet", "-o", str(out), str(cap))
    assert res.exit_code == 5 and "amqpscope: error: " in res.output
    half = read_all(out)
    assert len(half["errors"]) == 1 and 0 < len(half["events"]) < len(first["events"])
    cap.write_bytes(whole)
    assert _cli("decode", "-T", "parquet", "-o", str(out), str(cap), "--no-validate").exit_code == 0
    again = read_all(out)
    # seq numbers every event of the decode, findings included: without them the frames' numbers shift
    assert [r["seq"] for r in again["events"]] != [r["seq"] for r in first["events"]]
    strip = lambda rows: [{k: v for k, v in r.items() if k != "seq"} for r in rows]  # noqa: E731
    assert strip(again["events"]) == strip(first["events"]) and not again["errors"] and not again["findings"]
    assert not (out / "diagnoses").exists()  # the diagnoses table only with --diagnose
    assert first["findings"]  # validation on by default, off with --no-validate
    assert not [p for p in out.iterdir() if p.name.startswith("_staging")]
    (out / "_amqpscope.json").write_text('{"schema_version": 0}')
    res = _cli("decode", "-T", "parquet", "-o", str(out), str(cap))
    assert res.exit_code == 2 and "schema version 0" in res.output


# --- splitting a capture by TCP flow (no Spark)# --- splitting a capture by TCP flow (no Spark) -------------------------------------------------


def _records(events: Iterable[Event]) -> Counter[str]:
    return Counter(dumps(ev.to_record()) for ev in events)


@pytest.mark.parametrize("name,slices,plan_bytes", [
    ("s07_pika_many_channels.pcap", 3, 64 << 10),  # a prefix: the flows starting later are hashed
    ("s11_amqptools_basic.pcap", 4, 16 << 10),
    ("s05_pika_large_bodies.pcap", 2, 1 << 30),  # the whole file weighed: one heavy flow per slice
])  # fmt: skip
def test_capture_decoded_in_slices_equals_whole(captures_dir: Path, name: str, slices: int, plan_bytes: int) -> None:
    path = captures_dir / name
    codec = get_codec()
    whole = list(decode_source(path, codec, Options()))
    plan = plan_flows(path, slices, plan_bytes=plan_bytes)
    parts = []
    for i in range(slices):
        def mine(key: Any, i: int = i) -> bool:
            return plan.get(key, hash_slice(key, slices)) == i

        parts.append(list(decode_slice(path, codec, Options(), RunStats(), mine)))
    merged: Counter[str] = Counter()
    for p in parts:
        merged += _records(p)
    assert merged == _records(whole)
    conns = [{ev.conn for ev in p} for p in parts]
    assert sum(len(c) for c in conns) == len(set().union(*conns))  # each connection in one slice
    assert sum(1 for c in conns if c) >= 2  # the work really is spread


def test_flow_plan_balances_heavy_flows(captures_dir: Path) -> None:
    path = captures_dir / "s07_pika_many_channels.pcap"
    plan = plan_flows(path, 2, plan_bytes=1 << 30)
    assert set(plan.values()) == {0, 1}
    assert flow_key(("b", 1), ("a", 2)) == flow_key(("a", 2), ("b", 1))


def test_decode_slice_of_the_whole_capture_is_decode_source(captures_dir: Path) -> None:
    path = captures_dir / "s11_amqptools_basic.pcap"
    codec = get_codec()
    flat = list(decode_slice(path, codec, Options(), RunStats()))
    assert [e.to_record() for e in flat] == [e.to_record() for e in decode_source(path, codec, Options())]


# --- planning (no Spark) -------------------------------------------------------------------------


def test_plan_splits_only_the_long_pole() -> None:
    caps = [Capture(f"file:///a/{i}.pcap", 10 << 20) for i in range(4)] + [Capture("file:///a/big.pcap", 4 << 30)]
    slices = plan_slices(caps, parallelism=4, split_bytes=64 << 20)
    counts = Counter(s.uri for s in slices)
    assert counts["file:///a/big.pcap"] == 4 and all(counts[c.uri] == 1 for c in caps[:4])
    many = [Capture(f"file:///b/{i}.pcap", 100 << 20) for i in range(40)]
    assert len(plan_slices(many, parallelism=2, split_bytes=64 << 20)) == 40  # many files: no split


def test_pack_is_even_and_keeps_every_slice() -> None:
    slices = [Slice(f"u{i}", f"c{i}", size) for i, size in enumerate([100, 90, 50, 40, 30, 20, 10, 5])]
    parts = pack(slices, 3)
    assert sorted(s.uri for p in parts for s in p) == sorted(s.uri for s in slices)
    loads = [sum(s.cost for s in p) for p in parts]
    assert max(loads) - min(loads) <= 30
    assert len(pack(slices[:2], 8)) == 2


# --- schema in sync with the event model (no Spark) ----------------------------------------------


def test_schema_fingerprint_pins_the_event_model() -> None:
    """Fails when an event dataclass changes: bump SCHEMA_VERSION and update SCHEMA_FINGERPRINT."""
    assert schema.fingerprint() == schema.SCHEMA_FINGERPRINT, (
        "events.py changed the Parquet layout: bump schema.SCHEMA_VERSION and set SCHEMA_FINGERPRINT to "
        f"{schema.fingerprint()!r}")  # fmt: skip


def test_every_record_field_has_a_column_of_its_type() -> None:
    for cls in EVENT_TYPES:
        table = schema.TABLES[schema.TABLE_OF_KIND[cls.kind]]
        for f in schema.record_fields(cls):
            typ, _nullable = schema.arrow_type(str(f.type))
            assert table.schema.field(f.name).type == typ, (cls.__name__, f.name)
        assert "password" not in table.schema.names


def test_a_new_event_field_changes_the_derived_schema() -> None:
    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class FrameV2(Frame):
        latency_us: int | None = None

    before = schema._event_table("events", (Frame,), promoted=True)
    after = schema._event_table("events", (FrameV2,), promoted=True)
    assert "latency_us" not in before.schema.names and after.schema.field("latency_us").type == pa.int64()

    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class FrameBad(Frame):
        tags: list[str] | None = None

    with pytest.raises(TypeError, match="no Parquet type"):
        schema._event_table("events", (FrameBad,))


# --- the example queries of docs/batch.md run, and give the facts of the shared captures -------

DOCS = Path(__file__).resolve().parents[1] / "docs" / "batch.md"


def _sql_blocks() -> list[list[str]]:
    """The ```sql blocks of docs/batch.md, each as its statements without comment lines."""
    text = DOCS.read_text()
    blocks = []
    for block in text.split("```sql\n")[1:]:
        body = "\n".join(line for line in block.split("```", 1)[0].splitlines() if not line.lstrip().startswith("--"))
        blocks.append([st.strip() for st in body.split(";") if st.strip()])
    return blocks


def _check_answers(rows: list[list[Any]]) -> None:
    top_keys, confirms, by_findings = rows
    assert top_keys[0][1] == "q.confirm" and top_keys[0][2] == 300  # s02: 300 publishes to q.confirm
    s02 = [r for r in confirms if str(r[0]).endswith("/s02_pika_confirms.pcap")]
    assert s02 and s02[0][1] == 320  # every publish of s02 confirmed (135 acks + 15 nacks, many multiple)
    assert by_findings and by_findings[0][-2] >= by_findings[-1][-2]


@pytest.mark.spark
def test_docs_spark_sql_queries(spark: Any, first_run: dict[str, Any]) -> None:
    out = first_run["out"]
    for t in ("events", "messages", "connections", "findings", "errors"):
        spark.read.parquet(str(out / t)).createOrReplaceTempView(t)
    statements = _sql_blocks()[0]
    assert len(statements) == 3
    _check_answers([[tuple(r) for r in spark.sql(st).collect()] for st in statements])


def _duckdb_answers(out: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    spark_block, duck_block = _sql_blocks()[:2]
    ctes = spark_block[1][: spark_block[1].rindex("SELECT capture, count(*)")]  # WITH selects … confirms
    answers = []
    for st in duck_block:
        st = st.replace("/data/amqp", str(out))
        if st.startswith("CREATE"):
            con.execute(st)
            continue
        if "FROM confirms" in st:
            st = ctes + st
        answers.append(con.execute(st).fetchall())
    assert len(answers) == 4  # three questions and the map example
    _check_answers(answers[:3])
    assert ('{"x-max-length":5,"x-overflow":"reject-publish"}', 1) in answers[3]


@pytest.mark.spark
def test_docs_duckdb_queries(first_run: dict[str, Any]) -> None:
    _duckdb_answers(first_run["out"])


def test_docs_duckdb_queries_on_decode_parquet(tmp_path: Path, captures_dir: Path) -> None:
    """The same DuckDB examples over ``decode --format parquet`` output: no Spark, no Java."""
    from amqpscope.spark.local import write_tables

    write_tables([str(captures_dir)], str(tmp_path / "amqp"))
    _duckdb_answers(tmp_path / "amqp")


def test_readme_examples_are_the_docs_ones() -> None:
    """The README's Spark SQL and DuckDB examples are docs/batch.md's, which the tests above run
    on real output (Spark's and decode --format parquet's)."""
    readme = (DOCS.parents[1] / "README.md").read_text()
    docs = DOCS.read_text()
    blocks = [b.split("```", 1)[0] for b in readme.split("```sql\n")[1:]]
    assert len(blocks) == 2 and all(b in docs for b in blocks)
    python = readme.split("### Example queries", 1)[1].split("```python\n")[1].split("```", 1)[0]
    assert python in docs  # the temp views the Spark SQL test creates the same way

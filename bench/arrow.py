"""The Parquet tables' Arrow batches built by the core (``Decoder.arrow``), and what they cost.

Usage: python bench/arrow.py [CAPTURE] [--repeats R] [--batch-rows N]

Three paths over one capture (default ``bench/data/large.pcap``, made by bench/record_large.py),
each decoding the whole capture into the events, messages and connections tables in batches of
about N rows, as ``spark/worker.py`` does (Parquet writing left out):

* decode only: ``Decoder.arrow`` asked for no table (the core decodes, builds nothing);
* core: ``Decoder.arrow`` builds the batches in Rust and pyarrow takes them through the PyCapsule
  interface (``pa.record_batch``);
* core + Parquet: the same tables built and encoded as the job does (``_native.ParquetSink``, the
  job's codec and column options, on the core's threads), the bytes written to a temporary
  directory;
* Python events: ``Decoder.events``, the event objects alone, no table built (what the job used
  to start from, before the core built the batches: rows.py turned them into Arrow columns).

Then the floor of building the tables, in trips of the job's size and with the ledger table too
(``_native._build_floor``): the seconds the core spends building the batches of each trip, against
the seconds spent appending the same values, read back from those batches, into fresh Arrow
builders (each value on its own, each run of nulls at once). No build can do less than that floor,
one made straight from the session's state instead of from event values included: the difference is
the most such a redesign could save.

Each timing is CPU time (process_time), the best of R rounds in which the paths take turns.
Reported: seconds, events-table rows per second and capture MB per second (of the file size).
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from native_build import ensure_release_core  # noqa: E402

ensure_release_core()  # before the core is loaded: the figures are the release build's (docs/build.md)

import pyarrow as pa  # noqa: E402

from amqpscope._native import ParquetSink, _build_floor  # noqa: E402
from amqpscope.pipeline import Options, open_decoder  # noqa: E402
from amqpscope.spark.schema import TABLE_OF_KIND, TABLES  # noqa: E402
from amqpscope.spark.worker import JobConfig, file_schema, parquet_options  # noqa: E402

NAMES = ("events", "messages", "connections")
OPTIONS = Options(show_credentials=False, keep_bodies=False)
CONSTANTS = {"capture": "file:///bench/large.pcap", "capture_id": "0123456789abcdef", "capture_date": "2024-11-25"}


def decode_only(path: Path, batch_rows: int) -> dict[str, int]:
    dec = open_decoder(path, options=OPTIONS)
    while dec.arrow({}, CONSTANTS, TABLE_OF_KIND, batch_rows) is not None:
        pass
    return {}


def core(path: Path, batch_rows: int) -> dict[str, int]:
    schemas = {name: TABLES[name].schema for name in NAMES}
    dec = open_decoder(path, options=OPTIONS)
    rows = dict.fromkeys(NAMES, 0)
    while (batches := dec.arrow(schemas, CONSTANTS, TABLE_OF_KIND, batch_rows)) is not None:
        for name, obj in batches.items():
            rows[name] += pa.record_batch(obj).num_rows
    return rows


def core_parquet(path: Path, batch_rows: int) -> dict[str, int]:

    schemas = {name: file_schema(name) for name in NAMES}
    sink = ParquetSink(schemas, CONSTANTS, TABLE_OF_KIND, parquet_options(JobConfig(partitions=())))
    with tempfile.TemporaryDirectory() as tmp:
        files = {name: open(f"{tmp}/{name}.parquet", "wb") for name in NAMES}  # noqa: SIM115
        dec = open_decoder(path, options=OPTIONS)
        while dec.to_sink(sink, batch_rows) is not None:
            for name, data in sink.take().items():
                files[name].write(data)
        sink.end_events()
        last, rows = sink.close()
        for name, data in last.items():
            files[name].write(data)
        for f in files.values():
            f.close()
    return {name: rows.get(name, 0) for name in NAMES}


def python_events(path: Path, batch_rows: int) -> dict[str, int]:
    rows = dict.fromkeys(NAMES, 0)
    dec = open_decoder(path, options=OPTIONS)
    while (events := dec.events()) is not None:
        for ev in events:
            name = TABLE_OF_KIND.get(ev.kind)
            if name in rows:
                rows[name] += 1
    return rows


def build_floor(path: Path, repeats: int) -> tuple[int, float, float]:
    """(rows, core build s, floor s), each the best of ``repeats`` (see the module's docstring)."""
    names = (*NAMES, "ledger")
    schemas = {name: file_schema(name) for name in names}
    options = Options(show_credentials=False, keep_bodies=False, validate=False, ledger=True)
    best = (0, float("inf"), float("inf"))
    for _ in range(repeats):
        dec = open_decoder(path, options=options)
        rows, build, floor = _build_floor(dec, schemas, CONSTANTS, TABLE_OF_KIND, JobConfig(partitions=()).batch_rows)
        best = (rows, min(best[1], build), min(best[2], floor))
    return best


def timed(fn: Callable[[Path, int], dict[str, int]], path: Path, batch_rows: int) -> tuple[float, dict[str, int]]:
    gc.collect()
    t = time.process_time()
    rows = fn(path, batch_rows)
    return time.process_time() - t, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("capture", nargs="?", default=str(ROOT / "bench" / "data" / "large.pcap"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-rows", type=int, default=65536)
    args = ap.parse_args()
    path = Path(args.capture)
    size = path.stat().st_size
    paths = {"decode only": decode_only, "core": core, "core + Parquet": core_parquet, "Python events": python_events}
    best = dict.fromkeys(paths, float("inf"))
    counts: dict[str, dict[str, int]] = {}
    for _ in range(args.repeats):
        for name, fn in paths.items():
            secs, rows = timed(fn, path, args.batch_rows)
            best[name] = min(best[name], secs)
            counts[name] = rows
    assert counts["core"] == counts["core + Parquet"] == counts["Python events"], counts
    events = counts["core"]["events"]
    print(f"{path.name}: {size / 1e6:.1f} MB, rows {counts['core']}, best of {args.repeats} (CPU s)")
    for name, secs in best.items():
        print(f"  {name:15} {secs:7.2f} s  {events / secs / 1e6:6.2f} M events rows/s  {size / secs / 1e6:7.1f} MB/s")
    build_core = best["core"] - best["decode only"]
    print(f"  building alone (core minus decode only): {build_core:.2f} s ({events / build_core / 1e6:.2f} M rows/s); "
          f"Parquet writing alone: {best['core + Parquet'] - best['core']:.2f} s")  # fmt: skip
    rows, build, floor = build_floor(path, args.repeats)
    print(f"  the core tables and the ledger ({rows} rows, trips of the job's size): the core builds them in "
          f"{build:.2f} s; appending the same values into fresh builders takes {floor:.2f} s (the floor of any "
          f"build), so building them any other way could save at most {build - floor:.2f} s "
          f"({(build - floor) / size * 1e6:.4f} s per MB)")  # fmt: skip


if __name__ == "__main__":
    main()

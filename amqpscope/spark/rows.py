"""The few rows the core does not build: ``errors`` and ``captures``, one row per capture slice.

Every event table (``events``, ``messages``, ``connections``, ``findings``) comes from the core as
Arrow record batches (``_native.Decoder.arrow``), without a Python object per row. These two are
built from plain dicts; neither has a map column.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc


def records_batch(schema: pa.Schema, rows: Iterable[Mapping[str, Any]], constants: Mapping[str, str]) -> pa.RecordBatch:
    """A batch of ``schema`` from dict rows (missing columns are null); ``constants`` fill their
    columns, and ``time`` is ``ts`` as microseconds truncated, as the core computes it."""
    rows = list(rows)
    columns: dict[str, Any] = {}
    for f in schema:
        if f.name in constants:
            columns[f.name] = pa.repeat(pa.scalar(constants[f.name], f.type), len(rows))
        elif f.name == "time":
            ts = pa.array([r["ts"] for r in rows], pa.float64())
            columns[f.name] = pc.cast(pc.multiply(ts, 1e6), pa.int64(), safe=False).cast(f.type)
        else:
            columns[f.name] = pa.array([r.get(f.name) for r in rows], f.type)
    return pa.RecordBatch.from_arrays([columns[f.name] for f in schema], schema=schema)

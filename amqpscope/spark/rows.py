"""The few rows the core does not build: ``errors``, ``captures`` and ``diagnoses``.

Every event table comes from the core (``_native.ParquetSink``). These rows are made in Python,
from plain dicts, and handed to the same sink as JSON (``amqpscope_core::json_rows``): no pyarrow
array is built here, so a one-process decode never imports pandas (pyarrow does at its first
``pa.array``, ~0.15 s).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa


def records_json(schema: pa.Schema, rows: Iterable[Mapping[str, Any]], constants: Mapping[str, str]) -> bytes:
    """Rows of ``schema`` as the sink reads them: missing columns null, ``constants`` fill their
    columns, ``time`` left out (the core derives it from ``ts``), a map column is a list of
    ``[key, value]`` pairs."""
    out = []
    for r in rows:
        row: dict[str, Any] = {}
        for f in schema:
            if f.name in constants:
                row[f.name] = constants[f.name]
            elif f.name != "time":  # the core derives it from ts, as for the events' rows
                v = r.get(f.name)
                row[f.name] = list(v.items()) if isinstance(v, dict) else v
        out.append(row)
    return json.dumps(out).encode()

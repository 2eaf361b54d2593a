"""The spec model compiled to plain data for the native core (one JSON document).

The core executes these tables instead of generated code: per method its ids, the name the events
show, the content flag, its argument reads and what answers it (for the ledger, with the errata of
``errata.py``); per content class its properties in flag order. An
argument read is either a *fixed run* (consecutive fixed-width fields and packed bits, read as one
unit, as the Python decoders do with one ``struct``: a run that does not fit is one error) or a
single variable-width field (``shortstr``, ``longstr``, ``table``). Names are the keys of the
Python args/properties dicts (``Field.ident``).

Field tables carry their types on the wire, so the codes the core accepts (with RabbitMQ's errata
and the 0-9 codes) are listed here too, to keep the core's table codec and values.py in step.

    python -m amqpscope.dissect.tables [SPEC.xml]   # print the document
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from . import errata
from .spec import DEFAULT_SPEC, Field, Spec, bundled_spec_path, load_spec

FORMAT = 1
# wire width of each fixed-width type (bits are packed, up to 8 in one octet)
_WIDTH = {"octet": 1, "short": 2, "long": 4, "longlong": 8, "timestamp": 8}
# the field-table type codes values.py decodes, by value kind (see values._DECODERS)
FIELD_TYPES = {
    "t": "bool", "b": "i8", "B": "u8", "s": "i16", "u": "u16", "U": "i16", "I": "i32", "i": "u32",
    "l": "i64", "L": "i64", "f": "f32", "d": "f64", "D": "decimal", "S": "longstr", "x": "bytes",
    "A": "array", "T": "timestamp", "F": "table", "V": "void",
}  # fmt: skip


def _reads(fields: tuple[Field, ...]) -> list[dict[str, Any]]:
    """The reads of a field list, fixed-width neighbours merged into runs (compiler._groups)."""
    out: list[dict[str, Any]] = []
    run: list[list[Any]] = []  # [name, type, byte offset in the run, bit]
    size = 0
    bits = 0  # bits already packed into the run's last octet (0: no open bit octet)
    for f in fields:
        if f.type == "bit":
            if bits and bits < 8:
                run.append([f.ident, "bit", size - 1, bits])
                bits += 1
            else:
                run.append([f.ident, "bit", size, 0])
                size += 1
                bits = 1
        elif f.type in _WIDTH:
            run.append([f.ident, f.type, size, 0])
            size += _WIDTH[f.type]
            bits = 0
        else:
            if run:
                out.append({"fixed": size, "items": run})
                run, size, bits = [], 0, 0
            kind = "longstr" if f.type == "content" else f.type
            out.append({"var": kind, "name": f.ident})
    if run:
        out.append({"fixed": size, "items": run})
    return out


def _property(f: Field) -> list[str]:
    return [f.ident, "longstr" if f.type == "content" else f.type]


def server_opener(spec: Spec) -> tuple[int, int] | None:
    """(class, method) of the server's first method on a connection: the first ``S:`` step of the
    first class's grammar (``open-connection = C:protocol-header S:START …`` in 0-9 and 0-9-1).
    A capture that starts after the handshake sees the server's stream begin with it, or not at all."""
    if not spec.classes or not spec.classes[0].grammar:
        return None
    step = re.search(r"\bS:([A-Za-z][A-Za-z-]*)", spec.classes[0].grammar)
    first = spec.classes[0]
    for m in first.methods:
        if step and m.name.lower() == step.group(1).lower():
            return (first.index, m.index)
    return None


def compile_tables(spec: Spec) -> dict[str, Any]:
    opener = server_opener(spec)
    methods = [
        {
            "class": m.class_index,
            "method": m.index,
            "name": m.full_name,
            "content": m.content,
            "sent_by": sorted(m.sent_by()),
            "opens_stream": (m.class_index, m.index) == opener,
            "reads": _reads(m.fields),
            # request/response pairs for the core's ledger, errata applied (errata.py)
            "synchronous": errata.synchronous(m),
            "responses": list(errata.responses(m)),
            "no_wait": errata.no_wait_field(m),
        }
        for m in spec.methods()
    ]
    classes = [{"class": c.index, "properties": [_property(f) for f in c.properties]} for c in spec.classes]
    return {
        "format": FORMAT,
        "version": spec.version,
        "methods": methods,
        "classes": classes,
        "field_types": FIELD_TYPES,
    }


def to_json(spec: Spec) -> str:
    """The document the core reads (``SpecTables::from_json``)."""
    return json.dumps(compile_tables(spec), separators=(",", ":"))


def tables_json(spec_path: str | Path | None = None) -> str:
    """The tables of a spec file (default: the shipped 0-9-1 with RabbitMQ's extensions)."""
    return to_json(load_spec(Path(spec_path) if spec_path else bundled_spec_path(DEFAULT_SPEC)))


if __name__ == "__main__":
    print(tables_json(sys.argv[1] if len(sys.argv) > 1 else None))

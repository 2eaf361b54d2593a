"""The core's event model (crates/amqpscope-core/src/event.rs) and the Python one (amqpscope/events.py)
are one contract: for every kind, the keys of the core's JSON lines are exactly ``kind`` and the
record fields of the Python class, in order, and the event objects the core makes are instances of
those classes with every field set."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import variants

from amqpscope.events import EVENT_TYPES, Event, Finding
from amqpscope.pipeline import Options, RunStats, decode_source, jsonl_batches
from tests.conftest import CAPTURES

ROOT = Path(__file__).resolve().parent.parent
NOT_IN_CORE = {Finding.kind}  # findings join the core with validation


def _record_names(cls: type[Event]) -> list[str]:
    return ["kind", *(f.name for f in dataclasses.fields(cls) if f.metadata.get("record", True))]


def _damaged(tmp_path: Path) -> list[Path]:
    """Captures between them holding every kind: a dropped segment, a mid-frame start, a frame-end
    octet that is not 0xce."""
    src = ROOT / "samples" / "confirms.pcap"
    pkts = [i for i, seg in variants.data_packets(src) if len(seg.payload) > 40]
    out = []
    for name, make in (
        ("drop", lambda d: variants.drop_packets(src, d, pkts[2:3])),
        ("mid", lambda d: variants.trim_payload(src, d, pkts[1], 3)),
        ("bad-end", lambda d: variants.set_payload_byte(src, d, pkts[3], -1, 0)),
    ):
        dst = tmp_path / f"{name}.pcap"
        make(dst)
        out.append(dst)
    return out


def test_core_records_have_the_python_fields_in_order(tmp_path: Path) -> None:
    sources = [*sorted((ROOT / "samples").glob("*.pcap")), *sorted(CAPTURES.glob("s0[15]*.pcap")), *_damaged(tmp_path)]
    seen: dict[str, list[str]] = {}
    tls = ROOT / "samples" / "tls" / "amqps-tls13"
    keyed = Options(tls_keylog=tls.with_suffix(".keys").read_text())
    ledger = Options(ledger=True)
    for path, options in [*((p, ledger) for p in sources), (tls.with_suffix(".pcap"), keyed)]:
        for chunk in jsonl_batches(path, options=options):
            for line in chunk.splitlines():
                rec = json.loads(line)
                seen.setdefault(rec["kind"], list(rec))
    by_kind = {cls.kind: cls for cls in EVENT_TYPES}
    missing = {k for k in by_kind if k not in seen} - NOT_IN_CORE - {"accounting"}
    assert not missing, f"no capture here produced {missing}"
    for kind, keys in seen.items():
        assert keys == _record_names(by_kind[kind]), kind


def test_ledger_events_only_when_asked_for() -> None:
    """``decode`` stays as it was: the ledger's events come with ``Options(ledger=True)`` only."""
    path = ROOT / "samples" / "confirms.pcap"
    plain = [json.loads(line)["kind"] for chunk in jsonl_batches(path) for line in chunk.splitlines()]
    full = [json.loads(line)["kind"] for chunk in jsonl_batches(path, options=Options(ledger=True))
            for line in chunk.splitlines()]  # fmt: skip
    assert "ledger" not in plain and "ledger" in full
    assert [k for k in full if k != "ledger"] == plain


def test_every_ledger_entry_and_outcome_is_documented() -> None:
    """The entries and outcomes the core makes are those docs/analytics.md lists."""
    doc = (ROOT / "docs" / "analytics.md").read_text()
    seen: set[tuple[str, str | None]] = set()
    for src in sorted(CAPTURES.glob("*.pcap")):
        for chunk in jsonl_batches(src, options=Options(ledger=True, ports=frozenset({5672, 5673}))):
            for line in chunk.splitlines():
                rec = json.loads(line)
                if rec["kind"] == "ledger":
                    seen.add((rec["entry"], rec["outcome"]))
    for entry, outcome in seen:
        assert f"`{entry}`" in doc, entry
        assert outcome is None or f"`{outcome}`" in doc, (entry, outcome)


def test_core_objects_are_the_python_classes() -> None:
    stats = RunStats()
    for ev in decode_source(ROOT / "samples" / "confirms.pcap", stats=stats, options=Options(ledger=True)):
        assert type(ev) in EVENT_TYPES
        for f in dataclasses.fields(ev):
            getattr(ev, f.name)  # every slot set
    acc = stats.accounting_event()  # made in Python from the core's counters
    assert list(acc.to_record()) == _record_names(type(acc))

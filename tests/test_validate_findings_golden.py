"""Golden findings: the core's validator on 211 inputs, finding for finding.

The inputs: every shared capture and sample, damaged variants of each shared capture (a start after
the handshake, lost, reordered and duplicated segments, a corrupted byte, a cut-off end) and every
synthetic one-finding case of test_validate_rules. ``tests/golden/findings/<group>.jsonl`` holds
their findings, one ``Finding.to_record()`` per line (``packets`` as a list) with the ``input`` it
came from first; groups: ``captures``, ``damaged``, ``synthetic``.

The goldens were written by the Python validator just before it was deleted (issue 16: validation
moved into the core, one implementation) and are now kept by the core: this is the differential
evidence that the move changed nothing but the intended differences listed in ``CHANGES``, each
named with why and with the values the core gives instead. A change of behaviour shows up here as
a diff to read; when it is intended, regenerate with
``AMQPSCOPE_UPDATE_GOLDEN=1 pytest tests/test_validate_findings_golden.py`` (not in parallel: each
input rewrites its lines of its group's file) and commit the new files with the change.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
import variants
from conftest import CAPTURES

from amqpscope.capture import CaptureError, read_packets
from amqpscope.dissect.codec import get_codec
from amqpscope.events import Event, Finding
from amqpscope.pipeline import Options, decode_packets, decode_source

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = Path(__file__).parent / "golden" / "findings"
SHARED = sorted(CAPTURES.glob("*.pcap")) if CAPTURES.is_dir() else []
SAMPLES = sorted((ROOT / "samples").glob("*.pcap"))
PORTS = frozenset({5672, 5673, 25672})

# (input name, rule) -> (why the core's finding differs from the Python validator's golden one: the
# defects issue 16 names, fixed in the core; the fields the core gives instead, or None to skip the
# finding). The goldens keep the Python validator's values; the override is applied to them.
CHANGES: dict[tuple[str, str], tuple[str, dict[str, Any] | None]] = {
    ("channel_max_above_offer", "connection.tune-ok.channel-max.assert-le"): (
        "code 530, the spec's rule 'upper-limit' on tune-ok, instead of the generic 502 of an assert",
        {"code": 530},
    ),
    ("exchange_name_empty", "exchange.declare.exchange.assert-notnull"): (
        "code 406, the spec's rule 'syntax' on exchange.declare, with RabbitMQ's 403 beside it",
        {"code": 406, "rabbitmq_code": 403},
    ),
    ("exchange_redeclared_with_other_type", "exchange.declare.type.typed"): (
        "RabbitMQ's own answer (406) beside the spec's code, and the server's close with it is "
        "RabbitMQ's answer, not a wrong code",
        {
            "rabbitmq_code": 406,
            "peer_reaction": "server sent channel.close 406 at packet 16: "
            "matches RabbitMQ's answer (the spec says 530)",
        },
    ),
    ("s02_pika_confirms.pcap", "connection.close.missing"): (
        "the message says whether channels were still open, which tells the broker-tolerated quirk "
        "(an idle client dropping TCP) from cut-off work by the finding alone",
        {"message": "the connection ended (rst) without connection.close, with no channel open"},
    ),
    ("s02_pika_confirms.pcap:corrupt-byte", "connection.close.missing"): (
        "the message says whether channels were still open, which tells the broker-tolerated quirk "
        "(an idle client dropping TCP) from cut-off work by the finding alone",
        {"message": "the connection ended (rst) without connection.close, with no channel open"},
    ),
    ("s02_pika_confirms.pcap:duplicated", "connection.close.missing"): (
        "the message says whether channels were still open, which tells the broker-tolerated quirk "
        "(an idle client dropping TCP) from cut-off work by the finding alone",
        {"message": "the connection ended (rst) without connection.close, with no channel open"},
    ),
    ("s02_pika_confirms.pcap:reordered", "connection.close.missing"): (
        "the message says whether channels were still open, which tells the broker-tolerated quirk "
        "(an idle client dropping TCP) from cut-off work by the finding alone",
        {"message": "the connection ended (rst) without connection.close, with no channel open"},
    ),
    ("frames_after_refused_header", "protocol.header-reply"): (
        "a refused protocol header is a failed connection: a warning saying so, not info",
        {
            "severity": "warning",
            "message": "connection failed: the server refuses the client's protocol header (AMQP 0-9-1), "
            "answers with its own and closes the connection",
        },
    ),
}

Record = dict[str, Any]


def _records(events: Iterable[Event]) -> list[Record]:
    out = []
    for ev in _tolerant(events):
        if isinstance(ev, Finding):
            r = ev.to_record()
            out.append({**r, "packets": list(r["packets"])})
    return out


def _tolerant(events: Iterable[Event]) -> Iterable[Event]:
    try:
        yield from events
    except CaptureError:
        return  # a damaged file: the findings on the events decoded before the damage


def _golden_lines(group: str) -> list[Record]:
    path = GOLDEN / f"{group}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _golden(group: str, name: str) -> list[Record]:
    return [{k: v for k, v in r.items() if k != "input"} for r in _golden_lines(group) if r["input"] == name]


def _update(group: str, name: str, records: list[Record]) -> None:
    lines = [r for r in _golden_lines(group) if r["input"] != name] + [{"input": name, **r} for r in records]
    lines.sort(key=lambda r: r["input"])  # stable: each input's findings keep their order
    text = "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in lines)
    (GOLDEN / f"{group}.jsonl").write_text(text)


def _expected(name: str, golden: list[Record]) -> list[Record]:
    """The golden findings with CHANGES applied: overridden, or left out where no values are stated."""
    out = []
    for r in golden:
        change = CHANGES.get((name, r["rule"]))
        if change is None:
            out.append(r)
        elif change[1] is not None:
            out.append({**r, **change[1]})
    return out


def _skipped(name: str, records: list[Record]) -> list[Record]:
    return [r for r in records if CHANGES.get((name, r["rule"]), ("", {}))[1] is not None]


def check(group: str, name: str, core: list[Record]) -> None:
    if os.environ.get("AMQPSCOPE_UPDATE_GOLDEN"):
        _update(group, name, core)
    want, got = _expected(name, _golden(group, name)), _skipped(name, core)
    if want == got:
        return
    for i, (w, g) in enumerate(zip(want, got, strict=False)):
        if w != g:
            diff = {k: (w.get(k), g.get(k)) for k in w.keys() | g.keys() if w.get(k) != g.get(k)}
            raise AssertionError(f"{name}: finding {i} differs (golden, core): {diff}\ngolden: {w}\ncore:   {g}")
    raise AssertionError(f"{name}: {len(want)} golden findings, {len(got)} core findings; first extra: "
                         f"{(want[len(got):] or got[len(want):])[0]}")  # fmt: skip


def _file(group: str, name: str, path: Path) -> None:
    checked = Options(ports=PORTS, keep_bodies=False, validate=True)
    check(group, name, _records(decode_source(path, get_codec(), checked)))


@pytest.mark.parametrize("path", SHARED + SAMPLES, ids=lambda p: p.name)
def test_captures(path: Path) -> None:
    _file("captures", path.name, path)


def _layout_packets(src: Path) -> int:
    return sum(1 for _ in read_packets(src))


# variant name -> writer(src, dst) at a point chosen from the capture's own size
VARIANTS: dict[str, Callable[[Path, Path], Any]] = {
    "after-handshake": lambda s, d: variants.cut_first(s, d, max(1, _layout_packets(s) // 5)),
    "mid-capture": lambda s, d: variants.cut_first(s, d, max(1, _layout_packets(s) // 2)),
    "lost-segment": lambda s, d: variants.drop_packets(s, d, [_layout_packets(s) // 3]),
    "lost-segments": lambda s, d: variants.drop_packets(s, d, range(_layout_packets(s) // 4, _layout_packets(s), 7)),
    "reordered": lambda s, d: variants.swap_adjacent(s, d, _layout_packets(s) // 2),
    "duplicated": lambda s, d: variants.duplicate(s, d, range(3, _layout_packets(s), 5)),
    "corrupt-byte": lambda s, d: _corrupt(s, d),
    "cut-off-end": lambda s, d: variants.truncate_bytes(s, d, 1000),
}


def _corrupt(src: Path, dst: Path) -> int:
    data = variants.data_packets(src)
    index, seg = data[len(data) // 2]
    return variants.set_payload_byte(src, dst, index, min(len(seg.payload) - 1, 7), 0xEE)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("path", SHARED, ids=lambda p: p.name)
def test_damaged_variants(path: Path, variant: str, tmp_path: Path) -> None:
    dst = tmp_path / f"{path.stem}-{variant}.pcap"
    VARIANTS[variant](path, dst)
    _file("damaged", f"{path.name}:{variant}", dst)


def _synthetic_cases() -> dict[str, Any]:
    import test_validate_rules as rules

    return rules.CASES


@pytest.mark.parametrize("case", sorted(_synthetic_cases()))
def test_synthetic_cases(case: str) -> None:
    import test_validate_rules as rules

    from amqpscope.testing.synth import Capture

    spec = rules._CODECS.get(case)
    cap = Capture(get_codec(spec) if spec else None)
    rules.CASES[case](cap)
    packets = read_packets(io.BytesIO(cap.pcap()))
    check("synthetic", case, _records(decode_packets(packets, cap.codec, Options(keep_bodies=False, validate=True))))


def test_goldens_name_only_known_inputs() -> None:
    """No stale inputs: every input of a golden file is one this module runs (its findings checked)."""
    known = {
        "captures": {p.name for p in SHARED + SAMPLES},
        "damaged": {f"{p.name}:{v}" for p in SHARED for v in VARIANTS},
        "synthetic": set(_synthetic_cases()),
    }
    for group, names in known.items():
        if group != "synthetic" and not SHARED:
            continue  # the shared captures are not here
        stale = {r["input"] for r in _golden_lines(group)} - names
        assert not stale, f"{group}: golden findings of inputs no test runs: {sorted(stale)}"
    everything = set().union(*known.values())
    assert all(key[0] in everything for key in CHANGES), "a CHANGES entry names an input no test runs"

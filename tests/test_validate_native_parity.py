"""Differential test: the core's validator against the Python validator it replaces (issue 16).

Both run on the same decode: every shared capture and sample, damaged variants of them (a start
after the handshake, lost, reordered and duplicated segments, a corrupted byte, a cut-off end) and
every synthetic one-finding case of test_validate_rules. Their findings must be equal field for
field and in order, apart from the intended changes listed in ``CHANGES``, each named with why.

This module goes when the Python validator does: from then on the core's findings are checked by
the synthetic cases and the goldens.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
import variants
from conftest import CAPTURES

from amqpscope.capture import CaptureError, read_packets
from amqpscope.dissect.codec import Codec, get_codec
from amqpscope.events import Event, Finding
from amqpscope.pipeline import Options, decode_packets, decode_source

validator = pytest.importorskip("amqpscope.validate.validator")

ROOT = Path(__file__).resolve().parents[1]
SHARED = sorted(CAPTURES.glob("*.pcap")) if CAPTURES.is_dir() else []
SAMPLES = sorted((ROOT / "samples").glob("*.pcap"))
PORTS = frozenset({5672, 5673, 25672})

# (input name, rule) -> why the core's finding differs from the Python validator's: the defects
# issue 16 names, fixed in the core. Filled as the fixes land.
CHANGES: dict[tuple[str, str], str] = {
    ("channel_max_above_offer", "connection.tune-ok.channel-max.assert-le"):
        "code 530, the spec's rule 'upper-limit' on tune-ok, instead of the generic 502 of an assert",
    ("exchange_name_empty", "exchange.declare.exchange.assert-notnull"):
        "code 406, the spec's rule 'syntax' on exchange.declare, with RabbitMQ's 403 beside it",
    ("exchange_redeclared_with_other_type", "exchange.declare.type.typed"):
        "RabbitMQ's own answer (406) beside the spec's code",
    ("frames_after_refused_header", "protocol.header-reply"):
        "a refused protocol header is a failed connection: a warning saying so, not info",
}

Record = dict[str, Any]


def _records(events: Iterable[Event]) -> list[Record]:
    return [ev.to_record() for ev in events if isinstance(ev, Finding)]


def _python(events: Callable[[], Iterable[Event]], codec: Codec) -> list[Record]:
    return _records(validator.Validator(codec.spec).check(iter(_tolerant(events()))))


def _tolerant(events: Iterable[Event]) -> Iterable[Event]:
    try:
        yield from events
    except CaptureError:
        return  # a damaged file: both validators see the events decoded before the damage


def _core(events: Iterable[Event]) -> list[Record]:
    return _records(_tolerant(events))


def _strip_changes(name: str, records: list[Record]) -> list[Record]:
    return [r for r in records if (name, r["rule"]) not in CHANGES]


def assert_equal(name: str, python: list[Record], core: list[Record]) -> None:
    python, core = _strip_changes(name, python), _strip_changes(name, core)
    if python == core:
        return
    for i, (p, c) in enumerate(zip(python, core, strict=False)):
        if p != c:
            diff = {k: (p.get(k), c.get(k)) for k in p.keys() | c.keys() if p.get(k) != c.get(k)}
            raise AssertionError(f"{name}: finding {i} differs (python, core): {diff}\npython: {p}\ncore:   {c}")
    raise AssertionError(f"{name}: {len(python)} python findings, {len(core)} core findings; first extra: "
                         f"{(python[len(core):] or core[len(python):])[0]}")  # fmt: skip


def _file_parity(name: str, path: Path) -> None:
    codec = get_codec()
    plain = Options(ports=PORTS, keep_bodies=False)
    checked = Options(ports=PORTS, keep_bodies=False, validate=True)
    python = _python(lambda: decode_source(path, codec, plain), codec)
    core = _core(decode_source(path, codec, checked))
    assert_equal(name, python, core)


@pytest.mark.parametrize("path", SHARED + SAMPLES, ids=lambda p: p.name)
def test_captures(path: Path) -> None:
    _file_parity(path.name, path)


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
    _file_parity(f"{path.name}:{variant}", dst)


def _synthetic_cases() -> dict[str, Any]:
    import test_validate_rules as rules

    return rules.CASES


@pytest.mark.parametrize("case", sorted(_synthetic_cases()))
def test_synthetic_cases(case: str) -> None:
    import test_validate_rules as rules

    spec = rules._CODECS.get(case)
    from amqpscope.testing.synth import Capture

    cap = Capture(get_codec(spec) if spec else None)
    rules.CASES[case](cap)
    codec = cap.codec
    pcap = cap.pcap()

    def packets() -> Any:
        return read_packets(io.BytesIO(pcap))

    python = _python(lambda: decode_packets(packets(), codec, Options(keep_bodies=False)), codec)
    core = _core(decode_packets(packets(), codec, Options(keep_bodies=False, validate=True)))
    assert_equal(case, python, core)

"""The Rust core's event conversions and JSONL writer against the Python face.

For every shared capture, sample and damaged variant, the Python pipeline's events are
(a) written by the core (``_native._jsonl``: Python events → core events → JSONL) and compared byte
for byte with what ``amqpscope decode --format jsonl`` writes (the JsonlWriter over orjson), for
``--body`` none, preview and full; and (b) sent through the core and back
(``_native._event_roundtrip``) and compared field by field, types included (Decimal with its
exponent, Timestamp, Problem, bytes, dict order). Hand-made events cover what captures rarely hold:
tricky strings, floats, decimals, nested tables, non-UTF-8 bytes, None fields, body views.

Findings come from the validator, which the core does not have yet: they are left out on both sides.
"""

from __future__ import annotations

import contextlib
import io
import math
import random
import struct
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import variants
from conftest import CAPTURES

from amqpscope.capture import CaptureError, read_packets
from amqpscope.dissect.values import Problem, Timestamp
from amqpscope.events import Accounting, Connection, Event, Frame, Gap, Malformed, Message, ProtocolHeader, Resync
from amqpscope.output.records import record
from amqpscope.output.writers import JsonlWriter
from amqpscope.pipeline import Options, decode_packets

native = pytest.importorskip("amqpscope._native")
if not hasattr(native, "_jsonl"):
    pytest.skip("amqpscope._native has no _jsonl (an older build)", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = sorted((ROOT / "samples").glob("*.pcap"))
SHARED = sorted(CAPTURES.glob("*.pcap")) if CAPTURES.is_dir() else []
ALL = SHARED + SAMPLES
SMALL = [p for p in ALL if p.stat().st_size < 1_000_000]  # the damaged variants: Python decodes them
OPTIONS = Options(ports=frozenset({5672, 5673, 25672}), ledger=True)  # ledger events checked too
BODIES = ("none", "preview", "full")


def _events(path: Path) -> list[Event]:
    events: list[Event] = []
    with contextlib.suppress(CaptureError):  # a truncated file: what was read still counts
        for ev in decode_packets(read_packets(path), options=OPTIONS):
            if ev.kind != "finding":
                events.append(ev)
    return events


def python_jsonl(events: list[Event], body: str) -> bytes:
    """What ``decode --format jsonl [--body B]`` writes for these events (cli/decode.py's loop)."""
    raw = io.BytesIO()
    writer = JsonlWriter(io.TextIOWrapper(raw), body)
    if body == "none":
        writer.write_all(events)
    else:
        for ev in events:
            writer.write(ev, record(ev, body))
    writer.close()
    return raw.getvalue()


def assert_same_jsonl(events: list[Event]) -> None:
    for body in BODIES:
        want, got = python_jsonl(events, body), native._jsonl(events, body)
        if want != got:
            for i, (a, b) in enumerate(zip(want.splitlines(), got.splitlines(), strict=False)):
                assert a == b, f"body={body} line {i}"
            assert want == got, f"body={body}: line counts differ"


def same_value(a: Any, b: Any, where: str = "") -> None:
    """Equal values of the same types; dicts in the same order; Decimals with the same exponent."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, dict):
        assert list(a) == list(b), f"{where}: keys"
        for k in a:
            same_value(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{where}: length"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same_value(x, y, f"{where}[{i}]")
    elif isinstance(a, Decimal):
        assert a.as_tuple() == b.as_tuple(), where
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b), where
    else:
        assert a == b, where


def assert_roundtrip(events: list[Event]) -> None:
    for ev in events:
        back = native._event_roundtrip(ev)
        assert type(back) is type(ev)
        for name in ev.__dataclass_fields__:
            same_value(getattr(ev, name), getattr(back, name), f"{ev.kind}@{ev.packet}.{name}")


# --- captures --------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_capture(path: Path) -> None:
    events = _events(path)
    assert events
    assert_same_jsonl(events)
    assert_roundtrip(events)


def _variant_makers(path: Path) -> dict[str, Any]:
    data = variants.data_packets(path)
    middle = data[len(data) // 2][0] if data else 1
    some = [idx for idx, _ in data[1::7]]
    return {
        "cut_first": lambda s, d: variants.cut_first(s, d, 5),
        "drop": lambda s, d: variants.drop_packets(s, d, some),
        "duplicate": lambda s, d: variants.duplicate(s, d, some),
        "swap": lambda s, d: variants.swap_adjacent(s, d, middle),
        "truncate": lambda s, d: variants.truncate_bytes(s, d, 40),
        "ipv6": variants.to_ipv6,
        "vlan": variants.add_vlan,
    }


VARIANTS = ("cut_first", "drop", "duplicate", "swap", "truncate", "ipv6", "vlan")


@pytest.mark.parametrize("kind", VARIANTS)
@pytest.mark.parametrize("path", SMALL, ids=lambda p: p.name)
def test_damaged_variant(path: Path, kind: str, tmp_path: Path) -> None:
    dst = tmp_path / f"{kind}.pcap"
    _variant_makers(path)[kind](path, dst)
    events = _events(dst)
    assert_same_jsonl(events)
    assert_roundtrip(events)


# --- hand-made events -----------------------------------------------------------------------------

TRICKY = [
    "", "plain", 'quote " backslash \\ slash /', "".join(map(chr, range(0x20))), "\x7f del", "é ü 中文 😀",
    "\u2028\u2029 line seps", "\u00a0 nbsp \u200b zwsp \ufeff bom", "<script>&amp;</script>", "\ud7ff\ue000\U0010ffff",
]  # fmt: skip
BASE: dict[str, Any] = {"packet": 3, "ts": 1732527600.123456, "conn": 0, "dir": "c2s", "channel": 1}


def _table() -> dict[str, Any]:
    return {
        "str": "x", "bytes": b"\xff\xfe\x00non-utf8", "empty": b"", "int": -(2**63), "big": 2**64 - 1, "bool": True,
        "false": False, "none": None, "float": 0.1, "nan": float("nan"), "inf": float("-inf"), "neg0": -0.0,
        "dec": Decimal(150).scaleb(-2), "dec0": Decimal(0).scaleb(-7), "decneg": Decimal(-123).scaleb(-10),
        "ts": Timestamp(1732527600), "problem": Problem("unknown field type 'Z' (0x5a)"),
        "nested": {"a": [1, "two", {"deep": [b"\x01", [], {}]}], "é key\n": {"x": None}},
        **{f"tricky{i}": s for i, s in enumerate(TRICKY)},
        **{s: i for i, s in enumerate(TRICKY)},
    }  # fmt: skip


def _hand_made() -> list[Event]:
    t = _table()
    return [
        ProtocolHeader(**BASE, version="0-9-1", raw="414d515000000901"),
        ProtocolHeader(packet=1, ts=0.0, conn=-1, version="unknown (1.2.3.4)", raw="00ff00ff00ff00ff"),
        Frame(**BASE, type="method", size=12, class_id=60, method_id=40, method="basic.publish", args=t),
        Frame(**BASE, type="header", size=99, class_id=60, body_size=2**63, properties=t, resync=True, problem="x\ty"),
        Frame(**BASE, type="body", size=3, payload=b"\x00\x01\x02"),
        Frame(packet=9, ts=1e-7, conn=2, type="unknown-9", size=0),
        Message(**BASE, method="basic.deliver", args={"delivery_tag": 2**64 - 1}, properties={}, body_size=0,
                body_received=0, complete=True, first_packet=1, frames=2, body_sha256=None, body=b""),
        Message(**BASE, method="basic.publish", args=t, properties=t, body_size=5, body_received=4, complete=False,
                first_packet=2, frames=3, body_sha256="ab" * 32, body=None),
        Gap(**BASE, size=0), Gap(packet=4, ts=2.5, conn=1, dir="s2c", size=2**40, lost_frame="method"),
        Resync(**BASE, skipped=17, reason="mid-stream start"), Malformed(**BASE, reason="bad frame end 0x00", offset=8),
        Connection(packet=1, ts=1.0, conn=0, state="open", client="127.0.0.1:5000", server="[::1]:5672"),
        Connection(**BASE, state="close", client="c", server="s", syn_seen=True, version="0-9-1", ended="rst",
                   frame_max=131072, channel_max=2047, heartbeat=60, mechanism="PLAIN", user="guest", password="pw",
                   vhost="/", client_product="pika", client_version="1.3", client_platform="Python",
                   server_product="RabbitMQ", server_version="3.13", close_code=320, close_text="CONNECTION_FORCED",
                   close_by="server", frames_c2s=1, frames_s2c=2, bytes_c2s=3, bytes_s2c=4, client_properties=t,
                   server_properties={"capabilities": {"publisher_confirms": True}}),
        Accounting(packet=10, ts=3.0, conn=-1, stream_bytes=1, frame_bytes=2, header_bytes=3, gap_bytes=4,
                   skipped_bytes=5, pending_bytes=6, frames=7, packets=8, tcp_packets=9),
    ]  # fmt: skip


def test_hand_made() -> None:
    events = _hand_made()
    assert_same_jsonl(events)
    assert_roundtrip(events)


def test_floats() -> None:
    rng = random.Random(5)
    values = [1e16, 1e15, 1e-7, 1e-5, 1e-4, 0.1, 123456789.123456789, -0.0, 5e-324, 1.7976931348623157e308, 2.0**53]
    values += [struct.unpack("<d", rng.randbytes(8))[0] for _ in range(3000)]
    values += [rng.uniform(-1e6, 1e6) * 10.0 ** rng.randint(-12, 22) for _ in range(3000)]
    values += [round(rng.uniform(0, 1e4), rng.randint(0, 8)) for _ in range(1000)]
    values += [struct.unpack(">f", rng.randbytes(4))[0] for _ in range(1000)]  # 'f' table values
    values += [10.0**e for e in range(-30, 30)] + [float(i) for i in range(-100, 100)]
    events = [Frame(**BASE, type="method", size=0, args={"f": v}) for v in values]
    assert native._jsonl(events, "none") == python_jsonl(events, "none")


def test_timestamps() -> None:
    rng = random.Random(6)
    ns = [0, 1, 999_999_999, 1_000_000_000, 1732527600_123456000, 2**62, -1_500_000_000]
    ns += [rng.randrange(0, 2**61) for _ in range(3000)]
    ns += [rng.randrange(16 * 10**17, 18 * 10**17) // 1000 * 1000 for _ in range(3000)]  # µs captures
    events = [Gap(packet=1, ts=n / 1e9, conn=0, size=1) for n in ns]
    assert native._jsonl(events, "none") == python_jsonl(events, "none")
    assert_roundtrip(events)


def test_decimals() -> None:
    rng = random.Random(7)
    cases = [(s, d) for s in (0, 1, 2, 5, 6, 7, 8, 20, 255) for d in (0, 1, -1, 10, 999, -(2**31), 2**31 - 1)]
    cases += [(rng.randrange(256), rng.randrange(-(2**31), 2**31)) for _ in range(2000)]
    events = [Frame(**BASE, type="method", size=0, args={"d": Decimal(d).scaleb(-s)}) for s, d in cases]
    assert native._jsonl(events, "none") == python_jsonl(events, "none")
    assert_roundtrip(events)


def _message(body: bytes | None, content_type: Any = None) -> Message:
    props = {} if content_type is None else {"content_type": content_type}
    return Message(**BASE, method="basic.publish", args={}, properties=props, body_size=len(body or b""),
                   body_received=len(body or b""), complete=True, first_packet=1, frames=3, body=body)  # fmt: skip


BODY_CASES = [
    b"", b"hello", b"line\r\nnext\ttab", b"\x00binary", b"\xff\xfe", "é" * 40, "😀" * 20, "a" * 63 + "é",
    "a" * 300, "a" * 255 + "\x00", "a" * 256 + "\x00", "\u200b zero width", "\u00a0", "\u2028", "\ue000 private",
    "\U000e0001 tag", "\u0378 unassigned", b"\xed\xa0\x80 surrogate", "{\"json\": true}",
]  # fmt: skip
CONTENT_TYPES = [None, "text/plain", "TEXT/HTML; charset=utf-8", "application/json", "Application/X-YAML",
                 "application/yaml", "application/octet-stream", "appl\u0130cation/json", b"text/plain",
                 Problem("text/garbled"), 5]  # fmt: skip


def test_body_views() -> None:
    events = []
    for raw in BODY_CASES:
        body = raw.encode() if isinstance(raw, str) else raw
        events += [_message(body, ct) for ct in CONTENT_TYPES]
    events += [_message(None, "text/plain")]
    assert_same_jsonl(events)
    assert_roundtrip(events)


def test_isprintable_every_code_point() -> None:
    # one message per code point: _looks_text is str.isprintable over the body's characters
    chars = [chr(c) for c in range(0x80, 0x110000) if not 0xD800 <= c <= 0xDFFF]
    events = [_message(c.encode()) for c in chars[::1]]
    assert native._jsonl(events, "full") == python_jsonl(events, "full")


def test_rejects_what_the_core_cannot_hold() -> None:
    for bad in (Decimal("1E+3"), Decimal("-0"), Decimal(2**40), object(), {1: 2}):
        with pytest.raises((TypeError, ValueError)):
            native._jsonl([Frame(**BASE, type="method", size=0, args={"x": bad})], "none")
    with pytest.raises(ValueError):
        native._jsonl([], "partial")
    with pytest.raises(ValueError):
        native._event_roundtrip(ProtocolHeader(**BASE, version="x", raw="zz"))

"""Hostile input: absurd sizes, deep nesting, floods of flows, endless streams without a frame.

Everything runs through the native core (``decode_packets`` / the CLI); the bounds are the Rust
defaults (``Limits`` in crates/amqpscope-core/src/limits.rs), hard-coded below. Memory is the
process's peak RSS during the run (native allocations included), not tracemalloc's Python-only view.

What is asserted (bounds are documented in docs/robustness.md):

* a declared frame size near 4 GB is a ``malformed`` event at once (nothing is allocated for it)
  and the stream resynchronises on the frames after it; a size just under the 128 MiB limit is
  waited for without preallocating;
* a content header with body-size 2^64-1 is a value: the message stays incomplete, at most
  ``Limits.max_body_kept`` (16 MiB) of its body is kept;
* field tables nested 100,000 deep decode to 64 levels and a problem value, no recursion error,
  and every output format renders them;
* a million flows / a SYN flood: the reassembler's flow cap (``Limits.max_flows``, 100,000) bounds
  memory. By default 120,000 flows (beyond the cap) are all decoded within a fixed RSS budget; the
  plateau (4 times the flows past it, within a few MB) and a million flows under the ``slow``
  marker. That the flow table itself never exceeds the cap is a Rust unit test
  (``reasm::tests::a_flood_beyond_max_flows_keeps_the_flow_table_at_the_cap``), since the cap
  cannot be lowered from Python;
* one stream of non-AMQP bytes without any frame boundary: one ``malformed`` event, bytes
  accounted as skipped, memory below 4 MiB, time linear in the size.

The ``slow`` cases run only with ``AMQPSCOPE_SLOW=1`` (they take minutes):
``AMQPSCOPE_SLOW=1 .venv/bin/python -m pytest tests/test_hostile.py -m slow -s``.
"""

from __future__ import annotations

import itertools
import json
import os
import struct
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from amqpscope.dissect.codec import get_codec
from amqpscope.dissect.wire import encode_frame, encode_protocol_header
from amqpscope.events import Event
from amqpscope.output.records import dumpb, record
from amqpscope.output.summary import summary
from amqpscope.packets import RawPacket
from amqpscope.pcapwrite import Record, TcpConversation, write_pcap
from amqpscope.pipeline import RunStats, decode_packets
from cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
CODEC = get_codec()
SLOW = pytest.mark.skipif(not os.environ.get("AMQPSCOPE_SLOW"), reason="slow: set AMQPSCOPE_SLOW=1 to run")

# The native core's bounds: `Limits::default()` in crates/amqpscope-core/src/limits.rs.
MAX_FRAME = 128 * 1024 * 1024 + 4096  # Limits.max_frame
MAX_BODY_KEPT = 16 * 1024 * 1024  # Limits.max_body_kept
TABLE_DEPTH = 64  # Limits.table_depth (Limits.table_entries is 65536; no case here needs it)
MAX_FLOWS = 100_000  # Limits.max_flows


# --- peak memory, native allocations included ------------------------------------------------------


def _rss_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise LookupError(field)


def _reset_peak() -> int | None:
    """Reset the peak RSS (VmHWM) to the current RSS; the current RSS in bytes, or None where the
    kernel does not allow it (the memory bounds are then not checked)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return _rss_kb("VmRSS") * 1024
    except OSError:
        return None


def _peak_growth(base: int | None) -> int:
    """Bytes the peak RSS rose above ``base`` since ``_reset_peak``; 0 when it could not be reset."""
    return 0 if base is None else _rss_kb("VmHWM") * 1024 - base


# --- lazy packet generation -----------------------------------------------------------------------


class Lazy:
    """A TCP conversation whose packets are yielded as they are built, never accumulated."""

    def __init__(self, **kw: Any) -> None:
        self.conv = TcpConversation(**kw)
        self.index = itertools.count(1)

    def _out(self, recs: list[Record]) -> Iterator[RawPacket]:
        self.conv.records.clear()
        for ts, frame in recs:
            yield RawPacket(next(self.index), ts, 1, frame, len(frame))

    def handshake(self) -> Iterator[RawPacket]:
        return self._out(self.conv.handshake())

    def send(self, from_client: bool, data: bytes, mss: int = 1460) -> Iterator[RawPacket]:
        return self._out(self.conv.send(from_client, data, mss=mss))

    def fin(self) -> Iterator[RawPacket]:
        return self._out(self.conv.fin())


def _method(name: str, channel: int = 0, **args: Any) -> bytes:
    return CODEC.method_frame(channel, name, **args)


def _opening(lz: Lazy) -> Iterator[RawPacket]:
    """Handshake, protocol header and the connection negotiation up to open-ok."""
    yield from lz.handshake()
    yield from lz.send(True, encode_protocol_header())
    yield from lz.send(False, _method("connection.start", version_major=0, version_minor=9, mechanisms="PLAIN",
                                      locales="en_US", server_properties={"product": "RabbitMQ"}))  # fmt: skip
    yield from lz.send(True, _method("connection.start-ok", client_properties={"product": "hostile"},
                                     mechanism="PLAIN", response="\x00guest\x00guest", locale="en_US"))  # fmt: skip
    yield from lz.send(False, _method("connection.tune", channel_max=2047, frame_max=131072, heartbeat=0))
    yield from lz.send(True, _method("connection.tune-ok", channel_max=2047, frame_max=131072, heartbeat=0))
    yield from lz.send(True, _method("connection.open", virtual_host="/"))
    yield from lz.send(False, _method("connection.open-ok"))
    yield from lz.send(True, _method("channel.open", 1))
    yield from lz.send(False, _method("channel.open-ok", 1))


def _qos_frames(n: int) -> bytes:
    return b"".join(_method("basic.qos", 1, prefetch_count=i) for i in range(n))


def _run(packets: Iterator[RawPacket]) -> tuple[list[Event], RunStats, int, float]:
    """Decode natively; render every event as a record, JSON and a summary line. Returns the events,
    the stats, how far the peak RSS rose during the run and the time."""
    stats = RunStats()
    base = _reset_peak()
    t0 = time.perf_counter()
    events = []
    for ev in decode_packets(packets, stats=stats):
        dumpb(record(ev, "preview"))
        summary(ev)
        events.append(ev)
    took = time.perf_counter() - t0
    peak = _peak_growth(base)
    assert stats.accounting.balanced(), stats.accounting
    return events, stats, peak, took


def _kinds(events: list[Event]) -> Counter[str]:
    return Counter(ev.kind for ev in events)


# --- absurd sizes ---------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0xFFFFFFFF, 0xFFFFFFF0, MAX_FRAME + 1])
def test_declared_frame_size_near_4gb(size: int) -> None:
    def packets() -> Iterator[RawPacket]:
        lz = Lazy()
        yield from _opening(lz)
        yield from lz.send(True, struct.pack(">BHI", 3, 1, size) + b"\x00" * 100 + _qos_frames(5))
        yield from lz.fin()

    events, _stats, peak, _ = _run(packets())
    bad = [ev for ev in events if ev.kind == "malformed"]
    assert len(bad) == 1 and f"declared frame size {size} exceeds the limit" in bad[0].reason  # type: ignore[attr-defined]
    assert any(ev.kind == "resync" for ev in events)
    qos = [ev for ev in events if getattr(ev, "method", None) == "basic.qos"]
    assert len(qos) >= 3  # the frames after the bad one are found again
    assert peak < 4 << 20


def test_declared_frame_size_just_under_the_limit_is_not_preallocated() -> None:
    """A frame declaring 128 MiB followed by 2 MiB: waited for, the bytes end as pending, no
    allocation of the declared size."""

    def packets() -> Iterator[RawPacket]:
        lz = Lazy()
        yield from _opening(lz)
        yield from lz.send(True, struct.pack(">BHI", 3, 1, MAX_FRAME - 1))
        chunk = b"\x11" * 65000
        for _ in range(32):
            yield from lz.send(True, chunk, mss=65000)
        yield from lz.fin()

    events, stats, peak, _ = _run(packets())
    assert stats.accounting.pending_bytes == 7 + 32 * 65000
    assert peak < 16 << 20  # ~2 MB held, copies while joining; far below 128 MiB
    assert not [ev for ev in events if ev.kind == "malformed"]


BODY_CHUNK = b"b" * 131064


def _huge_body_packets() -> Iterator[RawPacket]:
    """A publish whose header declares a body of 2^64-1 bytes, then 24 MiB of body frames (more
    than the 16 MiB kept), each frame in three packets of up to 65,000 bytes."""
    lz = Lazy()
    yield from _opening(lz)
    yield from lz.send(True, _method("basic.publish", 1, exchange="", routing_key="q"))
    header = encode_frame(2, 1, CODEC.encode_header(60, 2**64 - 1, {"content_type": "text/plain"}))
    yield from lz.send(True, header)
    for _ in range(192):
        yield from lz.send(True, encode_frame(3, 1, BODY_CHUNK), mss=65000)
    yield from lz.fin()


def test_body_size_2_64_minus_1() -> None:
    body_size = 2**64 - 1
    events, _stats, peak, _took = _run(_huge_body_packets())
    headers = [ev for ev in events if getattr(ev, "type", None) == "header"]
    assert headers and headers[0].body_size == body_size  # type: ignore[attr-defined]
    msgs = [ev for ev in events if ev.kind == "message"]
    assert len(msgs) == 1
    m: Any = msgs[0]
    assert not m.complete and m.body_size == body_size and m.body_received == 192 * len(BODY_CHUNK)
    assert m.body is not None and len(m.body) <= MAX_BODY_KEPT + len(BODY_CHUNK)
    # Whatever the batching costs (see the next test), nothing grows with the declared size.
    assert peak < 160 << 20


def test_body_size_2_64_minus_1_memory() -> None:
    """Bounded by what is kept, not by the declared size: the 24 MiB of body frames this test itself
    holds (every event is kept in a list), the core's kept body (16 MiB, reserved once) and the copy
    of it the message hands to Python (16 MiB). Packets go to the core as they come."""
    _events, _stats, peak, _took = _run(_huge_body_packets())
    assert peak < 64 << 20


def test_body_size_2_64_minus_1_through_the_cli(tmp_path: Path) -> None:
    """The same through ``decode`` (with its inline validation): output and exit code 0."""
    conv = TcpConversation()
    conv.handshake()
    for data in (encode_protocol_header(), _method("connection.start-ok", client_properties={}, mechanism="PLAIN",
                 response="\x00u\x00p", locale="en_US")):  # fmt: skip
        conv.send(True, data)
    conv.send(True, _method("channel.open", 1))
    conv.send(True, _method("basic.publish", 1, exchange="", routing_key="q"))
    conv.send(True, encode_frame(2, 1, CODEC.encode_header(60, 2**64 - 1)) + encode_frame(3, 1, b"x" * 100))
    conv.fin()
    path = tmp_path / "big-body.pcap"
    write_pcap(path, conv.records)
    result = CliRunner().invoke(cli, ["decode", "-T", "jsonl", "--no-progress", str(path)])
    assert result.exit_code == 0, result.output
    recs = [json.loads(line) for line in result.stdout.splitlines()]
    assert any(r.get("body_size") == 2**64 - 1 for r in recs)


# --- deep nesting ---------------------------------------------------------------------------------


def _deep_table(depth: int, code: str) -> bytes:
    """Field-table bytes (with length) of one key whose value nests ``depth`` tables or arrays."""
    v = b"I" + struct.pack(">i", 7)
    for _ in range(depth):
        v = (
            (b"F" + struct.pack(">I", len(v) + 2) + b"\x01k" + v)
            if code == "F"
            else (b"A" + struct.pack(">I", len(v)) + v)
        )
    body = b"\x04deep" + v
    return struct.pack(">I", len(body)) + body


@pytest.mark.parametrize("code", ["F", "A"])
def test_table_nesting_100000_deep(code: str, tmp_path: Path) -> None:
    table = _deep_table(100_000, code)
    # connection.start-ok with the hostile client-properties, then ordinary traffic
    start_ok = b"\x00\x0a\x00\x0b" + table + b"\x05PLAIN" + struct.pack(">I", 12) + b"\x00guest\x00guest" + b"\x05en_US"
    headers_frame = b"\x00\x3c\x00\x00" + struct.pack(">Q", 0) + b"\x20\x00" + table  # basic properties: headers only

    conv = TcpConversation()
    conv.handshake()
    conv.send(True, encode_protocol_header())
    conv.send(True, encode_frame(1, 0, start_ok), mss=1460)
    conv.send(True, _method("channel.open", 1))
    conv.send(True, _method("basic.publish", 1, exchange="", routing_key="q"))
    conv.send(True, encode_frame(2, 1, headers_frame), mss=1460)
    conv.send(True, _qos_frames(3))
    conv.fin()
    packets = [RawPacket(i + 1, ts, 1, f, len(f)) for i, (ts, f) in enumerate(conv.records)]

    events, _stats, peak, took = _run(iter(packets))
    start = next(ev for ev in events if getattr(ev, "method", None) == "connection.start-ok")
    text = json.dumps(record(start)["args"]["client_properties"])
    assert f"nesting deeper than {TABLE_DEPTH}" in text
    header = next(ev for ev in events if getattr(ev, "type", None) == "header")
    assert f"nesting deeper than {TABLE_DEPTH}" in json.dumps(record(header)["properties"])
    assert len([ev for ev in events if getattr(ev, "method", None) == "basic.qos"]) == 3
    assert took < 10 and peak < 64 << 20

    # every output format of the CLI renders it (rich tree included) with exit code 0
    path = tmp_path / f"deep-{code}.pcap"
    write_pcap(path, conv.records)
    for fmt in (["-T", "jsonl"], ["-T", "json"], ["-T", "csv"], ["-T", "table"], ["-T", "rich", "-V"]):
        result = CliRunner().invoke(cli, ["decode", *fmt, "--no-progress", str(path)])
        assert result.exit_code == 0, (fmt, result.output[-2000:], result.exception)
        assert "connection.start-ok" in result.stdout or "Start-Ok" in result.stdout or "start-ok" in result.stdout
        if fmt[1] in ("jsonl", "json", "csv"):  # the machine formats carry the problem value
            assert f"nesting deeper than {TABLE_DEPTH}" in result.stdout
    for cmd in (["stats", "-T", "json"], ["validate", "-T", "jsonl"], ["flow", "-T", "svg"],
                ["report", "-o", str(tmp_path / "deep.html")]):  # fmt: skip
        result = CliRunner().invoke(cli, [*cmd, str(path)])
        assert result.exit_code in (0, 1), (cmd, result.output[-2000:], result.exception)  # 1: validate findings


# --- flows: a million, and a SYN flood ------------------------------------------------------------

_FLOOD = r"""
import json, resource, sys, time
from collections import Counter
from amqpscope.packets import RawPacket
from amqpscope.pcapwrite import tcp_packet
from amqpscope.packets import SYN, ACK, PSH
import amqpscope.pipeline as P
kind, n = sys.argv[1], int(sys.argv[2])
def packets():
    for i in range(n):
        src = (f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}", 1024 + i % 60000)
        ts = 1_700_000_000_000_000_000 + i * 1000
        frame = tcp_packet(src, ("127.0.0.1", 5672), 1000, 0, SYN)
        yield RawPacket(2 * i + 1, ts, 1, frame, len(frame))
        if kind == "flows":  # the client's protocol header after its SYN
            frame = tcp_packet(src, ("127.0.0.1", 5672), 1001, 1, ACK | PSH, b"AMQP\x00\x00\x09\x01")
            yield RawPacket(2 * i + 2, ts + 500, 1, frame, len(frame))
stats = P.RunStats()
t0 = time.perf_counter()
kinds = Counter()
for ev in P.decode_packets(packets(), stats=stats):
    kinds[ev.kind] += 1
took = time.perf_counter() - t0
print(json.dumps({"seconds": took, "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "kinds": kinds, "balanced": stats.accounting.balanced(), "tcp": stats.tcp_packets}))
"""


def _flood(kind: str, n: int) -> dict[str, Any]:
    """``n`` flows (a SYN each, and for "flows" the client's protocol header) through the native
    core with its default flow cap, in a subprocess of its own (its peak RSS is the run's)."""
    out = subprocess.run([sys.executable, "-c", _FLOOD, kind, str(n)], capture_output=True, text=True,
                         cwd=ROOT, timeout=3600, check=True)  # fmt: skip
    res: dict[str, Any] = json.loads(out.stdout)
    assert res["balanced"] and res["tcp"] == (n if kind == "syn" else 2 * n)
    return res


@pytest.mark.parametrize("kind", ["syn", "flows"])
def test_flows_beyond_the_cap_are_all_decoded(kind: str) -> None:
    """120,000 flows, past the cap of 100,000: every flow opened, decoded and closed (evicted or
    at the end), none dropped silently, within the RSS budget of the million-flow run."""
    n = MAX_FLOWS + 20_000
    res = _flood(kind, n)
    assert res["kinds"]["connection"] == 2 * n
    if kind == "flows":
        assert res["kinds"]["protocol-header"] == n
    assert res["maxrss_mb"] < 1536


@SLOW
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["syn", "flows"])
def test_flow_cap_bounds_memory(kind: str) -> None:
    """4× the flows beyond the plateau: the peak RSS grows by a few MB at most, time grows linearly.
    (With the default cap of 100,000 the plateau is reached at about 300,000 flows.)"""
    a = _flood(kind, 3 * MAX_FLOWS)
    b = _flood(kind, 12 * MAX_FLOWS)
    assert b["maxrss_mb"] - a["maxrss_mb"] < 12, (a, b)
    assert b["seconds"] < 4 * a["seconds"] * 2 + 1, (a, b)
    if kind == "flows":
        assert b["kinds"]["protocol-header"] == 12 * MAX_FLOWS  # every flow is decoded, none dropped silently
        assert b["kinds"]["connection"] == 2 * 12 * MAX_FLOWS  # opened and closed (evicted or at the end)


def test_syn_flood_on_one_four_tuple() -> None:
    """SYNs with ever new ISNs on the same 4-tuple: each replaces the previous flow."""

    def packets() -> Iterator[RawPacket]:
        from amqpscope.packets import SYN
        from amqpscope.pcapwrite import tcp_packet

        for i in range(3000):
            f = tcp_packet(("10.0.0.1", 40000), ("127.0.0.1", 5672), (i * 2654435761) & 0xFFFFFFFF, 0, SYN)
            yield RawPacket(i + 1, i * 1000, 1, f, len(f))

    events, _stats, peak, _took = _run(packets())
    assert set(_kinds(events)) <= {"connection"}
    assert peak < 16 << 20


@SLOW
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["syn", "flows"])
def test_a_million_flows_default_cap(kind: str) -> None:
    res = _flood(kind, 1_000_000)
    print(
        f"\n{kind}: 1,000,000 flows: {res['seconds']:.1f} s, peak RSS {res['maxrss_mb']:.0f} MB, {dict(res['kinds'])}"
    )
    assert res["maxrss_mb"] < 1536  # 100,000 tracked flows at ~5 KB each, plus the interpreter


# --- a stream without frame boundaries ------------------------------------------------------------

_JUNK = r"""
import json, random, resource, sys, time
from collections import Counter
sys.path.insert(0, "tests")
from test_hostile import Lazy
import amqpscope.pipeline as P
pattern, total = sys.argv[1], int(sys.argv[2])
def packets(packet=65000):
    # handshake, then ``total`` bytes from the client that never contain a valid frame; lazily
    lz = Lazy()
    yield from lz.handshake()
    rng = random.Random(8)
    if pattern == "random":
        pool = rng.randbytes(1 << 20)
    else:  # every 7 bytes a frame header declaring ~1 MiB: the worst case for the resync scan
        pool = (b"\x01\x00\x01\x00\x0f\xff\xf0" * 160_000)[: 1 << 20]
    sent = 0
    while sent < total:
        off = rng.randrange(len(pool) - packet)
        yield from lz.send(True, pool[off : off + packet], mss=packet)
        sent += packet
    yield from lz.fin()
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
stats = P.RunStats()
kinds = Counter()
t0 = time.perf_counter()
for ev in P.decode_packets(packets(), stats=stats):
    kinds[ev.kind] += 1
took = time.perf_counter() - t0
a = stats.accounting
print(json.dumps({"seconds": took, "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "base_mb": base, "kinds": kinds, "balanced": a.balanced(), "stream": a.stream_bytes,
                  "frame": a.frame_bytes, "skipped": a.skipped_bytes, "pending": a.pending_bytes}))
"""


def _junk(pattern: str, total: int) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-c", _JUNK, pattern, str(total)], capture_output=True, text=True,
                         cwd=ROOT, timeout=7200, check=True)  # fmt: skip
    res: dict[str, Any] = json.loads(out.stdout)
    assert res["balanced"] and res["frame"] == 0 and res["kinds"].get("frame", 0) == 0
    assert res["kinds"]["malformed"] == 1  # said once, then the bytes are skipped while resyncing
    assert res["skipped"] + res["pending"] == res["stream"] >= total
    return res


def test_megabytes_without_a_frame_boundary() -> None:
    """2 MiB and 8 MiB of random bytes in one AMQP-port flow: one malformed event, all bytes
    skipped, memory flat (peak RSS within 16 MB of the interpreter's), time linear."""
    a = _junk("random", 2 << 20)
    b = _junk("random", 8 << 20)
    assert b["maxrss_mb"] - b["base_mb"] < 16, b
    assert b["maxrss_mb"] - a["maxrss_mb"] < 4, (a, b)
    assert b["seconds"] < 4 * a["seconds"] * 2 + 0.5, (a, b)


def _report(pattern: str, total: int) -> None:
    r = _junk(pattern, total)
    print(f"\n{pattern}: {total >> 20} MiB in {r['seconds']:.1f} s ({total / r['seconds'] / 1e6:.2f} MB/s), "
          f"peak RSS {r['maxrss_mb']:.0f} MB (interpreter and imports: {r['base_mb']:.0f} MB), {dict(r['kinds'])}")  # fmt: skip
    assert r["maxrss_mb"] - r["base_mb"] < 32


@SLOW
@pytest.mark.slow
def test_64_mib_without_a_frame_boundary() -> None:
    _report("random", 64 << 20)


@SLOW
@pytest.mark.slow
def test_64_mib_of_frame_candidates() -> None:
    _report("candidates", 64 << 20)


@SLOW
@pytest.mark.slow
def test_one_gib_without_a_frame_boundary() -> None:
    _report("random", 1 << 30)

"""Property tests: any bytes into the frame, method, content-header and table decoders.

Each decoder has documented outcomes and nothing else:

* ``decode_frame`` (the test-side splitter): ``NeedMore`` (with a need beyond what is there),
  ``RawFrame`` (whose end and frame-end octet are consistent) or ``Malformed`` — never an exception;
* ``Codec.decode_method`` / ``decode_header`` (the native core's decoders): a result tuple whose
  ``problem`` is ``None`` or a string; undecodable values are ``Problem`` strings — never an exception;
* ``decode_table`` (the core's table decoder): ``(dict, end)`` with ``end`` inside the input, or
  ``Truncated`` (``struct.error`` only when there are fewer than 4 bytes for the length prefix);
* one direction's bytes, in chunks with gaps, as a TCP capture through the core (the frame
  splitter, resync and accounting of ``frames.rs``): only events, and the byte accounting balances.

Every result must also be serialisable by the JSON output (``dumpb``). Time per example is bounded
by hypothesis' deadline; memory by a tracemalloc peak proportional to the input.
"""

from __future__ import annotations

import struct
import time
import tracemalloc
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from amqpscope.dissect.codec import DecodedHeader, DecodedMethod, get_codec
from amqpscope.dissect.values import Problem, Truncated, decode_table
from amqpscope.dissect.wire import encode_frame
from amqpscope.events import Event, Frame, Gap, Malformed, ProtocolHeader, Resync
from amqpscope.output.records import dumpb
from amqpscope.scapy.table import encode_table
from amqpscope.testing.frames import Malformed as MalformedFrame
from amqpscope.testing.frames import NeedMore, RawFrame, decode_frame
from amqpscope.testing.streams import OneWay

CODEC = get_codec()
METHOD_KEYS = sorted((m.class_index, m.index) for m in CODEC.spec.methods())
CONTENT_CLASSES = sorted({c.index for c in CODEC.spec.classes})
FAST = settings(max_examples=400, deadline=500, suppress_health_check=[HealthCheck.too_slow])
# what one direction's bytes turn into (plus the connection and the messages of the session)
STREAM_KINDS = {"protocol-header", "frame", "gap", "resync", "malformed", "connection", "message"}
MAX_DEPTH = 64  # the core's bound on nested tables/arrays (limits.rs: table_depth)


# --- frames ---------------------------------------------------------------------------------------


def _check_frame_result(buf: bytes, off: int, r: Any) -> None:
    if isinstance(r, RawFrame):
        assert r.end == off + 8 + len(r.payload) <= len(buf)
        assert buf[r.end - 1] == 0xCE
        assert r.payload == buf[off + 7 : r.end - 1]
    elif isinstance(r, NeedMore):
        assert r.needed > len(buf) - off
    else:
        assert isinstance(r, MalformedFrame) and isinstance(r.reason, str) and r.reason


@FAST
@given(st.binary(max_size=300), st.integers(0, 20))
def test_decode_frame_any_bytes(buf: bytes, off: int) -> None:
    assume(off <= len(buf))
    _check_frame_result(buf, off, decode_frame(buf, off))


@FAST
@given(
    st.sampled_from([1, 2, 3, 4, 8, 0xCE]), st.integers(0, 0xFFFF), st.integers(0, 0xFFFFFFFF), st.binary(max_size=64)
)
def test_decode_frame_any_declared_size(ftype: int, channel: int, size: int, rest: bytes) -> None:
    """Declared sizes up to 4 GB: need-more or malformed at once, no allocation of the claimed size."""
    buf = struct.pack(">BHI", ftype, channel, size) + rest
    r = decode_frame(buf)
    _check_frame_result(buf, 0, r)
    if size > 128 * 1024 * 1024 + 4096:
        assert isinstance(r, MalformedFrame) and "exceeds the limit" in r.reason


@FAST
@given(st.integers(1, 8), st.integers(0, 0xFFFF), st.binary(max_size=200), st.binary(max_size=20))
def test_decode_frame_round_trip(ftype: int, channel: int, payload: bytes, tail: bytes) -> None:
    buf = encode_frame(ftype, channel, payload) + tail
    r = decode_frame(buf)
    assert isinstance(r, RawFrame)
    assert (r.type, r.channel, r.payload, r.end) == (ftype, channel, payload, len(payload) + 8)
    # every proper prefix asks for more, never claims a frame
    for cut in (0, 6, 7, len(payload) + 7):
        assert isinstance(decode_frame(buf[:cut]), NeedMore)


# --- methods and content headers ------------------------------------------------------------------


def _check_method(m: DecodedMethod) -> None:
    assert isinstance(m, DecodedMethod)
    assert isinstance(m.args, dict)
    assert m.problem is None or (isinstance(m.problem, str) and m.problem)
    assert isinstance(m.name, str)
    dumpb(m.args)


@FAST
@given(st.binary(max_size=200))
def test_decode_method_any_bytes(payload: bytes) -> None:
    _check_method(CODEC.decode_method(payload))


@FAST
@given(st.sampled_from(METHOD_KEYS), st.binary(max_size=300))
def test_decode_method_known_ids_any_arguments(key: tuple[int, int], args: bytes) -> None:
    """Known class/method ids followed by garbage reach every generated argument decoder."""
    m = CODEC.decode_method(struct.pack(">HH", *key) + args)
    _check_method(m)
    assert m.method is not None and (m.class_id, m.method_id) == key


@FAST
@given(st.sampled_from(METHOD_KEYS), st.data())
def test_decode_method_valid_arguments_then_damage(key: tuple[int, int], data: st.DataObject) -> None:
    """A cleanly encoded method with one byte changed or the tail cut off still decodes to a result."""
    name = CODEC.method(*key).full_name  # type: ignore[union-attr]
    payload = bytearray(CODEC.encode_method(name, {}))
    assert CODEC.decode_method(bytes(payload)).problem is None
    if len(payload) > 4:
        i = data.draw(st.integers(4, len(payload) - 1))
        payload[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(payload)))
    _check_method(CODEC.decode_method(bytes(payload[:cut])))


def _check_header(h: DecodedHeader) -> None:
    assert isinstance(h, DecodedHeader)
    assert isinstance(h.properties, dict)
    assert h.problem is None or (isinstance(h.problem, str) and h.problem)
    dumpb(h.properties)


@FAST
@given(st.binary(max_size=200))
def test_decode_header_any_bytes(payload: bytes) -> None:
    _check_header(CODEC.decode_header(payload))


@FAST
@given(st.sampled_from(CONTENT_CLASSES), st.integers(0, 2**64 - 1), st.lists(st.integers(0, 0xFFFF), min_size=1, max_size=4),
       st.binary(max_size=200))  # fmt: skip
def test_decode_header_any_flags_and_properties(class_id: int, body_size: int, words: list[int], rest: bytes) -> None:
    payload = struct.pack(">HHQ", class_id, 0, body_size) + b"".join(struct.pack(">H", w) for w in words) + rest
    h = CODEC.decode_header(payload)
    _check_header(h)
    assert h.body_size == body_size  # 2^64-1 is a value, not an allocation


# --- field tables ---------------------------------------------------------------------------------


def _check_table(buf: bytes) -> None:
    try:
        table, end = decode_table(buf, 0)
    except Truncated:
        return
    except struct.error:
        assert len(buf) < 4
        return
    assert 4 <= end <= len(buf)
    assert isinstance(table, dict)
    dumpb(table)


@FAST
@given(st.binary(max_size=300))
def test_decode_table_any_bytes(body: bytes) -> None:
    _check_table(body)


@FAST
@given(st.binary(max_size=300))
def test_decode_table_any_body_with_correct_length(body: bytes) -> None:
    """The length prefix right, the content arbitrary: a dict, problems kept as Problem values."""
    table, end = decode_table(struct.pack(">I", len(body)) + body, 0)
    assert end == len(body) + 4
    dumpb(table)


_scalars = (
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=20)
    | st.binary(max_size=20) | st.floats(allow_nan=False)
    | st.decimals(places=2, min_value=Decimal(-(10**6)), max_value=Decimal(10**6))
)  # fmt: skip
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                       max_leaves=30)  # fmt: skip


def _problems(value: Any) -> list[Problem]:
    if isinstance(value, Problem):
        return [value]
    if isinstance(value, dict):
        return [p for v in value.values() for p in _problems(v)]
    if isinstance(value, list):
        return [p for v in value for p in _problems(v)]
    return []


@FAST
@given(st.dictionaries(st.text(max_size=10), _values, max_size=6), st.data())
def test_decode_table_of_valid_tables_with_one_change(table: dict[str, Any], data: st.DataObject) -> None:
    raw = bytearray(encode_table(table))
    decoded, end = decode_table(bytes(raw), 0)
    assert end == len(raw) and not _problems(decoded)  # (a key may legitimately be "<problem>")
    i = data.draw(st.integers(0, len(raw) - 1))
    raw[i] = data.draw(st.integers(0, 255))
    _check_table(bytes(raw))


def _nested(depth: int, code: bytes) -> bytes:
    """A table whose one value is ``depth`` levels of nested tables (F) or arrays (A) around an int."""
    v = b"I" + struct.pack(">i", 1)
    for _ in range(depth):
        if code == b"F":
            v = b"F" + struct.pack(">I", len(v) + 2) + b"\x01k" + v
        else:
            v = b"A" + struct.pack(">I", len(v)) + v
    body = b"\x01k" + v
    return struct.pack(">I", len(body)) + body


@pytest.mark.parametrize("code", [b"F", b"A"])
def test_deep_nesting_stops_at_max_depth(code: bytes) -> None:
    raw = _nested(MAX_DEPTH + 40, code)
    table, end = decode_table(raw, 0)
    assert end == len(raw)
    text = repr(table)
    assert "nesting deeper than" in text
    dumpb(table)


@settings(max_examples=60, deadline=None)
@given(st.binary(min_size=1, max_size=4000))
def test_table_memory_is_bounded_by_input(body: bytes) -> None:
    """Decoded tables cost at most ~100 bytes of memory per input byte (every value has a wire cost)."""
    raw = struct.pack(">I", len(body)) + body
    tracemalloc.start()
    try:
        t0 = time.perf_counter()
        decode_table(raw, 0)
        took = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 100 * len(raw) + 64 * 1024
    assert took < 0.5


def test_voids_array_memory_bounded() -> None:
    """The cheapest value on the wire ('V', one byte) is the worst case: a list slot per byte."""
    n = 200_000
    inner = b"V" * n
    raw = b"\x01a" + b"A" + struct.pack(">I", len(inner)) + inner
    raw = struct.pack(">I", len(raw)) + raw
    tracemalloc.start()
    try:
        table, _ = decode_table(raw, 0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    items = table["a"]
    assert len(items) == 65537 and isinstance(items[-1], Problem)  # MAX_ENTRIES then a problem
    assert peak < 16 * len(raw)


# --- frame streams (through the core, as TCP captures) ---------------------------------------------


def _check_stream_events(events: list[Event]) -> None:
    assert all(isinstance(ev, Event) and ev.kind in STREAM_KINDS for ev in events), {ev.kind for ev in events}


@settings(max_examples=200, deadline=1000)
@given(st.lists(st.one_of(st.binary(max_size=300), st.integers(1, 5000)), max_size=12), st.booleans())
def test_frame_stream_any_chunks_and_gaps(parts: list[bytes | int], at_start: bool) -> None:
    s = OneWay(at_start=at_start)
    fed = 0
    for part in parts:
        if isinstance(part, int):
            s.gap(part)
        else:
            s.feed(part)
            fed += len(part)
    events, stats = s.decode()
    _check_stream_events(events)
    acc = stats.accounting
    assert acc.stream_bytes == fed
    assert acc.gap_bytes == s.visible_gap_bytes  # a hole before a mid-stream start is not seen
    assert acc.balanced(), acc


@settings(max_examples=100, deadline=1000)
@given(st.lists(st.sampled_from(METHOD_KEYS), min_size=1, max_size=10), st.binary(max_size=64), st.integers(0, 400),
       st.integers(1, 97))  # fmt: skip
def test_frame_stream_valid_frames_cut_and_junk(keys: list[tuple[int, int]], junk: bytes, cut: int, chunk: int) -> None:
    """Valid frames cut anywhere, junk, valid frames again, fed in any chunk size: balanced."""
    frames = b"".join(encode_frame(1, 1, CODEC.encode_method(k, {})) for k in keys)
    tail = b"".join(encode_frame(1, 1, CODEC.encode_method("basic.qos", {"prefetch_count": i})) for i in range(4))
    data = b"AMQP\x00\x00\x09\x01" + frames[:cut] + junk + tail
    s = OneWay()
    for i in range(0, len(data), chunk):
        s.feed(data[i : i + chunk])
    events, stats = s.decode()
    _check_stream_events(events)
    assert stats.accounting.balanced() and stats.accounting.stream_bytes == len(data)


def test_frame_stream_resyncs_after_bad_frame_end() -> None:
    """A frame whose end octet is wrong: malformed, then the stream finds the next frames (resync)."""
    good = [encode_frame(1, 1, CODEC.encode_method("basic.qos", {"prefetch_count": i})) for i in range(5)]
    bad = bytearray(good[0])
    bad[-1] = 0x00
    data = b"AMQP\x00\x00\x09\x01" + good[0] + bytes(bad) + b"".join(good)
    s = OneWay()
    s.feed(data)
    events, stats = s.decode()
    items = [ev for ev in events if isinstance(ev, (ProtocolHeader, Frame, Gap, Resync, Malformed))]
    kinds = [type(it).__name__ for it in items]
    assert kinds[:3] == ["ProtocolHeader", "Frame", "Malformed"]
    assert "Resync" in kinds and kinds.count("Frame") >= 1 + 5
    acc = stats.accounting
    assert acc.balanced() and acc.skipped_bytes == len(bad)

"""Parity with TShark on real traffic, and on variants built from it.

The oracle is each shared capture's ``.tshark.csv`` (one row per AMQP frame, from tshark 4.0's PDML;
type ``H`` rows are the 8-byte protocol header, which tshark itself does not dissect) and the facts
table of ``captures/README.md``. A frame is compared as (packet, type, direction, channel, class id,
method id): class id for methods and content headers, method id for methods only.

Variants (mid-stream start, a dropped segment, reordering, duplicates, another port, IPv6, pcapng,
SLL/SLL2) are written by ``tests/variants.py``. What must survive a variant is predicted from an
independent walk of the original streams (``variants.layout``: where every frame lies and which
packet completed it), matched row by row to the oracle, so each expectation is a subset of the
oracle's rows with the packet numbers the variant gives them.
"""

from __future__ import annotations

import csv
import re
from collections import Counter
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path
from typing import NamedTuple

import pytest
import variants

import amqpscope
from amqpscope.events import Connection, Event, Frame, Gap, Message, ProtocolHeader, Resync
from amqpscope.testing.tcpwalk import ACK, segments
from tests.conftest import CAPTURES

NAMES = sorted(p.name for p in CAPTURES.glob("*.pcap")) if CAPTURES.is_dir() else []
_TYPE_CODE = {"method": "1", "header": "2", "body": "3", "heartbeat": "8"}

# Where tshark 4.0 is wrong, and why. Ids are compared, so these only matter for names.
TSHARK_ERRATA: dict[str, tuple[str, str]] = {
    # (class 40, method 51) is in RabbitMQ's 0-9-1 spec (exchange-to-exchange bindings); tshark's
    # method table for the exchange class stops at unbind (40) and prints "Unknown (51)".
    "Exchange.Unknown": ("exchange.unbind-ok", "tshark 4.0 has no name for exchange.unbind-ok (40.51)"),
}

Key = tuple[int, str, str, str, str, str]  # packet, type, dir, channel, class_id, method_id


class Row(NamedTuple):
    frame: int
    pdu: int
    stream: int
    src: str
    dst: str
    dir: str
    key: Key
    name: str
    body_size: str
    reply_code: str
    delivery_tag: str
    multiple: str
    requeue: str


# --- oracle and decoding ---------------------------------------------------------------------------


@cache
def oracle(name: str) -> tuple[Row, ...]:
    rows = []
    with open(CAPTURES / f"{name}.tshark.csv", newline="") as f:
        for r in csv.DictReader(f):
            t = r["type"]
            key = (
                int(r["frame"]),
                t,
                r["dir"].lower(),
                r["channel"],
                r["class_id"] if t in ("1", "2") else "",
                r["method_id"] if t == "1" else "",
            )
            rows.append(
                Row(int(r["frame"]), int(r["pdu"]), int(r["stream"]), r["src"], r["dst"], r["dir"].lower(), key,
                    r["name"], r["body_size"], r["reply_code"], r["delivery_tag"], r["multiple"], r["requeue"])
            )  # fmt: skip
    return tuple(rows)


@cache
def readme_facts() -> dict[str, dict[str, str]]:
    """The README's files table: file name -> column -> cell."""
    text = (CAPTURES / "README.md").read_text()
    lines = [ln for ln in text.splitlines() if ln.startswith("| ")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    out = {}
    for ln in lines[1:]:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        if cells[0].startswith("`"):
            out[cells[0].strip("`")] = dict(zip(header, cells, strict=True))
    return out


def decode(path: Path, ports: Iterable[int] = (5672,), show_credentials: bool = False) -> list[Event]:
    return list(amqpscope.read(path, ports=ports, show_credentials=show_credentials))


@cache
def decoded(name: str) -> tuple[Event, ...]:
    return tuple(decode(CAPTURES / name))


def frame_key(ev: Event) -> Key | None:
    if isinstance(ev, ProtocolHeader):
        return (ev.packet, "H", ev.dir or "", "", "", "")
    if isinstance(ev, Frame):
        t = _TYPE_CODE.get(ev.type, ev.type)
        return (
            ev.packet,
            t,
            ev.dir or "",
            str(ev.channel),
            str(ev.class_id) if t in ("1", "2") else "",
            str(ev.method_id) if t == "1" else "",
        )
    return None


def keys(events: Iterable[Event]) -> Counter[Key]:
    return Counter(k for k in map(frame_key, events) if k is not None)


def _diff(ours: Counter[Key], want: Counter[Key]) -> str:
    extra, missing = sorted((ours - want).elements()), sorted((want - ours).elements())
    return f"{len(extra)} extra (first: {extra[:5]}), {len(missing)} missing (first: {missing[:5]})"


def assert_same(ours: Counter[Key], want: Counter[Key]) -> None:
    assert ours == want, _diff(ours, want)


def _tshark_name(name: str) -> str:
    """tshark's Class.Method-Ok spelling to ours (class.method-ok)."""
    return TSHARK_ERRATA[name][0] if name in TSHARK_ERRATA else name.lower()


# --- the shared captures as they are ---------------------------------------------------------------


needs_captures = pytest.mark.skipif(not NAMES, reason="shared captures not present")


@needs_captures
@pytest.mark.parametrize("name", NAMES)
def test_frames_equal_tshark(captures_dir: Path, name: str) -> None:
    """Every AMQP frame, on the packet that completed it, in the right direction: no port hints
    (s12 runs on 5673 and is found by its protocol headers)."""
    assert_same(keys(decoded(name)), Counter(r.key for r in oracle(name)))
    assert not [e for e in decoded(name) if e.kind in ("gap", "resync", "malformed")]


@needs_captures
@pytest.mark.parametrize("name", NAMES)
def test_method_names_and_arguments_equal_tshark(captures_dir: Path, name: str) -> None:
    """Names (modulo TSHARK_ERRATA), body sizes, reply codes, delivery tags, multiple and requeue."""

    def flag(v: object) -> str:
        return "" if v is None else str(int(v)) if isinstance(v, bool) else str(v)

    ours: Counter[tuple[int, str, str, str, str, str, str]] = Counter()
    for e in decoded(name):
        if isinstance(e, Frame) and e.type in ("method", "header"):
            a = e.args or {}
            ours[(e.packet, e.method or "content-header", flag(e.body_size), flag(a.get("reply_code")),
                  flag(a.get("delivery_tag")), flag(a.get("multiple")), flag(a.get("requeue")))] += 1  # fmt: skip
    want = Counter(
        (r.frame, _tshark_name(r.name) if r.key[1] == "1" else "content-header", r.body_size, r.reply_code,
         r.delivery_tag, r.multiple, r.requeue)
        for r in oracle(name) if r.key[1] in ("1", "2")
    )  # fmt: skip
    assert ours == want, f"extra {sorted((ours - want).elements())[:5]}, missing {sorted((want - ours).elements())[:5]}"


def test_errata_are_used() -> None:
    """Each listed tshark mistake occurs in some oracle file (a stale entry would hide nothing)."""
    if not NAMES:
        pytest.skip("shared captures not present")
    seen = {r.name for n in NAMES for r in oracle(n)}
    assert set(TSHARK_ERRATA) <= seen


def _reply_codes(events: Iterable[Event]) -> Counter[str]:
    label = {"connection.close": "Connection.Close", "channel.close": "Channel.Close", "basic.return": "Basic.Return"}
    out: Counter[str] = Counter()
    for e in events:
        if isinstance(e, Frame) and e.method in label and e.args and e.args.get("reply_code") != 200:
            out[f"{label[e.method]} {e.args.get('reply_code')}"] += 1
    return out


def _parse_codes(cell: str) -> Counter[str]:
    out: Counter[str] = Counter()
    if cell == "none":
        return out
    for part in cell.split(", "):
        m = re.fullmatch(r"(.+?) (\d+)(?: x(\d+))?", part)
        assert m, part
        out[f"{m.group(1)} {m.group(2)}"] += int(m.group(3) or 1)
    return out


@needs_captures
@pytest.mark.parametrize("name", NAMES)
def test_messages_and_connections_match_readme(captures_dir: Path, name: str) -> None:
    facts = readme_facts()[name]
    events = decoded(name)
    messages = [e for e in events if isinstance(e, Message)]
    by_method = Counter(m.method for m in messages)
    deliver, get_ok, get_empty = (int(x) for x in facts["deliver / get-ok / get-empty"].split(" / "))
    assert by_method["basic.publish"] == int(facts["publish"])
    assert by_method["basic.deliver"] == deliver
    assert by_method["basic.get-ok"] == get_ok
    assert by_method["basic.return"] == int(facts["return"])
    assert sum(by_method.values()) == len(messages)  # no other content method
    # every message whole: content method + header + all its body frames, bytes all there
    assert all(m.complete and m.body_received == m.body_size for m in messages)
    frames = [e for e in events if isinstance(e, Frame)]
    types = Counter(f.type for f in frames)
    assert sum(m.frames for m in messages) == len(messages) + types["header"] + types["body"]
    assert sum(m.body_size for m in messages) == sum(f.size for f in frames if f.type == "body")
    methods = Counter(f.method for f in frames)
    assert methods["basic.get-empty"] == get_empty
    assert len(frames) == int(facts["AMQP frames"])
    assert types["heartbeat"] == int(facts["heartbeats"])
    assert methods["channel.open"] == int(facts["channels opened"])
    opened = [e for e in events if isinstance(e, Connection) and e.state == "open"]
    closed = [e for e in events if isinstance(e, Connection) and e.state == "close"]
    assert len(opened) == len(closed) == methods["connection.start"] == int(facts["connections"])
    assert _reply_codes(events) == _parse_codes(facts["reply codes (non-200)"])
    assert {e.server.rsplit(":", 1)[1] for e in opened} == {facts["tcp port"]}


@needs_captures
def test_negotiation_and_credentials_s09(captures_dir: Path) -> None:
    """s09: alice/s3cret on vhost 'scope' (PLAIN); the password only with show_credentials."""
    closed = [e for e in decoded("s09_pika_errors.pcap") if isinstance(e, Connection) and e.state == "close"]
    alice = [c for c in closed if c.user == "alice"]
    assert alice and all(c.password is None for c in closed)
    assert {c.vhost for c in alice} >= {"scope", "private"}
    assert all(c.frame_max == 131072 and c.channel_max == 2047 for c in closed if c.frame_max is not None)
    shown = decode(CAPTURES / "s09_pika_errors.pcap", show_credentials=True)
    passwords = {e.password for e in shown if isinstance(e, Connection) and e.user == "alice"}
    assert "s3cret" in passwords
    assert "s3cret" not in repr([e for e in decoded("s09_pika_errors.pcap") if not isinstance(e, Frame)
                                 or e.method == "connection.start-ok"])  # fmt: skip


# --- variants --------------------------------------------------------------------------------------


@cache
def located(name: str) -> tuple[variants.Layout, tuple[tuple[variants.Span, Row], ...]]:
    """The independent frame walk of a capture, each frame paired with its oracle row."""
    lay = variants.layout(CAPTURES / name)
    by_stream: dict[tuple[int, str], list[Row]] = {}
    for r in sorted(oracle(name), key=lambda r: (r.frame, r.pdu)):
        by_stream.setdefault((r.stream, r.dir), []).append(r)
    by_flow: dict[tuple[int, str], list[variants.Span]] = {}
    for s in lay.spans:
        by_flow.setdefault((s.flow, s.dir), []).append(s)
    endpoints = {(f"{c[0]}:{c[1]}", f"{lay.servers[f][0]}:{lay.servers[f][1]}"): f for f, c in lay.clients.items()}
    pairs = []
    for (stream, d), rows in by_stream.items():
        first = rows[0]
        client, server = (first.src, first.dst) if d == "c2s" else (first.dst, first.src)
        spans = by_flow[(endpoints[(client, server)], d)]
        assert [(s.packet, s.type) for s in spans] == [(r.frame, r.key[1]) for r in rows], (stream, d)
        pairs += zip(spans, rows, strict=True)
    return lay, tuple(pairs)


def expected(name: str, new_packet: Callable[[variants.Span], int | None]) -> Counter[Key]:
    """The oracle rows that survive a variant, renumbered: ``new_packet`` gives a frame's packet
    in the variant, or None when the variant loses the frame."""
    out: Counter[Key] = Counter()
    for span, row in located(name)[1]:
        p = new_packet(span)
        if p is not None:
            out[(p, *row.key[1:])] += 1
    return out


def _segments(path: Path) -> list[tuple[int, tuple[tuple[str, int], tuple[str, int]], int, int, int, int]]:
    """(packet, (src, dst), seq, ack, flags, payload length) of every TCP packet."""
    return [(s.index, (s.src, s.dst), s.seq, s.ack, s.flags, len(s.payload)) for s in segments(path)]


def _chunk_of(lay: variants.Layout, packet: int) -> tuple[tuple[int, str], int, int]:
    for key, chunks in lay.chunks.items():
        for p, start, end in chunks:
            if p == packet:
                return key, start, end
    raise AssertionError(f"packet {packet} carries no stream data")


def _cut_expectation(name: str, n: int) -> tuple[Counter[Key], dict[tuple[int, str], int]]:
    """Frames kept when the first ``n`` packets are cut, and per direction where the kept bytes start."""
    lay, _ = located(name)
    first_kept = {key: next(s for p, s, _e in chunks if p > n) for key, chunks in lay.chunks.items()
                  if chunks[-1][0] > n}  # fmt: skip
    # every direction cut here must have had its start cut too (a stream seen from its first byte
    # would be a different test)
    want = expected(
        name,
        lambda s: s.packet - n if (s.flow, s.dir) in first_kept and s.start >= first_kept[(s.flow, s.dir)] else None,
    )
    return want, first_kept


def _cut_point(name: str, inside_frame: bool, after: int) -> int:
    """The first n >= after where the first kept bytes of some direction start inside a frame
    (or, for ``inside_frame=False``, where every direction's first kept bytes start a frame)."""
    lay, _ = located(name)
    starts = {(s.flow, s.dir, s.start) for s in lay.spans}
    for n in range(after, max(p for c in lay.chunks.values() for p, _s, _e in c)):
        firsts = [(key, next(s for p, s, _e in chunks if p > n)) for key, chunks in lay.chunks.items()
                  if chunks[0][0] <= n < chunks[-1][0]]  # fmt: skip
        if not firsts:
            continue
        mid = [(k, s) for k, s in firsts if (k[0], k[1], s) not in starts]
        if bool(mid) == inside_frame:
            return n
    raise AssertionError("no such cut point")


def _check_resyncs(events: list[Event], first_kept: dict[tuple[int, str], int], name: str) -> None:
    """One resync per direction whose start was cut, skipping exactly the partial frame, and none for a
    direction seen from its first byte (a server whose connection.start came after the cut: the
    stream's start, SYN or not); every frame of a resynced direction marked as decoded after a
    resync, no other. Connections are matched by client endpoint (the variant numbers its flows
    afresh)."""
    lay, _ = located(name)
    client_of = {e.conn: e.client for e in events if isinstance(e, Connection)}
    resyncs = {(client_of[e.conn], e.dir): e.skipped for e in events if isinstance(e, Resync)}
    midstream = set()
    for (flow, d), start in first_kept.items():
        kept = [s for s in lay.spans if (s.flow, s.dir) == (flow, d) and s.start >= start]
        client = "{}:{}".format(*lay.clients[flow])
        if kept and start > 0:
            midstream.add(client)
            assert resyncs.get((client, d)) == kept[0].start - start, (client, d)
        elif kept:
            assert (client, d) not in resyncs, (client, d)
    assert midstream, "the cut left no connection mid-stream"
    assert len(resyncs) == sum(1 for (client, _d) in resyncs if client in midstream)
    frames = [e for e in events if isinstance(e, Frame)]
    assert all(f.resync == ((client_of[f.conn], f.dir) in resyncs) for f in frames)


@needs_captures
@pytest.mark.parametrize(
    ("name", "inside", "after"),
    [
        ("s02_pika_confirms.pcap", False, 40),
        ("s05_pika_large_bodies.pcap", True, 30),
        ("s07_pika_many_channels.pcap", False, 300),
    ],
    ids=["s02-at-boundary", "s05-inside-frame", "s07-five-connections"],
)
def test_mid_stream_start(captures_dir: Path, tmp_path: Path, name: str, inside: bool, after: int) -> None:
    n = _cut_point(name, inside, after)
    dst = tmp_path / "cut.pcap"
    variants.cut_first(CAPTURES / name, dst, n)
    events = decode(dst)
    want, first_kept = _cut_expectation(name, n)
    assert_same(keys(events), want)
    _check_resyncs(events, first_kept, name)
    assert not [e for e in events if e.kind == "malformed"]


@needs_captures
def test_mid_stream_start_on_unknown_port(captures_dir: Path, tmp_path: Path) -> None:
    """s12 on port 5673 cut mid-stream, no --port: found by the frame heuristic alone, and the
    direction of each connection inferred from which peer may send its methods."""
    name = "s12_amqptools_port5673.pcap"
    n = _cut_point(name, False, 60)
    dst = tmp_path / "cut.pcap"
    variants.cut_first(CAPTURES / name, dst, n)
    want, first_kept = _cut_expectation(name, n)
    events = decode(dst)
    assert_same(keys(events), want)
    _check_resyncs(events, first_kept, name)
    assert_same(keys(decode(dst, ports=(5673,))), want)


def _drop_expectation(name: str, k: int) -> tuple[Counter[Key], tuple[int, str, int, int]]:
    """Frames kept when packet ``k`` is dropped, and (flow, dir, gap size, packet of the gap).

    The bytes after the hole are held by reassembly until the peer acknowledges past the hole (the
    receiver had them, so the capture lost them): the gap is declared at that packet, and the frames
    after it are reported at the packets that carried them, as tshark reports them."""
    lay, _ = located(name)
    (flow, d), a, b = _chunk_of(lay, k)
    segs = _segments(CAPTURES / name)
    by_index = {s[0]: s for s in segs}
    seq_k = by_index[k][2]
    pair = by_index[k][1]
    held: set[int] = set()
    declarer = None
    for index, ends, _seq, ack, flags, length in segs:
        if index <= k:
            continue
        if ends == pair and length:
            held.add(index)
        elif ends == (pair[1], pair[0]) and flags & ACK and held and 0 < ((ack - seq_k) & 0xFFFFFFFF) < 0x80000000:
            declarer = index
            break
    assert declarer is not None

    def new(s: variants.Span) -> int | None:
        if (s.flow, s.dir) == (flow, d) and s.start < b and s.end > a:
            return None  # the frame had bytes in the dropped packet
        p = s.packet
        return p - 1 if p > k else p

    return expected(name, new), (flow, d, b - a, declarer - 1)


@needs_captures
@pytest.mark.parametrize(
    ("name", "pick"),
    [("s02_pika_confirms.pcap", 0.5), ("s05_pika_large_bodies.pcap", 0.3), ("s07_pika_many_channels.pcap", 0.6)],
    ids=["s02", "s05-inside-body", "s07"],
)
def test_dropped_segment(captures_dir: Path, tmp_path: Path, name: str, pick: float) -> None:
    """One data segment lost: one gap, no frame invented, every frame without bytes in it exact."""
    lay, _ = located(name)
    c2s = [p for (_f, d), chunks in lay.chunks.items() if d == "c2s" for p, _s, _e in chunks]
    k = sorted(c2s)[int(len(c2s) * pick)]
    dst = tmp_path / "drop.pcap"
    variants.drop_packets(CAPTURES / name, dst, [k])
    want, (flow, d, size, at) = _drop_expectation(name, k)
    events = decode(dst)
    assert_same(keys(events), want)
    gaps = [e for e in events if isinstance(e, Gap)]
    assert [(g.conn, g.dir, g.size, g.packet) for g in gaps] == [(flow, d, size, at)]
    assert not [e for e in events if e.kind == "malformed"]


def test_dropped_segment_inside_a_frame_keeps_sync(tmp_path: Path) -> None:
    """A segment lost from the middle of a large body frame: the frame's declared size says where the
    next frame starts, so no resync is needed and nothing after it is lost."""
    if not NAMES:
        pytest.skip("shared captures not present")
    name = "s05_pika_large_bodies.pcap"
    lay, _ = located(name)
    inside = {p for s in lay.spans if s.type == "3" and s.end - s.start > 100_000 for p, st, en in
              lay.chunks[(s.flow, s.dir)] if st > s.start and en < s.end}  # fmt: skip
    k = min(inside)
    dst = tmp_path / "drop.pcap"
    variants.drop_packets(CAPTURES / name, dst, [k])
    want, _ = _drop_expectation(name, k)
    events = decode(dst)
    assert_same(keys(events), want)
    assert not [e for e in events if isinstance(e, Resync)]
    (gap,) = [e for e in events if isinstance(e, Gap)]
    assert gap.lost_frame and gap.lost_frame.startswith("body frame")
    incomplete = [m for m in events if isinstance(m, Message) and not m.complete]
    assert len(incomplete) == 1 and incomplete[0].body_received < incomplete[0].body_size


def _same_direction_pair(name: str, after_fraction: float) -> int:
    lay, _ = located(name)
    order = sorted((p, key) for key, chunks in lay.chunks.items() for p, _s, _e in chunks)
    start = int(len(order) * after_fraction)
    for (p, key), (q, key2) in zip(order[start:], order[start + 1 :], strict=False):
        if q == p + 1 and key == key2:
            return p
    raise AssertionError("no adjacent data packets in one direction")


@needs_captures
@pytest.mark.parametrize("name", ["s02_pika_confirms.pcap", "s07_pika_many_channels.pcap"])
def test_reordered_segments(captures_dir: Path, tmp_path: Path, name: str) -> None:
    """Two segments swapped: the same frames; those in either complete on the later packet."""
    k = _same_direction_pair(name, 0.4)
    dst = tmp_path / "swap.pcap"
    variants.swap_adjacent(CAPTURES / name, dst, k)
    events = decode(dst)
    assert_same(keys(events), expected(name, lambda s: k + 1 if s.packet in (k, k + 1) else s.packet))
    assert not [e for e in events if e.kind in ("gap", "resync", "malformed")]


@needs_captures
@pytest.mark.parametrize("name", ["s02_pika_confirms.pcap", "s05_pika_large_bodies.pcap"])
def test_duplicated_segments(captures_dir: Path, tmp_path: Path, name: str) -> None:
    """Retransmitted copies change nothing but the numbering of the packets after them."""
    lay, _ = located(name)
    data = sorted(p for chunks in lay.chunks.values() for p, _s, _e in chunks)
    dups = data[3 :: max(1, len(data) // 9)]
    dst = tmp_path / "dup.pcap"
    variants.duplicate(CAPTURES / name, dst, dups)
    events = decode(dst)
    assert_same(keys(events), expected(name, lambda s: s.packet + sum(1 for i in dups if i < s.packet)))
    assert not [e for e in events if e.kind in ("gap", "resync", "malformed")]
    original = [m.body_sha256 for m in decoded(name) if isinstance(m, Message)]
    assert [m.body_sha256 for m in events if isinstance(m, Message)] == original


_SAME = {
    "port-15672-detected": ("s01_pika_topology.pcap", lambda s, d: variants.rewrite_port(s, d, 5672, 15672), ()),
    "port-15672-given": ("s01_pika_topology.pcap", lambda s, d: variants.rewrite_port(s, d, 5672, 15672), (15672,)),
    "s12-port-5673-given": ("s12_amqptools_port5673.pcap", lambda s, d: variants.compress(s, d, "gz"), (5673,)),
    "ipv6": ("s07_pika_many_channels.pcap", variants.to_ipv6, ()),
    "ipv6-sll2": ("s09_pika_errors.pcap", lambda s, d: variants.to_ipv6(s, d, "sll2"), ()),
    "pcapng": ("s14_aiopika_rpc.pcap", variants.to_pcapng, ()),
    "pcapng-usec": ("s04_pika_consumer_acks.pcap", lambda s, d: variants.to_pcapng(s, d, 6), ()),
    "sll": ("s09_pika_errors.pcap", lambda s, d: variants.to_link(s, d, "sll"), ()),
    "sll2": ("s13_kombu_simple_queue.pcap", lambda s, d: variants.to_link(s, d, "sll2"), ()),
    "vlan": ("s03_amqpstorm_tx.pcap", variants.add_vlan, ()),
    "xz": ("s06_pika_rich_properties.pcap", lambda s, d: variants.compress(s, d, "xz"), ()),
}


@needs_captures
@pytest.mark.parametrize("variant", sorted(_SAME))
def test_variant_same_frames(captures_dir: Path, tmp_path: Path, variant: str) -> None:
    name, make, ports = _SAME[variant]
    dst = tmp_path / "variant"
    make(CAPTURES / name, dst)
    events = decode(dst, ports=ports or (5672,))
    assert_same(keys(events), Counter(r.key for r in oracle(name)))
    ours = [(m.method, m.body_sha256) for m in events if isinstance(m, Message)]
    assert ours == [(m.method, m.body_sha256) for m in decoded(name) if isinstance(m, Message)]

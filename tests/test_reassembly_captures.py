"""TCP reassembly of whole capture files, end to end through the public API.

The reassembler's and the segment parser's own cases (retransmissions, holes, bounds, flows, link
types, truncation) are Rust unit tests in ``crates/amqpscope-core/src/reasm.rs`` and ``net.rs``.
What is left here needs real files: every byte of the shared captures arrives exactly once, and
transformed or damaged copies of a capture (``tests/variants.py``, built with dpkt, not with the
analyzer's own code) decode to the events the original predicts.
"""

from __future__ import annotations

import socket
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dpkt
import pytest
import variants

from amqpscope.events import Connection, Event, Gap
from amqpscope.pcapwrite import TcpConversation, write_pcap
from amqpscope.pipeline import Options, RunStats, decode_source
from tests.conftest import CAPTURES

SHARED = sorted(CAPTURES.glob("*.pcap")) if CAPTURES.is_dir() else []
needs_shared = pytest.mark.skipif(not SHARED, reason="shared captures not present")
PORTS = frozenset({5672, 5673})  # s12 talks AMQP on 5673

Key = tuple[str, str]  # ("addr:port" of the sender, "addr:port" of the receiver)


def _decode(path: Path, ports: frozenset[int] = PORTS) -> tuple[list[Event], RunStats]:
    stats = RunStats()
    events = list(decode_source(path, options=Options(ports=ports), stats=stats))
    return events, stats


def _text(ep: tuple[str, int]) -> str:
    return f"[{ep[0]}]:{ep[1]}" if ":" in ep[0] else f"{ep[0]}:{ep[1]}"


def _sample(tmp_path: Path, name: str = "sample.pcap") -> Path:
    """One connection: handshake, 8 data exchanges (3 split into several segments), FIN."""
    conv = TcpConversation()
    conv.handshake()
    conv.send(True, b"AMQP\x00\x00\x09\x01")
    for i in range(8):
        conv.send(i % 2 == 0, bytes([i]) * (300 + 97 * i), mss=400 if i % 3 == 0 else None)
    conv.fin()
    path = tmp_path / name
    write_pcap(path, conv.records, conv.linktype)
    return path


def _source(tmp_path: Path) -> Path:
    shared = CAPTURES / "s07_pika_many_channels.pcap"
    return shared if shared.exists() else _sample(tmp_path)


def _unique_bytes_dpkt(path: Path) -> dict[Key, int]:
    """Independent count: union of covered sequence ranges per direction (dpkt parsing)."""
    ranges: dict[Key, list[tuple[int, int]]] = defaultdict(list)
    base: dict[Key, int] = {}
    with open(path, "rb") as f:
        for _, buf in dpkt.pcap.Reader(f):
            ip = dpkt.ethernet.Ethernet(buf).data
            tcp = ip.data
            if not isinstance(tcp, dpkt.tcp.TCP) or not tcp.data:
                continue
            fam = socket.AF_INET6 if isinstance(ip, dpkt.ip6.IP6) else socket.AF_INET
            key = (_text((socket.inet_ntop(fam, ip.src), tcp.sport)), _text((socket.inet_ntop(fam, ip.dst), tcp.dport)))
            b = base.setdefault(key, tcp.seq)
            start = (tcp.seq - b) & 0xFFFFFFFF
            ranges[key].append((start, start + len(tcp.data)))
    out = {}
    for key, rs in ranges.items():
        total, end = 0, -1
        for s, e in sorted(rs):
            if e > end:
                total += e - max(s, end)
                end = e
        out[key] = total
    return out


def _bytes_per_direction(events: list[Event]) -> dict[Key, int]:
    """Stream bytes per direction as the decoded events account for them (frames and protocol
    headers; only meaningful when nothing was skipped or left pending)."""
    ends: dict[int, tuple[str, str]] = {}
    out: dict[Key, int] = defaultdict(int)
    for ev in events:
        if isinstance(ev, Connection) and ev.state == "open":
            ends[ev.conn] = (ev.client, ev.server)
        elif ev.kind in ("frame", "protocol-header"):
            client, server = ends[ev.conn]
            key = (client, server) if ev.dir == "c2s" else (server, client)
            out[key] += 8 if ev.kind == "protocol-header" else ev.size + 8  # type: ignore[attr-defined]
    return dict(out)


def _gaps(events: list[Event]) -> list[Gap]:
    return [ev for ev in events if isinstance(ev, Gap)]


def _records(events: list[Event], drop: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    out = []
    for ev in events:
        rec = ev.to_record()
        for name in drop:
            rec.pop(name, None)
        out.append(rec)
    return out


# --- the shared captures ---------------------------------------------------------------------------


@needs_shared
@pytest.mark.parametrize("path", SHARED, ids=lambda p: p.name)
def test_shared_streams_have_all_unique_bytes(path: Path) -> None:
    events, stats = _decode(path)
    assert not _gaps(events)
    a = stats.accounting
    assert a.gap_bytes == a.skipped_bytes == a.pending_bytes == 0 and a.balanced()
    opens = [ev for ev in events if isinstance(ev, Connection) and ev.state == "open"]
    closes = [ev for ev in events if isinstance(ev, Connection) and ev.state == "close"]
    assert len(opens) == len(closes) and all(o.syn_seen for o in opens)
    # the TCP close itself is not in the events once the AMQP close was seen; never the end of file
    assert all(c.ended in ("connection.close", "fin", "rst") for c in closes)
    assert _bytes_per_direction(events) == _unique_bytes_dpkt(path)
    assert a.stream_bytes == sum(_unique_bytes_dpkt(path).values())


@needs_shared
def test_shared_flow_counts() -> None:
    # README: connections per capture
    for name, n in (("s07_pika_many_channels.pcap", 5), ("s11_amqptools_basic.pcap", 16)):
        events, _ = _decode(CAPTURES / name)
        assert len([ev for ev in events if isinstance(ev, Connection) and ev.state == "open"]) == n


# --- transformed copies: the same events ------------------------------------------------------------

_VARIANTS: dict[str, Callable[[Path, Path], object]] = {
    "pcapng": variants.to_pcapng,
    "gz": lambda s, d: variants.compress(s, d, "gz"),
    "bz2": lambda s, d: variants.compress(s, d, "bz2"),
    "xz": lambda s, d: variants.compress(s, d, "xz"),
    "sll": lambda s, d: variants.to_link(s, d, "sll"),
    "sll2": lambda s, d: variants.to_link(s, d, "sll2"),
    "null": lambda s, d: variants.to_link(s, d, "null"),
    "raw": lambda s, d: variants.to_link(s, d, "raw"),
    "ipv6": variants.to_ipv6,
    "ipv6-sll2": lambda s, d: variants.to_ipv6(s, d, "sll2"),
    "vlan": variants.add_vlan,
    "qinq": lambda s, d: variants.add_vlan(s, d, (0x88A8, 0x8100)),
    "nanosecond": variants.to_nanosecond,
    "big-endian": variants.to_big_endian,
    "port": variants.rewrite_port,
    "padding": variants.pad_ethernet,
}


@pytest.mark.parametrize("name", sorted(_VARIANTS))
def test_variant_gives_same_events(tmp_path: Path, name: str) -> None:
    src = _source(tmp_path)
    dst = tmp_path / f"variant-{name}"
    _VARIANTS[name](src, dst)
    want, want_stats = _decode(src)
    got, got_stats = _decode(dst, PORTS | {15672} if name == "port" else PORTS)
    assert not _gaps(got)
    # addresses (IPv6) and ports (port) change with some variants; everything else stays
    drop = ("client", "server")
    assert _records(got, drop) == _records(want, drop)
    assert got_stats.accounting == want_stats.accounting
    assert got_stats.tcp_packets == want_stats.tcp_packets


# --- damaged copies -----------------------------------------------------------------------------------


def test_dropped_segment_gives_one_gap(tmp_path: Path) -> None:
    src = _source(tmp_path)
    want, want_stats = _decode(src)
    # Drop a data segment in the middle of the capture that has later data in its direction.
    data = variants.data_packets(src)
    idx, seg = data[len(data) // 2]
    dst = tmp_path / "dropped.pcap"
    variants.drop_packets(src, dst, [idx])
    got, got_stats = _decode(dst)
    gaps = _gaps(got)
    assert len(gaps) == 1
    gap = gaps[0]
    assert gap.size == len(seg.payload) == got_stats.accounting.gap_bytes
    client = next(ev.client for ev in got if isinstance(ev, Connection) and ev.conn == gap.conn)
    assert gap.dir == ("c2s" if _text(seg.src) == client else "s2c")
    # Every byte other than the dropped ones still arrives.
    assert got_stats.accounting.stream_bytes == want_stats.accounting.stream_bytes - gap.size
    # The other connections are untouched (packet numbers after the dropped one move up by one).
    moved = []
    for rec in _records([ev for ev in got if ev.conn != gap.conn]):
        for name in ("packet", "first_packet", "fin_packet", "rst_packet"):
            if rec.get(name) is not None and rec[name] >= idx:
                rec[name] += 1
        moved.append(rec)
    assert moved == _records([ev for ev in want if ev.conn != gap.conn])


def test_reordered_segments_same_events(tmp_path: Path) -> None:
    src = _source(tmp_path)
    want, want_stats = _decode(src)
    data = variants.data_packets(src)
    # two adjacent packets that are both data segments in the same direction
    pos = dict(data)
    idx = next(i for i, s in data if i + 1 in pos and pos[i + 1].src == s.src)
    dst = tmp_path / "swapped.pcap"
    variants.swap_adjacent(src, dst, idx)
    got, got_stats = _decode(dst)
    assert not _gaps(got)
    # which packet completes a frame (and its time) may change; nothing else
    drop = ("packet", "ts", "first_packet", "fin_packet", "rst_packet")
    assert _records(got, drop) == _records(want, drop)
    assert got_stats.accounting == want_stats.accounting


def test_duplicates_same_events(tmp_path: Path) -> None:
    src = _source(tmp_path)
    want, want_stats = _decode(src)
    indices = [i for i, _ in variants.data_packets(src)][::3]
    dst = tmp_path / "dup.pcap"
    variants.duplicate(src, dst, indices)
    got, got_stats = _decode(dst)
    assert not _gaps(got)
    drop = ("packet", "first_packet", "fin_packet", "rst_packet")  # packet numbers shift by one per copy
    assert _records(got, drop) == _records(want, drop)
    assert got_stats.accounting == want_stats.accounting


def test_mid_stream_start(tmp_path: Path) -> None:
    src = _sample(tmp_path)
    data = variants.data_packets(src)
    # cut right before the 4th data packet: it is a segment inside a split application message
    cut_at = data[3][0] - 1
    dst = tmp_path / "cut.pcap"
    variants.cut_first(src, dst, cut_at)
    got, stats = _decode(dst)
    (op,) = [ev for ev in got if isinstance(ev, Connection) and ev.state == "open"]
    assert not op.syn_seen and op.packet == 1
    assert not _gaps(got)
    assert stats.accounting.stream_bytes == sum(len(s.payload) for _, s in data[3:])
    assert stats.accounting.balanced()

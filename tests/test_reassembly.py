"""TCP reassembly: shared captures, transformed variants, gaps, flows and bounds."""

from __future__ import annotations

import socket
from collections import defaultdict
from pathlib import Path

import dpkt
import pytest
import variants
from amqpscope.reassembly import TcpReassembler

from amqpscope.packets import ACK, FIN, PSH, RST, SYN, Segment, TcpClose, TcpData, TcpGap, TcpOpen
from amqpscope.pcapwrite import TcpConversation, write_pcap

CAPTURES = Path(__file__).resolve().parents[2] / "shared" / "captures"
SHARED = sorted(CAPTURES.glob("*.pcap")) if CAPTURES.is_dir() else []
needs_shared = pytest.mark.skipif(not SHARED, reason="shared captures not present")
C = ("127.0.0.1", 40000)
S = ("127.0.0.1", 5672)


def _sample(tmp_path: Path, name: str = "sample.pcap", **kw: object) -> Path:
    """One connection: handshake, 8 data exchanges (3 split into several segments), FIN."""
    conv = TcpConversation(**kw)  # type: ignore[arg-type]
    conv.handshake()
    conv.send(True, b"AMQP\x00\x00\x09\x01")
    for i in range(8):
        conv.send(i % 2 == 0, bytes([i]) * (300 + 97 * i), mss=400 if i % 3 == 0 else None)
    conv.fin()
    path = tmp_path / name
    write_pcap(path, conv.records, conv.linktype)
    return path


def _unique_bytes_dpkt(path: Path) -> dict[tuple[tuple[str, int], tuple[str, int]], int]:
    """Independent count: union of covered sequence ranges per direction (dpkt parsing)."""
    ranges: dict[tuple[tuple[str, int], tuple[str, int]], list[tuple[int, int]]] = defaultdict(list)
    base: dict[tuple[tuple[str, int], tuple[str, int]], int] = {}
    with open(path, "rb") as f:
        for _, buf in dpkt.pcap.Reader(f):
            ip = dpkt.ethernet.Ethernet(buf).data
            tcp = ip.data
            if not isinstance(tcp, dpkt.tcp.TCP) or not tcp.data:
                continue
            fam = socket.AF_INET6 if isinstance(ip, dpkt.ip6.IP6) else socket.AF_INET
            key = ((socket.inet_ntop(fam, ip.src), tcp.sport), (socket.inet_ntop(fam, ip.dst), tcp.dport))
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


@needs_shared
@pytest.mark.parametrize("path", SHARED, ids=lambda p: p.name)
def test_shared_streams_have_all_unique_bytes(path: Path) -> None:
    result = variants.streams(path, TcpReassembler())
    assert not result.gaps
    assert len(result.opens) == len(result.closes)
    assert all(o.syn_seen for o in result.opens)
    assert all(c.how in ("fin", "rst") for c in result.closes)
    ours: dict[tuple[tuple[str, int], tuple[str, int]], int] = defaultdict(int)
    for e in result.events:
        if isinstance(e, TcpData):
            ours[(e.src, e.dst)] += len(e.data)
    assert dict(ours) == _unique_bytes_dpkt(path)


@needs_shared
def test_shared_flow_counts() -> None:
    # README: connections per capture (s09: one refused connection still has TCP)
    assert len(variants.streams(CAPTURES / "s07_pika_many_channels.pcap", TcpReassembler()).opens) == 5
    assert len(variants.streams(CAPTURES / "s11_amqptools_basic.pcap", TcpReassembler()).opens) == 16


def _source(tmp_path: Path) -> Path:
    shared = CAPTURES / "s07_pika_many_channels.pcap"
    return shared if shared.exists() else _sample(tmp_path)


_VARIANTS = {
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
def test_variant_gives_same_streams(tmp_path: Path, name: str) -> None:
    src = _source(tmp_path)
    dst = tmp_path / f"variant-{name}"
    _VARIANTS[name](src, dst)
    want, got = variants.streams(src, TcpReassembler()), variants.streams(dst, TcpReassembler())
    assert got.data == want.data
    assert not got.gaps
    assert [(o.flow, o.syn_seen, o.packet) for o in got.opens] == [(o.flow, o.syn_seen, o.packet) for o in want.opens]
    assert [(c.flow, c.how) for c in got.closes] == [(c.flow, c.how) for c in want.closes]


def _data_indices(path: Path) -> list[tuple[int, Segment]]:
    return variants.data_packets(path)


def test_dropped_segment_gives_one_gap(tmp_path: Path) -> None:
    src = _source(tmp_path)
    want = variants.streams(src, TcpReassembler())
    # Drop a data segment in the middle of the capture that has later data in its direction.
    data = _data_indices(src)
    idx, seg = data[len(data) // 2]
    dst = tmp_path / "dropped.pcap"
    variants.drop_packets(src, dst, [idx])
    got = variants.streams(dst, TcpReassembler())
    assert len(got.gaps) == 1
    gap = got.gaps[0]
    assert gap.size == len(seg.payload) and gap.src == seg.src
    # Every byte other than the dropped ones still arrives, in order.
    key = next(k for k in want.data if k[0] == gap.flow and (k[1] == "c2s") == (seg.src == want.opens[gap.flow].client))
    original = want.data[key]
    assert len(got.data[key]) == len(original) - gap.size
    assert all(got.data[k] == v for k, v in want.data.items() if k != key)


def test_dropped_segment_gap_position(tmp_path: Path) -> None:
    src = _sample(tmp_path)
    conv_bytes = variants.streams(src, TcpReassembler()).data[(0, "c2s")]
    data = _data_indices(src)
    # the first client data segment after the protocol header: b"\x00" * 300, split at 400 -> one segment
    idx = next(i for i, s in data if s.payload[:1] == b"\x00")
    dst = tmp_path / "d.pcap"
    variants.drop_packets(src, dst, [idx])
    got = variants.streams(dst, TcpReassembler())
    assert [g.size for g in got.gaps] == [300]
    assert got.data[(0, "c2s")] == conv_bytes.replace(b"\x00" * 300, b"")
    # gap is emitted before the data that follows it
    kinds = [type(e).__name__ for e in got.events if getattr(e, "src", None) == C]
    assert kinds[kinds.index("TcpGap") + 1] == "TcpData"


def test_reordered_segments_same_streams(tmp_path: Path) -> None:
    src = _source(tmp_path)
    want = variants.streams(src, TcpReassembler())
    data = _data_indices(src)
    # find two adjacent packets that are both data segments in the same direction
    pos = {i: s for i, s in data}
    idx = next(i for i, s in data if i + 1 in pos and pos[i + 1].src == s.src)
    dst = tmp_path / "swapped.pcap"
    variants.swap_adjacent(src, dst, idx)
    got = variants.streams(dst, TcpReassembler())
    assert got.data == want.data and not got.gaps


def test_duplicates_same_streams(tmp_path: Path) -> None:
    src = _source(tmp_path)
    want = variants.streams(src, TcpReassembler())
    indices = [i for i, _ in _data_indices(src)][::3]
    dst = tmp_path / "dup.pcap"
    variants.duplicate(src, dst, indices)
    got = variants.streams(dst, TcpReassembler())
    assert got.data == want.data and not got.gaps


def test_mid_stream_start(tmp_path: Path) -> None:
    src = _sample(tmp_path)
    full = variants.streams(src, TcpReassembler()).data
    data = _data_indices(src)
    # cut right before the 4th data packet: it is a segment inside a split application message
    cut_at = data[3][0] - 1
    dst = tmp_path / "cut.pcap"
    variants.cut_first(src, dst, cut_at)
    got = variants.streams(dst, TcpReassembler())
    (op,) = got.opens
    assert not op.syn_seen and op.packet == 1
    assert not got.gaps
    for key, chunk in got.data.items():
        real_key = key if op.client == C else (key[0], "s2c" if key[1] == "c2s" else "c2s")
        assert full[real_key].endswith(chunk)
    assert sum(len(v) for v in got.data.values()) == sum(len(s.payload) for _, s in data[3:])


def test_overlapping_retransmission_trimmed() -> None:
    r = TcpReassembler()
    ev = r.feed(Segment(1, 1, C, S, 100, 0, SYN, b""))
    ev += r.feed(Segment(2, 2, C, S, 101, 0, ACK, b"abcdef"))
    ev += r.feed(Segment(3, 3, C, S, 104, 0, ACK, b"defghi"))  # overlaps 3 bytes
    ev += r.feed(Segment(4, 4, C, S, 101, 0, ACK, b"abc"))  # pure retransmission
    data = b"".join(e.data for e in ev if isinstance(e, TcpData))
    assert data == b"abcdefghi"
    assert [e.packet for e in ev if isinstance(e, TcpData)] == [2, 3]


def test_out_of_order_held_and_released_by_filling_packet() -> None:
    r = TcpReassembler()
    r.feed(Segment(1, 1, C, S, 0xFFFFFFFF, 0, SYN, b""))  # ISN+1 wraps to 0
    r.feed(Segment(2, 2, C, S, 0, 0, ACK, b"aa"))
    ev = r.feed(Segment(3, 3, C, S, 4, 0, ACK, b"cc"))
    ev += r.feed(Segment(4, 4, C, S, 6, 0, ACK, b"dd"))
    assert not [e for e in ev if isinstance(e, TcpData)]
    assert r.buffered_bytes == 4
    ev = r.feed(Segment(5, 5, C, S, 2, 0, ACK, b"bb"))
    (d,) = [e for e in ev if isinstance(e, TcpData)]
    assert d.data == b"bbccdd" and d.packet == 5
    assert r.buffered_bytes == 0


def test_sequence_wraparound_in_order() -> None:
    r = TcpReassembler()
    seq = 0xFFFFFFF0
    out = []
    out += r.feed(Segment(1, 1, C, S, seq - 1, 0, SYN, b""))
    for i in range(10):
        out += r.feed(Segment(i + 2, i + 2, C, S, (seq + 10 * i) & 0xFFFFFFFF, 0, ACK, bytes([i]) * 10))
    assert b"".join(e.data for e in out if isinstance(e, TcpData)) == b"".join(bytes([i]) * 10 for i in range(10))


def test_gap_declared_by_peer_ack() -> None:
    r = TcpReassembler()
    r.feed(Segment(1, 1, C, S, 99, 0, SYN, b""))
    r.feed(Segment(2, 2, S, C, 499, 100, SYN | ACK, b""))
    r.feed(Segment(3, 3, C, S, 100, 500, ACK, b"aaaa"))
    # 104..108 lost from the capture
    ev = r.feed(Segment(4, 4, C, S, 108, 500, ACK, b"cccc"))
    assert not [e for e in ev if isinstance(e, (TcpGap, TcpData))]
    ev = r.feed(Segment(5, 5, S, C, 500, 112, ACK, b""))  # server has everything up to 112
    gaps = [e for e in ev if isinstance(e, TcpGap)]
    datas = [e for e in ev if isinstance(e, TcpData)]
    assert [(g.size, g.packet) for g in gaps] == [(4, 5)]
    assert [d.data for d in datas] == [b"cccc"]


def test_gap_before_fin_declared_by_ack() -> None:
    r = TcpReassembler()
    ev = r.feed(Segment(1, 1, C, S, 99, 0, SYN, b""))
    ev += r.feed(Segment(2, 2, S, C, 499, 100, SYN | ACK, b""))
    ev += r.feed(Segment(3, 3, C, S, 104, 500, FIN | ACK, b""))  # 100..104 lost
    ev += r.feed(Segment(4, 4, S, C, 500, 105, FIN | ACK, b""))
    ev += r.feed(Segment(5, 5, C, S, 105, 501, ACK, b""))
    assert [g.size for g in ev if isinstance(g, TcpGap)] == [4]
    assert [(c.how, c.packet) for c in ev if isinstance(c, TcpClose)] == [("fin", 4)]


def test_gap_at_end_of_capture() -> None:
    r = TcpReassembler()
    r.feed(Segment(1, 1, C, S, 100, 0, ACK, b"aa"))
    r.feed(Segment(2, 2, C, S, 110, 0, ACK, b"bb"))
    ev = r.finish()
    assert [type(e).__name__ for e in ev] == ["TcpGap", "TcpData", "TcpClose"]
    assert ev[0].size == 8  # type: ignore[union-attr]
    assert ev[2].how == "eof"  # type: ignore[union-attr]


def test_per_direction_buffer_bound_forces_gap() -> None:
    r = TcpReassembler(max_buffer_per_dir=1000)
    r.feed(Segment(1, 1, C, S, 0, 0, ACK, b"x"))
    ev = []
    for i in range(20):
        ev += r.feed(Segment(i + 2, i + 2, C, S, 101 + 100 * i, 0, 0, b"y" * 100))
    gaps = [e for e in ev if isinstance(e, TcpGap)]
    assert [g.size for g in gaps] == [100]
    assert r.buffered_bytes == 0  # everything after the hole was contiguous
    assert sum(len(e.data) for e in ev if isinstance(e, TcpData)) == 2000


def test_total_buffer_bound() -> None:
    r = TcpReassembler(max_buffer_total=5000, max_buffer_per_dir=10**6)
    for f in range(10):
        src = ("10.0.0.1", 1000 + f)
        r.feed(Segment(f, f, src, S, 0, 0, ACK, b"x"))
        r.feed(Segment(f, f, src, S, 100, 0, ACK, b"y" * 1000))
        assert r.buffered_bytes <= 5000
    assert r.stats["gaps (total buffer bound)"] > 0


def test_max_flows_evicts_lru() -> None:
    r = TcpReassembler(max_flows=3)
    ev = []
    for f in range(5):
        ev += r.feed(Segment(f + 1, f, ("10.0.0.1", 1000 + f), S, 0, 0, ACK, b"x"))
    closes = [e for e in ev if isinstance(e, TcpClose)]
    assert [(c.flow, c.how) for c in closes] == [(0, "evicted"), (1, "evicted")]
    assert r.flow_count == 3
    ev = r.finish()
    assert sorted(c.flow for c in ev if isinstance(c, TcpClose)) == [2, 3, 4]


def test_idle_timeout_eviction() -> None:
    sec = 1_000_000_000
    r = TcpReassembler(idle_timeout_ns=60 * sec)
    r.feed(Segment(1, 0, ("10.0.0.1", 1), S, 0, 0, ACK, b"x"))
    r.feed(Segment(2, 10 * sec, ("10.0.0.1", 2), S, 0, 0, ACK, b"x"))
    ev = r.feed(Segment(3, 65 * sec, ("10.0.0.1", 2), S, 1, 0, ACK, b"y"))
    assert [(c.flow, c.how) for c in ev if isinstance(c, TcpClose)] == [(0, "evicted")]
    # flow 0's 4-tuple is forgotten: a packet there starts flow 2
    ev = r.feed(Segment(4, 66 * sec, ("10.0.0.1", 1), S, 1, 0, ACK, b"z"))
    assert [o.flow for o in ev if isinstance(o, TcpOpen)] == [2]


def test_rst_closes_and_new_syn_new_flow() -> None:
    r = TcpReassembler()
    ev = r.feed(Segment(1, 1, C, S, 99, 0, SYN, b""))
    ev += r.feed(Segment(2, 2, S, C, 499, 100, SYN | ACK, b""))
    ev += r.feed(Segment(3, 3, C, S, 100, 500, PSH | ACK, b"hi"))
    ev += r.feed(Segment(4, 4, S, C, 500, 102, RST | ACK, b""))
    ev += r.feed(Segment(5, 5, C, S, 102, 500, ACK, b""))  # straggler, absorbed
    ev += r.feed(Segment(6, 6, C, S, 7000, 0, SYN, b""))
    ev += r.feed(Segment(7, 7, C, S, 7001, 0, ACK, b"again"))
    opens = [e for e in ev if isinstance(e, TcpOpen)]
    assert [(o.flow, o.client, o.syn_seen) for o in opens] == [(0, C, True), (1, C, True)]
    assert [(c.flow, c.how) for c in ev if isinstance(c, TcpClose)] == [(0, "rst")]
    assert [(d.flow, d.data) for d in ev if isinstance(d, TcpData)] == [(0, b"hi"), (1, b"again")]


def test_syn_ack_first_makes_dst_the_client() -> None:
    r = TcpReassembler()
    ev = r.feed(Segment(1, 1, S, C, 499, 100, SYN | ACK, b""))
    ev += r.feed(Segment(2, 2, C, S, 100, 500, ACK, b"hello"))
    (o,) = [e for e in ev if isinstance(e, TcpOpen)]
    assert o.client == C and o.server == S and o.syn_seen
    assert [d.data for d in ev if isinstance(d, TcpData)] == [b"hello"]


def test_port_reuse_without_close_starts_new_flow() -> None:
    r = TcpReassembler()
    r.feed(Segment(1, 1, C, S, 99, 0, SYN, b""))
    r.feed(Segment(2, 2, C, S, 100, 0, ACK, b"one"))
    ev = r.feed(Segment(3, 3, C, S, 5000, 0, SYN, b""))
    assert [(c.flow, c.how) for c in ev if isinstance(c, TcpClose)] == [(0, "evicted")]
    assert [o.flow for o in ev if isinstance(o, TcpOpen)] == [1]
    # a retransmitted SYN of the new flow does not start yet another
    assert not [e for e in r.feed(Segment(4, 4, C, S, 5000, 0, SYN, b"")) if isinstance(e, TcpOpen)]


def test_fin_close_after_both_fins(tmp_path: Path) -> None:
    result = variants.streams(_sample(tmp_path), TcpReassembler())
    (c,) = result.closes
    assert c.how == "fin"
    n = len(result.events)
    assert result.events[n - 1] is c


def test_many_flows_streamed_with_bounded_state(tmp_path: Path) -> None:
    conv_records = []
    for f in range(200):
        conv = TcpConversation(client=("127.0.0.1", 20000 + f), start_ns=1_700_000_000_000_000_000 + f * 10**9)
        conv.handshake()
        conv.send(True, b"m" * 50)
        conv.fin()
        conv_records += conv.records
    path = tmp_path / "many.pcap"
    write_pcap(path, sorted(conv_records))
    r = TcpReassembler(max_flows=10_000, closed_linger_ns=5 * 10**9)
    result = variants.streams(path, r)
    assert len(result.opens) == 200
    assert all(c.how == "fin" for c in result.closes) and len(result.closes) == 200
    assert all(v == b"m" * 50 for v in result.data.values())

"""Build transformed/damaged variants of a capture for tests.

Every function reads ``src`` (any capture :func:`read_packets` accepts) and writes ``dst``;
each returns the number of packets written unless stated otherwise. Packet numbering
(``RawPacket.index``) of the result is stated per function.

Two kinds:
* byte-preserving (cut, drop, reorder, duplicate, pcapng, nanosecond, big-endian, compress):
  the packet bytes are copied verbatim;
* rebuilt (link type, VLAN, IPv6, port): each TCP packet is rebuilt from its parsed
  :class:`Segment` with :func:`tcp_packet`, so TCP options are dropped but addresses, ports,
  sequence/ack numbers, flags and payload are kept. Non-TCP packets are dropped by these.

Packets are parsed and reassembled by ``amqpscope.testing.tcpwalk`` (dpkt and a plain
per-direction walk), not by the analyzer's own per-packet code: what these functions predict is
independent of what is under test.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import struct
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from amqpscope.capture import read_packets
from amqpscope.pcapwrite import LINKTYPES, tcp_packet, write_pcap, write_pcapng
from amqpscope.testing.tcpwalk import (
    Endpoint,
    Packet,
    Reassembly,
    Segment,
    TcpClose,
    TcpData,
    TcpGap,
    TcpOpen,
    parse,
    segments,
)

PathT = str | Path


def _records(packets: Iterable[Packet]) -> list[tuple[int, bytes]]:
    return [(p.ts_ns, p.data) for p in packets]


def _load(src: PathT) -> tuple[list[Any], int]:
    pkts = list(read_packets(src))
    return pkts, (pkts[0].linktype if pkts else 1)


def data_packets(src: PathT) -> list[tuple[int, Segment]]:
    """(packet index, segment) of every TCP packet with payload, in file order."""
    return [(seg.index, seg) for seg in segments(src) if seg.payload]


# --- byte-preserving ------------------------------------------------------------------------------


def cut_first(src: PathT, dst: PathT, n: int) -> int:
    """Drop the first ``n`` packets (mid-stream start). Packet k of the result is k+n of ``src``."""
    pkts, lt = _load(src)
    return write_pcap(dst, _records(pkts[n:]), lt)


def drop_packets(src: PathT, dst: PathT, indices: Iterable[int]) -> int:
    """Drop the packets with these 1-based indices; later packets move up by the number dropped before them."""
    gone = set(indices)
    pkts, lt = _load(src)
    return write_pcap(dst, _records(p for p in pkts if p.index not in gone), lt)


def swap_adjacent(src: PathT, dst: PathT, index: int) -> int:
    """Swap packets ``index`` and ``index + 1`` (timestamps travel with the packets)."""
    pkts, lt = _load(src)
    i = index - 1
    pkts[i], pkts[i + 1] = pkts[i + 1], pkts[i]
    return write_pcap(dst, _records(pkts), lt)


def duplicate(src: PathT, dst: PathT, indices: Iterable[int]) -> int:
    """Write each listed packet twice (the copy right after it); later indices shift by one per copy."""
    dup = set(indices)
    pkts, lt = _load(src)
    recs: list[tuple[int, bytes]] = []
    for p in pkts:
        recs.append((p.ts_ns, p.data))
        if p.index in dup:
            recs.append((p.ts_ns, p.data))
    return write_pcap(dst, recs, lt)


def to_pcapng(src: PathT, dst: PathT, tsresol: int = 9) -> int:
    """Same packets as pcapng (one interface, given if_tsresol). Indices unchanged."""
    pkts, lt = _load(src)
    return write_pcapng(dst, _records(pkts), lt, tsresol)


def to_pcapng_two_interfaces(src: PathT, dst: PathT, extra_linktype: int = 147) -> int:
    """pcapng with two interfaces: the real one (µs resolution) and an unused one of another
    link type that carries one junk packet inserted first. Packet k of ``src`` is k+1 here."""
    pkts, lt = _load(src)
    recs: list[tuple[int, bytes, int]] = [(pkts[0].ts_ns if pkts else 0, b"junk", 1)]
    recs += [(p.ts_ns, p.data, 0) for p in pkts]
    return write_pcapng(dst, recs, [lt, extra_linktype], [6, 9])


def to_nanosecond(src: PathT, dst: PathT) -> int:
    """Nanosecond-resolution pcap. Indices unchanged."""
    pkts, lt = _load(src)
    return write_pcap(dst, _records(pkts), lt, nanosecond=True)


def to_big_endian(src: PathT, dst: PathT) -> int:
    """Big-endian microsecond pcap. Indices unchanged."""
    pkts, lt = _load(src)
    with open(dst, "wb") as f:
        f.write(struct.pack(">IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, lt))
        for p in pkts:
            sec, ns = divmod(p.ts_ns, 1_000_000_000)
            f.write(struct.pack(">IIII", sec, ns // 1000, len(p.data), p.wirelen) + p.data)
    return len(pkts)


_COMPRESSORS: dict[str, Callable[[bytes], bytes]] = {
    "gz": gzip.compress,
    "bz2": bz2.compress,
    "xz": lzma.compress,
}


def compress(src: PathT, dst: PathT, kind: str = "gz") -> int:
    """Compress the file bytes (gz, bz2 or xz). Returns the compressed size."""
    data = _COMPRESSORS[kind](Path(src).read_bytes())
    Path(dst).write_bytes(data)
    return len(data)


def truncate_bytes(src: PathT, dst: PathT, remove: int) -> int:
    """Copy without the last ``remove`` bytes (truncated last record). Returns the new size."""
    data = Path(src).read_bytes()[:-remove]
    Path(dst).write_bytes(data)
    return len(data)


# --- rebuilt from segments ------------------------------------------------------------------------


def _rebuild(
    src: PathT,
    dst: PathT,
    link: str = "ether",
    ipv6: bool = False,
    map_port: Callable[[int], int] = lambda p: p,
    wrap: Callable[[bytes], bytes] = lambda b: b,
    linktype: int | None = None,
    edit: tuple[int, Callable[[bytes], tuple[bytes, int]]] | None = None,
) -> int:
    recs = []
    for p in read_packets(src):
        seg = parse(p)
        if seg is None:
            continue
        payload, moved = edit[1](seg.payload) if edit is not None and p.index == edit[0] else (seg.payload, 0)
        frame = tcp_packet(
            (seg.src[0], map_port(seg.src[1])),
            (seg.dst[0], map_port(seg.dst[1])),
            (seg.seq + moved) & 0xFFFFFFFF,
            seg.ack,
            seg.flags,
            payload,
            ipv6=ipv6,
            link=link,
        )
        recs.append((p.ts_ns, wrap(frame)))
    return write_pcap(dst, recs, LINKTYPES[link] if linktype is None else linktype)


def trim_payload(src: PathT, dst: PathT, index: int, n: int) -> int:
    """Rebuild with the first ``n`` payload bytes of packet ``index`` gone (its sequence number moved
    on by ``n``): a capture whose stream starts inside a frame. Indices unchanged."""
    return _rebuild(src, dst, edit=(index, lambda payload: (payload[n:], n)))


def set_payload_byte(src: PathT, dst: PathT, index: int, offset: int, value: int) -> int:
    """Rebuild with byte ``offset`` of packet ``index``'s payload (negative: from its end) set to
    ``value``, e.g. a frame-end octet that is not 0xce. Indices unchanged."""

    def edit(payload: bytes) -> tuple[bytes, int]:
        b = bytearray(payload)
        b[offset] = value
        return bytes(b), 0

    return _rebuild(src, dst, edit=(index, edit))


def to_link(src: PathT, dst: PathT, link: str) -> int:
    """Rebuild every TCP packet with link type ``link`` (ether, sll, sll2, null, raw). Indices
    unchanged when ``src`` is all TCP (the shared captures are)."""
    return _rebuild(src, dst, link=link)


def to_ipv6(src: PathT, dst: PathT, link: str = "ether") -> int:
    """Rebuild as IPv6 (127.0.0.1 → ::1, other IPv4 → ::ffff:a.b.c.d). Indices unchanged."""
    return _rebuild(src, dst, link=link, ipv6=True)


def rewrite_port(src: PathT, dst: PathT, old: int = 5672, new: int = 15672) -> int:
    """Rebuild with TCP port ``old`` replaced by ``new`` on both sides. Indices unchanged."""
    return _rebuild(src, dst, map_port=lambda p: new if p == old else p)


def add_vlan(src: PathT, dst: PathT, tags: tuple[int, ...] = (0x8100,)) -> int:
    """Rebuild as Ethernet with one 802.1Q tag per entry of ``tags`` (TPIDs, outermost first;
    e.g. (0x88a8, 0x8100) for QinQ). Indices unchanged."""

    def wrap(frame: bytes) -> bytes:
        inner_type = frame[12:14]
        # MACs, then one (TPID, TCI) pair per tag, then the real ethertype
        out = frame[:12]
        for i, tpid in enumerate(tags):
            out += struct.pack("!HH", tpid, 100 + i)
        return out + inner_type + frame[14:]

    return _rebuild(src, dst, link="ether", wrap=wrap)


def pad_ethernet(src: PathT, dst: PathT, pad: int = 16) -> int:
    """Append ``pad`` junk bytes after each Ethernet frame (like padding of short frames on the
    wire); the IP total length must cut them off. Indices unchanged."""
    pkts, lt = _load(src)
    return write_pcap(dst, [(p.ts_ns, p.data + b"\xee" * pad) for p in pkts], lt)


# --- reading back -----------------------------------------------------------------------------------


class Streams:
    """Everything reassembly emitted for a capture, keyed by (flow, "c2s" | "s2c")."""

    def __init__(self) -> None:
        self.data: dict[tuple[int, str], bytes] = {}
        self.gaps: list[TcpGap] = []
        self.opens: list[TcpOpen] = []
        self.closes: list[TcpClose] = []
        self.events: list[TcpOpen | TcpData | TcpGap | TcpClose] = []


class Reassembler(Protocol):
    """Anything fed segments in capture order that emits TcpOpen/TcpData/TcpGap/TcpClose-like events."""

    def feed(self, seg: Segment, /) -> Iterable[Any]: ...
    def finish(self) -> Iterable[Any]: ...


def streams(src: PathT, reassembler: Reassembler | None = None) -> Streams:
    """Read, parse and reassemble ``src``; direction is relative to TcpOpen's client.

    By default with ``tcpwalk.Reassembly``. A reassembler under test (e.g. the analyzer's own)
    can be given instead: it is fed tcpwalk's :class:`Segment` objects, and its events are told
    apart by their class names (TcpOpen, TcpData, TcpGap, TcpClose), whatever module they are from.
    """
    r = reassembler if reassembler is not None else Reassembly()
    out = Streams()
    clients: dict[int, Endpoint] = {}
    chunks: dict[tuple[int, str], list[bytes]] = {}

    def take(events: Iterable[Any]) -> None:
        for e in events:
            kind = type(e).__name__
            out.events.append(e)
            if kind == "TcpData":
                key = (e.flow, "c2s" if e.src == clients[e.flow] else "s2c")
                chunks.setdefault(key, []).append(e.data)
            elif kind == "TcpOpen":
                clients[e.flow] = e.client
                out.opens.append(e)
            elif kind == "TcpGap":
                out.gaps.append(e)
            elif kind == "TcpClose":
                out.closes.append(e)
            else:
                raise TypeError(f"not a reassembly event: {e!r}")

    for p in read_packets(src):
        seg = parse(p)
        if seg is not None:
            take(r.feed(seg))
    take(r.finish())
    out.data = {k: b"".join(v) for k, v in chunks.items()}
    return out


# --- an independent frame walk, for predicting what survives a variant -------------------------------


class Span(NamedTuple):
    """One AMQP frame (or the protocol header, type ``"H"``) located in its TCP stream."""

    flow: int
    dir: str  # "c2s" | "s2c", relative to TcpOpen's client
    start: int  # stream offset of the first byte (bytes of this direction)
    end: int  # stream offset after the last byte
    packet: int  # the packet that delivered the last byte
    type: str  # "H", "1" method, "2" header, "3" body, "8" heartbeat (the oracle CSV's codes)
    channel: int | None


class Layout(NamedTuple):
    """Per-direction byte layout of a capture: frames and the packets that carried the bytes."""

    spans: list[Span]
    # (flow, dir) -> [(packet, start offset, end offset)] of every TcpData event, in order
    chunks: dict[tuple[int, str], list[tuple[int, int, int]]]
    clients: dict[int, Endpoint]
    servers: dict[int, Endpoint]


def layout(src: PathT) -> Layout:
    """Walk every direction of ``src`` frame by frame (only the frame header and frame-end octet
    are read: no codec), remembering where each frame lies and which packet completed it.

    Meant for captures without gaps (the shared ones): a direction is walked from its first byte.
    """
    result = streams(src)
    clients = {o.flow: o.client for o in result.opens}
    servers = {o.flow: o.server for o in result.opens}
    chunks: dict[tuple[int, str], list[tuple[int, int, int]]] = {}
    offsets: dict[tuple[int, str], int] = {}
    for e in result.events:
        if isinstance(e, TcpData):
            key = (e.flow, "c2s" if e.src == clients[e.flow] else "s2c")
            start = offsets.get(key, 0)
            offsets[key] = start + len(e.data)
            chunks.setdefault(key, []).append((e.packet, start, start + len(e.data)))
    spans: list[Span] = []
    for key, data in result.data.items():
        spans += _walk(key, data, chunks[key])
    return Layout(spans, chunks, clients, servers)


def _walk(key: tuple[int, str], data: bytes, where: list[tuple[int, int, int]]) -> list[Span]:
    out: list[Span] = []
    k = 0

    def packet_of(last: int) -> int:
        nonlocal k
        while where[k][2] <= last:
            k += 1
        return where[k][0]

    pos = 0
    if data.startswith(b"AMQP") and len(data) >= 8:
        out.append(Span(key[0], key[1], 0, 8, packet_of(7), "H", None))
        pos = 8
    while pos + 8 <= len(data):
        ftype, channel, size = struct.unpack_from(">BHI", data, pos)
        end = pos + 8 + size
        if end > len(data) or data[end - 1] != 0xCE:
            break
        out.append(Span(key[0], key[1], pos, end, packet_of(end - 1), str(ftype), channel))
        pos = end
    return out

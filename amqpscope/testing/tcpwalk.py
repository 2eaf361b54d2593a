"""An independent TCP walk for tests and benchmarks: packets → TCP segments → per-direction streams.

The test tooling (``tests/variants.py``, the parity tests, ``bench/``) must not lean on the
analyzer's own per-packet path to build capture variants or to predict what the analyzer should
find: that would compare the analyzer with itself. This module is a second, deliberately plain
implementation that shares no code with it: link/IP/TCP headers are parsed by dpkt, and
reassembly is a straightforward walk of each direction's sequence space.

:func:`parse` turns one captured packet into a :class:`Segment` (or ``None`` when it is not a
TCP packet it can read). Link types: Ethernet (1, with any number of 802.1Q / 802.1ad / QinQ
tags), Linux cooked SLL (113) and SLL2 (276), BSD NULL (0) and OpenBSD LOOP (108) in either
byte order, raw IP (101, 12, 14; 228 = IPv4, 229 = IPv6). The IP length field cuts off link
padding; a non-first IPv4 fragment is not TCP.

:class:`Reassembly` turns segments, in capture order, into events (:class:`TcpOpen`,
:class:`TcpData`, :class:`TcpGap`, :class:`TcpClose`):

* flows are numbered 0, 1, 2 … in order of first appearance; the client is the SYN's sender
  (the SYN-ACK's receiver when only that was captured), else the first packet's source;
* a direction's stream starts after its SYN (or at the SYN-ACK's acknowledgement number for the
  client), else at the first segment carrying data or a FIN (capture started mid-stream);
* old bytes (retransmissions, overlaps) are dropped, bytes beyond a hole are held until it is
  filled, and then delivered with the packet that filled it;
* a hole is declared lost (a :class:`TcpGap` of its size, then the held bytes after it) when the
  peer acknowledges past it while bytes or a FIN are waiting behind it, and when the flow ends;
* a flow closes once: ``"rst"``, ``"fin"`` when both FINs are in order, ``"evicted"`` when a SYN
  with another initial sequence number reuses an open 4-tuple (a new flow starts),
  ``"eof"`` from :meth:`Reassembly.finish`. Packets after the close are ignored, except a SYN,
  which starts a new flow.

No limits: every flow is kept to the end and out-of-order bytes are held without bound; meant for
test captures, not for untrusted or endless input.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from os import PathLike
from typing import Protocol

import dpkt

from amqpscope.capture import read_packets

Endpoint = tuple[str, int]
"""(address text, port): ``("127.0.0.1", 5672)``, ``("::1", 5672)``."""

FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10


class Packet(Protocol):
    """What :func:`parse` needs of a captured packet (``amqpscope.capture.read_packets`` yields these)."""

    @property
    def index(self) -> int: ...
    @property
    def ts_ns(self) -> int: ...
    @property
    def linktype(self) -> int: ...
    @property
    def data(self) -> bytes: ...


@dataclass(frozen=True, slots=True)
class Segment:
    """One TCP packet: addressing, sequence numbers, flags (low 8 bits) and payload."""

    index: int  # the packet's 1-based number in its capture
    ts_ns: int
    src: Endpoint
    dst: Endpoint
    seq: int
    ack: int
    flags: int  # FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK 0x10
    payload: bytes


# --- parsing --------------------------------------------------------------------------------------

_AF_INET = 2
_AF_INET6 = (10, 24, 28, 30)  # Linux, the BSDs, macOS
_NOT_PARSED = (dpkt.UnpackError, struct.error, IndexError, ValueError)


def _network(linktype: int, data: bytes) -> object:
    """The dpkt IP/IP6 object of a packet (anything else when there is none)."""
    if linktype == 1:
        return dpkt.ethernet.Ethernet(data).data
    if linktype == 113:
        return dpkt.sll.SLL(data).data
    if linktype == 276:
        return dpkt.sll2.SLL2(data).data
    if linktype in (0, 108):
        if len(data) < 4:
            return None
        # NULL carries the address family in the writer's byte order, LOOP in network order.
        af = int.from_bytes(data[:4], "little")
        if af > 0xFFFF:
            af = int.from_bytes(data[:4], "big")
        if af == _AF_INET:
            return dpkt.ip.IP(data[4:])
        return dpkt.ip6.IP6(data[4:]) if af in _AF_INET6 else None
    if linktype in (101, 12, 14, 228, 229):
        version = data[0] >> 4 if data else 0
        if linktype == 228 or (linktype != 229 and version == 4):
            return dpkt.ip.IP(data)
        if linktype == 229 or version == 6:
            return dpkt.ip6.IP6(data)
    return None


def parse(packet: Packet) -> Segment | None:
    """The TCP segment in ``packet``, or None (not TCP, not IP, unknown link type, unreadable)."""
    try:
        ip = _network(packet.linktype, packet.data)
    except _NOT_PARSED:
        return None
    if isinstance(ip, dpkt.ip.IP):
        if ip.v != 4 or ip.p != dpkt.ip.IP_PROTO_TCP or ip.offset:
            return None
        family = socket.AF_INET
    elif isinstance(ip, dpkt.ip6.IP6):
        if ip.v != 6 or ip.p != dpkt.ip.IP_PROTO_TCP:
            return None
        fragment = ip.extension_hdrs.get(dpkt.ip.IP_PROTO_FRAGMENT)
        if fragment is not None and fragment.frag_off:
            return None  # not the first fragment: no TCP header here
        family = socket.AF_INET6
    else:
        return None
    tcp = ip.data
    if not isinstance(tcp, dpkt.tcp.TCP) or len(tcp.opts) != tcp.off * 4 - 20:
        return None  # dpkt could not read the TCP header, or its options run past the packet
    return Segment(
        packet.index,
        packet.ts_ns,
        (socket.inet_ntop(family, ip.src), tcp.sport),
        (socket.inet_ntop(family, ip.dst), tcp.dport),
        tcp.seq,
        tcp.ack,
        tcp.flags & 0xFF,
        bytes(tcp.data),
    )


def segments(path: str | PathLike[str]) -> Iterator[Segment]:
    """Every TCP segment of a capture, in file order (other packets are left out)."""
    for p in read_packets(path):
        seg = parse(p)
        if seg is not None:
            yield seg


# --- reassembly -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TcpOpen:
    flow: int
    client: Endpoint
    server: Endpoint
    syn_seen: bool
    packet: int
    ts_ns: int


@dataclass(frozen=True, slots=True)
class TcpData:
    flow: int
    src: Endpoint
    dst: Endpoint
    data: bytes  # the next bytes of this direction, never repeated
    packet: int  # the packet whose arrival made them contiguous
    ts_ns: int


@dataclass(frozen=True, slots=True)
class TcpGap:
    flow: int
    src: Endpoint
    dst: Endpoint
    size: int  # bytes of this direction the capture lost (they are not delivered as zeros)
    packet: int
    ts_ns: int


@dataclass(frozen=True, slots=True)
class TcpClose:
    flow: int
    how: str  # "fin" | "rst" | "evicted" | "eof"
    packet: int
    ts_ns: int


Event = TcpOpen | TcpData | TcpGap | TcpClose

_MOD = 1 << 32


def _ahead(seq: int, base: int) -> int:
    """How far ``seq`` lies after ``base`` in sequence space (negative: before it)."""
    d = (seq - base) % _MOD
    return d - _MOD if d >= _MOD // 2 else d


class _Direction:
    def __init__(self, conn: _Conn, src: Endpoint, dst: Endpoint) -> None:
        self.conn = conn
        self.src = src
        self.dst = dst
        self.isn: int | None = None
        self.next: int | None = None  # sequence number of the next stream byte, once known
        self.held: dict[int, tuple[bytes, int, int]] = {}  # seq -> (payload, packet, ts) beyond a hole
        self.fin: int | None = None  # sequence number of the FIN
        self.fin_done = False  # every byte before the FIN delivered (or declared lost)
        self.peer = self


class _Conn:
    def __init__(self, flow: int, client: Endpoint, server: Endpoint) -> None:
        self.flow = flow
        self.up = _Direction(self, client, server)
        self.down = _Direction(self, server, client)
        self.up.peer, self.down.peer = self.down, self.up
        self.closed = False
        self.last = (0, 0)  # (packet, ts) of its latest packet


class Reassembly:
    """Feed :class:`Segment` objects in capture order, then call :meth:`finish` once."""

    def __init__(self) -> None:
        self._dirs: dict[tuple[Endpoint, Endpoint], _Direction] = {}
        self._conns: list[_Conn] = []

    def feed(self, seg: Segment) -> list[Event]:
        out: list[Event] = []
        flags = seg.flags
        d = self._dirs.get((seg.src, seg.dst))
        if d is not None and flags & SYN and not flags & ACK:
            conn = d.conn
            if conn.closed:
                d = None
            elif d.isn != seg.seq and (d.next is not None or d.peer.next is not None):
                self._close(conn, "evicted", seg.index, seg.ts_ns, out)  # its end was not captured
                d = None
        if d is None:
            d = self._open(seg, out)
        conn = d.conn
        if conn.closed:
            return out
        conn.last = (seg.index, seg.ts_ns)
        if flags & RST:
            self._close(conn, "rst", seg.index, seg.ts_ns, out)
            return out

        seq, payload = seg.seq, seg.payload
        if flags & SYN:
            if d.isn is None:
                d.isn = seq
            seq = (seq + 1) % _MOD  # the SYN takes one sequence number
            if d.next is None:
                d.next = seq
            if flags & ACK and d.peer.next is None:
                d.peer.next = seg.ack
        if d.next is None and (payload or flags & FIN):
            d.next = seq
        if flags & FIN and d.fin is None:
            d.fin = (seq + len(payload)) % _MOD
        if payload and d.next is not None:
            self._data(d, seq, payload, seg.index, seg.ts_ns, out)
        if flags & ACK:
            p = d.peer
            waiting = p.held or (p.fin is not None and not p.fin_done)
            if p.next is not None and waiting and _ahead(seg.ack, p.next) > 0:
                # the receiver had bytes the capture does not: declare them lost
                self._skip(p, seg.index, seg.ts_ns, out, upto=seg.ack)
        for x in (d, d.peer):
            self._fin_reached(x)
        if d.fin_done and d.peer.fin_done:
            self._close(conn, "fin", seg.index, seg.ts_ns, out)
        return out

    def finish(self) -> list[Event]:
        """End of the capture: declare what is still missing and close every open flow ("eof")."""
        out: list[Event] = []
        for conn in self._conns:
            if not conn.closed:
                self._close(conn, "eof", *conn.last, out)
        self._dirs.clear()
        self._conns.clear()
        return out

    def _open(self, seg: Segment, out: list[Event]) -> _Direction:
        if seg.flags & SYN and seg.flags & ACK:
            client, server = seg.dst, seg.src
        else:
            client, server = seg.src, seg.dst
        conn = _Conn(len(self._conns), client, server)
        self._conns.append(conn)
        self._dirs[(client, server)] = conn.up
        self._dirs[(server, client)] = conn.down
        out.append(TcpOpen(conn.flow, client, server, bool(seg.flags & SYN), seg.index, seg.ts_ns))
        return conn.up if conn.up.src == seg.src else conn.down

    def _data(self, d: _Direction, seq: int, payload: bytes, packet: int, ts: int, out: list[Event]) -> None:
        assert d.next is not None
        ahead = _ahead(seq, d.next)
        if ahead < 0:  # starts with bytes already delivered
            payload = payload[-ahead:]
            if not payload:
                return
            seq, ahead = d.next, 0
        if ahead > 0:
            kept = d.held.get(seq)
            if kept is None or len(kept[0]) < len(payload):
                d.held[seq] = (payload, packet, ts)
            return
        d.next = (seq + len(payload)) % _MOD
        out.append(TcpData(d.conn.flow, d.src, d.dst, b"".join([payload, *self._drain(d)]), packet, ts))

    def _drain(self, d: _Direction) -> list[bytes]:
        """Held bytes that now continue the stream, in order."""
        pieces = []
        while d.held:
            assert d.next is not None
            start = d.next if d.next in d.held else next((s for s in d.held if _ahead(s, d.next) <= 0), None)
            if start is None:
                break
            data = d.held.pop(start)[0][_ahead(d.next, start) :]
            if data:
                pieces.append(data)
                d.next = (d.next + len(data)) % _MOD
        return pieces

    def _skip(self, d: _Direction, packet: int, ts: int, out: list[Event], upto: int | None = None) -> bool:
        """Declare the hole before the first held bytes (or the FIN) lost, at most up to ``upto``;
        deliver what follows it. False when there was nothing to do."""
        assert d.next is not None
        nxt = d.next
        targets = list(d.held)
        if d.fin is not None and not d.fin_done:
            targets.append(d.fin)
        if not targets:
            return False
        size = min(_ahead(t, nxt) for t in targets)
        if upto is not None:
            size = min(size, _ahead(upto, nxt))
        if size > 0:
            out.append(TcpGap(d.conn.flow, d.src, d.dst, size, packet, ts))
            d.next = (nxt + size) % _MOD
        pieces = self._drain(d)
        if pieces:
            out.append(TcpData(d.conn.flow, d.src, d.dst, b"".join(pieces), packet, ts))
        self._fin_reached(d)
        return size > 0 or bool(pieces)

    @staticmethod
    def _fin_reached(d: _Direction) -> None:
        if not d.fin_done and d.fin is not None and d.next == d.fin:
            d.fin_done = True
            d.next = (d.fin + 1) % _MOD

    def _close(self, conn: _Conn, how: str, packet: int, ts: int, out: list[Event]) -> None:
        for d in (conn.up, conn.down):
            while d.next is not None and self._skip(d, packet, ts, out):
                pass
        conn.closed = True
        out.append(TcpClose(conn.flow, how, packet, ts))


def walk(segs: Iterable[Segment]) -> Iterator[Event]:
    """Every event of :class:`Reassembly` over ``segs``, the final ones included."""
    r = Reassembly()
    for seg in segs:
        yield from r.feed(seg)
    yield from r.finish()

"""Link, IP and TCP header parsing: :class:`RawPacket` → :class:`Segment`.

Hand-written with precompiled ``struct.Struct`` objects and a dispatch on the link type;
this runs once per packet, so it avoids generic decoders (dpkt/scapy build an object per
layer, which costs more than the whole of this function).

Packets that are not TCP or cannot be parsed give ``None`` and bump a reason in
``SegmentParser.skipped`` (a ``Counter``), so the CLI can say "12 packets not TCP".
Unknown link types are also counted per value in ``SegmentParser.unsupported_linktypes``;
packets parsed with an incomplete payload (snapped, first IP fragment) in ``.notes``.

Supported link types: Ethernet (1) with 802.1Q / 802.1ad / QinQ tags, Linux cooked SLL
(113) and SLL2 (276), BSD NULL (0) and OpenBSD LOOP (108) in either byte order, raw IP
(101, 12, 14, 228 = IPv4, 229 = IPv6).
"""

from __future__ import annotations

import socket
import struct
from collections import Counter

from amqpscope.packets import RawPacket, Segment

LINKTYPE_NULL = 0
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_RAW_BSD12 = 12
LINKTYPE_RAW_BSD14 = 14
LINKTYPE_LOOP = 108
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229
LINKTYPE_LINUX_SLL2 = 276

ETH_IPV4, ETH_IPV6 = 0x0800, 0x86DD
_VLAN_TPIDS = frozenset((0x8100, 0x88A8, 0x9100))
# AF_INET6 differs between the systems that wrote NULL/LOOP headers (Linux, *BSD, macOS).
_AF_INET = 2
_AF_INET6 = frozenset((10, 24, 28, 30))
# IPv6 extension headers that we skip to find TCP (hop-by-hop, routing, destination options).
_IP6_EXT = frozenset((0, 43, 60))

_H = struct.Struct("!H")
_I_LE = struct.Struct("<I")
_TCP = struct.Struct("!HHIIBB")  # sport, dport, seq, ack, data offset, flags
_IP4 = struct.Struct("!BxHxxHxB")  # version/IHL, total length, flags + fragment offset, protocol

_addr_cache: dict[bytes, str] = {}


def addr_text(raw: bytes) -> str:
    """Address bytes (4 or 16) to text; memoized because a capture has few distinct addresses."""
    s = _addr_cache.get(raw)
    if s is None:
        family = socket.AF_INET if len(raw) == 4 else socket.AF_INET6
        s = socket.inet_ntop(family, raw)
        if len(_addr_cache) < 65536:  # a scan over many hosts must not grow this forever
            _addr_cache[raw] = s
    return s


_pair_cache: dict[bytes, tuple[str, str]] = {}


def _pair_text(pair: bytes) -> tuple[str, str]:
    """IPv4 source+destination (8 bytes) to text; one dict lookup per packet on the hot path."""
    texts = (addr_text(pair[:4]), addr_text(pair[4:]))
    if len(_pair_cache) < 65536:
        _pair_cache[pair] = texts
    return texts


class SegmentParser:
    """Parses packets to TCP segments and counts why others were skipped."""

    def __init__(self) -> None:
        self.skipped: Counter[str] = Counter()
        self.unsupported_linktypes: Counter[int] = Counter()
        # parsed but worth reporting: the payload is incomplete (snaplen, IP fragmentation)
        self.notes: Counter[str] = Counter()

    def reset(self) -> None:
        self.skipped.clear()
        self.unsupported_linktypes.clear()
        self.notes.clear()

    def parse(self, raw: RawPacket) -> Segment | None:
        """Return the TCP segment in ``raw``, or ``None`` (and count the reason)."""
        data = raw.data
        lt = raw.linktype
        # --- link layer: find the network protocol and where its header starts ---
        if lt == LINKTYPE_ETHERNET:
            if len(data) < 14:
                self.skipped["truncated link header"] += 1
                return None
            proto = (data[12] << 8) | data[13]
            off = 14
            while proto in _VLAN_TPIDS:
                if len(data) < off + 4:
                    self.skipped["truncated link header"] += 1
                    return None
                proto = (data[off + 2] << 8) | data[off + 3]
                off += 4
        elif lt == LINKTYPE_LINUX_SLL:
            if len(data) < 16:
                self.skipped["truncated link header"] += 1
                return None
            proto = (data[14] << 8) | data[15]
            off = 16
        elif lt == LINKTYPE_LINUX_SLL2:
            if len(data) < 20:
                self.skipped["truncated link header"] += 1
                return None
            proto = (data[0] << 8) | data[1]
            off = 20
        elif lt in (0, 108):  # LINKTYPE_NULL, LINKTYPE_LOOP (literal tuple: a constant)
            if len(data) < 4:
                self.skipped["truncated link header"] += 1
                return None
            # NULL is in the writer's host order, LOOP in network order; accept both for both.
            (af,) = _I_LE.unpack_from(data, 0)
            if af > 0xFFFF:
                af = int.from_bytes(data[:4], "big")
            off = 4
            if af == _AF_INET:
                proto = ETH_IPV4
            elif af in _AF_INET6:
                proto = ETH_IPV6
            else:
                self.skipped["not IP"] += 1
                return None
        elif lt in (101, 12, 14):  # LINKTYPE_RAW and the BSD raw variants
            if not data:
                self.skipped["truncated IP header"] += 1
                return None
            version = data[0] >> 4
            proto = ETH_IPV4 if version == 4 else ETH_IPV6 if version == 6 else 0
            off = 0
        elif lt == LINKTYPE_IPV4:
            proto, off = ETH_IPV4, 0
        elif lt == LINKTYPE_IPV6:
            proto, off = ETH_IPV6, 0
        else:
            self.unsupported_linktypes[lt] += 1
            self.skipped[f"unsupported link type {lt}"] += 1
            return None

        # --- network layer: find TCP header offset, end of IP payload, addresses ---
        if proto == ETH_IPV4:
            if len(data) < off + 20:
                self.skipped["truncated IP header"] += 1
                return None
            vihl, total, frag, ipproto = _IP4.unpack_from(data, off)
            ihl = (vihl & 0x0F) * 4
            if vihl >> 4 != 4 or ihl < 20 or len(data) < off + ihl:
                self.skipped["bad IPv4 header"] += 1
                return None
            if ipproto != 6:
                self.skipped["not TCP"] += 1
                return None
            if frag & 0x1FFF:
                self.skipped["IPv4 fragment (not first)"] += 1
                return None
            if frag & 0x2000:
                # First fragment: the TCP header is here but the payload is incomplete; the
                # missing bytes will show up as a gap in reassembly.
                self.notes["IPv4 first fragment (payload incomplete)"] += 1
            # total == 0 happens with TSO/GSO captures: trust the captured length then.
            # Otherwise the total length cuts off Ethernet padding after short packets.
            end = off + total if total else len(data)
            if end > len(data):
                self.notes["snapped (payload incomplete)"] += 1
                end = len(data)
            pair = data[off + 12 : off + 20]
            addrs = _pair_cache.get(pair)
            if addrs is None:
                addrs = _pair_text(pair)
            src, dst = addrs
            tcp = off + ihl
        elif proto == ETH_IPV6:
            if len(data) < off + 40:
                self.skipped["truncated IP header"] += 1
                return None
            if data[off] >> 4 != 6:
                self.skipped["bad IPv6 header"] += 1
                return None
            (plen,) = _H.unpack_from(data, off + 4)
            nh = data[off + 6]
            end = off + 40 + plen if plen else len(data)  # plen 0: jumbogram or TSO
            if end > len(data):
                self.notes["snapped (payload incomplete)"] += 1
                end = len(data)
            src = addr_text(data[off + 8 : off + 24])
            dst = addr_text(data[off + 24 : off + 40])
            tcp = off + 40
            while nh != 6:
                if tcp + 8 > end:
                    self.skipped["bad IPv6 extension header"] += 1
                    return None
                if nh in _IP6_EXT:
                    nh, hlen = data[tcp], (data[tcp + 1] + 1) * 8
                elif nh == 44:  # fragment header
                    if (_H.unpack_from(data, tcp + 2)[0] >> 3) != 0:
                        self.skipped["IPv6 fragment (not first)"] += 1
                        return None
                    nh, hlen = data[tcp], 8
                elif nh == 51:  # authentication header counts in 4-byte units
                    nh, hlen = data[tcp], (data[tcp + 1] + 2) * 4
                else:
                    self.skipped["not TCP"] += 1
                    return None
                tcp += hlen
        else:
            self.skipped["not IP"] += 1
            return None

        # --- transport layer ---
        if tcp + 20 > end:
            self.skipped["truncated TCP header"] += 1
            return None
        sport, dport, seq, ack, doff, flags = _TCP.unpack_from(data, tcp)
        thl = (doff >> 4) * 4
        if thl < 20 or tcp + thl > end:
            self.skipped["bad TCP header"] += 1
            return None
        return Segment(raw.index, raw.ts_ns, (src, sport), (dst, dport), seq, ack, flags, data[tcp + thl : end])


default_parser = SegmentParser()
parse_segment = default_parser.parse
"""Module-level parser; its counters are ``default_parser.skipped`` / ``.unsupported_linktypes``."""
skipped = default_parser.skipped

"""Writing pcap / pcapng files and building TCP packets.

Used by tests (damaged/transformed capture variants), by synthetic AMQP captures and by
live capture's ``-w``. Builders produce link-layer bytes; the IPv4 header checksum is
computed, the TCP checksum is left 0 (analyzers, ours and tshark's by default, ignore it).

Example::

    conv = TcpConversation(client=("127.0.0.1", 40000), server=("127.0.0.1", 5672))
    conv.handshake()
    conv.send(True, b"AMQP\\x00\\x00\\x09\\x01")
    conv.send(False, frame_bytes, mss=1000)
    conv.fin()
    write_pcap("x.pcap", conv.records)
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import IO, Union

from amqpscope.packets import ACK, FIN, PSH, RST, SYN, Endpoint

Record = tuple[int, bytes]
"""(ts_ns, link-layer frame bytes)"""

Dest = Union[str, "os.PathLike[str]", IO[bytes]]

LINKTYPES = {"ether": 1, "sll": 113, "sll2": 276, "null": 0, "raw": 101}


@contextmanager
def _opened(dest: Dest) -> Iterator[IO[bytes]]:
    if isinstance(dest, (str, os.PathLike)):
        with open(dest, "wb") as f:
            yield f
    else:
        yield dest


# --- pcap --------------------------------------------------------------------------------------------


def pcap_header(linktype: int = 1, nanosecond: bool = False, snaplen: int = 262144) -> bytes:
    magic = 0xA1B23C4D if nanosecond else 0xA1B2C3D4
    return struct.pack("<IHHiIII", magic, 2, 4, 0, 0, snaplen, linktype)


def pcap_record(ts_ns: int, data: bytes, nanosecond: bool = False, wirelen: int | None = None) -> bytes:
    sec, ns = divmod(ts_ns, 1_000_000_000)
    frac = ns if nanosecond else ns // 1000
    return struct.pack("<IIII", sec, frac, len(data), len(data) if wirelen is None else wirelen) + data


def write_pcap(dest: Dest, packets: Iterable[Record], linktype: int = 1, nanosecond: bool = False) -> int:
    """Write a classic little-endian pcap; returns the number of packets written."""
    n = 0
    with _opened(dest) as f:
        f.write(pcap_header(linktype, nanosecond))
        for ts_ns, data in packets:
            f.write(pcap_record(ts_ns, data, nanosecond))
            n += 1
    return n


# --- pcapng ------------------------------------------------------------------------------------------


def _block(btype: int, body: bytes) -> bytes:
    body += b"\x00" * (-len(body) % 4)
    total = len(body) + 12
    return struct.pack("<II", btype, total) + body + struct.pack("<I", total)


def pcapng_shb() -> bytes:
    return _block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))


def pcapng_idb(linktype: int, tsresol: int = 9, snaplen: int = 262144) -> bytes:
    """Interface description; ``tsresol`` is the if_tsresol byte (9 = ns, 6 = µs, 0x80|n = 2^-n)."""
    opts = b""
    if tsresol != 6:
        opts = struct.pack("<HHB3x", 9, 1, tsresol) + struct.pack("<HH", 0, 0)
    return _block(1, struct.pack("<HHI", linktype, 0, snaplen) + opts)


def _ticks(ts_ns: int, tsresol: int) -> int:
    per_sec = 1 << (tsresol & 0x7F) if tsresol & 0x80 else 10**tsresol
    return ts_ns * per_sec // 1_000_000_000


def pcapng_epb(ts_ns: int, data: bytes, interface: int = 0, tsresol: int = 9) -> bytes:
    t = _ticks(ts_ns, tsresol)
    return _block(6, struct.pack("<IIIII", interface, t >> 32, t & 0xFFFFFFFF, len(data), len(data)) + data)


def pcapng_spb(data: bytes) -> bytes:
    return _block(3, struct.pack("<I", len(data)) + data)


def pcapng_obsolete_pb(ts_ns: int, data: bytes, interface: int = 0, tsresol: int = 9) -> bytes:
    t = _ticks(ts_ns, tsresol)
    return _block(2, struct.pack("<HHIIII", interface, 0, t >> 32, t & 0xFFFFFFFF, len(data), len(data)) + data)


def write_pcapng(
    dest: Dest,
    packets: Iterable[Record] | Iterable[tuple[int, bytes, int]],
    linktype: int | list[int] = 1,
    tsresol: int | list[int] = 9,
) -> int:
    """Write a pcapng file with one section.

    ``linktype``/``tsresol`` may be lists: one interface each. Records are ``(ts_ns, data)``
    (interface 0) or ``(ts_ns, data, interface)``.
    """
    lts = linktype if isinstance(linktype, list) else [linktype]
    res = tsresol if isinstance(tsresol, list) else [tsresol] * len(lts)
    n = 0
    with _opened(dest) as f:
        f.write(pcapng_shb())
        for lt, r in zip(lts, res, strict=True):
            f.write(pcapng_idb(lt, r))
        for rec in packets:
            iface = rec[2] if len(rec) > 2 else 0  # type: ignore[misc]
            f.write(pcapng_epb(rec[0], rec[1], iface, res[iface]))
            n += 1
    return n


# --- packet builders ---------------------------------------------------------------------------------


def ip_checksum(header: bytes) -> int:
    if len(header) % 2:
        header += b"\x00"
    s = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def _is_v6(addr: str) -> bool:
    return ":" in addr


def tcp_header(sport: int, dport: int, seq: int, ack: int, flags: int, window: int = 65535) -> bytes:
    return struct.pack("!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, 5 << 4, flags, window, 0, 0)


def ip_packet(src: str, dst: str, proto: int, payload: bytes, ident: int = 0, ttl: int = 64) -> bytes:
    """An IPv4 or IPv6 packet (by address family of ``src``) around ``payload``."""
    if _is_v6(src):
        return (
            struct.pack("!IHBB", 0x60000000, len(payload), proto, ttl)
            + socket.inet_pton(socket.AF_INET6, src)
            + socket.inet_pton(socket.AF_INET6, dst)
            + payload
        )
    hdr = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        20 + len(payload),
        ident & 0xFFFF,
        0x4000,  # DF
        ttl,
        proto,
        0,
        socket.inet_aton(src),
        socket.inet_aton(dst),
    )
    hdr = hdr[:10] + struct.pack("!H", ip_checksum(hdr)) + hdr[12:]
    return hdr + payload


def link_frame(ip: bytes, link: str = "ether", ipv6: bool | None = None) -> bytes:
    """Wrap an IP packet in a link-layer header of the given kind (see ``LINKTYPES``)."""
    v6 = (ip[0] >> 4) == 6 if ipv6 is None else ipv6
    ethertype = 0x86DD if v6 else 0x0800
    if link == "ether":
        return b"\x00" * 12 + struct.pack("!H", ethertype) + ip
    if link == "sll":
        # packet type 0 (to us), ARPHRD_LOOPBACK 772, address length 6
        return struct.pack("!HHH8sH", 0, 772, 6, b"\x00" * 8, ethertype) + ip
    if link == "sll2":
        return struct.pack("!HHIHBB8s", ethertype, 0, 1, 772, 0, 6, b"\x00" * 8) + ip
    if link == "null":
        return struct.pack("<I", 10 if v6 else 2) + ip  # host (little-endian) order, Linux AF values
    if link == "raw":
        return ip
    raise ValueError(f"unknown link kind {link!r}")


def tcp_packet(
    src: Endpoint,
    dst: Endpoint,
    seq: int,
    ack: int,
    flags: int,
    payload: bytes = b"",
    ipv6: bool = False,
    link: str = "ether",
) -> bytes:
    """One TCP segment as link-layer bytes. With ``ipv6`` and IPv4 addresses, maps them to ::ffff:a.b.c.d
    unless they are loopback (127.x → ::1 is not unique, so any 127.0.0.1 becomes ::1)."""
    s_addr, d_addr = src[0], dst[0]
    if ipv6:
        s_addr, d_addr = to_ipv6(s_addr), to_ipv6(d_addr)
    tcp = tcp_header(src[1], dst[1], seq, ack, flags) + payload
    return link_frame(ip_packet(s_addr, d_addr, 6, tcp), link)


def to_ipv6(addr: str) -> str:
    if _is_v6(addr):
        return addr
    if addr == "127.0.0.1":
        return "::1"
    return "::ffff:" + addr


class TcpConversation:
    """Builds the packets of one TCP connection; ``records`` accumulates ``(ts_ns, frame)``.

    Timestamps advance by ``step_ns`` per packet unless given. Every method returns the
    records it added.
    """

    def __init__(
        self,
        client: Endpoint = ("127.0.0.1", 40000),
        server: Endpoint = ("127.0.0.1", 5672),
        *,
        client_isn: int = 1000,
        server_isn: int = 5000,
        start_ns: int = 1_700_000_000_000_000_000,
        step_ns: int = 1_000_000,
        ipv6: bool = False,
        link: str = "ether",
        ack_data: bool = True,
    ) -> None:
        self.client = client
        self.server = server
        self.seq = {True: client_isn, False: server_isn}  # next seq per side (True = client)
        self.ts_ns = start_ns
        self.step_ns = step_ns
        self.ipv6 = ipv6
        self.link = link
        self.ack_data = ack_data
        self.records: list[Record] = []

    @property
    def linktype(self) -> int:
        return LINKTYPES[self.link]

    def _ts(self, ts_ns: int | None) -> int:
        if ts_ns is None:
            self.ts_ns += self.step_ns
        else:
            self.ts_ns = ts_ns
        return self.ts_ns

    def packet(self, from_client: bool, flags: int, payload: bytes = b"", ts_ns: int | None = None) -> Record:
        """Add one segment at the side's current sequence number (advancing it)."""
        src, dst = (self.client, self.server) if from_client else (self.server, self.client)
        seq = self.seq[from_client]
        ack = self.seq[not from_client] if flags & ACK else 0
        frame = tcp_packet(src, dst, seq, ack, flags, payload, self.ipv6, self.link)
        self.seq[from_client] = (seq + len(payload) + (1 if flags & (SYN | FIN) else 0)) & 0xFFFFFFFF
        rec = (self._ts(ts_ns), frame)
        self.records.append(rec)
        return rec

    def handshake(self) -> list[Record]:
        return [self.packet(True, SYN), self.packet(False, SYN | ACK), self.packet(True, ACK)]

    def send(self, from_client: bool, data: bytes, ts_ns: int | None = None, mss: int | None = None) -> list[Record]:
        """Send ``data`` in segments of at most ``mss`` bytes, then (if ``ack_data``) an ACK back."""
        out: list[Record] = []
        step = mss or max(len(data), 1)
        for i in range(0, len(data), step):
            out.append(self.packet(from_client, PSH | ACK, data[i : i + step], ts_ns if i == 0 else None))
        if self.ack_data:
            out.append(self.packet(not from_client, ACK))
        return out

    def fin(self, from_client: bool = True) -> list[Record]:
        """Orderly close: FIN from one side, FIN+ACK from the other, final ACK."""
        return [
            self.packet(from_client, FIN | ACK),
            self.packet(not from_client, FIN | ACK),
            self.packet(from_client, ACK),
        ]

    def rst(self, from_client: bool = True) -> list[Record]:
        return [self.packet(from_client, RST | ACK)]

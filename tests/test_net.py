"""Link/IP/TCP parsing."""

from __future__ import annotations

import struct

import pytest
from amqpscope.net import SegmentParser

from amqpscope.packets import ACK, PSH, RawPacket
from amqpscope.pcapwrite import LINKTYPES, ip_checksum, ip_packet, link_frame, tcp_header, tcp_packet

C = ("127.0.0.1", 40000)
S = ("127.0.0.1", 5672)


def _raw(data: bytes, linktype: int = 1) -> RawPacket:
    return RawPacket(7, 123, linktype, data, len(data))


@pytest.mark.parametrize("link", ["ether", "sll", "sll2", "null", "raw"])
@pytest.mark.parametrize("ipv6", [False, True])
def test_link_types(link: str, ipv6: bool) -> None:
    frame = tcp_packet(C, S, 1000, 2000, PSH | ACK, b"payload", ipv6=ipv6, link=link)
    seg = SegmentParser().parse(_raw(frame, LINKTYPES[link]))
    assert seg is not None
    addr = "::1" if ipv6 else "127.0.0.1"
    assert seg.src == (addr, 40000) and seg.dst == (addr, 5672)
    assert (seg.seq, seg.ack, seg.flags, seg.payload) == (1000, 2000, PSH | ACK, b"payload")
    assert (seg.index, seg.ts_ns) == (7, 123)


@pytest.mark.parametrize("lt", [228, 12, 14])
def test_raw_ipv4_linktypes(lt: int) -> None:
    frame = tcp_packet(C, S, 1, 2, ACK, b"x", link="raw")
    assert SegmentParser().parse(_raw(frame, lt)) is not None


def test_linktype_ipv6_229() -> None:
    frame = tcp_packet(C, S, 1, 2, ACK, b"x", ipv6=True, link="raw")
    seg = SegmentParser().parse(_raw(frame, 229))
    assert seg is not None and seg.src[0] == "::1"


@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("lt", [0, 108])
@pytest.mark.parametrize("af", [2, 10, 24, 28, 30])
def test_null_and_loop_both_byte_orders(order: str, lt: int, af: int) -> None:
    ipv6 = af != 2
    ip = tcp_packet(C, S, 1, 2, ACK, b"hi", ipv6=ipv6, link="raw")
    seg = SegmentParser().parse(_raw(struct.pack(order + "I", af) + ip, lt))
    assert seg is not None and seg.payload == b"hi"


@pytest.mark.parametrize("tpids", [(0x8100,), (0x88A8, 0x8100), (0x9100, 0x8100)])
def test_vlan_tags(tpids: tuple[int, ...]) -> None:
    frame = tcp_packet(C, S, 1, 2, ACK, b"tagged")
    tags = b"".join(struct.pack("!HH", t, 5) for t in tpids)
    tagged = frame[:12] + tags + frame[12:]
    seg = SegmentParser().parse(_raw(tagged))
    assert seg is not None and seg.payload == b"tagged"


def test_ethernet_padding_cut_by_ip_total_length() -> None:
    frame = tcp_packet(C, S, 1, 2, ACK, b"")  # 54 bytes; Ethernet pads to 60
    seg = SegmentParser().parse(_raw(frame + b"\x00" * 6))
    assert seg is not None and seg.payload == b""


def test_ipv4_options_and_tcp_options() -> None:
    tcp = bytearray(tcp_header(40000, 5672, 1, 2, ACK) + b"\x01\x01\x08\x0a" + b"\x00" * 8)
    tcp[12] = 8 << 4  # 32-byte TCP header
    opts = b"\x01\x01\x01\x00"  # NOP NOP NOP EOL
    total = 24 + len(tcp) + 3
    hdr = struct.pack("!BBHHHBBH4s4s", 0x46, 0, total, 0, 0, 64, 6, 0, bytes([127, 0, 0, 1]), bytes([127, 0, 0, 1]))
    hdr += opts
    hdr = hdr[:10] + struct.pack("!H", ip_checksum(hdr)) + hdr[12:]
    seg = SegmentParser().parse(_raw(link_frame(hdr + bytes(tcp) + b"abc")))
    assert seg is not None and seg.payload == b"abc"


def test_ipv4_fragments() -> None:
    p = SegmentParser()
    frame = bytearray(tcp_packet(C, S, 1, 2, ACK, b"x" * 40))
    frame[14 + 6 : 14 + 8] = struct.pack("!H", 0x0005)  # fragment offset 40 bytes
    assert p.parse(_raw(bytes(frame))) is None
    assert p.skipped["IPv4 fragment (not first)"] == 1
    frame[14 + 6 : 14 + 8] = struct.pack("!H", 0x2000)  # MF, offset 0: first fragment
    assert p.parse(_raw(bytes(frame))) is not None
    assert p.notes["IPv4 first fragment (payload incomplete)"] == 1


def _ipv6_with_ext(exts: list[tuple[int, bytes]], tcp: bytes) -> bytes:
    """exts: (header type, body) where body excludes the next-header byte."""
    chain = b""
    types = [t for t, _ in exts] + [6]
    for i, (_, body) in enumerate(exts):
        chain += bytes([types[i + 1]]) + body
    src = b"\x00" * 15 + b"\x01"
    return struct.pack("!IHBB", 0x60000000, len(chain) + len(tcp), types[0], 64) + src + src + chain + tcp


def test_ipv6_extension_headers() -> None:
    tcp = tcp_header(40000, 5672, 1, 2, ACK) + b"data"
    exts = [
        (0, b"\x00" + b"\x00" * 6),  # hop-by-hop, 8 bytes
        (60, b"\x01" + b"\x00" * 14),  # destination options, 16 bytes
        (51, b"\x01" + b"\x00" * 10),  # AH: (1+2)*4 = 12 bytes
        (44, b"\x00" + b"\x00\x00" + b"\x00" * 4),  # fragment, offset 0
    ]
    seg = SegmentParser().parse(_raw(link_frame(_ipv6_with_ext(exts, tcp))))
    assert seg is not None and seg.payload == b"data" and seg.src == ("::1", 40000)


def test_ipv6_non_first_fragment_skipped() -> None:
    p = SegmentParser()
    tcp = tcp_header(40000, 5672, 1, 2, ACK) + b"data"
    pkt = _ipv6_with_ext([(44, b"\x00" + struct.pack("!H", 8 << 3) + b"\x00" * 4)], tcp)
    assert p.parse(_raw(link_frame(pkt))) is None
    assert p.skipped["IPv6 fragment (not first)"] == 1


def test_not_tcp_and_not_ip_counted() -> None:
    p = SegmentParser()
    udp = link_frame(ip_packet("127.0.0.1", "127.0.0.1", 17, b"\x00" * 12))
    assert p.parse(_raw(udp)) is None
    arp = b"\xff" * 12 + b"\x08\x06" + b"\x00" * 28
    assert p.parse(_raw(arp)) is None
    assert p.skipped["not TCP"] == 1 and p.skipped["not IP"] == 1


def test_unsupported_linktype_counted() -> None:
    p = SegmentParser()
    assert p.parse(_raw(b"\x00" * 60, 147)) is None
    assert p.unsupported_linktypes[147] == 1
    assert p.skipped["unsupported link type 147"] == 1


@pytest.mark.parametrize("cut", [0, 5, 13, 20, 33, 40, 53])
def test_truncated_packets_never_raise(cut: int) -> None:
    frame = tcp_packet(C, S, 1, 2, ACK, b"payload")
    p = SegmentParser()
    seg = p.parse(_raw(frame[:cut]))
    assert seg is None
    assert sum(p.skipped.values()) == 1


def test_snapped_payload_is_partial() -> None:
    frame = tcp_packet(C, S, 1, 2, ACK, b"0123456789")
    p = SegmentParser()
    seg = p.parse(_raw(frame[:-4]))
    assert seg is not None and seg.payload == b"012345"
    assert p.notes["snapped (payload incomplete)"] == 1


def test_tso_zero_total_length_uses_captured_length() -> None:
    frame = bytearray(tcp_packet(C, S, 1, 2, ACK, b"big"))
    frame[16:18] = b"\x00\x00"
    seg = SegmentParser().parse(_raw(bytes(frame)))
    assert seg is not None and seg.payload == b"big"


def test_fuzz_random_bytes_never_raise() -> None:
    import random

    rng = random.Random(5)
    p = SegmentParser()
    base = tcp_packet(C, S, 1, 2, ACK, b"payload", link="ether")
    for lt in (0, 1, 101, 108, 113, 229, 276):
        for _ in range(300):
            data = bytearray(base)
            for _ in range(rng.randint(1, 6)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            p.parse(_raw(bytes(data[: rng.randint(0, len(data))]), lt))

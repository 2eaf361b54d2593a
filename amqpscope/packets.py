"""Types that flow between the capture, network and TCP reassembly stages.

These are the contract between the lower half of the pipeline (capture files, live
interfaces, link/IP/TCP parsing, reassembly) and the AMQP dissector above it.
"""

from __future__ import annotations

from dataclasses import dataclass

Endpoint = tuple[str, int]
"""An (address, port) pair; addresses in their usual text form (``127.0.0.1``, ``::1``)."""


@dataclass(frozen=True, slots=True)
class RawPacket:
    """One captured packet, as the capture file or interface handed it over."""

    index: int  # 1-based over every packet in the file, like tshark's frame.number
    ts_ns: int  # capture timestamp, nanoseconds since the epoch
    linktype: int  # pcap LINKTYPE_* of the interface it was captured on
    data: bytes
    wirelen: int  # original length on the wire (caplen == len(data))


@dataclass(frozen=True, slots=True)
class Segment:
    """A TCP segment with the addressing needed to put it in a flow."""

    index: int
    ts_ns: int
    src: Endpoint
    dst: Endpoint
    seq: int
    ack: int
    flags: int  # TCP flag bits: FIN 0x01, SYN 0x02, RST 0x04, PSH 0x08, ACK 0x10
    payload: bytes


FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10


# --- what TCP reassembly emits, per flow and direction -------------------------------------------
# ``flow`` is an integer assigned in order of first appearance (0, 1, 2 … like tshark's tcp.stream).
# ``src``/``dst`` give the direction of the bytes.


@dataclass(frozen=True, slots=True)
class TcpOpen:
    flow: int
    client: Endpoint  # the SYN sender when the handshake was seen, else the first packet's source
    server: Endpoint
    syn_seen: bool
    packet: int
    ts_ns: int


@dataclass(frozen=True, slots=True)
class TcpData:
    flow: int
    src: Endpoint
    dst: Endpoint
    data: bytes  # in-order, never overlapping what came before in this direction
    packet: int  # the packet whose arrival made these bytes contiguous
    ts_ns: int


@dataclass(frozen=True, slots=True)
class TcpGap:
    """Bytes of one direction that never arrived; they are not zero-filled."""

    flow: int
    src: Endpoint
    dst: Endpoint
    size: int  # number of missing bytes (0 when unknown)
    packet: int
    ts_ns: int


@dataclass(frozen=True, slots=True)
class TcpClose:
    flow: int
    how: str  # "fin" | "rst" | "evicted" | "eof" (end of capture)
    packet: int
    ts_ns: int


TcpEvent = TcpOpen | TcpData | TcpGap | TcpClose

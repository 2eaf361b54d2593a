"""Packets as Python holds them: what capture files and live back ends hand over, and what the
packet writer (``pcapwrite``) builds. Everything past this point runs in the native core."""

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


FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10

"""One direction of AMQP bytes as a TCP capture, for tests and tools that used to feed a frame
splitter by hand: every chunk becomes a client-to-server segment, every gap a hole in the
sequence space, and the packets go through the native core like any capture.

    s = OneWay()
    s.feed(b"AMQP\\x00\\x00\\x09\\x01" + frames)   # returns the packet number of the segment
    s.gap(1500)                                  # bytes the capture lost
    s.feed(more)
    events, stats = s.decode()                   # stats.accounting: where the bytes went

A hole is followed by an ACK from the server past it once data arrives behind it, so the core
declares the bytes lost right there (and not only at the end of the flow); a hole at the end is
declared when the FIN arrives. Without ``at_start`` there is no SYN: the capture starts
mid-stream, and holes before the first data are not visible at all (``visible_gap_bytes``).
"""

from __future__ import annotations

from typing import Any

from amqpscope.dissect.codec import Codec
from amqpscope.events import Event
from amqpscope.packets import RawPacket
from amqpscope.pcapwrite import ACK, TcpConversation
from amqpscope.pipeline import Options, RunStats, decode_packets

MAX_SEGMENT = 60_000  # an IPv4 packet holds at most 65535 bytes


class OneWay:
    """Client-to-server bytes of one TCP connection, built up chunk by chunk."""

    def __init__(self, at_start: bool = True, server_port: int = 5672, start_ns: int = 1_000_000_000) -> None:
        self.tcp = TcpConversation(("10.0.0.1", 40000), ("10.0.0.2", server_port), start_ns=start_ns, ack_data=False)
        self.at_start = at_start
        self.server_port = server_port
        if at_start:
            self.tcp.handshake()
        self._started = at_start  # the core knows where the stream starts
        self._hole = False  # bytes skipped since the last segment
        self.fed_bytes = 0
        self.visible_gap_bytes = 0

    @property
    def packets_so_far(self) -> int:
        return len(self.tcp.records)

    def feed(self, data: bytes, ts_ns: int | None = None) -> int:
        """Send ``data`` (in as few segments as fit); the packet number of the last segment, or of
        the ACK that makes the core declare a hole before it lost (the packet its bytes are decoded
        with). Empty data sends nothing."""
        for i in range(0, len(data), MAX_SEGMENT):
            self.tcp.packet(True, ACK, data[i : i + MAX_SEGMENT], ts_ns)
            self.fed_bytes += len(data[i : i + MAX_SEGMENT])
            self._started = True
            if self._hole:
                self.tcp.packet(False, ACK)
                self._hole = False
        return self.packets_so_far

    def gap(self, size: int) -> None:
        """``size`` bytes of the stream the capture does not have."""
        if size <= 0:
            return
        self.tcp.seq[True] = (self.tcp.seq[True] + size) & 0xFFFFFFFF
        if self._started:
            self.visible_gap_bytes += size
            self._hole = True

    def packets(self, fin: bool = True) -> list[RawPacket]:
        """Every packet so far, closed with FIN/FIN/ACK (which declares a trailing hole lost)."""
        records = list(self.tcp.records)
        if fin:
            records += _closing(self.tcp)
        return [RawPacket(i + 1, ts, self.tcp.linktype, data, len(data)) for i, (ts, data) in enumerate(records)]

    def decode(self, codec: Codec | None = None, fin: bool = True, **options: Any) -> tuple[list[Event], RunStats]:
        """The core's events for these packets, and its counters."""
        stats = RunStats()
        opts = Options(ports=frozenset({self.server_port}), **options)
        events = list(decode_packets(self.packets(fin), codec, opts, stats))
        return events, stats


def _closing(tcp: TcpConversation) -> list[tuple[int, bytes]]:
    """The FIN exchange, without changing ``tcp`` (packets() may be called again)."""
    saved = (dict(tcp.seq), tcp.ts_ns, len(tcp.records))
    out = tcp.fin()
    tcp.seq, tcp.ts_ns = saved[0], saved[1]
    del tcp.records[saved[2] :]
    return out

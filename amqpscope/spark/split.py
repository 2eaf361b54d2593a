"""Decoding one slice of a capture: only the TCP flows assigned to it.

Why by flow: AMQP state (frame boundaries, channels, content assembly, negotiation) lives in a TCP
connection, so a connection must be decoded by one task from its first byte; cutting a capture
by time or offset would make each part start mid-stream and decode differently. Every slice task
reads the whole file and parses and reassembles every packet (~10 % of the cost, measured on
bench/data/large.pcap), but hands only its own flows to the AMQP session, where ~90 % of the time
goes. Reassembling all flows keeps the flow numbers (``conn``) exactly those of a single-process
run.

Which flows: a flow's share of work is close to its payload bytes, and a capture often has a few
heavy connections (a busy consumer, a couple of publishers). Hashing flows to slices can put two
heavy flows together, so every slice first scans the same prefix of the file (``plan_bytes``),
weighs the flows seen there and assigns them greedily, heaviest first, to the lightest slice
(LPT). The plan is a pure function of the file's bytes, so all slices agree without talking to
each other. Flows that start after the prefix fall back to a stable hash of their endpoints.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from itertools import chain

from amqpscope.dissect.codec import Codec
from amqpscope.events import Event
from amqpscope.net import SegmentParser
from amqpscope.packets import Endpoint, RawPacket, TcpOpen
from amqpscope.pipeline import RunStats, decode_batches
from amqpscope.session import Options

FlowKey = tuple[Endpoint, Endpoint]
PACKET_WEIGHT = 100  # per-packet cost in "bytes", so many small frames weigh more than their size


def flow_key(a: Endpoint, b: Endpoint) -> FlowKey:
    """The same key for both directions (and for a SYN-ACK seen before its SYN)."""
    return (a, b) if a <= b else (b, a)


def hash_slice(key: FlowKey, slices: int) -> int:
    # crc32, not hash(): str hashes are salted per process, and every slice must agree
    return zlib.crc32(repr(key).encode()) % slices


def plan_slices(packets: Iterable[RawPacket], slices: int, plan_bytes: int) -> dict[FlowKey, int]:
    """Assign the flows of the first ``plan_bytes`` of capture to ``slices`` slices (LPT)."""
    parser = SegmentParser()
    weight: Counter[FlowKey] = Counter()
    seen = 0
    for raw in packets:
        seen += len(raw.data) + 16
        seg = parser.parse(raw)
        if seg is not None:
            weight[flow_key(seg.src, seg.dst)] += len(seg.payload) + PACKET_WEIGHT
        if seen >= plan_bytes:
            break
    load = [0] * slices
    plan: dict[FlowKey, int] = {}
    for key, w in sorted(weight.items(), key=lambda kv: (-kv[1], kv[0])):
        k = min(range(slices), key=lambda i: (load[i], i))
        plan[key] = k
        load[k] += w
    return plan


def decode_slice(
    packets: Iterable[RawPacket],
    codec: Codec,
    options: Options,
    stats: RunStats,
    mine: Callable[[FlowKey], bool] | None = None,
) -> Iterator[Event]:
    """Like ``pipeline.decode_packets``, but the session only sees flows where ``mine(key)``.

    With ``mine=None`` every flow is decoded and the events are those of ``decode_packets``.
    Errors of the capture are re-raised after what was decoded before them is flushed.
    """
    return chain.from_iterable(decode_batches(packets, codec, options, stats, select=flow_selector(mine)))


def flow_selector(mine: Callable[[FlowKey], bool] | None) -> Callable[[object], bool] | None:
    """The ``select`` of ``decode_batches`` for the flows where ``mine(key)``: decided once per
    flow when it opens, then looked up by flow number."""
    if mine is None:
        return None
    own: set[int] = set()

    def wanted(tev: object) -> bool:
        if type(tev) is TcpOpen:
            if mine(flow_key(tev.client, tev.server)):
                own.add(tev.flow)
                return True
            own.discard(tev.flow)
            return False
        return getattr(tev, "flow", None) in own

    return wanted

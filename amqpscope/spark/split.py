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
from collections.abc import Callable, Iterator
from itertools import chain

from amqpscope import _native
from amqpscope.dissect.codec import Codec
from amqpscope.events import Event
from amqpscope.packets import Endpoint
from amqpscope.pipeline import Options, RunStats, Source, decode_batches

FlowKey = tuple[Endpoint, Endpoint]
PACKET_WEIGHT = 100  # per-packet cost in "bytes", so many small frames weigh more than their size


def flow_key(a: Endpoint, b: Endpoint) -> FlowKey:
    """The same key for both directions (and for a SYN-ACK seen before its SYN)."""
    return (a, b) if a <= b else (b, a)


def hash_slice(key: FlowKey, slices: int) -> int:
    # crc32, not hash(): str hashes are salted per process, and every slice must agree
    return zlib.crc32(repr(key).encode()) % slices


def plan_slices(source: Source, slices: int, plan_bytes: int) -> dict[FlowKey, int]:
    """Assign the flows of the first ``plan_bytes`` of capture to ``slices`` slices (LPT). The
    weighing is per packet, so the core does it (``_native.flow_weights``)."""
    weights = _native.flow_weights(source, plan_bytes, PACKET_WEIGHT)
    load = [0] * slices
    plan: dict[FlowKey, int] = {}
    for a, b, w in sorted(weights, key=lambda t: (-t[2], (t[0], t[1]))):
        k = min(range(slices), key=lambda i: (load[i], i))
        plan[(a, b)] = k
        load[k] += w
    return plan


def decode_slice(
    source: Source,
    codec: Codec,
    options: Options,
    stats: RunStats,
    mine: Callable[[FlowKey], bool] | None = None,
) -> Iterator[Event]:
    """Like ``pipeline.decode_source``, but only the flows where ``mine(key)`` are decoded.

    With ``mine=None`` every flow is decoded and the events are those of ``decode_source``.
    Errors of the capture are re-raised after what was decoded before them is flushed.
    """
    return chain.from_iterable(decode_batches(source, codec, options, stats, select=flow_selector(mine)))


def flow_selector(mine: Callable[[FlowKey], bool] | None) -> Callable[[Endpoint, Endpoint], bool] | None:
    """The ``select`` of ``decode_batches`` for the flows where ``mine(key)`` (the core asks it
    once per flow, with the flow's two endpoints)."""
    if mine is None:
        return None
    return lambda client, server: mine(flow_key(client, server))

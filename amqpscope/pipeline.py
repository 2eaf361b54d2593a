"""The pipeline: packets → segments → TCP streams → frames → events, as one pull generator.

The same function serves capture files, live interfaces and Spark executors; memory stays bounded
because every stage streams and the reassembler evicts idle flows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any

from .capture import read_packets
from .dissect.codec import Codec, get_codec
from .dissect.stream import StreamAccounting
from .events import Accounting, Event
from .net import SegmentParser
from .packets import RawPacket
from .reassembly import TcpReassembler
from .session import Options, Session


@dataclass(slots=True)
class RunStats:
    """What a run saw, for summaries and the byte accounting."""

    packets: int = 0
    tcp_packets: int = 0
    events: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    accounting: StreamAccounting = field(default_factory=StreamAccounting)

    def accounting_event(self, ts: float = 0.0) -> Accounting:
        a = self.accounting
        return Accounting(packet=self.packets, ts=ts, conn=-1, stream_bytes=a.stream_bytes, frame_bytes=a.frame_bytes,
                          header_bytes=a.header_bytes, gap_bytes=a.gap_bytes, skipped_bytes=a.skipped_bytes,
                          pending_bytes=a.pending_bytes, frames=a.frames, packets=self.packets,
                          tcp_packets=self.tcp_packets)  # fmt: skip


def decode_packets(
    packets: Iterable[RawPacket],
    codec: Codec | None = None,
    options: Options | None = None,
    stats: RunStats | None = None,
    stages: Iterable[Callable[[Iterator[Event]], Iterator[Event]]] = (),
    idle_timeout_ns: int | None = None,
) -> Iterator[Event]:
    """Every event of a packet sequence, in the order the packets completed them.

    ``idle_timeout_ns`` evicts flows without packets for that long (capture time); live capture sets
    it so that memory stays bounded over hours, files leave it off (their flows end at end of file).
    """
    batches, rest = _batched(packets, codec, options, stats, stages, idle_timeout_ns)
    events: Iterator[Event] = chain.from_iterable(batches)
    for stage in rest:
        events = stage(events)
    return events


def decode_batches(
    packets: Iterable[RawPacket],
    codec: Codec | None = None,
    options: Options | None = None,
    stats: RunStats | None = None,
    stages: Iterable[Callable[[Iterator[Event]], Iterator[Event]]] = (),
    select: Callable[[object], bool] | None = None,
) -> Iterator[list[Event]]:
    """``decode_packets`` as lists of events (those of one TCP event each), in the same order:
    ``chain.from_iterable`` of it is the event stream without a generator step per event.

    ``select``, if given, is asked about every TCP event (open, data, gap, close) and only those it
    accepts reach the AMQP session: Spark slices decode a share of a capture's connections this way
    (``spark.split.flow_selector``), reassembling every flow but decoding only their own.
    """
    batches, rest = _batched(packets, codec, options, stats, stages, None, select)
    if not rest:
        return batches
    events: Iterator[Event] = chain.from_iterable(batches)
    for stage in rest:
        events = stage(events)
    return ([ev] for ev in events)


def _batched(packets: Iterable[RawPacket], codec: Codec | None, options: Options | None, stats: RunStats | None,
             stages: Iterable[Callable[[Iterator[Event]], Iterator[Event]]], idle_timeout_ns: int | None,
             select: Callable[[object], bool] | None = None) -> tuple[Iterator[list[Event]], list[Callable[[Iterator[Event]], Iterator[Event]]]]:  # fmt: skip
    """The decoder's batches through the leading stages that take batches (``stage.batches``, like
    the validator's), and the stages left to run per event. A generator that resumes once per event
    costs more than the work of the lighter events themselves."""
    batches = _decode(packets, codec or get_codec(), options or Options(), stats or RunStats(), idle_timeout_ns,
                      select)  # fmt: skip
    rest = list(stages)
    while rest and hasattr(rest[0], "batches"):
        batches = rest.pop(0).batches(batches)  # type: ignore[attr-defined]
    return batches, rest


def _decode(packets: Iterable[RawPacket], codec: Codec, options: Options, stats: RunStats,
            idle_timeout_ns: int | None = None, select: Callable[[object], bool] | None = None,
            ) -> Iterator[list[Event]]:  # fmt: skip
    parser = SegmentParser()
    parse = parser.parse
    reasm = TcpReassembler(idle_timeout_ns=idle_timeout_ns)
    feed = reasm.feed
    session = Session(codec, options)
    handle = session.handle
    n = tcp = 0
    error: BaseException | None = None
    try:
        for raw in packets:
            n += 1
            seg = parse(raw)
            if seg is None:
                continue
            tcp += 1
            for tev in feed(seg):
                if select is not None and not select(tev):
                    continue
                out = handle(tev)
                if out:
                    yield out
    except GeneratorExit:
        raise  # the consumer stopped listening: nothing more to say
    except (Exception, KeyboardInterrupt) as exc:
        error = exc  # a truncated file or Ctrl-C: first flush what is decoded, then re-raise
    stats.packets, stats.tcp_packets = n, tcp
    stats.skipped = dict(getattr(parser, "skipped", {}) or {})
    last_ts = 0
    for tev in reasm.finish():
        if select is None or select(tev):
            yield handle(tev)
        last_ts = getattr(tev, "ts_ns", last_ts)
    for conn in list(session.conns.values()):
        yield conn.close("eof", n, last_ts)
    stats.accounting = session.accounting()
    if error is not None:
        raise error


def read(
    path: str | Path,
    spec: str | Path | None = None,
    ports: Iterable[int] = (5672,),
    show_credentials: bool = False,
) -> EventStream:
    """Decode a capture file into events: ``for ev in amqpscope.read("x.pcap"): …``"""
    return EventStream(path, spec, frozenset(ports), show_credentials)


class EventStream:
    """The events of one capture, pleasant in a notebook. Iterating decodes the file again each time
    (nothing is held in memory), so it works for captures of any size.

    ``records()`` gives plain dicts (the JSONL records), optionally only some kinds and only those a
    display filter (the ``-Y`` syntax of ``amqpscope decode``) keeps; ``to_pandas()`` a DataFrame of them.
    """

    def __init__(self, path: str | Path, spec: str | Path | None, ports: frozenset[int], show: bool) -> None:
        self.path = path
        self.codec = get_codec(spec)
        self.options = Options(ports=ports, show_credentials=show)

    def __iter__(self) -> Iterator[Event]:
        return decode_packets(read_packets(self.path), self.codec, self.options)

    def __repr__(self) -> str:
        return f"<amqpscope.EventStream {str(self.path)!r} ports={sorted(self.options.ports)}>"

    def records(
        self, kinds: Iterable[str] | None = None, where: str | None = None, body: str = "none"
    ) -> Iterator[dict[str, Any]]:
        """Records of the events of ``kinds`` (all when None) that the filter ``where`` keeps;
        ``body`` (none | preview | full) adds message bodies as text or hex."""
        from .filter import compile_filter  # the filter language is only needed here
        from .output.records import record

        wanted = set(kinds) if kinds else None
        keep = compile_filter(where)
        for ev in self:
            if wanted is None or ev.kind in wanted:
                rec = record(ev, body)
                if keep is None or keep(rec):
                    yield rec

    def to_pandas(self, kinds: Iterable[str] | None = ("frame",), where: str | None = None, body: str = "none") -> Any:
        """A DataFrame with one row per record (default: frames only); columns are the record keys."""
        import pandas as pd  # optional: only notebooks need it

        return pd.DataFrame.from_records(list(self.records(kinds, where, body)))

"""The pipeline: captures in, events out, decoded by the native core (``amqpscope._native``).

Everything per packet and per frame (capture reading, link/IP/TCP, reassembly, frames, methods,
properties, field tables, sessions) runs in Rust with the GIL released; Python drives it a batch at
a time. Events come out as :mod:`amqpscope.events` objects, made only when asked for, or as JSON
lines written by the core (``jsonl_batches``). The same core serves capture files, live capture
and Spark executors; memory stays bounded because every stage streams and idle flows are evicted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import IO, Any, Union

from . import _native
from .capture import native_source
from .dissect.codec import Codec, get_codec
from .events import Accounting, Event
from .packets import RawPacket

Source = Union[str, "Path", IO[bytes]]
ACCOUNTING_FIELDS = (
    "stream_bytes",
    "frame_bytes",
    "header_bytes",
    "gap_bytes",
    "skipped_bytes",
    "pending_bytes",
    "frames",
)


@dataclass(frozen=True, slots=True)
class Options:
    ports: frozenset[int] = frozenset({5672})
    show_credentials: bool = False
    keep_bodies: bool = True  # keep message bodies in memory for --body preview/full
    tls_keylog: str = field(default="", repr=False)  # NSS key log text (--tls-keylog); never shown
    validate: bool = False  # inline findings from the core's validator after the events they concern
    ledger: bool = False  # also emit the core's ledger events (stats, report, Parquet read them)
    # live runs: key log files read as they grow (sniff --tls-keylog), instead of tls_keylog's text
    tls_follow: tuple[str, ...] = ()


def read_keylogs(keylog: str | Path | Iterable[str | Path] | None) -> str:
    """The text of one or several NSS key log files (``--tls-keylog``, ``SSLKEYLOGFILE``)."""
    if keylog is None:
        return ""
    paths = [keylog] if isinstance(keylog, (str, Path)) else list(keylog)
    return "".join(Path(p).read_text(errors="replace") + "\n" for p in paths)


@dataclass(slots=True)
class StreamAccounting:
    """Where the bytes of the AMQP streams went: frame + header + skipped + pending == stream."""

    stream_bytes: int = 0
    frame_bytes: int = 0
    header_bytes: int = 0
    gap_bytes: int = 0
    skipped_bytes: int = 0
    pending_bytes: int = 0
    frames: int = 0
    tls_bytes: int = 0  # TLS record bytes (AMQPS); the fields above count their plaintext
    tls_opaque_bytes: int = 0  # TLS record bytes never decrypted

    def balanced(self) -> bool:
        accounted = self.frame_bytes + self.header_bytes + self.skipped_bytes + self.pending_bytes
        return accounted == self.stream_bytes


@dataclass(slots=True)
class RunStats:
    """What a run saw, for summaries and the byte accounting."""

    packets: int = 0
    tcp_packets: int = 0
    events: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    accounting: StreamAccounting = field(default_factory=StreamAccounting)

    def update(self, native: dict[str, Any]) -> None:
        """Take the core's counters (``Decoder.stats()`` / ``Engine.stats()``)."""
        self.packets, self.tcp_packets = native["packets"], native["tcp_packets"]
        self.skipped = dict(native["skipped"])
        self.accounting = StreamAccounting(**native["accounting"])

    def accounting_event(self, ts: float = 0.0) -> Accounting:
        a = self.accounting
        return Accounting(
            packet=self.packets,
            ts=ts,
            conn=-1,
            stream_bytes=a.stream_bytes,
            frame_bytes=a.frame_bytes,
            header_bytes=a.header_bytes,
            gap_bytes=a.gap_bytes,
            skipped_bytes=a.skipped_bytes,
            pending_bytes=a.pending_bytes,
            frames=a.frames,
            packets=self.packets,
            tcp_packets=self.tcp_packets,
            tls_bytes=a.tls_bytes,
            tls_opaque_bytes=a.tls_opaque_bytes,
        )


def _ports(options: Options) -> list[int]:
    return sorted(options.ports)


def _validation(codec: Codec, options: Options) -> str | None:
    return codec.validation if options.validate else None


def open_decoder(
    source: Source,
    codec: Codec | None = None,
    options: Options | None = None,
    max_packets: int | None = None,
    select: Callable[..., bool] | None = None,
) -> Any:
    """A native ``Decoder`` of a capture: a path ("-" for stdin) or a binary file object. Capture
    errors (``amqpscope.capture.CaptureError``) are raised here or by its batches."""
    codec, options = codec or get_codec(), options or Options()
    return _native.Decoder(
        native_source(source),
        codec.tables,
        _ports(options),
        options.show_credentials,
        options.keep_bodies,
        max_packets,
        select,
        options.tls_keylog or None,
        _validation(codec, options),
        options.ledger,
    )


def _drain(
    next_batch: Callable[[], Any], stats: RunStats | None, stats_of: Callable[[], dict[str, Any]]
) -> Iterator[Any]:
    """Batches until the core says None; the stats are taken at the end, also after an error."""
    try:
        while (batch := next_batch()) is not None:
            yield batch
    finally:
        if stats is not None:
            stats.update(stats_of())


def decode_batches(
    source: Source,
    codec: Codec | None = None,
    options: Options | None = None,
    stats: RunStats | None = None,
    max_packets: int | None = None,
    select: Callable[..., bool] | None = None,
    kinds: Iterable[str] | None = None,
) -> Iterator[list[Event]]:
    """The events of a capture in lists (one per trip into the core). With ``kinds``, only events
    of those kinds are made into objects (``validate`` needs only the findings).

    ``select(client, server)`` (endpoints as ``(address, port)``), if given, is asked once per TCP
    flow and only the flows it accepts are decoded: Spark slices share a capture's connections
    this way, every flow still reassembled so that ``conn`` numbers stay those of a whole run.
    A truncated file raises after the events decoded before it."""
    dec = open_decoder(source, codec, options, max_packets, select)
    wanted = frozenset(kinds) if kinds is not None else None
    return _drain(lambda: dec.events(wanted), stats, dec.stats)


def jsonl_batches(
    source: Source,
    codec: Codec | None = None,
    options: Options | None = None,
    stats: RunStats | None = None,
    body: str = "none",
    max_packets: int | None = None,
) -> Iterator[bytes]:
    """The JSON lines of a capture's events, written by the core: no Python object per event."""
    dec = open_decoder(source, codec, options, max_packets)
    return _drain(lambda: dec.jsonl(body), stats, dec.stats)


def decode_source(
    source: Source,
    codec: Codec | None = None,
    options: Options | None = None,
    stats: RunStats | None = None,
) -> Iterator[Event]:
    """Every event of a capture, in order."""
    return chain.from_iterable(decode_batches(source, codec, options, stats))


def decode_packets(
    packets: Iterable[RawPacket],
    codec: Codec | None = None,
    options: Options | None = None,
    stats: RunStats | None = None,
    idle_timeout_ns: int | None = None,
) -> Iterator[Event]:
    """Every event of packets Python already holds (live capture, synthetic captures), in order.

    ``idle_timeout_ns`` evicts flows without packets for that long (capture time); live capture sets
    it so that memory stays bounded over hours, files leave it off (their flows end at end of file).
    """
    codec, options = codec or get_codec(), options or Options()
    engine = _native.Engine(
        codec.tables,
        _ports(options),
        options.show_credentials,
        options.keep_bodies,
        idle_timeout_ns,
        options.tls_keylog or None,
        _validation(codec, options),
        options.ledger,
        list(options.tls_follow),
    )
    return chain.from_iterable(_engine_batches(engine, iter(packets), stats))


def live_batches(decoder: Any, stats: RunStats | None = None) -> Iterator[list[Event]]:
    """The events of a ``_native.LiveDecoder`` (a capture helper's pipe) in lists as they become
    decodable (an empty list when a read brought nothing new)."""
    return _drain(decoder.events, stats, decoder.stats)


def _engine_batches(engine: Any, packets: Iterator[RawPacket], stats: RunStats | None) -> Iterator[list[Event]]:
    # One packet per trip: a live capture's packets must come out as they arrive, not when a
    # batch is full. (Files take the Decoder, which reads in the core.)
    feed = engine.feed
    error: BaseException | None = None
    try:
        for packet in packets:
            events = feed((packet,))
            if events:
                yield events
    except (Exception, KeyboardInterrupt) as exc:
        error = exc  # a truncated file or Ctrl-C: first flush what is decoded, then raise
    tail = engine.finish()
    if stats is not None:
        stats.update(engine.stats())
    if tail:
        yield tail
    if error is not None:
        raise error


def read(
    path: str | Path,
    spec: str | Path | None = None,
    ports: Iterable[int] = (5672,),
    show_credentials: bool = False,
    tls_keylog: str | Path | Iterable[str | Path] | None = None,
) -> EventStream:
    """Decode a capture file into events: ``for ev in amqpscope.read("x.pcap"): …``

    ``tls_keylog``: NSS key log file(s) to decrypt AMQP over TLS with (a pcapng with a Decryption
    Secrets Block needs none)."""
    return EventStream(path, spec, frozenset(ports), show_credentials, read_keylogs(tls_keylog))


class EventStream:
    """The events of one capture, pleasant in a notebook. Iterating decodes the file again each time
    (nothing is held in memory), so it works for captures of any size.

    ``records()`` gives plain dicts (the JSONL records), optionally only some kinds and only those a
    display filter (the ``-Y`` syntax of ``amqpscope decode``) keeps; ``to_pandas()`` a DataFrame of them.
    """

    def __init__(
        self, path: str | Path, spec: str | Path | None, ports: frozenset[int], show: bool, keylog: str = ""
    ) -> None:
        self.path = path
        self.codec = get_codec(spec)
        self.options = Options(ports=ports, show_credentials=show, tls_keylog=keylog)

    def __iter__(self) -> Iterator[Event]:
        return decode_source(self.path, self.codec, self.options)

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

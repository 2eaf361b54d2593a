"""The event model: the one contract between decoding and every output.

Every event is a frozen, slotted dataclass with a ``kind`` and the base keys ``packet`` (the packet
number where it completed), ``ts`` (seconds since the epoch), ``conn`` (a stable connection id: the
TCP flow number in order of first appearance, like tshark's tcp.stream), ``dir`` (``c2s``/``s2c``)
and ``channel`` where it applies. Outputs never re-parse: JSONL, tables, Parquet and Spark rows
are all derived from these definitions (``to_record``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

C2S, S2C = "c2s", "s2c"
_HIDDEN = {"record": False}  # fields that stay in memory for renderers but are not output as is


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    kind: ClassVar[str] = "event"
    packet: int
    ts: float
    conn: int
    dir: str | None = None
    channel: int | None = None

    def to_record(self) -> dict[str, Any]:
        """A plain dict for JSON/CSV/Parquet: ``kind`` first, then the fields in order."""
        make = _RECORD_MAKERS.get(type(self))
        if make is None:
            make = _RECORD_MAKERS[type(self)] = _record_maker(type(self))
        return make(self)  # type: ignore[no-any-return]


def record_maker(cls: type) -> Any:
    """The compiled ``to_record`` of an event class (for loops that call it per event)."""
    make = _RECORD_MAKERS.get(cls)
    if make is None:
        make = _RECORD_MAKERS[cls] = _record_maker(cls)
    return make


_FIELDS_CACHE: dict[type, tuple[str, ...]] = {}
_RECORD_MAKERS: dict[type, Any] = {}


def _record_maker(cls: type) -> Any:
    names = _record_fields(cls)
    kind = cls.kind  # type: ignore[attr-defined]

    def make(e: Any) -> dict[str, Any]:
        rec = {"kind": kind}
        for name in names:
            rec[name] = getattr(e, name)
        return rec

    return make


def _record_fields(cls: type) -> tuple[str, ...]:
    names = _FIELDS_CACHE.get(cls)
    if names is None:
        names = tuple(f.name for f in dataclasses.fields(cls) if f.metadata.get("record", True))
        _FIELDS_CACHE[cls] = names
    return names


@dataclass(frozen=True, slots=True, kw_only=True)
class ProtocolHeader(Event):
    kind: ClassVar[str] = "protocol-header"
    version: str  # "0-9-1", "0-9", "0-8", "0-10", "1.0", … or "unknown (a.b.c.d)"
    raw: str  # the 8 octets, hex


@dataclass(frozen=True, slots=True, kw_only=True)
class Frame(Event):
    """One AMQP frame. Method frames carry the decoded method; headers the content properties."""

    kind: ClassVar[str] = "frame"
    type: str  # method | header | body | heartbeat | oob-method | oob-header | oob-body | trace | unknown-N
    size: int  # payload size as declared in the frame header
    class_id: int | None = None
    method_id: int | None = None
    method: str | None = None  # "basic.publish"; "40.51" style ids when the spec does not know them
    args: dict[str, Any] | None = None
    body_size: int | None = None
    properties: dict[str, Any] | None = None
    resync: bool = False  # decoded after the stream was resynchronised (mid-stream start, gap, garbage)
    problem: str | None = None  # a decode problem; the frame is still reported
    payload: bytes | None = field(default=None, metadata=_HIDDEN, repr=False)  # body frames only
    # AMQPS: the TLS record the frame completed in, (version, suite, record's position among the
    # records of its direction from 0, as Wireshark lists them); for renderers (decode -V)
    tls: tuple[str, str, int] | None = field(default=None, metadata=_HIDDEN, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class Message(Event):
    """A whole message: the content method, its header and all body frames, assembled per channel."""

    kind: ClassVar[str] = "message"
    method: str  # basic.publish | basic.deliver | basic.get-ok | basic.return
    args: dict[str, Any]
    properties: dict[str, Any]
    body_size: int
    body_received: int  # bytes seen; less than body_size when the content was cut short
    complete: bool
    first_packet: int
    frames: int
    body_sha256: str | None = None
    body: bytes | None = field(default=None, metadata=_HIDDEN, repr=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class Gap(Event):
    """Bytes of one direction missing from the capture; nothing in them is guessed."""

    kind: ClassVar[str] = "gap"
    size: int
    lost_frame: str | None = None  # the frame the gap cut into, when its header was seen


@dataclass(frozen=True, slots=True, kw_only=True)
class Resync(Event):
    """The frame stream was (re)found after unknown position: stream start mid-way, gap or garbage."""

    kind: ClassVar[str] = "resync"
    skipped: int  # bytes passed over before the first confirmed frame
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Malformed(Event):
    """Bytes that could not be framed: the stream loses sync and is searched again."""

    kind: ClassVar[str] = "malformed"
    reason: str
    offset: int  # stream offset (bytes of this direction) where the problem was seen


@dataclass(frozen=True, slots=True, kw_only=True)
class Connection(Event):
    """A connection opening (first packet seen) or closing (with everything negotiated on it)."""

    kind: ClassVar[str] = "connection"
    state: str  # "open" | "close"
    client: str  # "address:port"
    server: str
    syn_seen: bool = False
    version: str | None = None
    ended: str | None = None  # close: "connection.close", "fin", "rst", "eof", "evicted"
    frame_max: int | None = None
    channel_max: int | None = None
    heartbeat: int | None = None
    mechanism: str | None = None
    user: str | None = None
    password: str | None = None  # only with show_credentials; otherwise None
    vhost: str | None = None
    client_product: str | None = None
    client_version: str | None = None
    client_platform: str | None = None
    server_product: str | None = None
    server_version: str | None = None
    close_code: int | None = None
    close_text: str | None = None
    close_by: str | None = None  # "client" | "server"
    frames_c2s: int = 0
    frames_s2c: int = 0
    bytes_c2s: int = 0
    bytes_s2c: int = 0
    client_properties: dict[str, Any] | None = None
    server_properties: dict[str, Any] | None = None
    tls_version: str | None = None  # TLS connections: "TLSv1.3", "TLSv1.2", …
    tls_suite: str | None = None  # the IANA name, e.g. "TLS_AES_128_GCM_SHA256"
    tls_resumed: bool | None = None  # a resumed TLS session (session id, ticket or PSK)
    fin_by: str | None = None  # close: "client" | "server", who sent the first TCP FIN
    fin_packet: int | None = None  # close: the packet of that FIN
    rst_by: str | None = None  # close: "client" | "server", who sent the first TCP RST
    rst_packet: int | None = None  # close: the packet of that RST
    # close: None when the connection spoke AMQP 0-9-1 (or 0-9), else what the client began with:
    # "amqp-1.0", "amqp-0-10", "amqp-other", "tls" (not decrypted), "http", "other", "nothing"
    opening: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Tls(Event):
    """A TLS connection (AMQPS), reported once when it closes: what its handshake showed, what was
    decrypted and, when records were not, why (``no key for this connection``, …). Never a secret."""

    kind: ClassVar[str] = "tls"
    client: str
    server: str
    version: str | None = None
    suite: str | None = None
    sni: str | None = None
    alpn: str | None = None  # the protocols the client offered, or the one the server chose
    resumed: bool = False
    decrypted: bool = False
    reason: str | None = None  # why records were not decrypted; None when all were
    records: int = 0
    records_decrypted: int = 0
    records_failed: int = 0  # failed authentication (a wrong key, a corrupt capture)
    records_lost: int = 0  # taken by TCP gaps (known from the sequence numbers skipped)
    bytes_c2s: int = 0  # TLS bytes each way
    bytes_s2c: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding(Event):
    """A check that failed: a broken rule of the spec, a frame rule, a deviation or a warning."""

    kind: ClassVar[str] = "finding"
    rule: str  # stable id, e.g. "basic.ack.multiple.exists" or "frame.end"
    severity: str  # violation | deviation | warning | info
    code: int | None  # the reply code a conforming peer would answer with
    rabbitmq_code: int | None = None  # RabbitMQ's actual answer, where it differs from the spec's rule
    message: str
    packets: tuple[int, ...] = ()  # every packet that proves it
    peer_reaction: str | None = None  # what the capture shows the peer did, and whether it matched


@dataclass(frozen=True, slots=True, kw_only=True)
class Ledger(Event):
    """What the core's protocol bookkeeping concluded at ``packet`` (``entry`` says about what):
    a delivery and its settling, a bad ack, a confirm, a request/response pair, a heartbeat miss…
    The fields each entry sets are listed in docs/analytics.md; durations are seconds."""

    kind: ClassVar[str] = "ledger"
    entry: str  # deliver | settle | bad-ack | release | rollback | qos | consumer | at-limit | confirm |
    # bad-confirm | unconfirmed | return | pair | heartbeat-miss | heartbeat
    method: str | None = None  # the method at ``packet`` (basic.ack, basic.deliver, a pair's reply…)
    request: str | None = None  # pair: the request
    tag: int | None = None  # delivery tag, or publish sequence number
    count: int = 1  # deliveries, publishes or requests covered (consumer: delivered; heartbeat: frames)
    multiple: bool = False
    requeue: bool = False
    redelivered: bool = False
    returned: bool = False  # a confirmed/unconfirmed publish that came back with basic.return
    outcome: str | None = None
    latency: float | None = None  # request, delivery or publish → its answer
    duration: float | None = None  # at the prefetch limit, silent (heartbeat), held until released
    idle: float | None = None  # heartbeat: silence from the direction's last frame to the TCP end
    in_flight: int | None = None  # unacked consumer deliveries on the channel after the entry
    limit: int | None = None  # prefetch count, or the negotiated heartbeat interval
    consumer_tag: str | None = None
    exchange: str | None = None
    routing_key: str | None = None
    ref_packet: int | None = None  # the other proving packet: the delivery, publish or request
    ref_channel: int | None = None  # bad-ack "wrong channel": where the tag is outstanding


@dataclass(frozen=True, slots=True, kw_only=True)
class Accounting(Event):
    """Where every byte of every AMQP stream went (``decode --stats``): nothing is lost silently."""

    kind: ClassVar[str] = "accounting"
    stream_bytes: int
    frame_bytes: int
    header_bytes: int  # protocol headers
    gap_bytes: int
    skipped_bytes: int  # garbage, partial frames around gaps, bytes before a resync
    pending_bytes: int  # an incomplete frame left at the end of the capture
    frames: int
    packets: int
    tcp_packets: int
    tls_bytes: int = 0  # TLS record bytes of every TLS connection
    tls_opaque_bytes: int = 0  # of which never decrypted (no key, unsupported suite, failed)


EVENT_TYPES: tuple[type[Event], ...] = (
    ProtocolHeader, Frame, Message, Gap, Resync, Malformed, Connection, Finding, Accounting, Tls, Ledger,
)  # fmt: skip

"""What the validator remembers per connection and per channel (all O(1) to update)."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from amqpscope.events import Finding

from .grammar import Automaton, Run


@dataclass(slots=True)
class Pending:
    """An outstanding synchronous request."""

    method: str
    replies: frozenset[str]
    packet: int
    optional: bool = False  # the reply may never come (server-sent basic.cancel)
    args: dict[str, Any] | None = None


@dataclass(slots=True)
class ChanState:
    run: Run | None
    sure: bool = True  # False: opened before the capture started or before a gap; state unknown
    open: bool = False  # channel.open seen and no close completed since
    closing: str | None = None  # direction of the peer that sent channel.close
    close_packet: int = 0
    crossing: int = 0  # close-oks still to ignore after crossing closes
    pending: dict[str, deque[Pending]] = field(default_factory=lambda: {"c2s": deque(), "s2c": deque()})
    tx: bool = False
    tx_settled: set[int] = field(default_factory=set)  # tags settled in the open transaction
    confirm: bool = False
    published: int = 0  # publishes since confirm.select (the server's ack tags count these)
    unconfirmed: set[int] = field(default_factory=set)
    confirmed_below: int = 1  # every publish tag below this is confirmed (none is in unconfirmed)
    unacked: set[int] = field(default_factory=set)  # delivery tags the client still has to settle
    max_tag: int = 0
    consumers: dict[str, bool] = field(default_factory=dict)  # active consumer tag -> no-ack
    consumes: deque[tuple[str, bool]] = field(default_factory=deque)  # consume awaiting consume-ok
    gets: deque[bool] = field(default_factory=deque)  # no-ack of each basic.get awaiting its reply
    queue_known: bool = False  # a queue was declared on this channel (empty names refer to it)
    qos: deque[tuple[int, bool]] = field(default_factory=deque)  # basic.qos awaiting qos-ok: (count, global)
    prefetch: int = 0  # prefetch-count for consumers created from now on (global=0)
    limits: dict[str, int] = field(default_factory=dict)  # consumer tag -> its prefetch-count
    owner: dict[int, str] = field(default_factory=dict)  # unacked tag -> consumer tag (limited consumers)
    outstanding: dict[str, int] = field(default_factory=dict)  # consumer tag -> unacked deliveries
    flow: dict[str, bool] = field(default_factory=dict)  # direction -> active of its channel.flow awaiting flow-ok
    suspects: list[tuple[str, int, str]] = field(default_factory=list)  # (rule, packet, text) the reply decides


@dataclass(slots=True)
class Held:
    """A finding waiting for the peer's reaction (a close with a reply code)."""

    finding: Finding
    peer: str  # direction the reaction would come from
    budget: int  # peer frames still to look at
    reacts: bool = True  # a conforming peer answers it with a close and a code: say whether it did


@dataclass(slots=True)
class ConnState:
    conn_auto: Automaton | None
    chan_auto: Automaton | None
    run: Run | None = field(init=False)
    trusted: bool = True  # False after a gap/resync or a mid-stream start: state checks stop
    lost: set[str] = field(default_factory=set)  # directions not yet (re)synchronised
    high: int = 0  # highest packet number of a frame seen so far
    in_order: bool = True  # the current frame is not older than one already seen (no resync backlog)
    last_data: dict[str, int] = field(default_factory=dict)  # direction -> packet of its last frame
    started: bool = False  # the client's protocol header (or a frame) was seen
    header: str | None = None  # the version the client's protocol header asked for
    rejected: int = 0  # packet of the server's protocol header answering the client's (0: none)
    after_refusal: set[str] = field(default_factory=set)  # directions reported sending frames after it
    opened: bool = False  # connection.open-ok seen
    tuned: bool = False
    frame_max: int = 0
    channel_max: int = 0
    ctx: dict[str, Any] = field(default_factory=dict)  # values asserts compare against ("tune.channel-max")
    capabilities: set[str] | None = None  # client capabilities announced in start-ok
    heartbeat: int = 0  # negotiated heartbeat interval (s), from tune-ok
    last_ts: dict[str, float] = field(default_factory=dict)  # direction -> time of its last frame
    mechanisms: list[str] | None = None
    locales: list[str] | None = None
    closing: str | None = None  # direction of the connection.close sender
    close_packet: int = 0
    closed: bool = False
    chans: dict[int, ChanState] = field(default_factory=dict)
    content: dict[tuple[str, int], list[int]] = field(default_factory=dict)  # (dir, ch) -> [class, remaining]
    content_unsure: bool = False  # a gap lost content state: stray header/body frames are not flagged
    content_fresh: set[tuple[str, int]] = field(default_factory=set)  # (dir, ch) with a method since the gap
    held: list[Held] = field(default_factory=list)
    flagged: set[int] = field(default_factory=set)  # packets a violation was reported for

    def __post_init__(self) -> None:
        self.run = Run(self.conn_auto) if self.conn_auto is not None else None

    def chan(self, number: int) -> ChanState:
        ch = self.chans.get(number)
        if ch is None:
            run = Run(self.chan_auto) if self.chan_auto is not None else None
            ch = self.chans[number] = ChanState(run)
            if not self.trusted:
                ch.sure, ch.open = False, True  # opened where the capture cannot show it
        return ch

    def lose_track(self) -> None:
        """A gap, resync or malformed stretch: whatever was in it is unknown from here on."""
        self.trusted = False
        for ch in self.chans.values():
            ch.sure = False
            for fifo in ch.pending.values():
                fifo.clear()
        self.content.clear()
        self.content_unsure = True
        self.content_fresh.clear()


STANDARD_TYPES = {"amq.direct": "direct", "amq.fanout": "fanout", "amq.topic": "topic", "amq.headers": "headers",
                  "amq.match": "headers"}  # fmt: skip


@dataclass(slots=True)
class World:
    """What one connection can learn about the broker from the others in the same capture."""

    exchanges: set[str] = field(default_factory=set)  # declared somewhere in the capture
    types: dict[str, str] = field(default_factory=lambda: dict(STANDARD_TYPES))  # exchange -> type, when known
    exclusive: dict[str, int] = field(default_factory=dict)  # exclusive queue name -> owning connection
    declares: dict[tuple[int, int], deque[bool]] = field(default_factory=dict)  # (conn, ch) -> exclusive flags

    def forget(self, conn: int) -> None:
        """A connection ended: its exclusive queues are gone with it."""
        for name in [q for q, owner in self.exclusive.items() if owner == conn]:
            del self.exclusive[name]
        for key in [k for k in self.declares if k[0] == conn]:
            del self.declares[key]

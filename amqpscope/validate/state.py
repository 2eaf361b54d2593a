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


@dataclass(slots=True)
class ChanState:
    run: Run
    open: bool = False  # channel.open seen and no close completed since
    closing: str | None = None  # direction of the peer that sent channel.close
    crossing: int = 0  # close-oks still to ignore after crossing closes
    pending: dict[str, deque[Pending]] = field(default_factory=lambda: {"c2s": deque(), "s2c": deque()})
    tx: bool = False
    confirm: bool = False
    published: int = 0  # publishes since confirm.select (the server's ack tags count these)
    unconfirmed: set[int] = field(default_factory=set)
    unacked: set[int] = field(default_factory=set)  # delivery tags the client still has to settle
    max_tag: int = 0
    consumers: dict[str, bool] = field(default_factory=dict)  # active consumer tag -> no-ack
    consumes: deque[tuple[str, bool]] = field(default_factory=deque)  # consume awaiting consume-ok
    gets: deque[bool] = field(default_factory=deque)  # no-ack of each basic.get awaiting its reply
    queue_known: bool = False  # a queue was declared on this channel (empty names refer to it)


@dataclass(slots=True)
class Held:
    """A finding waiting for the peer's reaction (a close with a reply code)."""

    finding: Finding
    peer: str  # direction the reaction would come from
    budget: int  # peer frames still to look at


@dataclass(slots=True)
class ConnState:
    conn_auto: Automaton
    chan_auto: Automaton
    run: Run = field(init=False)
    trusted: bool = True  # False after a gap/resync or a mid-stream start: state checks stop
    started: bool = False  # the client's protocol header (or a frame) was seen
    tuned: bool = False
    frame_max: int = 0
    channel_max: int = 0
    ctx: dict[str, Any] = field(default_factory=dict)  # values asserts compare against ("tune.channel-max")
    mechanisms: list[str] | None = None
    locales: list[str] | None = None
    closing: str | None = None  # direction of the connection.close sender
    closed: bool = False
    rejected_header: bool = False
    chans: dict[int, ChanState] = field(default_factory=dict)
    content: dict[tuple[str, int], list[int]] = field(default_factory=dict)  # (dir, ch) -> [class, remaining]
    held: list[Held] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.run = Run(self.conn_auto)

    def chan(self, number: int) -> ChanState:
        ch = self.chans.get(number)
        if ch is None:
            ch = self.chans[number] = ChanState(Run(self.chan_auto))
        return ch

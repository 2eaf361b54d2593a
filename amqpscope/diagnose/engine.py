"""The diagnoser: one streaming pass that turns events into causes and quirks.

A connection is diagnosed at its ``connection`` close event (the core puts the ledger records a
close causes just before it, and the validator the findings a close answers), so live capture shows
a cause as soon as its connection is over; a violation the validator only releases after that
event is diagnosed on its own. ``finish`` diagnoses the connections still open when the capture ends.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from ..events import C2S, S2C, Connection, Event, Finding, Tls
from ..validate.findings import Tolerated, tolerance, tolerated
from . import causality, closes, endings, flow, handshake, ledger, network
from .blind import Blindness, BlindSpots
from .facts import Collector, ConnFacts
from .model import CONNECTION, Diagnosis, Quirk, Thresholds, ranked

# findings about a close left without close-ok: whose doing it was is read from TCP (endings)
_CLOSE_OK_MISSING = ("connection.close-ok.missing", "channel.close-ok.missing")

MAX_QUIRK_PACKETS = 20


class Diagnoser:
    # the kinds of events feed looks at: a caller that makes Python events only for the diagnoser
    # (the Parquet diagnoses table, validate's quirk marks) asks the core for these alone
    READS = frozenset({"frame", "message", "connection", "finding", "ledger", "protocol-header", "tls"})

    def __init__(self, thresholds: Thresholds | None = None) -> None:
        self.thresholds = thresholds or Thresholds()
        self.col = Collector(self.thresholds.stall_s)
        self.diagnoses: list[Diagnosis] = []
        self.quirks: dict[tuple[str, str, str | None], Quirk] = {}
        self.file: str | None = None
        self.offset = 0  # added to connection ids (stats numbers several files' connections on)
        self.file_offsets = [0]  # each file's offset, in file order
        self._done: set[int] = set()
        self._await_tls: set[int] = set()
        self.blind = BlindSpots()  # what the capture did not show (blind.py)

    def feed(self, ev: Event) -> list[Diagnosis]:
        """Take one event; returns the diagnoses it completed (for live output)."""
        if self.blind.feed(ev):
            return []  # not a fault of the traffic: shown apart, before the causes, never a cause
        t = type(ev)
        if t is Finding:
            if ev.conn in self._done:
                return self._late(ev)  # type: ignore[arg-type]
            if self._quirk(ev):  # type: ignore[arg-type]
                return []  # a deviation the broker accepts is never a cause
        self.col.feed(ev)
        if t is Connection and ev.state == "close":  # type: ignore[attr-defined]
            if getattr(ev, "opening", None) == "tls":
                self._await_tls.add(ev.conn)  # its tls event, right after, says how the server answered
                return []
            return self._diagnose(ev.conn)
        if t is Tls and ev.conn in self._await_tls:
            self._await_tls.discard(ev.conn)
            return self._diagnose(ev.conn)
        return []

    def _late(self, f: Finding) -> list[Diagnosis]:
        """A finding about a connection already diagnosed (released when it ended)."""
        if self._quirk(f):
            return []
        facts = self.col.conns.get(f.conn)
        if f.severity != "violation" or facts is None or handshake.opening(facts) is not None:
            return []
        facts.violations.append(f)
        found = network.protocol_errors(ConnFacts(facts.who, facts.start_ts, facts.start_packet, violations=[f]),
                                        set())  # fmt: skip
        return self._keep(found)

    def finish(self) -> list[Diagnosis]:
        new: list[Diagnosis] = []
        for conn in list(self.col.conns):
            new += self._diagnose(conn)
        # a redelivery elsewhere can come after the releasing connection ended: judged at the end
        for r, d in ledger.requeued(self.col):
            del self.col.released[(r.conn, r.channel, r.close_packet)]
            new += self._keep([d])
        return new

    def next_file(self, name: str | None, offset: int = 0) -> list[Diagnosis]:
        """Diagnose what is left of the previous file and start a new one (connection ids restart;
        ``offset`` is added to the new file's ids in what is reported)."""
        new = self.finish()
        self.col = Collector(self.thresholds.stall_s)
        self._done = set()
        self._await_tls = set()
        self.file = name
        self.offset = offset
        self.blind.next_file(name, offset)
        self.file_offsets.append(offset)
        return new

    def result(self) -> list[Diagnosis]:
        return ranked(self.diagnoses)

    def not_seen(self) -> list[Blindness]:
        """What the capture did not show (gaps, undecrypted TLS, truncation…), the worst first."""
        return self.blind.result()

    def quirk_list(self) -> list[Quirk]:
        return sorted(self.quirks.values(), key=lambda q: (q.library, -q.count, q.quirk))

    def _quirk(self, f: Finding) -> bool:
        """Count ``f`` as a quirk when the broker accepts it; True when it is one."""
        facts = self.col.facts(f)
        t, side = self._tolerance(f, facts)
        if t is None:
            return False
        library = (facts.server or "the broker") if side == S2C else facts.who.library()
        key = (t.id, library, self.file)
        q = self.quirks.get(key)
        if q is None:
            q = self.quirks[key] = Quirk(quirk=t.id, rule=f.rule, library=library, summary=t.summary,
                                         source=t.source, file=self.file)  # fmt: skip
        q.count += 1
        q.connections.add(f.conn + self.offset)
        if len(q.packets) < MAX_QUIRK_PACKETS:
            q.packets.append(f.packet)
        return True

    @staticmethod
    def _tolerance(f: Finding, facts: ConnFacts) -> tuple[Tolerated | None, str | None]:
        """The tolerance entry of ``f`` and the side whose habit it is (c2s: the client's library),
        judged with the frames and TCP where the finding alone cannot tell."""
        answered = causality.answering(facts, f) is not None if f.severity == "violation" else None
        t = tolerated(f, answered)
        if t is None:
            return None, None
        if f.rule in _CLOSE_OK_MISSING and f.dir is not None:
            closer = C2S if f.dir == S2C else S2C
            if endings.close_ok_dropper(facts, closer):
                # the side that sent the close dropped TCP before close-ok could come: its doing
                return tolerance("close-then-drop"), closer
        if f.rule == "connection.close.missing" and facts.tcp.known:
            first = facts.tcp.first()
            if first is not None and first[0] == S2C:
                return None, None  # the broker ended TCP: not the client's habit (endings judges it)
        return t, f.dir if f.dir is not None else C2S

    def _diagnose(self, conn: int) -> list[Diagnosis]:
        if conn in self._done:
            return []
        self._done.add(conn)
        facts = self.col.conns[conn]
        return self._keep(diagnose_connection(facts, self.col, self.thresholds))

    def _keep(self, found: list[Diagnosis]) -> list[Diagnosis]:
        if self.file is not None or self.offset:
            found = [replace(d, file=self.file, conn=d.conn + self.offset) for d in found]
        self.diagnoses += found
        return found


def diagnose_connection(facts: ConnFacts, col: Collector, th: Thresholds) -> list[Diagnosis]:
    """Every cause of one finished connection (a pure function of its facts)."""
    if handshake.opening(facts) is not None:
        return handshake.handshake(facts)  # not AMQP 0-9-1: its bytes break no AMQP rule
    causality.link(facts)
    found = closes.causes(facts, col)
    used = {id(f) for c in facts.closes for f in c.explained_by}
    found += flow.blocked(facts, th) + flow.cancelled(facts, col) + flow.returned(facts)
    found += ledger.stalled(facts, col, th) + ledger.poison(facts, th)
    # the end is already told: by a connection cause, or by a broker's channel.close the client
    # never answered and dropped TCP instead (rabbitmq-c after a 403); an error answered long before
    # does not explain a later drop
    explained = any(d.impact <= CONNECTION for d in found) or any(
        c.by == S2C and c.channel and c.code not in (0, 200) and c.ok_packet is None for c in facts.closes)
    found += endings.ended(facts, th, explained) + handshake.handshake(facts)
    found += network.protocol_errors(facts, used)
    return found


def diagnose(events: Iterable[Event], thresholds: Thresholds | None = None) -> tuple[list[Diagnosis], list[Quirk]]:
    """Diagnose one capture's events: ranked causes and the quirks."""
    d = Diagnoser(thresholds)
    for ev in events:
        d.feed(ev)
    d.finish()
    return d.result(), d.quirk_list()

"""The validator: one pipeline stage that checks every connection against the spec.

``Validator(spec).stage`` takes the decoder's events and yields them unchanged, each followed by
the `Finding`s it proves. Per connection it runs the connection grammar on channel 0 and, per
channel, the channel grammar with the functional classes nested (both compiled from the spec
file), the chassis (who may send what), request/response pairing, the frame rules, the field
asserts and the semantic rules a passive observer can decide.

What the capture cannot show is never guessed: a connection whose start was not captured, or
whose stream had a gap, resync or malformed stretch, keeps only the checks that need no history
(frame rules, chassis, asserts) until a channel is seen opening again.

A finding with a reply code is held back for a few of the peer's frames to see how the peer
reacted: a channel.close or connection.close with that code ("matches") or another code, or no
close at all (the peer accepted it). It is emitted after the reaction, or when the wait ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from amqpscope.dissect.spec import Spec
from amqpscope.events import (
    C2S,
    S2C,
    Connection,
    Event,
    Finding,
    Frame,
    Gap,
    Malformed,
    Message,
    ProtocolHeader,
    Resync,
)

from . import rules
from .asserts import CompiledAssert, compile_asserts
from .findings import DEVIATION, INFO, VIOLATION, WARNING, Catalogue
from .frames import check_content, check_frame, frame_types, malformed
from .grammar import GrammarError, Grammars, Terminal, compile_grammars
from .pairing import Pairing
from .state import ChanState, ConnState, Held, World

# Rules judged on one frame alone: what a gap before it cannot make wrong.
STATELESS = frozenset({"frame.end", "frame.malformed", "frame.type", "frame.heartbeat-channel",
                       "frame.heartbeat-size", "frame.connection-channel", "frame.channel-zero", "frame.max-size",
                       "frame.undecodable", "method.unknown", "method.direction", "delivery-tag.non-zero",
                       "rabbitmq.not-implemented", "field.reserved", "close.reply-code", "close.method-id",
                       "protocol.header-version", "protocol.header-reply", "heartbeat.silence",
                       "capability.not-announced"})  # fmt: skip


def stateless(rule: str) -> bool:
    """Judged on one frame alone (field asserts included)."""
    return rule in STATELESS or ".assert-" in rule or rule.endswith(".syntax")
HOLD_FRAMES = 32  # peer frames a finding waits for the peer's close before it is emitted without one
_PEER = {C2S: S2C, S2C: C2S}
_WHO = {C2S: "client", S2C: "server"}
_CLOSES = frozenset({"connection.close", "channel.close"})
_MISSING: Any = object()


class Validator:
    """Everything compiled from one spec; ``stage`` runs it over an event stream."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.cat = Catalogue(spec)
        self.grammars: Grammars | None
        try:
            self.grammars = compile_grammars(spec)
        except GrammarError:
            self.grammars = None  # a stripped spec file without grammars: the other checks still run
        self.asserts: dict[int, tuple[CompiledAssert, ...]] = compile_asserts(spec)
        self.pairing = Pairing(spec)
        self.types = frame_types(spec)
        self.min_size = spec.constant("frame-min-size", 4096) or 4096
        # reserved fields per method: (identifier, spec name)
        self.reserved = {m.full_name: tuple((f.ident, f.name) for f in m.fields if f.reserved)
                         for m in spec.methods() if any(f.reserved for f in m.fields)}  # fmt: skip
        self.synchronous = self.pairing.replies | frozenset(self.pairing.requests)
        self.refusals = rules.refusal_rules(spec)
        # name -> (carries content, has fields, directions allowed to send it)
        self.info = {m.full_name: (m.content, bool(m.fields), self.pairing.senders.get(m.full_name) or frozenset())
                     for m in spec.methods()}  # fmt: skip
        # the connection automaton's state after a close from either side: a close during the
        # handshake (RabbitMQ's 403/530) jumps there, so the close-ok that follows is in order
        self.close_state: dict[str, int] = {}
        if self.grammars is not None:
            for row in self.grammars.connection.main.delta:
                for (d, name), nxt in row.items():
                    if name == "connection.close":
                        self.close_state.setdefault(d, nxt)

    @property
    def stage(self) -> Stage:
        """The pipeline stage: every event, then the findings it proves (state per capture)."""
        return Stage(self)

    def checker(self) -> _Checker:
        """A fresh state for one capture: ``feed(event)`` gives the findings an event proves,
        ``finish()`` those of the capture's end. Only events of ``READS`` kinds matter to it."""
        return _Checker(self)

    def check(self, events: Iterator[Event]) -> Iterator[Finding]:
        """Only the findings of an event stream."""
        for ev in self.stage(events):
            if type(ev) is Finding:
                yield ev


class Stage:
    """``Validator.stage``: called on an event iterator it yields every event followed by its
    findings; ``batches`` does the same on lists of events (the pipeline's own form, see
    ``decode_packets``), one list out per list in."""

    def __init__(self, v: Validator) -> None:
        self.v = v

    def __call__(self, events: Iterator[Event]) -> Iterator[Event]:
        run = _Checker(self.v)
        feed = run.feed
        for ev in events:
            yield ev
            out = feed(ev)
            if out:
                yield from out
        yield from run.finish()

    def batches(self, batches: Iterator[list[Event]]) -> Iterator[list[Event]]:
        run = _Checker(self.v)
        feed = run.feed
        for evs in batches:
            res: list[Event] = []
            add = res.append
            for ev in evs:
                add(ev)
                out = feed(ev)
                if out:
                    res += out
            yield res
        yield run.finish()  # type: ignore[misc]


def validation_stage(spec: Spec) -> Any:
    """A stage function for ``decode_packets(..., stages=[...])``."""
    return Validator(spec).stage


# The kinds of events ``_Checker.feed`` looks at (messages are assembled from frames it already
# checked; accounting is not traffic): a caller that makes Python events only for the validator
# (the Parquet tables, whose other rows the core builds) makes only these.
READS = frozenset({"frame", "protocol-header", "connection", "malformed", "gap", "resync"})


class _Checker:
    """The state of one capture: connections by id."""

    def __init__(self, v: Validator) -> None:
        self.v = v
        self.cat = v.cat
        self.conns: dict[int, ConnState] = {}
        self.world = World()
        self.memo: dict[tuple[int, Any], Any] = {}

    # --- dispatch ---------------------------------------------------------------------------------

    def feed(self, ev: Event) -> list[Finding]:
        t = type(ev)
        if t is Message:
            return []  # assembled from frames already checked
        if t is Frame:
            cs = self.conns.get(ev.conn) or self._conn(ev.conn)
            p = ev.packet
            # a direction that resynchronises delivers its backlog late: older packets than the other
            # direction's frames already seen, so their order across directions is unknown
            cs.in_order = p >= cs.high
            if p > cs.high:
                cs.high = p
            d = ev.dir or C2S
            cs.last_data[d] = p
            if cs.heartbeat:
                silence = self._silence(cs, ev, d)  # type: ignore[arg-type]
                if silence is not None:
                    return [silence, *self._frame(cs, ev)]  # type: ignore[arg-type]
            if ev.type == "body" and cs.tuned and not cs.rejected:  # type: ignore[attr-defined]
                # the commonest frame, here rather than in _frame (one call less): a body that fits
                # its message and the frame-max
                key = (ev.dir or "", ev.channel or 0)
                cur = cs.content.get(key)
                size = ev.size  # type: ignore[attr-defined]
                if (cur is not None and 0 <= size <= cur[1] and key[1] and (size + 8 <= cs.frame_max or not cs.frame_max)
                        and (key[1] <= cs.channel_max or not cs.channel_max) and not ev.problem):  # type: ignore[attr-defined]  # fmt: skip
                    cur[1] -= size
                    if not cur[1]:
                        del cs.content[key]
                    return self._react(cs, ev) if cs.held else []  # type: ignore[arg-type]
            return self._frame(cs, ev)  # type: ignore[arg-type]
        if t is ProtocolHeader:
            return self._header(self._conn(ev.conn), ev)  # type: ignore[arg-type]
        if t is Connection:
            return self._connection(ev)  # type: ignore[arg-type]
        if t is Malformed:
            cs = self._conn(ev.conn)
            cs.lose_track()
            cs.lost.add(ev.dir or C2S)  # until the stream's Resync
            return self._emit(cs, [malformed(self.cat, ev)])  # type: ignore[arg-type]
        if t is Gap or t is Resync:
            cs = self._conn(ev.conn)
            cs.lose_track()
            if t is Resync:
                cs.lost.discard(ev.dir or C2S)
            else:
                self._retract(cs, ev.dir or C2S)
        return []

    def finish(self) -> list[Finding]:
        out: list[Finding] = []
        for cs in self.conns.values():
            out += self._release_all(cs, "the capture ends")
        self.conns.clear()
        return out

    def _conn(self, cid: int) -> ConnState:
        cs = self.conns.get(cid)
        if cs is None:
            g = self.v.grammars
            cs = self.conns[cid] = ConnState(g.connection if g else None, g.channel if g else None)
        return cs

    def _connection(self, ev: Connection) -> list[Finding]:
        if ev.state == "open":
            cs = self._conn(ev.conn)
            if not ev.syn_seen:
                cs.trusted = False  # the capture starts mid-connection
                cs.lost = {C2S, S2C}  # each direction is found by a Resync
            return []
        self.world.forget(ev.conn)
        if ev.conn not in self.conns:
            return []
        cs = self.conns.pop(ev.conn)
        out: list[Finding] = []
        if cs.trusted and cs.closing is not None and not cs.closed:
            # The spec's grammar ends with C:CLOSE S:CLOSE-OK / S:CLOSE C:CLOSE-OK, but the only rule
            # about a missing Close-Ok is connection.close-ok "reporting": the other peer SHOULD log
            # it. pika drops the TCP connection after the server's close (s09) and RabbitMQ is fine
            # with that: a deviation, not a violation.
            peer = _WHO[_PEER[cs.closing]]
            out.append(Finding(packet=cs.close_packet, ts=ev.ts, conn=ev.conn, dir=_PEER[cs.closing], channel=0,
                               rule="connection.close-ok.missing", severity=DEVIATION, code=None,
                               message=f"the {peer} ended the connection (packet {ev.packet}) without answering "
                               "this connection.close with close-ok", packets=(cs.close_packet, ev.packet)))  # fmt: skip
        if cs.closing is None and cs.trusted:
            # the same for a channel.close left unanswered by a peer that drops the connection
            # (rabbitmq-c resets TCP after a channel.close 403, s11): a deviation
            for n, ch in sorted(cs.chans.items()):
                if ch.sure and ch.closing is not None and ch.close_packet:
                    peer = _PEER[ch.closing]
                    out.append(Finding(packet=ch.close_packet, ts=ev.ts, conn=ev.conn, dir=peer, channel=n,
                                       rule="channel.close-ok.missing", severity=DEVIATION, code=None,
                                       message=f"the {_WHO[peer]} ended the connection (packet {ev.packet}, "
                                       f"{ev.ended}) without answering this channel.close with close-ok",
                                       packets=(ch.close_packet, ev.packet)))  # fmt: skip
            if not out and cs.opened and ev.ended in ("fin", "rst"):
                # the grammar ends with close-connection; dropping TCP instead is common (RabbitMQ logs
                # "client unexpectedly closed TCP connection") and harmless to the peer: a warning
                out.append(Finding(packet=ev.packet, ts=ev.ts, conn=ev.conn, dir=None, channel=0,
                                   rule="connection.close.missing", severity=WARNING, code=None,
                                   message=f"the connection ended ({ev.ended}) without connection.close",
                                   packets=(ev.packet,)))  # fmt: skip
        return self._release_all(cs, "the connection ends") + out

    def _silence(self, cs: ConnState, ev: Frame, d: str) -> Finding | None:
        """Spec §4.2.7: a peer that receives nothing for two heartbeat intervals should close, so a
        peer with nothing to say sends heartbeats; silence that long means it did not."""
        last = cs.last_ts.get(d)
        cs.last_ts[d] = ev.ts
        if last is None or not cs.trusted or cs.closing is not None or ev.ts - last <= 2 * cs.heartbeat:
            return None
        return self.cat.finding(ev, "heartbeat.silence", WARNING,
                                f"the {_WHO[d]} sent nothing for {ev.ts - last:.1f} s; the negotiated heartbeat "
                                f"is {cs.heartbeat} s")  # fmt: skip

    # --- protocol header --------------------------------------------------------------------------

    def _header(self, cs: ConnState, ev: ProtocolHeader) -> list[Finding]:
        out: list[Finding] = []
        if ev.dir == C2S:
            cs.started = True
            cs.header = ev.version
            if ev.version != self.v.spec.version:
                sev = WARNING if ev.version.startswith("unknown") else INFO
                out.append(self.cat.finding(ev, "protocol.header-version", sev,
                                            f"the client asks for AMQP {ev.version}; validating against "
                                            f"{self.v.spec.version}"))  # fmt: skip
            self._step_conn(cs, ev, (C2S, "protocol-header"), out)
        else:
            # the server answers a protocol header it cannot serve with its own, then closes
            cs.rejected = ev.packet
            if ev.version.startswith("unknown"):
                out.append(self.cat.finding(ev, "protocol.header-reply", VIOLATION,
                                            f"the server answers with an invalid protocol header {ev.raw}"))
            else:
                out.append(self.cat.finding(ev, "protocol.header-reply", INFO,
                                            f"the server refuses AMQP {cs.header or '?'} and offers AMQP {ev.version}"))
        return out

    # --- frames -----------------------------------------------------------------------------------

    def _frame(self, cs: ConnState, ev: Frame) -> list[Finding]:
        if ev.type == "header" and cs.tuned and not cs.rejected:
            key = (ev.dir or "", ev.channel or 0)
            cur = cs.content.get(key)
            if (cur is not None and cur[1] < 0 and cur[0] == ev.class_id and key[1] and not ev.problem
                    and (ev.size + 8 <= cs.frame_max or not cs.frame_max)
                    and (key[1] <= cs.channel_max or not cs.channel_max)):  # fmt: skip
                if ev.body_size:
                    cur[1] = ev.body_size
                else:
                    del cs.content[key]
                return self._react(cs, ev) if cs.held else []
        elif ev.type == "body" and cs.tuned and not cs.rejected:
            # the fast path for the commonest frame: a body that fits its message and the frame-max
            key = (ev.dir or "", ev.channel or 0)
            cur = cs.content.get(key)
            size = ev.size
            if (cur is not None and 0 <= size <= cur[1] and key[1] and (size + 8 <= cs.frame_max or not cs.frame_max)
                    and (key[1] <= cs.channel_max or not cs.channel_max) and not ev.problem):  # fmt: skip
                cur[1] -= size
                if not cur[1]:
                    del cs.content[key]
                return self._react(cs, ev) if cs.held else []
        out: list[Finding] = []
        v = self.v
        if cs.trusted and not cs.started and cs.run is not None and ev.dir == C2S:
            # a connection whose SYN was captured but whose client sent no protocol header (F20)
            out.append(self.cat.finding(ev, "protocol.header-missing", VIOLATION,
                                        f"{ev.method or ev.type} frame before the client's protocol header"))
            cs.started = True
            cs.run.step((C2S, "protocol-header"))
        if cs.rejected:
            if ev.dir in cs.after_refusal:
                return []  # reported once per direction
            cs.after_refusal.add(ev.dir or C2S)
            who = "connection.start.protocol-name" if ev.dir == S2C else "connection.start.client-support"
            out.append(self.cat.finding(ev, who, VIOLATION,
                                        f"the {_WHO[ev.dir or C2S]} sends frames after the server refused the "
                                        f"protocol header (packet {cs.rejected})", packets=(cs.rejected, ev.packet)))
            return self._emit(cs, out, ev)
        check_frame(self.cat, v.types, v.min_size, cs, ev, out)
        t = ev.type
        if t == "method":
            placed = not out or all(f.rule not in ("frame.connection-channel", "frame.channel-zero") for f in out)
            self._method(cs, ev, out, placed)
        elif t == "header" or t == "body":
            if ev.problem:
                out.append(self.cat.finding(ev, "frame.undecodable", VIOLATION, f"content header: {ev.problem}"))
            if ev.channel:
                check_content(self.cat, cs, ev, False, out)
        return self._emit(cs, out, ev)

    def _method(self, cs: ConnState, ev: Frame, out: list[Finding], placed: bool) -> None:
        v = self.v
        name = ev.method or "?"
        d = ev.dir or C2S
        n = ev.channel or 0
        info = v.info.get(name)
        if info is None:
            out.append(self.cat.finding(ev, "method.unknown", VIOLATION,
                                        f"method {ev.class_id}/{ev.method_id} is not defined by the spec"))
            return
        args = ev.args or {}
        complete = bool(args) or not info[1]
        if ev.problem:
            out.append(self.cat.finding(ev, "frame.undecodable", VIOLATION, f"{name}: {ev.problem}"))
        if n:
            check_content(self.cat, cs, ev, info[0], out)
        if not placed:
            return
        if info[2] and d not in info[2]:
            out.append(self.cat.finding(ev, "method.direction", VIOLATION,
                                        f"{name} sent by the {_WHO[d]}; the spec's chassis lets only the "
                                        f"{_WHO[_PEER[d]]} send it"))  # fmt: skip
            return
        if complete:
            self._asserts(cs, ev, args, out)
            reserved = v.reserved.get(name)
            if reserved:
                self._reserved(ev, name, args, reserved, out)
        if n == 0:
            self._connection_method(cs, ev, name, args, complete, out)
        else:
            self._channel_method(cs, ev, name, args, complete, out)

    def _asserts(self, cs: ConnState, ev: Frame, args: dict[str, Any], out: list[Finding]) -> None:
        checks = self.v.asserts.get(((ev.class_id or 0) << 16) | (ev.method_id or 0))
        if not checks:
            return
        memo = self.memo
        for a in checks:
            value = args.get(a.field, _MISSING)
            if value is _MISSING:
                continue
            if a.pure and type(value) in (str, int):
                # the same exchange name on every publish and deliver: decide each value once
                key = (id(a), value)
                problem = memo.get(key, _MISSING)
                if problem is _MISSING:
                    if len(memo) > 4096:
                        memo.clear()
                    problem = memo[key] = a.check(value, cs.ctx)
            else:
                problem = a.check(value, cs.ctx)
            if problem is not None:
                out.append(self.cat.finding(ev, a.rule, a.severity, f"{ev.method} {a.label} {problem}", code=a.code))

    def _reserved(self, ev: Frame, name: str, args: dict[str, Any], fields: tuple[tuple[str, str], ...],
                  out: list[Finding]) -> None:  # fmt: skip
        for ident, fname in fields:
            value = args.get(ident)
            if value:
                # Only an XML comment says "must be zero" (connection.open reserved-2, once "insist");
                # receivers ignore these fields, and pika and rabbitmq-c send insist=1, pamqp a channel.open
                # reserved-1 of "0" (shared captures): a warning, not a deviation from a normative text.
                out.append(self.cat.finding(ev, "field.reserved", WARNING,
                                            f"{name} {fname} is {value!r}; reserved fields are zero or empty"))

    # --- channel 0 --------------------------------------------------------------------------------

    def _connection_method(self, cs: ConnState, ev: Frame, name: str, args: dict[str, Any], complete: bool,
                           out: list[Finding]) -> None:  # fmt: skip
        before = len(out)
        if not cs.trusted:
            if complete:
                rules.negotiation(self.cat, self.v.spec, cs, ev, name, args, out)
            if name == "connection.close":
                cs.closing, cs.close_packet = cs.closing or ev.dir, ev.packet
            return
        r = rules.connection_close(self.cat, cs, ev, name, out)
        if name == "connection.close" and cs.closing == ev.dir and not cs.close_packet:
            cs.close_packet = ev.packet
        if r:
            return
        if complete:
            rules.negotiation(self.cat, self.v.spec, cs, ev, name, args, out)
            rules.capability(self.cat, cs, ev, name, out)
            if name in _CLOSES:
                rules.close_codes(self.cat, self.v.spec, ev, name, args, out)
                if ev.dir == S2C:
                    rules.suspects_on_connection_close(self.cat, cs, ev, args, out)
        if name == "connection.open-ok":
            cs.opened = True
        if cs.run is None:
            return
        term = (ev.dir or C2S, name)
        if cs.run.step(term):
            return
        if name == "connection.close" and not cs.opened and ev.dir in self.v.close_state:
            # PDF §2.2.4: before open-ok a peer that finds an error closes the socket without sending
            # anything. RabbitMQ sends connection.close instead (403 for a failed login with the
            # authentication_failure_close capability, 530 for a refused vhost) and clients cope.
            cs.run.state, cs.run.flights = self.v.close_state[ev.dir or C2S], []
            out.append(self.cat.finding(ev, "connection.close.handshake", DEVIATION,
                                        f"connection.close {args.get('reply_code')} during the handshake; the spec "
                                        "says to close the socket without sending anything", code=None))
            return
        if len(out) == before:
            out.append(self.cat.finding(ev, "grammar.connection", VIOLATION,
                                        f"{_term(term)} where the connection grammar expects "
                                        f"{_expected(cs.run.expected())}"))

    def _step_conn(self, cs: ConnState, ev: Event, term: Terminal, out: list[Finding]) -> None:
        if cs.run is None or not cs.trusted:
            return
        if not cs.run.step(term):
            out.append(self.cat.finding(ev, "grammar.connection", VIOLATION,
                                        f"{_term(term)} where the connection grammar expects "
                                        f"{_expected(cs.run.expected())}"))

    # --- channels ≥ 1 -----------------------------------------------------------------------------

    def _channel_method(self, cs: ConnState, ev: Frame, name: str, args: dict[str, Any], complete: bool,
                        out: list[Finding]) -> None:  # fmt: skip
        v = self.v
        before = len(out)
        if cs.closing is not None and cs.trusted and rules.connection_close(self.cat, cs, ev, name, out):
            return  # in flight towards a closing peer, or a violation already reported
        if cs.trusted and not cs.opened:
            out.append(self.cat.finding(ev, "grammar.connection", VIOLATION,
                                        f"{name} on channel {ev.channel} before connection.open-ok"))
            return
        ch = cs.chan(ev.channel or 0)
        nowait = v.pairing.nowait(name, args)
        if not ch.sure:
            self._unsure_channel(cs, ch, ev, name)
            return
        if rules.channel_lifecycle(self.cat, ch, ev, name, out):
            if name == "channel.close-ok":
                ch.close_packet = 0
            return
        if name == "channel.close":
            ch.close_packet = ev.packet
            if complete:
                rules.close_codes(self.cat, v.spec, ev, name, args, out)
                if ev.dir == S2C:
                    rules.refused(cs, ch, v.refusals, ev, args, out)
        claimed = v.pairing.check(self.cat, ch, ev, name, out) if name in v.synchronous else False
        if ch.run is not None:
            term = (ev.dir or C2S, name)
            # a reply pairing matched to its request: if the grammar rejects it, it rejected (and
            # reported) the request already
            paired = not claimed and name in v.pairing.replies
            if not ch.run.step(term, no_reply=nowait) and len(out) == before and not paired:
                out.append(self.cat.finding(ev, "grammar.channel", VIOLATION,
                                            f"{_term(term)} on channel {ev.channel} where the channel grammar "
                                            f"expects {_expected(ch.run.expected())}"))
                claimed = True
        if complete and not claimed:
            rules.functional(self.cat, cs, ch, ev, name, args, nowait, out)
            if name == "basic.cancel":
                rules.capability(self.cat, cs, ev, name, out)
            if name in rules.SUSPECT_NAMES and (ch.suspects or ev.dir == C2S):
                rules.suspects(self.cat, self.world, ch, ev, name, args, out)
            if name in rules.EXCLUSIVE_NAMES:
                rules.exclusive(self.cat, self.world, ev, name, args, nowait, out)

    def _unsure_channel(self, cs: ConnState, ch: ChanState, ev: Frame, name: str) -> None:
        """A channel whose history the capture does not show: learn, do not judge."""
        if name == "channel.open" and not cs.lost and cs.in_order:
            # both directions are in sync, so the channel's history from here on is complete (a
            # direction still searching for frames would deliver the reply late, out of order)
            fresh = ChanState(ch.run)
            if fresh.run is not None:
                fresh.run.state, fresh.run.flights = 0, []
            cs.chans[ev.channel or 0] = fresh
            rules.channel_lifecycle(self.cat, fresh, ev, name, [])
            if fresh.run is not None:
                fresh.run.step((ev.dir or C2S, name))
            self.v.pairing.check(self.cat, fresh, ev, name, [])
        elif name == "channel.close-ok" and not cs.lost and cs.in_order:
            closed = ChanState(ch.run)
            if closed.run is not None:
                closed.run.state, closed.run.flights = 0, []
            cs.chans[ev.channel or 0] = closed  # known closed from here on

    # --- findings and the peer's reaction ----------------------------------------------------------

    def _emit(self, cs: ConnState, new: list[Finding], ev: Frame | None = None) -> list[Finding]:
        """Findings to emit now: released held ones, then this frame's.

        Two kinds wait. A violation with a reply code waits up to HOLD_FRAMES of the peer's frames
        for the peer's close, to report whether its code matched. A finding about the connection's
        state waits for the peer's next frame: a gap in the peer's direction is only declared when
        the peer's next data arrives (or its ACK passes the hole), and what the gap swallowed (an
        ack, a reply) may be the reason for the finding, which is then withdrawn (`_retract`).
        """
        if not new and not cs.held:
            return new
        out: list[Finding] = []
        if cs.held and ev is not None:
            out = self._react(cs, ev)
        for f in new:
            if f.severity == VIOLATION:
                if len(cs.flagged) > 65536:
                    cs.flagged.clear()
                cs.flagged.add(f.packet)
            if f.peer_reaction is None and f.dir in _PEER:
                reacts = f.code is not None and f.severity == VIOLATION
                if reacts or not stateless(f.rule):
                    cs.held.append(Held(f, _PEER[f.dir or C2S], HOLD_FRAMES if reacts else 1, reacts))
                    continue
            out.append(f)
        return out

    def _react(self, cs: ConnState, ev: Frame) -> list[Finding]:
        out: list[Finding] = []
        keep: list[Held] = []
        name = ev.method
        for h in cs.held:
            if ev.dir != h.peer:
                keep.append(h)
                continue
            f = h.finding
            if h.reacts and (name == "connection.close" or (name == "channel.close" and ev.channel == f.channel)):
                code = (ev.args or {}).get("reply_code")
                verdict = "matches" if code == f.code else f"expected {f.code}"
                out.append(_with_reaction(f, f"{_WHO[h.peer]} sent {name} {code} at packet {ev.packet}: {verdict}"))
                continue
            h.budget -= 1
            if h.budget > 0:
                keep.append(h)
            elif h.reacts:
                out.append(_with_reaction(f, f"no close from the {_WHO[h.peer]} within {HOLD_FRAMES} of its frames"))
            else:
                out.append(f)
        cs.held = keep
        return out

    def _retract(self, cs: ConnState, d: str) -> None:
        """A gap in direction ``d``: the missing bytes were sent after that direction's last frame,
        so held findings about the connection's state since then may stem from what was lost (the
        reassembler can only declare a gap once later data of that direction arrives)."""
        since = cs.last_data.get(d, 0)
        cs.held = [h for h in cs.held if h.finding.packet <= since or stateless(h.finding.rule)]

    def _release_all(self, cs: ConnState, why: str) -> list[Finding]:
        out = [_with_reaction(h.finding, f"no close from the {_WHO[h.peer]} before {why}") if h.reacts else h.finding
               for h in cs.held]  # fmt: skip
        cs.held = []
        return out


def _with_reaction(f: Finding, reaction: str) -> Finding:
    return Finding(packet=f.packet, ts=f.ts, conn=f.conn, dir=f.dir, channel=f.channel, rule=f.rule,
                   severity=f.severity, code=f.code, message=f.message, packets=f.packets,
                   peer_reaction=reaction)  # fmt: skip


def _term(term: Terminal) -> str:
    d, name = term
    return f"{'C' if d == C2S else 'S'}:{name}"


def _expected(names: list[str]) -> str:
    if not names:
        return "nothing more"
    return ", ".join(names[:8]) + (" …" if len(names) > 8 else "")

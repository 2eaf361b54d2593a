"""The diagnoser's judgement on hand-made events: how connections ended (TCP first FIN/RST and by
whom), which close answers which violation, redeliveries that follow their queue, the broker's
reply text choosing the advice, handshake endings and connections that never spoke AMQP 0-9-1.

Each test builds the frames a real client and RabbitMQ 3.10 exchange in that situation (see
tests/test_diagnose_causality.py for the same recorded against the harness broker).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from amqpscope.diagnose import Diagnoser, Diagnosis, Thresholds
from amqpscope.diagnose import facts as facts_mod
from amqpscope.diagnose.facts import TcpEnd
from amqpscope.diagnose.replies import Refusal, read
from amqpscope.dissect.spec import default_spec
from amqpscope.events import C2S, S2C, Connection, Event, Finding, Frame, Ledger, Message, ProtocolHeader
from amqpscope.validate.findings import tolerated

CLIENT, SERVER = "127.0.0.1:40000", "127.0.0.1:5672"
_HAS_TCP = "fin_by" in {f.name for f in dataclasses.fields(Connection)}


class Script:
    """Events of one capture, in order: packet numbers and times go up by one per frame."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.packet = 0
        self.ts = 1000.0

    def _next(self) -> tuple[int, float]:
        self.packet += 1
        self.ts += 0.01
        return self.packet, self.ts

    def frame(self, d: str, ch: int, name: str, conn: int = 0, **args: Any) -> int:
        p, ts = self._next()
        m = default_spec().find_method(name)
        self.events.append(Frame(packet=p, ts=ts, conn=conn, dir=d, channel=ch, type="method", size=0,
                                 class_id=m.class_index, method_id=m.index, method=name, args=args))  # fmt: skip
        return p

    def wait(self, seconds: float) -> None:
        self.ts += seconds

    def header(self, d: str, version: str, conn: int = 0) -> int:
        p, ts = self._next()
        self.events.append(ProtocolHeader(packet=p, ts=ts, conn=conn, dir=d, version=version, raw=""))
        return p

    def message(self, name: str, ch: int, body: str, conn: int = 0, **args: Any) -> None:
        p, ts = self.packet, self.ts
        self.events.append(Message(packet=p, ts=ts, conn=conn, dir=S2C if name != "basic.publish" else C2S,
                                   channel=ch, method=name, args=args, properties={}, body_size=len(body),
                                   body_received=len(body), complete=True, first_packet=p, frames=3,
                                   body_sha256=body * 8))  # fmt: skip

    def deliver(self, ch: int, tag: int, body: str, consumer: str = "ctag", redelivered: bool = False,
                conn: int = 0) -> int:  # fmt: skip
        p = self.frame(S2C, ch, "basic.deliver", conn, consumer_tag=consumer, delivery_tag=tag,
                       redelivered=redelivered, exchange="", routing_key="q")  # fmt: skip
        self.message("basic.deliver", ch, body, conn, consumer_tag=consumer, delivery_tag=tag,
                     redelivered=redelivered, exchange="", routing_key="q")  # fmt: skip
        return p

    def get_ok(self, ch: int, tag: int, body: str, redelivered: bool = False, conn: int = 0) -> int:
        p = self.frame(S2C, ch, "basic.get-ok", conn, delivery_tag=tag, redelivered=redelivered, exchange="",
                       routing_key="q", message_count=0)  # fmt: skip
        self.message("basic.get-ok", ch, body, conn, delivery_tag=tag, redelivered=redelivered, exchange="",
                     routing_key="q")  # fmt: skip
        return p

    def ledger(self, entry: str, ch: int, conn: int = 0, **kw: Any) -> None:
        self.events.append(Ledger(packet=self.packet, ts=self.ts, conn=conn, channel=ch, entry=entry, **kw))

    def finding(self, rule: str, packet: int, d: str | None, ch: int, code: int | None, conn: int = 0,
                severity: str = "violation", message: str = "", reaction: str | None = None) -> None:  # fmt: skip
        self.events.append(Finding(packet=packet, ts=self.ts, conn=conn, dir=d, channel=ch, rule=rule,
                                   severity=severity, code=code, message=message or rule, packets=(packet,),
                                   peer_reaction=reaction))  # fmt: skip

    def open(self, conn: int = 0, channels: tuple[int, ...] = (1,), heartbeat: int = 0, product: str = "pika",
             channel_max: int = 2047) -> None:  # fmt: skip
        p, ts = self._next()
        self.events.append(Connection(packet=p, ts=ts, conn=conn, state="open", client=CLIENT, server=SERVER,
                                      syn_seen=True))  # fmt: skip
        self.header(C2S, "0-9-1", conn)
        self.frame(S2C, 0, "connection.start", conn, version_major=0, version_minor=9, mechanisms="PLAIN",
                   locales="en_US")  # fmt: skip
        self.frame(C2S, 0, "connection.start-ok", conn, client_properties={"product": product, "version": "1.0"},
                   mechanism="PLAIN", locale="en_US")  # fmt: skip
        self.frame(S2C, 0, "connection.tune", conn, channel_max=channel_max, frame_max=131072, heartbeat=60)
        self.frame(C2S, 0, "connection.tune-ok", conn, channel_max=channel_max, frame_max=131072,
                   heartbeat=heartbeat)  # fmt: skip
        self.frame(C2S, 0, "connection.open", conn, virtual_host="/")
        self.frame(S2C, 0, "connection.open-ok", conn)
        for ch in channels:
            self.frame(C2S, ch, "channel.open", conn)
            self.frame(S2C, ch, "channel.open-ok", conn)

    def close(self, ended: str, conn: int = 0, tcp: TcpEnd | None = None, opening: str | None = None,
              syn_seen: bool = True) -> TcpEnd:  # fmt: skip
        p, ts = self._next()
        kw: dict[str, Any] = {}
        tcp = tcp or TcpEnd()
        if _HAS_TCP:
            side = {C2S: "client", S2C: "server"}
            kw = {"fin_by": side.get(tcp.fin_by or ""), "fin_packet": tcp.fin_packet,
                  "rst_by": side.get(tcp.rst_by or ""), "rst_packet": tcp.rst_packet, "opening": opening}  # fmt: skip
        self.events.append(Connection(packet=p, ts=ts, conn=conn, state="close", client=CLIENT, server=SERVER,
                                      ended=ended, syn_seen=syn_seen, **kw))  # fmt: skip
        return tcp

    def tcp(self, fin: str | None = None, rst: str | None = None, rst_first: bool = False) -> TcpEnd:
        """The TCP end of the next packets: the first FIN and RST (by direction), in that order."""
        fin_p = rst_p = None
        order = [("rst", rst), ("fin", fin)] if rst_first else [("fin", fin), ("rst", rst)]
        for how, by in order:
            if by is not None:
                p, _ = self._next()
                if how == "fin":
                    fin_p = p
                else:
                    rst_p = p
        return TcpEnd(fin, fin_p, rst, rst_p)


@pytest.fixture
def tcp_facts(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[int, TcpEnd]]:
    """Connection id → its TCP end, for cores whose close event does not carry the fields yet."""
    ends: dict[int, TcpEnd] = {}
    if not _HAS_TCP:
        real = TcpEnd.of
        monkeypatch.setattr(facts_mod.TcpEnd, "of", classmethod(lambda cls, ev: ends.get(ev.conn) or real(ev)))
    yield ends


def diagnose(s: Script, _ends: dict[int, TcpEnd] | None = None, **th: Any) -> tuple[list[Diagnosis], Diagnoser]:
    """``_ends``: the ``tcp_facts`` fixture, named where a test depends on the TCP end."""
    d = Diagnoser(Thresholds(**th))
    for ev in s.events:
        d.feed(ev)
    d.finish()
    return d.result(), d


def only(found: list[Diagnosis]) -> Diagnosis:
    assert len(found) == 1, [(x.cause, x.summary) for x in found]
    return found[0]


# --- 1. how a connection ended ---------------------------------------------------------------------


def test_tcp_end_first_and_answer() -> None:
    t = TcpEnd(fin_by=C2S, fin_packet=10, rst_by=S2C, rst_packet=11)
    assert t.first() == (C2S, "fin", 10) and t.answer() == (S2C, "rst", 11)
    assert TcpEnd(fin_by=S2C, fin_packet=12, rst_by=C2S, rst_packet=9).first() == (C2S, "rst", 9)
    assert TcpEnd().first() is None and not TcpEnd().known
    assert t.record() == {"fin_by": "client", "fin_packet": 10, "rst_by": "broker", "rst_packet": 11}


def test_client_fin_without_close_is_named_and_cites_the_fin(tcp_facts: dict[int, TcpEnd]) -> None:
    s = Script()
    s.open(channels=(1, 2))
    tcp_facts[0] = s.close("rst", tcp=s.tcp(fin=C2S, rst=S2C))
    d = only(diagnose(s, tcp_facts)[0])
    fin, rst = tcp_facts[0].fin_packet, tcp_facts[0].rst_packet
    assert d.cause == "client-closed-tcp" and d.severity == "warning" and d.details["blamed"] == "client"
    assert d.details["amqp_close"] is None and d.details["tcp"]["fin_by"] == "client"
    assert fin in d.packets and rst in d.packets
    assert f"FIN, packet {fin}" in d.summary and "2 channels were open (1, 2)" in d.summary
    assert f"RST (packet {rst})" in d.broker_action and "linger 0" in d.summary
    assert "crash" not in d.summary


def test_client_fin_with_no_channel_open_is_a_quirk(tcp_facts: dict[int, TcpEnd]) -> None:
    s = Script()
    s.open(channels=())
    tcp_facts[0] = s.close("rst", tcp=s.tcp(fin=C2S, rst=S2C))
    s.finding("connection.close.missing", s.packet, None, 0, None, severity="warning",
              message="the connection ended (rst) without connection.close, with no channel open")
    found, d = diagnose(s, tcp_facts)
    assert found == [] and [q.quirk for q in d.quirk_list()] == ["tcp-close-without-close"]


def test_client_reset_is_connection_lost_blaming_the_client(tcp_facts: dict[int, TcpEnd]) -> None:
    s = Script()
    s.open()
    tcp_facts[0] = s.close("rst", tcp=s.tcp(rst=C2S))
    d = only(diagnose(s, tcp_facts)[0])
    assert d.cause == "connection-lost" and d.details["blamed"] == "client"
    assert tcp_facts[0].rst_packet in d.packets and "killed or crashed" in d.summary


def test_broker_reset_without_silence_is_an_unexplained_loss(tcp_facts: dict[int, TcpEnd]) -> None:
    s = Script()
    s.open()
    tcp_facts[0] = s.close("rst", tcp=s.tcp(rst=S2C))
    d = only(diagnose(s, tcp_facts)[0])
    assert d.cause == "connection-lost" and d.details["blamed"] == "broker"
    assert "broker's side reset" in d.summary


def test_heartbeat_timeout_is_the_broker_acting(tcp_facts: dict[int, TcpEnd]) -> None:
    s = Script()
    s.open(heartbeat=1)
    last = s.frame(C2S, 1, "basic.qos", prefetch_count=1)
    s.frame(S2C, 1, "basic.qos-ok")
    for _ in range(4):
        s.wait(1.0)
        s.events.append(Frame(packet=s._next()[0], ts=s.ts, conn=0, dir=S2C, channel=0, type="heartbeat", size=0))
    tcp_facts[0] = s.close("rst", tcp=s.tcp(rst=S2C))
    d = only(diagnose(s, tcp_facts)[0])
    assert d.cause == "heartbeat-timeout" and d.details["silent"] == "client" and d.details["acted"] == "broker"
    assert d.details["blamed"] == "client" and last in d.packets and tcp_facts[0].rst_packet in d.packets
    assert "the broker then reset TCP (RST" in d.summary and "the client of" not in d.summary
    assert d.until - d.since > 3.0  # how long the silence lasted


def test_client_close_then_drop_is_the_clients_quirk(tcp_facts: dict[int, TcpEnd]) -> None:
    s = Script()
    s.open(channels=())
    close = s.frame(C2S, 0, "connection.close", reply_code=200, reply_text="bye", class_id=0, method_id=0)
    tcp_facts[0] = s.close("connection.close", tcp=s.tcp(fin=C2S, rst=S2C))
    s.finding("connection.close-ok.missing", close, S2C, 0, None, severity="deviation",
              message="the server ended the connection without answering this connection.close with close-ok")
    found, d = diagnose(s, tcp_facts)
    assert found == []
    (q,) = d.quirk_list()
    assert q.quirk == "close-then-drop" and q.library == "pika 1.0"
    assert "RabbitMQ 3.10" in q.source


def test_client_not_answering_the_brokers_close_stays_its_quirk(tcp_facts: dict[int, TcpEnd]) -> None:
    s = Script()
    s.open(channels=())
    close = s.frame(S2C, 0, "connection.close", reply_code=320, reply_text="CONNECTION_FORCED - shutdown",
                    class_id=0, method_id=0)  # fmt: skip
    tcp_facts[0] = s.close("connection.close", tcp=s.tcp(fin=C2S, rst=S2C))
    s.finding("connection.close-ok.missing", close, C2S, 0, None, severity="deviation")
    found, d = diagnose(s, tcp_facts)
    assert [x.cause for x in found] == ["connection-closed"] and found[0].details["blamed"] == "broker"
    (q,) = d.quirk_list()
    assert q.quirk == "close-ok-not-sent" and q.library == "pika 1.0"


# --- 2. causality, not proximity -------------------------------------------------------------------


def test_accepted_channel_above_max_gets_no_unrelated_404(tcp_facts: dict[int, TcpEnd]) -> None:
    s = Script()
    s.open(channels=(), channel_max=2)
    op = s.frame(C2S, 3, "channel.open")
    s.frame(S2C, 3, "channel.open-ok")
    pub = s.frame(C2S, 3, "queue.declare", queue="missing", passive=True)
    close = s.frame(S2C, 3, "channel.close", reply_code=404, reply_text="NOT_FOUND - no queue 'missing' in vhost '/'",
                    class_id=50, method_id=10)  # fmt: skip
    s.frame(C2S, 3, "channel.close-ok")
    # the validator held the channel-max finding and named the 404 as the peer's reaction
    s.finding("frame.channel-max", op, C2S, 3, 504, message="channel 3 is above the negotiated channel-max 2",
              reaction=f"server sent channel.close 404 at packet {close}: expected 504")
    s.frame(C2S, 0, "connection.close", reply_code=200, reply_text="", class_id=0, method_id=0)
    s.frame(S2C, 0, "connection.close-ok")
    s.close("connection.close")
    found, d = diagnose(s, tcp_facts)
    c = only(found)
    assert c.cause == "channel-closed" and c.details["request_packet"] == pub and op not in c.packets
    assert [q.quirk for q in d.quirk_list()] == ["channel-above-max"]  # the broker accepted it


def test_channel_limit_cites_the_offending_channel_open() -> None:
    s = Script()
    s.open(channels=(1, 2), channel_max=2)
    op = s.frame(C2S, 3, "channel.open")
    close = s.frame(S2C, 0, "connection.close", class_id=20, method_id=10, reply_code=530,
                    reply_text="NOT_ALLOWED - number of channels opened (2) has reached the negotiated channel_max (2)")
    s.finding("frame.channel-max", op, C2S, 3, 504, message="channel 3 is above the negotiated channel-max 2")
    s.frame(C2S, 0, "connection.close-ok")
    s.close("connection.close")
    c = only(diagnose(s)[0])
    assert c.cause == "channel-limit" and set(c.packets) == {op, close}
    assert c.details["channel_open_packet"] == op and f"channel.open of channel 3, packet {op}" in c.summary
    opened = next(e.packet for e in s.events if isinstance(e, Frame) and e.method == "connection.open")
    assert opened not in c.packets
    assert c.until - c.since < 1.0  # from the channel.open to the close, not the connection's life


def test_violation_linked_by_code_and_method_not_by_text() -> None:
    s = Script()
    s.open()
    pub = s.frame(C2S, 1, "basic.publish", exchange="nowhere", routing_key="k")
    s.frame(C2S, 1, "basic.publish", exchange="", routing_key="k")  # pipelined behind it
    s.frame(S2C, 1, "channel.close", reply_code=404, reply_text="NOT_FOUND - no exchange 'nowhere' in vhost '/'",
            class_id=60, method_id=40)  # fmt: skip
    s.frame(C2S, 1, "channel.close-ok")
    s.finding("basic.publish.exchange.must-exist", pub, C2S, 1, 404, reaction="whatever the text says")
    s.frame(C2S, 0, "connection.close", reply_code=200, reply_text="", class_id=0, method_id=0)
    s.frame(S2C, 0, "connection.close-ok")
    s.close("connection.close")
    c = only(diagnose(s)[0])
    assert c.cause == "client-protocol-error" and c.details["finding_packet"] == pub and pub in c.packets


def test_unanswered_violation_has_no_reaction() -> None:
    s = Script()
    s.open()
    bad = s.frame(C2S, 1, "basic.ack", delivery_tag=99)
    s.finding("delivery-tag.channel-local", bad, C2S, 1, 406, reaction="no close from the server within 8 frames")
    s.frame(C2S, 0, "connection.close", reply_code=200, reply_text="", class_id=0, method_id=0)
    s.frame(S2C, 0, "connection.close-ok")
    s.close("connection.close")
    c = only(diagnose(s)[0])
    assert c.cause == "client-protocol-error" and c.broker_action.startswith("none seen")


def test_own_exclusive_queue_redeclared_is_inequivalent_not_another_holder() -> None:
    s = Script()
    s.open()
    first = s.frame(C2S, 1, "queue.declare", queue="mine", exclusive=True)
    s.frame(S2C, 1, "queue.declare-ok", queue="mine", message_count=0, consumer_count=0)
    again = s.frame(C2S, 1, "queue.declare", queue="mine", exclusive=False)
    s.frame(S2C, 1, "channel.close", reply_code=405, class_id=50, method_id=10,
            reply_text="RESOURCE_LOCKED - cannot obtain exclusive access to locked queue 'mine' in vhost '/'. It "
            "could be originally declared on another connection or the exclusive property value does not match "
            "that of the original declaration.")  # fmt: skip
    s.finding("queue.declare.exclusive.exclusive", again, C2S, 1, 405,
              message="queue.declare refused with 405: another connection holds it")
    s.frame(C2S, 1, "channel.close-ok")
    s.close("fin")
    found, _ = diagnose(s)
    c = only(found)
    assert c.cause == "inequivalent-redeclaration" and c.details["holder"] == 0
    assert c.details["differs"] == ["exclusive true → false"] and {first, again} <= set(c.packets)
    assert "another connection" not in c.summary and "its own queue 'mine'" in c.summary


# --- 3. redeliveries follow the queue -------------------------------------------------------------


def _consume(s: Script, ch: int, queue: str, tag: str, conn: int = 0) -> None:
    s.frame(C2S, ch, "basic.consume", conn, queue=queue, consumer_tag=tag)
    s.frame(S2C, ch, "basic.consume-ok", conn, consumer_tag=tag)


def test_same_body_from_another_queue_is_not_a_redelivery() -> None:
    s = Script()
    s.open(conn=0)
    _consume(s, 1, "orders", "a")
    s.deliver(1, 1, "X", consumer="a")
    s.frame(C2S, 1, "channel.close", reply_code=0, reply_text="", class_id=0, method_id=0)
    s.ledger("release", 1, outcome="channel closed", tag=1, duration=0.5, ref_packet=s.packet)
    s.frame(S2C, 1, "channel.close-ok")
    s.open(conn=1)
    _consume(s, 1, "invoices", "b", conn=1)
    s.deliver(1, 1, "X", consumer="b", redelivered=True, conn=1)  # same body, another queue
    found, _ = diagnose(s)
    assert [d.cause for d in found if d.cause == "unacked-requeued"] == []


def test_redelivery_on_the_same_connection_is_linked() -> None:
    s = Script()
    s.open()
    s.frame(C2S, 1, "basic.get", queue="jobs", no_ack=False)
    got = s.get_ok(1, 1, "J")
    close = s.frame(C2S, 1, "channel.close", reply_code=0, reply_text="", class_id=0, method_id=0)
    s.ledger("release", 1, outcome="channel closed", tag=1, duration=0.2, ref_packet=got)
    s.frame(S2C, 1, "channel.close-ok")
    s.frame(C2S, 1, "channel.open")  # the channel number reused
    s.frame(S2C, 1, "channel.open-ok")
    s.frame(C2S, 1, "basic.get", queue="jobs", no_ack=True)
    again = s.get_ok(1, 1, "J", redelivered=True)
    s.close("fin")
    found, _ = diagnose(s)
    d = only([x for x in found if x.cause == "unacked-requeued"])
    assert d.details["queues"] == ["jobs"] and again in d.packets and d.details["close_packet"] >= close
    assert "channel 1 of the same connection" in d.summary and "1 was redelivered" in d.summary


# --- 4. the broker's words decide the advice ---------------------------------------------------------


@pytest.mark.parametrize(("code", "text", "kind", "advice"), [
    (403, "ACCESS_REFUSED - operation not permitted on the default exchange", Refusal.DEFAULT_EXCHANGE,
     "whatever the user's permissions"),
    (403, "ACCESS_REFUSED - exchange name 'amq.mine' contains reserved prefix 'amq.*'", Refusal.RESERVED_PREFIX,
     "reserved for the broker"),
    (403, "ACCESS_REFUSED - access to queue 'q' in vhost 'scope' refused for user 'alice'", Refusal.PERMISSION,
     "list_user_permissions alice"),
    (530, "NOT_ALLOWED - access to vhost 'private' refused for user 'alice'", Refusal.VHOST_ACCESS,
     "set_permissions -p private alice"),
    (530, "NOT_ALLOWED - vhost nowhere not found", Refusal.VHOST_MISSING, "add_vhost nowhere"),
    (405, "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue 'q' in vhost '/'", Refusal.EXCLUSIVE,
     "exclusive"),
    # recorded with aio-pika's suite (test_channel_locked_resource): a consumer's exclusivity, not a permission
    (403, "ACCESS_REFUSED - queue 'q' in vhost '/' in exclusive use", Refusal.EXCLUSIVE_CONSUMER, "not a permission"),
])  # fmt: skip
def test_reply_text_decides_the_advice(code: int, text: str, kind: Refusal, advice: str) -> None:
    r = read(code, text)
    assert r is not None and r.kind is kind and advice in r.advice


def test_default_exchange_refusal_does_not_advise_permissions() -> None:
    s = Script()
    s.open()
    req = s.frame(C2S, 1, "exchange.declare", exchange="", type="direct")
    s.frame(S2C, 1, "channel.close", reply_code=403, class_id=40, method_id=10,
            reply_text="ACCESS_REFUSED - operation not permitted on the default exchange")  # fmt: skip
    s.frame(C2S, 1, "channel.close-ok")
    s.close("fin")
    c = only(diagnose(s)[0])
    assert c.cause == "access-refused" and c.details["refusal"] == "default-exchange" and req in c.packets
    assert "permission" not in c.details["advice"].replace("whatever the user's permissions", "")


# --- 5. handshake endings and connections that never spoke AMQP 0-9-1 ------------------------------


def _handshake(s: Script, upto: str) -> None:
    s.events.append(Connection(packet=s._next()[0], ts=s.ts, conn=0, state="open", client=CLIENT, server=SERVER))
    steps = [(C2S, "header"), (S2C, "connection.start"), (C2S, "connection.start-ok"), (S2C, "connection.tune"),
             (C2S, "connection.tune-ok"), (C2S, "connection.open")]  # fmt: skip
    for d, name in steps:
        if name == "header":
            s.header(C2S, "0-9-1")
        else:
            s.frame(d, 0, name)
        if name == upto:
            return


@pytest.mark.parametrize(("upto", "by", "cause", "stage_words"), [
    ("header", S2C, "handshake-aborted", "after the protocol header"),
    ("connection.start", C2S, "handshake-aborted", "after connection.start"),
    ("connection.start", S2C, "handshake-aborted", "handshake_timeout"),
    ("connection.start-ok", S2C, "login-refused", "authentication_failure_close"),
    ("connection.start-ok", C2S, "handshake-aborted", "after connection.start-ok"),
    ("connection.tune", C2S, "handshake-aborted", "frame_max"),
    ("connection.tune-ok", S2C, "handshake-aborted", "after connection.tune-ok"),
    ("connection.open", C2S, "handshake-aborted", "connection.open-ok"),
])  # fmt: skip
def test_handshake_ending_names_stage_and_who(tcp_facts: dict[int, TcpEnd], upto: str, by: str, cause: str,
                                              stage_words: str) -> None:  # fmt: skip
    s = Script()
    _handshake(s, upto)
    other = S2C if by == C2S else C2S
    tcp_facts[0] = s.close("rst", tcp=s.tcp(fin=by, rst=other))
    d = only(diagnose(s, tcp_facts)[0])
    assert d.cause == cause and stage_words in d.summary, d.summary
    assert tcp_facts[0].fin_packet in d.packets
    if cause == "handshake-aborted":
        assert d.details["ended_by"] == ("client" if by == C2S else "broker")
        assert d.details["stage"] == upto
        assert d.severity == ("warning" if by == C2S else "error")


def test_client_close_during_handshake(tcp_facts: dict[int, TcpEnd]) -> None:
    s = Script()
    _handshake(s, "connection.tune")
    close = s.frame(C2S, 0, "connection.close", reply_code=530, reply_text="frame_max too small", class_id=10,
                    method_id=30)  # fmt: skip
    s.close("connection.close")
    d = only(diagnose(s, tcp_facts)[0])
    assert d.cause == "handshake-aborted" and close in d.packets and "sent connection.close 530" in d.summary
    assert d.details["amqp_close"] == {"by": "client", "packet": close, "close_ok_packet": None}


def test_amqp_1_0_header_is_not_amqp(tcp_facts: dict[int, TcpEnd]) -> None:
    s = Script()
    s.events.append(Connection(packet=s._next()[0], ts=s.ts, conn=0, state="open", client=CLIENT, server=SERVER))
    hdr = s.header(C2S, "1.0")
    s.header(S2C, "0-9-1")
    tcp_facts[0] = s.close("fin", tcp=s.tcp(fin=S2C, rst=None), opening="amqp-1.0")
    d = only(diagnose(s, tcp_facts)[0])
    assert d.cause == "not-amqp" and d.details["opening"] == "amqp-1.0" and hdr in d.packets
    assert "AMQP 1.0 protocol header" in d.summary and "answered with its own protocol header" in d.broker_action


def _crossed(s: Script, upto: str, ender: str, late: str) -> tuple[TcpEnd, int, int]:
    """A handshake up to ``upto``; ``ender`` sends FIN, then the other side's ``late`` step arrives
    and the ender's socket answers it with RST (aiormq's cancelled connect, pika's connect timeout)."""
    _handshake(s, upto)
    fin = s._next()[0]
    lp = s.header(C2S, "0-9-1") if late == "header" else s.frame(S2C if ender == C2S else C2S, 0, late)
    rst = s._next()[0]
    return TcpEnd(ender, fin, ender, rst), fin, lp


def test_handshake_stage_is_what_the_client_had_seen_before_its_fin(tcp_facts: dict[int, TcpEnd]) -> None:
    # aiormq conn 201: start-ok #28117, client FIN #28118, the broker's tune #28119, the client's RST #28120
    s = Script()
    tcp, fin, tune = _crossed(s, "connection.start-ok", C2S, "connection.tune")
    tcp_facts[0] = s.close("rst", tcp=tcp)
    d = only(diagnose(s, tcp_facts)[0])
    assert d.cause == "handshake-aborted" and d.details["stage"] == "connection.start-ok", d.summary
    assert f"closed TCP (FIN, packet {fin}) after sending connection.start-ok, before the broker's connection.tune " \
        f"arrived (packet {tune})" in d.summary  # fmt: skip
    assert "frame_max" not in d.summary and "ended after connection.tune" not in d.summary
    assert fin in d.packets and tune in d.packets
    assert d.details["arrived_after_end"] == {"method": "connection.tune", "by": "broker", "packet": tune}
    assert f"connection.tune (packet {tune}) came after the client's FIN" in d.broker_action


def test_handshake_start_after_the_clients_fin_gives_no_mechanism_advice(tcp_facts: dict[int, TcpEnd]) -> None:
    # pika conn 165: header #7753, client FIN #7755, connection.start #7759, the client's RST #7760
    s = Script()
    tcp, fin, start = _crossed(s, "header", C2S, "connection.start")
    tcp_facts[0] = s.close("rst", tcp=tcp)
    d = only(diagnose(s, tcp_facts)[0])
    assert d.details["stage"] == "header" and "ended after the protocol header" in d.summary, d.summary
    assert f"after sending its protocol header, before the broker's connection.start arrived (packet {start})" \
        in d.summary  # fmt: skip
    assert "mechanisms" not in d.summary and "server's properties" not in d.summary
    assert (fin, start) == d.packets[-2:]


def test_handshake_broker_end_ignores_the_clients_late_answer(tcp_facts: dict[int, TcpEnd]) -> None:
    # the broker's handshake_timeout: it closes after connection.start, the client's start-ok comes too late
    s = Script()
    tcp, fin, start_ok = _crossed(s, "connection.start", S2C, "connection.start-ok")
    tcp_facts[0] = s.close("rst", tcp=tcp)
    d = only(diagnose(s, tcp_facts)[0])
    assert d.cause == "handshake-aborted" and d.details["ended_by"] == "broker", d.summary
    assert d.details["stage"] == "connection.start" and "handshake_timeout" in d.summary
    assert f"the broker closed TCP (FIN, packet {fin})" in d.summary
    assert f"after sending connection.start, before the client's connection.start-ok arrived (packet {start_ok})" \
        in d.summary  # fmt: skip


def test_handshake_step_in_the_fin_segment_counts_as_reached() -> None:
    # a client's tune-ok and open sent in the segment that carries its FIN were sent before it ended
    from amqpscope.diagnose.facts import ConnFacts
    from amqpscope.diagnose.handshake import stage_reached
    from amqpscope.diagnose.model import Who

    f = ConnFacts(who=Who(conn=0, client=CLIENT), start_ts=0.0, start_packet=1, header="0-9-1", header_packet=3)
    f.steps.extend([("connection.start", S2C, 4), ("connection.start-ok", C2S, 5), ("connection.tune", S2C, 6),
                    ("connection.tune-ok", C2S, 7), ("connection.open", C2S, 7)])  # fmt: skip
    assert stage_reached(f, 7) == ("connection.open", 7, None)
    assert stage_reached(f, 5) == ("connection.start-ok", 5, ("connection.tune", S2C, 6))
    assert stage_reached(f, 2) == (None, None, ("header", C2S, 3))
    assert stage_reached(f, None) == ("connection.open", 7, None)


# --- 9. quirks, durations and words -----------------------------------------------------------------


def test_unknown_locale_the_broker_accepted_is_a_quirk() -> None:
    s = Script()
    s.open()
    start_ok = next(e.packet for e in s.events if isinstance(e, Frame) and e.method == "connection.start-ok")
    s.finding("connection.start-ok.locale.validity", start_ok, C2S, 0, None, message="locale 'xx' is not one of ['en_US']",
              reaction="no close from the server within 8 frames")  # fmt: skip
    s.frame(C2S, 0, "connection.close", reply_code=200, reply_text="", class_id=0, method_id=0)
    s.frame(S2C, 0, "connection.close-ok")
    s.close("connection.close")
    found, d = diagnose(s)
    assert found == [] and [q.quirk for q in d.quirk_list()] == ["unknown-locale"]


def test_tolerated_entries_name_the_broker_not_the_repository() -> None:
    from amqpscope.validate.findings import BROKER_TOLERATES

    for t in BROKER_TOLERATES:
        assert "RabbitMQ 3.10" in t.source or "rabbit" in t.source.lower()
        assert "shared/" not in t.source and "reference/" not in t.source and ".md" not in t.source


def test_tolerated_takes_the_callers_judgement() -> None:
    f = Finding(packet=1, ts=0.0, conn=0, dir=C2S, channel=3, rule="frame.channel-max", severity="violation",
                code=504, message="m", peer_reaction="server sent channel.close 404 at packet 9: expected 504")
    assert tolerated(f) is None  # from the text alone: answered
    t = tolerated(f, answered=False)
    assert t is not None and t.id == "channel-above-max"


def test_ack_timeout_lasts_as_long_as_the_delivery_was_held() -> None:
    s = Script()
    s.open()
    _consume(s, 1, "slow", "c")
    got = s.deliver(1, 1, "S", consumer="c")
    s.wait(30.0)
    s.frame(S2C, 1, "channel.close", reply_code=406, class_id=0, method_id=0,
            reply_text="PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. Timeout value used: "
            "30000 ms. This timeout value can be configured, see consumers doc guide to learn more")  # fmt: skip
    s.ledger("release", 1, outcome="channel closed", tag=1, duration=30.0, ref_packet=got)
    s.frame(C2S, 1, "channel.close-ok")
    s.close("fin")
    c = only([x for x in diagnose(s)[0] if x.cause == "ack-timeout"])
    assert c.until - c.since == pytest.approx(30.0, abs=0.1) and got in c.packets and "30.0 s" in c.summary


def test_words_have_no_reprs_or_broken_plurals() -> None:
    s = Script()
    s.open()
    s.frame(C2S, 1, "queue.declare", queue="ttl", arguments={"x-message-ttl": 1000})
    s.frame(S2C, 1, "queue.declare-ok", queue="ttl", message_count=0, consumer_count=0)
    s.frame(C2S, 1, "queue.declare", queue="ttl", arguments={}, durable=True)
    s.frame(S2C, 1, "channel.close", reply_code=406, class_id=50, method_id=10,
            reply_text="PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue 'ttl' in vhost '/'")
    s.frame(C2S, 1, "channel.close-ok")
    s.ledger("at-limit", 1, duration=9.0, limit=1)
    s.close("fin")
    found, _ = diagnose(s)
    text = " ".join(d.summary + " " + d.broker_action for d in found)
    assert "None" not in text and "True" not in text and "False" not in text
    assert "x-message-ttl 1000 → not set" in text and "durable not set → true" in text
    assert "1 unacked deliveries" not in text and "1 unacked delivery" in text
    assert "client of client" not in text


def test_locked_queue_whose_declaration_is_not_seen_claims_no_holder() -> None:
    s = Script()
    s.open()
    req = s.frame(C2S, 1, "queue.declare", queue="theirs", exclusive=False)
    s.frame(S2C, 1, "channel.close", reply_code=405, class_id=50, method_id=10,
            reply_text="RESOURCE_LOCKED - cannot obtain exclusive access to locked queue 'theirs' in vhost '/'.")
    s.finding("queue.declare.exclusive.exclusive", req, C2S, 1, 405,
              message="queue.declare refused with 405: declared exclusive by another connection")
    s.frame(C2S, 1, "channel.close-ok")
    s.close("fin")
    c = only(diagnose(s)[0])
    assert c.cause == "channel-closed" and c.details["refusal"] == "exclusive-locked" and req in c.packets
    assert "not in the capture" in c.summary and "another connection or" in c.summary


def test_login_refused_cites_the_credentials() -> None:
    s = Script()
    s.events.append(Connection(packet=s._next()[0], ts=s.ts, conn=0, state="open", client=CLIENT, server=SERVER))
    s.header(C2S, "0-9-1")
    s.frame(S2C, 0, "connection.start", server_properties={"product": "RabbitMQ", "version": "3.10.8"})
    start_ok = s.frame(C2S, 0, "connection.start-ok", client_properties={"product": "pika"}, mechanism="PLAIN")
    close = s.frame(S2C, 0, "connection.close", reply_code=403, class_id=0, method_id=0,
                    reply_text="ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN.")
    s.close("connection.close")
    c = only(diagnose(s)[0])
    assert c.cause == "login-refused" and {start_ok, close} <= set(c.packets) and c.details["blamed"] == "client"


def test_capture_started_mid_connection_is_no_handshake_ending() -> None:
    s = Script()
    s.events.append(Connection(packet=s._next()[0], ts=s.ts, conn=0, state="open", client=CLIENT, server=SERVER,
                               syn_seen=False))  # fmt: skip
    s.frame(C2S, 1, "basic.publish", exchange="", routing_key="q")
    s.close("fin", syn_seen=False)
    assert diagnose(s)[0] == []


@pytest.mark.parametrize("first_fails", [True, False])
def test_pipelined_requests_the_close_answers_the_oldest_unanswered(first_fails: bool) -> None:
    s = Script()
    s.open()
    one = s.frame(C2S, 1, "queue.declare", queue="one", passive=True)
    two = s.frame(C2S, 1, "queue.declare", queue="two", passive=True)
    if not first_fails:
        s.frame(S2C, 1, "queue.declare-ok", queue="one", message_count=0, consumer_count=0)
    missing = "one" if first_fails else "two"
    s.frame(S2C, 1, "channel.close", reply_code=404, class_id=50, method_id=10,
            reply_text=f"NOT_FOUND - no queue '{missing}' in vhost '/'")  # fmt: skip
    s.frame(C2S, 1, "channel.close-ok")
    s.close("fin")
    c = only(diagnose(s)[0])
    assert c.details["request_packet"] == (one if first_fails else two) and f"'{missing}'" in c.summary


@pytest.mark.parametrize("broker_answered", [False, True])
def test_tls_without_keys_is_not_a_cause_but_tls_on_a_plain_port_is(tcp_facts: dict[int, TcpEnd],
                                                                    broker_answered: bool) -> None:  # fmt: skip
    s = Script()
    s.events.append(Connection(packet=s._next()[0], ts=s.ts, conn=0, state="open", client=CLIENT, server=SERVER,
                               syn_seen=True))  # fmt: skip
    if broker_answered:
        s.header(S2C, "0-9-1")
    tcp_facts[0] = s.close("fin", tcp=s.tcp(fin=C2S, rst=S2C), opening="tls")
    if not _HAS_TCP:
        pytest.skip("the event model has no opening field yet")
    found = diagnose(s, tcp_facts)[0]
    if broker_answered:
        assert only(found).cause == "not-amqp" and "port without TLS" in found[0].summary
    else:
        assert found == []  # what it carried was not seen: blind.py reports it, not a fault


def test_channel_limit_without_method_ids_cites_the_pending_channel_open() -> None:
    # RabbitMQ 3.10 sends class 0 / method 0 with this 530 (recorded with aiormq)
    s = Script()
    s.open(channels=(1,), channel_max=2047)
    op = s.frame(C2S, 2048, "channel.open")
    close = s.frame(S2C, 0, "connection.close", class_id=0, method_id=0, reply_code=530,
                    reply_text="NOT_ALLOWED - number of channels opened (2047) has reached the negotiated channel_max "
                    "(2047)")  # fmt: skip
    s.finding("frame.channel-max", op, C2S, 2048, 504, message="channel 2048 is above the negotiated channel-max 2047")
    s.frame(C2S, 0, "connection.close-ok")
    s.close("connection.close")
    found, d = diagnose(s)
    c = only(found)
    assert c.cause == "channel-limit" and set(c.packets) == {op, close} and d.quirk_list() == []


def test_an_old_channel_error_does_not_explain_a_later_tcp_drop(tcp_facts: dict[int, TcpEnd]) -> None:
    s = Script()
    s.open(channels=(1, 2))
    s.frame(C2S, 1, "queue.declare", queue="missing", passive=True)
    s.frame(S2C, 1, "channel.close", reply_code=404, class_id=50, method_id=10,
            reply_text="NOT_FOUND - no queue 'missing' in vhost '/'")  # fmt: skip
    s.frame(C2S, 1, "channel.close-ok")
    s.wait(5.0)
    tcp_facts[0] = s.close("rst", tcp=s.tcp(fin=C2S, rst=S2C))
    found = diagnose(s, tcp_facts)[0]
    assert sorted(d.cause for d in found) == ["channel-closed", "client-closed-tcp"]


def test_a_client_dropping_tcp_instead_of_close_ok_is_explained(tcp_facts: dict[int, TcpEnd]) -> None:
    s = Script()
    s.open(channels=(1,))
    s.frame(C2S, 1, "queue.declare", queue="alice.not", passive=False)
    s.frame(S2C, 1, "channel.close", reply_code=403, class_id=50, method_id=10,
            reply_text="ACCESS_REFUSED - access to queue 'alice.not' in vhost 'scope' refused for user 'alice'")
    tcp_facts[0] = s.close("rst", tcp=s.tcp(rst=C2S))  # rabbitmq-c resets instead of answering
    found = diagnose(s, tcp_facts)[0]
    assert [d.cause for d in found] == ["access-refused"]


def test_immediate_publish_gets_the_brokers_advice() -> None:
    s = Script()
    s.open()
    pub = s.frame(C2S, 1, "basic.publish", exchange="", routing_key="q", immediate=True)
    s.frame(S2C, 0, "connection.close", reply_code=540, reply_text="NOT_IMPLEMENTED - immediate=true",
            class_id=60, method_id=40)  # fmt: skip
    s.frame(C2S, 0, "connection.close-ok")
    s.close("connection.close")
    c = only(diagnose(s)[0])
    assert c.cause == "connection-closed" and c.details["request_packet"] == pub
    assert "does not implement the immediate flag" in c.details["advice"] and c.details["blamed"] == "client"


def test_a_connection_seen_only_by_its_end_is_not_called_not_amqp(tcp_facts: dict[int, TcpEnd]) -> None:
    # a live capture started while the connection was idle: only its FIN/RST is seen
    s = Script()
    s.events.append(Connection(packet=s._next()[0], ts=s.ts, conn=0, state="open", client=CLIENT, server=SERVER,
                               syn_seen=False))  # fmt: skip
    tcp_facts[0] = s.close("rst", tcp=s.tcp(fin=C2S, rst=S2C), opening="nothing", syn_seen=False)
    assert diagnose(s, tcp_facts)[0] == []


def test_tls_answered_with_an_amqp_header_waits_for_the_tls_event(tcp_facts: dict[int, TcpEnd]) -> None:
    if not _HAS_TCP:
        pytest.skip("the event model has no opening field yet")
    from amqpscope.events import Tls

    s = Script()
    s.events.append(Connection(packet=s._next()[0], ts=s.ts, conn=0, state="open", client=CLIENT, server=SERVER,
                               syn_seen=True))  # fmt: skip
    s.close("rst", tcp=s.tcp(rst=S2C), opening="tls")
    # the core's tls event comes right after the close: no ServerHello, 8 bytes back (RabbitMQ's header)
    s.events.append(Tls(packet=s.packet, ts=s.ts, conn=0, client=CLIENT, server=SERVER, reason="handshake not seen",
                        records=1, bytes_c2s=51, bytes_s2c=8))  # fmt: skip
    c = only(diagnose(s)[0])
    assert c.cause == "not-amqp" and c.details["opening"] == "tls" and "8 bytes that are no TLS" in c.broker_action

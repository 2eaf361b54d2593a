"""How connections end, which reaction answers what, and what the broker's words advise, recorded
with real clients (pika, and raw sockets for what no library does on purpose) against the
session's private RabbitMQ, then diagnosed.

Every scenario runs in one recording (one tcpdump, one broker): each finds its connections by the
client ports (raw sockets) or connection names (pika) it used. Each test checks the cause, the
party blamed, the advice, and that the proving packets are what they are said to be: the frame
decoded at that packet, or the TCP FIN/RST read from the capture's own bytes.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pika
import pytest
from rawclient import RawClient

from amqpscope.capture import read_packets
from amqpscope.diagnose import Diagnoser, Diagnosis, Quirk
from amqpscope.dissect.codec import get_codec
from amqpscope.events import C2S, S2C, Connection, Event, Frame, ProtocolHeader
from amqpscope.pipeline import Options, decode_packets
from amqpscope.testing.broker import PrivateBroker
from amqpscope.testing.sniffer import LoopbackRecorder, tcpdump_available

pytestmark = pytest.mark.broker

FIN, RST = 0x01, 0x04


def _params(b: PrivateBroker, name: str) -> pika.ConnectionParameters:
    return pika.ConnectionParameters("127.0.0.1", b.port, credentials=pika.PlainCredentials("guest", "guest"),
                                     client_properties={"connection_name": name}, connection_attempts=1)  # fmt: skip


@dataclass
class Run:
    """Who took part in each scenario: raw clients by port, pika clients by connection name."""

    ports: dict[str, list[int]] = field(default_factory=dict)
    names: dict[str, list[str]] = field(default_factory=dict)

    def raw(self, scenario: str, b: PrivateBroker, name: str | None = None) -> RawClient:
        r = RawClient(b.port, get_codec(), name or f"raw-{scenario}")
        self.ports.setdefault(scenario, []).append(r.port)
        return r

    def pika(self, scenario: str, b: PrivateBroker, name: str) -> pika.BlockingConnection:
        self.names.setdefault(scenario, []).append(name)
        return pika.BlockingConnection(_params(b, name))


# --- the scenarios ------------------------------------------------------------------------------


def close_then_drop(b: PrivateBroker, run: Run) -> None:
    """connection.close, then the socket dropped at once (as aiormq does)."""
    r = run.raw("close-then-drop", b)
    r.handshake()
    r.method(1, "channel.open")
    r.expect("channel.open-ok")
    r.method(0, "connection.close", reply_code=200, reply_text="bye", class_id=0, method_id=0)
    r.sock.close()


def tcp_close(b: PrivateBroker, run: Run) -> None:
    """A channel open, then the socket closed without connection.close."""
    r = run.raw("tcp-close", b)
    r.handshake()
    r.method(1, "channel.open")
    r.expect("channel.open-ok")
    r.sock.close()


def redeclare(b: PrivateBroker, run: Run) -> None:
    conn = run.pika("redeclare", b, "diag-redeclare")
    ch = conn.channel()
    ch.queue_declare("diag.mine", exclusive=True)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker):
        ch.queue_declare("diag.mine", exclusive=False)
    conn.close()


def same_body(b: PrivateBroker, run: Run) -> None:
    """The same body in two queues; each consumer gives up one delivery; only the second consumes
    its queue again (and gets it redelivered, on the same connection)."""
    a = run.pika("same-body", b, "diag-body-a")
    cha = a.channel()
    for q in ("diag.qa", "diag.qb"):
        cha.queue_declare(q)
        cha.basic_publish("", q, b"the same body")
    cha.basic_consume("diag.qa", lambda *x: None)
    a.process_data_events(time_limit=0.2)
    cha.close()  # released back to diag.qa
    bconn = run.pika("same-body", b, "diag-body-b")
    chb = bconn.channel()
    chb.basic_consume("diag.qb", lambda *x: None)
    bconn.process_data_events(time_limit=0.2)
    chb.close()  # released back to diag.qb
    chb2 = bconn.channel()
    got: list[bool] = []

    def take(c: Any, m: Any, _p: Any, _body: bytes) -> None:
        got.append(m.redelivered)
        c.basic_ack(m.delivery_tag)

    chb2.basic_consume("diag.qb", take)
    deadline = time.monotonic() + 3
    while not got and time.monotonic() < deadline:
        bconn.process_data_events(time_limit=0.1)
    assert got == [True]
    bconn.close()
    cha2 = a.channel()
    for q in ("diag.qa", "diag.qb"):
        cha2.queue_delete(q)
    a.close()


def channel_above_max(b: PrivateBroker, run: Run) -> None:
    """Channel 5 with channel_max 2, accepted (one channel open); then an unrelated 404 on it."""
    r = run.raw("channel-above-max", b)
    r.handshake(channel_max=2)
    r.method(5, "channel.open")
    r.expect("channel.open-ok")
    r.method(5, "queue.declare", queue="diag.missing", passive=True)
    r.expect("channel.close")
    r.method(5, "channel.close-ok")
    r.close()


def refusals(b: PrivateBroker, run: Run) -> None:
    conn = run.pika("refusals", b, "diag-refusals")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker):
        conn.channel().exchange_declare("", exchange_type="direct")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker):
        conn.channel().exchange_declare("amq.diag", exchange_type="direct")
    conn.close()
    r = run.raw("refusals", b, "raw-novhost")
    r.start()
    r.tune()
    r.method(0, "connection.open", virtual_host="diag-nowhere")
    r.expect("connection.close")
    r.method(0, "connection.close-ok")
    r.sock.close()


def _set_handshake_timeout(b: PrivateBroker, ms: int) -> None:
    b.ctl("eval", f"application:set_env(rabbit, handshake_timeout, {ms}).")


def handshakes(b: PrivateBroker, run: Run) -> None:
    """Handshakes that end at each stage, by either side."""
    r = run.raw("hs-client-start", b)
    r.sock.sendall(b"AMQP\x00\x00\x09\x01")
    r.expect("connection.start")
    r.sock.close()
    r = run.raw("hs-client-tune", b)
    r.start()
    r.expect("connection.tune")
    r.sock.close()
    r = run.raw("hs-client-tune-ok", b)
    r.start()
    r.tune()
    time.sleep(0.05)
    r.sock.close()
    r = run.raw("hs-broker-start-ok", b)  # a wrong password, no authentication_failure_close
    r.start(password="wrong", capabilities=False)
    r.until_closed()
    _set_handshake_timeout(b, 600)
    try:
        r = run.raw("hs-broker-start", b)
        r.sock.sendall(b"AMQP\x00\x00\x09\x01")
        r.expect("connection.start")
        r.until_closed()
        r = run.raw("hs-broker-tune", b)
        r.start()
        r.expect("connection.tune")
        r.until_closed()
    finally:
        _set_handshake_timeout(b, 10000)  # RabbitMQ 3.10's default


def not_amqp(b: PrivateBroker, run: Run) -> None:
    r = run.raw("amqp-1.0", b)
    r.sock.sendall(b"AMQP\x00\x01\x00\x00")
    r.until_closed()
    r.sock.close()
    r = run.raw("amqp-0-10", b)
    r.sock.sendall(b"AMQP\x01\x01\x00\x0a")
    r.until_closed()
    r.sock.close()
    r = run.raw("tls-plain", b)  # a TLS ClientHello's record header and a few bytes of it
    r.sock.sendall(bytes.fromhex("160301002e0100002a0303") + bytes(32) + bytes.fromhex("0000020035010000"))
    r.until_closed(1.0)
    r.sock.close()
    r = run.raw("http", b)
    r.sock.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
    r.until_closed(1.0)
    r.sock.close()
    r = run.raw("nothing", b)
    time.sleep(0.05)
    r.sock.close()


SCENARIOS: tuple[Callable[[PrivateBroker, Run], None], ...] = (
    close_then_drop, tcp_close, redeclare, same_body, channel_above_max, refusals, handshakes, not_amqp)


@dataclass
class Recorded:
    path: Path
    events: list[Event]
    causes: list[Diagnosis]
    quirks: list[Quirk]
    run: Run
    conns: dict[int, tuple[int, str | None]]  # conn → (client port, connection name)
    segments: dict[int, tuple[int, int, int]]  # packet → (source port, destination port, TCP flags)

    def needs_tcp(self) -> None:
        """Skip unless the core's close events say who sent the first FIN and RST."""
        if not any(type(e) is Connection and (getattr(e, "fin_by", None) or getattr(e, "rst_by", None))
                   for e in self.events):  # fmt: skip
            pytest.skip("the core's close events carry no fin_by/rst_by yet")

    def of(self, scenario: str) -> list[int]:
        ports, names = set(self.run.ports.get(scenario, [])), set(self.run.names.get(scenario, []))
        return sorted(c for c, (port, name) in self.conns.items() if port in ports or name in names)

    def causes_of(self, scenario: str) -> list[Diagnosis]:
        conns = self.of(scenario)
        return [d for d in self.causes if d.conn in conns]

    def frame(self, packet: int, method: str) -> Frame:
        return next(e for e in self.events if type(e) is Frame and e.packet == packet and e.method == method)

    def has_frame(self, packet: int, method: str) -> bool:
        return any(type(e) is Frame and e.packet == packet and e.method == method for e in self.events)

    def flags(self, packet: int, port: int) -> tuple[str, int]:
        """(c2s | s2c for a segment from/to the client ``port``, its TCP flags)."""
        sport, dport, flags = self.segments[packet]
        assert port in (sport, dport), (packet, port, sport, dport)
        return (C2S if sport == port else S2C), flags


def _segments(path: Path) -> dict[int, tuple[int, int, int]]:
    out = {}
    for p in read_packets(path):
        data = p.data[14:] if p.linktype == 1 else p.data  # Ethernet on lo (tcpdump -i lo)
        if len(data) < 20 or data[0] >> 4 != 4 or data[9] != 6:
            continue
        tcp = data[(data[0] & 0x0F) * 4 :]
        sport, dport = struct.unpack("!HH", tcp[:4])
        out[p.index] = (sport, dport, tcp[13])
    return out


@pytest.fixture(scope="module")
def rec(rabbitmq: PrivateBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    if not tcpdump_available():
        pytest.skip("tcpdump is not installed")
    path = tmp_path_factory.mktemp("causality") / "causality.pcap"
    run = Run()
    with LoopbackRecorder(path, rabbitmq.port):
        for scenario in SCENARIOS:
            scenario(rabbitmq, run)
        time.sleep(0.3)  # the last FIN/RST
    options = Options(ports=frozenset({rabbitmq.port}), keep_bodies=False, ledger=True, validate=True)
    events = list(decode_packets(read_packets(path), get_codec(), options))
    d = Diagnoser()
    for ev in events:
        d.feed(ev)
    d.finish()
    conns: dict[int, tuple[int, str | None]] = {}
    for ev in events:
        if type(ev) is Connection:
            name = (ev.client_properties or {}).get("connection_name") if ev.client_properties else None
            port = int(ev.client.rsplit(":", 1)[1])
            conns[ev.conn] = (port, name if isinstance(name, str) else conns.get(ev.conn, (0, None))[1])
    yield Recorded(path, events, d.result(), d.quirk_list(), run, conns, _segments(path))


def _port(rec: Recorded, conn: int) -> int:
    return rec.conns[conn][0]


# --- 1. endings ---------------------------------------------------------------------------------


def test_client_closing_and_dropping_is_not_the_brokers_fault(rec: Recorded) -> None:
    rec.needs_tcp()
    (conn,) = rec.of("close-then-drop")
    assert rec.causes_of("close-then-drop") == []
    close_ok = any(type(e) is Frame and e.conn == conn and e.method == "connection.close-ok" for e in rec.events)
    quirks = [q for q in rec.quirks if conn in q.connections]
    if close_ok:  # the broker was quicker than the client's FIN: nothing is missing
        assert quirks == []
    else:
        (q,) = quirks
        assert q.quirk == "close-then-drop" and q.library == "raw-close-then-drop"


def test_tcp_close_without_connection_close(rec: Recorded) -> None:
    rec.needs_tcp()
    (d,) = rec.causes_of("tcp-close")
    assert d.cause == "client-closed-tcp" and d.details["blamed"] == "client"
    tcp = d.details["tcp"]
    port = _port(rec, d.conn)
    direction, flags = rec.flags(tcp["fin_packet"], port)
    assert tcp["fin_by"] == "client" and direction == C2S and flags & FIN and tcp["fin_packet"] in d.packets
    assert tcp["rst_by"] == "broker" and tcp["rst_packet"] > tcp["fin_packet"]
    direction, flags = rec.flags(tcp["rst_packet"], port)
    assert direction == S2C and flags & RST and tcp["rst_packet"] in d.packets
    assert "without connection.close" in d.summary and "linger 0" in d.summary
    assert "connection.close" in d.summary.split(";")[-1]  # the advice


# --- 2. causality -----------------------------------------------------------------------------------


def test_own_exclusive_queue_redeclared(rec: Recorded) -> None:
    (d,) = rec.causes_of("redeclare")
    assert d.cause == "inequivalent-redeclaration" and d.details["blamed"] == "client"
    assert d.details["differs"] == ["exclusive true → false"] and d.details["reply_code"] == 405
    first, again = d.details["declared_at"], d.details["request_packet"]
    assert rec.frame(first, "queue.declare").args["exclusive"] is True  # type: ignore[index]
    assert rec.frame(again, "queue.declare").args["exclusive"] is False  # type: ignore[index]
    close = next(p for p in d.packets if rec.has_frame(p, "channel.close"))
    assert rec.frame(close, "channel.close").args["reply_code"] == 405  # type: ignore[index]
    assert "another connection" not in d.summary and "same flags" in d.details["advice"]


def test_an_accepted_channel_above_max_gets_no_unrelated_reaction(rec: Recorded) -> None:
    (conn,) = rec.of("channel-above-max")
    (d,) = rec.causes_of("channel-above-max")
    assert d.channel == 5 and d.details["reply_code"] == 404
    assert rec.frame(d.details["request_packet"], "queue.declare").channel == 5
    opened = next(e.packet for e in rec.events if type(e) is Frame and e.conn == conn and e.method == "channel.open")
    assert opened not in d.packets
    assert any(q.quirk == "channel-above-max" and conn in q.connections for q in rec.quirks)


# --- 3. redeliveries follow the queue ---------------------------------------------------------------


def test_redeliveries_follow_the_queue_not_the_body(rec: Recorded) -> None:
    _, b = rec.of("same-body")
    found = [d for d in rec.causes_of("same-body") if d.cause == "unacked-requeued"]
    assert [(d.conn, d.details["queues"]) for d in found] == [(b, ["diag.qb"])]
    (d,) = found
    assert [c for c, _ in d.details["redelivered_to"]] == [b] and "of the same connection" in d.summary
    redelivered = [p for p in d.packets if rec.has_frame(p, "basic.deliver")
                   and rec.frame(p, "basic.deliver").args["redelivered"]]  # type: ignore[index]  # fmt: skip
    assert redelivered and all(rec.frame(p, "basic.deliver").conn == b for p in redelivered)


# --- 4. the broker's words ---------------------------------------------------------------------------


def test_refusals_advise_what_the_reply_says(rec: Recorded) -> None:
    found = {d.details.get("refusal"): d for d in rec.causes_of("refusals")}
    assert set(found) == {"default-exchange", "reserved-prefix", "vhost-missing"}, found
    default, prefix, vhost = found["default-exchange"], found["reserved-prefix"], found["vhost-missing"]
    for d in (default, prefix):
        assert d.cause == "access-refused" and d.details["reply_code"] == 403
        assert rec.frame(d.details["request_packet"], "exchange.declare").channel == d.channel
        assert "list_user_permissions" not in d.details["advice"] and "whatever the user's permissions" in d.summary
    assert "only be published to" in default.details["advice"]
    assert "'amq.'" in prefix.details["advice"] and "amq.diag" in prefix.summary
    assert vhost.cause == "access-refused" and vhost.channel is None and "add_vhost diag-nowhere" in vhost.summary
    assert rec.frame(vhost.details["request_packet"], "connection.open").args["virtual_host"] == "diag-nowhere"  # type: ignore[index]


# --- 5. handshakes and connections that never spoke AMQP 0-9-1 -------------------------------------


@pytest.mark.parametrize(("scenario", "cause", "stage", "by"), [
    ("hs-client-start", "handshake-aborted", "connection.start", "client"),
    ("hs-client-tune", "handshake-aborted", "connection.tune", "client"),
    ("hs-client-tune-ok", "handshake-aborted", "connection.tune-ok", "client"),
    ("hs-broker-start", "handshake-aborted", "connection.start", "broker"),
    ("hs-broker-tune", "handshake-aborted", "connection.tune", "broker"),
    ("hs-broker-start-ok", "login-refused", "connection.start-ok", "broker"),
])  # fmt: skip
def test_handshake_endings(rec: Recorded, scenario: str, cause: str, stage: str, by: str) -> None:
    rec.needs_tcp()
    (d,) = rec.causes_of(scenario)
    assert d.cause == cause and d.details.get("stage") == stage
    first = min((p, k) for k, p in (("fin", d.details["tcp"]["fin_packet"]), ("rst", d.details["tcp"]["rst_packet"]))
                if p is not None)  # fmt: skip
    assert d.details["tcp"][f"{first[1]}_by"] == by and first[0] in d.packets
    direction, flags = rec.flags(first[0], _port(rec, d.conn))
    assert direction == (C2S if by == "client" else S2C) and flags & (FIN if first[1] == "fin" else RST)
    staged = next(p for p in d.packets if rec.has_frame(p, stage))
    assert rec.frame(staged, stage).conn == d.conn
    if cause == "handshake-aborted":
        assert d.details["ended_by"] == by and f"after {stage}" in d.summary
        assert d.severity == ("warning" if by == "client" else "error")
        assert ("handshake_timeout" in d.summary) == (by == "broker")


@pytest.mark.parametrize(("scenario", "words"), [("amqp-1.0", "AMQP 1.0"), ("amqp-0-10", "AMQP 0-10")])
def test_other_amqp_headers_on_the_amqp_port(rec: Recorded, scenario: str, words: str) -> None:
    (d,) = rec.causes_of(scenario)
    assert d.cause == "not-amqp" and d.details["opening"] == scenario and words in d.summary
    assert "its own protocol header (AMQP 0-9-1)" in d.broker_action
    header = next(p for p in d.packets if rec.segments[p][0] == _port(rec, d.conn))
    assert any(type(e) is ProtocolHeader and e.packet == header and e.dir == C2S for e in rec.events)


def test_tls_on_a_plain_port(rec: Recorded) -> None:
    rec.needs_tcp()
    found = rec.causes_of("tls-plain")
    # the broker answers a TLS ClientHello with its own protocol header: a TLS client on a plain port
    assert [(d.cause, d.details["opening"]) for d in found] == [("not-amqp", "tls")], found


@pytest.mark.parametrize(("scenario", "opening"), [("http", "http"), ("nothing", "nothing")])
def test_connections_that_never_spoke_amqp(rec: Recorded, scenario: str, opening: str) -> None:
    (d,) = rec.causes_of(scenario)
    core = any(type(e) is Connection and getattr(e, "opening", None) for e in rec.events)
    # without the core's classification the diagnoser still knows bytes that were not AMQP
    assert d.cause == "not-amqp" and d.details["opening"] == (opening if core or opening == "nothing" else "other")
    assert d.details["blamed"] == "client" and d.client is not None and int(d.client.rsplit(":")[1]) in \
        rec.run.ports[scenario]  # fmt: skip

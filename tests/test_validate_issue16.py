"""The four defects of issue 16, fixed in the core's rules (crates/amqpscope-core/src/validate/rules*).

Each builds its capture with the synthetic encoder and reads the core validator's findings:

* an assert failure takes the reply code of the spec rule it restates, and RabbitMQ's own answer
  where it differs (rules_tables.RABBITMQ_CODES), not the generic 502;
* a peer that goes on sending after the other peer's connection.close had reached it is reported
  (frames merely in flight are not);
* a protocol header the server refuses is a failed connection, reported at warning level.
"""

from __future__ import annotations

from amqpscope.dissect.wire import encode_protocol_header
from amqpscope.events import Finding
from amqpscope.testing.synth import Capture, SynthConn
from amqpscope.validate.findings import RANK, WARNING

SECOND = 1_000_000_000


def _ready(cap: Capture) -> SynthConn:
    c = cap.connection()
    c.handshake()
    c.open_channel(1)
    return c


def _only(found: list[Finding], rule: str) -> Finding:
    hits = [f for f in found if f.rule == rule]
    assert len(hits) == 1, "\n".join(f"{f.rule} #{f.packet} {f.severity}: {f.message}" for f in found)
    return hits[0]


# --- reply code per the spec's rule ---------------------------------------------------------------------


def test_empty_exchange_name_is_the_syntax_rule_406_and_rabbitmq_403() -> None:
    cap = Capture()
    c = _ready(cap)
    p = c.client(1, "exchange.declare", exchange="", type="direct")
    close = c.server(1, "channel.close", reply_code=403, class_id=40, method_id=10,
                     reply_text="ACCESS_REFUSED - operation not permitted on the default exchange")  # fmt: skip
    c.client(1, "channel.close-ok")
    c.close()
    f = _only(cap.findings(), "exchange.declare.exchange.assert-notnull")
    assert (f.packet, f.severity, f.code, f.rabbitmq_code) == (p, "violation", 406, 403)
    # the close code is RabbitMQ's answer, not the spec's: the reaction says so, not "expected 406"
    assert f.peer_reaction == (f"server sent channel.close 403 at packet {close}: "
                               "matches RabbitMQ's answer (the spec says 406)")  # fmt: skip


def _empty_exchange_name_answered(reply_code: int) -> tuple[int, Finding]:
    cap = Capture()
    c = _ready(cap)
    c.client(1, "exchange.declare", exchange="", type="direct")
    close = c.server(1, "channel.close", reply_code=reply_code, class_id=40, method_id=10, reply_text="refused")
    c.client(1, "channel.close-ok")
    c.close()
    return close, _only(cap.findings(), "exchange.declare.exchange.assert-notnull")


def test_peer_reaction_with_the_spec_code_or_another() -> None:
    close, f = _empty_exchange_name_answered(406)  # the spec's code: a plain match
    assert f.peer_reaction == f"server sent channel.close 406 at packet {close}: matches"
    close, f = _empty_exchange_name_answered(530)  # neither the spec's nor RabbitMQ's
    assert f.peer_reaction == f"server sent channel.close 530 at packet {close}: expected 406"


def test_tune_ok_channel_max_above_the_offer_is_530() -> None:
    cap = Capture()
    c = cap.connection()
    c.protocol_header()
    c.server(0, "connection.start", version_major=0, version_minor=9, mechanisms="PLAIN", locales="en_US")
    c.client(0, "connection.start-ok", mechanism="PLAIN", response="\x00u\x00p", locale="en_US")
    c.server(0, "connection.tune", channel_max=10, frame_max=131072)
    p = c.client(0, "connection.tune-ok", channel_max=20, frame_max=131072)
    f = _only(cap.findings(), "connection.tune-ok.channel-max.assert-le")
    assert (f.packet, f.code) == (p, 530)


def test_tune_ok_frame_max_above_the_offer_is_530() -> None:
    cap = Capture()
    c = cap.connection()
    c.protocol_header()
    c.server(0, "connection.start", version_major=0, version_minor=9, mechanisms="PLAIN", locales="en_US")
    c.client(0, "connection.start-ok", mechanism="PLAIN", response="\x00u\x00p", locale="en_US")
    c.server(0, "connection.tune", channel_max=10, frame_max=131072)
    p = c.client(0, "connection.tune-ok", channel_max=10, frame_max=262144)
    f = _only(cap.findings(), "connection.tune-ok.frame-max.upper-limit")
    assert (f.packet, f.code) == (p, 530)


# --- frames after connection.close -----------------------------------------------------------------------


def _server_closes(cap: Capture) -> tuple[SynthConn, int]:
    c = _ready(cap)
    close = c.server(0, "connection.close", reply_code=320, reply_text="CONNECTION_FORCED")
    return c, close


def test_publish_long_after_the_servers_close_is_reported() -> None:
    cap = Capture()
    c, close = _server_closes(cap)
    cap.ts_ns += 2 * SECOND  # the client is silent: anything it sends now, it sends knowing of the close
    p = c.client(1, "basic.publish", exchange="", routing_key="q")
    c.content(True, 1, b"hello")
    c.client(1, "basic.publish", exchange="", routing_key="q")  # reported once per close
    c.content(True, 1, b"hello")
    c.client(0, "connection.close-ok")
    c.fin()
    f = _only(cap.findings(), "connection.close.stability")
    assert (f.packet, f.dir, f.severity, f.channel) == (p, "c2s", "violation", 1)
    assert f.packets == (close, p)
    assert f"after the server's connection.close (packet {close})" in f.message


def test_declare_after_answering_the_close_is_reported() -> None:
    cap = Capture()
    c, close = _server_closes(cap)
    ok = c.client(0, "connection.close-ok")
    p = c.client(1, "queue.declare", queue="q")
    c.fin()
    f = _only(cap.findings(), "connection.close.stability")
    assert (f.packet, f.dir, f.packets) == (p, "c2s", (close, p))
    assert f"close-ok at packet {ok}" in f.message


def test_frames_in_flight_when_the_server_closed_are_legal() -> None:
    cap = Capture()
    c, _ = _server_closes(cap)
    c.client(1, "basic.publish", exchange="", routing_key="q")  # 1 ms later: sent before the close arrived
    c.content(True, 1, b"hello")
    c.client(1, "queue.declare", queue="q")
    c.client(0, "connection.close-ok")
    c.fin()
    assert [f for f in cap.findings() if f.rule == "connection.close.stability"] == []


def test_a_body_still_streaming_after_the_close_is_not_silence() -> None:
    cap = Capture()
    c = _ready(cap)
    c.client(1, "basic.publish", exchange="", routing_key="q")
    c.header_frame(True, 1, 10)
    c.server(0, "connection.close", reply_code=320, reply_text="CONNECTION_FORCED")
    cap.ts_ns += 2 * SECOND  # the client's queued body drains slowly
    c.body_frame(True, 1, b"0123456789")
    c.client(1, "basic.publish", exchange="", routing_key="q")
    c.content(True, 1, b"hello")
    c.client(0, "connection.close-ok")
    c.fin()
    assert [f for f in cap.findings() if f.rule == "connection.close.stability"] == []


def test_the_closers_own_frames_after_its_close_stay_reported() -> None:
    cap = Capture()
    c = _ready(cap)
    c.client(0, "connection.close", reply_code=200, reply_text="bye")
    p = c.client(1, "basic.qos", prefetch_count=1)
    c.server(0, "connection.close-ok")
    c.fin()
    f = _only(cap.findings(), "connection.close.stability")
    assert f.packet == p and "after this peer's connection.close" in f.message


# --- a refused protocol header ---------------------------------------------------------------------------


def test_refused_0_10_header_is_a_failed_connection() -> None:
    cap = Capture()
    c = cap.connection()
    asked = c.protocol_header("0-10")  # 'AMQP' 1 1 0 10
    reply = c.send(False, encode_protocol_header("0-9-1"))
    c.fin()
    found = cap.findings()
    f = _only(found, "protocol.header-reply")
    assert f.packet == reply and RANK[f.severity] <= RANK[WARNING]
    assert f.message.startswith("connection failed: the client asks for AMQP 0-10, the server speaks AMQP 0-9-1")
    version = _only(found, "protocol.header-version")
    assert version.packet == asked

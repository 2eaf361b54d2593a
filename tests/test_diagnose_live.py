"""Each cause recorded against a real RabbitMQ on the loopback, then diagnosed: every recording
must give exactly its cause, on the right connection and channel, proven by the right packets.

All scenarios are recorded once per session (one fixture, one private broker: the session's
``rabbitmq``), each into its own pcap; broker settings a scenario needs (memory watermark,
consumer_timeout and the channel tick) are set for it and restored after it.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pika
import pytest
from pika.exceptions import AMQPError
from rawclient import RawClient

from amqpscope.capture import read_packets
from amqpscope.diagnose import Diagnoser, Diagnosis, Thresholds
from amqpscope.dissect.codec import get_codec
from amqpscope.events import Event, Frame
from amqpscope.pipeline import Options, decode_packets
from amqpscope.testing.broker import PrivateBroker
from amqpscope.testing.sniffer import LoopbackRecorder, tcpdump_available

pytestmark = pytest.mark.broker


def _params(broker: PrivateBroker, name: str, **kw: Any) -> pika.ConnectionParameters:
    kw.setdefault("credentials", pika.PlainCredentials("guest", "guest"))
    return pika.ConnectionParameters("127.0.0.1", broker.port, client_properties={"connection_name": name},
                                     connection_attempts=1, **kw)  # fmt: skip


# --- the scenarios: each runs against the broker while its own pcap is recorded ---------------------


def blocked(b: PrivateBroker) -> None:
    conn = pika.BlockingConnection(_params(b, "diag-blocked"))
    ch = conn.channel()
    ch.queue_declare("diag.blocked", auto_delete=False)
    b.ctl("set_vm_memory_high_watermark", "absolute", "1")
    try:
        time.sleep(0.5)  # the alarm is raised on the broker's next memory check
        for i in range(3):
            ch.basic_publish("", "diag.blocked", f"held {i}".encode())
        conn.process_data_events(time_limit=1.0)  # blocked arrives; the publishes wait
    finally:
        b.ctl("set_vm_memory_high_watermark", "0.8")
    conn.process_data_events(time_limit=1.5)  # unblocked
    ch.queue_delete("diag.blocked")
    conn.close()


def unroutable(b: PrivateBroker) -> None:
    conn = pika.BlockingConnection(_params(b, "diag-unroutable"))
    ch = conn.channel()
    ch.confirm_delivery()
    for _ in range(3):
        with contextlib.suppress(pika.exceptions.UnroutableError):  # what pika says; the broker also acks
            ch.basic_publish("amq.direct", "nowhere", b"lost", mandatory=True)
    conn.close()


def cancelled(b: PrivateBroker) -> None:
    conn = pika.BlockingConnection(_params(b, "diag-cancelled"))
    ch = conn.channel()
    ch.queue_declare("diag.doomed")
    ch.basic_consume("diag.doomed", lambda *a: None, consumer_tag="diag-doomed")
    other = pika.BlockingConnection(_params(b, "diag-deleter"))
    other.channel().queue_delete("diag.doomed")
    other.close()
    conn.process_data_events(time_limit=0.3)
    conn.close()


def access(b: PrivateBroker) -> None:
    conn = pika.BlockingConnection(_params(b, "diag-access", virtual_host="scope",
                                           credentials=pika.PlainCredentials("alice", "s3cret")))  # fmt: skip
    ch = conn.channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker):
        ch.queue_declare("forbidden.queue")
    conn.close()


def login(b: PrivateBroker) -> None:
    with pytest.raises(AMQPError):
        pika.BlockingConnection(_params(b, "diag-login", credentials=pika.PlainCredentials("guest", "wrong")))


def precondition(b: PrivateBroker) -> None:
    conn = pika.BlockingConnection(_params(b, "diag-precondition"))
    ch = conn.channel()
    ch.queue_declare("diag.args", arguments={"x-max-length": 10})
    with pytest.raises(pika.exceptions.ChannelClosedByBroker):
        ch.queue_declare("diag.args", arguments={"x-max-length": 20})
    conn.channel().queue_delete("diag.args")
    conn.close()


def channel_limit(b: PrivateBroker) -> None:
    c = RawClient(b.port, get_codec())
    c.handshake(channel_max=2)
    for n in (1, 2, 3):  # the third exceeds the negotiated 2: the broker closes the connection
        c.method(n, "channel.open")
    c.expect("connection.close")
    c.method(0, "connection.close-ok")
    c.sock.close()


def ack_timeout(b: PrivateBroker) -> None:
    # consumer_timeout is checked on the channel tick: both short for this scenario only; a channel
    # reads them when it starts (rabbit_channel:init)
    b.ctl("eval", "application:set_env(rabbit, consumer_timeout, 500), "
          "application:set_env(rabbit, channel_tick_interval, 300).")  # fmt: skip
    try:
        conn = pika.BlockingConnection(_params(b, "diag-acktimeout"))
        ch = conn.channel()
        ch.queue_declare("diag.slow", auto_delete=True)  # goes with its consumer
        ch.basic_publish("", "diag.slow", b"never acked")
        ch.basic_qos(prefetch_count=1)
        ch.basic_consume("diag.slow", lambda *a: None)
        deadline = time.monotonic() + 5
        while ch.is_open and time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.2)
    finally:
        # back to RabbitMQ 3.10's defaults (a channel started without them crashes its connection)
        b.ctl("eval", "application:set_env(rabbit, consumer_timeout, 1800000), "
              "application:set_env(rabbit, channel_tick_interval, 60000).")  # fmt: skip
    conn.close()


def heartbeat(b: PrivateBroker) -> None:
    conn = pika.BlockingConnection(_params(b, "diag-heartbeat", heartbeat=1))
    conn.channel()
    time.sleep(4.0)  # a blocked event loop: BlockingConnection sends heartbeats only while processing
    with pytest.raises(AMQPError):
        conn.process_data_events(time_limit=0.5)
        conn.close()


def lost(b: PrivateBroker) -> None:
    c = RawClient(b.port, get_codec())
    c.handshake()
    c.method(1, "channel.open")
    c.expect("channel.open-ok")
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    c.sock.close()  # a killed client: RST, no AMQP close


def stalled(b: PrivateBroker) -> None:
    conn = pika.BlockingConnection(_params(b, "diag-stalled"))
    ch = conn.channel()
    ch.queue_declare("diag.stalled", auto_delete=True)
    ch.basic_qos(prefetch_count=3)
    ch.basic_consume("diag.stalled", lambda *a: None)  # never acks: stuck at its prefetch
    publisher = pika.BlockingConnection(_params(b, "diag-stalled-publisher"))
    pch = publisher.channel()
    for i in range(20):  # the work piles up behind it
        pch.basic_publish("", "diag.stalled", f"job {i}".encode())
        conn.process_data_events(time_limit=0.08)
    publisher.close()
    ch.close()  # its three deliveries go back to the queue
    conn.close()


def poison(b: PrivateBroker) -> None:
    conn = pika.BlockingConnection(_params(b, "diag-poison"))
    ch = conn.channel()
    ch.queue_declare("diag.poison", auto_delete=True)
    ch.basic_qos(prefetch_count=1)
    ch.basic_publish("", "diag.poison", b"cannot be processed")
    seen = 0

    def on_message(c: Any, method: Any, _props: Any, _body: bytes) -> None:
        nonlocal seen
        seen += 1
        if seen < 8:  # a handler that fails and asks for the message again
            c.basic_nack(method.delivery_tag, requeue=True)
        else:
            c.basic_reject(method.delivery_tag, requeue=False)

    ch.basic_consume("diag.poison", on_message)
    deadline = time.monotonic() + 5
    while seen < 8 and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.1)
    conn.close()


def requeued(b: PrivateBroker) -> None:
    first = pika.BlockingConnection(_params(b, "diag-first-worker"))
    ch = first.channel()
    ch.queue_declare("diag.work", auto_delete=False)
    for i in range(2):
        ch.basic_publish("", "diag.work", f"order {i}".encode())
    ch.basic_qos(prefetch_count=2)
    ch.basic_consume("diag.work", lambda *a: None)
    first.process_data_events(time_limit=0.3)  # both delivered, never acked
    second = pika.BlockingConnection(_params(b, "diag-second-worker"))
    ch2 = second.channel()
    got: list[int] = []
    tag = ch2.basic_consume("diag.work", lambda c, m, p, body: (got.append(1), c.basic_ack(m.delivery_tag)))
    ch.close()  # the first worker gives up: its deliveries go to the second
    deadline = time.monotonic() + 5
    while len(got) < 2 and time.monotonic() < deadline:
        second.process_data_events(time_limit=0.1)
    ch2.basic_cancel(tag)  # before the delete: no broker cancel in this scenario
    ch2.queue_delete("diag.work")
    second.close()
    first.close()


@dataclass(frozen=True)
class Scenario:
    run: Callable[[PrivateBroker], None]
    cause: str
    conn: int
    channel: int | None
    proof: tuple[str, ...]  # methods ([conn/]dir:method) whose packets must be among the diagnosis' packets


SCENARIOS: dict[str, Scenario] = {
    "publisher-blocked": Scenario(blocked, "publisher-blocked", 0, None,
                                  ("s2c:connection.blocked", "s2c:connection.unblocked")),
    "unroutable": Scenario(unroutable, "unroutable", 0, 1, ("s2c:basic.return",)),
    "consumer-cancelled": Scenario(cancelled, "consumer-cancelled", 0, 1, ("s2c:basic.cancel", "1/c2s:queue.delete")),
    "access-refused": Scenario(access, "access-refused", 0, 1, ("s2c:channel.close", "c2s:queue.declare")),
    "login-refused": Scenario(login, "login-refused", 0, None, ("s2c:connection.close",)),
    "precondition-failed": Scenario(precondition, "precondition-failed", 0, 1,
                                    ("c2s:queue.declare", "s2c:channel.close")),
    "channel-limit": Scenario(channel_limit, "channel-limit", 0, None, ("s2c:connection.close",)),
    "ack-timeout": Scenario(ack_timeout, "ack-timeout", 0, 1, ("s2c:channel.close",)),
    "heartbeat-timeout": Scenario(heartbeat, "heartbeat-timeout", 0, None, ()),
    "connection-lost": Scenario(lost, "connection-lost", 0, None, ()),
    "consumer-stalled": Scenario(stalled, "consumer-stalled", 0, 1, ("s2c:basic.deliver", "s2c:channel.close-ok")),
    "poison-message": Scenario(poison, "poison-message", 0, 1, ("c2s:basic.nack",)),
    "unacked-requeued": Scenario(requeued, "unacked-requeued", 0, 1, ("1/s2c:basic.deliver",)),
}  # fmt: skip
# shorter than the default 5 s so that the stalled scenario stays short; every other scenario holds
# deliveries well under it
THRESHOLDS = Thresholds(stall_s=1.0)


@dataclass
class Recording:
    path: Path
    events: list[Event]
    found: list[Diagnosis]


@pytest.fixture(scope="session")
def recordings(rabbitmq: PrivateBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Recording]]:
    if not tcpdump_available():
        pytest.skip("tcpdump is not installed")
    base = tmp_path_factory.mktemp("diagnose")
    codec = get_codec()
    out: dict[str, Recording] = {}
    for name, sc in SCENARIOS.items():
        path = base / f"{name}.pcap"
        with LoopbackRecorder(path, rabbitmq.port):
            sc.run(rabbitmq)
            time.sleep(0.2)  # the last FIN/RST
        options = Options(ports=frozenset({rabbitmq.port}), keep_bodies=False, ledger=True, validate=True)
        events = list(decode_packets(read_packets(path), codec, options))
        d = Diagnoser(THRESHOLDS)
        for ev in events:
            d.feed(ev)
        d.finish()
        out[name] = Recording(path, events, d.result())
    yield out


def _packets(events: list[Event], proof: str, conn: int) -> set[int]:
    if "/" in proof:
        other, proof = proof.split("/")
        conn = int(other)
    d, method = proof.split(":")
    return {ev.packet for ev in events if type(ev) is Frame and ev.conn == conn and ev.dir == d
            and ev.method == method}  # fmt: skip


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_recording_diagnoses_to_its_cause(recordings: dict[str, Recording], name: str) -> None:
    sc, rec = SCENARIOS[name], recordings[name]
    assert [(d.cause, d.conn, d.channel) for d in rec.found] == [(sc.cause, sc.conn, sc.channel)], \
        [d.summary for d in rec.found]  # fmt: skip
    d = rec.found[0]
    for proof in sc.proof:
        want = _packets(rec.events, proof, sc.conn)
        assert want and want <= set(d.packets), (proof, want, d.packets)
    assert d.client and d.client.startswith("127.0.0.1:") and d.summary and d.broker_action
    assert d.since <= d.until


def test_details_of_the_recorded_causes(recordings: dict[str, Recording]) -> None:
    unroutable = recordings["unroutable"].found[0]
    assert unroutable.details["count"] == 3 and unroutable.details["confirms_hid_loss"] is True
    assert "confirms alone lost them" in unroutable.summary and "'nowhere'" in unroutable.summary
    blocked = recordings["publisher-blocked"].found[0]
    assert blocked.details["publishes_held"] == 3 and blocked.details["reason"] == "low on memory"
    pre = recordings["precondition-failed"].found[0]
    assert pre.details["differs"] == ["x-max-length 10 → 20"]
    heartbeat = recordings["heartbeat-timeout"].found[0]
    assert heartbeat.details["silent"] == "client" and heartbeat.details["silence_s"] > 2.0
    assert heartbeat.details["blamed"] == "client" and "the client of" not in heartbeat.summary
    if heartbeat.details["tcp"]["rst_by"] is not None:  # a core that reports who ended TCP
        # the broker reset the silent client: it acted, the client did not close TCP
        assert heartbeat.details["acted"] == "broker" and heartbeat.details["tcp"]["rst_by"] == "broker"
        assert heartbeat.details["tcp"]["rst_packet"] in heartbeat.packets
    assert "diag-heartbeat" in heartbeat.summary and "Pika" in heartbeat.summary
    cancelled = recordings["consumer-cancelled"].found[0]
    assert cancelled.details["queue"] == "diag.doomed" and "connection 1" in cancelled.summary
    limit = recordings["channel-limit"].found[0]
    assert "channel_max (2)" in limit.summary
    lost = recordings["connection-lost"].found[0]
    assert lost.details["open_channels"] == [1] and lost.details["ended"] == "rst"
    if lost.details["tcp"]["rst_by"] is not None:  # the killed client reset TCP itself
        assert lost.details["blamed"] == "client" and lost.details["tcp"]["rst_by"] == "client"
    stalled = recordings["consumer-stalled"].found[0]
    assert stalled.details["prefetch"] == 3 and stalled.details["duration_s"] > 1.0
    # the first three publishes filled its prefetch; the other 17 waited
    assert stalled.details["published_meanwhile"] == 17 and stalled.details["released_at_close"] == 3
    assert "diag.stalled" in stalled.summary and "released when the channel closed" in stalled.summary
    poison = recordings["poison-message"].found[0]
    assert poison.details["requeues"] == 7 and "7 times" in poison.summary
    requeued = recordings["unacked-requeued"].found[0]
    assert requeued.details["released"] == 2 and requeued.details["redelivered"] == 2
    assert "connection 1" in requeued.summary


def test_sniff_shows_a_cause_as_it_happens(rabbitmq: PrivateBroker, tmp_path: Path) -> None:
    from test_sniff import Sniffer, _skip_unless_backend

    _skip_unless_backend("tcpdump")
    s = Sniffer(tmp_path, "-i", "lo", "--port", str(rabbitmq.port), "--format", "jsonl", "--diagnose",
                "--capture-backend", "tcpdump")  # fmt: skip
    try:
        login(rabbitmq)
        # the diagnosis is in the stream while the capture still runs, not only at the end
        s.wait_for(lambda r: r.get("kind") == "diagnosis" and r["cause"] == "login-refused", timeout=30)
        assert s.proc.poll() is None
    finally:
        rc = s.stop()
    assert rc == 0
    recs = s.records()
    d = next(r for r in recs if r.get("kind") == "diagnosis")
    close = next((r for r in recs if r.get("method") == "connection.close" and r["conn"] == d["conn"]), None)
    assert close is not None, [r for r in recs if r.get("kind") in ("diagnosis", "connection")]
    assert close["packet"] in d["packets"] and d["client"].startswith("127.0.0.1:")
    assert ", 1 causes;" in s.stderr  # the final summary line counts it


def test_report_cards_agree_with_a_stalled_consumer(recordings: dict[str, Recording], rabbitmq: PrivateBroker,
                                                    tmp_path: Path) -> None:  # fmt: skip
    from amqpscope.cli.main import cli
    from click.testing import CliRunner

    page = tmp_path / "stalled.html"
    res = CliRunner().invoke(cli, ["report", "--port", str(rabbitmq.port), "--stall-threshold", "1", "-o",
                                   str(page), str(recordings["consumer-stalled"].path)])  # fmt: skip
    assert res.exit_code == 0, res.output
    html = page.read_text()
    # its three deliveries were unacked when the channel closed: not "0 unacked"
    assert "<b>0 / 3</b>unacked at end / released by a close" in html
    assert "<b>consumer-stalled</b>" in html and html.index("<b>consumer-stalled</b>") < html.index("<h2>Over time")
    assert "<b>1</b>causes" in html

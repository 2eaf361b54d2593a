"""Violations sent to a real RabbitMQ with our own encoder, recorded on the loopback: the validator
finds each one at the offending frame and reports the broker's actual reaction.

This pins down, against the real broker, where RabbitMQ's reply code is the spec's and where it
is not (a heartbeat on a channel, a body overrunning its body-size: RabbitMQ 505, the spec 501)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from rawclient import RawClient

from amqpscope.capture import read_packets
from amqpscope.dissect.codec import get_codec
from amqpscope.dissect.wire import FRAME_BODY, FRAME_HEADER, FRAME_HEARTBEAT, encode_frame
from amqpscope.events import Finding
from amqpscope.pipeline import Options, decode_packets
from amqpscope.testing.broker import PrivateBroker

pytestmark = pytest.mark.broker


def _ack_unknown(c: RawClient) -> None:
    c.method(1, "basic.ack", delivery_tag=5)
    c.expect("channel.close")
    c.method(1, "channel.close-ok")


def _open_twice(c: RawClient) -> None:
    c.method(1, "channel.open")
    c.expect("connection.close")
    c.method(0, "connection.close-ok")


def _commit_untransacted(c: RawClient) -> None:
    c.method(1, "tx.commit")
    c.expect("channel.close")
    c.method(1, "channel.close-ok")


def _heartbeat_on_channel(c: RawClient) -> None:
    c.send(encode_frame(FRAME_HEARTBEAT, 1, b""))
    c.expect("connection.close")
    c.method(0, "connection.close-ok")


def _consumer_tag_reused(c: RawClient) -> None:
    c.method(1, "queue.declare", queue="", exclusive=True)
    q = c.expect("queue.declare-ok")["queue"]
    c.method(1, "basic.consume", queue=q, consumer_tag="tag")
    c.expect("basic.consume-ok")
    c.method(1, "basic.consume", queue=q, consumer_tag="tag")
    c.expect("connection.close")
    c.method(0, "connection.close-ok")


def _body_overrun(c: RawClient) -> None:
    # RabbitMQ notices only when the next frame arrives on the channel, and answers 505 (checklist)
    c.method(1, "basic.publish", routing_key="nowhere")
    c.send(encode_frame(FRAME_HEADER, 1, c.codec.encode_header(60, 3)) + encode_frame(FRAME_BODY, 1, b"four"))
    c.method(1, "basic.qos", prefetch_count=1)
    c.expect("connection.close")
    c.method(0, "connection.close-ok")


def _reserved_exchange(c: RawClient) -> None:
    c.method(1, "exchange.declare", exchange="amq.validator-test", type="direct")
    c.expect("channel.close")
    c.method(1, "channel.close-ok")


SCENARIOS: list[tuple[Callable[[RawClient], None], str, int, str]] = [
    (_ack_unknown, "basic.ack.multiple.exists", 406, "server sent channel.close 406 at packet {}: matches"),
    (_open_twice, "channel.open.state", 504, "server sent connection.close 504 at packet {}: matches"),
    (_commit_untransacted, "tx.commit.transacted", 406, "server sent channel.close 406 at packet {}: matches"),
    (_heartbeat_on_channel, "frame.heartbeat-channel", 501, "server sent connection.close 505 at packet {}: expected 501"),
    (_consumer_tag_reused, "basic.consume.consumer-tag.01", 530,
     "server sent connection.close 530 at packet {}: matches"),
    (_reserved_exchange, "exchange.declare.exchange.reserved", 403,
     "server sent channel.close 403 at packet {}: matches"),
    (_body_overrun, "content.body-size", 501, "server sent connection.close 505 at packet {}: expected 501"),
]  # fmt: skip


def test_violations_against_rabbitmq(rabbitmq: PrivateBroker, loopback_recorder: Any, tmp_path: Path) -> None:
    codec = get_codec()
    path = tmp_path / "live.pcap"
    with loopback_recorder(path, rabbitmq.port):
        for scenario, *_ in SCENARIOS:
            c = RawClient(rabbitmq.port, codec)
            try:
                c.handshake()
                c.method(1, "channel.open")
                c.expect("channel.open-ok")
                scenario(c)
            finally:
                c.drop()
            time.sleep(0.05)
    options = Options(ports=frozenset({rabbitmq.port}), validate=True)
    events = list(decode_packets(read_packets(path), codec, options))
    closes = {ev.conn: ev.packet for ev in events if getattr(ev, "method", None) in ("channel.close", "connection.close")
              and ev.dir == "s2c"}  # fmt: skip
    violations = [f for f in events if isinstance(f, Finding) and f.severity == "violation"]
    assert [(f.conn, f.rule, f.code) for f in violations] == [(i, rule, code) for i, (_, rule, code, _) in
                                                              enumerate(SCENARIOS)]  # fmt: skip
    for f, (_, _, _, reaction) in zip(violations, SCENARIOS, strict=True):
        assert f.peer_reaction == reaction.format(closes[f.conn])

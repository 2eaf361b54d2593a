"""Smoke test of the live-test infrastructure: private broker + loopback recorder."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from amqpscope.testing.broker import PrivateBroker
from amqpscope.testing.sniffer import LoopbackRecorder, RecorderError, count_amqp_frames

pika = pytest.importorskip("pika")

pytestmark = pytest.mark.broker

AMQP_0_9_1_HEADER = b"AMQP\x00\x00\x09\x01"


def test_broker_listens_on_loopback_only(rabbitmq: PrivateBroker) -> None:
    with socket.create_connection(("127.0.0.1", rabbitmq.port), timeout=5) as s:
        s.sendall(AMQP_0_9_1_HEADER)
        assert s.recv(1) == b"\x01"  # connection.start method frame
    listeners = rabbitmq.diagnostics("listeners").stdout
    assert f"127.0.0.1, port: {rabbitmq.port}" in listeners
    assert "[::]" not in listeners and "0.0.0.0" not in listeners


def test_users_and_vhosts(rabbitmq: PrivateBroker) -> None:
    users = rabbitmq.ctl("list_users").stdout
    assert "alice" in users and "guest" in users
    params = pika.ConnectionParameters(
        "127.0.0.1", rabbitmq.port, "scope", pika.PlainCredentials("alice", "s3cret"), heartbeat=0
    )
    conn = pika.BlockingConnection(params)
    try:
        ch = conn.channel()
        ch.queue_declare("alice.smoke", auto_delete=True)
    finally:
        conn.close()


def test_record_publish_consume(
    rabbitmq: PrivateBroker,
    loopback_recorder: Callable[[Path, int], LoopbackRecorder],
    tmp_path: Path,
) -> None:
    pcap = tmp_path / "smoke.pcap"
    try:
        recorder = loopback_recorder(pcap, rabbitmq.port)
        recorder.start()
    except RecorderError as exc:
        pytest.skip(f"cannot capture on lo: {exc}")
    try:
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", rabbitmq.port, heartbeat=0))
        ch = conn.channel()
        queue = ch.queue_declare("", exclusive=True).method.queue
        for i in range(3):
            ch.basic_publish("", queue, f"smoke {i}".encode(), pika.BasicProperties(content_type="text/plain"))
        got = []
        for method, _props, body in ch.consume(queue, inactivity_timeout=5):
            assert method is not None, "timed out waiting for a delivery"
            ch.basic_ack(method.delivery_tag)
            got.append(body)
            if len(got) == 3:
                break
        ch.cancel()
        conn.close()
    finally:
        recorder.stop()
    assert got == [b"smoke 0", b"smoke 1", b"smoke 2"]
    data = pcap.read_bytes()
    assert len(data) > 24, "empty pcap"
    assert AMQP_0_9_1_HEADER in data
    frames = count_amqp_frames(pcap)
    assert frames["protocol-header"] == 1
    assert frames["Basic.Publish"] == 3
    assert frames["Basic.Deliver"] == 3
    assert frames["bad-frame-end"] == 0

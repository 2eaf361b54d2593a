"""``amqpscope sniff --tls-keylog`` with a key log written while the capture runs, with real
components: the harness's private RabbitMQ TLS listener, pika TLS clients writing the NSS key log
(``SSLContext.keylog_filename``, what ``SSLKEYLOGFILE`` sets), the sniffer on lo through its capture
helper (and, for the first test, the in-process libpcap back end). Its frames must equal tshark's decryption of the sniffer's own ``-w`` file with the final
key log.

Records whose keys are not in the file yet are held (``Limits::tls_held_bytes`` per direction) and
opened when the keys come; to know that the sniffer has read a TLS connection's records before its
keys exist, a plain AMQP connection is made after them and the sniffer's output watched for its
close (the sniffer decodes packets in order).
"""

from __future__ import annotations

import json
import os
import ssl
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
from test_sniff import DUMPCAP, Sniffer, _closed_by_client
from test_tls import FrameKey, run_client, tshark_frames

from amqpscope import live
from amqpscope.testing.broker import PrivateBroker, rabbitmq_available

pytestmark = [
    pytest.mark.broker,
    pytest.mark.skipif(not rabbitmq_available(), reason="needs RabbitMQ"),
    pytest.mark.skipif(DUMPCAP is None or os.geteuid() != 0, reason="needs dumpcap and root to grant it capabilities"),
]

HELD_BOUND = 4 << 20  # Limits::tls_held_bytes (per direction)


@pytest.fixture(scope="module")
def tls_broker() -> Iterator[PrivateBroker]:
    with PrivateBroker(tls=True) as broker:
        yield broker


def records_frames(recs: list[dict[str, Any]], conns: set[int]) -> Counter[FrameKey]:
    """The sniffer's frames as tshark_frames keys."""
    got: Counter[FrameKey] = Counter()
    for r in recs:
        if r["kind"] == "frame" and r["conn"] in conns:
            cls = r["class_id"] if r["type"] in ("method", "header") else None
            got[(r["packet"], r["type"], r["channel"] or 0, cls, r["method_id"] if r["type"] == "method" else None)] += 1
    return got


def tls_conns(recs: list[dict[str, Any]], port: int) -> set[int]:
    return {r["conn"] for r in recs if r["kind"] == "tls" and r["server"] == f"127.0.0.1:{port}"}


def sniff(tmp: Path, broker: PrivateBroker, keys: Path, pcap: Path, backend: str = "auto") -> Sniffer:
    return Sniffer(tmp, "-i", "lo", "-f", f"tcp port {broker.tls_port} or tcp port {broker.port}", "--port",
                   str(broker.port), "--tls-keylog", str(keys), "--format", "jsonl", "--no-validate", "-w",
                   str(pcap), "--capture-backend", backend)  # fmt: skip


def _close_ok_of(port: int) -> Callable[[dict[str, Any]], bool]:
    """A predicate on the records in order: the close-ok frame of a connection to ``port``."""
    conns: set[int] = set()

    def seen(r: dict[str, Any]) -> bool:
        if r["kind"] == "connection" and r.get("server") == f"127.0.0.1:{port}":
            conns.add(r["conn"])
        return r["kind"] == "frame" and r.get("method") == "connection.close-ok" and r["conn"] in conns

    return seen


def plain_round_trip(sniffer: Sniffer, broker: PrivateBroker) -> None:
    """A plain connection, and its close printed: the sniffer has decoded every packet before it."""
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", broker.port, heartbeat=0))
    conn.channel()
    conn.close()
    sniffer.wait_for(_closed_by_client(broker.port))


def tls_connection(broker: PrivateBroker, keylog: Path) -> pika.BlockingConnection:
    assert broker.ca_file is not None
    ctx = ssl.create_default_context(cafile=str(broker.ca_file))
    ctx.keylog_filename = str(keylog)
    params = pika.ConnectionParameters("127.0.0.1", broker.tls_port, heartbeat=0,
                                       ssl_options=pika.SSLOptions(ctx, server_hostname="localhost"))  # fmt: skip
    return pika.BlockingConnection(params)


def publish(conn: pika.BlockingConnection, queue: str, bodies: list[bytes]) -> None:
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare(queue, auto_delete=True)
    for body in bodies:
        ch.basic_publish("", queue, body)


@pytest.mark.parametrize("backend", ["dumpcap", "libpcap"])
def test_sniff_decodes_a_client_writing_its_key_log_while_it_runs(tls_broker: PrivateBroker, tmp_path: Path,
                                                                  backend: str) -> None:  # fmt: skip
    if backend == "libpcap" and not live.libpcap_available():
        pytest.skip("libpcap is not installed")
    keys, pcap = tmp_path / "sslkeylog.txt", tmp_path / "live.pcapng"
    assert not keys.exists()  # the client creates it, as SSLKEYLOGFILE does
    sniffer = sniff(tmp_path, tls_broker, keys, pcap, backend)
    try:
        result = run_client(tls_broker, keys, "--messages", "6", tmp=tmp_path)
        sniffer.wait_for(lambda r: r["kind"] == "tls" and r["server"] == f"127.0.0.1:{tls_broker.tls_port}")
    finally:
        rc = sniffer.stop()
    assert rc == 0, sniffer.stderr
    assert "does not exist yet" in sniffer.stderr
    recs = sniffer.records()
    (tls,) = [r for r in recs if r["kind"] == "tls"]
    assert (tls["version"], tls["decrypted"], tls["reason"], tls["records_failed"]) == ("TLSv1.3", True, None, 0)
    conns = tls_conns(recs, tls_broker.tls_port)
    published = [r for r in recs if r["kind"] == "message" and r["method"] == "basic.publish" and r["conn"] in conns]
    assert len(published) == result[0]["published"] == 6
    assert records_frames(recs, conns) == tshark_frames(pcap, keys, tls_broker.tls_port)
    secrets = [ln.split()[2] for ln in keys.read_text().splitlines() if ln and not ln.startswith("#")]
    out = sniffer.out_path.read_text() + sniffer.stderr
    assert secrets and not any(s in out for s in secrets)


def keys_arrive_late(tls_broker: PrivateBroker, tmp_path: Path, pcap: Path, queue: str,
                     before: list[bytes]) -> tuple[list[dict[str, Any]], set[int], dict[str, Any], Path]:  # fmt: skip
    """A TLS session sniffed with a followed key log that stays empty while ``before`` is published
    (its records are read without keys), then gets the client's keys before five more publishes.
    Returns the records, the TLS connections, their one ``tls`` record and the client's key log."""
    private, keys = tmp_path / "client.keys", tmp_path / "followed.keys"
    sniffer = sniff(tmp_path, tls_broker, keys, pcap)
    try:
        conn = tls_connection(tls_broker, private)
        publish(conn, queue, before)
        plain_round_trip(sniffer, tls_broker)  # the records above were read, without their keys
        assert not tls_conns(sniffer.records(), tls_broker.tls_port)
        assert not any(r["kind"] == "frame" and r["server"] == f"127.0.0.1:{tls_broker.tls_port}"
                       for r in sniffer.records() if "server" in r)  # fmt: skip
        keys.write_text(private.read_text())  # the keys arrive
        publish(conn, queue, [b"after %d" % i for i in range(5)])
        conn.close()
        # the broker's close-ok decrypted. Not the connection's end: the broker may hold its side
        # of the TCP connection open for seconds after it (seen on this machine), and the sniffer
        # ends the connection, printing its tls record, when it stops if not before
        sniffer.wait_for(_close_ok_of(tls_broker.tls_port))
    finally:
        rc = sniffer.stop()
    assert rc == 0, sniffer.stderr
    recs = sniffer.records()
    (tls,) = [r for r in recs if r["kind"] == "tls"]
    return recs, tls_conns(recs, tls_broker.tls_port), tls, private


def test_sniff_opens_held_records_when_their_keys_arrive(tls_broker: PrivateBroker, tmp_path: Path) -> None:
    pcap = tmp_path / "held.pcapng"
    recs, conns, tls, private = keys_arrive_late(tls_broker, tmp_path, pcap, "amqpscope.held",
                                                 [b"before %d" % i for i in range(5)])  # fmt: skip
    assert (tls["decrypted"], tls["reason"], tls["records_lost"], tls["records_failed"]) == (True, None, 0, 0)
    bodies = [r for r in recs if r["kind"] == "message" and r["conn"] in conns and r["method"] == "basic.publish"]
    assert len(bodies) == 10 and all(m["complete"] for m in bodies)
    frames = [r for r in recs if r["kind"] == "frame" and r["conn"] in conns]
    assert frames[0]["method"] == "connection.start"  # from the first record on
    assert records_frames(recs, conns) == tshark_frames(pcap, private, tls_broker.tls_port)


def test_sniff_reports_records_past_the_held_bound(tls_broker: PrivateBroker, tmp_path: Path) -> None:
    big = 256 * 1024
    n_before = HELD_BOUND // big + 4  # a megabyte more than may be held for the client's direction
    pcap = tmp_path / "bound.pcapng"
    recs, conns, tls, private = keys_arrive_late(tls_broker, tmp_path, pcap, "amqpscope.bound",
                                                 [bytes([65 + i]) * big for i in range(n_before)])  # fmt: skip
    assert tls["decrypted"] and tls["records_lost"] > 0
    assert tls["reason"] == "records not kept while waiting for their keys (held-records bound)"
    ours = [r for r in recs if r["conn"] in conns]
    (bad,) = [r for r in ours if r["kind"] == "malformed"]
    assert bad["dir"] == "c2s" and bad["reason"].startswith(f"tls: {tls['records_lost']} records not kept")
    assert [r for r in ours if r["kind"] == "gap" and r["dir"] == "c2s"]
    # what was held decrypted; after the dropped records decoding goes on to the clean close
    pubs = [r for r in ours if r["kind"] == "message" and r["method"] == "basic.publish"]
    assert 0 < sum(m["complete"] for m in pubs) < n_before + 5
    assert [m["body_size"] for m in pubs if m["complete"]][-5:] == [len(b"after 0")] * 5
    closes = [r for r in ours if r["kind"] == "connection" and r["state"] == "close"]
    assert closes and closes[0]["ended"] == "connection.close"
    # every frame decoded is one tshark decodes from the same packets
    live = records_frames(recs, conns)
    assert not live - tshark_frames(pcap, private, tls_broker.tls_port)
    stats = json.dumps(recs)
    assert private.read_text().split()[-1] not in stats

"""The validator on real traffic: the shared captures, the recorded samples and damaged variants.

Every finding below was judged by reading the capture (``amqpscope decode -V``):

* violations — only the ones the capture scripts provoked on purpose: AMQPStorm's tx.commit on a
  non-transactional channel (s03), and in s09 pika's ack of an unknown delivery tag, a publish to
  a missing exchange, a passive declare of another connection's exclusive queue. The broker
  closes the channel with exactly the code the spec names each time (peer reaction "matches").
  s09's other errors (passive declare of a missing queue, an inequivalent redeclare, refused
  permissions, a refused vhost, a wrong password) are the server applying its rules, not a peer
  breaking one, and produce no violation.
* deviations — what real clients and RabbitMQ do against the letter of the spec and accept from
  each other: reply-code 0 / empty reply-text on a normal close (pika's channel.close, AMQPStorm's
  and py-amqp's connection.close, aiormq's channel.close text); RabbitMQ's connection.close during
  the handshake (403 wrong password, 530 refused vhost) where the spec says to drop the socket;
  pika dropping TCP instead of answering the server's connection.close (403, 530, 320) and
  rabbitmq-c resetting TCP instead of answering a channel.close 403 (s11).
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from amqpscope.capture import read_packets
from amqpscope.dissect.codec import get_codec
from amqpscope.events import Finding
from amqpscope.pipeline import Options, decode_packets
from tests import variants

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
V, D, W = "violation", "deviation", "warning"
RES = (W, "field.reserved")  # pika and rabbitmq-c: connection.open insist=1; pamqp: channel.open reserved-1 "0"
CODE0, TEXT0 = "channel.close.reply-code.assert-notnull", "channel.close.reply-text.assert-notnull"
CCODE0, CTEXT0 = "connection.close.reply-code.assert-notnull", "connection.close.reply-text.assert-notnull"

EXPECTED: dict[str, dict[tuple[str, str], int]] = {
    "s01_pika_topology.pcap": {(D, CODE0): 1, RES: 1},
    # pika's ioloop stopped without connection.close; the broker reset the socket 30 s later
    "s02_pika_confirms.pcap": {(D, CODE0): 1, RES: 1, (W, "connection.close.missing"): 1},
    "s03_amqpstorm_tx.pcap": {(V, "tx.commit.transacted"): 1, (D, TEXT0): 1, (D, CCODE0): 1, (D, CTEXT0): 1, RES: 2},
    "s04_pika_consumer_acks.pcap": {(D, CODE0): 3, RES: 1},
    "s05_pika_large_bodies.pcap": {(D, CODE0): 2, RES: 2},
    "s06_pika_rich_properties.pcap": {(D, CODE0): 1, RES: 1},
    "s07_pika_many_channels.pcap": {(D, CODE0): 37, RES: 5},
    "s08_pika_heartbeat.pcap": {(D, CODE0): 1, RES: 1},
    "s09_pika_errors.pcap": {(V, "basic.ack.multiple.exists"): 1, (V, "basic.publish.exchange.must-exist"): 1,
                             (V, "queue.declare.exclusive.exclusive"): 1, (D, "connection.close-ok.missing"): 3,
                             (D, "connection.close.handshake"): 2, (D, CODE0): 1, RES: 5},
    "s10_pika_blocked.pcap": {(D, CODE0): 1, RES: 1},
    "s11_amqptools_basic.pcap": {(D, "channel.close-ok.missing"): 1, RES: 16},
    "s12_amqptools_port5673.pcap": {RES: 11},
    "s13_kombu_simple_queue.pcap": {(D, CODE0): 1, (D, TEXT0): 1, (D, CCODE0): 1, (D, CTEXT0): 1},
    "s14_aiopika_rpc.pcap": {(D, TEXT0): 3, RES: 3},
    "confirms.pcap": {(D, CODE0): 1, RES: 1},
    "errors.pcap": {(D, CODE0): 1, (D, "connection.close-ok.missing"): 1, (D, "connection.close.handshake"): 1, RES: 2},
    "hello.pcap": {(D, CODE0): 1, RES: 1},
}
_OPTIONS = Options(ports=frozenset({5672, 5673, 25672}), keep_bodies=False, validate=True)


def _findings(path: Path | str) -> list[Finding]:
    return [ev for ev in decode_packets(read_packets(path), get_codec(), _OPTIONS) if isinstance(ev, Finding)]


def _path(name: str, captures_dir: Path) -> Path:
    return (SAMPLES if name[0] != "s" or not name[1].isdigit() else captures_dir) / name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_findings_on_real_captures(name: str, captures_dir: Path) -> None:
    found = _findings(_path(name, captures_dir))
    got = Counter((f.severity, f.rule) for f in found)
    assert dict(got) == EXPECTED[name], "\n".join(f"{f.severity} {f.rule} #{f.packet}: {f.message}" for f in found)
    for f in found:
        if f.severity == V:  # every real violation was answered by the broker with the spec's code
            assert f.peer_reaction is not None and f.peer_reaction.endswith("matches"), f


def test_s09_violations_point_at_the_offending_packets(captures_dir: Path) -> None:
    found = {f.rule: f for f in _findings(captures_dir / "s09_pika_errors.pcap") if f.severity == V}
    ack = found["basic.ack.multiple.exists"]
    assert (ack.packet, ack.channel, ack.code) == (46, 2, 406)
    assert found["basic.publish.exchange.must-exist"].packets == (30, 34)  # the publish and the 404 close
    assert found["queue.declare.exclusive.exclusive"].conn == 1


def _damaged(src: Path, dst: Path, rnd: random.Random) -> list[Path]:
    """Mid-stream starts and dropped data packets (byte-preserving variants)."""
    n = sum(1 for _ in read_packets(src))
    data = [i for i, _ in variants.data_packets(src)]
    out = []
    for k in range(3):
        p = dst / f"cut{k}.pcap"
        variants.cut_first(src, p, rnd.randrange(1, n // 2))
        out.append(p)
        p = dst / f"drop{k}.pcap"
        variants.drop_packets(src, p, rnd.sample(data, 2))
        out.append(p)
    return out


@pytest.mark.parametrize("name", ["s04_pika_consumer_acks.pcap", "s09_pika_errors.pcap", "s13_kombu_simple_queue.pcap",
                                  "s14_aiopika_rpc.pcap"])  # fmt: skip
def test_no_new_violations_after_gaps_and_mid_stream_starts(name: str, captures_dir: Path, tmp_path: Path) -> None:
    """What a gap or a missing start hides is not judged: a damaged capture has no violation the
    intact one does not have (capture order across the two directions is trusted, see docs)."""
    src = captures_dir / name
    allowed = Counter(f.rule for f in _findings(src) if f.severity == V)
    for variant in _damaged(src, tmp_path, random.Random(name)):
        got = Counter(f.rule for f in _findings(variant) if f.severity == V)
        assert not got - allowed, (variant.name, got - allowed)

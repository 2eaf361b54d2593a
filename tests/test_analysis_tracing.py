"""Tracing across connections: publish → deliveries, fan-out, and RPC pairs (s14, s01, s07)."""

from __future__ import annotations

from pathlib import Path

import amqpscope
from amqpscope.events import C2S, S2C, Message

from .analysis_events import Script, capture_report


def test_s14_rpc_pairs_by_correlation_id(captures_dir: Path) -> None:
    tr = capture_report("s14_aiopika_rpc.pcap")["tracing"]
    rpc = tr["rpc"]
    # README: 10 calls replying to an amq.gen queue and 5 through direct reply-to; every one answered
    assert (rpc["requests"], rpc["direct_reply_to"], rpc["replied"], rpc["completed"], rpc["unanswered"]) == (
        15, 5, 15, 15, 0)  # fmt: skip
    # the pairs, found independently: each request publish and the reply publish with its correlation-id
    requests: dict[str, tuple[int, int, str]] = {}
    replies: dict[str, tuple[int, int]] = {}
    for ev in amqpscope.read(captures_dir / "s14_aiopika_rpc.pcap"):
        if isinstance(ev, Message) and ev.method == "basic.publish":
            cid = ev.properties.get("correlation_id")
            if ev.properties.get("reply_to"):
                requests[cid] = (ev.conn, ev.first_packet, ev.properties["reply_to"])
            else:
                replies[cid] = (ev.conn, ev.first_packet)
    assert len(requests) == 15 and set(requests) == set(replies)
    pairs = {p["correlation_id"]: p for p in rpc["pairs"]}
    assert set(pairs) == set(requests)
    for cid, p in pairs.items():
        assert (p["request_conn"], p["request_packet"], p["reply_to"]) == requests[cid]
        assert (p["reply_conn"], p["reply_packet"]) == replies[cid]
        assert 0 <= p["service_ms"] <= p["round_trip_ms"]
    assert sum(p["reply_to"] == "amq.rabbitmq.reply-to" for p in pairs.values()) == 5
    assert sum(p["reply_to"].startswith("amq.gen-") for p in pairs.values()) == 10
    # all 30 deliveries are of publishes made on the other connection
    m = tr["messages"]
    assert (m["matched_deliveries"], m["cross_connection"], m["unmatched_deliveries"]) == (30, 30, 0)


def test_fanout_accounts_for_every_publish_and_delivery() -> None:
    # s01: 21 publishes, 26 deliveries, all consumed on one channel (a fanout reaches two queues)
    m = capture_report("s01_pika_topology.pcap")["tracing"]["messages"]
    fanout = {int(k): v for k, v in m["fanout"].items()}
    assert sum(fanout.values()) == 21
    assert sum(k * v for k, v in fanout.items()) == m["matched_deliveries"] == 26
    assert max(fanout) >= 2 and m["unmatched_deliveries"] == 0
    # s07: 4 threads publish to a shared queue that the first connection consumes
    m7 = capture_report("s07_pika_many_channels.pcap")["tracing"]["messages"]
    assert (m7["matched_deliveries"], m7["fanout"]) == (270, {"1": 270})
    assert 0 < m7["cross_connection"] < 270
    lat = m7["publish_to_deliver_ms"]
    assert lat["count"] == 270 and lat["min"] >= 0


def test_fanout_to_consumers_on_one_channel_and_another_connection() -> None:
    s = Script()
    s.handshake(conn=0)
    s.handshake(conn=1)
    s.message(C2S, "basic.publish", conn=0, body=b"news", exchange="fan", routing_key="")
    for conn, channel, ctag in ((1, 1, "q1"), (1, 1, "q2"), (0, 2, "q3")):
        s.message(S2C, "basic.deliver", channel=channel, conn=conn, body=b"news", consumer_tag=ctag,
                  delivery_tag=1, redelivered=False, exchange="fan", routing_key="")  # fmt: skip
    s.message(S2C, "basic.deliver", channel=1, conn=1, body=b"other", consumer_tag="q1", delivery_tag=2,
              redelivered=False, exchange="fan", routing_key="")  # fmt: skip
    m = s.report()["tracing"]["messages"]
    assert m["fanout"] == {"3": 1}
    assert (m["matched_deliveries"], m["cross_connection"], m["unmatched_deliveries"]) == (3, 2, 1)


def test_message_id_beats_the_body_hash() -> None:
    s = Script()
    s.handshake()
    s.message(C2S, "basic.publish", body=b"a", properties={"message_id": "m-1"}, exchange="", routing_key="q")
    s.message(C2S, "basic.publish", body=b"a", properties={"message_id": "m-2"}, exchange="", routing_key="q")
    # delivered with a different body (a plugin rewrote it): still m-2 by its id
    s.message(S2C, "basic.deliver", body=b"b", properties={"message_id": "m-2"}, consumer_tag="c", delivery_tag=1,
              redelivered=False, exchange="", routing_key="q")  # fmt: skip
    m = s.report()["tracing"]["messages"]
    assert m["matched_deliveries"] == 1 and m["fanout"] == {"0": 1, "1": 1}


def test_an_rpc_request_without_reply_is_listed() -> None:
    s = Script()
    s.handshake()
    s.message(C2S, "basic.publish", properties={"correlation_id": "c-9", "reply_to": "amq.gen-x"}, exchange="",
              routing_key="rpc")  # fmt: skip
    rpc = s.report()["tracing"]["rpc"]
    assert (rpc["requests"], rpc["unanswered"]) == (1, 1)
    assert rpc["unanswered_list"][0]["state"] == "no reply published"

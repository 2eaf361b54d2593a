"""Consumer delivery ledger: real captures (s03, s04, s06, s09) and hand-made edge cases."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

import amqpscope
from amqpscope.analysis import analyse
from amqpscope.dissect.codec import get_codec
from amqpscope.events import S2C

from .analysis_events import Script, capture_report, codec_handshake, synthetic_pcap
from .variants import cut_first


def _oracle(captures_dir: Path, name: str, method: str) -> tuple[int, int]:
    with open(captures_dir / f"{name}.tshark.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["name"] == method and r["dir"] == "C2S"]
    return len(rows), sum(r["multiple"] == "1" for r in rows)


def test_s04_acks_rejects_nacks_prefetch_and_recover(captures_dir: Path) -> None:
    r = capture_report("s04_pika_consumer_acks.pcap")
    d = r["deliveries"]
    name = "s04_pika_consumer_acks.pcap"
    # README: Basic.Ack(C2S) 7 (3 multiple), Basic.Nack(C2S) 2 (1 multiple), Basic.Reject 6,
    # Basic.Deliver 30, Basic.Get-Ok 6, basic.qos prefetch=5, basic.recover x2
    assert (d["ack_frames"], d["ack_multiple"]) == (7, 3) == _oracle(captures_dir, name, "Basic.Ack")
    assert (d["nack_frames"], d["nack_multiple"]) == (2, 1) == _oracle(captures_dir, name, "Basic.Nack")
    assert d["reject_frames"] == 6
    assert (d["via_deliver"], d["via_get"], d["delivered"]) == (30, 6, 36)
    # Settled, from the CSV's tags: ack 1; ack 3 multiple (2, 3); reject 4; nack 5 requeue; nack
    # 10 multiple requeue (6-10); 11-15 voided by recover; ack 20 multiple (16-20); ack 25 multiple
    # (21-25); reject 26..30 requeue; get-ok 31-36 of which 32, 34, 36 no-ack and 31, 33, 35 acked.
    assert d["acked"] == 1 + 2 + 5 + 5 + 3
    assert d["nacked"] == 1 + 5
    assert d["rejected"] == 1 + 5
    assert d["requeued"] == 1 + 5 + 5
    assert d["recovered"] == 5 and d["no_ack"] == 3
    assert d["redelivered"] == 16  # tshark: 16 deliveries/get-oks with redelivered=1
    assert d["outstanding"] == 0 and d["bad_acks"] == [] and d["server_cancels"] == 1
    ch1 = next(c for c in d["per_channel"] if c["channel"] == 1)
    assert ch1["prefetch"] == 5 and ch1["max_in_flight"] == 5 and d["over_prefetch"] == 0
    assert ch1["time_at_prefetch_limit_s"] > 0
    worker = next(c for c in d["consumers"] if c["consumer_tag"] == "capgen-worker")
    assert (worker["prefetch"], worker["delivered"], worker["max_in_flight"]) == (5, 30, 5)
    lat = d["latency_ms"]
    assert lat["count"] == d["acked"] + d["nacked"] + d["rejected"]
    rec = r["rpc"]["basic.recover"]
    assert (rec["count"], rec["answered"], rec["unanswered"]) == (2, 2, 0)


def test_s03_rollback_undoes_an_ack_and_recover_requeues_it() -> None:
    d = capture_report("s03_amqpstorm_tx.pcap")["deliveries"]
    # README: Basic.Ack(C2S) 5, Get-Ok 6; the ack of tag 2 is rolled back, recover requeues it and
    # it comes back as tag 3 with redelivered=1; the last get is no-ack
    assert (d["ack_frames"], d["via_get"], d["no_ack"]) == (5, 6, 1)
    assert (d["acked"], d["rolled_back"], d["recovered"], d["redelivered"]) == (4, 1, 1, 1)
    assert d["outstanding"] == 0 and d["bad_acks"] == []


def test_s09_unknown_delivery_tag_is_reported() -> None:
    r = capture_report("s09_pika_errors.pcap")
    bad = r["deliveries"]["bad_acks"]
    assert [(b["method"], b["delivery_tag"], b["problem"]) for b in bad] == [("basic.ack", 999, "unknown tag")]
    assert r["reply_codes"]["channel.close 406"] == 2  # the broker's answer to it (and to the redeclare)


def test_s06_cancel_rejects_buffered_deliveries() -> None:
    d = capture_report("s06_pika_rich_properties.pcap")["deliveries"]
    # README: Basic.Deliver 7, Get-Ok 2, Basic.Reject 4 (requeue=1), Basic.Ack 3
    assert (d["via_deliver"], d["via_get"], d["reject_frames"], d["ack_frames"]) == (7, 2, 4, 3)
    assert (d["rejected"], d["requeued"], d["acked"], d["outstanding"]) == (4, 4, 3, 0)


# --- hand-made sequences -------------------------------------------------------------------------


def _consumer(s: Script, channel: int = 1, tag: str = "ctag", prefetch: int | None = None, conn: int = 0,
              no_ack: bool = False, global_: bool = False) -> None:  # fmt: skip
    s.c("channel.open", channel, conn)
    s.s("channel.open-ok", channel, conn)
    if prefetch is not None:
        s.c("basic.qos", channel, conn, prefetch_count=prefetch, prefetch_size=0, global_=global_)
        s.s("basic.qos-ok", channel, conn)
    s.c("basic.consume", channel, conn, queue="q", consumer_tag=tag, no_ack=no_ack, no_wait=False)
    s.s("basic.consume-ok", channel, conn, consumer_tag=tag)


def _deliver(s: Script, tag: int, channel: int = 1, ctag: str = "ctag", ts: float | None = None,
             conn: int = 0) -> None:  # fmt: skip
    s.s("basic.deliver", channel, conn, ts, consumer_tag=ctag, delivery_tag=tag, redelivered=False,
        exchange="", routing_key="q")  # fmt: skip


def _run(s: Script) -> dict[str, Any]:
    return s.report()["deliveries"]  # type: ignore[no-any-return]


def test_double_ack() -> None:
    s = Script()
    s.handshake()
    _consumer(s)
    _deliver(s, 1)
    s.c("basic.ack", delivery_tag=1, multiple=False)
    s.c("basic.ack", delivery_tag=1, multiple=False)
    d = _run(s)
    assert (d["acked"], d["double_ack"], d["unknown_tag"], d["wrong_channel"]) == (1, 1, 0, 0)
    assert d["bad_acks"][0]["problem"] == "already settled"


def test_ack_on_the_wrong_channel_and_who_holds_the_unacked() -> None:
    s = Script()
    s.handshake()
    _consumer(s, channel=1, tag="worker-1")
    _consumer(s, channel=2, tag="worker-2")
    _deliver(s, 1, channel=1, ctag="worker-1")
    s.c("basic.ack", channel=2, delivery_tag=1, multiple=False)
    d = _run(s)  # the capture ends with tag 1 still unacked on channel 1
    assert d["wrong_channel"] == 1
    assert d["bad_acks"][0]["problem"] == "wrong channel (outstanding on channel 1)"
    assert d["outstanding"] == 1 and d["unacked_by_consumer"] == {"0/1/worker-1": 1}
    (u,) = d["unacked"]
    assert (u["channel"], u["delivery_tag"], u["consumer_tag"], u["fate"]) == (1, 1, "worker-1", "open at end")


def test_delivery_tag_zero_with_multiple_acks_all_and_is_fine_when_empty() -> None:
    s = Script()
    s.handshake()
    _consumer(s)
    for tag in (1, 2, 3):
        _deliver(s, tag)
    s.c("basic.ack", delivery_tag=0, multiple=True)
    s.c("basic.ack", delivery_tag=0, multiple=True)  # nothing left: RabbitMQ accepts this
    d = _run(s)
    assert (d["acked"], d["outstanding"], d["bad_acks"]) == (3, 0, [])


def test_multiple_needs_its_own_tag_outstanding() -> None:
    # RabbitMQ's collect_acks: ack(2, multiple) after tag 2 was acked alone is "unknown delivery tag"
    s = Script()
    s.handshake()
    _consumer(s)
    for tag in (1, 2, 3):
        _deliver(s, tag)
    s.c("basic.ack", delivery_tag=2, multiple=False)
    s.c("basic.ack", delivery_tag=2, multiple=True)
    s.c("basic.ack", delivery_tag=3, multiple=True)  # settles 1 and 3
    s.c("basic.ack", delivery_tag=7, multiple=False)
    d = _run(s)
    assert (d["acked"], d["double_ack"], d["unknown_tag"], d["outstanding"]) == (3, 1, 1, 0)


def test_in_flight_against_prefetch_over_time() -> None:
    s = Script()
    s.handshake()
    _consumer(s, prefetch=2)
    _deliver(s, 1, ts=1_100.0)
    _deliver(s, 2, ts=1_100.1)  # at the limit from here
    s.c("basic.ack", delivery_tag=1, multiple=False, ts=1_100.6)  # 0.5 s at the limit
    _deliver(s, 3, ts=1_100.7)  # at the limit again
    _deliver(s, 4, ts=1_100.8)  # beyond it: the broker should not have sent this
    s.c("basic.ack", delivery_tag=4, multiple=True, ts=1_101.0)
    s.c("channel.close", reply_code=200, reply_text="")
    s.s("channel.close-ok")
    d = _run(s)
    (ch,) = d["per_channel"]
    assert ch["prefetch"] == 2 and ch["max_in_flight"] == 3 and ch["over_prefetch"] == 1
    assert ch["time_at_prefetch_limit_s"] == pytest.approx(0.5 + 0.3, abs=1e-6)
    assert d["latency_ms"]["count"] == 4
    assert d["latency_ms"]["max"] == pytest.approx(900.0, abs=1e-3)  # tag 2: 1100.1 → 1101.0
    assert d["latency_ms"]["min"] == pytest.approx(200.0, abs=1e-3)  # tag 4: 1100.8 → 1101.0


def test_global_prefetch_is_shared_and_late_qos_does_not_limit_a_running_consumer() -> None:
    s = Script()
    s.handshake()
    _consumer(s, channel=1, tag="a", prefetch=2, global_=True)
    s.c("basic.consume", 1, queue="q2", consumer_tag="b", no_ack=False, no_wait=False)
    s.s("basic.consume-ok", 1, consumer_tag="b")
    _deliver(s, 1, ctag="a")
    _deliver(s, 2, ctag="b")
    _deliver(s, 3, ctag="b")  # third delivery on a channel limited to 2
    _consumer(s, channel=2, tag="c")
    s.c("basic.qos", 2, prefetch_count=1, prefetch_size=0, global_=False)  # after the consume
    s.s("basic.qos-ok", 2)
    for tag in (1, 2, 3):
        _deliver(s, tag, channel=2, ctag="c")
    d = _run(s)
    by_ch = {c["channel"]: c for c in d["per_channel"]}
    assert by_ch[1]["global_prefetch"] == 2 and by_ch[1]["over_prefetch"] == 1
    assert by_ch[2]["prefetch"] == 1 and "over_prefetch" not in by_ch[2]  # RabbitMQ: new consumers only
    assert d["outstanding"] == 6


def test_recover_voids_the_tags() -> None:
    s = Script()
    s.handshake()
    _consumer(s)
    _deliver(s, 1)
    _deliver(s, 2)
    s.c("basic.recover", requeue=True)
    s.s("basic.recover-ok")
    s.c("basic.ack", delivery_tag=1, multiple=False)  # a voided tag: 406 unknown delivery tag
    d = _run(s)
    assert (d["recovered"], d["acked"], d["double_ack"], d["outstanding"]) == (2, 0, 1, 0)


def test_rollback_keeps_the_delivery_unacked() -> None:
    s = Script()
    s.handshake()
    _consumer(s)
    s.c("tx.select")
    s.s("tx.select-ok")
    _deliver(s, 1)
    _deliver(s, 2)
    s.c("basic.ack", delivery_tag=1, multiple=False)
    s.c("tx.rollback")
    s.s("tx.rollback-ok")
    s.c("basic.ack", delivery_tag=2, multiple=False)
    s.c("tx.commit")
    s.s("tx.commit-ok")
    d = _run(s)
    assert (d["acked"], d["rolled_back"], d["outstanding"]) == (1, 1, 1)
    assert d["unacked"][0]["delivery_tag"] == 1


def test_nack_multiple_requeue_and_channel_close_release() -> None:
    s = Script()
    s.handshake()
    _consumer(s)
    for tag in (1, 2, 3, 4):
        _deliver(s, tag)
    s.c("basic.nack", delivery_tag=2, multiple=True, requeue=True)
    s.c("basic.reject", delivery_tag=3, requeue=False)
    s.c("channel.close", reply_code=200, reply_text="")
    s.s("channel.close-ok")
    d = _run(s)
    assert (d["nacked"], d["rejected"], d["requeued"], d["nack_multiple"]) == (2, 1, 2, 1)
    assert (d["released_at_close"], d["outstanding"]) == (1, 0)
    assert d["unacked"][0]["fate"] == "released: channel closed"


def test_no_ack_consumers_and_gets_have_nothing_to_settle() -> None:
    s = Script()
    s.handshake()
    _consumer(s, no_ack=True)
    _deliver(s, 1)
    s.c("basic.get", queue="q", no_ack=True)
    s.s("basic.get-ok", delivery_tag=2, redelivered=True, exchange="", routing_key="q", message_count=0)
    s.c("basic.get", queue="q", no_ack=False)
    s.s("basic.get-empty")
    d = _run(s)
    assert (d["delivered"], d["no_ack"], d["redelivered"], d["outstanding"]) == (2, 2, 1, 0)


def test_double_ack_through_the_whole_pipeline(tmp_path: Path) -> None:
    codec = get_codec()
    frames = [
        *codec_handshake(),
        (True, codec.method_frame(1, "basic.consume", queue="q", consumer_tag="c1")),
        (False, codec.method_frame(1, "basic.consume-ok", consumer_tag="c1")),
        (False, codec.method_frame(1, "basic.deliver", consumer_tag="c1", delivery_tag=1, exchange="",
                                   routing_key="q") + codec.content_frames(1, b"one")),
        (True, codec.method_frame(1, "basic.ack", delivery_tag=1)),
        (True, codec.method_frame(1, "basic.ack", delivery_tag=1)),
    ]  # fmt: skip
    d = analyse(amqpscope.read(synthetic_pcap(tmp_path / "double.pcap", frames))).report()["deliveries"]
    assert (d["delivered"], d["acked"], d["double_ack"]) == (1, 1, 1)
    assert d["bad_acks"][0]["packet"] > 0


def test_server_cancel_is_counted() -> None:
    s = Script()
    s.handshake()
    _consumer(s)
    s.method(S2C, "basic.cancel", 1, 0, None, consumer_tag="ctag", no_wait=True)
    assert _run(s)["server_cancels"] == 1


def test_a_capture_that_starts_mid_channel_blames_nobody(captures_dir: Path, tmp_path: Path) -> None:
    # s04 from packet 105 on: the reject of tag 4 and the nack of tag 5 settle deliveries made
    # before the capture started, which is not a double ack
    cut = tmp_path / "s04-mid.pcap"
    cut_first(captures_dir / "s04_pika_consumer_acks.pcap", cut, 104)
    d = analyse(amqpscope.read(cut)).report()["deliveries"]
    assert d["before_capture"] == 2 and d["bad_acks"] == []
    assert d["double_ack"] == d["unknown_tag"] == d["wrong_channel"] == 0


def test_connection_keyed_dict_finds_a_connections_keys() -> None:
    from amqpscope.analysis.common import ConnKeyed

    d: ConnKeyed[tuple[int, int], str] = ConnKeyed()
    d[(1, 2)] = "a"
    d[(1, 1)] = "b"
    d[(2, 1)] = "c"
    d.setdefault((3, 1), "d")
    assert d.keys_of(1) == [(1, 1), (1, 2)] and d.conns() == [1, 2, 3]
    del d[(1, 1)]
    assert d.pop((1, 2)) == "a" and d.pop((1, 2), None) is None
    assert d.keys_of(1) == [] and d.conns() == [2, 3] and dict(d) == {(2, 1): "c", (3, 1): "d"}


def test_many_concurrent_connections_end_independently() -> None:
    s = Script()
    n = 2000
    for conn in range(n):
        _consumer(s, conn=conn, tag=f"c{conn}")
        _deliver(s, 1, ctag=f"c{conn}", conn=conn)
    for conn in range(n):
        if conn % 2:
            s.c("basic.ack", conn=conn, delivery_tag=1, multiple=False)
        s.end(conn=conn, ended="fin")
    d = _run(s)
    assert (d["delivered"], d["acked"], d["released_at_close"], d["outstanding"]) == (n, n // 2, n // 2, 0)

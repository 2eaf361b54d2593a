"""Request/response pairing of synchronous methods: real captures and hand-made sequences."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import pytest

from amqpscope.dissect.codec import get_codec
from amqpscope.dissect.errata import request_table

from .analysis_events import Script, capture_report
from .oracle import request_latencies


def test_every_synchronous_request_of_s02_and_s04_is_answered(captures_dir: Path) -> None:
    for name in ("s02_pika_confirms.pcap", "s04_pika_consumer_acks.pcap"):
        r = capture_report(name)
        assert r["rpc_unanswered"] == [] and r["rpc_unexpected_replies"] == {}
        # request → reply times from the packets' timestamps and the oracle's frame numbers
        want = request_latencies(captures_dir, name)
        assert set(want) == {m for m, st in r["rpc"].items() if st["answered"]}
        for method, st in r["rpc"].items():
            assert st["unanswered"] == 0 and st["closed_by_peer"] == 0, (name, method)
            assert st["answered"] + st["no_wait"] == st["count"], (name, method)
            if st["answered"]:
                lat = sorted(want[method])
                assert st["answered"] == len(lat), (name, method)
                assert st["latency_ms"]["max"] == pytest.approx(lat[-1] * 1000, abs=2e-3), (name, method)
                assert st["latency_ms"]["p50"] == pytest.approx(_median(lat) * 1000, abs=2e-3), (name, method)


def _median(values: list[float]) -> float:
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def test_rpc_counts_follow_the_tshark_oracle(captures_dir: Path) -> None:
    """Every request the oracle counts is counted, per method (s04: recover paired by hand)."""
    with open(captures_dir / "s04_pika_consumer_acks.pcap.tshark.csv", newline="") as fh:
        names = Counter(r["name"] for r in csv.DictReader(fh))
    rpc = capture_report("s04_pika_consumer_acks.pcap")["rpc"]
    for method, st in rpc.items():
        cls, meth = method.split(".")
        assert st["count"] == names[f"{cls.title()}.{meth.title()}"], method
    assert rpc["basic.recover"]["answered"] == names["Basic.Recover-Ok"] == 2
    assert rpc["basic.get"]["answered"] == names["Basic.Get-Ok"] + names["Basic.Get-Empty"] == 8
    # one client cancel answered by cancel-ok; the server's own cancel (no-wait) expects nothing
    assert (rpc["basic.cancel"]["answered"], rpc["basic.cancel"]["no_wait"]) == (1, 1)


def test_s09_errors_answer_requests_with_closes() -> None:
    r = capture_report("s09_pika_errors.pcap")
    rpc = r["rpc"]
    # 404 passive declare, 406 redeclare, 405 exclusive, 403 refused name: answered by channel.close
    assert (rpc["queue.declare"]["count"], rpc["queue.declare"]["answered"], rpc["queue.declare"]["closed_by_peer"]) \
        == (7, 3, 4)  # fmt: skip
    # alice on 'private': connection.open answered by connection.close 530
    assert (rpc["connection.open"]["answered"], rpc["connection.open"]["closed_by_peer"]) == (4, 1)
    # pika answers none of the broker's connection.close (530, 403, 320): Connection.Close-Ok 3 of 6
    assert (rpc["connection.close"]["count"], rpc["connection.close"]["answered"]) == (6, 3)
    assert rpc["connection.close"]["unanswered"] == 3
    outcomes = Counter((u["method"], u["dir"], u["outcome"]) for u in r["rpc_unanswered"])
    assert outcomes == {
        ("queue.declare", "c2s", "channel.close by peer"): 4,
        ("connection.open", "c2s", "connection.close by peer"): 1,
        ("connection.close", "s2c", "no reply (connection ended)"): 3,
    }
    assert r["rpc_unanswered_total"] == 8


def test_s03_commit_on_a_non_transactional_channel() -> None:
    tx = capture_report("s03_amqpstorm_tx.pcap")["rpc"]["tx.commit"]
    assert (tx["count"], tx["answered"], tx["closed_by_peer"]) == (6, 5, 1)  # Tx.Commit 6, Commit-Ok 5


def test_latency_pipelining_no_wait_and_the_end_of_the_capture() -> None:
    s = Script()
    s.handshake()
    s.c("channel.open", ts=1_100.000)
    s.s("channel.open-ok", ts=1_100.002)
    s.c("queue.declare", queue="a", no_wait=False, ts=1_100.010)
    s.c("queue.declare", queue="b", no_wait=False, ts=1_100.011)  # pipelined behind the first
    s.c("queue.declare", queue="c", no_wait=True, ts=1_100.012)  # expects nothing
    s.s("queue.declare-ok", queue="a", ts=1_100.013)
    s.s("queue.declare-ok", queue="b", ts=1_100.015)
    s.c("basic.recover", requeue=True, ts=1_100.020)
    s.s("basic.recover-ok", ts=1_100.021)
    s.s("queue.bind-ok")  # nobody asked
    s.c("exchange.declare", exchange="x", type="direct", no_wait=False)
    r = s.report()  # the capture ends waiting for exchange.declare-ok
    rpc = r["rpc"]
    assert rpc["channel.open"]["latency_ms"]["p50"] == pytest.approx(2.0, abs=1e-6)
    qd = rpc["queue.declare"]
    assert (qd["count"], qd["answered"], qd["no_wait"], qd["unanswered"]) == (3, 2, 1, 0)
    assert qd["latency_ms"]["max"] == pytest.approx(4.0, abs=1e-6)  # b: 1100.011 → 1100.015
    assert rpc["basic.recover"]["latency_ms"]["p50"] == pytest.approx(1.0, abs=1e-6)
    assert rpc["exchange.declare"]["unanswered"] == 1
    assert [(u["method"], u["outcome"]) for u in r["rpc_unanswered"]] == [
        ("exchange.declare", "no reply (capture ended)")
    ]
    assert r["rpc_unexpected_replies"] == {"queue.bind-ok": 1}


def test_recover_is_paired_by_hand_and_the_spec_pairs_the_rest() -> None:
    responses = request_table(get_codec().spec)
    assert responses["basic.recover"] == ("basic.recover-ok",)
    assert set(responses["basic.get"]) == {"basic.get-ok", "basic.get-empty"}
    assert responses["confirm.select"] == ("confirm.select-ok",)
    assert "basic.publish" not in responses and "basic.recover-async" not in responses


def test_the_core_pairs_what_the_errata_say() -> None:
    """The tables hand the errata to the core: the validator's pairing and the ledger agree."""
    from amqpscope.dissect.tables import compile_tables
    from amqpscope.validate.pairing import Pairing

    spec = get_codec().spec
    methods = {m["name"]: m for m in compile_tables(spec)["methods"]}
    table = request_table(spec)
    assert {n for n, m in methods.items() if m["synchronous"] and m["responses"]} == set(table)
    assert methods["basic.recover"]["responses"] == ["basic.recover-ok"] and methods["basic.recover"]["synchronous"]
    assert methods["confirm.select"]["no_wait"] == "nowait" and methods["queue.declare"]["no_wait"] == "no_wait"
    assert Pairing(spec).requests["basic.recover"] == frozenset({"basic.recover-ok"})

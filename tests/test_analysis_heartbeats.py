"""Heartbeats and connection ends: s08 (heartbeat=1), abrupt ends in s02/s09/s11, hand-made silences."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

from amqpscope.events import C2S, S2C

from .analysis_events import Script, capture_report


def test_s08_heartbeats(captures_dir: Path) -> None:
    h = capture_report("s08_pika_heartbeat.pcap")["heartbeats"]
    with open(captures_dir / "s08_pika_heartbeat.pcap.tshark.csv", newline="") as fh:
        beats = Counter(r["dir"] for r in csv.DictReader(fh) if r["name"] == "heartbeat")
    assert h["heartbeat_frames"] == 20  # README: heartbeat 20
    (c,) = h["connections"]
    assert (c["heartbeats_c2s"], c["heartbeats_s2c"]) == (beats["C2S"], beats["S2C"])
    # heartbeat=1 negotiated in connection.tune-ok (the broker proposed its default, 60)
    assert (c["proposed"], c["negotiated"]) == (60, 1)
    assert h["negotiated"] == {"1": 1}
    # pika beats every half interval, so neither direction is ever silent for 2 intervals
    assert 0.4 < c["max_silence_c2s"] < 2 and 0.4 < c["max_silence_s2c"] < 2
    assert c["missed"] == [] and c["closed_for_missed"] == []
    assert c["verdict"] == "clean close" and c["close_ok"] is True


def test_connection_ends_are_told_apart() -> None:
    s02 = capture_report("s02_pika_confirms.pcap")["heartbeats"]["connections"][0]
    # pika's SelectConnection in s02 never sends connection.close: the socket is reset ~30 s later
    assert s02["ended"] == "rst" and s02["negotiated"] == 0
    assert s02["verdict"].startswith("RST without connection.close after 3")
    assert s02["idle_before_end_c2s"] > 25
    s09 = capture_report("s09_pika_errors.pcap")["heartbeats"]["verdicts"]
    # 530, 403 and 320: the broker closes, pika drops TCP without close-ok
    assert s09 == {"clean close": 3, "connection.close without close-ok, then TCP close": 3}
    s11 = capture_report("s11_amqptools_basic.pcap")["heartbeats"]["verdicts"]
    assert s11 == {"clean close": 15, "RST without connection.close": 1}


def _quiet_connection(end: str) -> Script:
    s = Script(start=1_000.0)
    s.handshake(heartbeat=1)
    s.heartbeat(C2S, ts=1_001.0)
    s.heartbeat(S2C, ts=1_001.0)
    if end == "resumes":
        for t in (1_002.0, 1_003.0, 1_004.0, 1_005.0):
            s.heartbeat(S2C, ts=t)  # the server keeps beating, the client is silent 5 s
        s.heartbeat(C2S, ts=1_006.0)
        s.c("connection.close", 0, reply_code=200, reply_text="", class_id=0, method_id=0)
        s.s("connection.close-ok", 0)
        s.end(ended="connection.close", close_code=200, close_by="client")
    else:
        s.end(ended=end, ts=1_005.0)
    return s


def test_silence_then_more_traffic_is_a_peer_that_should_have_closed() -> None:
    (c,) = _quiet_connection("resumes").report()["heartbeats"]["connections"]
    assert c["missed"] == ["c2s"] and c["max_silence_c2s"] == 5.0
    assert c["verdict"] == "missed heartbeats, not closed (server should have closed)"


def test_silence_up_to_a_reset_is_a_close_for_missed_heartbeats() -> None:
    (c,) = _quiet_connection("rst").report()["heartbeats"]["connections"]
    assert c["closed_for_missed"] == ["c2s", "s2c"] and c["missed"] == []
    assert c["idle_before_end_c2s"] == 4.0
    assert c["verdict"] == "RST after missed heartbeats (client and server silent > 2 × 1 s)"


def test_silence_at_the_end_of_the_capture() -> None:
    (c,) = _quiet_connection("eof").report()["heartbeats"]["connections"]
    assert c["verdict"].startswith("open at end of capture, client and server silent > 2 × 1 s")


def test_fin_without_close_and_no_heartbeat() -> None:
    s = Script()
    s.handshake(heartbeat=0)
    s.end(ended="fin")
    (c,) = s.report()["heartbeats"]["connections"]
    assert c["negotiated"] == 0 and c["verdict"] == "FIN without connection.close"

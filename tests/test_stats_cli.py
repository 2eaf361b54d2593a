"""``amqpscope stats``: the JSON contract, the real numbers through the CLI, tables, findings, errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from amqpscope.analysis import Analyzer
from amqpscope.events import C2S, Finding
from cli.main import cli

from .oracle import last_packet, rows, settled


def _stats(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["stats", *args])
    return result.exit_code, result.stdout, result.stderr


def _json(*args: str) -> dict[str, Any]:
    code, out, err = _stats("-T", "json", *args)
    assert code == 0, err
    return json.loads(out)  # type: ignore[no-any-return]


LATENCY = {"p50", "p90", "p99"}


def test_json_has_the_keys_the_issue_asks_for(captures_dir: Path) -> None:
    r = _json(str(captures_dir / "s02_pika_confirms.pcap"))
    for key in ("connections", "methods", "confirms", "deliveries", "rpc", "heartbeats", "findings"):
        assert key in r, key
    (conn,) = r["connections"]
    for key in ("client_product", "client_version", "user", "vhost", "frame_max", "channel_max", "heartbeat",
                "close_code"):  # fmt: skip
        assert key in conn, key
    assert (conn["client_product"], conn["client_version"], conn["user"], conn["vhost"]) == (
        "Pika Python Client Library", "1.4.4", "guest", "/")  # fmt: skip
    assert (conn["frame_max"], conn["channel_max"], conn["heartbeat"]) == (131072, 2047, 0)
    for key in ("published", "acked", "nacked", "returned", "outstanding"):
        assert isinstance(r["confirms"][key], int), key
    assert set(r["confirms"]["latency_ms"]) >= LATENCY
    for key in ("delivered", "acked", "nacked", "rejected", "redelivered", "outstanding"):
        assert isinstance(r["deliveries"][key], int), key
    assert set(r["deliveries"]["latency_ms"]) >= LATENCY
    for method, st in r["rpc"].items():
        assert {"count", "unanswered"} <= set(st) and {"p50", "p99"} <= set(st["latency_ms"]), method
    # the numbers the README verifies, through the command line
    assert r["methods"]["basic.publish"] == 320 and r["methods"]["basic.ack"] == 135
    c = r["confirms"]
    assert (c["published"], c["ack_frames"], c["ack_multiple"], c["nack_frames"]) == (320, 135, 38, 15)
    # the publishes the server's acks and nacks settle, counted from their tags in the oracle
    oracle = rows(captures_dir, "s02_pika_confirms.pcap")
    assert (c["acked"], c["nacked"]) == (settled(oracle, "Basic.Ack", "S2C"), settled(oracle, "Basic.Nack", "S2C"))
    assert c["acked"] + c["nacked"] == 320 and c["outstanding"] == 0
    # findings come from the validator stage: counts by rule add up to the severities
    assert sum(r["findings"].values()) == sum(r["findings_by_severity"].values())


def test_s09_reply_codes_and_close_codes(captures_dir: Path) -> None:
    r = _json(str(captures_dir / "s09_pika_errors.pcap"))
    # README: Basic.Return 312, Channel.Close 0, 200 x3, 403, 404 x2, 405, 406 x2,
    # Connection.Close 200 x3, 320, 403, 530
    assert r["reply_codes"] == {
        "basic.return 312": 1, "channel.close 0": 1, "channel.close 200": 3, "channel.close 403": 1,
        "channel.close 404": 2, "channel.close 405": 1, "channel.close 406": 2, "connection.close 200": 3,
        "connection.close 320": 1, "connection.close 403": 1, "connection.close 530": 1,
    }  # fmt: skip
    assert [c["close_code"] for c in r["connections"]] == [200, 200, 200, 530, 403, 320]
    assert [c["conn"] for c in r["connections"]] == list(range(6))
    # one row per channel lifetime (pika reuses channel numbers), so every server close shows
    closed = sorted(c["close_code"] for c in r["channels"] if c["close_by"] == "server")
    assert closed == [403, 404, 404, 405, 406, 406]
    assert len(r["channels"]) == r["channels_opened"] == 11
    assert r["findings"].get("basic.ack.multiple.exists") == 1  # the validator sees the unknown tag too


def test_s05_large_bodies(captures_dir: Path) -> None:
    r = _json(str(captures_dir / "s05_pika_large_bodies.pcap"))
    # 1 MiB, empty and 1036-byte bodies on connection 1 (frame_max 4096), a 5 MiB get on connection 2;
    # each message is counted once published and once delivered or fetched
    assert r["capture"]["body_bytes"] == 2 * (1024 * 1024 + 0 + 1036 + 5 * 1024 * 1024)
    assert r["capture"]["frame_types"]["body"] == 598 and r["capture"]["messages"] == 8
    assert sorted(c["frame_max"] for c in r["connections"]) == [4096, 131072]
    assert r["tracing"]["messages"]["matched_deliveries"] == 4
    assert (r["deliveries"]["via_deliver"], r["deliveries"]["via_get"]) == (3, 1)


def test_several_files_keep_their_connections_apart(captures_dir: Path) -> None:
    r = _json(str(captures_dir / "s02_pika_confirms.pcap"), str(captures_dir / "s04_pika_consumer_acks.pcap"))
    assert r["connections_total"] == 2
    assert [(c["conn"], c["file"]) for c in r["connections"]] == [(0, 0), (1, 1)]
    assert r["methods"]["basic.publish"] == 320 + 20
    assert r["confirms"]["ack_frames"] == 135 and r["deliveries"]["ack_frames"] == 7


def test_rich_tables(captures_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "stats.txt"
    code, _, err = _stats("-T", "rich", "-o", str(out), str(captures_dir / "s04_pika_consumer_acks.pcap"))
    assert code == 0, err
    text = out.read_text()
    for title in ("Connections", "Channels", "Methods", "Queues", "Synchronous methods", "Publisher confirms",
                  "Consumer deliveries", "Consumers", "In flight against prefetch", "Heartbeats", "Tracing",
                  "Security audit", "Reply codes", "Findings"):  # fmt: skip
        assert title in text, title
    assert "capgen-worker" in text and "16 / 6 / 6 / 11" in text  # acked / nacked / rejected / requeued


def test_findings_events_are_counted_by_rule() -> None:
    a = Analyzer()
    for rule, sev in (("frame.end", "violation"), ("frame.end", "violation"), ("x.y", "warning")):
        a.feed(Finding(packet=1, ts=1.0, conn=0, dir=C2S, rule=rule, severity=sev, code=None, message="m"))
    a.finish()
    r = a.report()
    assert r["findings"] == {"frame.end": 2, "x.y": 1}
    assert r["findings_by_severity"] == {"violation": 2, "warning": 1}


def test_no_validate_leaves_findings_empty(captures_dir: Path) -> None:
    r = _json("--no-validate", str(captures_dir / "s09_pika_errors.pcap"))
    assert r["findings"] == {} and r["methods"]["basic.publish"] == 3


def test_bad_input_is_one_line_and_an_exit_code(tmp_path: Path) -> None:
    code, out, err = _stats(str(tmp_path / "missing.pcap"))
    assert code == 3 and out == "" and err.count("\n") == 1 and err.startswith("amqpscope: error: cannot read")
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(b"this is not a capture file")
    code, out, err = _stats(str(junk))
    assert code == 4 and out == "" and "not a capture" in err and err.count("\n") == 1
    code, _, err = _stats("-o", str(tmp_path / "no" / "such" / "dir.json"), str(junk))
    assert code == 2 and err.startswith("amqpscope: error: cannot write") and err.count("\n") == 1


def test_truncated_capture_reports_what_was_decoded(captures_dir: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.pcap"
    cut.write_bytes((captures_dir / "s02_pika_confirms.pcap").read_bytes()[:20_000])
    code, out, err = _stats("-T", "json", str(cut))
    assert code == 5 and "truncated" in err
    r = json.loads(out)
    # what the oracle shows in the packets that are whole: publishes, and those acked or nacked
    held = [row for row in rows(captures_dir, "s02_pika_confirms.pcap") if int(row["frame"]) <= last_packet(cut)]
    publishes = sum(row["name"] == "Basic.Publish" for row in held)
    done = settled(held, "Basic.Ack", "S2C") + settled(held, "Basic.Nack", "S2C")
    assert 0 < done < publishes < 320
    c = r["confirms"]
    assert (r["methods"]["basic.publish"], c["published"]) == (publishes, publishes)
    assert (c["outstanding"], c["lost_at_close"]) == (publishes - done, 0)
    assert r["heartbeats"]["verdicts"] == {"open at end of capture": 1}


def test_s10_blocked_period(captures_dir: Path) -> None:
    b = _json(str(captures_dir / "s10_pika_blocked.pcap"))["blocked"]
    # README: one connection.blocked (memory alarm) and one connection.unblocked
    assert b["periods"] == 1
    (p,) = b["list"]
    assert (p["kind"], p["reason"], p["publishes_during"]) == ("connection.blocked", "low on memory", 0)
    assert p["end"] is not None and p["duration_s"] == b["seconds"]["connection.blocked"] > 0


def test_channel_flow_period_still_open_at_the_end() -> None:
    from amqpscope.events import S2C

    from .analysis_events import Script

    s = Script()
    s.handshake()
    s.method(S2C, "channel.flow", 1, 0, 1_100.0, active=False)
    s.c("basic.publish", exchange="", routing_key="q")
    s.c("channel.flow-ok", active=False)
    s.c("basic.publish", exchange="", routing_key="q", ts=1_102.0)
    b = s.report()["blocked"]
    (p,) = b["list"]
    assert (p["kind"], p["end"], p["publishes_during"], p["duration_s"]) == ("channel.flow (server)", None, 2, 2.0)

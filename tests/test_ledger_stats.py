"""The core's ledger seen through ``amqpscope stats`` and its Python face, against counts made
independently: synthetic captures whose every frame the test wrote, and the tshark oracle."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import amqpscope
from amqpscope.analysis import analyse
from amqpscope.events import Ledger
from amqpscope.pipeline import Options, decode_source
from amqpscope.testing.synth import ack_above_the_delivered_tags
from cli.main import cli

from .oracle import request_latencies, rows


def _stats_json(path: Path) -> dict[str, Any]:
    result = CliRunner().invoke(cli, ["stats", "-T", "json", str(path)])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def _ack_past_the_last_delivery(tmp_path: Path) -> tuple[Path, int]:
    """Tags 1-3 delivered, then ``basic.ack multiple=1 delivery-tag=5`` (synth's capture)."""
    path = tmp_path / "ack5.pcap"
    return path, ack_above_the_delivered_tags(str(path))


def test_ack_multiple_past_the_last_delivery_in_stats(tmp_path: Path) -> None:
    path, bad = _ack_past_the_last_delivery(tmp_path)
    r = _stats_json(path)
    d = r["deliveries"]
    assert d["bad_acks"] == [{"conn": 0, "channel": 1, "method": "basic.ack", "delivery_tag": 5, "multiple": True,
                              "packet": bad, "problem": "unknown tag"}]  # fmt: skip
    assert (d["delivered"], d["acked"], d["unknown_tag"], d["ack_frames"], d["ack_multiple"]) == (3, 0, 1, 1, 1)
    # the broker's 406 closed the channel: its three deliveries were released, none is outstanding
    assert (d["released_at_close"], d["outstanding"]) == (3, 0)
    assert {u["delivery_tag"]: u["fate"] for u in d["unacked"]} == dict.fromkeys((1, 2, 3), "released: channel closed")
    assert r["reply_codes"] == {"channel.close 406": 1, "connection.close 200": 1}


def test_the_ledger_record_of_the_bad_ack(tmp_path: Path) -> None:
    path, bad = _ack_past_the_last_delivery(tmp_path)
    records = [ev for ev in decode_source(path, options=Options(ledger=True)) if isinstance(ev, Ledger)]
    (rec,) = [ev for ev in records if ev.entry == "bad-ack"]
    assert (rec.packet, rec.channel, rec.dir, rec.method, rec.tag, rec.multiple, rec.outcome) == (
        bad, 1, "c2s", "basic.ack", 5, True, "unknown tag")  # fmt: skip
    released = [ev for ev in records if ev.entry == "release"]
    assert [(ev.tag, ev.outcome) for ev in released] == [(t, "channel closed") for t in (1, 2, 3)]
    assert {ev.ref_packet for ev in released} == {ev.packet for ev in records if ev.entry == "deliver"}


def test_the_same_ledger_from_the_decoder_and_from_python_events(captures_dir: Path) -> None:
    """``analyse(amqpscope.read(…))`` runs the core's ledger on Python events: same report as
    ``stats``, which gets the ledger's events from the decoder."""
    path = captures_dir / "s04_pika_consumer_acks.pcap"
    own = json.loads(json.dumps(analyse(amqpscope.read(path)).report()))
    streamed = _stats_json(path)
    for key in ("deliveries", "confirms", "rpc", "rpc_unanswered", "heartbeats"):
        # Python's float seconds since the epoch hold ~0.24 µs: latencies agree to the microsecond
        assert _flat(own[key]) == pytest.approx(_flat(streamed[key]), abs=2e-3), key


def _flat(v: Any, path: str = "") -> dict[str, Any]:
    """Nested dicts and lists as one {path: leaf} dict (pytest.approx compares flat ones)."""
    if isinstance(v, dict):
        return {k: x for key, item in v.items() for k, x in _flat(item, f"{path}.{key}").items()}
    if isinstance(v, list):
        return {k: x for i, item in enumerate(v) for k, x in _flat(item, f"{path}[{i}]").items()} | {path: len(v)}
    return {path: v}


# --- against the tshark oracle --------------------------------------------------------------------


def test_consumer_acks_follow_the_oracle(captures_dir: Path) -> None:
    name = "s04_pika_consumer_acks.pcap"
    oracle = rows(captures_dir, name)
    d = _stats_json(captures_dir / name)["deliveries"]
    names = Counter((r["name"], r["dir"]) for r in oracle)
    assert d["via_deliver"] == names[("Basic.Deliver", "S2C")]
    assert d["via_get"] == names[("Basic.Get-Ok", "S2C")]
    assert d["ack_frames"] == names[("Basic.Ack", "C2S")] and d["reject_frames"] == names[("Basic.Reject", "C2S")]
    assert d["rejected"] == names[("Basic.Reject", "C2S")]  # reject never settles more than its tag


def test_request_latencies_follow_the_packet_timestamps(captures_dir: Path) -> None:
    name = "s04_pika_consumer_acks.pcap"
    want = request_latencies(captures_dir, name)
    rpc = _stats_json(captures_dir / name)["rpc"]
    assert want["basic.recover"] and want["queue.declare"]
    for method, lat in want.items():
        st = rpc[method]
        assert st["answered"] == len(lat), method
        assert abs(st["latency_ms"]["max"] - max(lat) * 1000) < 0.002, method


def test_decode_shows_the_ledger_only_when_asked(tmp_path: Path) -> None:
    path, bad = _ack_past_the_last_delivery(tmp_path)

    def records(*flags: str) -> list[dict[str, Any]]:
        result = CliRunner().invoke(cli, ["decode", "-T", "jsonl", *flags, str(path)])
        assert result.exit_code == 0, result.stderr
        return [json.loads(line) for line in result.stdout.splitlines()]

    plain, full = records(), records("--ledger")
    assert "ledger" not in {r["kind"] for r in plain}
    assert [r for r in full if r["kind"] != "ledger"] == plain
    (rec,) = [r for r in full if r["kind"] == "ledger" and r["entry"] == "bad-ack"]
    assert (rec["packet"], rec["tag"], rec["outcome"]) == (bad, 5, "unknown tag")
    table = CliRunner().invoke(cli, ["decode", "-T", "table", "--ledger", "-Y", 'kind == "ledger"', str(path)])
    assert "ledger bad-ack basic.ack tag=5 multiple unknown tag" in table.stdout

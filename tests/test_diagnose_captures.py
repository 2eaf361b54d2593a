"""Every shared capture diagnoses to the causes its README describes; the healthy ones to nothing
but quirks (../shared/captures/README.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from amqpscope.cli.main import cli
from click.testing import CliRunner

# file → {(cause, conn, channel): packets that must be among the proof}
EXPECTED: dict[str, dict[tuple[str, int, int | None], set[int]]] = {
    "s01_pika_topology.pcap": {},
    "s02_pika_confirms.pcap": {},  # the client ends TCP without connection.close after closing its channel: a quirk
    # tx.commit on a channel without tx.select: the client's violation, answered with channel.close 406
    "s03_amqpstorm_tx.pcap": {("client-protocol-error", 0, 2): {86, 87}},
    # the queue deleted from another channel while consumed: the broker's basic.cancel
    "s04_pika_consumer_acks.pcap": {("consumer-cancelled", 0, 2): {159, 160}},
    "s05_pika_large_bodies.pcap": {},
    "s06_pika_rich_properties.pcap": {},
    "s07_pika_many_channels.pcap": {},
    "s08_pika_heartbeat.pcap": {},
    "s09_pika_errors.pcap": {
        ("channel-closed", 0, 1): {16, 17},  # passive declare of a missing queue, 404
        ("precondition-failed", 0, 1): {22, 24, 25},  # x-max-length 10 then 20: both declarations
        ("client-protocol-error", 0, 1): {30, 34},  # publish to a missing exchange, 404
        ("unroutable", 0, 1): {43},  # mandatory publish to amq.direct, 312 NO_ROUTE
        ("client-protocol-error", 0, 2): {46, 47},  # ack of unknown delivery tag 999, 406
        ("client-protocol-error", 1, 1): {69, 70},  # exclusive queue from another connection, 405
        ("access-refused", 2, 1): {114, 115},  # alice refused a queue name, 403
        ("access-refused", 3, None): {140},  # alice on vhost 'private', connection.close 530
        ("login-refused", 4, None): {151},  # wrong password, connection.close 403 after start-ok
        ("connection-closed", 5, None): {170},  # rabbitmqctl close_all_connections, 320
    },
    "s10_pika_blocked.pcap": {("publisher-blocked", 0, None): {26, 28}},
    "s11_amqptools_basic.pcap": {("access-refused", 14, 1): {362, 363}},
    "s12_amqptools_port5673.pcap": {},
    "s13_kombu_simple_queue.pcap": {},
    # direct reply-to replies come back 312 although delivered (RabbitMQ 3.10): reported as a notice
    "s14_aiopika_rpc.pcap": {("unroutable", 0, 1): {120, 126, 132, 138, 144}},
}

HEALTHY_QUIRKS = {  # quirk ids each healthy capture must show, per client library
    "s01_pika_topology.pcap": {"insist-bit", "reply-code-zero"},
    "s02_pika_confirms.pcap": {"insist-bit", "reply-code-zero", "tcp-close-without-close"},
    "s13_kombu_simple_queue.pcap": {"empty-reply-text", "reply-code-zero"},
    "s12_amqptools_port5673.pcap": {"insist-bit"},
}


def _diagnose(path: Path) -> dict[str, object]:
    res = CliRunner().invoke(cli, ["diagnose", "-T", "json", "--port", "5673", str(path)])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_shared_capture_diagnoses_to_its_readme(captures_dir: Path, name: str) -> None:
    doc = _diagnose(captures_dir / name)
    causes = doc["causes"]
    assert isinstance(causes, list)
    got = {(c["cause"], c["conn"], c["channel"]): set(c["packets"]) for c in causes}
    assert len(got) == len(causes), f"two causes on the same connection and channel: {causes}"
    expected = EXPECTED[name]
    assert set(got) == set(expected)
    for key, packets in expected.items():
        assert packets <= got[key], (key, got[key])
    assert doc["nothing_wrong"] is (not expected)
    for c in causes:  # every entry names who, what and what the broker did
        assert c["client"] and c["client"].startswith("127.0.0.1:")
        assert c["summary"] and c["broker_action"] and c["since"] <= c["until"]


@pytest.mark.parametrize("name", sorted(HEALTHY_QUIRKS))
def test_healthy_capture_has_only_quirks(captures_dir: Path, name: str) -> None:
    doc = _diagnose(captures_dir / name)
    assert doc["causes"] == []
    quirks = doc["quirks"]
    assert isinstance(quirks, list)
    assert {q["quirk"] for q in quirks} == HEALTHY_QUIRKS[name]
    assert all(q["count"] >= 1 and q["packets"] and q["broker_accepts"] for q in quirks)


def test_ranking_puts_connection_causes_first(captures_dir: Path) -> None:
    causes = _diagnose(captures_dir / "s09_pika_errors.pcap")["causes"]
    assert isinstance(causes, list)
    impacts = [c["impact"] for c in causes]
    order = ["connection closed or reset", "channel closed", "stalled or blocked work", "lost or returned messages",
             "client behaviour"]  # fmt: skip
    assert impacts == sorted(impacts, key=order.index)
    assert impacts[0] == "connection closed or reset" and causes[-1]["cause"] == "unroutable"


def test_precondition_names_the_differing_argument(captures_dir: Path) -> None:
    causes = _diagnose(captures_dir / "s09_pika_errors.pcap")["causes"]
    assert isinstance(causes, list)
    pre = next(c for c in causes if c["cause"] == "precondition-failed")
    assert pre["details"]["differs"] == ["x-max-length 10 → 20"]
    assert "q.args" in pre["summary"] and "x-max-length" in pre["summary"]


def test_text_and_jsonl_formats(captures_dir: Path) -> None:
    path = str(captures_dir / "s10_pika_blocked.pcap")
    lines = CliRunner().invoke(cli, ["diagnose", "-T", "jsonl", path]).output.splitlines()
    kinds = [json.loads(line)["kind"] for line in lines]
    assert kinds[0] == "diagnosis" and set(kinds[1:]) == {"quirk"}
    rec = json.loads(lines[0])
    for key in ("cause", "severity", "conn", "client", "channel", "packets", "since", "until", "summary",
                "broker_action"):  # fmt: skip
        assert key in rec
    text = CliRunner().invoke(cli, ["diagnose", "-T", "text", path]).output
    assert "publisher-blocked" in text and "low on memory" in text and "quirks" in text
    healthy = CliRunner().invoke(cli, ["diagnose", "-T", "text", str(captures_dir / "s01_pika_topology.pcap")])
    assert healthy.output.startswith("nothing wrong")


def test_stats_starts_with_the_diagnosis(captures_dir: Path) -> None:
    files = [str(captures_dir / "s10_pika_blocked.pcap"), str(captures_dir / "s09_pika_errors.pcap")]
    res = CliRunner().invoke(cli, ["stats", "-T", "json", *files])
    doc = json.loads(res.output)
    # the diagnosis first, after what the capture did not show when stats reports that (not_seen)
    keys = [k for k in doc if k != "not_seen"]
    assert keys[0] == "diagnosis" and list(doc).index("diagnosis") <= 1 and doc["diagnosis"]["nothing_wrong"] is False
    causes = doc["diagnosis"]["causes"]
    # the second file's connections are numbered on, as in the rest of the stats document
    assert ("publisher-blocked", 0) in {(c["cause"], c["conn"]) for c in causes}
    assert ("login-refused", 5) in {(c["cause"], c["conn"]) for c in causes}
    clients = {c["conn"]: c["client"] for c in doc["connections"]}
    assert all(clients[c["conn"]] == c["client"] for c in causes)
    text = CliRunner().invoke(cli, ["stats", "-T", "text", files[0]]).output
    assert text.startswith("Diagnosis") and text.index("publisher-blocked") < text.index("Capture")


def test_decode_parquet_has_the_diagnoses(captures_dir: Path, tmp_path: Path) -> None:
    import pyarrow.dataset as pads

    files = [str(captures_dir / n) for n in ("s09_pika_errors.pcap", "s10_pika_blocked.pcap", "s01_pika_topology.pcap")]
    res = CliRunner().invoke(cli, ["decode", "--format", "parquet", "-o", str(tmp_path / "bare"), *files])
    assert res.exit_code == 0, res.output
    assert not (tmp_path / "bare" / "diagnoses").exists() and "diagnoses" not in res.output  # opt-in
    res = CliRunner().invoke(cli, ["decode", "--format", "parquet", "--diagnose", "-o", str(tmp_path / "pq"), *files])
    assert res.exit_code == 0, res.output
    bad = CliRunner().invoke(cli, ["decode", "--format", "parquet", "--diagnose", "--no-validate", "-o",
                                   str(tmp_path / "x"), *files])  # fmt: skip
    assert bad.exit_code == 2 and "--diagnose needs validation" in bad.output
    rows = pads.dataset(str(tmp_path / "pq" / "diagnoses"), format="parquet", partitioning="hive").to_table()
    got = sorted((r["capture"].rsplit("/", 1)[1], r["cause"], r["conn"], r["channel"], tuple(r["packets"]))
                 for r in rows.to_pylist())  # fmt: skip
    want = []
    for f in files:
        for c in _diagnose(Path(f))["causes"]:  # type: ignore[union-attr]
            want.append((Path(f).name, c["cause"], c["conn"], c["channel"], tuple(c["packets"])))
    assert got == sorted(want) and len(got) == 11
    pre = next(r for r in rows.to_pylist() if r["cause"] == "precondition-failed")
    assert dict(pre["details"])["declared_at"] == "22" and pre["time"] is not None

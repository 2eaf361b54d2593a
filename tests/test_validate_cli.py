"""``amqpscope validate``: report formats, exit codes, bad input; inline findings in ``decode``."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from amqpscope.testing.synth import Capture
from cli.main import cli

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
KEYS = {"kind", "rule", "severity", "code", "rabbitmq_code", "packet", "packets", "conn", "channel", "dir", "message",
        "peer_reaction", "quirk", "file", "ts"}  # fmt: skip


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def _clean_capture(tmp_path: Path) -> str:
    cap = Capture()
    c = cap.connection()
    c.handshake()
    c.open_channel(1)
    c.publish(1)
    c.close_channel(1)
    c.close()
    path = tmp_path / "clean.pcap"
    cap.write(str(path))
    return str(path)


def test_clean_capture_exits_0(tmp_path: Path) -> None:
    path = _clean_capture(tmp_path)
    code, out, _ = _run("validate", "-T", "rich", path)
    assert code == 0 and "no findings" in out
    code, out, _ = _run("validate", "-T", "jsonl", path)
    assert (code, out) == (0, "")


def test_jsonl_findings_and_exit_1(captures_dir: Path) -> None:
    path = str(captures_dir / "s03_amqpstorm_tx.pcap")
    code, out, _ = _run("validate", "-T", "jsonl", path)
    assert code == 1
    recs = [json.loads(line) for line in out.splitlines()]
    assert {r["kind"] for r in recs} == {"finding"}
    assert all(set(r) == KEYS for r in recs)
    (v,) = [r for r in recs if r["severity"] == "violation"]
    assert (v["rule"], v["code"], v["packet"], v["conn"], v["channel"], v["file"]) == (
        "tx.commit.transacted", 406, 86, 0, 2, path)
    assert v["peer_reaction"].endswith("matches")


def test_fail_on_and_min_severity() -> None:
    errors = str(SAMPLES / "errors.pcap")  # deviations only (RabbitMQ's handshake close, pika's missing close-ok)
    assert _run("validate", "-T", "jsonl", errors)[0] == 0
    code, out, _ = _run("validate", "-T", "jsonl", "--fail-on", "deviation", "--strict", errors)
    assert code == 1 and len(out.splitlines()) == 5  # 3 deviations and 2 warnings (reserved insist=1)
    # all five are deviations RabbitMQ accepts: marked as quirks, they do not fail the default view
    code, out, _ = _run("validate", "-T", "jsonl", "--fail-on", "deviation", errors)
    assert code == 0 and all(json.loads(line)["quirk"] for line in out.splitlines())
    code, out, _ = _run("validate", "-T", "jsonl", "--min-severity", "violation", errors)
    assert (code, out) == (0, "")


def test_rich_report_groups_by_rule(captures_dir: Path) -> None:
    code, out, _ = _run("validate", "-T", "rich", str(captures_dir / "s07_pika_many_channels.pcap"),
                        str(captures_dir / "s03_amqpstorm_tx.pcap"))  # fmt: skip
    assert code == 1
    assert "channel.close.reply-code.assert-notnull" in out and "37" in out  # one row, counted
    assert out.count("channel.close.reply-code.assert-notnull") == 1
    assert "1 violation, 40 deviations, 7 warnings (47 of them quirks RabbitMQ accepts) in 2 files" in out
    assert "s03_amqpstorm_tx.pcap:#86" in out  # the first occurrence, with its file


def test_bad_input_one_line_errors(tmp_path: Path) -> None:
    code, _, err = _run("validate", str(tmp_path / "missing.pcap"))
    assert code == 3 and err.count("\n") == 1 and "cannot read capture" in err
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(b"not a capture at all")
    code, _, err = _run("validate", str(junk))
    assert code == 4 and err.startswith("amqpscope: error:") and "Traceback" not in err
    bad_spec = tmp_path / "spec.xml"
    bad_spec.write_text("<amqp")
    code, _, err = _run("validate", "--spec", str(bad_spec), str(junk))
    assert code == 2 and err.count("\n") == 1
    code, _, _ = _run("validate", "--fail-on", "nonsense", str(junk))
    assert code == 2


def test_truncated_capture_keeps_findings_and_exit_code(captures_dir: Path, tmp_path: Path) -> None:
    data = (captures_dir / "s03_amqpstorm_tx.pcap").read_bytes()
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(data[:-10])
    code, out, err = _run("validate", "-T", "jsonl", str(cut))
    assert code == 5 and "tx.commit.transacted" in out and "truncated" in err


def test_decode_shows_findings_inline(captures_dir: Path) -> None:
    path = str(captures_dir / "s03_amqpstorm_tx.pcap")
    code, out, _ = _run("decode", "-T", "jsonl", path)
    recs = [json.loads(line) for line in out.splitlines()]
    kinds = [r["kind"] for r in recs]
    assert code == 0 and kinds.count("finding") == 6
    i = next(i for i, r in enumerate(recs) if r["kind"] == "finding" and r["rule"] == "tx.commit.transacted")
    assert recs[i - 1]["method"] == "channel.close"  # emitted once the peer's reaction is known
    assert recs[i - 2]["method"] == "tx.commit"
    code, out, _ = _run("decode", "-T", "jsonl", "--no-validate", path)
    assert code == 0 and '"finding"' not in out
    code, out, _ = _run("decode", "-T", "rich", path)
    assert "VIOLATION tx.commit.transacted [406]" in out


def test_quirks_are_marked_unless_strict(captures_dir: Path) -> None:
    path = str(captures_dir / "s13_kombu_simple_queue.pcap")
    code, out, _ = _run("validate", "-T", "jsonl", "--fail-on", "deviation", path)
    recs = [json.loads(line) for line in out.splitlines()]
    # kombu's empty reply texts and reply code 0 are deviations RabbitMQ accepts: marked, not failing
    assert recs and {r["quirk"] for r in recs} == {"empty-reply-text", "reply-code-zero"}
    assert code == 0
    code, out, _ = _run("validate", "-T", "jsonl", "--fail-on", "deviation", "--strict", path)
    strict = [json.loads(line) for line in out.splitlines()]
    assert [r["rule"] for r in strict] == [r["rule"] for r in recs]
    assert {r["quirk"] for r in strict} == {None} and code == 1
    _, text, _ = _run("validate", "-T", "rich", path)
    assert "quirk: empty-reply-text" in text and "4 of them quirks RabbitMQ accepts" in text


def test_a_real_fault_is_no_quirk(captures_dir: Path) -> None:
    _, out, _ = _run("validate", "-T", "jsonl", str(captures_dir / "s03_amqpstorm_tx.pcap"))
    recs = {r["rule"]: r["quirk"] for r in map(json.loads, out.splitlines())}
    assert recs["tx.commit.transacted"] is None and recs["field.reserved"] == "out-of-band-zero"

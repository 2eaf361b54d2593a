"""validate and stats read one ledger (issue 16): they agree on every ledger figure.

The validator keeps no delivery-tag, confirm or prefetch bookkeeping of its own: it words the
core ledger's outcomes that prove the peer's mistake as findings, and ``stats`` counts the same
outcomes. So, for every shared capture and every damaged variant the golden test builds
(``test_validate_findings_golden.VARIANTS``), ``validate -T jsonl`` and ``stats -T json`` agree:

* bad acks the client is at fault for (deliveries ``unknown_tag`` + ``double_ack`` +
  ``wrong_channel``) == the client's ``basic.ack/nack.multiple.exists`` and
  ``delivery-tag.channel-local`` findings (``wrong_channel`` == ``delivery-tag.channel-local``);
* bad confirms (confirms ``unknown_tag``) == the server's ``multiple.exists`` findings;
* over-prefetch deliveries == ``basic.qos.prefetch-count.01`` findings.

What the capture cannot judge (before it, after a gap, beyond the limits) is neither a finding nor
one of these figures. The motivating case runs end to end first.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import CAPTURES
from test_validate_findings_golden import VARIANTS

from amqpscope.testing.synth import ack_above_the_delivered_tags
from cli.main import cli

SHARED = sorted(CAPTURES.glob("*.pcap")) if CAPTURES.is_dir() else []
ACK_RULES = ("basic.ack.multiple.exists", "basic.nack.multiple.exists")
LOCAL = "delivery-tag.channel-local"
PREFETCH = "basic.qos.prefetch-count.01"
# exit codes: 1 findings; 5 a truncated capture (the cut-off-end variant), whose events decoded
# before the damage are still read and reported
FINDINGS, TRUNCATED = 1, 5


def _validate(path: Path) -> list[dict[str, Any]]:
    result = CliRunner().invoke(cli, ["validate", "-T", "jsonl", str(path)])
    assert result.exit_code in (0, FINDINGS, TRUNCATED), result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    return [r for r in lines if r.get("kind") == "finding"]


def _stats(path: Path) -> dict[str, Any]:
    result = CliRunner().invoke(cli, ["stats", "-T", "json", str(path)])
    assert result.exit_code in (0, TRUNCATED), result.stderr
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def _figures_of_findings(findings: list[dict[str, Any]]) -> dict[str, int]:
    by = Counter((f["rule"], f["dir"]) for f in findings)
    return {
        "bad_acks": sum(by[(r, "c2s")] for r in ACK_RULES) + by[(LOCAL, "c2s")],
        "wrong_channel": by[(LOCAL, "c2s")],
        "bad_confirms": sum(by[(r, "s2c")] for r in ACK_RULES),
        "over_prefetch": by[(PREFETCH, "s2c")],
    }


def _figures_of_stats(stats: dict[str, Any]) -> dict[str, int]:
    d, c = stats["deliveries"], stats["confirms"]
    return {
        "bad_acks": d["unknown_tag"] + d["double_ack"] + d["wrong_channel"],
        "wrong_channel": d["wrong_channel"],
        "bad_confirms": c["unknown_tag"],
        "over_prefetch": d["over_prefetch"],
    }


def _agree(path: Path) -> dict[str, int]:
    findings = _validate(path)
    stats = _stats(path)
    mine = _figures_of_findings(findings)
    assert mine == _figures_of_stats(stats), path.name
    # stats runs the validator too: its count of findings by rule is validate's
    by_rule = Counter(f["rule"] for f in findings)
    for rule in (*ACK_RULES, LOCAL, PREFETCH):
        assert stats["findings"].get(rule, 0) == by_rule[rule], (path.name, rule)
    return mine


# --- the motivating case --------------------------------------------------------------------------------




def test_an_ack_above_the_delivered_tags_is_reported_by_validate_and_stats(tmp_path: Path) -> None:
    path = tmp_path / "ack-multiple-5.pcap"
    ack = ack_above_the_delivered_tags(str(path))
    found = [f for f in _validate(path) if f["rule"] == "basic.ack.multiple.exists"]
    assert len(found) == 1, found
    f = found[0]
    assert (f["packet"], f["dir"], f["channel"], f["code"]) == (ack, "c2s", 1, 406)
    assert f["message"] == "basic.ack: delivery-tag 5 was never delivered on channel 1"
    assert f["peer_reaction"] == f"server sent channel.close 406 at packet {ack + 1}: matches"
    d = _stats(path)["deliveries"]
    assert d["unknown_tag"] == 1
    assert [(b["delivery_tag"], b["multiple"], b["packet"], b["problem"]) for b in d["bad_acks"]] == [
        (5, True, ack, "unknown tag")
    ]
    assert _agree(path)["bad_acks"] == 1


# --- every shared capture, every damaged variant ------------------------------------------------------------


@pytest.mark.parametrize("path", SHARED, ids=lambda p: p.name)
def test_validate_and_stats_agree_on_captures(path: Path) -> None:
    _agree(path)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("path", SHARED, ids=lambda p: p.name)
def test_validate_and_stats_agree_on_damaged_variants(path: Path, variant: str, tmp_path: Path) -> None:
    dst = tmp_path / f"{path.stem}-{variant}.pcap"
    VARIANTS[variant](path, dst)
    _agree(dst)


def test_the_figures_are_not_all_zero() -> None:
    """The agreement is not vacuous: the shared captures and their variants have such mistakes."""
    if not SHARED:
        pytest.skip("no shared captures")
    errors = next(p for p in SHARED if p.name.startswith("s09"))
    assert _agree(errors)["bad_acks"] >= 1

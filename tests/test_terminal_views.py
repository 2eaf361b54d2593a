"""The text views as a terminal shows them: ``stats``, ``validate``, ``diagnose`` and ``decode``
run inside tmux at 80, 100 and 120 columns, and what the screen shows is checked (docs/cli.md):
no line wider than the terminal, identifiers (client address:port, rule ids, queues, consumer tags)
whole, no header cut, continuation lines under their text (a hanging indent), not at column 0."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from amqpscope.analysis.tables import MAX_ROWS

ROOT = Path(__file__).resolve().parents[1]
RUN_CLI = ROOT / "tests" / "run_cli.py"
ERRORS, MANY = "s09_pika_errors.pcap", "s07_pika_many_channels.pcap"
WIDTHS = (80, 100, 120)
END = "__amqpscope_done__"
TIME = re.compile(r"^\d\d:\d\d:\d\d\.\d{6} ")

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


@pytest.fixture(scope="module")
def tmux(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """A private tmux server (its own socket, no user configuration, a long scrollback)."""
    conf = tmp_path_factory.mktemp("tmux") / "tmux.conf"
    conf.write_text("set -g history-limit 100000\nset -g status off\n")
    base = ["tmux", "-L", f"amqpscope-{uuid.uuid4().hex[:8]}", "-f", str(conf)]
    yield base
    subprocess.run([*base, "kill-server"], capture_output=True, check=False)


def screen(tmux: list[str], width: int, *args: str) -> list[str]:
    """What a terminal ``width`` columns wide shows for ``amqpscope ARGS`` (every line of the
    scrollback, lines the terminal wrapped joined back: a line longer than ``width`` shows as such)."""
    name = f"w{width}-{uuid.uuid4().hex[:6]}"
    command = " ".join([sys.executable, str(RUN_CLI), *args])
    # COLUMNS/LINES of the test's own environment must not override the terminal's size
    shell = f"env -u COLUMNS -u LINES {command}; echo {END}$?; sleep 600"
    subprocess.run([*tmux, "new-session", "-d", "-s", name, "-x", str(width), "-y", "50", shell], check=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            text = subprocess.run([*tmux, "capture-pane", "-p", "-J", "-S", "-", "-t", name], capture_output=True,
                                  text=True, check=True).stdout  # fmt: skip
            if END in text or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        subprocess.run([*tmux, "kill-session", "-t", name], capture_output=True, check=False)
    lines = [line.rstrip() for line in text.splitlines()]
    end = next(i for i, line in enumerate(lines) if line.startswith(END))
    assert lines[end] in (f"{END}0", f"{END}1"), "\n".join(lines)  # validate: 1 for its findings
    return lines[:end]


def _cli_json(*args: str) -> str:
    done = subprocess.run([sys.executable, str(RUN_CLI), *args], capture_output=True, text=True, check=False)
    assert done.returncode in (0, 1), done.stderr  # validate: 1 for its findings
    return done.stdout


def _fits(lines: list[str], width: int) -> None:
    wide = [line for line in lines if len(line) > width]
    assert not wide, f"{len(wide)} lines wider than {width}: {wide[:3]}"


def _rows(lines: list[str]) -> list[str]:
    return [line for line in lines if line[:1] in "│┃┏┡└┌├"]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("capture", [ERRORS, MANY])
def test_stats_fits_and_keeps_every_client_whole(tmux: list[str], captures_dir: Path, width: int,
                                                 capture: str) -> None:  # fmt: skip
    path = str(captures_dir / capture)
    lines = screen(tmux, width, "stats", path)
    _fits(lines, width)
    report = json.loads(_cli_json("stats", "-T", "json", path))
    text = "\n".join(lines)
    for c in report["connections"]:
        assert re.search(rf"│ +{c['conn']} │ {re.escape(c['client'])} +│", text), c["client"]
    for q in report["queues"][:MAX_ROWS]:  # a listing shows its first MAX_ROWS rows
        assert f"│ {q['name']} " in text, q["name"]
    for consumer in report["deliveries"]["consumers"][:MAX_ROWS]:
        assert f" {consumer['consumer_tag']} " in text, consumer["consumer_tag"]
    rows = _rows(lines)
    assert not [r for r in rows if "…" in r], "a cell or header cut with an ellipsis"
    headers = [r for r in rows if r.startswith("┃")]
    assert not [h for h in headers if re.search(r"[a-z]_[a-z]", h)], "snake_case headers"


@pytest.mark.parametrize("width", WIDTHS)
def test_validate_shows_every_rule_id_whole(tmux: list[str], captures_dir: Path, width: int) -> None:
    path = str(captures_dir / ERRORS)
    lines = screen(tmux, width, "validate", "--min-severity", "info", path)
    _fits(lines, width)
    rules = {json.loads(line)["rule"] for line in _cli_json("validate", "-T", "jsonl", path).splitlines()}
    assert rules
    text = "\n".join(lines)
    for rule in rules:
        assert re.search(rf"[│ ]{re.escape(rule)}[ │]", text), f"rule id {rule} not whole at {width} columns"
    assert "…" not in "\n".join(_rows(lines))


@pytest.mark.parametrize("width", WIDTHS)
def test_diagnose_wraps_causes_under_their_text(tmux: list[str], captures_dir: Path, width: int) -> None:
    lines = screen(tmux, width, "diagnose", str(captures_dir / ERRORS))
    _fits(lines, width)
    causes = [i for i, line in enumerate(lines) if re.match(r"^[ \d]\d\. ", line)]
    quirks = next(i for i, line in enumerate(lines) if line.startswith("quirks"))
    assert len(causes) >= 5 and causes[0] == 0
    for i, line in enumerate(lines[:quirks]):
        if i not in causes:
            assert line.startswith("    "), f"line {i} of a cause not indented at {width} columns: {line!r}"
    # the causes are told apart: each heading starts at column 0, nothing else does
    assert [i for i, line in enumerate(lines[:quirks]) if not line.startswith(" ") or re.match(r"^ \d\. ", line)] \
        == causes  # fmt: skip
    for line in lines[quirks + 1:]:
        assert line.startswith("  "), f"a quirk's line at column 0: {line!r}"
    headings = [lines[i] for i in causes]
    for c in json.loads(_cli_json("diagnose", "-T", "json", str(captures_dir / ERRORS)))["causes"]:
        assert any(re.match(rf"^[ \d]\d\. \S+ +{re.escape(c['cause'])} +conn {c['conn']}\b", h) for h in headings), c


@pytest.mark.parametrize("width", WIDTHS)
def test_decode_lines_wrap_under_the_summary(tmux: list[str], captures_dir: Path, width: int) -> None:
    lines = screen(tmux, width, "decode", "--no-progress", str(captures_dir / ERRORS))
    _fits(lines, width)
    assert sum(bool(TIME.match(line)) for line in lines) > 100
    hang = len("00:00:00.000000 #0   C→S    ch0  ")
    continued = [line for line in lines if not TIME.match(line)]
    assert all(line.startswith(" " * hang) for line in continued), continued[:3]
    if width == 80:
        assert continued, "some summary is longer than 80 columns: it wraps"

"""``amqpscope decode`` from the outside: formats, keys, counts, filters, bodies, credentials, colour,
several inputs, stdin and compressed input. Runs the click command in-process (CliRunner) except
where a real process matters (a terminal for colour, a pipe for stdin)."""

from __future__ import annotations

import csv
import io
import json
import os
import pty
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import variants
from amqpscope.cli.main import cli
from click.testing import CliRunner

from tests.conftest import CAPTURES

ROOT = Path(__file__).resolve().parents[1]
AMQPSCOPE = str(Path(sys.executable).parent / "amqpscope")
SAMPLES = ROOT / "samples"
HELLO, ERRORS = SAMPLES / "hello.pcap", SAMPLES / "errors.pcap"
S01, S05, S09 = (CAPTURES / n for n in ("s01_pika_topology.pcap", "s05_pika_large_bodies.pcap", "s09_pika_errors.pcap"))
needs_captures = pytest.mark.skipif(not CAPTURES.is_dir(), reason="shared captures not present")
BASE = {"kind", "packet", "ts", "conn", "dir", "channel"}
ANSI = re.compile(r"\x1b\[[0-9;]*m")
COLOUR = re.compile(r"\x1b\[[0-9;]*(3[0-7]|38;[25]|9[0-7])[0-9;]*m")  # foreground colour codes


def run(*args: Any, input: bytes | None = None, code: int = 0) -> str:
    result = CliRunner().invoke(cli, ["decode", *map(str, args)], input=input)
    assert result.exit_code == code, (result.output, result.stderr)
    return result.stdout


def jsonl(*args: Any) -> list[dict[str, Any]]:
    return [json.loads(line) for line in run("--format", "jsonl", "--no-validate", *args).splitlines()]


def oracle_rows(path: Path) -> list[dict[str, str]]:
    with open(f"{path}.tshark.csv", newline="") as f:
        return list(csv.DictReader(f))


# --- JSONL: the record of every kind ---------------------------------------------------------------


def test_jsonl_keys_of_every_kind() -> None:
    recs = jsonl(HELLO)
    kinds = Counter(r["kind"] for r in recs)
    assert {"connection", "protocol-header", "frame", "message"} <= set(kinds)
    for r in recs:
        assert set(r) >= BASE, r
        assert isinstance(r["packet"], int) and r["packet"] >= 1 and isinstance(r["ts"], float)
    frames = [r for r in recs if r["kind"] == "frame"]
    assert {r["type"] for r in frames} == {"method", "header", "body"}
    for r in frames:
        assert r["dir"] in ("c2s", "s2c") and isinstance(r["channel"], int)
        if r["type"] == "method":
            assert isinstance(r["class_id"], int) and isinstance(r["method_id"], int)
            assert re.fullmatch(r"[a-z]+\.[a-z-]+", r["method"]) and isinstance(r["args"], dict)
        if r["type"] == "header":
            assert isinstance(r["body_size"], int) and isinstance(r["properties"], dict)
    publish = next(r for r in frames if r["method"] == "basic.publish")
    assert {"exchange", "routing_key", "mandatory", "immediate"} <= set(publish["args"])
    (ph,) = [r for r in recs if r["kind"] == "protocol-header"]
    assert ph["version"] == "0-9-1" and ph["dir"] == "c2s" and ph["raw"] == "414d515000000901"
    messages = [r for r in recs if r["kind"] == "message"]
    assert Counter(m["method"] for m in messages) == {"basic.publish": 5, "basic.deliver": 5}
    assert all(m["complete"] and m["frames"] == 3 and len(m["body_sha256"]) == 64 for m in messages)
    conns = [r for r in recs if r["kind"] == "connection"]
    assert [c["state"] for c in conns] == ["open", "close"]
    closed = conns[1]
    assert closed["user"] == "guest" and closed["vhost"] == "/" and closed["frame_max"] == 131072
    assert closed["client_product"] == "Pika Python Client Library" and closed["server_product"] == "RabbitMQ"


def test_jsonl_gap_of_whole_packets(tmp_path: Path) -> None:
    """A segment of whole frames dropped from the middle of s02: a gap object, and the frames after
    it decoded from the next packet on (its start is a frame boundary), not marked resynced."""
    if not CAPTURES.is_dir():
        pytest.skip("shared captures not present")
    src = CAPTURES / "s02_pika_confirms.pcap"
    packets = [i for i, seg in variants.data_packets(src) if seg.dst[1] == 5672]
    dropped = packets[len(packets) // 2]
    dst = tmp_path / "drop.pcap"
    variants.drop_packets(src, dst, [dropped])
    recs = jsonl(dst)
    (gap,) = [r for r in recs if r["kind"] == "gap"]
    assert set(gap) >= BASE and gap["dir"] == "c2s" and gap["size"] > 0 and gap["lost_frame"] is None
    assert not [r for r in recs if r["kind"] == "resync"]
    after = [r for r in recs if r["kind"] == "frame" and r["dir"] == "c2s" and r["packet"] >= gap["packet"]]
    assert after and not any(r["resync"] for r in after)
    # only the frames of the dropped packet are missing
    c2s = [r for r in jsonl(src) if r["kind"] == "frame" and r["dir"] == "c2s"]
    assert len([r for r in recs if r["kind"] == "frame" and r["dir"] == "c2s"]) == len(
        [r for r in c2s if r["packet"] != dropped]
    )


def test_jsonl_resync_kind(tmp_path: Path) -> None:
    """A capture started mid-conversation (after the handshake, at a publish): a resync object, and
    every frame after it marked resynced."""
    if not CAPTURES.is_dir():
        pytest.skip("shared captures not present")
    src = CAPTURES / "s02_pika_confirms.pcap"
    packets = [i for i, seg in variants.data_packets(src) if seg.dst[1] == 5672]
    dst = tmp_path / "mid.pcap"
    variants.cut_first(src, dst, packets[len(packets) // 2] - 1)
    recs = jsonl(dst)
    resyncs = [r for r in recs if r["kind"] == "resync"]
    assert resyncs and all(set(r) >= BASE and r["reason"] == "stream start not captured" for r in resyncs)
    c2s = next(r for r in resyncs if r["dir"] == "c2s")
    after = [r for r in recs if r["kind"] == "frame" and r["dir"] == "c2s" and r["packet"] >= c2s["packet"]]
    assert after and all(r["resync"] for r in after)


def test_frames_equal_oracle_via_cli() -> None:
    """The CLI's JSONL frames are tshark's rows (the library-level parity test, end to end)."""
    if not CAPTURES.is_dir():
        pytest.skip("shared captures not present")
    type_code = {"method": "1", "header": "2", "body": "3", "heartbeat": "8"}
    ours = Counter()
    for r in jsonl(S01):
        if r["kind"] == "frame":
            ours[(r["packet"], type_code[r["type"]], str(r["class_id"] or ""), str(r["method_id"] or ""))] += 1
        elif r["kind"] == "protocol-header":
            ours[(r["packet"], "H", "", "")] += 1
    want = Counter((int(r["frame"]), r["type"], r["class_id"], r["method_id"] if r["type"] == "1" else "")
                   for r in oracle_rows(S01))  # fmt: skip
    assert ours == want


# --- other formats ---------------------------------------------------------------------------------


def test_json_array_holds_the_same_records() -> None:
    records = json.loads(run("--format", "json", "--no-validate", HELLO))
    assert isinstance(records, list)
    assert records == jsonl(HELLO)


def test_csv_columns_and_rows() -> None:
    text = run("--format", "csv", "--no-validate", HELLO)
    rows = list(csv.DictReader(io.StringIO(text)))
    recs = jsonl(HELLO)
    assert len(rows) == len(recs)
    assert {"kind", "packet", "ts", "conn", "dir", "channel", "type", "method", "summary", "args"} <= set(rows[0])
    publish = next(r for r in rows if r["method"] == "basic.publish")
    assert json.loads(publish["args"])["routing_key"] and "routing_key=" in publish["summary"]
    assert [r["kind"] for r in rows] == [r["kind"] for r in recs]


def test_table_one_line_per_event() -> None:
    text = run("--format", "table", "--no-validate", HELLO)
    lines = text.splitlines()
    assert len(lines) == len(jsonl(HELLO))
    publish = [ln for ln in lines if "basic.publish" in ln and "message" not in ln]
    assert len(publish) == 5 and all(re.match(r"\s*\d+\s+\d+\.\d{6}\s+0 C→S\s+1\s", ln) for ln in publish)
    assert any("protocol-header AMQP 0-9-1" in ln for ln in lines)


def test_rich_view_folds_content_frames_and_verbose_tree() -> None:
    text = run("--format", "rich", "--no-validate", HELLO)
    assert "basic.publish" in text and "content-body" not in text  # bodies folded into message lines
    assert "message via basic.publish" in text
    tree = run("--format", "rich", "-V", "--no-validate", HELLO)
    assert "content-body" in tree
    assert re.search(r"├── routing_key: \S+", tree) and "arguments" in tree and "properties" in tree
    assert re.search(r"[├└]── headers", tree)  # nested tables become subtrees


# --- how much, and which -----------------------------------------------------------------------------


@needs_captures
def test_count_stops_after_n_packets() -> None:
    recs = jsonl("-c", 40, S01)
    frames = [r for r in recs if r["kind"] in ("frame", "protocol-header")]
    assert frames and max(r["packet"] for r in recs) <= 40
    assert len(frames) == sum(1 for r in oracle_rows(S01) if int(r["frame"]) <= 40)


def test_filter_method_name_and_glob() -> None:
    recs = jsonl("-Y", "basic.publish", HELLO)
    assert {(r["kind"], r["method"]) for r in recs} == {("frame", "basic.publish"), ("message", "basic.publish")}
    recs = jsonl("-Y", "basic.* and kind == frame and dir == s2c", HELLO)
    assert {r["method"] for r in recs} == {"basic.deliver", "basic.qos-ok", "basic.consume-ok", "basic.cancel-ok"}


def test_filter_fields_and_operators() -> None:
    recs = jsonl("-Y", "args.reply_code >= 400", ERRORS)
    assert sorted(r["args"]["reply_code"] for r in recs) == [403, 403, 404]
    recs = jsonl("-Y", 'kind == message and properties.content_type == "application/json"', HELLO)
    assert recs and all(r["properties"]["content_type"] == "application/json" for r in recs)
    recs = jsonl("-Y", "channel == 0 and not heartbeat and dir == c2s", HELLO)
    assert recs and {r["method"] for r in recs} == {"connection.start-ok", "connection.tune-ok",
                                                    "connection.open", "connection.close"}  # fmt: skip
    recs = jsonl("-Y", 'args.routing_key ~ "^amqpscope\\." or kind == connection', HELLO)
    assert {r["kind"] for r in recs} == {"frame", "message", "connection"}
    recs = jsonl("-Y", "conn in {1, 2} and connection.close", ERRORS)
    assert [(r["conn"], r["args"]["reply_code"]) for r in recs] == [(1, 200), (2, 403)]


def test_bad_filter_is_one_line_and_exit_2() -> None:
    result = CliRunner().invoke(cli, ["decode", "-Y", "channel ==", str(HELLO)])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("amqpscope: error: filter:")
    assert "Traceback" not in result.output


# --- bodies ----------------------------------------------------------------------------------------


def _messages(*args: Any) -> list[dict[str, Any]]:
    return [r for r in jsonl(*args) if r["kind"] == "message"]


def test_body_none_preview_full_text() -> None:
    assert all("body" not in m for m in _messages(HELLO))
    preview = _messages("--body", "preview", HELLO)
    full = _messages("--body", "full", HELLO)
    for p, f in zip(preview, full, strict=True):
        assert "text" in f["body"] and len(f["body"]["text"].encode()) == f["body_size"]
        assert not f["body"]["truncated"]
        assert f["body"]["text"].encode()[:64] == p["body"]["text"].encode()
        assert p["body"]["truncated"] == (f["body_size"] > 64)
    as_json = [json.loads(m["body"]["text"]) for m in full if m["properties"].get("content_type") == "application/json"]
    assert as_json


@needs_captures
def test_binary_body_as_hex() -> None:
    """s05's 1036-byte body holds 0xCE and NUL bytes: hex, never guessed into text."""
    full = [m for m in _messages("--body", "full", S05) if m["body_size"] == 1036]
    assert full and all("hex" in m["body"] for m in full)
    raw = bytes.fromhex(full[0]["body"]["hex"])
    assert len(raw) == 1036 and b"\xce" in raw and b"\x00" in raw
    preview = [m for m in _messages("--body", "preview", S05) if m["body_size"] == 1036]
    assert all(len(m["body"]["hex"]) == 128 and m["body"]["truncated"] for m in preview)


# --- credentials -------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv", "table", "rich", "rich-V"])
@pytest.mark.parametrize("path", [ERRORS, S09], ids=["samples-errors", "s09"])
def test_password_redacted_unless_asked(fmt: str, path: Path) -> None:
    if not path.exists():
        pytest.skip(f"{path} not present")
    args = ["--format", fmt.split("-")[0], *(["-V"] if fmt.endswith("-V") else []), path]
    hidden = run(*args)
    assert "s3cret" not in hidden
    assert "alice" in hidden  # the user stays visible
    shown = run("--show-credentials", *args)
    assert "s3cret" in shown


def test_credentials_in_connection_record() -> None:
    closes = [r for r in jsonl(ERRORS) if r["kind"] == "connection" and r["state"] == "close"]
    alice = [c for c in closes if c["user"] == "alice"]
    assert len(alice) == 2 and all(c["password"] is None and c["mechanism"] == "PLAIN" for c in alice)
    start_ok = [r for r in jsonl(ERRORS) if r.get("method") == "connection.start-ok"]
    assert {r["args"]["response"] for r in start_ok} == {"\x00guest\x00[redacted]", "\x00alice\x00[redacted]"}
    shown = jsonl("--show-credentials", ERRORS)
    passwords = {r["password"] for r in shown if r["kind"] == "connection" and r["state"] == "close"}
    assert passwords == {"guest", "s3cret", "wrong-password"}


# --- colour ------------------------------------------------------------------------------------------


def _on_terminal(args: list[str], env: dict[str, str]) -> str:
    """Run amqpscope with stdout on a pseudo-terminal; everything it printed."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([AMQPSCOPE, *args], stdout=slave, stderr=subprocess.DEVNULL, env={**env, "COLUMNS": "200"})
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(master)
    return b"".join(chunks).decode(errors="replace")


def test_colour_on_a_terminal_only() -> None:
    clean = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "TERM")}
    os_env = {**clean, "TERM": "xterm-256color"}
    tty = _on_terminal(["decode", "--no-validate", str(HELLO)], os_env)
    assert "basic.publish" in tty and COLOUR.search(tty), "a terminal gets the rich view in colour"
    no_color = _on_terminal(["decode", "--no-validate", str(HELLO)], {**os_env, "NO_COLOR": "1"})
    assert "basic.publish" in no_color and not COLOUR.search(no_color)
    piped = subprocess.run([AMQPSCOPE, "decode", "--format", "rich",
                            "--no-validate", str(HELLO)], capture_output=True, env=os_env, check=True)  # fmt: skip
    assert b"basic.publish" in piped.stdout and not ANSI.search(piped.stdout.decode())
    default_piped = subprocess.run([AMQPSCOPE, "decode", "--no-validate",
                                    str(HELLO)], capture_output=True, env=os_env, check=True)  # fmt: skip
    assert json.loads(default_piped.stdout.splitlines()[0])["kind"] == "connection"  # jsonl when piped


# --- inputs --------------------------------------------------------------------------------------------


def test_several_files_one_stream() -> None:
    both = jsonl(HELLO, ERRORS)
    assert both == jsonl(HELLO) + jsonl(ERRORS)


def test_stdin_and_gzip(tmp_path: Path) -> None:
    want = jsonl(HELLO)
    assert [
        json.loads(x) for x in run("--format", "jsonl", "--no-validate", "-", input=HELLO.read_bytes()).splitlines()
    ] == want
    gz = tmp_path / "hello.pcap.gz"
    variants.compress(HELLO, gz, "gz")
    assert jsonl(gz) == want
    piped = subprocess.run([AMQPSCOPE, "decode", "--no-validate", "-"],
                           input=gz.read_bytes(), capture_output=True, check=True)  # fmt: skip
    assert [json.loads(x) for x in piped.stdout.splitlines()] == want


@pytest.mark.parametrize(("content", "code"), [(b"not a capture at all", 4), (None, 3)])
def test_bad_input_one_line_error(tmp_path: Path, content: bytes | None, code: int) -> None:
    path = tmp_path / "bad.pcap"
    if content is not None:
        path.write_bytes(content)
    result = CliRunner().invoke(cli, ["decode", str(path)])
    assert result.exit_code == code
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("amqpscope: error:")
    assert "Traceback" not in result.output


def test_good_file_then_bad_file_keeps_the_good_output(tmp_path: Path) -> None:
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(b"\x00" * 30)
    result = CliRunner().invoke(cli, ["decode", "--format", "jsonl", "--no-validate", str(HELLO), str(bad)])
    assert result.exit_code == 4
    assert [json.loads(x) for x in result.stdout.splitlines()] == jsonl(HELLO)


def test_rich_view_shows_emoji_codes_in_data_literally(tmp_path: Path) -> None:
    """A routing key ':cat:' is data: rich must not turn it into an emoji (found by the robustness work)."""
    from amqpscope.testing.synth import Capture

    cap = Capture()
    conn = cap.connection()
    conn.handshake()
    conn.open_channel(1)
    conn.publish(1, body=b"meow", routing_key=":cat:")
    conn.close()
    path = tmp_path / "emoji.pcap"
    cap.write(str(path))
    from amqpscope.cli.main import cli
    from click.testing import CliRunner

    out = CliRunner().invoke(cli, ["decode", "-T", "rich", "-V", str(path)]).output
    assert ":cat:" in out and "\N{CAT FACE}" not in out

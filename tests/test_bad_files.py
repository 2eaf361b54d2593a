"""Bad capture files: one clear line on stderr, distinct exit codes, no traceback, and whatever was
decoded before the fault is still output.

Exit codes (cli/common.py): 3 unreadable (missing, a directory, no permission), 4 not a capture
(including an empty file), 5 truncated (file header or a record cut short), 6 corrupt (absurd
record length), 7 no packet of a supported link type.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from amqpscope.capture import read_packets
from cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
HELLO = ROOT / "samples" / "hello.pcap"
COMMANDS = {
    "decode": ["decode", "-T", "jsonl", "--no-progress"],
    "validate": ["validate", "-T", "jsonl"],
    "stats": ["stats", "-T", "json"],
}


def _record_offsets(path: Path) -> list[int]:
    """File offset of each pcap record header (classic pcap, as the samples are)."""
    data = path.read_bytes()
    offs, pos = [], 24
    while pos + 16 <= len(data):
        offs.append(pos)
        caplen = struct.unpack_from("<I", data, pos + 8)[0]
        pos += 16 + caplen
    return offs


def _not_a_capture(d: Path) -> Path:
    p = d / "notes.txt"
    p.write_text("these are my notes, not packets\n")
    return p


def _empty(d: Path) -> Path:
    p = d / "empty.pcap"
    p.write_bytes(b"")
    return p


def _truncated_header(d: Path) -> Path:
    p = d / "header.pcap"
    p.write_bytes(HELLO.read_bytes()[:13])
    return p


def _truncated_last(d: Path) -> Path:
    p = d / "last.pcap"
    data = HELLO.read_bytes()
    last = _record_offsets(HELLO)[-1]
    p.write_bytes(data[: last + 16 + 20])  # the last record's header and 20 of its bytes
    return p


def _unknown_linktype(d: Path) -> Path:
    p = d / "linktype.pcap"
    data = bytearray(HELLO.read_bytes())
    data[20:24] = struct.pack("<I", 147)  # LINKTYPE_USER0
    p.write_bytes(bytes(data))
    return p


def _directory(d: Path) -> Path:
    p = d / "captures.pcap"
    p.mkdir()
    return p


def _missing(d: Path) -> Path:
    return d / "no-such.pcap"


def _corrupt(d: Path) -> Path:
    p = d / "corrupt.pcap"
    data = bytearray(HELLO.read_bytes())
    rec = _record_offsets(HELLO)[5]
    data[rec + 8 : rec + 12] = struct.pack("<I", 0x7FFFFFFF)  # caplen of 2 GB
    p.write_bytes(bytes(data))
    return p


def _gzip_cut(d: Path) -> Path:
    p = d / "cut.pcap.gz"
    z = gzip.compress(HELLO.read_bytes())
    p.write_bytes(z[: len(z) * 2 // 3])
    return p


CASES: dict[str, tuple[Callable[[Path], Path], int, str]] = {
    "not a capture": (_not_a_capture, 4, "is not a capture file (unknown magic"),
    "empty file": (_empty, 4, "is not a capture file (empty file)"),
    "truncated file header": (_truncated_header, 5, "pcap file header has 13 of 24 bytes"),
    "truncated last packet": (_truncated_last, 5, "last record (packet 59) is incomplete"),
    "unknown link type": (_unknown_linktype, 11, "no packet of a supported link type (link type 147)"),
    "a directory": (_directory, 3, "Is a directory"),
    "missing": (_missing, 3, "No such file or directory"),
    "corrupt record length": (_corrupt, 6, "claims 2147483647 captured bytes"),
    "compressed stream cut": (_gzip_cut, 5, "compressed stream ends early"),
}


def _invoke(args: list[str]) -> Result:
    return CliRunner().invoke(cli, args, catch_exceptions=True)


def _one_error_line(result: Result, expect: str) -> str:
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("amqpscope: error: ") and expect in lines[0], lines[0]
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout
    return lines[0]


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("case", list(CASES))
def test_bad_file(case: str, command: str, tmp_path: Path) -> None:
    make, code, expect = CASES[case]
    path = make(tmp_path)
    result = _invoke([*COMMANDS[command], str(path)])
    _one_error_line(result, expect)
    assert result.exit_code == code, (result.exit_code, result.stderr)


def test_exit_codes_are_distinct_per_kind_of_fault() -> None:
    by_code: dict[int, set[str]] = {}
    for case, (_, code, _) in CASES.items():
        by_code.setdefault(code, set()).add(case)
    assert set(by_code) == {3, 4, 5, 6, 11}
    assert by_code[3] == {"a directory", "missing"}  # unreadable (permission: below)


def _decode_records(args: list[str]) -> tuple[list[dict], Result]:
    result = _invoke(["decode", "-T", "jsonl", "--no-progress", "--no-validate", *args])
    return [json.loads(line) for line in result.stdout.splitlines()], result


def test_truncated_in_the_middle_prints_everything_before_the_fault(tmp_path: Path) -> None:
    """Cut a real capture in the middle of packet k: every frame of packets 1..k-1 is printed,
    then the one error line, exit code 5."""
    offs = _record_offsets(HELLO)
    k = 31
    cut = tmp_path / "middle.pcap"
    cut.write_bytes(HELLO.read_bytes()[: offs[k - 1] + 16 + 30])  # 30 bytes into packet k
    full, _ = _decode_records([str(HELLO)])
    got, result = _decode_records([str(cut)])
    _one_error_line(result, f"last record (packet {k}) is incomplete")
    assert result.exit_code == 5
    frames_before = [r for r in full if r["kind"] == "frame" and r["packet"] < k]
    frames_got = [r for r in got if r["kind"] == "frame"]
    assert len(frames_before) >= 20 and frames_got == frames_before
    # the connection is still closed (at the end of what was read) and reported
    assert any(r["kind"] == "connection" and r["state"] == "close" for r in got)


@pytest.mark.parametrize("command", ["validate", "stats"])
def test_truncated_capture_still_reports_for_validate_and_stats(command: str, tmp_path: Path) -> None:
    path = _truncated_last(tmp_path)
    result = _invoke([*COMMANDS[command], str(path)])
    _one_error_line(result, "is truncated")
    assert result.exit_code == 5 and result.stdout.strip()
    if command == "stats":
        doc = json.loads(result.stdout)
        assert doc  # the analytics of the 58 complete packets


def test_several_files_one_bad(tmp_path: Path) -> None:
    """The good files around a bad one are decoded in full; the exit code is the bad file's."""
    bad = _not_a_capture(tmp_path)
    one, _ = _decode_records([str(HELLO)])
    got, result = _decode_records([str(HELLO), str(bad), str(HELLO)])
    _one_error_line(result, "is not a capture file")
    assert result.exit_code == 4
    assert len(got) == 2 * len(one)


def test_stdin_that_is_not_a_capture() -> None:
    result = CliRunner().invoke(cli, ["decode", "-T", "jsonl", "-"], input=b"GET / HTTP/1.1\r\n\r\n")
    _one_error_line(result, "is not a capture file (unknown magic 47455420)")
    assert result.exit_code == 4


def _as_nobody() -> list[str] | None:
    if os.geteuid() != 0:
        return None
    if shutil.which("setpriv"):
        return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]
    if shutil.which("runuser"):
        return ["runuser", "-u", "nobody", "--"]
    return None


@pytest.mark.parametrize("command", list(COMMANDS))
def test_no_read_permission(command: str, tmp_path: Path) -> None:
    """Run as the unprivileged user ``nobody`` (the tests run as root, who may read anything)."""
    prefix = _as_nobody()
    if prefix is None:
        pytest.skip("needs root and setpriv/runuser to run the command as an unprivileged user")
    tmp_path.chmod(0o755)
    path = tmp_path / "secret.pcap"
    shutil.copy(HELLO, path)
    path.chmod(0o000)
    env = dict(os.environ, HOME="/tmp")
    exe = str(Path(sys.executable).with_name("amqpscope"))
    proc = subprocess.run([*prefix, exe, *COMMANDS[command], str(path)], capture_output=True, text=True, env=env,
                          timeout=120)  # fmt: skip
    if "Permission denied" in proc.stderr and "secret.pcap" not in proc.stderr:
        pytest.skip(f"nobody cannot run the venv's interpreter: {proc.stderr.strip()[:200]}")
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == [f"amqpscope: error: cannot read capture '{path}': Permission denied"], proc.stderr
    assert proc.returncode == 3
    assert "Traceback" not in proc.stderr


def test_real_process_truncated_capture_exit_code(tmp_path: Path) -> None:
    """One real process (not click's runner): stdout has the frames, stderr one line, exit 5."""
    path = _truncated_last(tmp_path)
    exe = str(Path(sys.executable).with_name("amqpscope"))
    proc = subprocess.run([exe, "decode", "-T", "jsonl", "--no-progress", str(path)], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 5
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("amqpscope: error: ")
    assert sum(1 for line in proc.stdout.splitlines() if '"kind":"frame"' in line) > 50


def test_read_packets_raises_only_capture_errors(tmp_path: Path) -> None:
    """The library API: the same faults are CaptureError subclasses with one-line messages."""
    from amqpscope.capture import CaptureError

    for case, (make, code, expect) in CASES.items():
        if code == 11:
            continue  # a CLI-level verdict: the file itself reads fine
        d = tmp_path / case.replace(" ", "_")
        d.mkdir()
        with pytest.raises(CaptureError) as info:
            list(read_packets(make(d)))
        assert info.value.exit_code == code and "\n" not in str(info.value) and expect in str(info.value)

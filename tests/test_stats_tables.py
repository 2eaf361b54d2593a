"""``stats`` and ``report`` over Parquet tables (``decode --format parquet`` output): the analysis
read back from the tables equals the analysis of the capture itself, figure for figure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import CAPTURES

from cli.main import cli

pytest.importorskip("pyarrow")

from amqpscope.spark.local import write_tables

ROOT = Path(__file__).resolve().parents[1]
SHARED = sorted(CAPTURES.glob("*.pcap")) if CAPTURES.is_dir() else []
SAMPLES = sorted((ROOT / "samples").glob("*.pcap"))
PORTS = frozenset({5672, 5673, 25672})
PORT_ARGS = ["--port", "5673", "--port", "25672"]


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def _stats(*args: str) -> dict[str, Any]:
    code, out, err = _run("stats", "-T", "json", *args)
    assert code == 0, err
    return json.loads(out)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every shared capture and sample in one tables directory."""
    out = tmp_path_factory.mktemp("tables") / "o"
    write_tables([str(p) for p in SHARED + SAMPLES], str(out), ports=PORTS)
    return out


@pytest.mark.parametrize("path", SHARED + SAMPLES, ids=lambda p: p.name)
def test_stats_of_tables_equal_stats_of_the_capture(tables: Path, path: Path) -> None:
    want = _stats(*PORT_ARGS, str(path))
    got = _stats(str(tables), "--capture", f"*/{path.name}")
    assert want["capture"]["events"] > 0
    for key in want:
        assert got[key] == want[key], key
    assert got == want


def test_several_captures_keep_their_connections_apart(tables: Path, captures_dir: Path) -> None:
    """Captures in URI order, each one's connections after the previous one's, as for files."""
    a, b = captures_dir / "s02_pika_confirms.pcap", captures_dir / "s04_pika_consumer_acks.pcap"
    want = _stats(*PORT_ARGS, str(a), str(b))
    got = _stats(str(tables), "--capture", "*/s02_*", "--capture", "*/s04_*")
    assert [(c["conn"], c["file"]) for c in got["connections"]] == [(0, 0), (1, 1)]
    assert got == want


def test_capture_id_selects_and_no_match_is_an_error(tables: Path) -> None:
    from amqpscope.spark.reader import list_captures

    caps = list_captures(str(tables))
    assert len(caps) == len(SHARED + SAMPLES)
    one = caps[0]
    assert _stats(str(tables), "--capture", one.capture_id) == _stats(*PORT_ARGS, one.capture.removeprefix("file://"))
    code, _out, err = _run("stats", "-T", "json", str(tables), "--capture", "nothing-like-this")
    assert code == 2 and "no capture matches --capture" in err


def test_no_validate_leaves_findings_out(tables: Path) -> None:
    r = _stats(str(tables), "--no-validate", "--capture", "*/s09_pika_errors.pcap")
    assert r["findings"] == {} and r["methods"]


def test_mixing_captures_and_tables_is_an_error(tables: Path) -> None:
    code, _out, err = _run("stats", str(tables), str(SAMPLES[0]))
    assert code == 2 and "not both" in err


def test_truncated_capture_in_tables(tmp_path: Path, captures_dir: Path) -> None:
    """A damaged capture's tables: the rows before the damage, analysed as the capture is, and
    the same exit code and error line."""
    cut = tmp_path / "cut.pcap"
    cut.write_bytes((captures_dir / "s02_pika_confirms.pcap").read_bytes()[:20_000])
    write_tables([str(cut)], str(tmp_path / "o"), ports=PORTS)
    code_a, want, _ = _run("stats", "-T", "json", *PORT_ARGS, str(cut))
    code_b, got, err = _run("stats", "-T", "json", str(tmp_path / "o"))
    assert code_a == code_b == 5 and "truncated" in err
    assert json.loads(got) == json.loads(want)


def test_report_renders_from_tables(tables: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    code, _out, err = _run("report", str(tables), "--capture", "*/s14_aiopika_rpc.pcap", "-o", str(out))
    assert code == 0, err
    page = out.read_text()
    assert "<html" in page and "s14_aiopika_rpc.pcap" in page
    direct = tmp_path / "d.html"
    code, _out, err = _run("report", *PORT_ARGS, str(CAPTURES / "s14_aiopika_rpc.pcap"), "-o", str(direct))
    assert code == 0, err
    assert page == direct.read_text()

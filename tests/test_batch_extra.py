"""``amqpscope batch`` on an install without the spark extra: one line with the command that adds it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from amqpscope.cli.main import cli
from click.testing import CliRunner


def test_batch_without_pyspark_names_the_install_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "pyspark", None)  # import pyspark raises ModuleNotFoundError
    res = CliRunner().invoke(cli, ["batch", str(tmp_path), "--out-dir", str(tmp_path / "out")])
    assert res.exit_code == 2
    assert res.stdout == ""
    assert res.stderr.splitlines() == [
        "amqpscope: error: amqpscope batch needs the spark extra (no module named 'pyspark'): "
        "pip install 'amqpscope[spark]' (from a checkout: pip install -e '.[spark]')"
    ]
    assert not (tmp_path / "out").exists()

"""Shared test setup: the private RabbitMQ fixture and where the shared material lives."""

from __future__ import annotations

from pathlib import Path

import amqpscope.cli
import pytest

# The tests exercise this checkout's commands: amqpscope.cli is the cli/ directory next to them, even
# when the installed package was built from another tree (a worktree sharing a virtualenv).
amqpscope.cli.__path__[:] = [str(Path(__file__).resolve().parents[1] / "cli")]

pytest_plugins = ["tests.conftest_broker", "tests.conftest_spark"]

SHARED = Path(__file__).resolve().parents[2] / "shared"
CAPTURES = SHARED / "captures"


@pytest.fixture(scope="session")
def captures_dir() -> Path:
    if not CAPTURES.is_dir():
        pytest.skip(f"shared captures not found at {CAPTURES}")
    return CAPTURES

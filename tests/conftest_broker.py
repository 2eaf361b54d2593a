"""pytest plugin: a session-wide private RabbitMQ broker for live tests.

Register it from tests/conftest.py with::

    pytest_plugins = ["tests.conftest_broker"]

Fixtures:

* ``rabbitmq`` (session): a started ``amqpscope.testing.PrivateBroker`` (127.0.0.1 only,
  its own port from 25672 up, users guest/guest and alice/s3cret on vhost ``scope``).
  Skips the test when RabbitMQ is not installed and cannot be installed.
* ``loopback_recorder`` (function): a factory ``(path, port) -> LoopbackRecorder``;
  skips when tcpdump is missing or capturing on ``lo`` is not permitted.

Set ``AMQPSCOPE_INSTALL_DEPS=1`` to let the fixture run tools/install-system-deps.sh
(needs root) when rabbitmq-server or tcpdump is missing.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from amqpscope.testing.broker import BrokerError, PrivateBroker, rabbitmq_available
from amqpscope.testing.sniffer import LoopbackRecorder, RecorderError, tcpdump_available

ROOT = Path(__file__).resolve().parent.parent
INSTALL_SCRIPT = ROOT / "tools" / "install-system-deps.sh"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "broker: needs a live private RabbitMQ broker (and tcpdump)")


def _try_install() -> str | None:
    """Run the install script when allowed; return why it was not possible."""
    if os.environ.get("AMQPSCOPE_INSTALL_DEPS") != "1":
        return "set AMQPSCOPE_INSTALL_DEPS=1 or run tools/install-system-deps.sh"
    if os.geteuid() != 0:
        return "installing needs root"
    try:
        subprocess.run(["bash", str(INSTALL_SCRIPT)], check=True, capture_output=True, timeout=900)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"tools/install-system-deps.sh failed: {exc}"
    return None


@pytest.fixture(scope="session")
def rabbitmq() -> Iterator[PrivateBroker]:
    if not rabbitmq_available():
        why = _try_install()
        if not rabbitmq_available():
            pytest.skip(f"rabbitmq-server is not installed ({why})")
    broker = PrivateBroker()
    try:
        broker.start()
    except BrokerError as exc:
        pytest.skip(f"private RabbitMQ broker could not start: {exc}")
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def loopback_recorder() -> Callable[[Path, int], LoopbackRecorder]:
    if not tcpdump_available():
        why = _try_install()
        if not tcpdump_available():
            pytest.skip(f"tcpdump is not installed ({why})")

    def make(path: Path, port: int) -> LoopbackRecorder:
        return LoopbackRecorder(path, port)

    return make


__all__ = ["RecorderError", "loopback_recorder", "rabbitmq"]

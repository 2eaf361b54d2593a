"""tools/record_suite.py: a command run against the harness broker while its port is recorded.

The live test records a tiny pika script as the "suite" (it reads the broker from AMQP_URL as
aiormq's suite does, and from RABBITMQ_HOST/RABBITMQ_5672_TCP as py-amqp's and kombu's do) and
checks that the capture decodes into its connections and that the script's exit status is the
tool's. The others need no broker.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

from amqpscope import read
from amqpscope.events import Connection, Frame
from amqpscope.testing.broker import PrivateBroker, rabbitmq_available
from amqpscope.testing.sniffer import tcpdump_available

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "record_suite.py"


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("record_suite", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up while it is built
    spec.loader.exec_module(module)
    return module


# Two connections as two suites would make them: one from the URL, one from host and port.
SUITE = """
import os, sys
import pika

by_url = pika.BlockingConnection(pika.URLParameters(os.environ["AMQP_URL"]))
ch = by_url.channel()
q = ch.queue_declare("", exclusive=True).method.queue
ch.basic_publish("", q, b"from the suite")
by_url.close()
by_port = pika.BlockingConnection(pika.ConnectionParameters(
    os.environ["RABBITMQ_HOST"], int(os.environ["RABBITMQ_5672_TCP"]),
    client_properties={"connection_name": os.environ["SUITE_NAME"]}))
by_port.channel().queue_declare("", exclusive=True)
by_port.close()
sys.exit(3)
"""


@pytest.mark.broker
def test_records_a_suite_and_returns_its_status(tmp_path: Path) -> None:
    pytest.importorskip("pika")
    if not rabbitmq_available() or not tcpdump_available():
        pytest.skip("needs rabbitmq-server and tcpdump (tools/install-system-deps.sh)")
    out = tmp_path / "suite.pcap"
    res = subprocess.run(
        [sys.executable, str(TOOL), "--out", str(out), "--env", "SUITE_NAME=suite-on-{port}", "--timeout", "120",
         "--", sys.executable, "-c", SUITE],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 3, res.stderr
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["returncode"] == 3 and not summary["timed_out"]
    assert summary["capture"] == str(out) and summary["capture_bytes"] == out.stat().st_size
    assert summary["packets_captured"] > 20 and summary["packets_dropped"] == 0

    events = list(read(out, ports=(summary["port"],)))
    connections = [ev for ev in events if isinstance(ev, Connection) and ev.state == "close"]
    assert len(connections) == 2
    assert all(ev.client_product == "Pika Python Client Library" for ev in connections)
    assert {ev.server.rsplit(":", 1)[1] for ev in connections} == {str(summary["port"])}
    names = {(ev.client_properties or {}).get("connection_name") for ev in connections}
    assert names == {None, f"suite-on-{summary['port']}"}
    methods = [ev.method for ev in events if isinstance(ev, Frame) and ev.method]
    assert methods.count("basic.publish") == 1 and methods.count("connection.close-ok") == 2


def test_environment_names_the_broker_as_suites_read_it() -> None:
    broker = PrivateBroker()
    broker.port = 25999  # not started: the environment is built from its address alone
    env = _tool().suite_environment(broker, {"PIKA_URL": "{url}?heartbeat=0", "HOST_PORT": "{host}:{port}"})
    url = "amqp://guest:guest@127.0.0.1:25999/%2F"
    assert env["AMQP_URL"] == env["RABBITMQ_URL"] == env["BROKER_URL"] == url
    assert env["RABBITMQ_HOST"] == "127.0.0.1" and env["RABBITMQ_5672_TCP"] == env["RABBITMQ_PORT"] == "25999"
    assert env["PIKA_URL"] == url + "?heartbeat=0" and env["HOST_PORT"] == "127.0.0.1:25999"
    assert "RABBITMQ_5671_TCP" not in env  # no TLS listener asked for


def test_a_command_past_its_timeout_is_killed_with_its_children(tmp_path: Path) -> None:
    marker = tmp_path / "child-alive"
    # the shell's child outlives the shell unless the whole process group is killed
    script = f"(sleep 3; touch {marker}) & sleep 30"
    t0 = time.monotonic()
    code, timed_out = _tool().run_command(["sh", "-c", script], {}, None, timeout=0.5)
    assert (code, timed_out) == (124, True) and time.monotonic() - t0 < 10
    time.sleep(3.5)
    assert not marker.exists()


def test_a_command_killed_by_a_signal_exits_as_shells_say() -> None:
    code, timed_out = _tool().run_command(["sh", "-c", "kill -TERM $$"], {}, None, timeout=10)
    assert (code, timed_out) == (128 + 15, False)

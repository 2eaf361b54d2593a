"""Record a command's AMQP traffic (another client library's test suite) against the harness broker.

Starts a private loopback RabbitMQ (amqpscope.testing.broker), records its AMQP port on ``lo`` with
tcpdump (amqpscope.testing.sniffer), runs COMMAND with the broker's address in the environment
variables that client test suites read, then stops the capture and the broker::

    python tools/record_suite.py --out aiormq.pcap --cwd /tmp/suites/aiormq -- \\
        /tmp/suites/venv/bin/python -m pytest tests -k "not amqps"

Each suite reads its broker differently, so all of these are set (an ``--env NAME=TEMPLATE`` adds or
overrides one; templates may use {host}, {port}, {url}, {tls_port}, {ca}):

    AMQP_URL, RABBITMQ_URL, BROKER_URL, AMQPSCOPE_BROKER_URL   amqp://guest:guest@127.0.0.1:PORT/%2F
    RABBITMQ_HOST, RABBITMQ_PORT, RABBITMQ_5672_TCP, AMQPSCOPE_BROKER_PORT   127.0.0.1 and PORT

With ``--tls`` the broker also listens with TLS (its own CA); that port is recorded into the same
file (without keys: the capture shows it encrypted) and given as RABBITMQ_5671_TCP, AMQPS_PORT and
AMQPS_URL, with the CA file in AMQPSCOPE_CA_FILE.

The exit status is the command's (124 when it ran past ``--timeout`` and was killed, as timeout(1)
does); one JSON line on stdout says what was recorded. Only loopback traffic is recorded.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from amqpscope.testing.broker import LOOPBACK, PrivateBroker
from amqpscope.testing.sniffer import LoopbackRecorder

TIMED_OUT = 124


@dataclass(frozen=True)
class Recording:
    """What one run recorded (the JSON line the script prints)."""

    command: list[str]
    returncode: int
    timed_out: bool
    seconds: float
    port: int
    tls_port: int | None
    capture: str
    capture_bytes: int
    packets_captured: int | None
    packets_dropped: int | None


def suite_environment(broker: PrivateBroker, templates: Mapping[str, str]) -> dict[str, str]:
    """The variables test suites read their broker from, then the caller's templates filled in."""
    fields = {
        "host": LOOPBACK,
        "port": str(broker.port),
        "url": broker.url,
        "tls_port": str(broker.tls_port or ""),
        "ca": str(broker.ca_file or ""),
    }
    env = {name: broker.url for name in ("AMQP_URL", "RABBITMQ_URL", "BROKER_URL", "AMQPSCOPE_BROKER_URL")}
    for name in ("RABBITMQ_PORT", "RABBITMQ_5672_TCP", "AMQPSCOPE_BROKER_PORT"):
        env[name] = str(broker.port)
    env["RABBITMQ_HOST"] = LOOPBACK
    if broker.tls_port:
        env["RABBITMQ_5671_TCP"] = env["AMQPS_PORT"] = str(broker.tls_port)
        env["AMQPS_URL"] = f"amqps://guest:guest@{LOOPBACK}:{broker.tls_port}/%2F"
        env["AMQPSCOPE_CA_FILE"] = str(broker.ca_file)
    env.update({name: template.format(**fields) for name, template in templates.items()})
    return env


def run_command(command: Sequence[str], env: Mapping[str, str], cwd: Path | None, timeout: float) -> tuple[int, bool]:
    """Run ``command`` in its own process group; kill that group when it outlives ``timeout``."""
    proc = subprocess.Popen(list(command), env={**os.environ, **env}, cwd=cwd, start_new_session=True)
    try:
        code = proc.wait(timeout=timeout)
        return (128 - code if code < 0 else code), False  # killed by signal N: 128+N, as shells say
    except subprocess.TimeoutExpired:
        # A suite's own children (brokers' clients, proxies) live in the group: end them all.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        return TIMED_OUT, True


def record(
    command: Sequence[str],
    out: Path,
    *,
    cwd: Path | None = None,
    timeout: float = 600.0,
    templates: Mapping[str, str] | None = None,
    broker_config: Sequence[str] = (),
    tls: bool = False,
    buffer_kib: int = 262144,
    port: int | None = None,
) -> Recording:
    """Start the broker and the capture, run ``command``, stop both; the capture is complete on return."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with PrivateBroker(port, extra_config="\n".join(broker_config), tls=tls) as broker:
        also = (broker.tls_port,) if broker.tls_port else ()
        recorder = LoopbackRecorder(out, broker.port, also_ports=also, settle=1.0, buffer_kib=buffer_kib)
        with recorder:
            env = suite_environment(broker, templates or {})
            t0 = time.monotonic()
            returncode, timed_out = run_command(command, env, cwd, timeout)
            seconds = time.monotonic() - t0
    return Recording(
        command=list(command),
        returncode=returncode,
        timed_out=timed_out,
        seconds=round(seconds, 1),
        port=broker.port,
        tls_port=broker.tls_port or None,
        capture=str(out),
        capture_bytes=out.stat().st_size,
        packets_captured=recorder.packets_captured,
        packets_dropped=recorder.packets_dropped,
    )


def _template(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=TEMPLATE, got {text!r}")
    return name, value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, required=True, help="pcap file to write")
    parser.add_argument("--cwd", type=Path, help="directory to run the command in")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds before the command is killed")
    parser.add_argument("--env", type=_template, action="append", default=[], metavar="NAME=TEMPLATE")
    parser.add_argument("--broker-config", action="append", default=[], metavar="LINE",
                        help="a rabbitmq.conf line added to the harness's (e.g. heartbeat = 5)")  # fmt: skip
    # pika's acceptance tests name 127.0.0.1:5672 in their code, with no variable to change it
    parser.add_argument("--port", type=int, help="the broker's AMQP port (default: a free one from 25672 up)")
    parser.add_argument("--tls", action="store_true", help="also a TLS listener, recorded into the same file")
    # Suites publish bodies of megabytes in 64 KiB loopback packets faster than tcpdump writes them:
    # tcpdump's default 32 MiB ring dropped 206 of 33,000 packets of aiormq's suite on 2 busy cores.
    parser.add_argument("--buffer-kib", type=int, default=262144, help="tcpdump's kernel buffer (-B)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (put it after --)")
    rec = record(
        command,
        args.out,
        cwd=args.cwd,
        timeout=args.timeout,
        templates=dict(args.env),
        broker_config=args.broker_config,
        tls=args.tls,
        buffer_kib=args.buffer_kib,
        port=args.port,
    )
    print(json.dumps(asdict(rec)), flush=True)
    return rec.returncode


if __name__ == "__main__":
    sys.exit(main())

"""No credential leaks: no output shows a password unless ``--show-credentials`` is given.

The captures that log in as ``alice`` (PLAIN, password ``s3cret``; see ../shared/captures/README.md
and samples/README.md): s09, s11, s13 and samples/errors.pcap; s09 and samples/errors.pcap also
hold a failed login with ``wrong-password``. Every output is searched as raw bytes for each
password, and for any base64 or hex token that decodes to bytes containing it (outputs render
byte strings as hex). Covered: decode in every format (with full bodies), validate, stats, flow,
the HTML report, the library API, Spark's Parquet tables (``batch``) and live ``sniff`` output.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import CAPTURES

import amqpscope
from amqpscope.output.records import dumpb, record
from cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
SECRETS = (b"s3cret", b"wrong-password")
_ALICE = ("s09_pika_errors.pcap", "s11_amqptools_basic.pcap", "s13_kombu_simple_queue.pcap")
FILES = [str(CAPTURES / n) for n in _ALICE if (CAPTURES / n).exists()] + [str(ROOT / "samples" / "errors.pcap")]
PORTS = ["--port", "5673", "--port", "25672"]

_B64 = re.compile(rb"[A-Za-z0-9+/]{8,}={0,2}")
_HEX = re.compile(rb"(?:[0-9a-fA-F]{2}[ :]?){6,}")


def leaks(data: bytes) -> list[str]:
    """Where a password shows in ``data``: raw, or inside a base64 or hex token."""
    found = [f"raw {s.decode()}" for s in SECRETS if s in data]
    for m in _HEX.finditer(data):
        raw = re.sub(rb"[ :]", b"", m.group())
        try:
            decoded = binascii.unhexlify(raw[: len(raw) // 2 * 2])
        except binascii.Error:
            continue
        found += [f"hex {s.decode()}" for s in SECRETS if s in decoded]
    for m in _B64.finditer(data):
        tok = m.group()
        for start in range(4):  # the token may begin mid-quantum inside a longer string
            piece = tok[start:]
            try:
                decoded = base64.b64decode(piece + b"=" * (-len(piece) % 4), validate=False)
            except (binascii.Error, ValueError):
                continue
            found += [f"base64 {s.decode()}" for s in SECRETS if s in decoded]
    return sorted(set(found))


def test_leak_detector_finds_every_form() -> None:
    """The search itself: raw, hex (plain, spaced, upper case) and base64 at any alignment."""
    response = b"\x00alice\x00s3cret"
    assert leaks(b'{"x": "s3cret"}')
    assert leaks(response.hex().encode())
    assert leaks(b"00 61 6C 69 63 65 00 73 33 63 72 65 74")
    for prefix in (b"", b"a", b"ab", b"abc"):
        assert leaks(base64.b64encode(prefix + response)), prefix
    assert not leaks(b'{"password": null, "response": "\\u0000alice\\u0000[redacted]"}')


def _run(args: list[str]) -> bytes:
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code in (0, 1), (args, result.exit_code, result.stderr[-2000:])  # 1: validate findings
    return result.stdout_bytes + result.stderr_bytes


DECODE_FORMATS = [["-T", "jsonl", "--stats"], ["-T", "json"], ["-T", "csv"], ["-T", "table"], ["-T", "rich"],
                  ["-T", "rich", "-V"]]  # fmt: skip


@pytest.mark.parametrize("fmt", DECODE_FORMATS, ids=lambda f: " ".join(f))
def test_decode(fmt: list[str]) -> None:
    args = ["decode", *fmt, "--body", "full", "--no-progress", *PORTS, *FILES]
    assert leaks(_run(args)) == []
    shown = _run([*args[:1], "--show-credentials", *args[1:]])
    assert b"s3cret" in shown and b"wrong-password" in shown


@pytest.mark.parametrize("fmt", [["-T", "jsonl"], ["-T", "rich"]], ids=lambda f: " ".join(f))
def test_validate(fmt: list[str]) -> None:
    assert leaks(_run(["validate", *fmt, *PORTS, *FILES])) == []
    # findings carry no credentials, shown or not: nothing to assert for --show-credentials


@pytest.mark.parametrize("fmt", [["-T", "json"], ["-T", "rich"]], ids=lambda f: " ".join(f))
def test_stats(fmt: list[str]) -> None:
    assert leaks(_run(["stats", *fmt, *PORTS, *FILES])) == []
    assert b"s3cret" in _run(["stats", "--show-credentials", *fmt, *PORTS, *FILES])


def test_report(tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    _run(["report", "-o", str(out), *PORTS, *FILES])
    assert leaks(out.read_bytes()) == []
    _run(["report", "--show-credentials", "-o", str(out), *PORTS, *FILES])
    assert b"s3cret" in out.read_bytes()


def _alice_conns(path: str) -> list[int]:
    recs = [
        r for ev in amqpscope.read(path, ports=(5672, 5673, 25672)) if (r := ev.to_record())["kind"] == "connection"
    ]
    return sorted({r["conn"] for r in recs if r.get("user") == "alice"})


@pytest.mark.parametrize("path", FILES, ids=lambda p: Path(p).name)
def test_flow(path: str) -> None:
    conns = _alice_conns(path)
    assert conns
    for conn in conns:
        for fmt in ("text", "mermaid", "svg"):
            assert leaks(_run(["flow", "--conn", str(conn), "-T", fmt, *PORTS, path])) == [], (conn, fmt)


@pytest.mark.parametrize("path", FILES, ids=lambda p: Path(p).name)
def test_library_api(path: str) -> None:
    """``amqpscope.read``: records (with full bodies) and the pandas frame of every kind."""
    stream = amqpscope.read(path, ports=(5672, 5673, 25672))
    data = b"\n".join(dumpb(record(ev, "full")) for ev in stream)
    assert leaks(data) == []
    assert leaks(stream.to_pandas(kinds=None).to_csv().encode()) == []
    shown = amqpscope.read(path, ports=(5672, 5673, 25672), show_credentials=True)
    assert b"s3cret" in b"\n".join(dumpb(ev.to_record()) for ev in shown)


def _amqplain_capture(path: Path) -> None:
    """A login with AMQPLAIN (no shared capture has one): the response is a field table without its
    length prefix holding LOGIN and PASSWORD; also a secure-ok and an update-secret."""
    from amqpscope.dissect.codec import get_codec
    from amqpscope.pcapwrite import TcpConversation, write_pcap
    from amqpscope.scapy.table import encode_table

    codec = get_codec()
    response = encode_table({"LOGIN": "alice", "PASSWORD": "s3cret"})[4:]
    conv = TcpConversation()
    conv.handshake()
    conv.send(True, b"AMQP\x00\x00\x09\x01")
    conv.send(False, codec.method_frame(0, "connection.start", version_major=0, version_minor=9,
                                        server_properties={}, mechanisms="AMQPLAIN PLAIN", locales="en_US"))  # fmt: skip
    conv.send(True, codec.method_frame(0, "connection.start-ok", client_properties={"product": "t"},
                                       mechanism="AMQPLAIN", response=response, locale="en_US"))  # fmt: skip
    conv.send(False, codec.method_frame(0, "connection.secure", challenge="more?"))
    conv.send(True, codec.method_frame(0, "connection.secure-ok", response="wrong-password"))
    conv.send(False, codec.method_frame(0, "connection.tune", channel_max=0, frame_max=131072, heartbeat=0))
    conv.send(True, codec.method_frame(0, "connection.tune-ok", channel_max=0, frame_max=131072, heartbeat=0))
    conv.send(True, codec.method_frame(0, "connection.open", virtual_host="scope"))
    conv.send(False, codec.method_frame(0, "connection.open-ok"))
    conv.send(True, codec.method_frame(0, "connection.update-secret", new_secret="s3cret", reason="rotate"))
    conv.fin()
    write_pcap(path, conv.records)


@pytest.mark.parametrize("fmt", DECODE_FORMATS, ids=lambda f: " ".join(f))
def test_amqplain_secure_ok_and_update_secret(fmt: list[str], tmp_path: Path) -> None:
    path = tmp_path / "amqplain.pcap"
    _amqplain_capture(path)
    out = _run(["decode", *fmt, "--body", "full", "--no-progress", str(path)])
    assert b"alice" in out or fmt[1] in ("table", "csv", "rich")
    assert leaks(out) == []
    for cmd in (["stats", "-T", "json"], ["validate", "-T", "jsonl"], ["flow", "-T", "text"]):
        assert leaks(_run([*cmd, str(path)])) == [], cmd
    if fmt[1] in ("jsonl", "json"):
        shown = _run(["decode", "--show-credentials", *fmt, "--no-progress", str(path)])
        assert b"s3cret" in shown and b"wrong-password" in shown


# --- Spark: the Parquet tables of ``batch`` --------------------------------------------------------


@pytest.mark.spark
def test_spark_tables(spark: Any, tmp_path: Path) -> None:
    """``batch`` has no --show-credentials: its tables must never hold a password. Parquet pages are
    compressed, so the tables are read back and every value is searched as well as the raw files."""
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from amqpscope.spark.job import JobOptions, run_job

    out = tmp_path / "tables"
    opts = JobOptions(inputs=tuple(FILES), out=str(out), ports=frozenset({5672, 5673, 25672}), partitions=2)
    result = run_job(opts, spark)
    assert result.rows.get("connections", 0) > 0 and not result.errors
    files = [p for p in out.rglob("*") if p.is_file()]
    assert any(p.suffix == ".parquet" for p in files)
    for p in files:
        assert leaks(p.read_bytes()) == [], p
        if p.suffix == ".parquet":
            table = pq.read_table(p)
            text = json.dumps(table.to_pylist(), default=lambda v: v.hex() if isinstance(v, bytes) else str(v))
            assert leaks(text.encode()) == [], p
    users = [
        r for p in files if p.suffix == ".parquet" and "connections" in str(p) for r in pq.read_table(p).to_pylist()
    ]
    assert any("alice" in json.dumps(r, default=str) for r in users)  # the logins are there, redacted


# --- live: ``sniff`` ------------------------------------------------------------------------------


def _can_sniff() -> str | None:
    try:
        from amqpscope.live import LiveCapture, LiveCaptureError
    except ImportError as exc:
        return f"live capture not available: {exc}"
    try:
        with LiveCapture("lo", "tcp port 1"):
            return None
    except LiveCaptureError as exc:
        return str(exc)


class _Sniff:
    """``amqpscope sniff`` as a subprocess until stopped; stdout collected."""

    def __init__(self, tmp: Path, port: int, *args: str) -> None:
        self.out = tmp / f"sniff-{time.monotonic_ns()}.out"
        self._fh = open(self.out, "wb")  # noqa: SIM115 - closed in stop()
        cmd = [sys.executable, "-c", "from cli.main import main; main()", "sniff", "-i", "lo", "-f", f"tcp port {port}",
               "--port", str(port), "--no-validate", *args]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=self._fh, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=ROOT)
        self.err: list[bytes] = []
        started = threading.Event()

        def watch() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                self.err.append(line)
                if b"capturing on" in line:
                    started.set()

        self._t = threading.Thread(target=watch, daemon=True)
        self._t.start()
        deadline = time.monotonic() + 20
        while not started.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(b"sniff did not start: " + b"".join(self.err))

    def stop(self) -> bytes:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._t.join(timeout=5)
        self._fh.close()
        return self.out.read_bytes() + b"".join(self.err)


def _alice_logins(port: int) -> None:
    pika = pytest.importorskip("pika")
    params = pika.ConnectionParameters(
        "127.0.0.1", port, "scope", pika.PlainCredentials("alice", "s3cret"), heartbeat=0
    )
    conn = pika.BlockingConnection(params)
    ch = conn.channel()
    ch.queue_declare("alice.noleaks", auto_delete=True)
    ch.basic_publish("", "alice.noleaks", b"hello")
    conn.close()
    bad = pika.ConnectionParameters("127.0.0.1", port, "scope", pika.PlainCredentials("alice", "wrong-password"),
                                    heartbeat=0, connection_attempts=1)  # fmt: skip
    with contextlib.suppress(pika.exceptions.AMQPError):  # refused, as intended
        pika.BlockingConnection(bad).close()


@pytest.fixture(scope="module")
def sniff_outputs(rabbitmq: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    why = _can_sniff()
    if why is not None:
        pytest.skip(f"cannot capture on lo: {why}")
    tmp = tmp_path_factory.mktemp("sniff")
    outs: dict[str, bytes] = {}
    for name, args in (("rich -V", ["-T", "rich", "-V", "--body", "full"]),
                       ("jsonl", ["-T", "jsonl", "--body", "full", "--analysis", str(tmp / "analysis.json")]),
                       ("show", ["-T", "jsonl", "--show-credentials"])):  # fmt: skip
        s = _Sniff(tmp, rabbitmq.port, *args)
        try:
            _alice_logins(rabbitmq.port)
            time.sleep(0.5)  # let the last packets reach the sniffer
        finally:
            outs[name] = s.stop()
        if name == "jsonl":
            outs["analysis"] = (tmp / "analysis.json").read_bytes()
    return outs


@pytest.mark.broker
@pytest.mark.parametrize("name", ["rich -V", "jsonl", "analysis"])
def test_sniff(sniff_outputs: dict[str, bytes], name: str) -> None:
    out = sniff_outputs[name]
    assert b"alice" in out  # the login was seen
    assert leaks(out) == []


@pytest.mark.broker
def test_sniff_show_credentials(sniff_outputs: dict[str, bytes]) -> None:
    out = sniff_outputs["show"]
    assert b"s3cret" in out and b"wrong-password" in out

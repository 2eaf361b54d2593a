"""``amqpscope sniff`` end to end: a private RabbitMQ, a real pika client, the sniffer as a subprocess.

The default path captures through a helper (dumpcap, else tcpdump) and decodes its stream in the
core; the in-process back ends (libpcap, socket) are run where the tests name them. The sniffer is
started first and the client only once the sniffer reports on stderr that it is
capturing; the sniffer is stopped (SIGINT) only once its JSONL output shows the client's connection
closing, so every run sees the whole conversation.
"""

from __future__ import annotations

import contextlib
import dataclasses
import grp
import json
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from amqpscope import helper as capture_helper
from amqpscope import live
from amqpscope.capture import read_packets
from amqpscope.live import LiveCapture, LiveCaptureError
from amqpscope.testing.broker import PrivateBroker

pika = pytest.importorskip("pika")

ROOT = Path(__file__).resolve().parent.parent
# this checkout's command (tests/run_cli.py), whatever tree the installed amqpscope.cli points at
AMQPSCOPE = [sys.executable, str(ROOT / "tests" / "run_cli.py")]
DUMPCAP = capture_helper.helper_path("dumpcap")
TCPDUMP = capture_helper.helper_path("tcpdump")
N = 25  # messages published and consumed per run
START_TIMEOUT = 20.0


def _can_capture() -> str | None:
    try:
        with LiveCapture("lo", "tcp port 1"):
            return None
    except LiveCaptureError as exc:
        return str(exc)


_why_not = _can_capture()
needs_capture = pytest.mark.skipif(_why_not is not None, reason=f"cannot capture on lo: {_why_not}")
needs_dumpcap = pytest.mark.skipif(DUMPCAP is None or os.geteuid() != 0,
                                   reason="needs dumpcap (wireshark-common) and root to grant it capabilities")  # fmt: skip
ALL_BACKENDS = ["dumpcap", "tcpdump", "libpcap", "socket"]


def _skip_unless_backend(backend: str) -> None:
    if backend in ("dumpcap", "tcpdump"):
        if capture_helper.helper_path(backend) is None:
            pytest.skip(f"{backend} is not installed")
        if os.geteuid() != 0:
            pytest.skip("the helper's capabilities are not set up for this user")
    elif backend == "libpcap" and not live.libpcap_available():
        pytest.skip("libpcap is not installed")


def _cli(*args: str) -> list[str]:
    return [*AMQPSCOPE, *args]


class Sniffer:
    """``amqpscope sniff`` as a subprocess: stdout to a file, stderr watched for the start line."""

    def __init__(self, tmp: Path, *args: str, prefix: tuple[str, ...] = (), env: dict[str, str] | None = None) -> None:
        self.out_path = tmp / f"sniff-{time.monotonic_ns()}.jsonl"
        self._out = open(self.out_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([*prefix, *_cli("sniff", *args)], stdout=self._out, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, cwd="/" if prefix else ROOT, env=env)  # fmt: skip
        self.stderr_lines: list[str] = []
        self._started = threading.Event()
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + START_TIMEOUT
        while not self._started.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError("sniffer did not start capturing: " + "".join(self.stderr_lines))

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode(errors="replace")
            self.stderr_lines.append(line)
            if "capturing on" in line:
                self._started.set()

    def records(self) -> list[dict[str, Any]]:
        text = self.out_path.read_text()
        return [json.loads(line) for line in text.splitlines() if line.endswith("}")]

    def wait_for(self, pred: Any, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(pred(r) for r in self.records()):
                return
            time.sleep(0.05)
        raise AssertionError("expected event not printed by the sniffer; stderr: " + "".join(self.stderr_lines))

    def stop(self, sig: int = signal.SIGINT, timeout: float = 15.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self._reader.join(timeout=5)
        self._out.close()
        return rc

    @property
    def stderr(self) -> str:
        return "".join(self.stderr_lines)


def _conversation(port: int, queue: str = "alice.sniff", n: int = N) -> list[bytes]:
    """alice on vhost scope: declare, publish n messages with properties, consume and ack them."""
    params = pika.ConnectionParameters("127.0.0.1", port, "scope", pika.PlainCredentials("alice", "s3cret"),
                                       heartbeat=0)  # fmt: skip
    conn = pika.BlockingConnection(params)
    try:
        ch = conn.channel()
        ch.queue_declare(queue, auto_delete=True)
        for i in range(n):
            props = pika.BasicProperties(content_type="application/json", delivery_mode=2, priority=3,
                                         message_id=f"m-{i}", correlation_id="corr", headers={"seq": i, "src": "test"},
                                         timestamp=1_700_000_000 + i)  # fmt: skip
            ch.basic_publish("", queue, json.dumps({"i": i}).encode(), props)
        got: list[bytes] = []
        for method, _props, body in ch.consume(queue, inactivity_timeout=10):
            assert method is not None, "timed out waiting for a delivery"
            ch.basic_ack(method.delivery_tag)
            got.append(body)
            if len(got) == n:
                break
        ch.cancel()
        ch.close()
    finally:
        conn.close()
    return got


def _closed(r: dict[str, Any]) -> bool:
    return r.get("kind") == "connection" and r.get("state") == "close"


def _closed_by_client(port: int) -> Any:
    """Our client's connection to the broker has ended with connection.close."""
    server = f"127.0.0.1:{port}"
    return lambda r: _closed(r) and r["server"] == server and r["ended"] == "connection.close"


@contextlib.contextmanager
def _sniffing(tmp: Path, *args: str) -> Iterator[Sniffer]:
    s = Sniffer(tmp, *args)
    try:
        yield s
    finally:
        s.stop()


def _ours(recs: list[dict[str, Any]], port: int) -> list[dict[str, Any]]:
    """The events of connections to our broker (other programs may use loopback meanwhile)."""
    conns = {r["conn"] for r in recs if r["kind"] == "connection" and r["server"] == f"127.0.0.1:{port}"}
    return [r for r in recs if r["conn"] in conns]


def _frame_key(r: dict[str, Any]) -> tuple[Any, ...]:
    return (r["packet"], r["conn"], r["dir"], r["type"], r["channel"], r.get("method"))


# --- end to end against the broker ----------------------------------------------------------------


@pytest.mark.broker
@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_sniff_decodes_live_publish_and_consume(rabbitmq: PrivateBroker, tmp_path: Path, backend: str) -> None:
    _skip_unless_backend(backend)
    if backend in ("libpcap", "socket") and _why_not is not None:
        pytest.skip(f"cannot capture on lo: {_why_not}")
    with _sniffing(tmp_path, "-i", "lo", "--port", str(rabbitmq.port), "--format", "jsonl",
                   "--capture-backend", backend) as sniffer:  # fmt: skip
        got = _conversation(rabbitmq.port)
        sniffer.wait_for(_closed_by_client(rabbitmq.port))
        rc = sniffer.stop()
    assert rc == 0, sniffer.stderr
    _check_conversation(sniffer, rabbitmq.port, got)


def _check_conversation(sniffer: Sniffer, port: int, got: list[bytes]) -> None:
    assert got == [json.dumps({"i": i}).encode() for i in range(N)]
    recs = _ours(sniffer.records(), port)
    conns = [r for r in recs if _closed(r)]
    assert len(conns) == 1
    assert conns[0]["user"] == "alice" and conns[0]["vhost"] == "scope" and conns[0]["ended"] == "connection.close"
    methods = Counter((r["dir"], r["method"]) for r in recs if r["kind"] == "frame" and r["type"] == "method")
    for name in ("connection.start-ok", "connection.tune-ok", "connection.open", "channel.open",
                 "queue.declare", "basic.consume", "channel.close", "connection.close"):  # fmt: skip
        assert methods[("c2s", name)] == 1, name
    for name in ("connection.start", "connection.tune", "connection.open-ok", "queue.declare-ok",
                 "basic.consume-ok", "channel.close-ok", "connection.close-ok"):  # fmt: skip
        assert methods[("s2c", name)] == 1, name
    assert methods[("c2s", "basic.publish")] == N
    assert methods[("s2c", "basic.deliver")] == N
    assert methods[("c2s", "basic.ack")] == N
    # the order of the client's methods is the conversation's
    c2s = [r["method"] for r in recs if r["kind"] == "frame" and r["type"] == "method" and r["dir"] == "c2s"]
    assert c2s[:5] == ["connection.start-ok", "connection.tune-ok", "connection.open", "channel.open", "queue.declare"]
    assert c2s[-2:] == ["channel.close", "connection.close"]
    msgs = [r for r in recs if r["kind"] == "message"]
    published = [m for m in msgs if m["method"] == "basic.publish"]
    delivered = [m for m in msgs if m["method"] == "basic.deliver"]
    assert len(published) == N and len(delivered) == N
    assert all(m["complete"] for m in msgs)
    for i, m in enumerate(published):
        p = m["properties"]
        assert p["content_type"] == "application/json" and p["message_id"] == f"m-{i}"
        assert p["delivery_mode"] == 2 and p["priority"] == 3 and p["correlation_id"] == "corr"
        assert p["headers"] == {"seq": i, "src": "test"} and p["timestamp"] == 1_700_000_000 + i
    assert [m["properties"]["message_id"] for m in delivered] == [f"m-{i}" for i in range(N)]
    start_ok = next(r for r in recs if r.get("method") == "connection.start-ok")
    assert "s3cret" not in json.dumps(start_ok)  # redacted unless --show-credentials
    assert "0 dropped" in sniffer.stderr and "Traceback" not in sniffer.stderr


@pytest.mark.broker
@pytest.mark.parametrize("backend", ["dumpcap", "tcpdump", "libpcap"])
def test_sniff_write_then_decode_gives_the_same_events(rabbitmq: PrivateBroker, tmp_path: Path, backend: str) -> None:
    _skip_unless_backend(backend)
    if backend == "libpcap" and _why_not is not None:
        pytest.skip(f"cannot capture on lo: {_why_not}")
    pcap, analysis = tmp_path / "live.pcap", tmp_path / "analysis.json"
    with _sniffing(tmp_path, "-i", "lo", "--port", str(rabbitmq.port), "--format", "jsonl", "--capture-backend",
                   backend, "-w", str(pcap), "--analysis", str(analysis)) as sniffer:  # fmt: skip
        _conversation(rabbitmq.port, "alice.sniff-w", n=10)
        sniffer.wait_for(_closed_by_client(rabbitmq.port))
        rc = sniffer.stop()
    assert rc == 0, sniffer.stderr
    _same_as_file(sniffer, pcap, rabbitmq.port)
    # the analytics ran live over the same events
    live_recs = sniffer.records()
    report = json.loads(analysis.read_text())
    publishes = sum(1 for r in live_recs if r["kind"] == "frame" and r.get("method") == "basic.publish")
    assert report["methods"]["basic.publish"] == publishes >= 10
    # and the core's ledger with them: the handshake's requests paired, as in the -w file's stats
    assert "ledger" not in {r["kind"] for r in live_recs}
    res = subprocess.run(_cli("stats", "-T", "json", "--no-validate", "--port", str(rabbitmq.port), str(pcap)),
                         capture_output=True, cwd=ROOT, timeout=60)  # fmt: skip
    assert res.returncode == 0, res.stderr.decode()
    from_file = json.loads(res.stdout)
    assert report["rpc"]["connection.open"]["answered"] >= 1
    assert {m: st["answered"] for m, st in report["rpc"].items()} == {
        m: st["answered"] for m, st in from_file["rpc"].items()}  # fmt: skip


def _same_as_file(sniffer: Sniffer, pcap: Path, port: int) -> list[dict[str, Any]]:
    """The -w file decodes to exactly the events the sniffer printed; those events."""
    live_recs = sniffer.records()
    res = subprocess.run(_cli("decode", "--format", "jsonl", "--port", str(port), str(pcap)),
                         capture_output=True, cwd=ROOT, timeout=60)  # fmt: skip
    assert res.returncode == 0, res.stderr.decode()
    file_recs = [json.loads(line) for line in res.stdout.decode().splitlines()]
    live_frames = [_frame_key(r) for r in live_recs if r["kind"] == "frame"]
    file_frames = [_frame_key(r) for r in file_recs if r["kind"] == "frame"]
    assert len(live_frames) > 10 * 3
    assert live_frames == file_frames
    # not only the frames: every event, argument, property and timestamp is the same
    assert live_recs == file_recs
    return live_recs


@needs_dumpcap
@pytest.mark.broker
def test_sniff_count_stops_after_n_frames(rabbitmq: PrivateBroker, tmp_path: Path) -> None:
    port = str(rabbitmq.port)
    sniffer = Sniffer(tmp_path, "-i", "lo", "-f", f"tcp port {port}", "--port", port, "--format", "jsonl", "-c", "8")
    try:
        _conversation(rabbitmq.port, "alice.sniff-c", n=3)
        rc = sniffer.proc.wait(timeout=15)
    finally:
        sniffer.stop()
    assert rc == 0, sniffer.stderr
    recs = sniffer.records()
    frames = [r for r in recs if r["kind"] == "frame"]
    # stops at the packet completing the 8th frame: its other frames come too, nothing after it
    assert len(frames) >= 8
    last_packet = max(r["packet"] for r in frames)
    assert sum(1 for r in frames if r["packet"] < last_packet) < 8
    assert recs[-1]["kind"] == "connection" and recs[-1]["ended"] == "eof"
    assert "8 AMQP frames" in sniffer.stderr or f"{len(frames)} AMQP frames" in sniffer.stderr


@needs_dumpcap
@pytest.mark.broker
def test_sniff_evicts_idle_flows_live(rabbitmq: PrivateBroker, tmp_path: Path) -> None:
    """With a short idle timeout a quiet connection is closed as "evicted" once other traffic flows."""
    with _sniffing(tmp_path, "-i", "lo", "--port", str(rabbitmq.port), "--format", "jsonl",
                   "--idle-timeout", "1") as sniffer:  # fmt: skip
        quiet = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", rabbitmq.port, heartbeat=0))
        try:
            time.sleep(1.6)
            _conversation(rabbitmq.port, "alice.sniff-idle", n=2)
            sniffer.wait_for(lambda r: _closed(r) and r["ended"] == "evicted")
        finally:
            quiet.close()
        sniffer.stop()
    conns = [r for r in _ours(sniffer.records(), rabbitmq.port) if r["kind"] == "connection"]
    evicted = [r for r in conns if _closed(r) and r["ended"] == "evicted"]
    assert len(evicted) == 1
    quiet_client = evicted[0]["client"]
    opened = next(r for r in conns if r["conn"] == evicted[0]["conn"] and r["state"] == "open")
    # closed as of its last packet, long before the other connection's traffic evicted it
    assert evicted[0]["ts"] - opened["ts"] < 1.0
    # when the quiet connection closed at last, its packets formed a new flow, seen mid-stream
    later = [r for r in conns if r["client"] == quiet_client and r["conn"] > evicted[0]["conn"]]
    assert later and later[0]["state"] == "open" and later[0]["syn_seen"] is False


@needs_dumpcap
def test_sniff_duration_and_sigterm_end_cleanly(tmp_path: Path) -> None:
    t0 = time.monotonic()
    s = Sniffer(tmp_path, "-i", "lo", "-f", "tcp port 9", "--duration", "0.5", "--format", "jsonl")
    rc = s.proc.wait(timeout=15)
    s.stop()
    assert rc == 0 and time.monotonic() - t0 < 10
    assert "0 packets captured" in s.stderr and "Traceback" not in s.stderr
    _assert_gone(_helper_pid(s))
    for sig in (signal.SIGTERM, signal.SIGINT):
        s = Sniffer(tmp_path, "-i", "lo", "-f", "tcp port 9", "--format", "jsonl")
        pid = _helper_pid(s)
        assert s.stop(sig) == 0
        assert "amqpscope: lo:" in s.stderr and "0 dropped (kernel 0, dumpcap 0)" in s.stderr
        assert "Traceback" not in s.stderr
        _assert_gone(pid)


def _helper_pid(s: Sniffer) -> int:
    import re

    m = re.search(r"\((?:dumpcap|tcpdump) pid (\d+),", s.stderr)
    assert m, s.stderr
    return int(m.group(1))


def _assert_gone(pid: int) -> None:
    """No orphan: the helper process has exited and was reaped."""
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}").exists():
        status = Path(f"/proc/{pid}/status").read_text() if Path(f"/proc/{pid}/status").exists() else ""
        if "zombie" in status:
            break
        assert time.monotonic() < deadline, f"capture helper {pid} still running"
        time.sleep(0.05)


# --- drops are counted, never silent ------------------------------------------------------------------


@needs_capture
def test_full_backlog_drops_are_counted(tmp_path: Path) -> None:
    """A pipeline that does not keep up: the capture keeps reading, drops and counts what does not fit."""
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    cap = LiveCapture("lo", f"tcp port {port}", backlog_packets=50, write_to=str(tmp_path / "x.pcap"))
    cap.start()
    try:
        _ping_pong(srv, 2000)  # nobody consumes meanwhile: the backlog overflows
        time.sleep(0.3)
        cap.stop()
        delivered = sum(1 for _ in cap.packets())
    finally:
        cap.close()
        srv.close()
    st = cap.stats
    assert st.backlog_dropped > 0
    assert st.dropped >= st.backlog_dropped
    assert delivered == st.delivered == 50
    assert sum(1 for _ in read_packets(tmp_path / "x.pcap")) == 50  # the file holds what was decoded
    assert st.captured == st.delivered + st.backlog_dropped + st.unprocessed
    assert st.kernel_dropped == 0


def _ping_pong(port_holder: socket.socket, rounds: int) -> None:
    """Many small TCP packets on loopback: one send per round trip, so none are coalesced."""
    port = port_holder.getsockname()[1]
    cli = socket.create_connection(("127.0.0.1", port))
    cli.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    peer, _ = port_holder.accept()
    try:
        for _ in range(rounds):
            cli.send(b"x" * 100)
            peer.recv(65536)
    finally:
        cli.close()
        peer.close()


@needs_capture
@pytest.mark.parametrize("backend", ["libpcap", "socket"])
def test_kernel_drops_are_counted(backend: str) -> None:
    """A kernel buffer that overflows before the capture thread reads it: the loss is in the stats."""
    if backend == "libpcap" and not live.libpcap_available():
        pytest.skip("libpcap is not installed")
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]
    cap = LiveCapture("lo", f"tcp port {port}", backend=backend, buffer_bytes=128 << 10)
    try:
        cap.open()  # capturing into the small buffer, but nothing reads it yet
        _ping_pong(srv, 5000)
        cap.start()
        time.sleep(0.3)
        cap.stop()
        delivered = sum(1 for _ in cap.packets())
    finally:
        cap.close()
        srv.close()
    st = cap.stats
    assert st.kernel_dropped is not None and st.kernel_dropped > 0
    assert st.dropped >= st.kernel_dropped
    assert delivered == st.captured > 0
    assert st.backlog_dropped == 0


def test_drop_warnings_while_capturing(capsys: pytest.CaptureFixture[str]) -> None:
    from amqpscope.cli.sniff import _DropWatch

    st = live.LiveStats(backend="libpcap", kernel_dropped=0, interface_dropped=0)
    watch = _DropWatch(st)
    watch.check()
    assert capsys.readouterr().err == ""  # nothing lost: nothing said
    st.backlog_dropped, st.kernel_dropped = 7, 5
    watch.next_check = 0.0
    watch.check()
    err = capsys.readouterr().err
    assert err == "amqpscope: warning: 12 packets dropped so far (kernel 5, backlog 7): the decode has gaps\n"
    watch.next_check = 0.0
    watch.check()
    assert capsys.readouterr().err == ""  # said once per new loss


# --- clear errors ---------------------------------------------------------------------------------------


def _sniff_in_process(*args: str) -> tuple[int, str]:
    """Run ``amqpscope sniff`` in this process: (exit code, stderr); a traceback fails the test."""
    from amqpscope.cli.sniff import sniff
    from click.testing import CliRunner

    res = CliRunner().invoke(sniff, list(args))
    assert isinstance(res.exception, SystemExit), f"not a clean exit: {res.exception!r}"
    return res.exit_code, res.stderr


def _one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("amqpscope: error: ") and "Traceback" not in stderr
    return lines[0]


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_no_such_interface(backend: str) -> None:
    if backend in ("dumpcap", "tcpdump"):
        _skip_unless_backend(backend)
    code, err = _sniff_in_process("-i", "nosuch0", "--backend", backend)
    assert code == 8
    assert "no such interface 'nosuch0'" in _one_error_line(err)


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_invalid_capture_filter(backend: str) -> None:
    _skip_unless_backend(backend)
    if backend in ("libpcap", "socket") and _why_not is not None:
        pytest.skip(f"cannot capture on lo: {_why_not}")
    code, err = _sniff_in_process("-i", "lo", "-f", "tcp and and port", "--backend", backend)
    assert code == 9
    assert "invalid capture filter 'tcp and and port'" in _one_error_line(err)


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_interface_down(backend: str) -> None:
    _skip_unless_backend(backend)
    if backend in ("libpcap", "socket") and _why_not is not None:
        pytest.skip(f"cannot capture on lo: {_why_not}")
    down = [p.name for p in Path("/sys/class/net").glob("*") if not int((p / "flags").read_text(), 16) & 1]
    if not down:
        pytest.skip("no interface that is down on this machine")
    code, err = _sniff_in_process("-i", down[0], "--backend", backend)
    assert code == 8
    assert f"interface '{down[0]}' is down" in _one_error_line(err)


@needs_dumpcap
def test_unwritable_output_file(tmp_path: Path) -> None:
    code, err = _sniff_in_process("-i", "lo", "-w", str(tmp_path / "no" / "such" / "dir.pcap"))
    assert code == 10
    assert "cannot write" in _one_error_line(err)


def _unprivileged() -> list[str] | None:
    """A command prefix running as nobody with no capabilities, when we are root and can drop to it."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return None
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        return None
    probe = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable,
                            "-c", "import amqpscope.live"], capture_output=True, cwd="/")  # fmt: skip
    if probe.returncode != 0:
        return None  # nobody cannot read the virtualenv or the checkout
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


@pytest.mark.parametrize("backend", ["libpcap", "socket"])
def test_permission_denied_as_unprivileged_user(backend: str) -> None:
    prefix = _unprivileged()
    if prefix is None:
        pytest.skip("cannot run as an unprivileged user here (needs root, setpriv, and a world-readable venv)")
    res = subprocess.run([*prefix, *_cli("sniff", "-i", "lo", "--backend", backend)], capture_output=True, text=True,
                         cwd="/", timeout=60)  # fmt: skip
    assert res.returncode == 7, res.stderr
    assert "no permission to capture on 'lo'" in _one_error_line(res.stderr)


def test_permission_denied_simulated(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same error where the OS refuses: pcap_activate's PERM_DENIED and the socket's EPERM."""
    if live.libpcap_available():
        from scapy.libs import winpcapy

        monkeypatch.setattr(winpcapy, "pcap_activate", lambda handle: -8)  # PCAP_ERROR_PERM_DENIED
        code, err = _sniff_in_process("-i", "lo", "--backend", "libpcap")
        assert code == 7 and "no permission to capture on 'lo'" in _one_error_line(err)

    real_socket = socket.socket

    def refuse(family: int = -1, *args: Any, **kw: Any) -> Any:
        if family == getattr(socket, "AF_PACKET", None):  # what an unprivileged user gets
            raise PermissionError(1, "Operation not permitted")
        return real_socket(family, *args, **kw)

    monkeypatch.setattr(socket, "socket", refuse)
    code, err = _sniff_in_process("-i", "lo", "--backend", "socket", "-f", "tcp")
    assert code == 7 and "no permission to capture on 'lo'" in _one_error_line(err)


# --- the capture helper: unprivileged users, a helper that dies, a replay at rate -----------------------

CAP_GROUP, CAP_USER, NOCAP_USER = "amqpscope-cap", "amqpscope-cap1", "amqpscope-nocap1"


@dataclasses.dataclass
class _Users:
    capture: list[str]  # command prefix: the user in the capture group
    other: list[str]  # a user without the group
    env: dict[str, dict[str, str]]  # the environment of each (by prefix[2], the user)
    workdir: Path  # writable by both


def _run_root(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, timeout=30)


@pytest.fixture
def capture_users() -> Iterator[_Users]:
    """An unprivileged user in a capture group that may run dumpcap, which gets its capabilities (as
    ``dpkg-reconfigure wireshark-common`` would set them up), and one without the group. Afterwards
    dumpcap's owner, mode and capabilities are restored and the users and the group removed."""
    if os.geteuid() != 0 or DUMPCAP is None:
        pytest.skip("needs root and dumpcap")
    for tool in ("setpriv", "useradd", "groupadd", "userdel", "groupdel", "setcap"):
        if capture_helper.helper_path(tool) is None:
            pytest.skip(f"{tool} is not installed")
    real = os.path.realpath(DUMPCAP)
    st = os.stat(real)
    try:
        caps: bytes | None = os.getxattr(real, "security.capability")
    except OSError:
        caps = None
    workdir = Path(tempfile.mkdtemp(prefix="amqpscope-unpriv-"))
    created: list[tuple[str, str]] = []
    try:
        _run_root("groupadd", "--system", CAP_GROUP)
        created.append(("groupdel", CAP_GROUP))
        for user, groups in ((CAP_USER, [CAP_GROUP]), (NOCAP_USER, [])):
            _run_root("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                      *(["--groups", ",".join(groups)] if groups else []), user)  # fmt: skip
            created.append(("userdel", user))
        # what wireshark-common's postinst does for its group: only the group may run dumpcap, with caps
        os.chown(real, 0, grp.getgrnam(CAP_GROUP).gr_gid)
        os.chmod(real, 0o750)
        _run_root("setcap", "cap_net_raw,cap_net_admin=eip", real)
        os.chmod(workdir, 0o777)
        # setpriv runs the interpreter itself (an env in between could not reach a venv under /root)
        def as_user(user: str, group: str) -> list[str]:
            return ["setpriv", "--reuid", user, "--regid", group, "--init-groups"]

        def env_of(user: str) -> dict[str, str]:
            return {**os.environ, "USER": user, "LOGNAME": user, "HOME": str(workdir), "PYTHONPATH": str(ROOT)}

        users = _Users(capture=as_user(CAP_USER, CAP_GROUP), other=as_user(NOCAP_USER, "nogroup"),
                       env={CAP_USER: env_of(CAP_USER), NOCAP_USER: env_of(NOCAP_USER)}, workdir=workdir)  # fmt: skip
        probe = subprocess.run([*users.capture, sys.executable, "-c", "import amqpscope._native"], capture_output=True,
                               cwd="/", timeout=60, env=users.env[CAP_USER])  # fmt: skip
        if probe.returncode != 0:
            pytest.skip(f"the unprivileged user cannot run this checkout: {probe.stderr.decode()[-200:]}")
        yield users
    finally:
        os.chown(real, st.st_uid, st.st_gid)  # clears file capabilities
        os.chmod(real, stat.S_IMODE(st.st_mode))
        if caps is not None:
            os.setxattr(real, "security.capability", caps)
        else:
            with contextlib.suppress(OSError):
                os.removexattr(real, "security.capability")
        for cmd, name in reversed(created):
            subprocess.run([cmd, name], capture_output=True, timeout=30)
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.mark.broker
def test_unprivileged_user_sniffs_through_dumpcap(rabbitmq: PrivateBroker, capture_users: _Users) -> None:
    """The analyzer runs as an ordinary user of the capture group: no capability anywhere but dumpcap."""
    pcap = capture_users.workdir / "live.pcapng"
    sniffer = Sniffer(capture_users.workdir, "-i", "lo", "--port", str(rabbitmq.port), "--format", "jsonl",
                      "-w", str(pcap), prefix=tuple(capture_users.capture), env=capture_users.env[CAP_USER])  # fmt: skip
    try:
        got = _conversation(rabbitmq.port, "alice.unpriv", n=N)
        sniffer.wait_for(_closed_by_client(rabbitmq.port))
        rc = sniffer.stop()
    finally:
        sniffer.stop()
    assert rc == 0, sniffer.stderr
    assert "(dumpcap pid" in sniffer.stderr
    _check_conversation(sniffer, rabbitmq.port, got)
    _same_as_file(sniffer, pcap, rabbitmq.port)
    # the Python process itself held no capability
    status = subprocess.run([*capture_users.capture, sys.executable, "-c",
                             "print([l for l in open('/proc/self/status') if l.startswith('CapEff')][0])"],
                            capture_output=True, text=True, cwd="/", timeout=30,
                            env=capture_users.env[CAP_USER])  # fmt: skip
    assert status.stdout.split()[-1] == "0000000000000000"


def test_user_without_the_capture_group_gets_the_fix(capture_users: _Users) -> None:
    res = subprocess.run([*capture_users.other, *_cli("sniff", "-i", "lo")], capture_output=True, text=True,
                         cwd="/", timeout=60, env=capture_users.env[NOCAP_USER])  # fmt: skip
    assert res.returncode == 7, res.stderr
    line = _one_error_line(res.stderr)
    assert "no permission to capture on 'lo'" in line and "dumpcap" in line
    assert f"the group '{CAP_GROUP}'" in line and f"sudo usermod -aG {CAP_GROUP} {NOCAP_USER}" in line


@needs_dumpcap
def test_dumpcap_without_capabilities_names_them(tmp_path: Path) -> None:
    """dumpcap as installed without capture rights (Debian's default answer 'No'): the capability and
    the command that grants it are named."""
    real = os.path.realpath(str(DUMPCAP))
    if os.stat(real).st_mode & 0o001 == 0 or capture_helper._caps_text(capture_helper._file_caps(real)) != "no capabilities":
        pytest.skip("dumpcap is set up for a group here")
    prefix = _unprivileged()
    if prefix is None:
        pytest.skip("cannot run as an unprivileged user here")
    res = subprocess.run([*prefix, *_cli("sniff", "-i", "lo")], capture_output=True, text=True, cwd="/", timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "USER": "nobody"})  # fmt: skip
    assert res.returncode == 7, res.stderr
    line = _one_error_line(res.stderr)
    assert "dumpcap" in line and "cap_net_raw" in line and "sudo dpkg-reconfigure wireshark-common" in line


def test_no_helper_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(capture_helper, "helper_path", lambda name: None)
    code, err = _sniff_in_process("-i", "lo")
    assert code == 10
    line = _one_error_line(err)
    assert "no capture helper installed" in line and "wireshark-common" in line and "tcpdump" in line


@needs_dumpcap
@pytest.mark.broker
def test_helper_killed_mid_capture(rabbitmq: PrivateBroker, tmp_path: Path) -> None:
    """dumpcap dies: the sniffer says so, keeps what it decoded, exits non-zero and leaves nothing behind."""
    sniffer = Sniffer(tmp_path, "-i", "lo", "--port", str(rabbitmq.port), "--format", "jsonl")
    try:
        _conversation(rabbitmq.port, "alice.killed", n=3)
        sniffer.wait_for(_closed_by_client(rabbitmq.port))
        pid = _helper_pid(sniffer)
        os.kill(pid, signal.SIGKILL)
        rc = sniffer.proc.wait(timeout=15)
    finally:
        sniffer.stop()
    assert rc == 10, sniffer.stderr
    assert "capture helper dumpcap ended unexpectedly (killed by SIGKILL)" in sniffer.stderr
    assert "Traceback" not in sniffer.stderr
    recs = _ours(sniffer.records(), rabbitmq.port)
    publishes = [r for r in recs if r["kind"] == "frame" and r.get("method") == "basic.publish"]
    assert len(publishes) == 3  # decoded before it died: kept
    _assert_gone(pid)


REPLAY_PPS = 20000  # modest enough for CI; bench/live.py runs the full rates


@needs_dumpcap
@pytest.mark.broker
def test_replay_at_rate_loses_nothing(rabbitmq: PrivateBroker, tmp_path: Path) -> None:
    """A capture recorded here, moved to a port nobody listens on, replayed onto lo with tcpreplay:
    the sniffer decodes exactly the frames of the file, with 0 drops."""
    if shutil.which("tcpreplay") is None or shutil.which("tcprewrite") is None:
        pytest.skip("tcpreplay is not installed (tools/install-system-deps.sh)")
    if TCPDUMP is None:
        pytest.skip("tcpdump is not installed")
    from amqpscope.testing.sniffer import LoopbackRecorder

    recorded, moved = tmp_path / "recorded.pcap", tmp_path / "replay.pcap"
    with LoopbackRecorder(recorded, rabbitmq.port):
        _conversation(rabbitmq.port, "alice.replay", n=400)
    with socket.socket() as s:  # a port nobody listens on: the replay reaches no socket
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    subprocess.run(["tcprewrite", f"--portmap={rabbitmq.port}:{free}", "--fixcsum", f"--infile={recorded}",
                    f"--outfile={moved}"], check=True, capture_output=True, timeout=60)  # fmt: skip
    res = subprocess.run(_cli("decode", "--format", "jsonl", "--port", str(free), str(moved)), capture_output=True,
                         cwd=ROOT, timeout=60)  # fmt: skip
    assert res.returncode == 0, res.stderr.decode()
    file_recs = [json.loads(line) for line in res.stdout.decode().splitlines()]
    file_frames = [_frame_key(r) for r in file_recs if r["kind"] == "frame"]
    packets = sum(1 for _ in read_packets(moved))
    assert len(file_frames) > 400 * 4
    sniffer = Sniffer(tmp_path, "-i", "lo", "-f", f"tcp port {free}", "--port", str(free), "--format", "jsonl")
    try:
        rep = subprocess.run(["tcpreplay", "-i", "lo", f"--pps={REPLAY_PPS}", str(moved)], capture_output=True,
                             text=True, timeout=120)  # fmt: skip
        assert rep.returncode == 0, rep.stderr
        sniffer.wait_for(lambda r: r.get("kind") == "connection" and r.get("state") == "close", timeout=20)
        time.sleep(0.5)
        rc = sniffer.stop()
    finally:
        sniffer.stop()
    assert rc == 0, sniffer.stderr
    live_recs = sniffer.records()
    # the replay reached the sniffer in the recording's order: the same frames, packet numbers and all
    assert [_frame_key(r) for r in live_recs if r["kind"] == "frame"] == file_frames
    assert f"{packets} packets captured, {packets} decoded" in sniffer.stderr
    assert "; 0 dropped (kernel 0, dumpcap 0)" in sniffer.stderr


def test_rich_view_shows_a_live_summary_at_high_rates() -> None:
    """Above RICH_MAX_RATE events a second the terminal view prints a summary line, not every event."""
    import io

    from amqpscope.cli.sniff import RICH_MAX_RATE, _LiveView
    from rich.console import Console

    from amqpscope.events import Frame
    from amqpscope.output.console import ConsoleWriter

    out = io.StringIO()
    writer = ConsoleWriter(Console(file=out, width=200, color_system=None), body="none")
    counts = {"frames": 0, "messages": 0, "connections": 2, "findings": 1}
    view = _LiveView(writer, counts, lambda: counts["frames"])
    ev = Frame(packet=1, ts=0.0, conn=0, dir="c2s", channel=1, type="heartbeat", size=0)
    shown = 0
    for _ in range(5 * RICH_MAX_RATE):
        counts["frames"] += 1
        if view.show():
            writer.write(ev, ev.to_record())
            shown += 1
    assert shown == RICH_MAX_RATE + 1  # then the view switched to the summary
    view.window_start -= 1.0
    view._last = (view._last[0] - 1.0, 0, 0)
    view.tick()
    text = out.getvalue()
    assert "live summary once a second" in text
    assert "frames/s" in text and "2 connections" in text and "1 findings" in text
    assert f"{5 * RICH_MAX_RATE - RICH_MAX_RATE - 1} events not shown" in text

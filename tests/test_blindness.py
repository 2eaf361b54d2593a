"""What the capture did not show is reported everywhere (issue #32 item 6): gaps and a hole inside a
message body, a start in the middle of a frame, a truncated file, TLS without keys, with another
capture's key log, with a garbage or text key log, with a partial key log. Each is a finding of its
own rule id and severity ``not-seen`` (never a violation), at the top of ``diagnose`` and
``stats``, and ``diagnose`` never says "nothing wrong" when something was not seen.

The plain captures are synthetic (``amqpscope.testing.synth``, packets dropped to make the gaps);
the TLS ones are the shipped TLS 1.3 sample (samples/tls, a real pika session against RabbitMQ),
and for the partial key log that sample plus a copy of its connection on another client port whose
ClientHello random differs by one byte: the key log holds the keys of the first connection only.
The same partial key log is also recorded with a real client (pika over TLS against the harness
broker, its second connection writing no key log; marked ``broker``).
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from amqpscope.cli.main import cli
from click.testing import CliRunner, Result

import amqpscope
from amqpscope.capture import read_packets
from amqpscope.diagnose import Diagnoser
from amqpscope.events import Event, Finding, Message, Tls
from amqpscope.pcapwrite import write_pcap
from amqpscope.pipeline import Options, decode_source, read_keylogs
from amqpscope.testing.broker import PrivateBroker, rabbitmq_available
from amqpscope.testing.sniffer import LoopbackRecorder, tcpdump_available
from amqpscope.testing.synth import Capture
from amqpscope.validate.findings import BLIND_RULES, NOT_SEEN, OWN_RULES

ROOT = Path(__file__).resolve().parent.parent
TLS_SAMPLE = ROOT / "samples" / "tls" / "amqps-tls13.pcap"
TLS_KEYS = TLS_SAMPLE.with_suffix(".keys")
TLS_BYTES = (1374, 3055)  # the sample's TLS record bytes from the client, from the server


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def validated(path: Path, keylog: Path | None = None) -> list[Event]:
    return list(decode_source(path, options=Options(validate=True, tls_keylog=read_keylogs(keylog))))


def findings(path: Path, keylog: Path | None = None) -> list[Finding]:
    return [ev for ev in validated(path, keylog) if isinstance(ev, Finding)]


def blind(fs: list[Finding]) -> list[Finding]:
    return [f for f in fs if f.severity == NOT_SEEN]


# --- captures -------------------------------------------------------------------------------------


def three_gaps(path: Path) -> None:
    """Three segments lost: two from the client (a publish's content, then a qos), one from the
    server (its qos-ok): 3 gaps, 2 messages cut short by the first."""
    cap = Capture()
    c = cap.connection()
    c.handshake()
    c.open_channel(1)
    c.client(1, "basic.publish", exchange="", routing_key="q")
    n = len(cap.records)
    c.content(True, 1, b"x" * 100)  # header 22 + body 108 bytes: lost
    del cap.records[n]
    c.publish(1, b"seen")
    n = len(cap.records)
    c.client(1, "basic.qos", prefetch_count=5)  # lost
    del cap.records[n]
    n = len(cap.records)
    c.client(1, "basic.qos", prefetch_count=1)
    c.server(1, "basic.qos-ok")  # lost
    del cap.records[n + 1]
    c.close()
    cap.write(str(path))


def hole_in_body(path: Path) -> None:
    """A 200,000-byte publish in body frames of 16,384 bytes, sent in 8,192-byte segments; 8 of
    them in the middle lost: a 65,536-byte hole inside the message body."""
    cap = Capture()
    c = cap.connection()
    c.handshake(frame_max=16384)
    c.open_channel(1)
    c.client(1, "basic.publish", exchange="", routing_key="q")
    data = c.codec.content_frames(1, bytes(200_000), None, frame_max=c.frame_max)
    first = len(cap.records)
    cap._add(c.tcp.send(True, data, mss=8192))
    del cap.records[first + 5 : first + 13]
    c.publish(1, b"after the hole")
    c.close()
    cap.write(str(path))


def midframe_start(path: Path) -> None:
    """The capture starts 10 bytes into a basic.publish: no SYN, no handshake, the client's first
    captured bytes in the middle of a frame."""
    cap = Capture()
    c = cap.connection(syn=False)
    c.handshake()
    c.open_channel(1)
    n = len(cap.records)
    cap._add(c.tcp.send(True, c.method(1, "basic.publish", exchange="", routing_key="q"), mss=10))
    del cap.records[: n + 1]
    c.content(True, 1, b"x" * 10)
    c.publish(1, b"y")
    c.client(1, "basic.qos", prefetch_count=1)
    c.server(1, "basic.qos-ok")
    c.close()
    cap.write(str(path))


def truncated(path: Path) -> None:
    """A whole session whose last record is cut in the middle (a copy taken while tcpdump wrote)."""
    cap = Capture()
    c = cap.connection()
    c.handshake()
    c.open_channel(1)
    c.publish(1, b"z" * 500)
    c.publish(1, b"z" * 500)
    data = cap.pcap()
    path.write_bytes(data[:-300])


def two_tls_connections(path: Path) -> None:
    """The TLS sample, then the same packets again as a second connection (client port + 1, one
    byte of the ClientHello random changed): the sample's key log has no key for it."""
    packets = list(read_packets(TLS_SAMPLE))
    port = 48544
    copies = []
    last = packets[-1].ts_ns
    for p in packets:
        data = bytearray(p.data)
        ip = 14
        tcp = ip + (data[ip] & 0x0F) * 4
        sport, dport = struct.unpack_from("!HH", data, tcp)
        struct.pack_into("!HH", data, tcp, sport + (sport == port), dport + (dport == port))
        payload = tcp + (data[tcp + 12] >> 4) * 4
        if sport == port and data[payload : payload + 1] == b"\x16" and data[payload + 5] == 1:
            data[payload + 11] ^= 0xFF  # the client random's first byte
        copies.append((p.ts_ns + last - packets[0].ts_ns + 1_000_000, bytes(data)))
    write_pcap(str(path), [(p.ts_ns, p.data) for p in packets] + copies)


@pytest.fixture(scope="module")
def caps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("blind")
    out = {}
    for name, make in (("gaps", three_gaps), ("hole", hole_in_body), ("mid", midframe_start),
                       ("truncated", truncated), ("tls2", two_tls_connections)):  # fmt: skip
        out[name] = d / f"{name}.pcap"
        make(out[name])
    out["other.keys"] = d / "other.keys"
    out["other.keys"].write_text("".join(f"CLIENT_TRAFFIC_SECRET_0 {i:02x}{'ab' * 31} {'cd' * 32}\n" for i in range(3)))
    out["garbage.keys"] = d / "garbage.keys"
    out["garbage.keys"].write_bytes(bytes(range(256)) * 3)
    out["text.keys"] = d / "text.keys"
    out["text.keys"].write_text("the keys are in the other folder\nCLIENT_RANDOM not-hex at all\n")
    out["empty.keys"] = d / "empty.keys"
    out["empty.keys"].write_text("")
    return out


# --- the findings -----------------------------------------------------------------------------------


def test_rules_are_in_the_catalogue_and_not_violations() -> None:
    assert set(BLIND_RULES) <= set(OWN_RULES)
    assert NOT_SEEN not in ("violation", "deviation", "warning")


def test_three_gaps_one_finding_with_bytes_and_messages(caps: dict[str, Path]) -> None:
    fs = findings(caps["gaps"])
    (f,) = blind(fs)
    assert (f.rule, f.conn, len(f.packets)) == ("capture.gap", 0, 3)
    # 130 bytes of content and 19 of basic.qos from the client, 12 of basic.qos-ok from the server
    assert f.message.startswith("3 gaps: 161 bytes of this connection not in the capture (from client: 2 gaps, "
                                "149 bytes; from server: 1 gap, 12 bytes)")  # fmt: skip
    assert "1 message cut short: basic.publish on channel 1" in f.message
    assert "its content not seen" in f.message
    assert not [x for x in fs if x.severity == "violation" and x.rule.startswith("capture.")]


def test_a_65k_hole_inside_a_message_body(caps: dict[str, Path]) -> None:
    events = list(amqpscope.read(caps["hole"]))
    (cut,) = [m for m in events if isinstance(m, Message) and not m.complete]
    assert cut.body_size == 200_000 and cut.body_received < 200_000 - 65_536
    (f,) = blind(findings(caps["hole"]))
    assert f.rule == "capture.gap" and f.conn == 0
    assert f.message.startswith("1 gap: 65536 bytes of this connection not in the capture (from client: 1 gap, "
                                "65536 bytes)")  # fmt: skip
    assert (f"1 message cut short: basic.publish on channel 1 (packets {cut.first_packet}-{cut.packet}: "
            f"{cut.body_received} of 200000 body bytes seen)") in f.message  # fmt: skip


def test_a_start_in_the_middle_of_a_frame(caps: dict[str, Path]) -> None:
    (f,) = blind(findings(caps["mid"]))
    assert (f.rule, f.conn) == ("capture.midstream-start", 0)
    assert "the capture starts in the middle of this connection" in f.message
    assert "the client's stream starts in the middle of a frame: " in f.message
    assert "the server's first frame at packet" in f.message


def test_a_truncated_capture(caps: dict[str, Path]) -> None:
    res = run("validate", "-T", "jsonl", str(caps["truncated"]))
    assert res.exit_code == 5
    recs = [json.loads(line) for line in res.stdout.splitlines()]
    (t,) = [r for r in recs if r["rule"] == "capture.truncated"]
    assert (t["severity"], t["conn"]) == ("not-seen", -1)
    assert "is truncated: last record" in t["message"] and "1 connection was still open there" in t["message"]


def test_tls_without_keys(caps: dict[str, Path]) -> None:
    (f,) = blind(findings(TLS_SAMPLE))
    assert (f.rule, f.conn) == ("tls.undecrypted", 0)
    assert "127.0.0.1:48544 → 127.0.0.1:25675" in f.message
    assert "not decrypted: no key for this connection" in f.message
    assert f"{sum(TLS_BYTES)} bytes: {TLS_BYTES[0]} from the client, {TLS_BYTES[1]} from the server" in f.message


def test_with_its_keys_nothing_is_unseen() -> None:
    assert blind(findings(TLS_SAMPLE, TLS_KEYS)) == []


def test_partial_key_log_the_keyless_connection_shows_as_not_decrypted(caps: dict[str, Path]) -> None:
    events = list(amqpscope.read(caps["tls2"], tls_keylog=TLS_KEYS))
    assert sorted((t.conn, t.decrypted) for t in events if isinstance(t, Tls)) == [(0, True), (1, False)]
    (f,) = blind(findings(caps["tls2"], TLS_KEYS))
    assert (f.rule, f.conn) == ("tls.undecrypted", 1) and "127.0.0.1:48545 → 127.0.0.1:25675" in f.message
    res = run("stats", "-T", "json", "--tls-keylog", str(TLS_KEYS), str(caps["tls2"]))
    assert res.exit_code == 0 and "warning" not in res.stderr  # the key log matched a connection
    report = json.loads(res.stdout)
    assert [c["conn"] for c in report["connections"]] == [0]
    (b,) = report["not_seen"]
    assert (b["rule"], b["connections"], b["what"]) == ("tls.undecrypted", [1], "1 TLS connection not decrypted")


# --- the key log ---------------------------------------------------------------------------------------


def test_key_log_of_another_capture_is_one_warning_line(caps: dict[str, Path]) -> None:
    keys = str(caps["other.keys"])
    res = run("diagnose", "-T", "json", "--tls-keylog", keys, str(TLS_SAMPLE))
    assert res.exit_code == 0  # the capture was read; what was not decrypted is in the output
    assert res.stderr.splitlines() == [f"amqpscope: warning: TLS key log {keys} matches no connection: no key "
                                       "for the TLS connection (a key log of another capture or client?)"]  # fmt: skip
    doc = json.loads(res.stdout)
    assert [b["rule"] for b in doc["not_seen"]] == ["tls.keylog-unmatched", "tls.undecrypted"]
    assert doc["nothing_wrong"] is False


def test_key_log_with_no_tls_in_the_capture(caps: dict[str, Path]) -> None:
    keys = str(TLS_KEYS)
    res = run("decode", "-T", "jsonl", "--tls-keylog", keys, str(caps["gaps"]))
    assert res.exit_code == 0
    assert res.stderr.splitlines() == [f"amqpscope: warning: TLS key log {keys} matches no connection: the "
                                       "capture has no TLS connection"]  # fmt: skip


@pytest.mark.parametrize("name, what", [("garbage.keys", "has no key line"), ("text.keys", "has no key line"),
                                        ("empty.keys", "is empty")])  # fmt: skip
def test_a_file_that_is_not_a_key_log_is_a_usage_error(caps: dict[str, Path], name: str, what: str) -> None:
    for command in ("decode", "stats", "diagnose", "validate"):
        res = run(command, "--tls-keylog", str(caps[name]), str(TLS_SAMPLE))
        assert res.exit_code == 2, (command, res.output)
        assert res.stderr.startswith(f"amqpscope: error: TLS key log {caps[name]} {what}: an NSS key log"), res.stderr
        assert res.stdout == ""


# --- at the top of diagnose and stats ---------------------------------------------------------------


@pytest.mark.parametrize("name, rule", [("gaps", "capture.gap"), ("hole", "capture.gap"),
                                        ("mid", "capture.midstream-start"), ("truncated", "capture.truncated")])  # fmt: skip
def test_diagnose_says_what_was_not_seen_never_nothing_wrong(caps: dict[str, Path], name: str, rule: str) -> None:
    code = 5 if name == "truncated" else 0
    res = run("diagnose", "-T", "text", str(caps[name]))
    assert res.exit_code == code, res.output
    lines = res.stdout.splitlines()
    assert lines[0].startswith("not seen (the capture does not show everything")
    assert f"({rule})" in lines[1]
    assert "nothing wrong" not in res.stdout and "no cause found in what the capture shows" in res.stdout
    doc = json.loads(run("diagnose", "-T", "json", str(caps[name])).stdout)
    assert doc["nothing_wrong"] is False and [b["rule"] for b in doc["not_seen"]] == [rule]
    first = json.loads(run("diagnose", "-T", "jsonl", str(caps[name])).stdout.splitlines()[0])
    assert (first["kind"], first["rule"]) == ("not-seen", rule)


def test_stats_of_tls_without_keys_is_not_just_zero_connections() -> None:
    res = run("stats", "-T", "text", str(TLS_SAMPLE))
    assert res.exit_code == 0
    out = res.stdout
    top = out.index("1 TLS connection not decrypted (tls.undecrypted)")
    assert top < out.index("Capture") and "nothing wrong" not in out
    assert "no key for this connection" in out and f"{sum(TLS_BYTES)} bytes" in out
    assert "0 decoded, 1 TLS not decrypted" in out
    report = json.loads(run("stats", "-T", "json", str(TLS_SAMPLE)).stdout)
    assert next(iter(report)) == "not_seen" and report["diagnosis"]["nothing_wrong"] is False
    (b,) = report["not_seen"]
    assert (b["rule"], b["count"], b["connections"]) == ("tls.undecrypted", 1, [0])
    assert b["items"][0]["message"].startswith("TLS connection 127.0.0.1:48544 → 127.0.0.1:25675")


def test_a_healthy_capture_still_says_nothing_wrong(caps: dict[str, Path]) -> None:
    res = run("diagnose", "-T", "text", str(ROOT / "samples" / "hello.pcap"))
    assert res.exit_code == 0 and "not seen" not in res.stdout and "nothing wrong" in res.stdout


def test_the_diagnoser_gathers_them_by_rule_the_worst_first(caps: dict[str, Path]) -> None:
    d = Diagnoser()
    for name in ("gaps", "mid"):
        d.next_file(name, offset=10 if name == "mid" else 0)
        for ev in validated(caps[name]):
            d.feed(ev)
    d.finish()
    assert [b.rule for b in d.not_seen()] == ["capture.midstream-start", "capture.gap"]
    mid, gaps = d.not_seen()
    assert (mid.connections, gaps.connections) == ({10}, {0})
    assert mid.items[0].client == "127.0.0.1:40001 → 127.0.0.1:5672" and mid.items[0].file == "mid"
    assert not d.result()  # none of them is a cause


def test_parquet_findings_table_carries_them(caps: dict[str, Path], tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    res = run("decode", "-T", "parquet", "--out-dir", str(tmp_path / "out"), str(caps["gaps"]), str(TLS_SAMPLE))
    assert res.exit_code == 0, res.output
    files = sorted((tmp_path / "out" / "findings").rglob("*.parquet"))
    rows = [r for f in files for r in pq.read_table(f).to_pylist()]
    assert {(r["rule"], r["severity"]) for r in rows if r["severity"] == "not-seen"} == {
        ("capture.gap", "not-seen"),
        ("tls.undecrypted", "not-seen"),
    }


# --- a real client: pika over TLS against the harness broker, a key log for its first connection ---


@pytest.mark.broker
@pytest.mark.skipif(not rabbitmq_available() or not tcpdump_available(), reason="needs RabbitMQ and tcpdump")
def test_real_client_partial_key_log(tmp_path: Path) -> None:
    broker = PrivateBroker(tls=True)
    broker.start()
    try:
        cap, keys = tmp_path / "two.pcap", tmp_path / "two.keys"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        cmd = [sys.executable, "-m", "amqpscope.testing.tls_client", "--port", str(broker.tls_port),
               "--ca", str(broker.ca_file), "--keylog", str(keys), "--connections", "2",
               "--no-keylog-after", "1", "--messages", "3"]  # fmt: skip
        with LoopbackRecorder(cap, broker.tls_port):
            res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
        assert res.returncode == 0, res.stderr[-2000:]
    finally:
        broker.stop()
    tls = sorted((t.conn, t.decrypted, t.client) for t in amqpscope.read(cap, tls_keylog=keys) if isinstance(t, Tls))
    assert [(c, d) for c, d, _ in tls] == [(0, True), (1, False)]
    report = json.loads(run("stats", "-T", "json", "--tls-keylog", str(keys), str(cap)).stdout)
    assert [c["conn"] for c in report["connections"]] == [0]  # the decrypted one
    (b,) = report["not_seen"]
    assert (b["rule"], b["connections"]) == ("tls.undecrypted", [1])
    assert f"TLS connection {tls[1][2]} → " in b["items"][0]["message"]
    assert "not decrypted: no key for this connection" in b["items"][0]["message"]
    out = run("diagnose", "-T", "text", "--tls-keylog", str(keys), str(cap)).stdout
    assert out.startswith("not seen") and "1 TLS connection not decrypted (tls.undecrypted)" in out
    assert "nothing wrong" not in out

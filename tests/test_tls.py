"""AMQP over TLS, with real components: a private RabbitMQ with a TLS listener (the harness makes
its CA and certificate), pika sessions writing the NSS key log (``SSLContext.keylog_filename``),
tcpdump on lo. amqpscope's frames must equal tshark's decryption of the same capture
(``-o tls.keylog_file:``), frame by frame, and the client's own message count.

The TLS 1.3 suite is forced with an ``OPENSSL_CONF`` in the client's process (Python's ssl module
has no call for TLS 1.3 suites), the TLS 1.2 suite with the client's cipher list.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import variants

import amqpscope
from amqpscope.events import Connection, Event, Frame, Gap, Malformed, Message, Tls
from amqpscope.testing.broker import PrivateBroker, rabbitmq_available
from amqpscope.testing.sniffer import LoopbackRecorder, tcpdump_available

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [
    pytest.mark.broker,
    pytest.mark.skipif(not rabbitmq_available() or not tcpdump_available(), reason="needs RabbitMQ and tcpdump"),
    pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark"),
]

FrameKey = tuple[int, str, int, int | None, int | None]
_TYPES = {"1": "method", "2": "header", "3": "body", "8": "heartbeat"}


@pytest.fixture(scope="module")
def tls_broker() -> Iterator[PrivateBroker]:
    # every suite the tests ask for, RSA key exchange and CBC included (Erlang's default list
    # leaves those out); the client's offer picks one
    ciphers = (*SUITES13, *(o for o, _ in SUITES12), "ECDHE-RSA-AES128-SHA256")
    broker = PrivateBroker(tls=True, tls_ciphers=ciphers)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def run_client(broker: PrivateBroker, keylog: Path | None, *args: str, suite13: str | None = None,
               tmp: Path) -> list[dict[str, int]]:  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if suite13:
        conf = tmp / f"openssl-{suite13}.cnf"
        conf.write_text("openssl_conf = default_conf\n[default_conf]\nssl_conf = ssl_sect\n[ssl_sect]\n"
                        f"system_default = sd\n[sd]\nCiphersuites = {suite13}\n")  # fmt: skip
        env["OPENSSL_CONF"] = str(conf)
    cmd = [sys.executable, "-m", "amqpscope.testing.tls_client", "--port", str(broker.tls_port),
           "--ca", str(broker.ca_file), *(["--keylog", str(keylog)] if keylog else []), *args]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    return json.loads(res.stdout)  # type: ignore[no-any-return]


def record(broker: PrivateBroker, tmp: Path, name: str, *args: str, suite13: str | None = None,
           keylog: bool = True, also_ports: tuple[int, ...] = ()) -> tuple[Path, Path, list[dict[str, int]]]:  # fmt: skip
    cap, keys = tmp / f"{name}.pcap", tmp / f"{name}.keys"
    with LoopbackRecorder(cap, broker.tls_port, also_ports=also_ports):
        result = run_client(broker, keys if keylog else None, *args, suite13=suite13, tmp=tmp)
    return cap, keys, result


def ours(events: list[Event]) -> Counter[FrameKey]:
    """The frames of the TLS connections. (Other test runs on this machine replay plain AMQP
    captures on loopback ports found free, which may be the one recorded here.)"""

    def key(e: Frame) -> FrameKey:
        cls = e.class_id if e.type in ("method", "header") else None
        return (e.packet, e.type, e.channel or 0, cls, e.method_id if e.type == "method" else None)

    tls = {e.conn for e in events if isinstance(e, Tls)}
    return Counter(key(e) for e in events if isinstance(e, Frame) and e.conn in tls)


def tshark_frames(cap: Path, keys: Path, port: int) -> Counter[FrameKey]:
    cmd = ["tshark", "-r", str(cap), "-o", f"tls.keylog_file:{keys}", "-d", f"tcp.port=={port},tls",
           "-d", f"tls.port=={port},amqp", "-Y", "amqp", "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=;",
           "-e", "frame.number", "-e", "amqp.type", "-e", "amqp.channel", "-e", "amqp.method.class",
           "-e", "amqp.method.method", "-e", "amqp.header.class"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=120)
    got: Counter[FrameKey] = Counter()
    for line in out.stdout.splitlines():
        f = line.split("\t")
        mcls, mm, hc = (iter(x.split(";")) for x in f[3:6])
        for t, ch in zip(f[1].split(";"), f[2].split(";"), strict=True):
            kind = _TYPES[t]
            if kind == "method":
                got[(int(f[0]), kind, int(ch), int(next(mcls)), int(next(mm)))] += 1
            elif kind == "header":
                got[(int(f[0]), kind, int(ch), int(next(hc)), None)] += 1
            else:
                got[(int(f[0]), kind, int(ch), None, None)] += 1
    return got


def decode(cap: Path, keys: Path | None) -> list[Event]:
    return list(amqpscope.read(cap, tls_keylog=keys))


def of(events: list[Event], cls: type[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, cls)]


def assert_session(events: list[Event], result: list[dict[str, int]], version: str, suite: str) -> None:
    tls = of(events, Tls)
    assert len(tls) == len(result)
    for t in tls:
        assert (t.version, t.suite, t.decrypted, t.reason, t.records_failed) == (version, suite, True, None, 0)
    closes = [c for c in of(events, Connection) if c.state == "close" and c.tls_version is not None]
    assert [(c.tls_version, c.tls_suite) for c in closes] == [(version, suite)] * len(result)
    msgs = [m for m in of(events, Message) if m.conn in {t.conn for t in tls}]
    assert sum(m.method == "basic.publish" for m in msgs) == sum(r["published"] for r in result)
    assert sum(m.method == "basic.get-ok" for m in msgs) == sum(r["got"] for r in result)
    assert all(m.complete for m in msgs)
    assert any(m.body_size > 128 * 1024 for m in msgs)
    frames = [f for f in of(events, Frame) if f.conn in {t.conn for t in tls}]
    assert any(f.method == "channel.close" and (f.args or {}).get("reply_code") == 404 for f in frames)
    assert not [e for e in [*of(events, Malformed), *of(events, Gap)] if e.conn in {t.conn for t in tls}]


SUITES13 = ["TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"]
SUITES12 = [
    ("ECDHE-RSA-AES128-GCM-SHA256", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"),
    ("ECDHE-RSA-AES256-GCM-SHA384", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"),
    ("ECDHE-RSA-CHACHA20-POLY1305", "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256"),
    ("AES128-GCM-SHA256", "TLS_RSA_WITH_AES_128_GCM_SHA256"),
]


@pytest.mark.parametrize("suite", SUITES13)
def test_tls13_each_suite_equals_tshark(tls_broker: PrivateBroker, tmp_path: Path, suite: str) -> None:
    cap, keys, result = record(tls_broker, tmp_path, "t13", "--messages", "9", suite13=suite)
    events = decode(cap, keys)
    assert_session(events, result, "TLSv1.3", suite)
    assert ours(events) == tshark_frames(cap, keys, tls_broker.tls_port)


@pytest.mark.parametrize(("openssl", "iana"), SUITES12)
def test_tls12_each_aead_suite_equals_tshark(tls_broker: PrivateBroker, tmp_path: Path, openssl: str,
                                            iana: str) -> None:  # fmt: skip
    cap, keys, result = record(tls_broker, tmp_path, "t12", "--tls12", "--ciphers", openssl, "--messages", "9")
    events = decode(cap, keys)
    assert_session(events, result, "TLSv1.2", iana)
    assert ours(events) == tshark_frames(cap, keys, tls_broker.tls_port)


def test_cbc_suite_is_reported_not_decrypted(tls_broker: PrivateBroker, tmp_path: Path) -> None:
    cap, keys, _ = record(tls_broker, tmp_path, "cbc", "--tls12", "--ciphers", "ECDHE-RSA-AES128-SHA256",
                          "--messages", "2")  # fmt: skip
    events = decode(cap, keys)
    (tls,) = of(events, Tls)
    assert (tls.decrypted, tls.reason) == (False, "cipher suite not supported for decryption")
    assert not of(events, Frame)
    acc = [e for e in amqpscope.pipeline.decode_source(cap, options=amqpscope.pipeline.Options())]
    assert acc and tls.bytes_c2s > 0


def test_two_connections_key_for_one(tls_broker: PrivateBroker, tmp_path: Path) -> None:
    cap, keys, result = record(tls_broker, tmp_path, "two", "--connections", "2", "--no-keylog-after", "1",
                               "--messages", "4")  # fmt: skip
    events = decode(cap, keys)
    t1, t2 = of(events, Tls)
    assert (t1.decrypted, t1.reason) == (True, None)
    assert (t2.decrypted, t2.reason, t2.version) == (False, "no key for this connection", "TLSv1.3")
    assert t2.sni == "localhost" and t2.bytes_c2s > 0 and t2.bytes_s2c > 0
    assert {f.conn for f in of(events, Frame)} == {t1.conn}
    assert ours(events) == tshark_frames(cap, keys, tls_broker.tls_port)
    msgs = of(events, Message)
    assert sum(m.method == "basic.publish" for m in msgs) == result[0]["published"]


def test_no_key_at_all_is_one_tls_event_and_accounted(tls_broker: PrivateBroker, tmp_path: Path) -> None:
    cap, _keys, _ = record(tls_broker, tmp_path, "nokey", "--messages", "2", keylog=False)
    stats = amqpscope.pipeline.RunStats()
    events = list(amqpscope.pipeline.decode_source(cap, stats=stats))
    (tls,) = of(events, Tls)
    assert tls.reason == "no key for this connection" and not of(events, Frame)
    acc = stats.accounting
    assert acc.tls_bytes == tls.bytes_c2s + tls.bytes_s2c > 0
    # everything but the clear handshake records (hellos, ChangeCipherSpec) stays opaque
    assert 0 < acc.tls_bytes - acc.tls_opaque_bytes < 2000
    lines = b"".join(amqpscope.pipeline.jsonl_batches(cap, options=amqpscope.pipeline.Options())).splitlines()
    assert sum(b'"kind":"tls"' in ln for ln in lines) == 1


def test_resumed_tls12_session(tls_broker: PrivateBroker, tmp_path: Path) -> None:
    cap, keys, result = record(tls_broker, tmp_path, "resume", "--tls12", "--ciphers", "ECDHE-RSA-AES128-GCM-SHA256",
                               "--connections", "2", "--resume", "--messages", "3")  # fmt: skip
    assert result[1]["resumed"] == 1
    events = decode(cap, keys)
    t1, t2 = of(events, Tls)
    assert (t1.resumed, t2.resumed) == (False, True)
    assert t2.decrypted and t2.reason is None
    closes = [c for c in of(events, Connection) if c.state == "close"]
    assert [c.tls_resumed for c in closes] == [False, True]
    assert ours(events) == tshark_frames(cap, keys, tls_broker.tls_port)


def test_plain_and_tls_in_one_capture(tls_broker: PrivateBroker, tmp_path: Path) -> None:
    import pika

    cap, keys = tmp_path / "mixed.pcap", tmp_path / "mixed.keys"
    with LoopbackRecorder(cap, tls_broker.tls_port, also_ports=(tls_broker.port,)):
        run_client(tls_broker, keys, "--messages", "2", tmp=tmp_path)
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", tls_broker.port))
        conn.channel().basic_publish("", "nowhere", b"plain")
        conn.close()
    events = decode(cap, keys)
    # the two connections made here, in whatever order the broker ended them (other programs on
    # this machine may use the plain port too): the TLS one and the plain one that published
    closes = [c for c in of(events, Connection) if c.state == "close" and c.ended == "connection.close"]
    plain = {m.conn for m in of(events, Message) if m.method == "basic.publish" and m.body_size == 5}
    assert [c.tls_version for c in closes if c.tls_version is not None] == ["TLSv1.3"]
    assert [c.tls_version for c in closes if c.conn in plain] == [None]
    assert len(of(events, Tls)) == 1
    assert any(m.method == "basic.publish" and m.body_size == 5 for m in of(events, Message))


def test_damaged_record_is_reported_and_decoding_goes_on(tls_broker: PrivateBroker, tmp_path: Path) -> None:
    cap, keys, _ = record(tls_broker, tmp_path, "dmg", "--messages", "6")
    clean = decode(cap, keys)
    # a packet in the middle of the session carrying one whole small record
    frames = [f for f in of(clean, Frame) if f.type == "method"]
    target = frames[len(frames) // 2].packet
    bad = tmp_path / "damaged.pcap"
    variants.set_payload_byte(cap, bad, target, -3, 0x55)
    events = decode(bad, keys)
    (m,) = of(events, Malformed)
    assert m.packet == target and m.reason == "tls: record failed authentication"
    (tls,) = of(events, Tls)
    assert tls.records_failed == 1
    after = [f for f in of(events, Frame) if f.packet > target]
    assert len(after) == len([f for f in of(clean, Frame) if f.packet > target])


def test_tcp_gap_loses_its_records_and_decryption_goes_on(tls_broker: PrivateBroker, tmp_path: Path) -> None:
    cap, keys, _ = record(tls_broker, tmp_path, "gap", "--messages", "9")
    clean = decode(cap, keys)
    methods = [f for f in of(clean, Frame) if f.type == "method" and f.dir == "c2s"]
    target = methods[len(methods) // 2].packet
    cut = tmp_path / "gap.pcap"
    variants.drop_packets(cap, cut, [target])
    events = decode(cut, keys)
    assert of(events, Gap)
    (tls,) = of(events, Tls)
    assert tls.records_lost >= 1 and tls.records_failed == 0
    last_clean = of(clean, Frame)[-1]
    last = of(events, Frame)[-1]
    assert (last.method, last.type) == (last_clean.method, last_clean.type)  # decoding went on to the end


@pytest.mark.skipif(shutil.which("editcap") is None, reason="needs editcap")
def test_pcapng_with_embedded_key_log_decodes_with_no_option(tls_broker: PrivateBroker, tmp_path: Path) -> None:
    cap, keys, result = record(tls_broker, tmp_path, "dsb", "--messages", "3")
    with_dsb = tmp_path / "dsb.pcapng"
    subprocess.run(["editcap", "--inject-secrets", f"tls,{keys}", str(cap), str(with_dsb)], check=True,
                   capture_output=True, timeout=60)  # fmt: skip
    events = decode(with_dsb, None)
    (tls,) = of(events, Tls)
    assert tls.decrypted and tls.reason is None
    assert ours(events) == ours(decode(cap, keys)) == tshark_frames(cap, keys, tls_broker.tls_port)
    assert sum(m.method == "basic.publish" for m in of(events, Message)) == result[0]["published"]


def test_secrets_never_in_any_output(tls_broker: PrivateBroker, tmp_path: Path) -> None:
    cap, keys, _ = record(tls_broker, tmp_path, "secret", "--messages", "2")
    secrets = [line.split()[2] for line in keys.read_text().splitlines() if line and not line.startswith("#")]
    text = b"".join(amqpscope.pipeline.jsonl_batches(cap, options=amqpscope.pipeline.Options(
        tls_keylog=keys.read_text())))  # fmt: skip
    reprs = repr(list(decode(cap, keys)))
    assert secrets and not any(s.encode() in text or s in reprs for s in secrets)


def _accounting(cap: Path, keys: Path | None) -> amqpscope.pipeline.StreamAccounting:
    stats = amqpscope.pipeline.RunStats()
    options = amqpscope.pipeline.Options(tls_keylog=amqpscope.pipeline.read_keylogs(keys))
    for _ in amqpscope.pipeline.decode_source(cap, options=options, stats=stats):
        pass
    return stats.accounting


@pytest.mark.parametrize("keyed", [True, False], ids=["keys", "no-key"])
def test_tcp_gap_bytes_inside_tls_are_accounted(tls_broker: PrivateBroker, tmp_path: Path, keyed: bool) -> None:
    cap, keys, _ = record(tls_broker, tmp_path, "gapacc", "--messages", "9")
    key = keys if keyed else None
    clean = _accounting(cap, key)
    to_broker = [(i, seg) for i, seg in variants.data_packets(cap) if seg.dst[1] == tls_broker.tls_port]
    # the client's largest segment in the middle of the session: a large body's record
    middle = to_broker[len(to_broker) // 4 : 3 * len(to_broker) // 4]
    target, seg = max(middle, key=lambda p: len(p[1].payload))
    assert len(seg.payload) > 16 * 1024
    cut = tmp_path / "gap.pcap"
    variants.drop_packets(cap, cut, [target])
    acc = _accounting(cut, key)
    lost = len(seg.payload)
    # the TCP bytes the capture lost are gap bytes; the TLS bytes are those captured
    assert clean.gap_bytes == 0 and acc.gap_bytes == lost
    assert acc.tls_bytes == clean.tls_bytes - lost
    # what is left of records the gap cut into is never decrypted (none when it took whole ones):
    # the bytes used can only shrink, by the lost bytes at least
    used, clean_used = acc.tls_bytes - acc.tls_opaque_bytes, clean.tls_bytes - clean.tls_opaque_bytes
    assert used <= clean_used and acc.tls_opaque_bytes >= clean.tls_opaque_bytes - lost
    assert acc.balanced() and clean.balanced()
    # decode --stats shows the same accounting
    from click.testing import CliRunner

    from cli.main import cli

    args = ["decode", "--stats", "-T", "jsonl", "--no-progress", "--no-validate", str(cut)]
    res = CliRunner().invoke(cli, [*args, *(["--tls-keylog", str(keys)] if keyed else [])])
    assert res.exit_code == 0, res.stderr
    last = json.loads(res.stdout.splitlines()[-1])
    assert last["kind"] == "accounting"
    assert (last["gap_bytes"], last["tls_bytes"], last["tls_opaque_bytes"]) == (lost, acc.tls_bytes,
                                                                               acc.tls_opaque_bytes)  # fmt: skip
    events = decode(cut, key)
    (tls,) = of(events, Tls)
    assert tls.bytes_c2s + tls.bytes_s2c == acc.tls_bytes
    if keyed:
        assert [g.size for g in of(events, Gap)] == [lost] and tls.records_lost >= 1
        # the plaintext the lost records held is not in the AMQP stream: the frames around it are
        assert acc.stream_bytes < clean.stream_bytes


def tshark_records(cap: Path, keys: Path, port: int) -> dict[str, list[int]]:
    """Per direction, the packet each TLS record completes in, in stream order (tshark's listing)."""
    cmd = ["tshark", "-r", str(cap), "-o", f"tls.keylog_file:{keys}", "-d", f"tcp.port=={port},tls", "-Y", "tls",
           "-T", "fields", "-E", "occurrence=a", "-E", "aggregator=,", "-e", "frame.number", "-e", "tcp.dstport",
           "-e", "tls.record.length"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=120)
    got: dict[str, list[int]] = {"c2s": [], "s2c": []}
    for line in out.stdout.splitlines():
        number, dport, lengths = line.split("\t")
        d = "c2s" if int(dport) == port else "s2c"
        got[d] += [int(number)] * len(lengths.split(","))
    return got


def test_decode_verbose_shows_the_tls_record_of_each_frame(tls_broker: PrivateBroker, tmp_path: Path) -> None:
    cap, keys, _ = record(tls_broker, tmp_path, "verbose", "--messages", "4")
    events = decode(cap, keys)
    frames, (tls,) = of(events, Frame), of(events, Tls)
    records = tshark_records(cap, keys, tls_broker.tls_port)
    assert frames and all(f.tls is not None for f in frames) and tls.version == "TLSv1.3"
    for f in frames:
        version, suite, index = f.tls
        assert (version, suite) == (tls.version, tls.suite)
        assert records[f.dir][index] == f.packet  # the record tshark lists at that place
    # every record number of a direction at most once per frame run, in order
    for d in ("c2s", "s2c"):
        seq = [f.tls[2] for f in frames if f.dir == d]
        assert seq == sorted(seq)
    from click.testing import CliRunner

    from cli.main import cli

    res = CliRunner().invoke(cli, ["decode", "-V", "-T", "rich", "--no-progress", "--no-validate", "--tls-keylog",
                                   str(keys), str(cap)], env={"COLUMNS": "200"})  # fmt: skip
    assert res.exit_code == 0, res.stderr
    shown = [ln for ln in res.stdout.splitlines() if f"tls: TLSv1.3 {tls.suite}, record " in ln]
    assert len(shown) == len(frames)
    first = frames[0]
    assert f"record {first.tls[2]} of {first.dir}" in shown[0]
    plain = CliRunner().invoke(cli, ["decode", "-V", "-T", "rich", "--no-progress", str(ROOT / "samples" / "hello.pcap")])
    assert plain.exit_code == 0 and "tls:" not in plain.stdout

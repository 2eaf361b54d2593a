"""``amqpscope flow`` (ladder diagrams) and ``amqpscope report`` (one self-contained HTML page)."""

from __future__ import annotations

import csv
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

from click.testing import CliRunner

import amqpscope
from amqpscope.analysis.flow import build, to_mermaid
from cli.main import cli

S08 = "s08_pika_heartbeat.pcap"


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def _steps(captures_dir: Path, name: str) -> int:
    """Method frames and heartbeats of a capture, from tshark's CSV: one ladder step each."""
    with open(captures_dir / f"{name}.tshark.csv", newline="") as fh:
        return sum(r["type"] in ("1", "8") for r in csv.DictReader(fh))


def test_text_ladder(captures_dir: Path) -> None:
    code, out, err = _run("flow", str(captures_dir / S08))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("connection 0: 127.0.0.1:") and lines[0].endswith("127.0.0.1:5672 (seconds from the capture's start)")
    arrows = lines[2:]
    assert len(arrows) == _steps(captures_dir, S08) == 39  # 19 methods + 20 heartbeats; content folded in
    assert "connection.start" in arrows[0] and arrows[0].lstrip().split()[2].startswith("◀")
    assert "connection.start-ok" in arrows[1] and arrows[1].endswith("▶")
    assert sum("─ heartbeat ─" in a for a in arrows) == 20
    assert any("basic.publish" in a and "[11 B]" in a for a in arrows)  # header and body folded in
    assert "hunter" not in out and "response" not in out  # start-ok shows no credentials


def test_mermaid_and_svg_exports(captures_dir: Path, tmp_path: Path) -> None:
    mmd, svg = tmp_path / "s08.mmd", tmp_path / "s08.svg"
    assert _run("flow", str(captures_dir / S08), "-o", str(mmd))[0] == 0
    assert _run("flow", str(captures_dir / S08), "-o", str(svg))[0] == 0
    text = mmd.read_text().splitlines()
    assert text[0] == "sequenceDiagram" and text[1].startswith("    participant C as Client")
    messages = [t for t in text if re.match(r"    [CS]-?->>[CS]: ", t)]
    assert len(messages) == 39
    assert sum("-->>" in t for t in messages) == 20  # heartbeats dashed, both directions
    assert not any(";" in t or "#" in t for t in messages)  # Mermaid's own syntax characters
    root = ET.parse(svg).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    arrows = [e for e in root.iter(f"{ns}line") if e.get("marker-end")]
    assert len(arrows) == 39
    assert sum(e.get("stroke-dasharray") is not None for e in arrows) == 20
    labels = [e.text for e in root.iter(f"{ns}text")]
    assert any(t and t.startswith("server 127.0.0.1:5672") for t in labels)


def test_connection_and_channel_choice(captures_dir: Path) -> None:
    path = captures_dir / "s04_pika_consumer_acks.pcap"
    ladder = build(amqpscope.read(path), conn=0, channels=frozenset({2}))
    assert ladder is not None
    assert {s.channel for s in ladder.steps} == {0, 2}
    assert "basic.cancel" in to_mermaid(ladder)  # the server's cancel on channel 2
    code, out, err = _run("flow", "--conn", "9", str(path))
    assert code == 2 and out == "" and err == "amqpscope: error: no connection 9 in the capture\n"
    code, out, _ = _run("flow", "--limit", "5", str(path))
    assert code == 0 and out.splitlines()[-1] == "… truncated after 5 steps"


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.refs: list[str] = []
        self.h2: list[str] = []
        self._in_h2 = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.refs += [v or "" for k, v in attrs if k in ("src", "href")]
        self._in_h2 = tag == "h2"

    def handle_data(self, data: str) -> None:
        if self._in_h2:
            self.h2.append(data)
            self._in_h2 = False


def test_html_report_is_self_contained(captures_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    code, _, err = _run("report", str(captures_dir / "s04_pika_consumer_acks.pcap"), "-o", str(out))
    assert code == 0, err
    page = out.read_text()
    parser = _Page()
    parser.feed(page)
    # nothing fetched: the only links are fragments inside the page (a cause to its packets in the ladder)
    assert [r for r in parser.refs if not r.startswith("#")] == [] and "<script" not in page and "http://" not in \
        page.replace("http://www.w3.org/2000/svg", "")  # fmt: skip
    assert all(f"id={r[1:]}" in page for r in parser.refs)
    assert parser.tags.count("svg") == 3  # message rates, latencies, in flight against prefetch
    for title in ("Over time", "Connections", "Channels", "Methods", "Synchronous methods (request → reply)",
                  "Publisher confirms", "Consumer deliveries", "Heartbeats and connection ends", "Tracing",
                  "Security audit", "Findings"):  # fmt: skip
        assert title in parser.h2, title
    assert "conn 0 ch 1 prefetch" in page and "capgen-worker" in page
    assert "<polyline" in page


def test_report_escapes_and_redacts(captures_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "s09.html"
    assert _run("report", str(captures_dir / "s09_pika_errors.pcap"), "-o", str(out))[0] == 0
    page = out.read_text()
    assert "s3cret" not in page
    assert "NOT_ALLOWED - access to vhost &#x27;private&#x27; refused for user &#x27;alice&#x27;" in page
    shown = tmp_path / "s09-shown.html"
    assert _run("report", "--show-credentials", str(captures_dir / "s09_pika_errors.pcap"), "-o", str(shown))[0] == 0
    assert "s3cret" in shown.read_text()


def test_report_of_nothing_readable_writes_nothing(tmp_path: Path) -> None:
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(b"\x00" * 64)
    out = tmp_path / "r.html"
    code, _, err = _run("report", str(junk), "-o", str(out))
    assert code == 4 and not out.exists() and err.count("\n") == 1


def test_error_replies_stand_out(captures_dir: Path) -> None:
    path = captures_dir / "s09_pika_errors.pcap"
    codes = [ev.args["reply_code"] for ev in amqpscope.read(path)
             if ev.kind == "frame" and ev.conn == 0 and ev.method in ("channel.close", "connection.close", "basic.return")
             and ev.args["reply_code"] not in (0, 200)]  # fmt: skip
    assert sorted(codes) == [312, 404, 404, 406, 406]  # missing queue, redeclare, missing exchange, return, tag 999
    ladder = build(amqpscope.read(path), conn=0)
    assert ladder is not None
    assert sum(s.alert for s in ladder.steps) == len(codes)
    assert to_mermaid(ladder).count("⚠") == len(codes)


def _reset_by_broker(path: Path) -> tuple[int, int]:
    """A connection the broker resets without connection.close; returns (first packet's time in
    ns, the packet of the RST)."""
    from amqpscope.testing.synth import Capture

    cap = Capture()
    c = cap.connection()
    c.handshake()
    c.open_channel(1)
    for _ in range(50):
        c.publish(1)
    cap._add(c.tcp.rst(from_client=False))
    cap.write(str(path))
    return cap.records[0][0], len(cap.records)


def test_ladder_ends_with_the_tcp_reset_in_capture_time(tmp_path: Path) -> None:
    path = tmp_path / "rst.pcap"
    _, rst = _reset_by_broker(path)
    code, out, err = _run("flow", str(path))
    assert code == 0, err
    last = out.splitlines()[-1]
    assert "TCP RST" in last and last.split()[0] == f"{(rst - 1) * 0.001:.6f}"  # 1 ms a packet from the SYN
    first = out.splitlines()[2]
    assert first.split()[0] == "0.004000"  # connection.start, after the SYN, SYN-ACK, ACK and protocol header
    ladder = build(amqpscope.read(path))
    assert ladder is not None and ladder.steps[-1].packet == rst


def test_windows_keep_the_proofs_and_count_the_rest(tmp_path: Path) -> None:
    from amqpscope.analysis.flow import Elided, Windows

    path = tmp_path / "rst.pcap"
    _, rst = _reset_by_broker(path)
    events = list(amqpscope.read(path))
    everything = build(events, limit=10_000)
    assert everything is not None
    total = len(everything.steps)
    body = next(ev.packet for ev in events if ev.kind == "frame" and ev.type == "body" and ev.packet > 60)
    w = Windows(0, [body, rst], head=5, context=2)
    for ev in events:
        w.feed(ev)
    ladder = w.finish(events[0].ts)
    rows = list(ladder.rows())
    elided = [r for r in rows if isinstance(r, Elided)]
    assert elided and sum(e.count for e in elided) + len(ladder.steps) == total
    # the body frame's packet lands on the publish its content belongs to
    target = ladder.aliases[body]
    publish = next(s for s in ladder.steps if s.packet == target)
    assert publish.label.startswith("basic.publish") and publish.packet < body <= publish.through
    assert ladder.steps[-1].label.startswith("TCP RST") and ladder.steps[-1].packet == rst


def test_windows_elide_no_short_stretch(tmp_path: Path) -> None:
    """Rows between two kept stretches are shown when there are fewer than three of them."""
    from amqpscope.analysis.flow import Elided, Windows

    path = tmp_path / "rst.pcap"
    _reset_by_broker(path)
    events = list(amqpscope.read(path))
    everything = build(events, limit=10_000)
    assert everything is not None
    packets = [s.packet for s in everything.steps]
    for gap in range(0, 8):
        w = Windows(0, [packets[20], packets[20 + 5 + gap]], head=1, context=2)
        for ev in events:
            w.feed(ev)
        ladder = w.finish(events[0].ts)
        counts = [r.count for r in ladder.rows() if isinstance(r, Elided)]
        assert all(c >= 3 for c in counts), (gap, counts)
        assert sum(counts) + len(ladder.steps) == len(everything.steps)

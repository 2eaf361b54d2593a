"""The report in a real browser (headless Chromium, the Debian ``chromium`` package) on four
synthetic captures: a stalled consumer deep in a busy connection, a heartbeat timeout ended by the
broker's RST, a busy capture of many messages acked with ``multiple``, and brief traffic inside a
long idle span. Each page is screenshot (``REPORT_SHOTS=DIR`` keeps the PNGs) and measured in the
browser: every in-page link lands on an element, nothing runs off the right edge at 1400 px, and
the charts' own data says what they plot (per-second rates only from buckets of at least a
second, settled deliveries counted per delivery, the time axis fitted to the traffic)."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from amqpscope.cli.main import cli
from click.testing import CliRunner

from amqpscope.testing.synth import Capture, SynthConn

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WIDTH = 1400
# messages of the busy capture: 300k takes about 75 s of CPU to report (the analysis costs about
# 0.25 ms a message), so the test runs 50k (about 15 s) unless REPORT_BUSY_MESSAGES says otherwise
BUSY = int(os.environ.get("REPORT_BUSY_MESSAGES", "50000"))
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (tools/install-system-deps.sh)")

# Run in the browser on a copy of the page (the report itself has no script).
MEASURE = """<script>
const iw = window.innerWidth, out = {iw, doc: document.documentElement.scrollWidth, dead: [], links: 0};
for (const a of document.querySelectorAll('a[href^="#"]')) {
  out.links++;
  if (!document.getElementById(a.getAttribute('href').slice(1))) out.dead.push(a.getAttribute('href'));
}
out.causeLinks = [...document.querySelectorAll('.cause a[href*="-p"]')].map(a => a.getAttribute('href'));
out.proofRows = [...document.querySelectorAll('.cause a[href*="-p"]')].filter(a => {
  const el = document.getElementById(a.getAttribute('href').slice(1));
  return el && (el.closest('tr.proof') !== null);
}).length;
out.charts = Object.fromEntries([...document.querySelectorAll('svg.chart')].map(s => [s.id, {
  x0: +s.dataset.x0, x1: +s.dataset.x1, bucket: +s.dataset.bucketS, perSecond: s.dataset.perSecond === '1',
  unit: s.dataset.unit, title: s.querySelector('text').textContent,
  idle: [...s.querySelectorAll('rect.idle')].map(r => [+r.dataset.since, +r.dataset.until]),
  series: Object.fromEntries([...s.querySelectorAll('polyline')].map(p => [p.dataset.series, +(p.dataset.total || -1)])),
  silences: [...s.querySelectorAll('rect.silence')].map(r => [r.dataset.dir, +r.dataset.s]),
  beats: s.querySelectorAll('line.beat').length, marks: s.querySelectorAll('rect.cause-mark').length,
  texts: [...s.querySelectorAll('text')].map(t => t.textContent)}]));
out.elided = [...document.querySelectorAll('tr.elided')].map(r => r.innerText);
out.tcp = [...document.querySelectorAll('tr.tcp')].map(r => r.innerText);
out.banner = document.querySelector('.unseen') ? document.querySelector('.unseen').innerText : null;
out.th = [...document.querySelectorAll('th')].map(t => t.innerText);
out.nones = [...document.querySelectorAll('h2')].map(h => {
  let n = 0; for (let e = h.nextElementSibling; e && e.tagName !== 'H2'; e = e.nextElementSibling)
    if ((e.textContent || "").trim() === "none") n++;
  return n; });
out.text = document.body.innerText.slice(0, 3000);
document.title = JSON.stringify(out);
</script>"""


def _chromium(args: list[str], url: str) -> str:
    assert CHROMIUM is not None
    res = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                          f"--window-size={WIDTH},2400", *args, url], capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    return res.stdout + res.stderr


def _measure(page: Path, tmp: Path) -> dict[str, Any]:
    measured = tmp / f"{page.stem}-measured.html"
    measured.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    dom = _chromium(["--dump-dom"], measured.as_uri())
    m = re.search(r"<title>(.*?)</title>", dom, re.S)
    assert m is not None, dom[-2000:]
    got: dict[str, Any] = json.loads(m.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">")
                                     .replace("&amp;", "&"))  # fmt: skip
    return got


def _shoot(page: Path, tmp: Path) -> Path:
    keep = os.environ.get("REPORT_SHOTS")
    shot = (Path(keep) if keep else tmp) / f"{page.stem}.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    _chromium([f"--screenshot={shot}"], page.as_uri())
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 30_000
    return shot


def _report(path: Path, tmp: Path) -> tuple[Path, int]:
    page = tmp / f"{path.stem}.html"
    res = CliRunner().invoke(cli, ["report", "-o", str(page), str(path)])
    assert page.exists(), res.output
    return page, res.exit_code


def _common(got: dict[str, Any]) -> None:
    assert got["dead"] == [], "in-page links that land nowhere"
    assert got["doc"] <= got["iw"], "the page is wider than the window"
    assert not [t for t in got["th"] if re.search(r"[a-z]_[a-z]", t)], "snake_case labels"
    assert all(n <= 1 for n in got["nones"]), "a section says none more than once"
    assert "seconds from the capture's start" in got["text"]


# --- captures ------------------------------------------------------------------------------------


def _at(cap: Capture, seconds: float) -> None:
    """Put the next packet at ``seconds`` from the capture's first packet."""
    cap.ts_ns = max(cap.ts_ns, cap.records[0][0] + int(seconds * 1e9) - 1_000_000) if cap.records else cap.ts_ns


def _consumer(c: SynthConn, channel: int, prefetch: int) -> None:
    c.open_channel(channel)
    c.client(channel, "basic.qos", prefetch_size=0, prefetch_count=prefetch, global_=False)
    c.server(channel, "basic.qos-ok")
    c.client(channel, "basic.consume", queue="q", consumer_tag="ctag")
    c.server(channel, "basic.consume-ok", consumer_tag="ctag")


class _Frames:
    """Publish and deliver frames (method, header and body in one segment) made from one encoded
    template each, the delivery tag and body patched in: distinct bodies (so that the tracer does
    not see thousands of identical messages) at the speed a big capture needs."""

    SENTINEL = 0x0123456789ABCDEF

    def __init__(self, c: SynthConn, size: int = 32) -> None:
        codec, self.size = c.codec, size
        self.publish_head = codec.method_frame(2, "basic.publish", exchange="", routing_key="q")
        self.publish_body = codec.content_frames(2, b"x" * size, None, frame_max=c.frame_max)
        deliver = codec.method_frame(1, "basic.deliver", consumer_tag="ctag", delivery_tag=self.SENTINEL,
                                     redelivered=False, exchange="", routing_key="q")  # fmt: skip
        at = deliver.index(struct.pack(">Q", self.SENTINEL))
        self.deliver_parts = deliver[:at], deliver[at + 8 :]
        self.deliver_body = codec.content_frames(1, b"x" * size, None, frame_max=c.frame_max)

    def _body(self, frames: bytes, n: int) -> bytes:
        return frames[: -self.size - 1] + f"{n:0{self.size}d}".encode() + frames[-1:]

    def publish(self, n: int) -> bytes:
        return self.publish_head + self._body(self.publish_body, n)

    def deliver(self, tag: int, n: int) -> bytes:
        return self.deliver_parts[0] + struct.pack(">Q", tag) + self.deliver_parts[1] + self._body(self.deliver_body, n)


def stalled_consumer(path: Path) -> None:
    """3,000 publishes and their deliveries, acked, then a consumer at its prefetch of 10 for 8 s
    while the publisher goes on; the client then closes the channel (releasing the 10)."""
    cap = Capture()
    c = cap.connection()
    c.handshake()
    c.open_channel(2)
    _consumer(c, 1, 10)
    f = _Frames(c)
    tag = 0
    for _ in range(300):
        for _ in range(10):
            c.send(True, f.publish(tag + 10))
        for _ in range(10):
            tag += 1
            c.send(False, f.deliver(tag, tag))
        c.client(1, "basic.ack", delivery_tag=tag, multiple=True)
    for i in range(10):
        c.send(True, f.publish(10_000 + i))
        tag += 1
        c.send(False, f.deliver(tag, 10_000 + i))
    for i in range(8):
        cap.ts_ns += 1_000_000_000
        c.send(True, f.publish(20_000 + i))
    c.close_channel(1)
    c.close()
    cap.write(str(path))


def heartbeat_timeout(path: Path) -> None:
    """Heartbeat 5 s; both sides beat for 20 s, then the client falls silent; the broker beats on
    and resets the TCP connection after 12 s of the client's silence."""
    cap = Capture()
    c = cap.connection()
    c.handshake(heartbeat=5)
    c.open_channel(1)
    c.publish(1)
    start = cap.records[0][0]
    for t in range(5, 21, 5):
        cap.ts_ns = start + t * 1_000_000_000
        c.heartbeat(True)
        c.heartbeat(False)
    for t in (25, 30):
        cap.ts_ns = start + t * 1_000_000_000
        c.heartbeat(False)
    cap.ts_ns = start + 32_000_000_000
    cap._add(c.tcp.rst(from_client=False))
    cap.write(str(path))


def busy(path: Path, messages: int) -> None:
    """``messages`` publishes and deliveries over about 30 s, 100 per segment, the consumer acking
    each hundred with one ``multiple`` ack."""
    cap = Capture()
    c = cap.connection()
    c.handshake()
    c.open_channel(2)
    _consumer(c, 1, 1000)
    f = _Frames(c)
    start = cap.records[0][0]
    batch = 100
    tag = 0
    for i in range(0, messages, batch):
        cap.ts_ns = max(cap.ts_ns, start + int(0.1e9 + 30e9 * i / messages))
        c.send(True, b"".join(f.publish(n) for n in range(i, i + batch)))
        c.send(False, b"".join(f.deliver(tag + k + 1, i + k) for k in range(batch)))
        tag += batch
        c.client(1, "basic.ack", delivery_tag=tag, multiple=True)
    c.close()
    cap.write(str(path))


def brief_in_idle(path: Path) -> None:
    """400 messages in the first 68 ms of traffic, then nothing until the close at 5.7 s."""
    cap = Capture()
    c = cap.connection()
    c.handshake()
    _consumer(c, 1, 500)
    f = _Frames(c)
    for tag in range(1, 401):
        cap.ts_ns -= 850_000  # 0.15 ms apart: 400 deliveries in about 68 ms
        c.send(False, f.deliver(tag, tag))
        if tag % 40 == 0:
            cap.ts_ns -= 850_000
            c.client(1, "basic.ack", delivery_tag=tag, multiple=True)
    _at(cap, 5.7)
    c.close()
    cap.write(str(path))


# --- tests ---------------------------------------------------------------------------------------


@needs_chromium
def test_stalled_consumer_links_land_deep_in_the_ladder(tmp_path: Path) -> None:
    cap = tmp_path / "stalled.pcap"
    stalled_consumer(cap)
    page, code = _report(cap, tmp_path)
    assert code == 0
    got = _measure(page, tmp_path)
    _common(got)
    assert "consumer-stalled" in got["text"]
    assert got["causeLinks"] and got["proofRows"] == len(got["causeLinks"])
    deepest = max(int(h.rsplit("-p", 1)[1]) for h in got["causeLinks"])
    assert deepest > 6000  # far past any first-N-rows ladder
    assert any(re.search(r"… [\d,]{5,} rows not shown", e) for e in got["elided"])
    flight = got["charts"]["chart-in-flight"]
    assert any("prefetch" in s for s in flight["series"])
    assert flight["marks"] == got["charts"]["chart-rates"]["marks"] == 1  # the stall's span, linked to it
    _shoot(page, tmp_path)


@needs_chromium
def test_heartbeat_timeout_shows_the_reset_and_the_silence(tmp_path: Path) -> None:
    cap = tmp_path / "heartbeat.pcap"
    heartbeat_timeout(cap)
    page, code = _report(cap, tmp_path)
    assert code == 0
    got = _measure(page, tmp_path)
    _common(got)
    assert "heartbeat-timeout" in got["text"]
    assert got["causeLinks"] and got["proofRows"] == len(got["causeLinks"])
    assert any("TCP RST" in r for r in got["tcp"]), got["tcp"]  # the broker's reset is a ladder row
    beats = got["charts"]["beats-0"]
    assert beats["beats"] == 10  # 4 from the client, 6 from the broker
    client_silence = max(s for d, s in beats["silences"] if d == "c2s")
    assert 11.9 < client_silence < 12.1
    _shoot(page, tmp_path)


@needs_chromium
def test_busy_capture_rates_per_second_and_settled_deliveries(tmp_path: Path) -> None:
    cap = tmp_path / "busy.pcap"
    busy(cap, BUSY)
    t = time.monotonic()
    page, code = _report(cap, tmp_path)
    took = time.monotonic() - t
    assert code == 0
    got = _measure(page, tmp_path)
    _common(got)
    rates = got["charts"]["chart-rates"]
    assert rates["perSecond"] and rates["bucket"] >= 1 and rates["unit"] == "msg/s"
    settled = rates["series"]["settled (ack, nack, reject)"]
    assert rates["series"]["delivered"] == settled == BUSY  # one ack frame per 100 deliveries
    assert f"<tr><th>ack frames</th><td>{BUSY // 100}</td></tr>" in page.read_text()
    assert rates["x1"] - rates["x0"] <= 32
    print(f"report of {BUSY:,} messages ({cap.stat().st_size / 1e6:.1f} MB): {took:.1f} s")
    _shoot(page, tmp_path)


@needs_chromium
def test_brief_traffic_in_a_long_idle_span_is_zoomed(tmp_path: Path) -> None:
    cap = tmp_path / "brief.pcap"
    brief_in_idle(cap)
    page, code = _report(cap, tmp_path)
    assert code == 0
    got = _measure(page, tmp_path)
    _common(got)
    rates = got["charts"]["chart-rates"]
    assert rates["x1"] < 1.0, rates  # the axis ends where the traffic does, not at 5.7 s
    assert rates["idle"] and abs(rates["idle"][-1][1] - 5.7) < 0.05  # the idle rest marked
    assert not rates["perSecond"] and rates["bucket"] < 1 and "msgs /" in rates["unit"]
    assert rates["series"]["delivered"] == 400 == rates["series"]["settled (ack, nack, reject)"]
    _shoot(page, tmp_path)


@needs_chromium
def test_truncated_capture_says_what_was_not_seen(tmp_path: Path) -> None:
    cap = tmp_path / "cut.pcap"
    stalled_consumer(cap)
    data = cap.read_bytes()
    cap.write_bytes(data[: len(data) * 2 // 3 - 7])
    page, code = _report(cap, tmp_path)
    assert code == 5
    got = _measure(page, tmp_path)
    _common(got)
    assert got["banner"] is not None and "truncated" in got["banner"].lower()
    assert got["banner"].count("incomplete (") == 1  # the error told once, by the diagnoser or by the report
    assert "Nothing wrong" not in got["text"]


# --- without a browser ---------------------------------------------------------------------------


def test_in_flight_legend_says_it_shows_a_subset(tmp_path: Path) -> None:
    """Six consumers, each on its own channel, each holding more unacked than the last: the chart
    draws the busiest four and says so."""
    cap = Capture()
    c = cap.connection()
    c.handshake()
    for ch in range(1, 7):
        c.open_channel(ch)
        c.client(ch, "basic.consume", queue="q", consumer_tag=f"ctag{ch}")
        c.server(ch, "basic.consume-ok", consumer_tag=f"ctag{ch}")
        for tag in range(1, ch + 1):
            c.deliver(ch, tag, consumer_tag=f"ctag{ch}")
    c.close()
    path = tmp_path / "six.pcap"
    cap.write(str(path))
    page, code = _report(path, tmp_path)
    assert code == 0
    text = page.read_text()
    assert "4 of 6 channels shown (the busiest)" in text
    assert all(f"conn 0 ch {ch} unacked" in text for ch in (3, 4, 5, 6)) and "conn 0 ch 2 unacked" not in text


def test_not_seen_merges_the_diagnosers_entries() -> None:
    from amqpscope.analysis.report_seen import unseen
    from amqpscope.pipeline import StreamAccounting

    told = [{"rule": "capture.gap", "what": "1 connection with bytes missing from the capture",
             "summary": "gap of 120 bytes c2s"},
            {"rule": "capture.midstream-start", "what": "1 connection seen from its middle", "summary": "x"}]  # fmt: skip
    got = unseen("cut short", 5, [StreamAccounting(gap_bytes=120, pending_bytes=9)], {"gaps": 1}, [], told)
    assert [u.rule for u in got] == ["capture.gap", "capture.midstream-start", "capture.truncated", None]
    assert got[0].detail == "gap of 120 bytes c2s"  # the diagnoser's words, not the report's again
    assert got[0].what == "1 connection with bytes missing from the capture"
    assert got[2].what == "Truncated capture" and got[3].what == "Cut-off frames"
    assert unseen(None, 0, [StreamAccounting()], {}, []) == []


def test_gaps_and_undecrypted_tls_are_not_seen(tmp_path: Path) -> None:
    """A publish lost from the capture (18 bytes) and a TLS capture without its keys: the page
    says so at its top, with the bytes, and never "nothing wrong"."""
    cap = Capture()
    c = cap.connection()
    c.handshake()
    c.open_channel(1)
    c.publish(1)
    c.tcp.send(True, c.method(1, "basic.publish", exchange="", routing_key="q"))  # sent, never captured
    c.publish(1)
    c.close()
    gap = tmp_path / "gap.pcap"
    cap.write(str(gap))
    tls = Path(__file__).resolve().parents[1] / "samples" / "tls" / "amqps-tls13.pcap"
    for path, words in ((gap, ("18 bytes",)), (tls, ("TLS connection", "not decrypted", "no key"))):
        page, code = _report(path, tmp_path)
        assert code == 0
        text = page.read_text()
        banner = re.search(r"<div class=unseen id=not-seen>(.*?)</div>", text, re.S)
        assert banner is not None and text.index("not-seen") < text.index("<h2"), path
        assert all(w in banner.group(1) for w in words), banner.group(1)
        assert "Nothing wrong" not in text and "No cause found in what was seen" in text

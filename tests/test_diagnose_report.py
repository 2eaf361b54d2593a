"""The report's first section is the diagnosis, checked in a real browser (headless Chromium, the
Debian ``chromium`` package): causes link to their packets in the ladder, nothing runs off the
page's right edge (wide tables scroll inside their section), and the cards agree with the causes."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from amqpscope.cli.main import cli
from click.testing import CliRunner

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WIDTH = 900  # narrower than the plots and the widest tables: they must scroll or shrink, not overflow

# Run in the browser on a copy of the page (the report itself has no script): what overflows the
# viewport, which tables have no scrolling container, where the links lead, what the cards say.
MEASURE = """<script>
const iw = window.innerWidth, out = {iw, doc: document.documentElement.scrollWidth, cut: [], dead: [], proof: []};
for (const t of document.querySelectorAll('table')) {
  let p = t.parentElement, box = null;
  for (; p && p !== document.body; p = p.parentElement) {
    const o = getComputedStyle(p).overflowX;
    if (o === 'auto' || o === 'scroll') { box = p; break; }
  }
  const right = (box || t).getBoundingClientRect().right;
  if (right > iw + 1 || (!box && t.getBoundingClientRect().right > iw + 1)) out.cut.push(t.rows[0].innerText.slice(0, 30));
}
for (const a of document.querySelectorAll('.cause a')) {
  const row = document.getElementById(a.getAttribute('href').slice(1));
  if (!row) out.dead.push(a.getAttribute('href')); else if (row.classList.contains('proof')) out.proof.push(row.id);
}
out.first = document.querySelector('h2').innerText;
out.cards = Object.fromEntries([...document.querySelectorAll('.card')].map(c => [c.childNodes[1].textContent, c.querySelector('b').innerText]));
document.title = JSON.stringify(out);
</script>"""


def _browser(args: list[str], url: str) -> str:
    assert CHROMIUM is not None
    res = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--window-size={WIDTH},3000",
                          *args, url], capture_output=True, text=True, timeout=120)  # fmt: skip
    return res.stdout + res.stderr


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (tools/install-system-deps.sh)")
def test_report_diagnosis_in_chromium(captures_dir: Path, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    files = [str(captures_dir / "s07_pika_many_channels.pcap"), str(captures_dir / "s09_pika_errors.pcap")]
    res = CliRunner().invoke(cli, ["report", "-o", str(page), *files])
    assert res.exit_code == 0, res.output
    measured = tmp_path / "measured.html"
    measured.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    dom = _browser(["--dump-dom"], measured.as_uri())
    m = re.search(r"<title>(.*?)</title>", dom, re.S)
    assert m is not None, dom[-2000:]
    got = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert got["first"] == "Diagnosis"
    assert got["doc"] <= got["iw"], "the page is wider than the window"
    assert got["cut"] == [], "tables running off the right edge"
    assert got["dead"] == [] and got["proof"], "every packet link of a cause lands on a marked ladder row"
    stats = json.loads(CliRunner().invoke(cli, ["stats", "-T", "json", *files]).output)
    assert got["cards"]["causes"] == str(len(stats["diagnosis"]["causes"])) == "10"
    assert got["cards"]["quirks"] == str(sum(q["count"] for q in stats["diagnosis"]["quirks"]))
    shot = tmp_path / "report.png"
    _browser([f"--screenshot={shot}"], page.as_uri())
    assert shot.stat().st_size > 50_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_released_deliveries_are_not_zero_unacked(captures_dir: Path, tmp_path: Path) -> None:
    """A consumer's deliveries released when its channel closes were unacked: the card says so."""
    page = tmp_path / "r.html"
    CliRunner().invoke(cli, ["report", "-o", str(page), str(captures_dir / "s06_pika_rich_properties.pcap")])
    stats = json.loads(CliRunner().invoke(cli, ["stats", "-T", "json",
                                                str(captures_dir / "s06_pika_rich_properties.pcap")]).output)  # fmt: skip
    d = stats["deliveries"]
    card = f"<b>{d['outstanding']} / {d['released_at_close']}</b>unacked at end / released by a close"
    assert card in page.read_text()

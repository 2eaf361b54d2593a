#!/usr/bin/env python3
"""The README's pictures, made from the real thing: ``amqpscope diagnose`` drawn in a real terminal (tmux,
100 columns, colours kept) and saved as SVG by rich, and the HTML report of the same capture
screenshotted by headless Chromium.

    python tools/screenshots.py [--capture samples/errors.pcap] [--out docs/img]

Needs tmux and chromium (tools/install-system-deps.sh installs both).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_PROMPT = re.compile(r"^\S+@\S+:.*[#$]\s*$")  # the shell's prompt after the command: not part of the picture


def terminal(command: str, width: int, height: int) -> str:
    """What ``command`` leaves on a tmux screen of ``width`` x ``height``, with its colours (ANSI)."""
    session = f"amqpscope-shot-{int(time.time() * 1000)}"
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", str(width), "-y", str(height)], check=True)
    try:
        done = Path(tempfile.mkdtemp()) / "done"
        subprocess.run(["tmux", "send-keys", "-t", session, f"clear; {command}; touch {done}", "Enter"], check=True)
        deadline = time.monotonic() + 60
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        out = subprocess.run(["tmux", "capture-pane", "-p", "-e", "-t", session], check=True,
                             capture_output=True, text=True).stdout  # fmt: skip
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False)
    lines = out.rstrip("\n").splitlines()
    return "\n".join(line for line in lines if not _PROMPT.match(line)).rstrip() + "\n"


def svg_of(ansi: str, width: int, title: str, path: Path) -> None:
    from rich.console import Console
    from rich.text import Text

    console = Console(record=True, width=width, force_terminal=True, color_system="truecolor", file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(Text.from_ansi(ansi), soft_wrap=True)
    console.save_svg(str(path), title=title)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--capture", default="samples/errors.pcap")
    ap.add_argument("--out", default="docs/img")
    args = ap.parse_args()
    out = ROOT / args.out
    out.mkdir(parents=True, exist_ok=True)
    exe = Path(sys.executable).with_name("amqpscope")
    capture = ROOT / args.capture

    width = 100
    ansi = terminal(f"cd {ROOT} && {exe} diagnose {args.capture}", width, 60)
    svg_of(ansi, width, f"amqpscope diagnose {args.capture}", out / "diagnose.svg")

    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "report.html"
        subprocess.run([str(exe), "report", str(capture), "-o", str(page)], check=True, capture_output=True)
        browser = shutil.which("chromium") or shutil.which("chromium-browser")
        if browser is None:
            sys.exit("screenshots: chromium not found")
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--window-size=1400,1100", f"--screenshot={out / 'report.png'}", page.as_uri()],
                       check=True, capture_output=True)  # fmt: skip
    print(f"wrote {out / 'diagnose.svg'} and {out / 'report.png'}", file=sys.stderr)


if __name__ == "__main__":
    main()

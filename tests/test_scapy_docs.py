"""The Scapy examples of the README and docs/scapy.md run as written: each document's Python
blocks as one script (in a scratch directory that sees the shipped samples), then the README's
``amqpscope decode`` of the capture the script wrote.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def python_blocks(text: str) -> str:
    return "\n".join(re.findall(r"```python\n(.*?)```", text, flags=re.S))


def readme_section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("\n## Scapy\n")
    return text[start : text.index("\n## ", start + 1)]


def run_script(source: str, cwd: Path) -> str:
    (cwd / "samples").symlink_to(ROOT / "samples")
    script = cwd / "example.py"
    script.write_text(source)
    done = subprocess.run([sys.executable, str(script)], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("doc", ["README.md", "docs/scapy.md"])
def test_the_example_runs_and_amqpscope_decodes_its_capture(doc: str, tmp_path: Path) -> None:
    text = readme_section() if doc == "README.md" else (ROOT / doc).read_text()
    out = run_script(python_blocks(text), tmp_path)
    assert "basic.publish" in out and "\\x00guest\\x00[redacted]" in out and "\\x00guest\\x00guest" not in out
    if doc == "docs/scapy.md":  # the reasons the page shows in comments
        for line in re.findall(r"\.reason\)  # (.*)", text):
            assert line in out
    assert (tmp_path / "publish.pcap").is_file()
    shell = re.findall(r"```sh\n(.*?)```", text, flags=re.S)
    assert shell[-1].strip() == "amqpscope decode publish.pcap"
    decoded = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "run_cli.py"), "decode", "--format", "jsonl", "publish.pcap"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert decoded.returncode == 0, decoded.stderr
    assert '"method":"basic.publish"' in decoded.stdout.replace(" ", "")
    assert '"routing_key":"k"' in decoded.stdout.replace(" ", "")

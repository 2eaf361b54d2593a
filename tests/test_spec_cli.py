"""``amqpscope spec`` and ``--spec FILE``: print the spec, decode with another spec, and fail cleanly.

A broken or foreign spec XML must give one line on stderr that names the file, the line and the
element, and exit code 2 — never a traceback.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from amqpscope.cli.main import cli
from click.testing import CliRunner

from amqpscope.dissect.spec import bundled_spec_path, load_spec
from tests.conftest import SHARED

PROJECT = Path(__file__).resolve().parents[1]
SHARED_091 = SHARED / "specs" / "amqp0-9-1.xml"  # the canonical 0-9-1 XML: no RabbitMQ extensions
SAMPLES = PROJECT / "samples"
needs_shared = pytest.mark.skipif(not SHARED_091.is_file(), reason=f"{SHARED_091} is not available")


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stdout, result.stderr


def test_spec_json_shape_of_the_shipped_spec() -> None:
    code, out, _ = run("spec", "--format", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["version"] == "0-9-1"
    basic = next(c for c in doc["classes"] if c["name"] == "basic")
    assert basic["id"] == 60
    publish = next(m for m in basic["methods"] if m["name"] == "publish")
    assert {k: publish[k] for k in ("id", "synchronous", "content", "responses", "chassis")} == {
        "id": 40, "synchronous": False, "content": True, "responses": [], "chassis": ["server"]}  # fmt: skip
    assert [{k: f[k] for k in ("name", "domain", "type")} for f in publish["fields"]][:2] == [
        {"name": "reserved-1", "domain": "short", "type": "short"},
        {"name": "exchange", "domain": "exchange-name", "type": "shortstr"},
    ]
    assert [p["name"] for p in doc["properties"] if p["class"] == "basic"][:2] == ["content-type", "content-encoding"]
    assert doc["constants"]["frame-end"] == 206
    assert {c["name"] for c in doc["classes"]} >= {"confirm", "tx"}


def test_spec_table_lists_every_method() -> None:
    code, out, _ = run("spec")
    assert code == 0
    for m in load_spec(bundled_spec_path()).methods():
        assert m.full_name in out


@needs_shared
def test_spec_option_loads_another_xml() -> None:
    code, out, _ = run("spec", "--spec", str(SHARED_091), "--format", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["version"] == "0-9-1" and doc["source"] == str(SHARED_091)
    names = {f"{c['name']}.{m['name']}" for c in doc["classes"] for m in c["methods"]}
    assert "basic.publish" in names
    assert "confirm.select" not in names and "basic.nack" not in names  # RabbitMQ's extensions are not in it


@needs_shared
def test_decode_with_spec_option() -> None:
    """The whole tool runs on the given spec: the same frames as the shipped spec where the two agree,
    and RabbitMQ's confirm class unknown where the canonical XML lacks it."""
    code, ours, _ = run("decode", "-T", "jsonl", str(SAMPLES / "hello.pcap"))
    code2, theirs, _ = run("decode", "--spec", str(SHARED_091), "-T", "jsonl", str(SAMPLES / "hello.pcap"))
    assert (code, code2) == (0, 0)
    assert theirs == ours and '"method":"basic.publish"' in ours
    code, out, _ = run("decode", "--spec", str(SHARED_091), "-T", "jsonl", str(SAMPLES / "confirms.pcap"))
    assert code == 0
    frames = [json.loads(line) for line in out.splitlines()]
    select = next(f for f in frames if f.get("class_id") == 85 and f.get("method_id") == 10)
    assert (select["method"], select["problem"]) == ("85.10", "unknown method 85/10")


def test_decode_with_the_shipped_09_spec() -> None:
    code, out, _ = run("decode", "--spec", str(bundled_spec_path("amqp0-9.xml")), "-T", "jsonl", str(SAMPLES / "hello.pcap"))
    assert code == 0
    methods = [json.loads(line).get("method") for line in out.splitlines()]
    assert "basic.deliver" in methods and "connection.start" in methods


BROKEN = [
    ("not-xml", '<amqp major="0" minor="9">\n<class name="c" index="1">\n</amqp>\n',
     ":3: not well-formed XML (mismatched tag) inside <class> opened at line 2"),
    ("foreign", '<?xml version="1.0"?>\n<project>\n</project>\n', ":2: <project> is not an AMQP spec"),
    ("no-class", '<amqp major="0" minor="9">\n</amqp>\n', ":1: <amqp> defines no <class>"),
    ("class-without-name", '<amqp major="0" minor="9">\n\n<class index="1"/>\n</amqp>\n', ":3: <class> has no 'name' attribute"),
    ("bad-index", '<amqp major="0" minor="9">\n<class name="c" index="ten"/>\n</amqp>\n', ":2: <class> attribute index='ten'"),
    ("unknown-domain", '<amqp major="0" minor="9">\n<class name="c" index="1">\n<method name="m" index="1">\n'
     '<field name="f" domain="nope"/></method></class></amqp>\n', ":4: <field> name='f' refers to unknown domain 'nope'"),
    ("reused-index", '<amqp major="0" minor="9">\n<class name="c" index="1">\n<method name="a" index="1"/>\n'
     '<method name="b" index="1"/></class></amqp>\n', ":4: <method> name='b' reuses index 1"),
    ("domain-loop", '<amqp major="0" minor="9">\n<domain name="a" type="b"/>\n<domain name="b" type="a"/>\n'
     '<class name="c" index="1"/></amqp>\n', "<domain> name="),
]  # fmt: skip


@pytest.mark.parametrize(("xml", "message"), [(x, m) for _, x, m in BROKEN], ids=[n for n, _, _ in BROKEN])
@pytest.mark.parametrize("command", ["spec", "decode"])
def test_broken_spec_is_a_one_line_error(tmp_path: Path, command: str, xml: str, message: str) -> None:
    path = tmp_path / "broken.xml"
    path.write_text(xml)
    args = ["spec", "--spec", str(path)] if command == "spec" else ["decode", "--spec", str(path), str(SAMPLES / "hello.pcap")]
    code, out, err = run(*args)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith(f"amqpscope: error: {path}")
    assert message in err


def test_missing_spec_file(tmp_path: Path) -> None:
    code, _, err = run("spec", "--spec", str(tmp_path / "absent.xml"))
    assert code == 2 and err.count("\n") == 1 and "cannot read spec file" in err


def test_broken_spec_from_the_installed_command_has_no_traceback(tmp_path: Path) -> None:
    path = tmp_path / "broken.xml"
    path.write_text(BROKEN[5][1])
    exe = Path(sys.executable).with_name("amqpscope")
    result = subprocess.run([str(exe), "decode", "--spec", str(path), str(SAMPLES / "hello.pcap")],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 2
    assert result.stderr == f"amqpscope: error: {path}:4: <field> name='f' refers to unknown domain 'nope'\n"
    assert "Traceback" not in result.stderr and result.stdout == ""

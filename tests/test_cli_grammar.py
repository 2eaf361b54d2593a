"""One grammar for every command (docs/cli.md): the same option names, old spellings that still
work with a notice, whole descriptions in ``--help``, files said on stderr, filters that name
what no record has refused with the nearest names."""

from __future__ import annotations

import json
import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from amqpscope.filter import FilterError, compile_filter
from cli.main import COMMANDS, cli, first_sentence

ERRORS = "s09_pika_errors.pcap"
SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "confirms.pcap"
READERS = ("decode", "validate", "stats", "diagnose", "flow", "report")
WITH_FORMAT = ("decode", "validate", "stats", "diagnose", "flow", "sniff", "spec")


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def _help(command: str) -> str:
    code, out, err = _run(command, "--help")
    assert code == 0, err
    return out


@pytest.mark.parametrize("command", READERS)
def test_every_reader_has_the_same_input_and_output_options(command: str) -> None:
    text = _help(command)
    for option in ("--port", "--spec", "--tls-keylog", "-Y, --filter", "-c, --count", "-o, --output"):
        assert option in text, f"{command} lacks {option}"


def test_sniff_reads_with_the_same_input_options() -> None:
    text = _help("sniff")
    for option in ("--port", "--spec", "--tls-keylog", "-Y, --filter", "-c, --count", "-w, --write"):
        assert option in text, f"sniff lacks {option}"


@pytest.mark.parametrize("command", WITH_FORMAT)
def test_every_format_option_is_t_format_and_says_text_not_rich(command: str) -> None:
    text = _help(command)
    assert "-T, --format" in text
    listed = re.search(r"-T, --format \[([^\]]+)\]", text)
    assert listed is not None and "text" in listed.group(1).split("|"), text
    assert "rich" not in listed.group(1) and "table|json" not in listed.group(1)


def test_machine_formats_where_they_fit() -> None:
    choices = {c: re.search(r"-T, --format \[([^\]]+)\]", _help(c)).group(1).split("|")  # type: ignore[union-attr]
               for c in ("decode", "validate", "stats", "diagnose")}  # fmt: skip
    for command, names in choices.items():
        assert {"text", "jsonl", "json"} <= set(names), (command, names)
    assert {"csv", "table", "parquet"} <= set(choices["decode"])


def test_help_shows_whole_descriptions() -> None:
    code, out, _ = _run("--help")
    assert code == 0
    listing = out.split("Commands:")[1]
    flat = " ".join(listing.split())
    for name in cli.list_commands(click.Context(cli)):
        command = cli.get_command(click.Context(cli), name)
        assert command is not None
        sentence = " ".join(first_sentence(command.help).split())
        assert sentence.endswith(".") and len(sentence) > 40, sentence
        assert sentence in flat, f"{name}: {sentence!r} not whole in --help"
    assert "..." not in listing


@pytest.mark.parametrize("args", [
    ["decode", "--format", "rich"], ["decode", "-T", "rich"], ["validate", "--format", "rich"],
    ["stats", "-T", "rich"], ["diagnose", "-T", "rich"],
])  # fmt: skip
def test_old_format_names_still_work_with_one_line_notice(captures_dir: Path, args: list[str], tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    code, _, err = _run(*args, "-o", str(out), str(captures_dir / ERRORS))
    assert code in (0, 1), err  # validate: 1 for its findings
    notices = [line for line in err.splitlines() if "deprecated" in line]
    assert notices == ["amqpscope: warning: --format rich is deprecated and goes in the next release; "
                       "use --format text"], err  # fmt: skip
    assert out.read_text().strip()


def test_spec_old_table_format() -> None:
    code, out, err = _run("spec", "--format", "table")
    assert code == 0 and "basic.publish" in out
    assert err.count("deprecated") == 1 and "--format text" in err
    code, out, err = _run("spec", "-T", "json")
    assert code == 0 and json.loads(out)["version"] and err == ""


def test_decode_parquet_old_out_still_works(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    code, _, err = _run("decode", "-T", "parquet", "-o", str(tmp_path / "old"), str(SAMPLE))
    assert code == 0, err
    assert "-o DIR with --format parquet is deprecated" in err and "--out-dir DIR" in err
    assert (tmp_path / "old" / "_amqpscope.json").exists()
    code, _, err = _run("decode", "-T", "parquet", "--out-dir", str(tmp_path / "new"), str(SAMPLE))
    assert code == 0 and "deprecated" not in err, err
    assert f"amqpscope: wrote Parquet tables to {tmp_path / 'new'}" in err


@pytest.mark.parametrize("args,what", [
    (["stats", "-T", "json"], "the statistics"),
    (["stats", "-T", "jsonl"], "the statistics"),
    (["validate", "-T", "json"], "the findings"),
    (["diagnose", "-T", "json"], "the diagnosis"),
    (["decode", "-T", "jsonl"], "JSON lines"),
    (["decode", "-T", "csv"], "CSV"),
    (["flow", "-T", "mermaid"], "the Mermaid diagram"),
    (["report"], "the HTML report"),
])  # fmt: skip
def test_files_written_are_said_on_stderr(captures_dir: Path, tmp_path: Path, args: list[str], what: str) -> None:
    out = tmp_path / "out.file"
    code, stdout, err = _run(*args, "-o", str(out), str(captures_dir / ERRORS))
    assert code in (0, 1), err
    assert stdout == ""
    assert re.search(rf"^amqpscope: wrote {re.escape(what)} to {re.escape(str(out))} \(\d", err, re.M), err
    assert out.stat().st_size > 0


def test_output_formats_hold_their_data(captures_dir: Path, tmp_path: Path) -> None:
    code, out, _ = _run("stats", "-T", "jsonl", str(captures_dir / ERRORS))
    sections = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and {"capture", "connections", "methods"} <= {s["section"] for s in sections}
    code, out, _ = _run("validate", "-T", "json", "--fail-on", "info", str(captures_dir / ERRORS))
    doc = json.loads(out)
    assert code == 1 and doc["findings"] and sum(doc["by_severity"].values()) == len(doc["findings"])


@pytest.mark.parametrize("command", READERS[:-1])  # report: see test_report_filter_error
@pytest.mark.parametrize("expr,says", [
    ("basic.publishh", "did you mean basic.publish"),
    ("foo.bar == 3", "unknown field 'foo.bar'"),
    ("method == basic.delivr", "did you mean basic.deliver"),
    ("args.routing_kye == x", "did you mean args.routing_key"),
    ("kind == ledgr", "did you mean ledger"),
])  # fmt: skip
def test_unknown_names_in_a_filter_are_exit_2_with_suggestions(captures_dir: Path, command: str, expr: str,
                                                               says: str) -> None:  # fmt: skip
    code, out, err = _run(command, "-Y", expr, str(captures_dir / ERRORS))
    assert code == 2 and out == "", err
    assert err.count("\n") == 1 and err.startswith("amqpscope: error: filter: ") and says in err, err


def test_report_filter_error(captures_dir: Path, tmp_path: Path) -> None:
    code, _, err = _run("report", "-Y", "basic.publishh", "-o", str(tmp_path / "r.html"), str(captures_dir / ERRORS))
    assert code == 2 and "did you mean basic.publish" in err


DOC_FILTERS = [
    "basic.publish && channel == 1", "basic.publish", "basic.*", "*.close", "heartbeat",
    "method == basic.deliver and channel == 3", 'args.routing_key ~ "^orders\\."', "args.reply_code >= 400 or kind == gap",
    "conn in {1, 4} and not heartbeat", "properties.headers.x-retry", "properties.content-type == 'text/plain'",
    'kind == message and properties.content_type == "application/json"', "kind == finding and severity == violation",
    "basic.* and kind == frame and dir == s2c", "channel == 0 and not heartbeat and dir == c2s",
    'kind == "ledger"', "basic.publish or basic.deliver", "conn in {1, 2} and connection.close", "amqp" if False else "frame",
    "args.global == 1", "args.arguments.x-max-priority", "client_properties.product ~ pika", "body.text contains hi",
    "type == body", "kind == tls and not decrypted", "client_properties.product", "40.51", "unknown-9",
]  # fmt: skip


@pytest.mark.parametrize("expr", DOC_FILTERS)
def test_documented_filters_still_compile(expr: str) -> None:
    assert compile_filter(expr) is not None


@pytest.mark.parametrize("expr", ["basic.publishh", "foo.bar == 3", "args.nope == 1", "properties.colour", "bsic.*",
                                  "type == methd", "method in {basic.ack, basic.ackk}"])  # fmt: skip
def test_unknown_names_raise(expr: str) -> None:
    with pytest.raises(FilterError, match="filter: "):
        compile_filter(expr)


def test_filter_and_count_select_what_is_read(captures_dir: Path) -> None:
    cap = str(captures_dir / ERRORS)
    _, out, _ = _run("stats", "-T", "json", cap)
    whole = json.loads(out)
    code, out, err = _run("stats", "-T", "json", "-Y", "conn == 0", cap)
    one = json.loads(out)
    assert code == 0, err
    assert {c["conn"] for c in one["connections"]} == {0} < {c["conn"] for c in whole["connections"]}
    code, out, _ = _run("stats", "-T", "json", "-c", "10", cap)
    assert code == 0 and json.loads(out)["capture"]["frames"] < whole["capture"]["frames"]
    code, out, _ = _run("validate", "-T", "jsonl", "--fail-on", "info", "-Y", "severity == violation", cap)
    assert out and all(json.loads(line)["severity"] == "violation" for line in out.splitlines())
    code, out, _ = _run("diagnose", "-T", "json", "-c", "1", cap)
    assert code == 0 and json.loads(out)["nothing_wrong"]


def test_the_listing_is_each_commands_first_sentence() -> None:
    """``amqpscope --help`` lists COMMANDS without importing the commands: each summary there must be
    what the command's own help says first."""
    for name, (_, summary) in COMMANDS.items():
        command = cli.get_command(click.Context(cli), name)
        assert command is not None, name
        assert " ".join(summary.split()) == " ".join(first_sentence(command.help).split()), name


def test_help_imports_no_command() -> None:
    code = ("import sys; from amqpscope.cli.main import cli\n"
            "try:\n    cli(['--help'])\nexcept SystemExit:\n    pass\n"
            "loaded = sorted(m for m in sys.modules if m.startswith(('amqpscope.cli.', 'amqpscope.pipeline', "
            "'amqpscope._native', 'rich')) and m != 'amqpscope.cli.main')\n"
            "print(loaded, file=sys.stderr)\nassert not loaded, loaded")
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr

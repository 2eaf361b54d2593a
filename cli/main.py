"""``amqpscope``: decode, validate and analyse AMQP 0-9-1 traffic in captures and on the wire.

Each command's module is imported only when that command runs: importing all of them (the analyses,
the report, Spark's planner, the live capture) cost more than half a second before anything was
decoded. ``amqpscope --help`` lists the commands from ``COMMANDS`` without importing any;
tests/test_cli_grammar.py checks that each summary there is the first sentence of its command's help.
"""

from __future__ import annotations

import importlib
import inspect
import re

import click

from amqpscope import __version__

# name: (module in amqpscope.cli, the command's first sentence for the listing)
COMMANDS: dict[str, tuple[str, str]] = {
    "batch": ("batch", "Decode capture archives into Parquet tables under DIR on Spark."),
    "decode": ("decode", "Decode AMQP in capture FILES (pcap, pcapng, compressed; - for stdin)."),
    "diagnose": (
        "diagnose",
        "What went wrong in capture FILES: one entry per cause, ranked by impact, with the packets that prove "
        "it and what the broker did; then the quirks the broker accepts, per client library.",
    ),
    "flow": ("flow", "Draw the ladder (sequence) diagram of a connection in capture FILE."),
    "report": (
        "report",
        "Write an HTML report (no external resources) of capture FILES (or Parquet tables directories).",
    ),
    "sniff": ("sniff", "Decode AMQP live on interface IFACE, captured by dumpcap or tcpdump (see docs/sniffing.md)."),
    "spec": ("spec", "Print the AMQP spec the dissector is built from."),
    "stats": (
        "stats",
        "Conversation analytics of capture FILES: methods, ledgers, latencies, heartbeats, audit.",
    ),
    "validate": (
        "validate",
        "Check AMQP in capture FILES against the spec: grammars, asserts, frame rules, semantic rules.",
    ),
}


def first_sentence(text: str | None) -> str:
    """The first sentence of a command's help, whole: click's own short help stops at ~45 columns
    with an ellipsis, which cut every description of ``amqpscope --help``."""
    para = inspect.cleandoc(text or "").split("\n\n")[0].replace("\n", " ")
    m = re.search(r"(?<=\.)\s", para)
    return para[: m.start()] if m else para


class LazyGroup(click.Group):
    """A group whose commands are imported when one is run (or its own help is asked for)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module = importlib.import_module(f"amqpscope.cli.{COMMANDS[cmd_name][0]}")
        command: click.Command = getattr(module, cmd_name)
        command.short_help = command.short_help or first_sentence(command.help)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="amqpscope")
def cli() -> None:
    """AMQP 0-9-1 protocol analyzer for packet captures and live traffic."""


def main() -> None:
    cli()

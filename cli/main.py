"""``amqpscope``: decode, validate and analyse AMQP 0-9-1 traffic in captures and on the wire."""

from __future__ import annotations

import inspect
import re

import click

from amqpscope import __version__

from .batch import batch
from .decode import decode
from .diagnose import diagnose
from .flow import flow
from .report import report
from .sniff import sniff
from .spec import spec
from .stats import stats
from .validate import validate


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="amqpscope")
def cli() -> None:
    """AMQP 0-9-1 protocol analyzer for packet captures and live traffic."""


cli.add_command(decode)
cli.add_command(diagnose)
cli.add_command(batch)
cli.add_command(spec)
cli.add_command(stats)
cli.add_command(flow)
cli.add_command(report)
cli.add_command(validate)
cli.add_command(sniff)


def first_sentence(text: str | None) -> str:
    """The first sentence of a command's help, whole: click's own short help stops at ~45 columns
    with an ellipsis, which cut every description of ``amqpscope --help``."""
    para = inspect.cleandoc(text or "").split("\n\n")[0].replace("\n", " ")
    m = re.search(r"(?<=\.)\s", para)
    return para[: m.start()] if m else para


for _command in cli.commands.values():
    _command.short_help = _command.short_help or first_sentence(_command.help)


def main() -> None:
    cli()

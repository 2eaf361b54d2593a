"""``amqpscope``: decode, validate and analyse AMQP 0-9-1 traffic in captures and on the wire."""

from __future__ import annotations

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


def main() -> None:
    cli()

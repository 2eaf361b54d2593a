"""``amqpscope``: decode, validate and analyse AMQP 0-9-1 traffic in captures and on the wire."""

from __future__ import annotations

import click

from amqpscope import __version__

from .decode import decode
from .spec import spec


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="amqpscope")
def cli() -> None:
    """AMQP 0-9-1 protocol analyzer for packet captures and live traffic."""


cli.add_command(decode)
cli.add_command(spec)


def main() -> None:
    cli()

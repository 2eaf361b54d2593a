"""``amqpscope batch``: capture archives to Parquet tables on Spark (embedded local, or a cluster).

Spark and pyarrow are imported only when the command runs, so the rest of the CLI works without
the ``spark`` extra.
"""

from __future__ import annotations

import importlib

import click

from .common import (
    compression_option,
    deprecated,
    fail,
    run_guarded,
    spec_option,
    tls_keylog_option,
    tls_keylog_text,
    warn,
    wrote,
)


def _size(ctx: click.Context, param: click.Parameter, value: str) -> int:
    from amqpscope.spark.inputs import parse_size  # stdlib only: no pyarrow needed yet

    try:
        return parse_size(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def _conf(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in value:
        key, sep, val = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}")
        pairs.append((key, val))
    return tuple(pairs)


@click.command()
@click.argument("inputs", nargs=-1, required=True, metavar="INPUT...")
@click.option("--out-dir", "out", default=None, metavar="DIR", help="Output folder (local path or Hadoop URI).")
@click.option("-o", "--out", "old_out", default=None, hidden=True)  # deprecated: --out-dir
@click.option("--master", default=None, metavar="URL",
              help="Spark master, e.g. spark://host:7077 or yarn (default: embedded local[*]).")  # fmt: skip
@spec_option
@click.option("--port", "ports", type=click.IntRange(1, 65535), multiple=True,
              help="Treat TCP port N as AMQP (repeatable). AMQP is also detected on any port.")  # fmt: skip
@tls_keylog_option
@click.option("--split-size", default="64m", show_default=True, callback=_size, metavar="SIZE",
              help="Captures above SIZE that would hold up the job are decoded in parallel slices (by TCP flow).")  # fmt: skip
@click.option("--partitions", type=click.IntRange(min=1), default=None, help="Spark tasks (default: 4 per core).")
@click.option("--driver-memory", default=None, metavar="MEM", help="JVM heap of the embedded Spark, e.g. 2g.")
@click.option("--conf", "conf", multiple=True, callback=_conf, metavar="KEY=VALUE",
              help="Extra Spark setting (repeatable), e.g. spark.executor.memory=4g.")  # fmt: skip
@click.option("--no-validate", is_flag=True, help="No findings table (skips the core's validator).")
@compression_option
@click.option("--diagnose", is_flag=True,
              help="Also the diagnoses table (one row per cause, as 'amqpscope diagnose' reports it; needs "
                   "validation). Python then reads every event: many times slower.")  # fmt: skip
def batch(inputs: tuple[str, ...], out: str | None, old_out: str | None, master: str | None,
          spec: str | None, ports: tuple[int, ...],
          split_size: int, partitions: int | None, driver_memory: str | None,
          conf: tuple[tuple[str, str], ...], no_validate: bool, compression: str, diagnose: bool) -> None:  # fmt: skip
    """Decode capture archives into Parquet tables under DIR on Spark.

    INPUT is a capture file (pcap, pcapng, gzip/bzip2/xz compressed), a directory (searched
    recursively), a glob, or a Hadoop URI (hdfs://, s3a://, file://). Tables: events, messages,
    connections, findings, ledger, errors, captures (and diagnoses with --diagnose), partitioned by
    capture_date and capture_id. Running
    again over the same captures replaces their rows. Captures that cannot be read to the end are
    listed in DIR/errors (and below); the others are written all the same.
    """

    if old_out is not None:
        deprecated("-o/--out DIR", "--out-dir DIR")
        out = out or old_out
    if out is None:
        fail("amqpscope batch needs --out-dir DIR")
    out_dir: str = out

    def run() -> int:
        if diagnose and no_validate:
            fail("--diagnose needs validation (not with --no-validate)")
        try:
            # pyspark is otherwise first imported by get_session, whose failure reads "cannot start Spark"
            importlib.import_module("pyspark")
            from amqpscope.spark.job import JobError, JobOptions, get_session, run_job, summary
        except ImportError as exc:
            fail(_needs_spark_extra(exc))
        if spec is not None:
            from .common import load_codec

            load_codec(spec)  # a bad spec is one line here, not a failed task on every executor
        opts = JobOptions(inputs=inputs, out=out_dir, master=master, spec=spec, ports=frozenset({5672, *ports}),
                          split_bytes=split_size, partitions=partitions, driver_memory=driver_memory, conf=conf,
                          tls_keylog=tls_keylog_text(), validate=not no_validate, diagnose=diagnose,
                          compression=compression)  # fmt: skip
        from amqpscope.spark.inputs import InputError, is_local, list_inputs

        try:
            list_inputs([i for i in inputs if is_local(i)])  # a missing local input fails before a JVM starts
        except InputError as exc:
            fail(str(exc))
        try:
            spark = get_session(master, driver_memory, conf)
        except Exception as exc:
            fail(f"cannot start Spark: {_first_line(exc)}")
        try:
            result = run_job(opts, spark)
        except JobError as exc:
            fail(str(exc))
        except Exception as exc:
            fail(f"Spark job failed: {_first_line(exc)}")
        lines = summary(result)
        for line in lines:
            if line.startswith("error: "):
                warn(line.removeprefix("error: "))
            else:
                click.echo(line)
        wrote(out_dir, "Parquet tables")
        return 0

    run_guarded(run)


def _needs_spark_extra(exc: ImportError) -> str:
    missing = f"no module named {exc.name!r}" if exc.name else _first_line(exc)
    return (f"amqpscope batch needs the spark extra ({missing}): pip install 'amqpscope[spark]' "
            f"(from a checkout: pip install -e '.[spark]')")  # fmt: skip


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__

"""AMQPS captures in the Parquet tables: ``amqpscope batch --tls-keylog`` (one key log for every
task) and a key log embedded per capture (a pcapng Decryption Secrets Block, ``editcap
--inject-secrets``) give the decrypted rows, equal to the single-process decode with the same keys;
``decode --format parquet --tls-keylog`` writes the same tables without Spark.

Three captures of a private RabbitMQ's TLS listener (pika clients writing their key logs): one
whose key log is given with ``--tls-keylog``, one carrying its own in a Decryption Secrets Block,
one with no key anywhere (its TLS connection row only, no frame).
"""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from table_reference import actual_rows, expected_row
from test_spark import assert_same, read_all
from test_tls import record

from amqpscope.dissect.codec import get_codec
from amqpscope.pipeline import Options, decode_source, read_keylogs
from amqpscope.spark import schema
from amqpscope.spark.inputs import list_inputs, local_path
from amqpscope.testing.broker import PrivateBroker, rabbitmq_available
from amqpscope.testing.sniffer import tcpdump_available

pytestmark = [
    pytest.mark.broker,
    pytest.mark.skipif(not rabbitmq_available() or not tcpdump_available(), reason="needs RabbitMQ and tcpdump"),
    pytest.mark.skipif(shutil.which("editcap") is None, reason="needs editcap"),
]
COMPARED = ("events", "messages", "connections", "findings")


@pytest.fixture(scope="module")
def tls_archive(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The three captures (in one directory), the --tls-keylog file and what the clients did."""
    work = tmp_path_factory.mktemp("tls-work")
    archive = tmp_path_factory.mktemp("tls-archive")
    with PrivateBroker(tls=True) as broker:
        given, given_keys, given_result = record(broker, work, "given", "--messages", "5")
        dsb, dsb_keys, dsb_result = record(broker, work, "dsb", "--messages", "4", "--tls12",
                                           "--ciphers", "ECDHE-RSA-AES256-GCM-SHA384")  # fmt: skip
        nokey, _, _ = record(broker, work, "nokey", "--messages", "2", keylog=False)
    shutil.copy(given, archive / "given.pcap")
    subprocess.run(["editcap", "--inject-secrets", f"tls,{dsb_keys}", str(dsb), str(archive / "embedded.pcapng")],
                   check=True, capture_output=True, timeout=60)  # fmt: skip
    shutil.copy(nokey, archive / "nokey.pcap")
    yield {"archive": archive, "keys": given_keys, "published": {"given.pcap": given_result[0]["published"],
           "embedded.pcapng": dsb_result[0]["published"]}}  # fmt: skip


def expected(archive: Path, keys: Path) -> dict[str, Counter[tuple[Any, ...]]]:
    """The rows of a single-process decode of every capture with ``keys`` (the validator on, as
    batch and decode --format parquet run it)."""
    codec = get_codec()
    options = Options(tls_keylog=read_keylogs(keys), validate=True)
    want: dict[str, Counter[tuple[Any, ...]]] = {name: Counter() for name in COMPARED}
    for cap in list_inputs([str(archive)]):
        for ev in decode_source(local_path(cap.uri), codec, options):
            name = schema.TABLE_OF_KIND.get(ev.kind)
            if name in want:
                want[name][expected_row(schema.TABLES[name], cap.uri, ev)] += 1
    return want


def check_decrypted(tables: dict[str, list[dict[str, Any]]], published: dict[str, int]) -> None:
    """Each keyed capture's publishes are rows; the capture without a key has no event row."""

    def name(r: dict[str, Any]) -> str:
        return str(r["capture"]).rsplit("/", 1)[-1]

    pubs = Counter(name(r) for r in tables["events"] if r["method"] == "basic.publish")
    assert pubs == Counter(published)
    conns = {(name(r), r["state"], r["tls_version"], r["tls_suite"]) for r in tables["connections"]
             if r["kind"] == "connection" and r["state"] == "close"}  # fmt: skip
    assert conns == {("given.pcap", "close", "TLSv1.3", "TLS_AES_256_GCM_SHA384"),
                     ("embedded.pcapng", "close", "TLSv1.2", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384")}  # fmt: skip
    tls_rows = {name(r): r for r in tables["connections"] if r["kind"] == "tls"}
    assert set(tls_rows) == {"given.pcap", "embedded.pcapng", "nokey.pcap"}


@pytest.mark.spark
def test_batch_tls_keylog_and_embedded_keys_give_decrypted_rows(spark: Any, tls_archive: dict[str, Any],
                                                                tmp_path: Path) -> None:  # fmt: skip
    from amqpscope.cli.main import cli
    from click.testing import CliRunner

    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["batch", str(tls_archive["archive"]), "--out", str(out), "--tls-keylog",
                                   str(tls_archive["keys"])])  # fmt: skip
    assert res.exit_code == 0, res.output
    tables = read_all(out)
    check_decrypted(tables, tls_archive["published"])
    want = expected(tls_archive["archive"], tls_archive["keys"])
    for name in COMPARED:
        assert_same(name, Counter(actual_rows(schema.TABLES[name], tables[name])), want[name])
    secret = tls_archive["keys"].read_text().split()[-1]
    for path in out.rglob("*.parquet"):
        assert secret.encode() not in path.read_bytes()


def test_decode_parquet_tls_keylog_gives_decrypted_rows(tls_archive: dict[str, Any], tmp_path: Path) -> None:
    from amqpscope.cli.main import cli
    from click.testing import CliRunner

    out = tmp_path / "pq"
    res = CliRunner().invoke(cli, ["decode", "--format", "parquet", "-o", str(out), "--tls-keylog",
                                   str(tls_archive["keys"]), str(tls_archive["archive"])])  # fmt: skip
    assert res.exit_code == 0, res.output
    tables = read_all(out)
    check_decrypted(tables, tls_archive["published"])
    want = expected(tls_archive["archive"], tls_archive["keys"])
    for name in COMPARED:
        assert_same(name, Counter(actual_rows(schema.TABLES[name], tables[name])), want[name])
    # without the option only the capture carrying its own key log decrypts
    bare = tmp_path / "bare"
    assert CliRunner().invoke(cli, ["decode", "--format", "parquet", "-o", str(bare),
                                    str(tls_archive["archive"])]).exit_code == 0  # fmt: skip
    pubs = Counter(str(r["capture"]).rsplit("/", 1)[-1] for r in read_all(bare)["events"]
                   if r["method"] == "basic.publish")  # fmt: skip
    assert pubs == Counter({"embedded.pcapng": tls_archive["published"]["embedded.pcapng"]})

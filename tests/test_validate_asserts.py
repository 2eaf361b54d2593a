"""The spec's <assert> elements compiled into checks: every kind any AMQP 0-x XML uses, taken
from the spec files themselves (0-9-1, 0-9 and 0-8), on good and bad values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from amqpscope.dissect.spec import bundled_spec_path, load_spec
from amqpscope.validate.asserts import CompiledAssert, compile_asserts


def _checks(spec_path: Path | str) -> dict[str, CompiledAssert]:
    spec = load_spec(spec_path)
    return {a.rule: a for checks in compile_asserts(spec).values() for a in checks}


@pytest.fixture(scope="module")
def a091() -> dict[str, CompiledAssert]:
    return _checks(bundled_spec_path())


@pytest.fixture(scope="module")
def a09() -> dict[str, CompiledAssert]:
    return _checks(bundled_spec_path("amqp0-9.xml"))


@pytest.fixture(scope="module")
def a08(captures_dir: Path) -> dict[str, CompiledAssert]:
    return _checks(captures_dir.parent / "specs" / "amqp0-8.stripped.xml")


def _bad(a: CompiledAssert, value: Any, ctx: dict[str, Any] | None = None) -> bool:
    return a.check(value, ctx or {}) is not None


def test_0_9_1_kinds(a091: dict[str, CompiledAssert]) -> None:
    notnull = a091["queue.declare-ok.queue.assert-notnull"]
    assert _bad(notnull, "") and not _bad(notnull, "amq.gen-1") and notnull.severity == "violation"
    code = a091["channel.close.reply-code.assert-notnull"]
    assert _bad(code, 0) and not _bad(code, 200)
    assert code.severity == "deviation"  # clients close with 0; brokers accept it
    le = a091["connection.tune-ok.channel-max.assert-le"]
    assert _bad(le, 20, {"tune.channel-max": 10}) and not _bad(le, 10, {"tune.channel-max": 10})
    assert not _bad(le, 5000, {"tune.channel-max": 0})  # 0 offered: no limit (errata §10)
    assert not le.pure  # depends on the connection's tune
    vhost = a091["connection.open.virtual-host.assert-length"]
    assert _bad(vhost, "v" * 128) and not _bad(vhost, "v" * 127)
    assert _bad(vhost, "é" * 64)  # octets, not characters
    # the exchange-name domain's regexp: a full match, and "-" between ranges is a literal
    publish = a091["basic.publish.exchange.assert-regexp"]
    assert not _bad(publish, "amq.direct") and not _bad(publish, "a-b_c.d:e")
    assert _bad(publish, "two words") and _bad(publish, "name\n")
    # the field's own <rule name="syntax"> takes over its length/regexp asserts, with its code
    syntax = a091["exchange.declare.exchange.syntax"]
    assert syntax.code == 406 and syntax.severity == "deviation"


def test_0_9_kinds(a09: dict[str, CompiledAssert]) -> None:
    ticket = a09["queue.declare.ticket.assert-ne"]
    assert _bad(ticket, 0) and not _bad(ticket, 1)
    assert ticket.severity == "deviation"  # 0-9-1 dropped access tickets; brokers ignore them
    path = a09["connection.open.virtual-host.assert-syntax"]
    assert not _bad(path, "/data") and _bad(path, "data")
    null = a09["channel.open.out-of-band.assert-null"]
    assert not _bad(null, "") and _bad(null, "oob")


def test_0_8_enum_and_names_with_spaces(a08: dict[str, CompiledAssert]) -> None:
    enum = a08["test.integer.operation.assert-enum"]  # <value name="add"/> <value name="min"/> <value name="max"/>
    assert [_bad(enum, v) for v in (0, 1, 2, 3)] == [False, False, False, True]
    assert "connection.open.virtual-host.assert-syntax" in a08  # "virtual host" in the 0-8 XML

"""The spec's <assert> elements as the core checks them: every kind any AMQP 0-x XML uses, taken
from the spec files themselves (0-9-1, 0-9 and 0-8), on good and bad values sent in synthetic
captures (one connection per value; a value is bad when its connection has the assert's finding)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from amqpscope.dissect.codec import Codec, get_codec
from amqpscope.dissect.spec import bundled_spec_path
from amqpscope.events import Finding
from amqpscope.testing.synth import Capture, SynthConn

Send = Callable[[SynthConn, Any], object]


def _found(codec: Codec, rule: str, send: Send, values: list[Any]) -> list[Finding | None]:
    """Per value, the finding of ``rule`` on the connection that sent it (or None)."""
    cap = Capture(codec)
    for v in values:
        c = cap.connection()
        send(c, v)
        c.fin()
    by_conn = {f.conn: f for f in cap.findings() if f.rule == rule}
    assert len(by_conn) == len([f for f in cap.findings() if f.rule == rule]), "one finding per connection"
    return [by_conn.get(i) for i in range(len(values))]


def _bad(codec: Codec, rule: str, send: Send, values: list[Any]) -> list[bool]:
    return [f is not None for f in _found(codec, rule, send, values)]


def _handshake(c: SynthConn, channel_max: int = 2047, tune_ok_channel_max: int | None = None,
               virtual_host: str = "/") -> None:  # fmt: skip
    c.protocol_header()
    c.server(0, "connection.start", version_major=0, version_minor=9, mechanisms="PLAIN", locales="en_US")
    c.client(0, "connection.start-ok", mechanism="PLAIN", response="\x00u\x00p", locale="en_US")
    c.server(0, "connection.tune", channel_max=channel_max, frame_max=131072)
    cm = channel_max if tune_ok_channel_max is None else tune_ok_channel_max
    c.client(0, "connection.tune-ok", channel_max=cm, frame_max=131072)
    c.client(0, "connection.open", virtual_host=virtual_host)
    c.server(0, "connection.open-ok")


def _ready(c: SynthConn) -> None:
    c.handshake()
    c.open_channel(1)


@pytest.fixture(scope="module")
def c091() -> Codec:
    return get_codec()


@pytest.fixture(scope="module")
def c09() -> Codec:
    return get_codec(str(bundled_spec_path("amqp0-9.xml")))


@pytest.fixture(scope="module")
def c08(captures_dir: Path) -> Codec:
    return get_codec(str(captures_dir.parent / "specs" / "amqp0-8.stripped.xml"))


def test_notnull(c091: Codec) -> None:
    def declare_ok(c: SynthConn, v: str) -> None:
        _ready(c)
        c.client(1, "queue.declare", queue="")
        c.server(1, "queue.declare-ok", queue=v)

    found = _found(c091, "queue.declare-ok.queue.assert-notnull", declare_ok, ["", "amq.gen-1"])
    assert found[0] is not None and found[1] is None
    assert found[0].severity == "violation" and found[0].message.endswith("is empty")

    def close(c: SynthConn, v: int) -> None:
        _ready(c)
        c.client(1, "channel.close", reply_code=v, reply_text="bye")
        c.server(1, "channel.close-ok")

    found = _found(c091, "channel.close.reply-code.assert-notnull", close, [0, 200])
    assert found[0] is not None and found[1] is None
    assert found[0].severity == "deviation"  # clients close with 0; brokers accept it


def test_le_against_the_peers_offer(c091: Codec) -> None:
    def tune(c: SynthConn, v: tuple[int, int]) -> None:
        _handshake(c, channel_max=v[0], tune_ok_channel_max=v[1])

    rule = "connection.tune-ok.channel-max.assert-le"
    # 0 offered: no limit (errata §10)
    assert _bad(c091, rule, tune, [(10, 20), (10, 10), (0, 5000)]) == [True, False, False]


def test_length_in_octets(c091: Codec) -> None:
    def vhost(c: SynthConn, v: str) -> None:
        _handshake(c, virtual_host=v)

    rule = "connection.open.virtual-host.assert-length"
    assert _bad(c091, rule, vhost, ["v" * 128, "v" * 127, "é" * 64]) == [True, False, True]  # octets, not characters


def test_regexp_and_the_fields_syntax_rule(c091: Codec) -> None:
    # the exchange-name domain's regexp: a full match, and "-" between ranges is a literal
    def publish(c: SynthConn, v: str) -> None:
        _ready(c)
        c.publish(1, exchange=v)

    values = ["amq.direct", "a-b_c.d:e", "two words", "name\n"]
    assert _bad(c091, "basic.publish.exchange.assert-regexp", publish, values) == [False, False, True, True]

    # the field's own <rule name="syntax"> takes over its length/regexp asserts, with its code
    def declare(c: SynthConn, v: str) -> None:
        _ready(c)
        c.client(1, "exchange.declare", exchange=v, type="direct")
        c.server(1, "exchange.declare-ok")

    found = _found(c091, "exchange.declare.exchange.syntax", declare, ["two words", "e" * 128, "fine"])
    assert found[2] is None and found[0] is not None and found[1] is not None
    assert (found[0].code, found[0].severity) == (406, "deviation")


def test_0_9_kinds(c09: Codec) -> None:
    def declare(c: SynthConn, v: int) -> None:
        _ready(c)
        c.client(1, "queue.declare", ticket=v, queue="q")
        c.server(1, "queue.declare-ok", queue="q")

    found = _found(c09, "queue.declare.ticket.assert-ne", declare, [0, 1])
    assert found[0] is not None and found[1] is None
    assert found[0].severity == "deviation"  # 0-9-1 dropped access tickets; brokers ignore them

    def vhost(c: SynthConn, v: str) -> None:
        _handshake(c, virtual_host=v)

    assert _bad(c09, "connection.open.virtual-host.assert-syntax", vhost, ["/data", "data"]) == [False, True]

    def open_(c: SynthConn, v: str) -> None:
        c.handshake()
        c.client(1, "channel.open", out_of_band=v)
        c.server(1, "channel.open-ok")

    assert _bad(c09, "channel.open.out-of-band.assert-null", open_, ["", "oob"]) == [False, True]


def test_0_8_enum_and_names_with_spaces(c08: Codec) -> None:
    def integer(c: SynthConn, v: int) -> None:
        _ready(c)
        c.server(1, "test.integer", operation=v)

    # <value name="add"/> <value name="min"/> <value name="max"/>
    assert _bad(c08, "test.integer.operation.assert-enum", integer, [0, 1, 2, 3]) == [False, False, False, True]

    def vhost(c: SynthConn, v: str) -> None:
        _handshake(c, virtual_host=v)

    # "virtual host" in the 0-8 XML
    assert _bad(c08, "connection.open.virtual-host.assert-syntax", vhost, ["/data", "data"]) == [False, True]

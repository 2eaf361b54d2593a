"""The class grammars of the spec files compiled to automata (0-9-1 with and without RabbitMQ's
extensions, 0-9), the notation's corner cases, and running the automata."""

from __future__ import annotations

from pathlib import Path

import pytest

from amqpscope.dissect.spec import bundled_spec_path, load_spec
from amqpscope.validate.grammar import (
    GrammarError,
    Node,
    Run,
    compile_grammars,
    compile_tree,
    parse_rules,
    resolve,
)

C, S = "c2s", "s2c"
HANDSHAKE = [(C, "protocol-header"), (S, "connection.start"), (C, "connection.start-ok"), (S, "connection.tune"),
             (C, "connection.tune-ok"), (C, "connection.open"), (S, "connection.open-ok")]  # fmt: skip



def _steps(run: Run, terms: list[tuple[str, str]]) -> list[bool]:
    return [run.step(t) for t in terms]


@pytest.fixture(scope="module")
def g091():  # type: ignore[no-untyped-def]
    return compile_grammars(load_spec(bundled_spec_path()))


@pytest.fixture(scope="module")
def g09():  # type: ignore[no-untyped-def]
    return compile_grammars(load_spec(bundled_spec_path("amqp0-9.xml")))


def test_0_9_1_functional_classes(g091, captures_dir: Path) -> None:  # type: ignore[no-untyped-def]
    assert g091.functional == ("exchange", "queue", "basic", "tx", "confirm")
    stock = compile_grammars(load_spec(captures_dir.parent / "specs" / "amqp0-9-1.xml"))
    assert stock.functional == ("exchange", "queue", "basic", "tx")
    # the stock basic grammar has no server-sent ack, the extended one has (publisher confirms)
    terms = set().union(*(set(r.delta[0]) for r in g091.channel.regions))
    stock_terms = set().union(*(set(r.delta[0]) for r in stock.channel.regions))
    assert (S, "basic.ack") in terms and (S, "basic.ack") not in stock_terms
    assert (C, "confirm.select") in terms and (C, "exchange.bind") in terms


def test_0_9_grammars_compile(g09, captures_dir: Path) -> None:  # type: ignore[no-untyped-def]
    assert g09.functional == ("access", "exchange", "queue", "basic", "file", "stream", "tx", "dtx", "tunnel", "message")
    shared = compile_grammars(load_spec(captures_dir.parent / "specs" / "amqp0-9.xml"))
    assert shared.functional == g09.functional
    run = Run(g09.channel)
    assert _steps(run, [(C, "channel.open"), (S, "channel.open-ok"), (S, "channel.ping"), (C, "channel.ok"),
                        (C, "message.transfer"), (S, "message.reject"), (C, "channel.close"),
                        (S, "channel.close-ok")]) == [True] * 8  # fmt: skip


def test_0_9_redirect_is_a_reply_to_open(g09) -> None:  # type: ignore[no-untyped-def]
    # "C:OPEN S:OPEN-OK | S:REDIRECT": the "|" chooses between the neighbours, not the whole handshake
    run = Run(g09.connection)
    assert _steps(run, [*HANDSHAKE[:-1], (S, "connection.redirect")]) == [True] * 7
    assert not Run(g09.connection).step((S, "connection.redirect"))


def test_stripped_specs_have_no_grammar(captures_dir: Path) -> None:
    with pytest.raises(GrammarError, match="no grammar"):
        compile_grammars(load_spec(captures_dir.parent / "specs" / "amqp0-9-1.stripped.xml"))


def test_connection_grammar_order(g091) -> None:  # type: ignore[no-untyped-def]
    run = Run(g091.connection)
    assert _steps(run, HANDSHAKE) == [True] * 7
    # RabbitMQ's extensions, written in the grammar notation, live inside *use-connection
    assert _steps(run, [(S, "connection.blocked"), (S, "connection.unblocked"), (C, "connection.update-secret"),
                        (S, "connection.update-secret-ok")]) == [True] * 4  # fmt: skip
    assert not run.step((S, "connection.update-secret-ok"))  # no request outstanding
    assert not run.step((S, "connection.start"))
    assert _steps(run, [(S, "connection.close"), (C, "connection.close-ok")]) == [True, True]
    bad = Run(g091.connection)
    assert _steps(bad, [(C, "protocol-header"), (S, "connection.start"), (C, "connection.tune-ok")]) == [True, True, False]
    assert "C:connection.start-ok" in bad.expected()


def test_secure_challenges_repeat(g091) -> None:  # type: ignore[no-untyped-def]
    run = Run(g091.connection)
    terms = HANDSHAKE[:3] + [(S, "connection.secure"), (C, "connection.secure-ok")] * 3 + HANDSHAKE[3:]
    assert all(_steps(run, terms))


def test_channel_transactions_overlap(g091) -> None:  # type: ignore[no-untyped-def]
    """Exchanges of one channel are regions: pipelined requests, deliveries while a request is
    outstanding, no-wait requests with no reply."""
    run = Run(g091.channel)
    assert _steps(run, [(C, "channel.open"), (S, "channel.open-ok")]) == [True, True]
    assert run.step((C, "queue.declare"))
    assert run.step((C, "exchange.declare"))
    assert run.step((S, "basic.deliver"))
    assert run.step((S, "exchange.declare-ok"))
    assert run.step((S, "queue.declare-ok"))
    assert not run.step((S, "queue.declare-ok"))  # nothing left to answer
    assert run.step((C, "queue.bind"), no_reply=True)
    assert not run.step((S, "queue.bind-ok"))
    assert _steps(run, [(C, "basic.get"), (S, "basic.get-empty"), (C, "basic.get"), (S, "basic.get-ok")]) == [True] * 4
    assert _steps(run, [(S, "basic.cancel"), (C, "basic.cancel-ok")]) == [True, True]  # consumer-cancel notify
    assert _steps(run, [(C, "channel.close"), (S, "channel.close-ok")]) == [True, True]
    assert run.state == 0 and run.step((C, "channel.open"))  # the channel number is reused


def test_notation() -> None:
    rules = parse_rules("""
        top   = C:A *pair [ S:OPT ] ( C:X / C:Y S:Z ) end
        pair  = C:P S:P-OK
              / S:Q
        end   = C:E | S:F
    """)
    assert set(rules) == {"top", "pair", "end"}
    auto = compile_tree("t", resolve(rules, "top", "k", {}))
    ok = [(C, "k.a"), (C, "k.p"), (S, "k.q"), (S, "k.p-ok"), (C, "k.y"), (S, "k.z"), (S, "k.f")]
    assert all(_steps(Run(auto), ok))
    assert _steps(Run(auto), [(C, "k.a"), (S, "k.opt"), (C, "k.x"), (C, "k.e")]) == [True] * 4
    assert _steps(Run(auto), [(C, "k.a"), (C, "k.y"), (C, "k.e")]) == [True, True, False]


def test_notation_errors() -> None:
    with pytest.raises(GrammarError, match="missing"):
        parse_rules("a = ( C:X")
    with pytest.raises(GrammarError, match="undefined rule"):
        resolve(parse_rules("a = b"), "a", "k", {})
    assert resolve(parse_rules("a = content"), "a", "k", {"content": Node("eps")}).op == "eps"


def test_spec_without_grammars_still_validates(captures_dir: Path) -> None:
    from amqpscope.dissect.codec import get_codec
    from amqpscope.testing.synth import Capture

    cap = Capture(get_codec(str(captures_dir.parent / "specs" / "amqp0-9-1.stripped.xml")))
    c = cap.connection()
    c.handshake()
    c.open_channel(1)
    p = c.client(1, "tx.commit")
    c.server(1, "tx.commit-ok")
    c.client(2, "basic.qos", prefetch_count=1)  # channel 2 was never opened
    c.close()
    assert [(f.rule, f.packet) for f in cap.findings()] == [("tx.commit.transacted", p), ("channel.not-open", p + 2)]

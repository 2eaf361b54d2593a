"""The class grammars of the spec files compiled to automata (0-9-1 with and without RabbitMQ's
extensions, 0-9) and the notation's corner cases; the compiled grammars as the core runs them, on
synthetic captures (the core's own unit tests of running an automaton are in
``crates/amqpscope-core/src/validate/grammar.rs``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from amqpscope.dissect.codec import get_codec
from amqpscope.dissect.spec import bundled_spec_path, load_spec
from amqpscope.testing.synth import Capture, SynthConn
from amqpscope.validate.grammar import (
    Dfa,
    GrammarError,
    Node,
    compile_grammars,
    compile_tree,
    parse_rules,
    resolve,
)

C, S = "c2s", "s2c"
C09 = str(bundled_spec_path("amqp0-9.xml"))


def _walk(dfa: Dfa, terms: list[tuple[str, str]], state: int = 0) -> int | None:
    """The DFA's state after ``terms`` (None: a term it has no transition for)."""
    for t in terms:
        nxt = dfa.delta[state].get(t)
        if nxt is None:
            return None
        state = nxt
    return state


def _grammar_findings(cap: Capture) -> list[tuple[str, int]]:
    return [(f.rule, f.packet) for f in cap.findings() if f.rule.startswith("grammar.")]


def _start(c: SynthConn) -> None:
    c.protocol_header()
    c.server(0, "connection.start", version_major=0, version_minor=9, mechanisms="PLAIN", locales="en_US")


def _tune_open(c: SynthConn) -> int:
    c.server(0, "connection.tune", channel_max=2047, frame_max=131072)
    c.client(0, "connection.tune-ok", channel_max=2047, frame_max=131072)
    return c.client(0, "connection.open", virtual_host="/")


@pytest.fixture(scope="module")
def g091():  # type: ignore[no-untyped-def]
    return compile_grammars(load_spec(bundled_spec_path()))


@pytest.fixture(scope="module")
def g09():  # type: ignore[no-untyped-def]
    return compile_grammars(load_spec(C09))


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


def test_0_9_channel_session() -> None:
    cap = Capture(get_codec(C09))
    c = cap.connection()
    c.handshake()
    c.open_channel(1)
    c.server(1, "channel.ping")
    c.client(1, "channel.ok")
    c.client(1, "message.transfer", ticket=1)
    c.server(1, "message.reject")
    c.close_channel(1)
    c.close()
    assert cap.findings() == []


def test_0_9_redirect_is_a_reply_to_open() -> None:
    # "C:OPEN S:OPEN-OK | S:REDIRECT": the "|" chooses between the neighbours, not the whole handshake
    cap = Capture(get_codec(C09))
    c = cap.connection()
    _start(c)
    c.client(0, "connection.start-ok", mechanism="PLAIN", response="\x00u\x00p", locale="en_US")
    _tune_open(c)
    c.server(0, "connection.redirect", host="elsewhere")
    c.fin()
    early = cap.connection()
    early.protocol_header()
    p = early.server(0, "connection.redirect", host="elsewhere")
    early.fin()
    assert _grammar_findings(cap) == [("grammar.connection", p)]


def test_stripped_specs_have_no_grammar(captures_dir: Path) -> None:
    with pytest.raises(GrammarError, match="no grammar"):
        compile_grammars(load_spec(captures_dir.parent / "specs" / "amqp0-9-1.stripped.xml"))


def test_connection_grammar_order() -> None:
    cap = Capture()
    c = cap.connection()
    c.handshake()
    # RabbitMQ's extensions, written in the grammar notation, live inside *use-connection
    c.server(0, "connection.blocked", reason="low on memory")
    c.server(0, "connection.unblocked")
    c.client(0, "connection.update-secret", new_secret="s", reason="r")
    c.server(0, "connection.update-secret-ok")
    extra = c.server(0, "connection.update-secret-ok")  # no request outstanding
    again = c.server(0, "connection.start", version_major=0, version_minor=9, mechanisms="PLAIN", locales="en_US")
    c.close(by_client=False)
    bad = cap.connection()
    _start(bad)
    tune_ok = bad.client(0, "connection.tune-ok", channel_max=2047, frame_max=131072)
    bad.fin()
    found = [f for f in cap.findings() if f.rule.startswith("grammar.")]
    assert [(f.rule, f.packet) for f in found] == [("grammar.connection", p) for p in (extra, again, tune_ok)]
    assert found[2].message == "C:connection.tune-ok where the connection grammar expects C:connection.start-ok"


def test_secure_challenges_repeat() -> None:
    cap = Capture()
    c = cap.connection()
    _start(c)
    c.client(0, "connection.start-ok", mechanism="PLAIN", response="\x00u\x00p", locale="en_US")
    for _ in range(3):
        c.server(0, "connection.secure", challenge="more")
        c.client(0, "connection.secure-ok", response="again")
    _tune_open(c)
    c.server(0, "connection.open-ok")
    c.close()
    assert cap.findings() == []


def test_channel_transactions_overlap() -> None:
    """Exchanges of one channel are regions: pipelined requests, deliveries while a request is
    outstanding, no-wait requests with no reply, a closed channel number reused."""
    cap = Capture()
    c = cap.connection()
    c.handshake()
    c.open_channel(1)
    c.client(1, "basic.consume", queue="q", consumer_tag="ct")
    c.server(1, "basic.consume-ok", consumer_tag="ct")
    c.client(1, "queue.declare", queue="q")
    pipelined = c.client(1, "exchange.declare", exchange="e", type="direct")
    c.deliver(1, 1, consumer_tag="ct")
    c.server(1, "queue.declare-ok", queue="q")
    c.server(1, "exchange.declare-ok")
    c.client(1, "queue.bind", queue="q", exchange="e", no_wait=True)
    c.client(1, "basic.get", queue="q")
    c.server(1, "basic.get-empty")
    c.client(1, "basic.get", queue="q")
    c.server(1, "basic.get-ok", delivery_tag=2, exchange="", routing_key="q", message_count=0)
    c.content(False, 1, b"x")
    c.client(1, "basic.ack", delivery_tag=2, multiple=True)
    c.server(1, "basic.cancel", consumer_tag="ct")  # consumer-cancel notify
    c.client(1, "basic.cancel-ok", consumer_tag="ct")
    c.close_channel(1)
    c.open_channel(1)  # the channel number is reused
    c.close()
    assert [(f.rule, f.packet) for f in cap.findings()] == [("sync.pipelined", pipelined)]


def test_notation() -> None:
    rules = parse_rules("""
        top   = C:A *pair [ S:OPT ] ( C:X / C:Y S:Z ) end
        pair  = C:P S:P-OK
              / S:Q
        end   = C:E | S:F
    """)
    assert set(rules) == {"top", "pair", "end"}
    auto = compile_tree("t", resolve(rules, "top", "k", {}))
    # the top-level repetition is a region: its transactions run beside the main sequence
    after_a = _walk(auto.main, [(C, "k.a")])
    assert after_a is not None and len(auto.regions) == 1 and auto.main.regions[after_a] == {0}
    pair = auto.regions[0]
    done = _walk(pair, [(C, "k.p"), (S, "k.p-ok")])
    assert done is not None and pair.dead_end(done)
    q = _walk(pair, [(S, "k.q")])
    assert q is not None and pair.dead_end(q)
    assert _walk(pair, [(S, "k.p-ok")]) is None
    for ok in ([(C, "k.a"), (C, "k.y"), (S, "k.z"), (S, "k.f")], [(C, "k.a"), (S, "k.opt"), (C, "k.x"), (C, "k.e")]):
        end = _walk(auto.main, ok)
        assert end is not None and auto.main.dead_end(end), ok
    assert _walk(auto.main, [(C, "k.a"), (C, "k.y"), (C, "k.e")]) is None
    assert auto.expected(0) == ["C:k.a"]


def test_notation_errors() -> None:
    with pytest.raises(GrammarError, match="missing"):
        parse_rules("a = ( C:X")
    with pytest.raises(GrammarError, match="undefined rule"):
        resolve(parse_rules("a = b"), "a", "k", {})
    assert resolve(parse_rules("a = content"), "a", "k", {"content": Node("eps")}).op == "eps"


def test_spec_without_grammars_still_validates(captures_dir: Path) -> None:
    cap = Capture(get_codec(str(captures_dir.parent / "specs" / "amqp0-9-1.stripped.xml")))
    c = cap.connection()
    c.handshake()
    c.open_channel(1)
    p = c.client(1, "tx.commit")
    c.server(1, "tx.commit-ok")
    c.client(2, "basic.qos", prefetch_count=1)  # channel 2 was never opened
    c.close()
    assert [(f.rule, f.packet) for f in cap.findings()] == [("tx.commit.transacted", p), ("channel.not-open", p + 2)]

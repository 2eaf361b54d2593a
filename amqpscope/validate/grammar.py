"""The class grammars of the spec (``<doc type="grammar">``) compiled to automata.

The notation is the ABNF-like one of the AMQP XML: ``name = …`` rules, juxtaposition for
sequence, ``/`` (and 0-9's stray ``|``) for alternatives, ``*x`` repetition, ``[x]`` option,
``( … )`` grouping, terminals ``C:METHOD`` / ``S:METHOD`` named by their sender. Everything is
derived from the spec text; only three things are supplied from outside because the XML does not
define them: ``content`` (checked frame by frame elsewhere, epsilon here), ``channel`` inside the
connection grammar (each channel has its own automaton) and ``functional-class`` (the union of
every other class grammar).

Why "regions": the grammars describe each synchronous exchange as an adjacent pair, but on the
wire exchanges of one channel overlap (pipelined requests, deliveries arriving while a cancel is
outstanding, confirms between a declare and its reply). So a repetition ``*x`` at the top level
of a grammar is not compiled into the main automaton: it becomes a *region* whose body ``x`` is
a small DFA of "transactions", and any number of transactions may be in flight at once. The main
automaton (open … close) stays strictly sequential. The DFAs are data for the core
(``tables.py`` writes them out): ``crates/amqpscope-core/src/validate/grammar.rs`` runs them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from amqpscope.dissect.spec import AmqpClass, Spec

Terminal = tuple[str, str]  # (direction "c2s"/"s2c", "class.method" or "protocol-header")

# --- parsing ----------------------------------------------------------------------------------

_TOKEN = re.compile(r"\s*(?:(?P<term>[CS]:[A-Za-z0-9-]+)|(?P<name>[a-z][a-z0-9-]*)|(?P<op>[/|*\[\]()]))")


class GrammarError(ValueError):
    """A grammar text the compiler does not understand."""


@dataclass(frozen=True, slots=True)
class Node:
    op: str  # term | ref | seq | alt | star | opt | eps
    value: str = ""
    kids: tuple[Node, ...] = ()


EPS = Node("eps")


def parse_rules(text: str) -> dict[str, Node]:
    """``name = expr`` definitions (continuation lines indented or starting with ``/``)."""
    defs: dict[str, list[str]] = {}
    order: list[str] = []
    current: str | None = None
    for line in text.splitlines():
        m = re.match(r"\s*([a-z][a-z0-9-]*)\s*=(.*)$", line)
        if m:
            current = m.group(1)
            order.append(current)
            defs[current] = [m.group(2)]
        elif line.strip() and current is not None:
            defs[current].append(line)
    return {name: _Parser(" ".join(defs[name])).parse() for name in order}


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        text = text.rstrip()
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if not m or m.end() == pos:
                raise GrammarError(f"cannot parse grammar at {text[pos:pos + 20]!r}")
            kind = m.lastgroup or ""
            self.tokens.append((kind, m.group(kind)))
            pos = m.end()
        self.i = 0

    def parse(self) -> Node:
        node = self._alt()
        if self.i != len(self.tokens):
            raise GrammarError(f"unexpected {self.tokens[self.i][1]!r} in grammar")
        return node

    def _peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def _alt(self) -> Node:
        alts = [self._seq()]
        while (t := self._peek()) is not None and t[1] == "/":
            self.i += 1
            alts.append(self._seq())
        return alts[0] if len(alts) == 1 else Node("alt", kids=tuple(alts))

    def _seq(self) -> Node:
        items: list[Node] = []
        while (t := self._peek()) is not None and t[1] not in ("/", ")", "]"):
            if t[1] == "|" and items:
                # 0-9 writes "C:OPEN S:OPEN-OK | S:REDIRECT": read as a choice between the two
                # neighbours (the reply to open), not as "/" across the whole handshake
                self.i += 1
                items[-1] = Node("alt", kids=(items[-1], self._item()))
                continue
            items.append(self._item())
        if not items:
            raise GrammarError("empty alternative in grammar")
        return items[0] if len(items) == 1 else Node("seq", kids=tuple(items))

    def _item(self) -> Node:
        kind, text = self.tokens[self.i]
        self.i += 1
        if text == "*":
            return Node("star", kids=(self._item(),))
        if text in ("(", "["):
            inner = self._alt()
            close = ")" if text == "(" else "]"
            if self._peek() != ("op", close):
                raise GrammarError(f"missing {close!r} in grammar")
            self.i += 1
            return inner if text == "(" else Node("opt", kids=(inner,))
        if kind == "term":
            return Node("term", text)
        if kind == "name":
            return Node("ref", text)
        raise GrammarError(f"unexpected {text!r} in grammar")


def resolve(rules: dict[str, Node], root: str, cls: str, external: dict[str, Node]) -> Node:
    """Inline every reference; terminals become ``term`` nodes holding "dir class.method"."""

    def walk(node: Node, stack: tuple[str, ...]) -> Node:
        if node.op == "term":
            who, _, meth = node.value.partition(":")
            d = "c2s" if who == "C" else "s2c"
            name = "protocol-header" if meth.lower() == "protocol-header" else f"{cls}.{meth.lower()}"
            return Node("term", f"{d} {name}")
        if node.op == "ref":
            if node.value in rules and node.value not in stack:
                return walk(rules[node.value], (*stack, node.value))
            if node.value in external:
                return external[node.value]
            raise GrammarError(f"grammar of {cls}: undefined rule {node.value!r}")
        if node.kids:
            return Node(node.op, node.value, tuple(walk(k, stack) for k in node.kids))
        return node

    return walk(rules[root], (root,))


# --- NFA / DFA ----------------------------------------------------------------------------------


@dataclass(slots=True)
class _Nfa:
    eps: list[list[int]] = field(default_factory=list)
    moves: list[list[tuple[str, int]]] = field(default_factory=list)
    region: dict[int, int] = field(default_factory=dict)  # NFA state -> region index

    def new(self) -> int:
        self.eps.append([])
        self.moves.append([])
        return len(self.eps) - 1


def _has_terms(node: Node) -> bool:
    return node.op == "term" or any(_has_terms(k) for k in node.kids)


def _build(nfa: _Nfa, node: Node, regions: list[Node] | None) -> tuple[int, int]:
    """Thompson construction; with ``regions``, top-level stars become region states."""
    s, e = nfa.new(), nfa.new()
    if node.op == "term":
        nfa.moves[s].append((node.value, e))
    elif node.op == "eps":
        nfa.eps[s].append(e)
    elif node.op == "seq":
        cur = s
        for k in node.kids:
            a, b = _build(nfa, k, regions)
            nfa.eps[cur].append(a)
            cur = b
        nfa.eps[cur].append(e)
    elif node.op == "alt":
        for k in node.kids:
            a, b = _build(nfa, k, regions)
            nfa.eps[s].append(a)
            nfa.eps[b].append(e)
    elif node.op == "opt":
        a, b = _build(nfa, node.kids[0], regions)
        nfa.eps[s] += [a, e]
        nfa.eps[b].append(e)
    elif node.op == "star":
        body = node.kids[0]
        while body.op == "star":
            body = body.kids[0]  # *(*x) is *x; a region body must be one transaction, not a loop
        if regions is not None and _has_terms(body):
            nfa.region[s] = len(regions)  # a region: its body runs as concurrent transactions
            regions.append(body)
            nfa.eps[s].append(e)
        else:
            a, b = _build(nfa, body, regions)
            nfa.eps[s] += [a, e]
            nfa.eps[b] += [a, e]
    else:
        raise GrammarError(f"unresolved grammar node {node.op} {node.value}")
    return s, e


@dataclass(frozen=True, slots=True)
class Dfa:
    """States are ints; ``delta[state]`` maps a terminal to the next state."""

    delta: tuple[dict[Terminal, int], ...]
    final: frozenset[int]
    regions: tuple[frozenset[int], ...]  # region indexes active in each state

    def dead_end(self, state: int) -> bool:
        return state in self.final and not self.delta[state]


def _determinize(nfa: _Nfa, start: int, end: int) -> Dfa:
    def closure(states: Iterable[int]) -> frozenset[int]:
        out, todo = set(states), list(states)
        while todo:
            for n in nfa.eps[todo.pop()]:
                if n not in out:
                    out.add(n)
                    todo.append(n)
        return frozenset(out)

    first = closure([start])
    index = {first: 0}
    order = [first]
    delta: list[dict[Terminal, int]] = []
    i = 0
    while i < len(order):
        cur = order[i]
        moves: dict[str, set[int]] = {}
        for st in cur:
            for term, nxt in nfa.moves[st]:
                moves.setdefault(term, set()).add(nxt)
        row: dict[Terminal, int] = {}
        for term, targets in moves.items():
            tgt = closure(targets)
            if tgt not in index:
                index[tgt] = len(order)
                order.append(tgt)
            d, _, name = term.partition(" ")
            row[(d, name)] = index[tgt]
        delta.append(row)
        i += 1
    final = frozenset(n for n, st in enumerate(order) if end in st)
    regions = tuple(frozenset(nfa.region[s] for s in st if s in nfa.region) for st in order)
    return Dfa(tuple(delta), final, regions)


@dataclass(frozen=True, slots=True)
class Automaton:
    """A class grammar: a sequential main DFA plus one transaction DFA per region."""

    name: str
    main: Dfa
    regions: tuple[Dfa, ...]
    terminals: frozenset[Terminal]  # every terminal the grammar mentions (main and regions)

    def expected(self, state: int) -> list[str]:
        names = [f"{'C' if d == 'c2s' else 'S'}:{n}" for d, n in self.main.delta[state]]
        for r in self.main.regions[state]:
            names += [f"{'C' if d == 'c2s' else 'S'}:{n}" for d, n in self.regions[r].delta[0]]
        return sorted(names)


def compile_tree(name: str, tree: Node) -> Automaton:
    nfa = _Nfa()
    bodies: list[Node] = []
    s, e = _build(nfa, tree, bodies)
    main = _determinize(nfa, s, e)
    regions = []
    for body in bodies:
        rn = _Nfa()
        rs, re_ = _build(rn, body, None)
        regions.append(_determinize(rn, rs, re_))
    terms: set[Terminal] = set()
    for dfa in (main, *regions):
        for row in dfa.delta:
            terms.update(row)
    return Automaton(name, main, tuple(regions), frozenset(terms))


# --- the spec's grammars --------------------------------------------------------------------------

# What RabbitMQ (and the checklist §1.1) adds to the XML grammars: legal on the wire, written in the
# grammar notation and compiled like the rest. Appended inside the named rule's repetition.
EXTENSIONS: dict[tuple[str, str], str] = {
    # blocked/unblocked: async, either peer; update-secret: C→S request (chassis erratum)
    ("connection", "use-connection"): "C:BLOCKED / S:BLOCKED / C:UNBLOCKED / S:UNBLOCKED"
    " / C:UPDATE-SECRET S:UPDATE-SECRET-OK",
    # consumer-cancel notification from the server; the client may answer it with cancel-ok
    ("basic", "basic"): "S:CANCEL [ C:CANCEL-OK ]",
}
# basic.recover has no <response> and no synchronous flag in the XML (errata §28); its grammar
# alternative "C:RECOVER S:RECOVER-OK" is in the XML already, so nothing to add here.
SESSION_CLASSES = ("connection", "channel")


@dataclass(frozen=True, slots=True)
class Grammars:
    connection: Automaton
    channel: Automaton
    functional: tuple[str, ...]  # classes folded into functional-class


def _class_tree(c: AmqpClass, spec: Spec, external: dict[str, Node]) -> Node:
    assert c.grammar is not None
    rules = parse_rules(c.grammar)
    known = {m.name for m in c.methods}
    for (cls, rule), text in EXTENSIONS.items():
        if cls != c.name or rule not in rules:
            continue
        terms = re.findall(r"[CS]:([A-Za-z-]+)", text)
        if not all(t.lower() in known for t in terms):
            continue  # the extension needs methods this spec does not have
        extra = _Parser(text).parse()
        body = rules[rule]
        rules[rule] = Node("star", kids=(Node("alt", kids=(body.kids[0], extra)),)) if body.op == "star" \
            else Node("alt", kids=(body, extra))
    return resolve(rules, next(iter(rules)), c.name, external)


def compile_grammars(spec: Spec) -> Grammars:
    """Compile the connection and channel grammars of ``spec`` (with functional classes nested)."""
    by_name = {c.name: c for c in spec.classes if c.grammar}
    for needed in SESSION_CLASSES:
        if needed not in by_name:
            raise GrammarError(f"spec {spec.version} has no grammar for class {needed}")
    base = {"content": EPS}
    functional = tuple(n for n in by_name if n not in SESSION_CLASSES)
    trees = [_class_tree(by_name[n], spec, base) for n in functional]
    fc = Node("alt", kids=tuple(trees)) if trees else EPS
    conn = _class_tree(by_name["connection"], spec, {**base, "channel": EPS})
    chan = _class_tree(by_name["channel"], spec, {**base, "functional-class": fc})
    return Grammars(compile_tree("connection", conn), compile_tree("channel", chan), functional)

"""Everything spec-derived the core's validator executes, compiled into one JSON document.

``validation_tables(spec)`` is what ``crates/amqpscope-core/src/validate/tables.rs`` parses. The
spec stays data: grammars are compiled to DFAs here (``grammar.compile_grammars``), asserts to
plain records, pairing and chassis to per-method entries; the core only executes them. Layout::

    version        the spec's version ("0-9-1"), which the client's protocol header is compared to
    catalogue      rule id -> reply code (or null): OWN_RULES and the spec's <rule>s
    frame_types    frame type names the spec defines; min_size: frame-min-size
    connection_class  class id of "connection" (its methods belong on channel 0)
    methods        name -> {content, fields, senders, reserved: [[ident, name]], nowait: ident,
                   replies: [sorted names] (synchronous requests), optional_from: [dirs],
                   asserts: [{kind, field, label, rule, id, severity, code, ...}]}
    replies        every method that answers a request
    grammars       null, or {connection, channel}: {main, regions, expected}, a DFA being
                   {delta: [[[dir, name, next], ...] per state], final: [...], regions: [[...] per state]}
    close_state    dir -> the connection DFA's state after a connection.close from that side
    rules          rules_tables(spec): what the semantic rules need (rules_tables.py; refusals there)
"""

from __future__ import annotations

import json
import re
from typing import Any

from amqpscope.dissect import errata
from amqpscope.dissect.spec import Assert, Field, Method, Spec

from .findings import DEVIATION, VIOLATION, WARNING, Catalogue
from .grammar import Automaton, Dfa, GrammarError, compile_grammars

try:
    from re import _parser as sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python < 3.11
    import sre_parse  # type: ignore[no-redef]


# Imports only findings.py (the catalogue), grammar.py (the grammar compiler) and rules_tables.py;
# the Python per-packet validator these tables were ported from is gone (issue 16): the core
# (crates/amqpscope-core/src/validate/) is the one implementation.


def validation_tables(spec: Spec) -> str:
    """The JSON document the core's ``ValidationTables::from_json`` reads."""
    cat = Catalogue(spec)
    pairing = _Pairing(spec)
    doc: dict[str, Any] = {
        "version": spec.version,
        "catalogue": {rid: info.code for rid, info in cat.rules.items()},
        "frame_types": sorted(frame_types(spec)),
        "min_size": spec.constant("frame-min-size", 4096) or 4096,
        "connection_class": _class_id(spec, "connection"),
        "methods": {m.full_name: _method(spec, m, pairing) for m in spec.methods()},
        "replies": sorted(pairing.replies),
        "grammars": None,
        "close_state": {},
        "rules": _rules(spec),
    }
    try:
        g = compile_grammars(spec)
    except GrammarError:
        g = None  # a stripped spec file without grammars: the other checks still run
    if g is not None:
        doc["grammars"] = {"connection": _automaton(g.connection), "channel": _automaton(g.channel)}
        # the connection automaton's state after a close from either side (checker.rs applies it)
        close: dict[str, int] = {}
        for row in g.connection.main.delta:
            for (d, name), nxt in row.items():
                if name == "connection.close":
                    close.setdefault(d, nxt)
        doc["close_state"] = close
    return json.dumps(doc, separators=(",", ":"))


def _class_id(spec: Spec, name: str) -> int:
    try:
        return spec.find_class(name).index
    except KeyError:
        return 10


def _rules(spec: Spec) -> Any:
    from .rules_tables import rules_tables

    return rules_tables(spec)


# --- frame types (frames.rs) ------------------------------------------------------------------------

# frame type names the session uses for each spec constant (0-9's out-of-band frames included)
_TYPE_NAMES = {"frame-method": "method", "frame-header": "header", "frame-body": "body",
               "frame-heartbeat": "heartbeat", "frame-oob-method": "oob-method",
               "frame-oob-header": "oob-header", "frame-oob-body": "oob-body", "frame-trace": "trace"}  # fmt: skip


def frame_types(spec: Spec) -> frozenset[str]:
    """The frame types the spec defines, from its ``frame-*`` constants."""
    return frozenset(_TYPE_NAMES[n] for n in spec.constants if n in _TYPE_NAMES) or frozenset(
        ("method", "header", "body", "heartbeat")
    )


# --- pairing and chassis (pairing.rs) ----------------------------------------------------------------

class _Pairing:
    """Who may send each method (chassis), the replies of each synchronous request, no-wait fields;
    the spec's mistakes corrected where they are listed once (``dissect/errata.py``)."""

    def __init__(self, spec: Spec) -> None:
        self.senders: dict[str, frozenset[str]] = {}
        self.requests: dict[str, frozenset[str]] = {}
        self.no_wait: dict[str, str] = {}  # method -> its no-wait argument name
        for m in spec.methods():
            name = m.full_name
            self.senders[name] = errata.senders(m)
            responses = errata.responses(m)
            if responses:
                self.requests[name] = frozenset(responses)
            no_wait = errata.no_wait_field(m)
            if no_wait:
                self.no_wait[name] = no_wait
        self.replies = frozenset(r for rs in self.requests.values() for r in rs)


# --- methods: content, chassis, pairing, reserved fields ---------------------------------------------


def _method(spec: Spec, m: Method, pairing: _Pairing) -> dict[str, Any]:
    name = m.full_name
    replies = pairing.requests.get(name)
    return {
        "content": m.content,
        "fields": bool(m.fields),
        "senders": sorted(pairing.senders.get(name) or ()),
        "reserved": [[f.ident, f.name] for f in m.fields if f.reserved],
        "nowait": pairing.no_wait.get(name),
        "replies": sorted(replies) if replies is not None else None,
        # RabbitMQ's consumer-cancel notification: a server-sent basic.cancel may go unanswered
        # (pairing.rs's optional request)
        "optional_from": ["s2c"] if name == "basic.cancel" else [],
        "asserts": [a for f in m.fields for a in _field_asserts(spec, m, f)],
    }


# --- automata ------------------------------------------------------------------------------------------


def _dfa(d: Dfa) -> dict[str, Any]:
    return {
        "delta": [[[t[0], t[1], nxt] for t, nxt in row.items()] for row in d.delta],
        "final": sorted(d.final),
        # in Python's iteration order: the first region that accepts a terminal takes it
        "regions": [list(r) for r in d.regions],
    }


def _automaton(a: Automaton) -> dict[str, Any]:
    return {
        "main": _dfa(a.main),
        "regions": [_dfa(r) for r in a.regions],
        "expected": [a.expected(s) for s in range(len(a.main.delta))],
    }


# --- asserts (as data; asserts.rs checks them) ---------------------------------------------------------

_KINDS = ("notnull", "null", "length", "regexp", "ne", "le", "enum", "syntax")
# Real brokers accept what these asserts forbid: a deviation, not a violation
_LENIENT = {("regexp", "domain:exchange-name"), ("regexp", "domain:queue-name"),
            ("length", "domain:exchange-name"), ("length", "domain:queue-name"),
            ("notnull", "domain:reply-code"), ("notnull", "domain:reply-text")}  # fmt: skip


def _field_asserts(spec: Spec, m: Method, f: Field) -> list[dict[str, Any]]:
    out = []
    syntax = next((r for r in f.rules if r.name == "syntax"), None)
    for a in f.asserts:
        if a.check not in _KINDS:
            continue  # an assert kind no AMQP XML uses; nothing to check
        sev = DEVIATION if (a.check, a.origin) in _LENIENT else VIOLATION
        if a.check == "ne" and f.reserved:
            sev = WARNING  # old clients send non-zero tickets; brokers ignore them
        elif a.check == "ne" and f.name == "ticket":
            sev = DEVIATION  # 0-9's access tickets: 0-9-1 dropped them
        rule = ident = f"{m.full_name}.{f.name}.assert-{a.check}".replace(" ", "-")
        code = spec.constant("syntax-error") if sev != WARNING else None
        if syntax is not None and a.check in ("regexp", "length"):
            rule = f"{m.full_name}.{f.name}.syntax"
            code = spec.constant(syntax.on_failure) if syntax.on_failure else code
        # "id": the assert's own id, which rules_tables' assert_codes are keyed by
        rec: dict[str, Any] = {"kind": a.check, "field": f.ident, "label": f.name, "rule": rule, "id": ident,
                               "severity": sev, "code": code}  # fmt: skip
        rec.update(_assert_params(a, f))
        out.append(rec)
    return out


def _assert_params(a: Assert, f: Field) -> dict[str, Any]:
    if a.check == "length":
        return {"limit": int(a.value or 0)}
    if a.check == "regexp":
        return {"pattern": a.value or "", "atoms": _regexp_atoms((a.value or "").removeprefix("^").removesuffix("$"))}
    if a.check == "ne":
        return {"bad": a.value or ""}
    if a.check == "le":
        return {"key": f"{a.method}.{a.field or f.name}", "method": a.method or ""}
    if a.check == "enum":
        return {"names": list(a.values or tuple(s for s in re.split(r"[\s,]+", a.value or "") if s))}
    return {}


_MAXREPEAT = getattr(sre_parse, "MAXREPEAT", 2**32 - 1)


def _regexp_atoms(pattern: str) -> list[list[Any]] | None:
    """A regexp as a sequence of one-character atoms with repeat bounds: [ranges, negated, min,
    max (-1: unbounded)], matched whole (``fullmatch``). None when it needs more than that (the
    core then does not check it): what the AMQP XML writes (``[a-zA-Z0-9-_.:]*``) fits."""
    try:
        parsed = sre_parse.parse(pattern)
    except re.error:
        return None
    atoms: list[list[Any]] = []
    for op, av in parsed:
        lo, hi = 1, 1
        if str(op) in ("MAX_REPEAT", "MIN_REPEAT"):
            lo, hi, sub = av
            if len(sub) != 1:
                return None
            op, av = sub[0]
        cls = _char_class(str(op), av)
        if cls is None:
            return None
        ranges, neg = cls
        atoms.append([ranges, neg, lo, -1 if hi == _MAXREPEAT else hi])
    return atoms


def _char_class(op: str, av: Any) -> tuple[list[list[int]], bool] | None:
    if op == "LITERAL":
        return [[av, av]], False
    if op == "NOT_LITERAL":
        return [[av, av]], True
    if op == "ANY":
        return [[10, 10]], True  # "." is anything but a newline
    if op != "IN":
        return None
    ranges: list[list[int]] = []
    neg = False
    for sop, sav in av:
        s = str(sop)
        if s == "NEGATE":
            neg = True
        elif s == "LITERAL":
            ranges.append([sav, sav])
        elif s == "RANGE":
            ranges.append([sav[0], sav[1]])
        else:
            return None  # categories (\w, \d) are Unicode-wide in Python: not tabulated here
    return ranges, neg

"""The spec's ``<assert>`` elements compiled into per-method checks on decoded fields.

Compiled once per spec: for each method key, a tuple of (field, check) closures. A frame costs
one dict lookup when its method has no asserts (most frames: publish, deliver, ack …).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from amqpscope.dissect.spec import Assert, Field, Method, Spec

from .findings import DEVIATION, VIOLATION, WARNING

# (value, connection context) -> problem text or None
Check = Callable[[Any, dict[str, Any]], str | None]


@dataclass(frozen=True, slots=True)
class CompiledAssert:
    rule: str  # "exchange.declare.exchange.assert-regexp"
    field: str  # python identifier of the field
    severity: str
    check: Check
    label: str = ""  # the field's spec name, for messages
    code: int | None = None  # the reply code a conforming peer would answer with
    pure: bool = True  # the result depends on the value only (not on the connection's context)


def _size(value: Any) -> int:
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogateescape"))
    if isinstance(value, (bytes, bytearray, dict, list, tuple)):
        return len(value)
    return 0 if value in (None, 0, False) else 1


def _notnull(a: Assert, f: Field) -> Check:
    def check(v: Any, ctx: dict[str, Any]) -> str | None:
        if _size(v):
            return None
        return "is 0" if isinstance(v, int) and not isinstance(v, bool) else "is empty"

    return check


def _null(a: Assert, f: Field) -> Check:
    return lambda v, ctx: f"must be empty, is {v!r}" if _size(v) != 0 else None


def _length(a: Assert, f: Field) -> Check:
    limit = int(a.value or 0)
    return lambda v, ctx: f"is {_size(v)} octets long, more than {limit}" if _size(v) > limit else None


def _regexp(a: Assert, f: Field) -> Check:
    # fullmatch: "$" alone would also accept a trailing newline; a hyphen between ranges is a literal
    rx = re.compile((a.value or "").removeprefix("^").removesuffix("$"))

    def check(v: Any, ctx: dict[str, Any]) -> str | None:
        text = v if isinstance(v, str) else bytes(v or b"").decode("latin-1")
        return None if rx.fullmatch(text) else f"{text!r} does not match {a.value}"

    return check


def _ne(a: Assert, f: Field) -> Check:
    bad = a.value or ""
    return lambda v, ctx: f"must not be {bad}" if str(int(v) if isinstance(v, bool) else v) == bad else None


def _le(a: Assert, f: Field) -> Check:
    # "this field <= the same field of the peer's method": the peer value is kept per connection;
    # 0 on the bounding side means "no limit" (errata §10)
    key = f"{a.method}.{a.field or f.name}"

    def check(v: Any, ctx: dict[str, Any]) -> str | None:
        bound = ctx.get(key)
        if not isinstance(bound, int) or not isinstance(v, int) or bound == 0:
            return None
        return f"{v} is more than {bound} offered in {a.method}" if v > bound else None

    return check


def _enum(a: Assert, f: Field) -> Check:
    # 0-8's test class: <assert check="enum"><value name="add"/>…; an integer field holds the index
    names = a.values or tuple(s for s in re.split(r"[\s,]+", a.value or "") if s)

    def check(v: Any, ctx: dict[str, Any]) -> str | None:
        if not names:
            return None
        if isinstance(v, int) and not isinstance(v, bool):
            return None if 0 <= v < len(names) else f"{v} is not one of 0..{len(names) - 1} ({', '.join(names)})"
        return None if str(v) in names else f"{v!r} is not one of {', '.join(names)}"

    return check


def _syntax(a: Assert, f: Field) -> Check:
    # 0-8/0-9 `syntax rule="path"`: an absolute path of shortstr segments
    return lambda v, ctx: None if not v or str(v).startswith("/") else f"{v!r} is not a path"


_KINDS: dict[str, Callable[[Assert, Field], Check]] = {
    "notnull": _notnull, "null": _null, "length": _length, "regexp": _regexp, "ne": _ne, "le": _le,
    "enum": _enum, "syntax": _syntax,
}  # fmt: skip

# Real brokers accept what these asserts forbid, so breaking them is a deviation, not a violation:
# RabbitMQ takes any UTF-8 name up to 255 octets ("we deliberately do not enforce the other
# constraints on names"), and clients send reply-code 0 / empty text on a normal close (pika,
# AMQPStorm, py-amqp; see the shared captures).
_LENIENT = {("regexp", "domain:exchange-name"), ("regexp", "domain:queue-name"),
            ("length", "domain:exchange-name"), ("length", "domain:queue-name"),
            ("notnull", "domain:reply-code"), ("notnull", "domain:reply-text")}  # fmt: skip


def compile_asserts(spec: Spec) -> dict[int, tuple[CompiledAssert, ...]]:
    """Method key -> its compiled asserts (methods without asserts are absent)."""
    out: dict[int, tuple[CompiledAssert, ...]] = {}
    for m in spec.methods():
        checks = [c for f in m.fields for c in _field_asserts(spec, m, f)]
        if checks:
            out[m.key] = tuple(checks)
    return out


def _field_asserts(spec: Spec, m: Method, f: Field) -> list[CompiledAssert]:
    out = []
    # A field whose own <rule name="syntax"> restates its domain's length/regexp asserts
    # (exchange.declare exchange, queue.declare queue) reports them under that rule and its code.
    syntax = next((r for r in f.rules if r.name == "syntax"), None)
    for a in f.asserts:
        kind = _KINDS.get(a.check)
        if kind is None:
            continue  # an assert kind no AMQP XML uses; nothing to check
        sev = DEVIATION if (a.check, a.origin) in _LENIENT else VIOLATION
        if a.check == "ne" and f.reserved:
            sev = WARNING  # old clients send non-zero tickets; brokers ignore them
        elif a.check == "ne" and f.name == "ticket":
            sev = DEVIATION  # 0-9's access tickets: 0-9-1 dropped them, RabbitMQ and Qpid ignore them
        rule = f"{m.full_name}.{f.name}.assert-{a.check}".replace(" ", "-")  # 0-8 names have spaces
        # a field value the spec forbids: a strict peer answers syntax-error
        code = spec.constant("syntax-error") if sev != WARNING else None
        if syntax is not None and a.check in ("regexp", "length"):
            rule = f"{m.full_name}.{f.name}.syntax"
            code = spec.constant(syntax.on_failure) if syntax.on_failure else code
        out.append(CompiledAssert(rule, f.ident, sev, kind(a, f), f.name, code, a.check != "le"))
    return out

"""Display filters for event records, in the spirit of tshark's ``-Y``.

    basic.publish                         a bare method name (globs allowed: basic.*, *.close)
    method == basic.deliver and channel == 3
    args.routing_key ~ "^orders\\."       regular expression (also: matches)
    args.reply_code >= 400 or kind == gap
    conn in {1, 4} and not heartbeat
    properties.headers.x-retry             a field alone: present and truthy
    kind == finding and severity == violation

Fields are record keys; dots reach into args, properties and tables. ``==`` with ``*`` or ``?`` in
the value is a glob. A comparison with a missing field is false (``!=`` too), as in Wireshark.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from typing import Any

Record = dict[str, Any]
Predicate = Callable[[Record], bool]

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
      | (?P<op>==|!=|<=|>=|<|>|~|&&|\|\||!|\(|\)|\{|\}|,)
      | (?P<word>[A-Za-z0-9_.*?:/\-]+)
    )""",
    re.VERBOSE,
)
_WORD_OPS = {"and": "&&", "or": "||", "not": "!", "matches": "~", "contains": "contains", "in": "in", "eq": "==",
             "ne": "!="}  # fmt: skip
_BASE_KEYS = {"kind", "type", "method", "channel", "conn", "dir", "packet", "ts", "class_id", "method_id",
              "args", "properties", "body_size", "size", "rule", "severity", "code", "resync", "problem", "state",
              "version", "reason", "user", "vhost", "message"}  # fmt: skip
_MISSING = object()


class FilterError(ValueError):
    """A filter expression that does not parse; the message points at the problem."""


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise FilterError(f"filter: unexpected character {text[pos]!r} at position {pos}: {text}")
        pos = m.end()
        if m.group("str") is not None:
            raw = m.group("str")[1:-1]
            out.append(("str", re.sub(r"\\(.)", r"\1", raw)))
        elif m.group("op") is not None:
            out.append(("op", m.group("op")))
        else:
            word = m.group("word")
            op = _WORD_OPS.get(word.lower())
            out.append(("op", op) if op else ("word", word))
    return out


def lookup(rec: Record, path: str) -> Any:
    cur: Any = rec
    for part in path.split("."):
        if isinstance(cur, dict):
            if part in cur:
                cur = cur[part]
            elif part.replace("-", "_") in cur:
                cur = cur[part.replace("-", "_")]
            else:
                return _MISSING
        else:
            return _MISSING
    return cur


def _number(v: Any) -> float | None:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return None
    return None


def _equal(a: Any, b: Any) -> bool:
    if isinstance(b, str) and any(c in b for c in "*?") and isinstance(a, str):
        return fnmatch.fnmatchcase(a, b)
    na, nb = _number(a), _number(b)
    if na is not None and nb is not None:
        return na == nb
    if isinstance(a, bool) and isinstance(b, str):
        return b.lower() in (("true", "1") if a else ("false", "0"))
    return str(a) == str(b)


def _compare(op: str, a: Any, b: Any) -> bool:
    if a is _MISSING or a is None:
        return False
    if op == "==":
        return _equal(a, b)
    if op == "!=":
        return not _equal(a, b)
    if op == "~":
        return re.search(str(b), str(a)) is not None
    if op == "contains":
        if isinstance(a, (dict, list)):
            return b in a
        return str(b) in str(a)
    if op == "in":
        return any(_equal(a, x) for x in b)
    na, nb = _number(a), _number(b)
    if na is None or nb is None:
        sa, sb = str(a), str(b)
        return {"<": sa < sb, "<=": sa <= sb, ">": sa > sb, ">=": sa >= sb}[op]
    return {"<": na < nb, "<=": na <= nb, ">": na > nb, ">=": na >= nb}[op]


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> tuple[str, str] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> tuple[str, str]:
        tok = self.peek()
        if tok is None:
            raise FilterError(f"filter: unexpected end of expression: {self.text}")
        self.i += 1
        return tok

    def expect(self, op: str) -> None:
        tok = self.take()
        if tok != ("op", op):
            raise FilterError(f"filter: expected {op!r} but found {tok[1]!r}: {self.text}")

    def parse(self) -> Predicate:
        pred = self.or_()
        if self.peek() is not None:
            raise FilterError(f"filter: unexpected {self.peek()[1]!r}: {self.text}")  # type: ignore[index]
        return pred

    def or_(self) -> Predicate:
        left = self.and_()
        while self.peek() == ("op", "||"):
            self.take()
            right = self.and_()
            left = (lambda a, b: lambda r: a(r) or b(r))(left, right)
        return left

    def and_(self) -> Predicate:
        left = self.not_()
        while self.peek() == ("op", "&&"):
            self.take()
            right = self.not_()
            left = (lambda a, b: lambda r: a(r) and b(r))(left, right)
        return left

    def not_(self) -> Predicate:
        if self.peek() == ("op", "!"):
            self.take()
            inner = self.not_()
            return lambda r: not inner(r)
        return self.atom()

    def value(self) -> Any:
        kind, val = self.take()
        if kind == "op" and val == "{":
            items = [self.value()]
            while self.peek() == ("op", ","):
                self.take()
                items.append(self.value())
            self.expect("}")
            return items
        if kind == "op":
            raise FilterError(f"filter: expected a value but found {val!r}: {self.text}")
        return val

    def atom(self) -> Predicate:
        tok = self.take()
        if tok == ("op", "("):
            inner = self.or_()
            self.expect(")")
            return inner
        kind, word = tok
        if kind != "word":
            raise FilterError(f"filter: expected a field or method name but found {word!r}: {self.text}")
        nxt = self.peek()
        if nxt is not None and nxt[0] == "op" and nxt[1] in ("==", "!=", "<", "<=", ">", ">=", "~", "contains", "in"):
            op = self.take()[1]
            value = self.value()
            if op == "in" and not isinstance(value, list):
                value = [value]
            if op == "~":
                try:
                    re.compile(str(value))
                except re.error as exc:
                    raise FilterError(f"filter: bad regular expression {value!r}: {exc}") from None
            return lambda r: _compare(op, lookup(r, word), value)
        if word.split(".")[0] in _BASE_KEYS and (word in _BASE_KEYS or word.split(".")[0] in ("args", "properties")):
            return lambda r: bool(lookup(r, word)) and lookup(r, word) is not _MISSING
        # a bare word: a method name or glob, a frame type, or an event kind
        return lambda r: any(
            isinstance(v, str) and fnmatch.fnmatchcase(v, word) for v in (r.get("method"), r.get("type"), r.get("kind"))
        )


def compile_filter(text: str | None) -> Predicate | None:
    """A predicate over output records, or None for no filter."""
    if not text or not text.strip():
        return None
    return _Parser(text).parse()

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

Names are checked against the spec and the event records (:class:`Names`): a field, method, frame
type or kind that no record can have is a :class:`FilterError` naming the nearest known names, so a
typo is not a filter that silently keeps nothing.
"""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch
import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .dissect.spec import Spec

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
    """A filter expression that does not parse or names what no record has; the message points at
    the problem."""


FRAME_TYPES = ("method", "header", "body", "heartbeat", "oob-method", "oob-header", "oob-body", "trace")
_UNKNOWN_TYPE = re.compile(r"unknown-\d+$")
_METHOD_IDS = re.compile(r"\d+\.\d+$")  # "40.51": a method the spec does not know, by its ids
# fields whose values are tables: any key below them may exist
_OPEN_FIELDS = frozenset({"client_properties", "server_properties", "body"})


def _norm(name: str) -> str:
    return name.replace("-", "_")


@dataclasses.dataclass(frozen=True)
class Names:
    """What a filter may name: record fields (of every event class), the spec's method argument and
    content property names (below ``args.`` and ``properties.``), method names, frame types, kinds."""

    fields: frozenset[str]
    args: frozenset[str]
    properties: frozenset[str]
    methods: frozenset[str]
    kinds: frozenset[str]

    @classmethod
    def of(cls, spec: Spec) -> Names:
        from .events import EVENT_TYPES

        fields = {"kind"}
        for t in EVENT_TYPES:
            fields.update(f.name for f in dataclasses.fields(t) if f.metadata.get("record", True))
        fields.add("body")  # added by --body (output.records.record)
        args: set[str] = set()
        props: set[str] = set()
        for c in spec.classes:
            for m in c.methods:
                # "global" is the record's "global_": both spellings are accepted
                args.update(n for f in m.fields for n in (f.ident, f.ident.rstrip("_")))
            props.update(f.ident for f in c.properties)
        return cls(frozenset(fields), frozenset(args), frozenset(props),
                   frozenset(m.full_name for m in spec.methods()),
                   frozenset(t.kind for t in EVENT_TYPES))  # type: ignore[attr-defined]  # fmt: skip

    def field_paths(self) -> list[str]:
        return sorted(self.fields | {f"args.{a}" for a in self.args} | {f"properties.{p}" for p in self.properties})

    def is_field(self, path: str) -> bool:
        parts = _norm(path).split(".")
        root = parts[0]
        if root not in self.fields:
            return False
        if len(parts) == 1 or root in _OPEN_FIELDS:
            return True
        if root == "args":
            return parts[1] in self.args  # deeper: a table argument's own keys
        if root == "properties":
            return parts[1] in self.properties  # deeper: headers' keys
        return False

    def is_name(self, word: str) -> bool:
        """Whether a bare word (or glob) can match a method name, a frame type or a kind."""
        known = self.bare_names()
        if any(c in word for c in "*?["):
            return any(fnmatch.fnmatchcase(n, word) for n in known)
        return word in known or bool(_UNKNOWN_TYPE.match(word) or _METHOD_IDS.match(word))

    def is_value(self, field: str, value: str) -> bool:
        """Whether ``field == value`` can hold, for the fields whose values are names."""
        known = {"method": self.methods, "kind": self.kinds, "type": frozenset(FRAME_TYPES)}.get(field)
        if known is None:
            return True
        if any(c in value for c in "*?["):
            return any(fnmatch.fnmatchcase(n, value) for n in known)
        return value in known or bool(_UNKNOWN_TYPE.match(value) or _METHOD_IDS.match(value))

    def bare_names(self) -> frozenset[str]:
        return self.methods | frozenset(FRAME_TYPES) | self.kinds

    @staticmethod
    def nearest(word: str, candidates: Iterable[str]) -> list[str]:
        return difflib.get_close_matches(word, sorted(set(candidates)), n=3, cutoff=0.6)


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
            elif part + "_" in cur:  # "global": the record's "global_" (a Python keyword)
                cur = cur[part + "_"]
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
    def __init__(self, text: str, names: Names | None = None) -> None:
        self.text = text
        self.names = names
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
            self.check_field(word)
            if op in ("==", "!=", "in"):
                for v in value if isinstance(value, list) else [value]:
                    self.check_value(word, v)
            if op == "~":
                try:
                    re.compile(str(value))
                except re.error as exc:
                    raise FilterError(f"filter: bad regular expression {value!r}: {exc}") from None
            return lambda r: _compare(op, lookup(r, word), value)
        if word.split(".")[0] in _BASE_KEYS and (word in _BASE_KEYS or word.split(".")[0] in ("args", "properties")):
            self.check_field(word)
            return lambda r: bool(lookup(r, word)) and lookup(r, word) is not _MISSING
        names = self.names
        if names is not None and not names.is_name(word) and names.is_field(word):
            # a field of some record alone (decrypted, client_properties.product): present and truthy
            return lambda r: bool(lookup(r, word)) and lookup(r, word) is not _MISSING
        # a bare word: a method name or glob, a frame type, or an event kind
        self.check_bare(word)
        return lambda r: any(
            isinstance(v, str) and fnmatch.fnmatchcase(v, word) for v in (r.get("method"), r.get("type"), r.get("kind"))
        )


    def check_field(self, path: str) -> None:
        names = self.names
        if names is None or names.is_field(path):
            return
        near = names.nearest(_norm(path), names.field_paths())
        if not near and "." not in path:  # a bare name meant as a method, say 'basic.publishh' == …
            near = names.nearest(path, names.bare_names())
        raise FilterError(f"filter: unknown field {path!r}" + _hint(near, "kind, method, channel, conn, args.NAME, "
                                                                    "properties.NAME; see docs/decode.md") + f": {self.text}")

    def check_bare(self, word: str) -> None:
        names = self.names
        if names is None or names.is_name(word):
            return
        near = names.nearest(word, names.bare_names() | names.fields)
        raise FilterError(f"filter: unknown method, frame type or field {word!r}"
                          + (_hint(near, "") or " (a method such as basic.publish, a frame type such as heartbeat, "
                                                "or a kind such as message)") + f": {self.text}")  # fmt: skip

    def check_value(self, field: str, value: Any) -> None:
        names = self.names
        key = _norm(field)
        if names is None or not isinstance(value, str) or names.is_value(key, value):
            return
        known = {"method": names.methods, "kind": names.kinds, "type": frozenset(FRAME_TYPES)}[key]
        raise FilterError(f"filter: no record has {field} {value!r}" + _hint(names.nearest(value, known), "")
                          + f": {self.text}")  # fmt: skip


def _hint(near: list[str], fallback: str) -> str:
    if near:
        return f" (did you mean {' or '.join(near)}?)"
    return f" (known fields: {fallback})" if fallback else ""


def compile_filter(text: str | None, spec: Spec | None = None) -> Predicate | None:
    """A predicate over output records, or None for no filter. Names are checked against ``spec``
    (default: the shipped one) and the event records: an unknown one is a FilterError."""
    if not text or not text.strip():
        return None
    if spec is None:
        from .dissect.spec import default_spec

        spec = default_spec()
    return _Parser(text, _names(spec)).parse()


_NAMES: dict[int, tuple[Spec, Names]] = {}  # the spec is kept so that its id is not reused


def _names(spec: Spec) -> Names:
    hit = _NAMES.get(id(spec))
    if hit is None:
        hit = _NAMES[id(spec)] = (spec, Names.of(spec))
    return hit[1]

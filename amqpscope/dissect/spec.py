"""Load an AMQP 0-8/0-9/0-9-1 specification XML into an immutable model.

The spec file is the source of truth for everything the dissector knows: classes, methods, fields,
domains, content properties, constants, chassis, responses, asserts, rules and grammars. The
codec compiler and the validator read this model; nothing else parses the XML.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from xml.parsers import expat

# their home is specfiles.py (a cached start needs no model); the model's users import them from here too
from .specfiles import DEFAULT_SPEC as DEFAULT_SPEC
from .specfiles import SpecError as SpecError
from .specfiles import bundled_spec_path as bundled_spec_path

PRIMITIVE_TYPES = frozenset(
    {"bit", "octet", "short", "long", "longlong", "shortstr", "longstr", "timestamp", "table", "content"}
)


# --- the model ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Assert:
    check: str  # notnull, length, regexp, le, ne, syntax, null, enum …
    value: str | None = None
    method: str | None = None  # for "le": the method whose field bounds this one
    field: str | None = None
    origin: str = "field"  # "field" or "domain:<name>"
    values: tuple[str, ...] = ()  # "enum": the <value name=…> children, in order


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    on_failure: str | None
    text: str
    scope: str  # e.g. "basic.ack.multiple" or "domain:delivery-tag"


@dataclass(frozen=True, slots=True)
class Chassis:
    name: str  # "client" | "server"
    implement: str  # "MUST" | "SHOULD" | "MAY"


@dataclass(frozen=True, slots=True)
class Constant:
    name: str
    value: int
    cls: str | None  # "soft-error" | "hard-error" | None


@dataclass(frozen=True, slots=True)
class Domain:
    name: str
    type: str  # primitive type after resolution
    label: str = ""
    asserts: tuple[Assert, ...] = ()
    rules: tuple[Rule, ...] = ()


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    domain: str  # the domain named in the XML, or the primitive type when given as type=
    type: str  # primitive type after resolving domains
    reserved: bool = False
    label: str = ""
    asserts: tuple[Assert, ...] = ()  # the field's own asserts followed by its domain's
    rules: tuple[Rule, ...] = ()

    @property
    def ident(self) -> str:
        """The field name as a Python identifier (``routing-key`` → ``routing_key``)."""
        return python_name(self.name)


@dataclass(frozen=True, slots=True)
class Method:
    name: str
    index: int
    class_name: str
    class_index: int
    label: str = ""
    synchronous: bool = False
    content: bool = False
    responses: tuple[str, ...] = ()
    chassis: tuple[Chassis, ...] = ()
    fields: tuple[Field, ...] = ()
    rules: tuple[Rule, ...] = ()
    doc: str = ""

    @property
    def full_name(self) -> str:
        return f"{self.class_name}.{self.name}"

    @property
    def key(self) -> int:
        return (self.class_index << 16) | self.index

    def sent_by(self) -> frozenset[str]:
        """Who may send this method: the peer opposite to each chassis that implements it."""
        return frozenset("client" if c.name == "server" else "server" for c in self.chassis)


@dataclass(frozen=True, slots=True)
class AmqpClass:
    name: str
    index: int
    label: str = ""
    handler: str = ""
    chassis: tuple[Chassis, ...] = ()
    methods: tuple[Method, ...] = ()
    properties: tuple[Field, ...] = ()  # content header properties, in flag order
    rules: tuple[Rule, ...] = ()
    grammar: str | None = None
    doc: str = ""

    def method(self, name: str) -> Method:
        for m in self.methods:
            if m.name == name:
                return m
        raise KeyError(f"{self.name}.{name}")


@dataclass(frozen=True, slots=True)
class Spec:
    major: int
    minor: int
    revision: int
    port: int
    source: str  # where it was loaded from, for messages
    constants: dict[str, Constant] = field(default_factory=dict)
    domains: dict[str, Domain] = field(default_factory=dict)
    classes: tuple[AmqpClass, ...] = ()

    @property
    def version(self) -> str:
        if self.major == 8 and self.minor == 0:
            return "0-8"  # the 0-8 XML writes major=8 minor=0
        return f"{self.major}-{self.minor}" + (f"-{self.revision}" if self.revision else "")

    def methods(self) -> Iterator[Method]:
        for c in self.classes:
            yield from c.methods

    def find_class(self, name_or_index: str | int) -> AmqpClass:
        for c in self.classes:
            if c.name == name_or_index or c.index == name_or_index:
                return c
        raise KeyError(name_or_index)

    def find_method(self, name: str) -> Method:
        cls, _, meth = name.partition(".")
        return self.find_class(cls).method(meth)

    def method_by_ids(self) -> dict[tuple[int, int], Method]:
        return {(m.class_index, m.index): m for m in self.methods()}

    def constant(self, name: str, default: int | None = None) -> int | None:
        c = self.constants.get(name)
        return c.value if c else default

    def reply_code_name(self, code: int) -> str | None:
        for c in self.constants.values():
            if c.value == code and (c.cls or c.name.startswith("reply-")):
                return c.name
        return None


def python_name(name: str) -> str:
    """A spec name as a Python identifier: ``routing-key`` → ``routing_key``, ``global`` → ``global_``."""
    ident = re.sub(r"[^0-9a-zA-Z_]", "_", name.strip())
    if ident[:1].isdigit():
        ident = "_" + ident
    return ident + "_" if keyword.iskeyword(ident) else ident


# --- a tiny element tree that remembers line numbers ---------------------------------------------


@dataclass(slots=True)
class _Node:
    tag: str
    attrs: dict[str, str]
    line: int
    children: list[_Node] = field(default_factory=list)
    text: list[str] = field(default_factory=list)

    def all(self, tag: str) -> list[_Node]:
        return [c for c in self.children if c.tag == tag]

    def doc_text(self, kind: str | None = None) -> str:
        parts = []
        for d in self.all("doc"):
            if d.attrs.get("type") == kind:
                parts.append(_collapse("".join(d.text)) if kind != "grammar" else _dedent("".join(d.text)))
        return "\n".join(parts)


def _collapse(text: str) -> str:
    return " ".join(text.split())


def _dedent(text: str) -> str:
    lines = [ln.rstrip() for ln in text.strip("\n").splitlines()]
    indents = [len(ln) - len(ln.lstrip()) for ln in lines if ln.strip()]
    cut = min(indents, default=0)
    return "\n".join(ln[cut:] for ln in lines).strip("\n")


def _parse_xml(data: bytes, source: str) -> _Node:
    parser = expat.ParserCreate()
    stack: list[_Node] = []
    root: list[_Node] = []

    def start(tag: str, attrs: dict[str, str]) -> None:
        node = _Node(tag, {k: v.strip() for k, v in attrs.items()}, parser.CurrentLineNumber)
        if stack:
            stack[-1].children.append(node)
        else:
            root.append(node)
        stack.append(node)

    def end(tag: str) -> None:
        stack.pop()

    def chars(text: str) -> None:
        if stack:
            stack[-1].text.append(text)

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = chars
    try:
        parser.Parse(data, True)
    except expat.ExpatError as exc:
        inside = f" inside <{stack[-1].tag}> opened at line {stack[-1].line}" if stack else ""
        raise SpecError(f"{source}:{exc.lineno}: not well-formed XML ({expat.ErrorString(exc.code)}){inside}") from None
    return root[0]


# --- building the model --------------------------------------------------------------------------


class _Builder:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, node: _Node, message: str) -> SpecError:
        return SpecError(f"{self.source}:{node.line}: <{node.tag}> {message}")

    def attr(self, node: _Node, name: str) -> str:
        value = node.attrs.get(name)
        if value is None or value == "":
            raise self.fail(node, f"has no '{name}' attribute")
        return value

    def int_attr(self, node: _Node, name: str, default: int | None = None) -> int:
        raw = node.attrs.get(name)
        if raw is None and default is not None:
            return default
        if raw is None:
            raise self.fail(node, f"has no '{name}' attribute")
        try:
            return int(raw, 0)
        except ValueError:
            raise self.fail(node, f"attribute {name}={raw!r} is not an integer") from None

    def rules(self, node: _Node, scope: str) -> tuple[Rule, ...]:
        out = []
        for r in node.all("rule"):
            out.append(
                Rule(
                    name=r.attrs.get("name", ""),
                    on_failure=r.attrs.get("on-failure") or None,
                    text=r.doc_text(),
                    scope=scope,
                )
            )
        return tuple(out)

    def asserts(self, node: _Node, origin: str) -> tuple[Assert, ...]:
        return tuple(
            Assert(
                check=self.attr(a, "check"),
                value=a.attrs.get("value"),
                method=a.attrs.get("method"),
                field=a.attrs.get("field"),
                origin=origin,
                values=tuple(v.attrs.get("name", "") for v in a.all("value")),
            )
            for a in node.all("assert")
        )

    def chassis(self, node: _Node) -> tuple[Chassis, ...]:
        return tuple(Chassis(self.attr(c, "name"), c.attrs.get("implement", "MAY")) for c in node.all("chassis"))

    def domains(self, root: _Node) -> dict[str, Domain]:
        raw = {self.attr(d, "name"): d for d in root.all("domain")}
        resolved: dict[str, Domain] = {}

        def resolve(name: str, seen: tuple[str, ...]) -> Domain:
            if name in resolved:
                return resolved[name]
            node = raw[name]
            base = self.attr(node, "type")
            inherited: tuple[Assert, ...]
            if base in PRIMITIVE_TYPES:
                typ, inherited = base, ()
            elif base in raw and base not in seen:
                parent = resolve(base, (*seen, name))
                typ, inherited = parent.type, parent.asserts
            else:
                raise self.fail(node, f"name={name!r} has unknown type {base!r}")
            dom = Domain(
                name=name,
                type=typ,
                label=node.attrs.get("label", ""),
                asserts=self.asserts(node, f"domain:{name}") + inherited,
                rules=self.rules(node, f"domain:{name}"),
            )
            resolved[name] = dom
            return dom

        for name in raw:
            resolve(name, ())
        return resolved

    def field(self, node: _Node, domains: dict[str, Domain], scope: str) -> Field:
        name = self.attr(node, "name")
        dom_name = node.attrs.get("domain") or node.attrs.get("type")
        if not dom_name:
            raise self.fail(node, f"name={name!r} has neither 'domain' nor 'type'")
        if dom_name in domains:
            dom = domains[dom_name]
            typ, dom_asserts = dom.type, dom.asserts
        elif dom_name in PRIMITIVE_TYPES:
            typ, dom_asserts = dom_name, ()
        else:
            raise self.fail(node, f"name={name!r} refers to unknown domain {dom_name!r}")
        return Field(
            name=name,
            domain=dom_name,
            type=typ,
            reserved=node.attrs.get("reserved") == "1",
            label=node.attrs.get("label", ""),
            asserts=self.asserts(node, "field") + dom_asserts,
            rules=self.rules(node, f"{scope}.{name}"),
        )

    def method(self, node: _Node, cls_name: str, cls_index: int, domains: dict[str, Domain]) -> Method:
        name = self.attr(node, "name")
        scope = f"{cls_name}.{name}"
        return Method(
            name=name,
            index=self.int_attr(node, "index"),
            class_name=cls_name,
            class_index=cls_index,
            label=node.attrs.get("label", ""),
            synchronous=node.attrs.get("synchronous") == "1",
            content=node.attrs.get("content") == "1",
            responses=tuple(self.attr(r, "name") for r in node.all("response")),
            chassis=self.chassis(node),
            fields=tuple(self.field(f, domains, scope) for f in node.all("field")),
            rules=self.rules(node, scope),
            doc=node.doc_text(),
        )

    def amqp_class(self, node: _Node, domains: dict[str, Domain]) -> AmqpClass:
        name = self.attr(node, "name")
        index = self.int_attr(node, "index")
        methods = tuple(self.method(m, name, index, domains) for m in node.all("method"))
        seen: dict[int, str] = {}
        for m, mnode in zip(methods, node.all("method"), strict=True):
            if m.index in seen:
                raise self.fail(mnode, f"name={m.name!r} reuses index {m.index} of {seen[m.index]!r}")
            seen[m.index] = m.name
        grammar = node.doc_text("grammar") or None
        return AmqpClass(
            name=name,
            index=index,
            label=node.attrs.get("label", ""),
            handler=node.attrs.get("handler", ""),
            chassis=self.chassis(node),
            methods=methods,
            properties=tuple(self.field(f, domains, f"{name}.properties") for f in node.all("field")),
            rules=self.rules(node, name),
            grammar=grammar,
            doc=node.doc_text(),
        )

    def spec(self, root: _Node) -> Spec:
        if root.tag != "amqp":
            raise self.fail(root, "is not an AMQP spec (root element must be <amqp>)")
        constants = {}
        for c in root.all("constant"):
            cname = self.attr(c, "name")
            constants[cname] = Constant(cname, self.int_attr(c, "value"), c.attrs.get("class"))
        domains = self.domains(root)
        classes = tuple(self.amqp_class(c, domains) for c in root.all("class"))
        if not classes:
            raise self.fail(root, "defines no <class>")
        return Spec(
            major=self.int_attr(root, "major"),
            minor=self.int_attr(root, "minor"),
            revision=self.int_attr(root, "revision", 0),
            port=self.int_attr(root, "port", 5672),
            source=self.source,
            constants=constants,
            domains=domains,
            classes=classes,
        )


def load_spec(path: str | Path) -> Spec:
    """Load a spec XML file; raises SpecError with file, line and element on any problem."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise SpecError(f"cannot read spec file '{p}': {exc.strerror or exc}") from None
    return parse_spec(data, str(p))


def parse_spec(data: bytes, source: str = "<spec>") -> Spec:
    builder = _Builder(source)
    return builder.spec(_parse_xml(data, source))


@cache
def default_spec() -> Spec:
    """The shipped AMQP 0-9-1 spec with RabbitMQ's extensions."""
    return load_spec(bundled_spec_path())

"""Compile a spec model into Python source for fast method and property decoders and encoders.

One function per method and one per content class, straight-line code with precompiled structs:
runs of fixed-width fields and packed bits are read with a single ``unpack_from``. The shipped specs
are compiled ahead of time into ``amqpscope/dissect/generated/`` (a test checks those files are
fresh); any other spec given with ``--spec`` is compiled the same way at run time.

    python tools/generate_codecs.py               # regenerate the shipped modules
    python -m amqpscope.dissect.compiler          # the same
"""

from __future__ import annotations

import hashlib
import struct
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from .spec import Field, Spec, bundled_spec_path, load_spec
from .values import Timestamp, Truncated, table_body

# spec file name -> generated module name, for the specs the package ships
SHIPPED = {"amqp0-9-1.xml": "amqp0_9_1", "amqp0-9.xml": "amqp0_9"}

_FIXED = {"octet": "B", "short": "H", "long": "I", "longlong": "Q", "timestamp": "Q"}
_DEFAULTS = {
    "bit": "False", "octet": "0", "short": "0", "long": "0", "longlong": "0", "timestamp": "0",
    "shortstr": "''", "longstr": "''", "content": "''", "table": "None",
}  # fmt: skip


@dataclass
class _Fixed:
    """A run of fixed-width fields and bit octets read or written with one struct."""

    items: list[tuple[str, list[Field]]]  # (struct code, fields): bits share one "B" item

    @property
    def fmt(self) -> str:
        return ">" + "".join(code for code, _ in self.items)


def _groups(fields: tuple[Field, ...]) -> Iterator[_Fixed | Field]:
    run: list[tuple[str, list[Field]]] = []
    for f in fields:
        if f.type == "bit":
            last = run[-1] if run else None
            if last and last[0] == "B" and last[1] and last[1][0].type == "bit" and len(last[1]) < 8:
                last[1].append(f)
            else:
                run.append(("B", [f]))
        elif f.type in _FIXED:
            run.append((_FIXED[f.type], [f]))
        else:
            if run:
                yield _Fixed(run)
                run = []
            yield f
    if run:
        yield _Fixed(run)


class _Source:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.structs: dict[str, str] = {}

    def struct(self, fmt: str) -> str:
        if fmt not in self.structs:
            self.structs[fmt] = f"_S{len(self.structs)}"
        return self.structs[fmt]

    def add(self, line: str = "", indent: int = 0) -> None:
        self.lines.append("    " * indent + line)


def _var(f: Field) -> str:
    return "v_" + f.ident


def _emit_decode_fields(src: _Source, fields: tuple[Field, ...], indent: int) -> None:
    for g in _groups(fields):
        if isinstance(g, _Fixed):
            names = []
            for code, fs in g.items:
                names.append(f"b_{fs[0].ident}" if code == "B" and fs[0].type == "bit" else _var(fs[0]))
            if g.fmt == ">B":  # a lone octet (or bit octet): indexing is cheaper than a struct call
                src.add(f"{names[0]} = p[o]", indent)
                src.add("o += 1", indent)
            else:
                target = ", ".join(names) + ("," if len(names) == 1 else "")
                src.add(f"{target} = {src.struct(g.fmt)}.unpack_from(p, o)", indent)
                src.add(f"o += {struct.calcsize(g.fmt)}", indent)
            for _code, fs in g.items:
                if fs[0].type == "bit":
                    for bit, f in enumerate(fs):
                        src.add(f"{_var(f)} = (b_{fs[0].ident} & {1 << bit}) != 0", indent)
                elif fs[0].type == "timestamp":
                    src.add(f"{_var(fs[0])} = Timestamp({_var(fs[0])})", indent)
        elif g.type in ("shortstr", "longstr", "content"):
            # text decoded inline (no call per string); invalid UTF-8 stays the bytes seen
            if g.type == "shortstr":
                src.add("n = p[o] + o + 1", indent)
                src.add(f"{_var(g)} = p[o + 1:n]", indent)
            else:
                src.add("n = _U32(p, o)[0] + o + 4", indent)
                src.add(f"{_var(g)} = p[o + 4:n]", indent)
            src.add("o = n", indent)
            src.add("try:", indent)
            src.add(f"{_var(g)} = {_var(g)}.decode()", indent + 1)
            src.add("except UnicodeDecodeError:", indent)
            src.add("pass", indent + 1)
        elif g.type == "table":
            # framed here, not in a decode_table call: one Python call less per table
            src.add("n = _U32(p, o)[0] + o + 4", indent)
            src.add("if n > len(p):", indent)
            src.add("raise Truncated(f'field table of {n - o - 4} bytes runs past the end')", indent + 1)
            src.add(f"{_var(g)} = table_body(p, o + 4, n, 0)", indent)
            src.add("o = n", indent)
        else:  # pragma: no cover - the loader only admits known types
            raise ValueError(f"cannot compile field type {g.type!r}")


def _emit_encode_fields(src: _Source, fields: tuple[Field, ...], indent: int) -> None:
    for g in _groups(fields):
        if isinstance(g, _Fixed):
            values = []
            for _code, fs in g.items:
                if fs[0].type == "bit":
                    bits = " | ".join(
                        f"({1 << i} if a.get({f.ident!r}) else 0)" for i, f in enumerate(fs)
                    )
                    values.append(f"({bits})")
                else:
                    values.append(f"int(a.get({fs[0].ident!r}) or 0)")
            src.add(f"out.append({src.struct(g.fmt)}.pack({', '.join(values)}))", indent)
        elif g.type == "shortstr":
            src.add(f"out.append(enc_shortstr(a.get({g.ident!r}) or ''))", indent)
        elif g.type in ("longstr", "content"):
            src.add(f"out.append(enc_longstr(a.get({g.ident!r}) or ''))", indent)
        elif g.type == "table":
            src.add(f"out.append(encode_table(a.get({g.ident!r})))", indent)


def _emit_properties(src: _Source, cls_index: int, props: tuple[Field, ...]) -> None:
    # Decoder: one flag test per property, flag words in order (15 properties per word).
    src.add(f"def dp_{cls_index}(p, o, words):")
    src.add("d = {}", 1)
    src.add("w0 = words[0]", 1)
    for w in range(1, (len(props) + 14) // 15):
        src.add(f"w{w} = words[{w}] if len(words) > {w} else 0", 1)
    for i, f in enumerate(props):
        word, bit = divmod(i, 15)
        src.add(f"if w{word} & {1 << (15 - bit)}:", 1)
        if f.type == "bit":
            src.add(f"d[{f.ident!r}] = True", 2)
            continue
        _emit_decode_fields(src, (f,), 2)
        src.add(f"d[{f.ident!r}] = {_var(f)}", 2)
    src.add("return d, o", 1)
    src.add()
    src.add()
    src.add(f"def ep_{cls_index}(a):")
    src.add("words = [0]", 1)
    src.add("out = []", 1)
    for i, f in enumerate(props):
        word, bit = divmod(i, 15)
        mask = 1 << (15 - bit)
        src.add(f"if a.get({f.ident!r}) is not None:", 1)
        if word > 0:
            src.add(f"while len(words) <= {word}:", 2)
            src.add("words[-1] |= 1", 3)
            src.add("words.append(0)", 3)
        src.add(f"words[{word}] |= {mask}", 2)
        if f.type != "bit":
            _emit_encode_fields(src, (f,), 2)
    src.add("return b''.join(_U16P(w) for w in words) + b''.join(out)", 1)
    src.add()
    src.add()


def generate_source(spec: Spec, origin: str) -> str:
    """Python source of the decoders and encoders for every method and content class of ``spec``."""
    body = _Source()
    decoders, encoders, pdec, penc = [], [], [], []
    for cls in spec.classes:
        for m in cls.methods:
            name = f"{cls.index}_{m.index}"
            body.add(f"def d_{name}(p, o):")
            body.add(f'"""{m.full_name}"""', 1)
            _emit_decode_fields(body, m.fields, 1)
            pairs = ", ".join(f"{f.ident!r}: {_var(f)}" for f in m.fields)
            body.add(f"return {{{pairs}}}, o", 1)
            body.add()
            body.add()
            body.add(f"def e_{name}(a):")
            body.add("out = []", 1)
            _emit_encode_fields(body, m.fields, 1)
            body.add("return b''.join(out)", 1)
            body.add()
            body.add()
            decoders.append(f"    0x{m.key:08X}: d_{name},  # {m.full_name}")
            encoders.append(f"    0x{m.key:08X}: e_{name},")
        if cls.properties:
            _emit_properties(body, cls.index, cls.properties)
            pdec.append(f"    {cls.index}: dp_{cls.index},  # {cls.name}")
            penc.append(f"    {cls.index}: ep_{cls.index},")

    head = [
        f"# Generated by amqpscope.dissect.compiler from {origin} — do not edit.",
        "# Regenerate with: python tools/generate_codecs.py (or python -m amqpscope.dissect.compiler)",
        f"# spec-sha256: {spec_digest(spec)}",
        "# ruff: noqa",
        "# mypy: ignore-errors",
        "import struct",
        "",
        "from amqpscope.dissect.values import Timestamp, Truncated, encode_table, table_body",
        "from amqpscope.dissect.wire import enc_longstr, enc_shortstr",
        "",
        f"SPEC_DIGEST = {spec_digest(spec)!r}",
        "_U32 = struct.Struct('>I').unpack_from",
        "_U16P = struct.Struct('>H').pack",
    ]
    head += [f"{var} = struct.Struct({fmt!r})" for fmt, var in body.structs.items()]
    tail = ["METHOD_DECODERS = {", *decoders, "}", "METHOD_ENCODERS = {", *encoders, "}"]
    tail += ["PROPERTY_DECODERS = {", *pdec, "}", "PROPERTY_ENCODERS = {", *penc, "}"]
    return "\n".join([*head, "", "", *body.lines, *tail, ""])


def spec_digest(spec: Spec) -> str:
    """A digest of what the generated code depends on: ids, field names and types."""
    h = hashlib.sha256()
    for cls in spec.classes:
        h.update(f"C{cls.index}:{cls.name};".encode())
        for m in cls.methods:
            h.update(f"M{m.index}:{m.name}:{','.join(f.ident + '=' + f.type for f in m.fields)};".encode())
        h.update(f"P:{','.join(f.ident + '=' + f.type for f in cls.properties)};".encode())
    return h.hexdigest()


def compile_module(spec: Spec, origin: str) -> ModuleType:
    """Compile ``spec`` at run time (for ``--spec FILE``) into a module like the generated ones."""
    module = ModuleType(f"amqpscope.dissect.generated._runtime_{spec_digest(spec)[:12]}")
    exec(compile(generate_source(spec, origin), f"<generated from {origin}>", "exec"), module.__dict__)
    return module


def flag_decoder(props: tuple[Field, ...], word: int) -> Callable[[bytes, int], tuple[dict[str, Any], int]]:
    """A straight-line decoder for exactly the properties one flag word announces.

    Real traffic uses a handful of flag combinations, so the codec compiles one of these per
    combination it meets: no test per undefined or absent property, fixed-width neighbours read
    with one struct. ``word`` must not have the continuation bit or bits beyond ``props``.
    """
    present = tuple(f for i, f in enumerate(props) if i < 15 and word & (1 << (15 - i)))
    src = _Source()
    src.add("def decode(p, o):")
    # bit properties are flags only: present means True and they take no bytes
    _emit_decode_fields(src, tuple(f for f in present if f.type != "bit"), 1)
    pairs = ", ".join(f"{f.ident!r}: {'True' if f.type == 'bit' else _var(f)}" for f in present)
    src.add(f"return {{{pairs}}}, o", 1)
    namespace: dict[str, Any] = {
        "struct": struct, "Timestamp": Timestamp, "Truncated": Truncated, "table_body": table_body,
        "_U32": struct.Struct(">I").unpack_from,
    }  # fmt: skip
    namespace.update({var: struct.Struct(fmt) for fmt, var in src.structs.items()})
    exec(compile("\n".join(src.lines), f"<properties 0x{word:04x}>", "exec"), namespace)
    return namespace["decode"]  # type: ignore[no-any-return]


def generated_path(spec_name: str) -> Path:
    return Path(__file__).parent / "generated" / f"{SHIPPED[spec_name]}.py"


def main(argv: list[str] | None = None) -> int:
    """Regenerate the shipped modules (or write them to ``--out DIR`` to compare)."""
    import argparse

    ap = argparse.ArgumentParser(prog="generate_codecs", description="Compile the shipped spec XML into Python codecs.")
    ap.add_argument("--out", type=Path, default=None, help="write here instead of amqpscope/dissect/generated/")
    opts = ap.parse_args(argv)
    for spec_name in SHIPPED:
        spec = load_spec(bundled_spec_path(spec_name))
        path = generated_path(spec_name) if opts.out is None else opts.out / generated_path(spec_name).name
        path.write_text(generate_source(spec, f"specs/{spec_name}"))
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

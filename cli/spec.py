"""``amqpscope spec``: print the loaded spec, as a table or as JSON."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from amqpscope.dissect.spec import Field, Spec

from .common import FormatChoice, load_codec, run_guarded, spec_option


def _field(f: Field) -> dict[str, Any]:
    out: dict[str, Any] = {"name": f.name, "domain": f.domain, "type": f.type}
    if f.reserved:
        out["reserved"] = True
    if f.asserts:
        out["asserts"] = [{k: v for k, v in (("check", a.check), ("value", a.value), ("method", a.method),
                                               ("field", a.field)) if v is not None} for a in f.asserts]  # fmt: skip
    return out


def spec_to_json(spec: Spec) -> dict[str, Any]:
    classes = []
    properties = []
    for c in spec.classes:
        methods = [
            {
                "name": m.name, "id": m.index, "synchronous": m.synchronous, "content": m.content,
                "responses": list(m.responses), "chassis": [ch.name for ch in m.chassis],
                "fields": [_field(f) for f in m.fields],
                "rules": [{"name": r.name, "on_failure": r.on_failure} for r in m.rules],
            }
            for m in c.methods
        ]
        classes.append({"name": c.name, "id": c.index, "chassis": [ch.name for ch in c.chassis], "methods": methods,
                        "properties": [_field(f) for f in c.properties], "grammar": c.grammar})  # fmt: skip
        properties += [dict(_field(f), **{"class": c.name}) for f in c.properties]
    return {
        "version": spec.version,
        "source": spec.source,
        "classes": classes,
        "properties": properties,
        "constants": {n: c.value for n, c in spec.constants.items()},
        "domains": {n: {"type": d.type} for n, d in spec.domains.items()},
    }


@click.command("spec")
@spec_option
@click.option("-T", "--format", "fmt", type=FormatChoice(["text", "json"], old={"table": "text", "rich": "text"}),
              default="text", show_default=True, help="text: a table of the methods; json: the whole spec.")
def spec(spec: str | None, fmt: str) -> None:
    """Print the AMQP spec the dissector is built from."""

    def body() -> int:
        model = load_codec(spec).spec
        if fmt == "json":
            click.echo(json.dumps(spec_to_json(model), indent=2))
            return 0
        console = Console()
        if not console.is_terminal:
            console = Console(width=400)  # piped: keep each method on one row instead of wrapping at 80 columns
        table = Table(title=f"AMQP {model.version} ({model.source})")
        for col in ("class.method", "ids", "sync", "content", "responses", "sent by", "fields"):
            table.add_column(col)
        for m in model.methods():
            table.add_row(
                m.full_name, f"{m.class_index}/{m.index}", "yes" if m.synchronous else "", "yes" if m.content else "",
                ", ".join(m.responses), ", ".join(sorted(m.sent_by())),
                ", ".join(f"{f.name}:{f.type}" for f in m.fields),
            )  # fmt: skip
        console.print(table)
        return 0

    run_guarded(body)

"""Compare amqpscope's own spec XML files with the reference spec files in ../shared.

The project's files (``amqpscope/dissect/specs``) are assembled from the seeds by
``tools/assemble_spec.py``; the reference files in ``shared/specs`` are only *read* here,
at test time.  Every difference must either be zero or be listed in ``DELIBERATE`` with a
reason, and every entry of ``DELIBERATE`` must still occur (so the list stays honest).
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from amqpscope.dissect.spec import Spec, load_spec

PROJECT = Path(__file__).resolve().parents[1]
SHARED = Path(__file__).resolve().parents[2] / "shared"
SPECS = SHARED / "specs"
OWN_091 = PROJECT / "amqpscope" / "dissect" / "specs" / "amqp0-9-1.xml"
OWN_09 = PROJECT / "amqpscope" / "dissect" / "specs" / "amqp0-9.xml"
REF_091 = SPECS / "amqp0-9-1.extended.xml"
REF_09 = SPECS / "amqp0-9.xml"
REF_JSON = SPECS / "amqp-rabbitmq-0.9.1.json"
REF_CREDIT = SPECS / "credit_extension.json"
CHECKLIST = SHARED / "reference" / "validation-checklist.md"

needs_shared = pytest.mark.skipif(
    not SPECS.is_dir(),
    reason=f"reference spec files not available ({SPECS} is absent): shared/ is not checked out",
)

CLASSES_091 = ("connection", "channel", "exchange", "queue", "basic", "tx", "confirm")

# Differences between the project's amqp0-9-1.xml and amqp0-9-1.extended.xml.
DELIBERATE_XML: dict[str, str] = {
    "connection.update-secret chassis: own (('server', 'MUST'),) != ref (('client', 'MUST'),)": (
        "RabbitMQ receives update-secret from the client and answers update-secret-ok; the "
        "canonical XML has the chassis backwards (seeds-vs-spec.md 5.4)"
    ),
    "connection.update-secret-ok chassis: own (('client', 'MUST'),) != ref (('server', 'MUST'),)": (
        "same as update-secret: the reply goes from server to client"
    ),
}

# Differences between the project's amqp0-9-1.xml and RabbitMQ's codegen JSON.
DELIBERATE_JSON: dict[str, str] = {
    "class access (30) only in json": (
        "RabbitMQ's JSON keeps the 0-8/0-9 access class (request/request-ok) for old clients; "
        "it is not part of 0-9-1 (the dissector decodes it from the 0-9 spec)"
    ),
    "basic.credit (60/200) only in json": "broker-internal credit extension, not on the network",
    "basic.credit-ok (60/201) only in json": "broker-internal credit extension, not on the network",
    "basic.credit-drained (60/202) only in json": "broker-internal credit extension, not on the network",
    "constant frame-min-size: own 4096 != json 8192": (
        "RabbitMQ >= 4.1 raised its frame-min-size to 8192; the protocol value is 4096"
    ),
    "basic.recover synchronous: own False != json True": (
        "XML erratum kept as in the spec (no synchronous/response on recover); recover -> "
        "recover-ok is paired by a fix-up in the validator (errata 28)"
    ),
    "domain channel-id only in json": "0-9 domain (channel.open-ok channel-id); 0-9-1 uses reserved-1",
    "domain destination only in json": "used only by RabbitMQ's legacy JSON definitions",
    "domain duration only in json": "used only by RabbitMQ's legacy JSON definitions",
    "domain offset only in json": "used only by RabbitMQ's legacy JSON definitions",
    "domain reject-code only in json": "used only by RabbitMQ's legacy JSON definitions",
    "domain reject-text only in json": "used only by RabbitMQ's legacy JSON definitions",
    "domain security-token only in json": "used only by RabbitMQ's legacy JSON definitions",
    "domain reference only in json": "used only by RabbitMQ's legacy JSON definitions",
    "domain no-wait only in own": "the JSON declares its nowait arguments as plain bit",
}

# The JSON keeps the 0-8 names of fields that 0-9-1 renamed (same wire layout).
JSON_NAMES = {
    "ticket": "reserved-1",
    "nowait": "no-wait",
    "out-of-band": "reserved-1",
    "channel-id": "reserved-1",
    "capabilities": "reserved-1",
    "insist": "reserved-2",
    "known-hosts": "reserved-1",
    "cluster-id": "reserved",
}
# ... where the rename depends on the place: (class, method, json name) -> XML name.
JSON_NAMES_AT = {
    ("basic", "get-empty", "cluster-id"): "reserved-1",
    (
        "confirm",
        "select",
        "nowait",
    ): "nowait",  # the XML keeps "nowait" here (domain no-wait)
}

# Differences between the project's amqp0-9.xml and the reference 0-9 XML: none.
DELIBERATE_09: dict[str, str] = {}


# --------------------------------------------------------------------------------------
# Normalised models
# --------------------------------------------------------------------------------------


def _rules(node: ET.Element) -> tuple[tuple[str, str | None], ...]:
    return tuple((r.get("name", ""), r.get("on-failure")) for r in node.findall("rule"))


def _asserts(
    node: ET.Element,
) -> tuple[tuple[str, str | None, str | None, str | None], ...]:
    return tuple(
        (a.get("check", ""), a.get("value"), a.get("method"), a.get("field"))
        for a in node.findall("assert")
    )


def _grammar_tokens(text: str | None) -> tuple[str, ...] | None:
    return tuple(text.split()) if text else None


def ref_model(path: Path) -> dict:
    """A reference XML file read with xml.etree (independent of the project's loader)."""
    root = ET.parse(path).getroot()
    prim = {d.get("name"): d.get("type") for d in root.findall("domain")}

    def resolve(name: str) -> str:
        seen = set()
        while name in prim and prim[name] != name and name not in seen:
            seen.add(name)
            name = prim[name]
        return name

    def field(f: ET.Element) -> dict:
        dom = f.get("domain") or f.get("type") or ""
        return {
            "name": f.get("name"),
            "domain": dom,
            "type": resolve(dom),
            "reserved": f.get("reserved") == "1",
            "asserts": _asserts(f),
            "rules": _rules(f),
        }

    classes = {}
    for c in root.findall("class"):
        grammar = next(
            (d.text for d in c.findall("doc") if d.get("type") == "grammar"), None
        )
        methods = {}
        for m in c.findall("method"):
            methods[m.get("name")] = {
                "index": int(m.get("index")),
                "synchronous": m.get("synchronous") == "1",
                "content": m.get("content") == "1",
                "responses": tuple(r.get("name") for r in m.findall("response")),
                "chassis": tuple(
                    (x.get("name"), x.get("implement")) for x in m.findall("chassis")
                ),
                "fields": tuple(field(f) for f in m.findall("field")),
                "rules": _rules(m),
            }
        classes[c.get("name")] = {
            "index": int(c.get("index")),
            "chassis": tuple(
                (x.get("name"), x.get("implement")) for x in c.findall("chassis")
            ),
            "properties": tuple(field(f) for f in c.findall("field")),
            "rules": _rules(c),
            "grammar": _grammar_tokens(grammar),
            "methods": methods,
        }
    return {
        "version": "-".join(
            x for x in (root.get("major"), root.get("minor"), root.get("revision")) if x
        ),
        "port": root.get("port"),
        "constants": {
            c.get("name"): (int(c.get("value")), c.get("class"))
            for c in root.findall("constant")
        },
        "domains": {
            d.get("name"): {
                "type": resolve(d.get("name")),
                "asserts": _asserts(d),
                "rules": _rules(d),
            }
            for d in root.findall("domain")
        },
        "classes": classes,
    }


def own_model(spec: Spec) -> dict:
    """The project's spec as loaded by amqpscope.dissect.spec, in the same shape."""

    def asserts(items) -> tuple:
        return tuple(
            (a.check, a.value, a.method, a.field) for a in items if a.origin == "field"
        )

    def rules(items) -> tuple:
        return tuple((r.name, r.on_failure) for r in items)

    def field(f) -> dict:
        return {
            "name": f.name,
            "domain": f.domain,
            "type": f.type,
            "reserved": f.reserved,
            "asserts": asserts(f.asserts),
            "rules": rules(f.rules),
        }

    classes = {}
    for c in spec.classes:
        classes[c.name] = {
            "index": c.index,
            "chassis": tuple((x.name, x.implement) for x in c.chassis),
            "properties": tuple(field(f) for f in c.properties),
            "rules": rules(c.rules),
            "grammar": _grammar_tokens(c.grammar),
            "methods": {
                m.name: {
                    "index": m.index,
                    "synchronous": m.synchronous,
                    "content": m.content,
                    "responses": tuple(m.responses),
                    "chassis": tuple((x.name, x.implement) for x in m.chassis),
                    "fields": tuple(field(f) for f in m.fields),
                    "rules": rules(m.rules),
                }
                for m in c.methods
            },
        }
    return {
        "version": spec.version,
        "port": str(spec.port),
        "constants": {c.name: (c.value, c.cls) for c in spec.constants.values()},
        "domains": {
            d.name: {
                "type": d.type,
                "asserts": tuple(
                    (a.check, a.value, a.method, a.field) for a in d.asserts
                ),
                "rules": rules(d.rules),
            }
            for d in spec.domains.values()
        },
        "classes": classes,
    }


def _fields_diff(where: str, own: tuple, ref: tuple) -> list[str]:
    out = []
    on = [f["name"] for f in own]
    rn = [f["name"] for f in ref]
    if on != rn:
        return [f"{where} field names/order: own {on} != ref {rn}"]
    for a, b in zip(own, ref, strict=True):
        for key in ("domain", "type", "reserved", "asserts", "rules"):
            if a[key] != b[key]:
                out.append(
                    f"{where}.{a['name']} {key}: own {a[key]!r} != ref {b[key]!r}"
                )
    return out


def diff_models(own: dict, ref: dict) -> list[str]:
    out: list[str] = []
    for key in ("version", "port"):
        if own[key] != ref[key]:
            out.append(f"{key}: own {own[key]!r} != ref {ref[key]!r}")
    for name in sorted(own["constants"].keys() | ref["constants"].keys()):
        a, b = own["constants"].get(name), ref["constants"].get(name)
        if a != b:
            out.append(f"constant {name}: own {a} != ref {b}")
    for name in sorted(own["domains"].keys() | ref["domains"].keys()):
        a, b = own["domains"].get(name), ref["domains"].get(name)
        if a != b:
            out.append(f"domain {name}: own {a} != ref {b}")
    if list(own["classes"]) != list(ref["classes"]):
        out.append(
            f"class order: own {list(own['classes'])} != ref {list(ref['classes'])}"
        )
    for cname in sorted(own["classes"].keys() | ref["classes"].keys()):
        a, b = own["classes"].get(cname), ref["classes"].get(cname)
        if a is None or b is None:
            out.append(f"class {cname} only in {'ref' if a is None else 'own'}")
            continue
        for key in ("index", "chassis", "rules", "grammar"):
            if a[key] != b[key]:
                out.append(f"{cname} {key}: own {a[key]!r} != ref {b[key]!r}")
        out += _fields_diff(f"{cname} properties", a["properties"], b["properties"])
        if list(a["methods"]) != list(b["methods"]):
            out.append(
                f"{cname} method order: own {list(a['methods'])} != ref {list(b['methods'])}"
            )
        for mname in sorted(a["methods"].keys() | b["methods"].keys()):
            ma, mb = a["methods"].get(mname), b["methods"].get(mname)
            if ma is None or mb is None:
                out.append(
                    f"method {cname}.{mname} only in {'ref' if ma is None else 'own'}"
                )
                continue
            for key in (
                "index",
                "synchronous",
                "content",
                "responses",
                "chassis",
                "rules",
            ):
                if ma[key] != mb[key]:
                    out.append(
                        f"{cname}.{mname} {key}: own {ma[key]!r} != ref {mb[key]!r}"
                    )
            out += _fields_diff(f"{cname}.{mname}", ma["fields"], mb["fields"])
    return out


def json_model(path: Path, credit: Path | None) -> dict:
    data = json.loads(path.read_text(encoding="utf-8"))
    doms = {name: typ for name, typ in data["domains"]}
    classes = {c["name"]: c for c in data["classes"]}
    if credit is not None and credit.is_file():
        ext = json.loads(credit.read_text(encoding="utf-8"))
        for c in ext.get("classes", []):
            classes[c["name"]] = {
                **classes[c["name"]],
                "methods": classes[c["name"]]["methods"] + c["methods"],
            }
    return {"data": data, "domains": doms, "classes": classes}


def diff_json(spec: Spec, jm: dict) -> list[str]:
    out: list[str] = []
    data = jm["data"]
    if (data["major-version"], data["minor-version"], data["revision"]) != (
        spec.major,
        spec.minor,
        spec.revision,
    ):
        out.append("version differs")
    if data["port"] != spec.port:
        out.append(f"port: own {spec.port} != json {data['port']}")
    jconst = {
        c["name"].lower(): (c["value"], c.get("class")) for c in data["constants"]
    }
    own_const = {c.name: (c.value, c.cls) for c in spec.constants.values()}
    for name in sorted(jconst.keys() | own_const.keys()):
        a, b = own_const.get(name), jconst.get(name)
        if a is None or b is None:
            out.append(f"constant {name} only in {'json' if a is None else 'own'}")
        elif a[0] != b[0]:
            out.append(f"constant {name}: own {a[0]} != json {b[0]}")
        elif a[1] != b[1]:
            out.append(f"constant {name} class: own {a[1]} != json {b[1]}")
    for name in sorted(jm["domains"].keys() | spec.domains.keys()):
        a = spec.domains[name].type if name in spec.domains else None
        b = jm["domains"].get(name)
        if a is None or b is None:
            out.append(f"domain {name} only in {'json' if a is None else 'own'}")
        elif a != b:
            out.append(f"domain {name}: own {a} != json {b}")

    def jtype(arg: dict) -> str:
        return arg["type"] if "type" in arg else jm["domains"][arg["domain"]]

    own_classes = {c.name: c for c in spec.classes}
    for cname in sorted(own_classes.keys() | jm["classes"].keys()):
        oc, jc = own_classes.get(cname), jm["classes"].get(cname)
        if oc is None:
            out.append(f"class {cname} ({jc['id']}) only in json")
            continue
        if jc is None:
            out.append(f"class {cname} ({oc.index}) only in own")
            continue
        if oc.index != jc["id"]:
            out.append(f"class {cname} index: own {oc.index} != json {jc['id']}")
        jprops = [
            (JSON_NAMES.get(p["name"], p["name"]), jtype(p))
            for p in jc.get("properties", [])
        ]
        oprops = [(f.name, f.type) for f in oc.properties]
        if jprops != oprops:
            out.append(f"{cname} properties: own {oprops} != json {jprops}")
        omethods = {m.name: m for m in oc.methods}
        jmethods = {m["name"]: m for m in jc["methods"]}
        for mname in sorted(omethods.keys() | jmethods.keys()):
            om, jmeth = omethods.get(mname), jmethods.get(mname)
            if om is None:
                out.append(f"{cname}.{mname} ({jc['id']}/{jmeth['id']}) only in json")
                continue
            if jmeth is None:
                out.append(f"{cname}.{mname} ({oc.index}/{om.index}) only in own")
                continue
            if om.index != jmeth["id"]:
                out.append(
                    f"{cname}.{mname} index: own {om.index} != json {jmeth['id']}"
                )
            if bool(jmeth.get("synchronous")) and not om.synchronous:
                # the JSON marks only requests synchronous; the XML marks requests and most replies
                out.append(
                    f"{cname}.{mname} synchronous: own {om.synchronous} != json True"
                )
            if bool(jmeth.get("content")) != om.content:
                out.append(
                    f"{cname}.{mname} content: own {om.content} != json {bool(jmeth.get('content'))}"
                )
            jargs = [
                (
                    JSON_NAMES_AT.get(
                        (cname, mname, a["name"]), JSON_NAMES.get(a["name"], a["name"])
                    ),
                    jtype(a),
                )
                for a in jmeth["arguments"]
            ]
            oargs = [(f.name, f.type) for f in om.fields]
            if jargs != oargs:
                out.append(f"{cname}.{mname} fields: own {oargs} != json {jargs}")
    return out


def _check(diffs: list[str], deliberate: dict[str, str]) -> None:
    unexpected = [d for d in diffs if d not in deliberate]
    stale = [d for d in deliberate if d not in diffs]
    assert not unexpected, "undeclared differences:\n  " + "\n  ".join(unexpected)
    assert not stale, "DELIBERATE entries that no longer occur:\n  " + "\n  ".join(
        stale
    )
    for reason in deliberate.values():
        assert reason.strip()


# --------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def own091() -> Spec:
    return load_spec(OWN_091)


def test_own_files_are_well_formed() -> None:
    for path in (OWN_091, OWN_09):
        ET.parse(path)


def test_own_091_basics(own091: Spec) -> None:
    assert own091.version == "0-9-1"
    assert own091.port == 5672
    assert [c.name for c in own091.classes] == list(CLASSES_091)
    assert [c.index for c in own091.classes] == [10, 20, 40, 50, 60, 90, 85]
    assert len(own091.constants) == 25
    assert own091.constants["no-route"].value == 312
    assert len(own091.domains) == 24
    basic = own091.find_class("basic")
    assert [p.name for p in basic.properties] == [
        "content-type",
        "content-encoding",
        "headers",
        "delivery-mode",
        "priority",
        "correlation-id",
        "reply-to",
        "expiration",
        "message-id",
        "timestamp",
        "type",
        "user-id",
        "app-id",
        "reserved",
    ]
    assert own091.find_method("exchange.unbind-ok").index == 51
    assert [f.name for f in own091.find_method("exchange.declare").fields][:4] == [
        "reserved-1",
        "exchange",
        "type",
        "passive",
    ]
    assert [(f.name, f.type) for f in own091.find_method("queue.purge-ok").fields] == [
        ("message-count", "long")
    ]
    assert [
        (f.name, f.domain, f.type) for f in own091.find_method("confirm.select").fields
    ] == [
        ("nowait", "no-wait", "bit"),
    ]
    assert {f"{m.class_name}.{m.name}" for m in own091.methods() if m.content} == {
        "basic.publish",
        "basic.return",
        "basic.deliver",
        "basic.get-ok",
    }
    assert sum(len(c.methods) for c in own091.classes) == 64


def test_grammars_present_for_all_classes(own091: Spec) -> None:
    for c in own091.classes:
        assert c.grammar, f"class {c.name} has no grammar"
        assert re.match(rf"\s*{re.escape(c.name)}\s*=", c.grammar), c.grammar


def test_update_secret_direction(own091: Spec) -> None:
    us = own091.find_method("connection.update-secret")
    ok = own091.find_method("connection.update-secret-ok")
    assert [(x.name, x.implement) for x in us.chassis] == [("server", "MUST")]
    assert us.responses == ("update-secret-ok",)
    assert [(x.name, x.implement) for x in ok.chassis] == [("client", "MUST")]
    assert [(f.name, f.type) for f in us.fields] == [
        ("new-secret", "longstr"),
        ("reason", "shortstr"),
    ]


@needs_shared
def test_091_matches_extended_xml(own091: Spec) -> None:
    _check(diff_models(own_model(own091), ref_model(REF_091)), DELIBERATE_XML)


@needs_shared
def test_091_matches_rabbitmq_json(own091: Spec) -> None:
    _check(diff_json(own091, json_model(REF_JSON, REF_CREDIT)), DELIBERATE_JSON)


@needs_shared
def test_09_matches_reference() -> None:
    # Seed 002 is the published 0-9 XML; the project's file is it unchanged but for one provenance
    # comment after the XML declaration (so the project holds no byte-identical copy of ../shared/specs).
    own_bytes = OWN_09.read_bytes()
    assert own_bytes != REF_09.read_bytes()
    marker = b"\n<!-- amqpscope: AMQP 0-9 as in seed 002, unchanged below this comment. -->"
    assert own_bytes.replace(marker, b"", 1) == REF_09.read_bytes(), "amqp0-9.xml must be seed 002 unchanged"
    own = load_spec(OWN_09)
    assert own.version == "0-9"
    _check(diff_models(own_model(own), ref_model(REF_09)), DELIBERATE_09)


def _checklist_on_failure_rules() -> list[tuple[str, str | None, str | None, str, str]]:
    """Appendix C of validation-checklist.md: (class, method, field, rule, on-failure) with on-failure."""
    rows = []
    text = CHECKLIST.read_text(encoding="utf-8")
    appendix = text.split("## Appendix C", 1)[1]
    for line in appendix.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].startswith("class "):
            continue
        location, rule, on_failure = cells[0], cells[1], cells[2]
        if on_failure in ("—", "-", ""):
            continue
        parts = dict(p.strip().split(" ", 1) for p in location.split("/"))
        rows.append(
            (parts["class"], parts.get("method"), parts.get("field"), rule, on_failure)
        )
    return rows


@pytest.mark.skipif(
    not CHECKLIST.is_file(), reason=f"{CHECKLIST} is absent: shared/ is not checked out"
)
def test_on_failure_rules_of_checklist_present(own091: Spec) -> None:
    rows = _checklist_on_failure_rules()
    assert len(rows) == 35
    missing = []
    for cname, mname, fname, rule, code in rows:
        node = own091.find_class(cname)
        if mname:
            node = node.method(mname)
        if fname:
            node = next(f for f in node.fields if f.name == fname)
        found = [r.on_failure for r in node.rules if r.name == rule]
        if found != [code]:
            missing.append(
                f"{cname}.{mname}.{fname} rule {rule}: expected {code}, found {found}"
            )
        assert code in own091.constants, code
    assert not missing, "\n".join(missing)
    own_total = sum(
        1
        for c in own091.classes
        for r in (
            *c.rules,
            *(r for m in c.methods for r in m.rules),
            *(r for m in c.methods for f in m.fields for r in f.rules),
        )
        if r.on_failure
    )
    assert own_total == 35

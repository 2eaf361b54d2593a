"""One self-contained HTML page: what went wrong and its evidence, then the stats tables and inline
SVG charts; no external resources.

Nothing is fetched (no fonts, scripts or stylesheets from a CDN), every value is HTML-escaped,
and the page is built from the report dict, which carries passwords only with --show-credentials.
Every time on the page is in seconds from the capture's start (the page says so at its top); a
capture that was not fully seen says what was missed before anything else.
"""

from __future__ import annotations

import html
from datetime import UTC, datetime
from typing import Any

from .flow import Elided, Ladder, Step, StepKind
from .report_charts import Mark, beat_timeline, plots
from .report_evidence import Evidence
from .report_labels import human
from .report_seen import Unseen
from .stats import Analyzer

esc = html.escape
LISTED = 200  # rows per listing table
NONE = "<p class=muted>none</p>"

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em;color:#222;max-width:1280px}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ccc}h3{font-size:1em}
table{border-collapse:collapse;margin:.5em 0;font-size:.85em}
td,th{border:1px solid #ddd;padding:2px 6px;text-align:left;vertical-align:top}
td{white-space:nowrap;max-width:36em;overflow:hidden;text-overflow:ellipsis}
th{background:#f4f4f4}td.n{text-align:right;font-variant-numeric:tabular-nums}.muted{color:#777}
svg{background:#fff;border:1px solid #eee;margin:.4em 0;display:block;max-width:100%;height:auto}
.cards{display:flex;flex-wrap:wrap;gap:.6em}.card{border:1px solid #ddd;border-radius:4px;padding:.4em .8em}
.card b{display:block;font-size:1.3em}.row{display:flex;flex-wrap:wrap;gap:2em;align-items:flex-start}
.scroll{overflow-x:auto;max-width:100%}
.row>div{min-width:0;max-width:100%}
.cause{border-left:4px solid #999;padding:.2em .8em;margin:.6em 0}.cause p{margin:.2em 0}
.cause.critical{border-color:#b00}.cause.error{border-color:#e33}.cause.warning{border-color:#d90}
.cause.notice{border-color:#47a}.cause .sev{font-weight:bold;text-transform:uppercase;margin-right:.5em}
.unseen{border:2px solid #d90;background:#fff8e6;padding:.4em 1em;margin:1em 0}.unseen ul{margin:.3em 0}
.timebase{color:#555;margin:.2em 0 1em}
table.ladder td{max-width:none}table.ladder td.msg{white-space:normal;min-width:18em}
tr.proof td{background:#fff3c4}tr:target td{background:#ffd54a}tr.elided td{color:#777;text-align:center;
font-style:italic;background:#fafafa}tr.tcp td.msg{color:#b00;font-weight:bold}
"""


# --- values and tables ---------------------------------------------------------------------------


def _latency(d: dict[str, Any]) -> str:
    if not d.get("count"):
        return "-"
    parts = [f"{human(p)} {d[p]}" for p in ("p50", "p90", "p99", "max") if d.get(p) is not None]
    return " · ".join(parts) + f" ms (n={d['count']})"


def _cell(v: Any) -> str:
    if isinstance(v, dict):
        if not v:
            return "<span class=muted>-</span>"
        if "count" in v and "p50" in v:
            return esc(_latency(v))
        return "<br>".join(f"{esc(_key(k))}: {esc(_short(x))}" for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return esc(", ".join(map(str, v))) or "<span class=muted>-</span>"
    if v is None:
        return "<span class=muted>-</span>"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return esc(f"{v:.6f}" if 0 < abs(v) < 1e-3 else f"{v:.6g}")
    return esc(str(v))


def _key(k: Any) -> str:
    """A key inside a value (a frame type, a reply code, a consumer): a report key only when it
    is spelled like one."""
    k = str(k)
    return human(k) if "_" in k else k


def _short(v: Any) -> str:
    if isinstance(v, dict):
        return ", ".join(f"{_key(k)}={x}" for k, x in v.items())
    return str(v)


def table(rows: list[dict[str, Any]], columns: list[str] | None = None, limit: int = LISTED,
          total: int | None = None) -> str:  # fmt: skip
    """A table of ``rows`` with human column labels; empty when there are no rows (the section
    says "none" once)."""
    if not rows:
        return ""
    cols = columns or list(rows[0])
    head = "".join(f"<th>{esc(human(c))}</th>" for c in cols)
    body = []
    for r in rows[:limit]:
        tds = []
        for c in cols:
            v = r.get(c)
            num = isinstance(v, (int, float)) and not isinstance(v, bool)
            tip = f' title="{esc(v)}"' if isinstance(v, str) and len(v) > 40 else ""  # cut to fit; whole on hover
            tds.append(f"<td{' class=n' if num else ''}{tip}>{_cell(v)}</td>")
        body.append("<tr>" + "".join(tds) + "</tr>")
    hidden = (total if total is not None else len(rows)) - min(len(rows), limit)
    more = f"<p class=muted>{hidden:,} more rows not shown</p>" if hidden > 0 else ""
    return f"<div class=scroll><table><tr>{head}</tr>{''.join(body)}</table></div>{more}"


def _empty(v: Any) -> bool:
    return v is None or v == 0 or v == "" or v == {} or v == [] or (isinstance(v, dict) and v.get("count") == 0)


def kv(d: dict[str, Any], skip: tuple[str, ...] = ()) -> str:
    """Key/value rows of ``d`` (lists left to their own tables); empty when every value is."""
    items = [(k, v) for k, v in d.items() if k not in skip and not isinstance(v, list)]
    if all(_empty(v) for _, v in items):
        return ""
    rows = "".join(f"<tr><th>{esc(human(k))}</th><td>{_cell(v)}</td></tr>" for k, v in items)
    return f"<div class=scroll><table>{rows}</table></div>"


def sub(title: str, block: str) -> str:
    """A subsection, left out when it has nothing to show."""
    return f"<h3>{esc(title)}</h3>{block}" if block else ""


def section(title: str, *blocks: str, ident: str = "") -> str:
    """A section with one "none" when none of its blocks has anything."""
    body = "\n".join(b for b in blocks if b) or NONE
    anchor = f" id={ident}" if ident else ""
    return f"<h2{anchor}>{esc(title)}</h2>\n{body}"


def cards(items: list[tuple[str, Any]]) -> str:
    return "<div class=cards>" + "".join(f"<div class=card><b>{esc(str(v))}</b>{esc(k)}</div>" for k, v in items) + "</div>"


# --- the diagnosis and its evidence --------------------------------------------------------------


def packet_anchor(conn: int, packet: int) -> str:
    return f"c{conn}-p{packet}"


def _unseen_banner(items: list[Unseen]) -> str:
    if not items:
        return ""
    lis = "".join(f"<li><b>{esc(u.what)}</b>: {esc(u.detail)}</li>" for u in items)
    return (f"<div class=unseen id=not-seen><p><b>Not seen.</b> Part of the traffic is missing from this capture or "
            f"could not be read, so this report cannot say that nothing went wrong:</p><ul>{lis}</ul></div>")  # fmt: skip


def diagnosis_section(diagnosis: dict[str, Any], ladders: dict[int, Ladder], start: float,
                      unseen: list[Unseen]) -> str:  # fmt: skip
    """The causes, each linked to its proving packets in its connection's ladder, then the quirks."""
    causes, quirks = diagnosis["causes"], diagnosis["quirks"]
    out = []
    if not causes:
        if unseen:
            out.append("<p><b>No cause found in what was seen</b>; see <a href='#not-seen'>what was not seen</a>."
                       "</p>")  # fmt: skip
        else:
            out.append("<p><b>Nothing wrong</b>: no cause found" + (", only quirks the broker accepts" if quirks else "")
                       + ".</p>")  # fmt: skip
    for i, d in enumerate(causes, 1):
        conn = d["conn"]
        packets = d["packets"]
        shown = packets[:30]
        links = ", ".join(f"<a href='#{packet_anchor(conn, p)}'>#{p}</a>" if conn in ladders else f"#{p}"
                          for p in shown)  # fmt: skip
        if len(packets) > len(shown):
            links += f" <span class=muted>and {len(packets) - len(shown):,} more</span>"
        ch = "" if d["channel"] is None else f", channel {d['channel']}"
        ladder = f" · <a href='#ladder-{conn}'>ladder</a>" if conn in ladders else ""
        out.append(f"<div class='cause {esc(d['severity'])}' id=cause-{i}><p><span class=sev>{esc(d['severity'])}"
                   f"</span><b>{esc(d['cause'])}</b> <span class=muted>connection {conn}{ch} · "
                   f"{d['since'] - start:.3f}–{d['until'] - start:.3f} s ({d['until'] - d['since']:.3f} s) · "
                   f"{esc(d['impact'])}</span></p>"
                   f"<p>{esc(d['summary'])}</p><p class=muted>broker: {esc(d['broker_action'])}</p>"
                   f"<p>packets: {links}{ladder}</p></div>")  # fmt: skip
    if quirks:
        out.append("<h3>Quirks (spec deviations the broker accepts)</h3>")
        out.append(table([{k: q[k] for k in ("library", "quirk", "count", "connections", "summary", "broker_accepts")}
                          for q in quirks]))  # fmt: skip
    return section("Diagnosis", *out, ident="diagnosis")


def _ladder_rows(conn: int, ladder: Ladder, proof: set[int], start: float) -> str:
    aliases: dict[int, list[int]] = {}
    for p, target in ladder.aliases.items():
        aliases.setdefault(target, []).append(p)
    ided: set[int] = set()
    rows = []
    for s in ladder.rows():
        if isinstance(s, Elided):
            rows.append(f"<tr class=elided><td colspan=6>… {s.count:,} row{'s' if s.count != 1 else ''} not shown "
                        f"({s.since - start:.6f}–{s.until - start:.6f} s) …</td></tr>")  # fmt: skip
            continue
        rows.append(_ladder_row(conn, s, s.packet in proof or s.packet in aliases, ided, aliases, start))
    return "".join(rows)


def _ladder_row(conn: int, s: Step, marked: bool, ided: set[int], aliases: dict[int, list[int]], start: float) -> str:
    classes = [c for c, on in (("proof", marked), ("tcp", s.kind is StepKind.TCP_END)) if on]
    attrs = f" class='{' '.join(classes)}'" if classes else ""
    extra = ""
    if s.packet not in ided:  # a packet holding several frames: its first row is its anchor
        ided.add(s.packet)
        attrs = f" id={packet_anchor(conn, s.packet)}{attrs}"
        extra = "".join(f"<span id={packet_anchor(conn, p)}></span>" for p in aliases.get(s.packet, ()))
    arrow = "→" if s.dir == "c2s" else "←" if s.dir == "s2c" else "·"
    label = f"<b>{esc(s.label)}</b>" if s.alert else esc(s.label)
    left, right = (label, "") if s.dir != "s2c" else ("", label)
    return (f"<tr{attrs}><td class=n>{extra}#{s.packet}</td><td class=n>{s.ts - start:.6f}</td>"
            f"<td class=n>{s.channel}</td><td class=msg>{left}</td><td>{arrow}</td><td class=msg>{right}</td></tr>")


def evidence_section(diagnosis: dict[str, Any], ladders: dict[int, Ladder], start: float) -> str:
    """One ladder per diagnosed connection: its start, a window around each proving packet
    (marked), its end, and how many rows each elided stretch holds."""
    if not ladders:
        return ""
    proof: dict[int, set[int]] = {}
    for d in diagnosis["causes"]:
        proof.setdefault(d["conn"], set()).update(d["packets"])
    out = ["<p class=muted>The start of each diagnosed connection, a few rows either side of every proving "
           "packet (marked), and its end; a cause's packet links land on its row.</p>"]
    for conn, ladder in sorted(ladders.items()):
        out.append(f"<h3 id=ladder-{conn}>Connection {conn}: {esc(ladder.client)} ⇄ {esc(ladder.server)}</h3>")
        out.append("<div class=scroll><table class=ladder><tr><th>packet</th><th>time (s)</th><th>channel</th>"
                   f"<th>client</th><th></th><th>broker</th></tr>{_ladder_rows(conn, ladder, proof.get(conn, set()), start)}"
                   "</table></div>")  # fmt: skip
    return section("Evidence", *out, ident="evidence")


# --- the page ------------------------------------------------------------------------------------


def _rel(start: float, rows: list[dict[str, Any]], *keys: str) -> list[dict[str, Any]]:
    """Epoch times → seconds from the capture's start."""
    return [dict(r, **{k: None if r.get(k) is None else round(r[k] - start, 6) for k in keys}) for r in rows]


def _utc(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


CONN_COLUMNS = ["conn", "client", "server", "client_product", "client_version", "user", "vhost", "mechanism",
                "frame_max", "channel_max", "heartbeat", "channels_opened", "start", "end", "close_code",
                "close_by", "close_text", "ended", "frames_c2s", "frames_s2c", "bytes_c2s", "bytes_s2c"]  # fmt: skip
HB_COLUMNS = ["conn", "verdict", "ended", "close_by", "close_ok", "proposed", "negotiated", "heartbeats_c2s",
              "heartbeats_s2c", "max_silence_c2s", "max_silence_s2c", "idle_before_end_c2s", "idle_before_end_s2c",
              "missed", "closed_for_missed", "client", "server"]  # fmt: skip
AUDIT_COLUMNS = ["conn", "user", "password", "vhost", "mechanism", "outcome", "issues", "client_product",
                 "client_version", "client_platform", "server_product", "server_version", "client", "server"]  # fmt: skip


def _channels_with_deliveries(report: dict[str, Any]) -> int:
    return sum(1 for c in report["deliveries"]["per_channel"] if c.get("max_in_flight"))


def _marks(diagnosis: dict[str, Any], start: float) -> tuple[Mark, ...]:
    return tuple(Mark(d["since"] - start, d["until"] - start, i, f"{d['cause']} on connection {d['conn']}")
                 for i, d in enumerate(diagnosis["causes"], 1))  # fmt: skip


def render_html(a: Analyzer, report: dict[str, Any], title: str, evidence: Evidence | None = None,
                unseen: list[Unseen] | None = None) -> str:  # fmt: skip
    conf, dlv, tr, hb, sec = (report[k] for k in ("confirms", "deliveries", "tracing", "heartbeats", "security"))
    ev = evidence or Evidence()
    missed = unseen or []
    cap = report["capture"]
    start = cap["start"] or 0.0
    rel = lambda rows, *keys: _rel(start, rows, *keys)  # noqa: E731
    shown_cap = {"start_utc": _utc(cap["start"]), "end_utc": _utc(cap["end"]),
                 **{k: v for k, v in cap.items() if k not in ("start", "end")}}  # fmt: skip
    rpc_rows = [{"method": k, **{x: y for x, y in v.items() if x != "latency_ms"},
                 **{f"{p} ms": v["latency_ms"][p] for p in ("p50", "p90", "p99", "max")}}
                for k, v in report["rpc"].items()]  # fmt: skip
    named = lambda rows: table(rows, ["name", "count", "rate_per_s"])  # noqa: E731
    findings = sum(report["findings"].values())
    diagnosis = report["diagnosis"]
    summary = cards([
        ("causes", len(diagnosis["causes"])), ("quirks", sum(q["count"] for q in diagnosis["quirks"])),
        ("seconds", round(cap["duration_s"], 3)), ("connections", report["connections_total"]),
        ("channels", report["channels_opened"]), ("frames", cap["frames"]), ("publishes", conf["published"]),
        ("deliveries", dlv["delivered"]), ("unconfirmed at end", conf["outstanding"]),
        # deliveries a close released were unacked too (a stalled consumer's, say): never "0 unacked"
        ("unacked at end / released by a close", f"{dlv['outstanding']} / {dlv['released_at_close']}"),
        ("bad acks", dlv["unknown_tag"] + dlv["double_ack"] + dlv["wrong_channel"]), ("findings", findings),
    ])  # fmt: skip
    timebase = (f"<p class=timebase>Every time on this page is in seconds from the capture's start, "
                f"{esc(_utc(cap['start']) or 'unknown')} (UTC).</p>")  # fmt: skip
    beats = [beat_timeline(line, start) for _, line in sorted(ev.beats.items())]
    sections = [
        f"<h1>amqpscope report: {esc(title)}</h1>",
        timebase,
        _unseen_banner(missed),
        summary,
        diagnosis_section(diagnosis, ev.ladders, start, missed),
        section("Over time", *plots(a, _channels_with_deliveries(report), _marks(diagnosis, start)),
                sub("Heartbeats and silences of the connections with a heartbeat cause", "".join(beats))),
        evidence_section(diagnosis, ev.ladders, start),
        section("Capture", kv(shown_cap)),
        section("Connections", table(rel(report["connections"], "start", "end"), CONN_COLUMNS,
                                     total=report["connections_total"])),
        section("Channels", table(rel(report["channels"], "opened", "closed"))),
        "<div class=row><div>",
        section("Methods", table([{"method": k, "count": v}
                                  for k, v in sorted(report["methods"].items(), key=lambda kv: -kv[1])])),
        "</div><div>",
        section("Reply codes", table([{"method and code": k, "count": v} for k, v in report["reply_codes"].items()])),
        "</div></div>",
        "<div class=row><div>", section("Exchanges", named(report["exchanges"])),
        "</div><div>", section("Queues", named(report["queues"])),
        "</div><div>", section("Routing keys", named(report["routing_keys"])), "</div></div>",
        section("Synchronous methods (request → reply)", table(rpc_rows),
                sub("Requests without their reply", table(rel(report["rpc_unanswered"], "ts"),
                                                          total=report["rpc_unanswered_total"]))),
        section("Publisher confirms", kv(conf), sub("Per channel", table(conf["per_channel"])),
                sub("Unconfirmed", table(rel(conf["unconfirmed"], "ts")))),
        section("Consumer deliveries", kv(dlv), sub("Consumers", table(dlv["consumers"])),
                sub("Per channel (in flight against prefetch)", table(dlv["per_channel"])),
                sub("Unacked", table(rel(dlv["unacked"], "ts"))),
                sub("Bad acknowledgements", table(dlv["bad_acks"]))),
        section("Heartbeats and connection ends", kv(hb), table(hb["connections"], HB_COLUMNS)),
        section("Blocked connections and channel flow", kv(report["blocked"]),
                table(rel(report["blocked"]["list"], "start", "end"))),
        section("Tracing", kv(tr["messages"]),
                sub("RPC through reply-to / correlation-id", kv(tr["rpc"]) + table(tr["rpc"]["pairs"])),
                sub("RPC requests without a completed reply", table(rel(tr["rpc"]["unanswered_list"], "ts")))),
        section("Security audit", kv(sec), table(sec["connections"], AUDIT_COLUMNS)),
        section("Findings", table([{"rule": k, "count": v} for k, v in report["findings"].items()]),
                kv(report.get("findings_by_severity") or {})),
    ]
    return ("<!DOCTYPE html><html><head><meta charset=utf-8>"
            f"<title>amqpscope: {esc(title)}</title><style>{CSS}</style></head><body>"
            + "\n".join(s for s in sections if s) + "</body></html>\n")  # fmt: skip

"""One self-contained HTML page: the stats tables and inline SVG plots, no external resources.

Nothing is fetched (no fonts, scripts or stylesheets from a CDN), every value is HTML-escaped,
and the page is built from the report dict, which carries passwords only with --show-credentials.
Plots share one time axis (seconds from the first event) cut into at most ``PLOT_BUCKETS``
buckets, so that rates, latencies and in-flight counts line up one above the other.
"""

from __future__ import annotations

import html
import math
from datetime import UTC, datetime
from typing import Any

from .flow import Ladder
from .percentiles import Bucket, TimeSeries
from .stats import Analyzer

esc = html.escape
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f",
           "#bcbd22")  # fmt: skip
PLOTTED_CHANNELS = 4  # the busiest channels drawn in the in-flight plot (with their prefetch)
PLOT_BUCKETS = 120
LISTED = 200  # rows per listing table

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
table.ladder td{max-width:none}table.ladder td.msg{white-space:normal;min-width:18em}
tr.proof td{background:#fff3c4}tr:target td{background:#ffd54a}
"""


# --- values and tables ---------------------------------------------------------------------------


def _latency(d: dict[str, Any]) -> str:
    if not d.get("count"):
        return "-"
    parts = [f"{p} {d[p]}" for p in ("p50", "p90", "p99", "max") if d.get(p) is not None]
    return " · ".join(parts) + f" ms (n={d['count']})"


def _cell(v: Any) -> str:
    if isinstance(v, dict):
        if not v:
            return "<span class=muted>-</span>"
        if "count" in v and "p50" in v:
            return esc(_latency(v))
        return "<br>".join(f"{esc(str(k))}: {esc(_short(x))}" for k, x in v.items())
    if isinstance(v, list):
        return esc(", ".join(map(str, v))) or "<span class=muted>-</span>"
    if v is None:
        return "<span class=muted>-</span>"
    if isinstance(v, float):
        return esc(f"{v:.6f}" if 0 < abs(v) < 1e-3 else f"{v:.6g}")
    return esc(str(v))


def _short(v: Any) -> str:
    if isinstance(v, dict):
        return ", ".join(f"{k}={x}" for k, x in v.items())
    return str(v)


def table(rows: list[dict[str, Any]], columns: list[str] | None = None, limit: int = LISTED,
          total: int | None = None) -> str:  # fmt: skip
    if not rows:
        return "<p class=muted>none</p>"
    cols = columns or list(rows[0])
    head = "".join(f"<th>{esc(c)}</th>" for c in cols)
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
    more = f"<p class=muted>{hidden} more rows not shown</p>" if hidden > 0 else ""
    return f"<div class=scroll><table><tr>{head}</tr>{''.join(body)}</table></div>{more}"


def kv(d: dict[str, Any], skip: tuple[str, ...] = ()) -> str:
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{_cell(v)}</td></tr>" for k, v in d.items()
                   if k not in skip and not isinstance(v, list))  # fmt: skip
    return f"<div class=scroll><table>{rows}</table></div>"


def cards(items: list[tuple[str, Any]]) -> str:
    return "<div class=cards>" + "".join(f"<div class=card><b>{esc(str(v))}</b>{esc(k)}</div>" for k, v in items) + "</div>"


# --- plots ---------------------------------------------------------------------------------------


def _nice(x: float) -> float:
    """1, 2 or 5 times a power of ten, at least ``x``."""
    if x <= 0:
        return 1.0
    e = 10 ** math.floor(math.log10(x))
    return next(m * e for m in (1, 2, 5, 10) if m * e >= x * (1 - 1e-9))


def _tick(v: float) -> str:
    if abs(v) >= 10_000:
        return f"{v / 1000:g}k"
    return f"{v:.4g}"


def line_plot(title: str, series: dict[str, list[tuple[float, float]]], unit: str, xmax: float,
              dashed: frozenset[str] = frozenset(), dots: bool = False, width: int = 1000,
              height: int = 230) -> str:  # fmt: skip
    """An SVG chart of (x seconds, y) series sharing one axis pair; ``dots`` marks every point."""
    pts = [p for s in series.values() for p in s]
    if not pts:
        return f"<p class=muted>{esc(title)}: no data</p>"
    ml, mr, mt, mb = 64, 210, 26, 34
    xmax = xmax or max(x for x, _ in pts) or 1.0
    ystep = _nice((max(y for _, y in pts) or 1.0) / 4)
    ymax = ystep * max(1, math.ceil(max(y for _, y in pts) / ystep - 1e-9))
    xstep = _nice(xmax / 6)
    pw, ph = width - ml - mr, height - mt - mb

    def sx(x: float) -> float:
        return ml + pw * x / xmax

    def sy(y: float) -> float:
        return mt + ph * (1 - y / ymax)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           f'font-size="11" '
           f'font-family="sans-serif"><text x="{ml}" y="16" font-weight="bold">{esc(title)}</text>',
           f'<text x="{ml - 8}" y="{mt - 6}" text-anchor="end" fill="#555">{esc(unit)}</text>']  # fmt: skip
    for i in range(round(ymax / ystep) + 1):
        yv = ystep * i
        out.append(f'<line x1="{ml}" y1="{sy(yv):.1f}" x2="{ml + pw}" y2="{sy(yv):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{ml - 4}" y="{sy(yv) + 4:.1f}" text-anchor="end" fill="#555">{_tick(yv)}</text>')
    for i in range(math.floor(xmax / xstep + 1e-9) + 1):
        xv = xstep * i
        out.append(f'<text x="{sx(xv):.1f}" y="{mt + ph + 15}" text-anchor="middle" fill="#555">{_tick(xv)} s</text>')
    out.append(f'<line x1="{ml}" y1="{mt + ph}" x2="{ml + pw}" y2="{mt + ph}" stroke="#888"/>'
               f'<line x1="{ml}" y1="{mt}" x2="{ml}" y2="{mt + ph}" stroke="#888"/>')  # fmt: skip
    for i, (name, s) in enumerate(series.items()):
        colour = COLOURS[i % len(COLOURS)]
        dash = ' stroke-dasharray="5 3"' if name in dashed else ""
        if s:
            path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in s)
            out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5"{dash} points="{path}"/>')
            if dots or len(s) == 1:
                out += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{colour}"/>' for x, y in s]
        out.append(f'<rect x="{ml + pw + 12}" y="{mt + 16 * i}" width="10" height="10" fill="{colour}"/>'
                   f'<text x="{ml + pw + 26}" y="{mt + 9 + 16 * i}">{esc(name)}</text>')  # fmt: skip
    out.append("</svg>")
    return "".join(out)


def _buckets(s: TimeSeries, width: float, origin: float) -> dict[int, Bucket]:
    return {round(x / width): b for x, b in s.rebase(width, origin)}


def _counts(s: TimeSeries, width: float, origin: float, n: int) -> list[tuple[float, float]]:
    """A rate per bucket, zero where nothing happened, drawn as steps."""
    got = _buckets(s, width, origin)
    out: list[tuple[float, float]] = []
    for i in range(n):
        rate = got[i].count / width if i in got else 0.0
        out += [(i * width, rate), ((i + 1) * width, rate)]
    return out


def _level(s: TimeSeries, width: float, origin: float, n: int) -> list[tuple[float, float]]:
    """A level (such as in-flight) per bucket: its maximum there, carried on through quiet buckets."""
    got = _buckets(s, width, origin)
    out: list[tuple[float, float]] = []
    level = 0.0
    for i in range(n):
        b = got.get(i)
        top = b.max if b is not None else level
        out += [(i * width, top), ((i + 1) * width, top)]
        if b is not None:
            level = b.last
    return out


def _means(s: TimeSeries, width: float, origin: float, scale: float = 1000.0) -> tuple[list[tuple[float, float]], ...]:
    """Mean and maximum per non-empty bucket, at the bucket's middle."""
    buckets = s.rebase(width, origin)
    mean = [(x + width / 2, b.total / b.count * scale) for x, b in buckets if b.count]
    top = [(x + width / 2, b.max * scale) for x, b in buckets if b.count]
    return mean, top


def plots(a: Analyzer) -> list[str]:
    origin = a.first_ts or 0.0
    duration = max(a.duration, 1e-6)
    every = [*a.series.values(), a.confirms.latency_series, a.deliveries.latency_series,
             a.deliveries.in_flight_series, *(t.series for t in a.deliveries.channel_series.values())]  # fmt: skip
    # the display bucket is no finer than the coarsest series (they coarsen independently)
    width = _nice(max([duration / PLOT_BUCKETS, *(s.width for s in every if s.origin is not None)]))
    n = math.ceil(duration / width) + 1
    xmax = n * width
    rates = {f"{k} /s": _counts(s, width, origin, n) for k, s in a.series.items() if s.origin is not None}
    lat: dict[str, list[tuple[float, float]]] = {}
    for name, s in (("publish → confirm", a.confirms.latency_series),
                    ("deliver → ack", a.deliveries.latency_series)):  # fmt: skip
        if s.origin is not None:
            lat[f"{name} mean"], lat[f"{name} max"] = _means(s, width, origin)
    flight: dict[str, list[tuple[float, float]]] = {}
    dashed = set()
    tracks = a.deliveries.channel_series
    if len(tracks) > 1 and a.deliveries.in_flight_series.origin is not None:
        # drawn first (underneath): a channel that holds everything would otherwise be hidden by it
        flight["all channels unacked"] = _level(a.deliveries.in_flight_series, width, origin, n)
        dashed.add("all channels unacked")
    busiest = sorted(tracks, key=lambda k: (-tracks[k].peak, k))[:PLOTTED_CHANNELS]
    for conn, ch in sorted(busiest):
        t = tracks[(conn, ch)]
        flight[f"conn {conn} ch {ch} unacked"] = _level(t.series, width, origin, n)
        if t.limit:
            name = f"conn {conn} ch {ch} prefetch"
            flight[name] = [(0.0, float(t.limit)), (xmax, float(t.limit))]
            dashed.add(name)
    step = f"{_tick(width * 1000)} ms" if width < 1 else f"{_tick(width)} s"
    return [
        line_plot(f"Message rates (per second, {step} buckets)", rates, "msg/s", xmax),
        line_plot(f"Latencies over time (mean and max per {step})", lat, "ms", xmax,
                  dashed=frozenset(k for k in lat if k.endswith("max")), dots=True),
        line_plot("Consumer deliveries in flight (unacked) against the prefetch", flight, "msgs", xmax,
                  dashed=frozenset(dashed)),
    ]  # fmt: skip


# --- the page ------------------------------------------------------------------------------------


def _rel(report: dict[str, Any], rows: list[dict[str, Any]], *keys: str) -> list[dict[str, Any]]:
    """Epoch times → seconds from the start of the capture (what a reader compares)."""
    start = report["capture"]["start"] or 0.0
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


def packet_anchor(conn: int, packet: int) -> str:
    return f"c{conn}-p{packet}"


def diagnosis_section(diagnosis: dict[str, Any], ladders: dict[int, Ladder], start: float) -> str:
    """The causes first, each linked to its proving packets in its connection's ladder; the quirks;
    then one ladder per diagnosed connection with the proving packets marked."""
    causes, quirks = diagnosis["causes"], diagnosis["quirks"]
    out = ["<h2 id=diagnosis>Diagnosis</h2>"]
    if not causes:
        out.append("<p><b>Nothing wrong</b>: no cause found" + (", only quirks the broker accepts" if quirks else "")
                   + ".</p>")
    for i, d in enumerate(causes, 1):
        conn = d["conn"]
        links = ", ".join(
            f"<a href='#{packet_anchor(conn, p)}'>#{p}</a>" if conn in ladders else f"#{p}" for p in d["packets"][:30])
        ch = "" if d["channel"] is None else f", channel {d['channel']}"
        out.append(f"<div class='cause {esc(d['severity'])}' id=cause-{i}><p><span class=sev>{esc(d['severity'])}"
                   f"</span><b>{esc(d['cause'])}</b> <span class=muted>connection {conn}{ch} · "
                   f"{d['until'] - d['since']:.3f} s · {esc(d['impact'])}</span></p>"
                   f"<p>{esc(d['summary'])}</p><p class=muted>broker: {esc(d['broker_action'])}</p>"
                   f"<p>packets: {links}</p></div>")  # fmt: skip
    if quirks:
        out.append("<h3>Quirks (spec deviations the broker accepts)</h3>")
        out.append(table([{k: q[k] for k in ("library", "quirk", "count", "connections", "summary", "broker_accepts")}
                          for q in quirks]))  # fmt: skip
    proof: dict[int, set[int]] = {}
    for d in causes:
        proof.setdefault(d["conn"], set()).update(d["packets"])
    for conn, ladder in sorted(ladders.items()):
        out.append(f"<h3 id=ladder-{conn}>Ladder of connection {conn}: {esc(ladder.client)} ⇄ {esc(ladder.server)}"
                   "</h3>")
        rows = []
        for s in ladder.steps:
            mark = " class=proof" if s.packet in proof.get(conn, ()) else ""
            arrow = "→" if s.dir == "c2s" else "←" if s.dir == "s2c" else "·"
            label = f"<b>{esc(s.label)}</b>" if s.alert else esc(s.label)
            left, right = (label, "") if s.dir != "s2c" else ("", label)
            rows.append(f"<tr id={packet_anchor(conn, s.packet)}{mark}><td class=n>#{s.packet}</td>"
                        f"<td class=n>{s.ts - start:.6f}</td><td class=n>{s.channel}</td><td class=msg>{left}</td>"
                        f"<td>{arrow}</td><td class=msg>{right}</td></tr>")  # fmt: skip
        more = "<p class=muted>ladder cut at its first steps</p>" if ladder.truncated else ""
        out.append("<div class=scroll><table class=ladder><tr><th>packet</th><th>s</th><th>ch</th><th>client</th>"
                   f"<th></th><th>broker</th></tr>{''.join(rows)}</table></div>{more}")  # fmt: skip
    return "\n".join(out)


def render_html(a: Analyzer, report: dict[str, Any], title: str, ladders: dict[int, Ladder] | None = None) -> str:
    conf, dlv, tr, hb, sec = (report[k] for k in ("confirms", "deliveries", "tracing", "heartbeats", "security"))
    cap = report["capture"]
    shown_cap = dict(cap, start=_utc(cap["start"]), end=_utc(cap["end"]))
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
    sections = [
        f"<h1>amqpscope report: {esc(title)}</h1>",
        summary,
        diagnosis_section(diagnosis, ladders or {}, cap["start"] or 0.0),
        "<h2>Over time</h2>",
        *plots(a),
        "<h2>Capture</h2>",
        kv(shown_cap),
        "<h2>Connections</h2>",
        table(_rel(report, report["connections"], "start", "end"), CONN_COLUMNS, total=report["connections_total"]),
        "<h2>Channels</h2>",
        table(_rel(report, report["channels"], "opened", "closed")),
        "<div class=row><div><h2>Methods</h2>",
        table([{"method": k, "count": v} for k, v in sorted(report["methods"].items(), key=lambda kv: -kv[1])]),
        "</div><div><h2>Reply codes</h2>",
        table([{"method and code": k, "count": v} for k, v in report["reply_codes"].items()]),
        "</div></div>",
        "<div class=row><div><h2>Exchanges</h2>", named(report["exchanges"]),
        "</div><div><h2>Queues</h2>", named(report["queues"]),
        "</div><div><h2>Routing keys</h2>", named(report["routing_keys"]), "</div></div>",
        "<h2>Synchronous methods (request → reply)</h2>",
        table(rpc_rows),
        "<h3>Requests without their reply</h3>",
        table(_rel(report, report["rpc_unanswered"], "ts"), total=report["rpc_unanswered_total"]),
        "<h2>Publisher confirms</h2>",
        kv(conf),
        table(conf["per_channel"]),
        "<h3>Unconfirmed</h3>",
        table(_rel(report, conf["unconfirmed"], "ts")),
        "<h2>Consumer deliveries</h2>",
        kv(dlv),
        "<h3>Consumers</h3>",
        table(dlv["consumers"]),
        "<h3>Per channel (in flight against prefetch)</h3>",
        table(dlv["per_channel"]),
        "<h3>Unacked</h3>",
        table(_rel(report, dlv["unacked"], "ts")),
        "<h3>Bad acknowledgements</h3>",
        table(dlv["bad_acks"]),
        "<h2>Heartbeats and connection ends</h2>",
        kv(hb),
        table(hb["connections"], HB_COLUMNS),
        "<h2>Blocked connections and channel flow</h2>",
        kv(report["blocked"]),
        table(_rel(report, report["blocked"]["list"], "start", "end")),
        "<h2>Tracing</h2>",
        kv(tr["messages"]),
        "<h3>RPC through reply-to / correlation-id</h3>",
        kv(tr["rpc"]),
        table(tr["rpc"]["pairs"]),
        "<h3>RPC requests without a completed reply</h3>",
        table(_rel(report, tr["rpc"]["unanswered_list"], "ts")),
        "<h2>Security audit</h2>",
        kv(sec),
        table(sec["connections"], AUDIT_COLUMNS),
        "<h2>Findings</h2>",
        table([{"rule": k, "count": v} for k, v in report["findings"].items()]),
        kv(report.get("findings_by_severity", {})) if report.get("findings_by_severity") else "",
    ]
    return ("<!DOCTYPE html><html><head><meta charset=utf-8>"
            f"<title>amqpscope: {esc(title)}</title><style>{CSS}</style></head><body>"
            + "\n".join(sections) + "</body></html>\n")  # fmt: skip

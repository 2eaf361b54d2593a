"""One self-contained HTML page: the stats tables and inline SVG plots, no external resources.

Nothing is fetched (no fonts, scripts or stylesheets from a CDN), every value is HTML-escaped,
and the page is built from the report dict, which carries passwords only with --show-credentials.
"""

from __future__ import annotations

import html
from typing import Any

from .percentiles import TimeSeries
from .stats import Analyzer

esc = html.escape
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd")

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em;color:#222;max-width:1200px}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.5em 0;font-size:.85em}
td,th{border:1px solid #ddd;padding:2px 6px;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.n{text-align:right}.muted{color:#777}
svg{background:#fff;border:1px solid #eee;margin:.4em 0}
"""


def _cell(v: Any) -> str:
    if isinstance(v, dict):
        if not v:
            return "<span class=muted>-</span>"
        return "<br>".join(f"{esc(str(k))}: {esc(_short(x))}" for k, x in v.items())
    if isinstance(v, list):
        return esc(", ".join(map(str, v)))
    if v is None:
        return "<span class=muted>-</span>"
    return esc(str(v))


def _short(v: Any) -> str:
    if isinstance(v, dict):
        return ", ".join(f"{k}={x}" for k, x in v.items())
    return str(v)


def table(rows: list[dict[str, Any]], columns: list[str] | None = None, limit: int = 200) -> str:
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
            tds.append(f"<td{' class=n' if num else ''}>{_cell(v)}</td>")
        body.append("<tr>" + "".join(tds) + "</tr>")
    more = f"<p class=muted>{len(rows) - limit} more rows not shown</p>" if len(rows) > limit else ""
    return f"<table><tr>{head}</tr>{''.join(body)}</table>{more}"


def kv(d: dict[str, Any], skip: tuple[str, ...] = ()) -> str:
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{_cell(v)}</td></tr>" for k, v in d.items()
                   if k not in skip and not isinstance(v, list))  # fmt: skip
    return f"<table>{rows}</table>"


def line_plot(title: str, series: dict[str, list[tuple[float, float]]], unit: str,
              width: int = 900, height: int = 220) -> str:  # fmt: skip
    """An SVG line chart of (x seconds, y) series sharing one axis pair."""
    pts = [p for s in series.values() for p in s]
    if not pts:
        return f"<p class=muted>{esc(title)}: no data</p>"
    ml, mr, mt, mb = 60, 120, 24, 30
    xmax = max(x for x, _ in pts) or 1.0
    ymax = max(y for _, y in pts) or 1.0
    pw, ph = width - ml - mr, height - mt - mb

    def sx(x: float) -> float:
        return ml + pw * x / xmax

    def sy(y: float) -> float:
        return mt + ph * (1 - y / ymax)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-size="11" '
           f'font-family="sans-serif"><text x="{ml}" y="15" font-weight="bold">{esc(title)}</text>',
           f'<line x1="{ml}" y1="{mt + ph}" x2="{ml + pw}" y2="{mt + ph}" stroke="#888"/>',
           f'<line x1="{ml}" y1="{mt}" x2="{ml}" y2="{mt + ph}" stroke="#888"/>']  # fmt: skip
    for i in range(5):
        yv = ymax * i / 4
        y = sy(yv)
        out.append(f'<text x="{ml - 4}" y="{y + 4}" text-anchor="end" fill="#555">{yv:.3g}</text>')
        out.append(f'<line x1="{ml}" y1="{y}" x2="{ml + pw}" y2="{y}" stroke="#eee"/>')
        xv = xmax * i / 4
        out.append(f'<text x="{sx(xv)}" y="{mt + ph + 14}" text-anchor="middle" fill="#555">{xv:.3g}s</text>')
    out.append(f'<text x="{ml - 50}" y="{mt - 8}" fill="#555">{esc(unit)}</text>')
    for i, (name, s) in enumerate(series.items()):
        colour = COLOURS[i % len(COLOURS)]
        if s:
            path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in s)
            out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{path}"/>')
            if len(s) == 1:
                out.append(f'<circle cx="{sx(s[0][0]):.1f}" cy="{sy(s[0][1]):.1f}" r="3" fill="{colour}"/>')
        out.append(f'<rect x="{ml + pw + 10}" y="{mt + 14 * i}" width="10" height="10" fill="{colour}"/>'
                   f'<text x="{ml + pw + 24}" y="{mt + 9 + 14 * i}">{esc(name)}</text>')  # fmt: skip
    out.append("</svg>")
    return "".join(out)


def _common(series: dict[str, TimeSeries]) -> float:
    """The coarsest bucket width among the series: every series is re-bucketed to it."""
    return max((s.width for s in series.values() if s.origin is not None), default=1.0)


def _rates(a: Analyzer, origin: float) -> dict[str, list[tuple[float, float]]]:
    width = _common(a.series)
    return {f"{k} /s": [(x, b.count / width) for x, b in s.rebase(width, origin)] for k, s in a.series.items()}


def _latencies(a: Analyzer, origin: float) -> dict[str, list[tuple[float, float]]]:
    named = {"confirm": a.confirms.latency_series, "deliver→ack": a.deliveries.latency_series}
    width = _common(named)
    out: dict[str, list[tuple[float, float]]] = {}
    for name, s in named.items():
        buckets = s.rebase(width, origin)
        out[f"{name} mean"] = [(x, b.total / b.count * 1000) for x, b in buckets if b.count]
        out[f"{name} max"] = [(x, b.max * 1000) for x, b in buckets if b.count]
    return out


def render_html(a: Analyzer, report: dict[str, Any], title: str) -> str:
    origin = a.first_ts or 0.0
    width = _common({"f": a.deliveries.in_flight_series})
    in_flight = {
        "unacked in flight (max)": [(x, b.max) for x, b in a.deliveries.in_flight_series.rebase(width, origin)]
    }
    conf, dlv, tr = report["confirms"], report["deliveries"], report["tracing"]
    rpc_rows = [{"method": k, **{x: y for x, y in v.items() if x != "latency_ms"},
                 **{f"{p} ms": v["latency_ms"][p] for p in ("p50", "p90", "p99", "max")}}
                for k, v in report["rpc"].items()]  # fmt: skip
    named = lambda rows: table(rows, ["name", "count", "rate_per_s"])  # noqa: E731
    sections = [
        f"<h1>amqpscope report: {esc(title)}</h1>",
        "<h2>Capture</h2>",
        kv(report["capture"]),
        "<h2>Message rates</h2>",
        line_plot("messages per second", _rates(a, origin), "msg/s"),
        "<h2>Latencies over time</h2>",
        line_plot("latency", _latencies(a, origin), "ms"),
        line_plot("consumer deliveries in flight", in_flight, "msgs"),
        "<h2>Connections</h2>",
        table(report["connections"]),
        "<h2>Methods</h2>",
        table([{"method": k, "count": v} for k, v in sorted(report["methods"].items(), key=lambda kv: -kv[1])]),
        "<h2>Reply codes</h2>",
        table([{"method and code": k, "count": v} for k, v in report["reply_codes"].items()]),
        "<h2>Exchanges</h2>",
        named(report["exchanges"]),
        "<h2>Queues</h2>",
        named(report["queues"]),
        "<h2>Routing keys</h2>",
        named(report["routing_keys"]),
        "<h2>Synchronous methods</h2>",
        table(rpc_rows),
        "<h3>Unanswered requests</h3>",
        table(report["rpc_unanswered"]),
        "<h2>Publisher confirms</h2>",
        kv(conf),
        table(conf["per_channel"]),
        "<h3>Unconfirmed</h3>",
        table(conf["unconfirmed"]),
        "<h2>Consumer deliveries</h2>",
        kv(dlv),
        table(dlv["per_channel"]),
        "<h3>Unacked</h3>",
        table(dlv["unacked"]),
        "<h3>Bad acknowledgements</h3>",
        table(dlv["bad_acks"]),
        "<h2>Heartbeats and connection ends</h2>",
        table(report["heartbeats"]["connections"]),
        "<h2>Tracing</h2>",
        kv(tr["messages"]),
        kv(tr["rpc"]),
        table(tr["rpc"]["unanswered_list"]),
        "<h2>Security audit</h2>",
        kv(report["security"]),
        table(report["security"]["connections"]),
        "<h2>Findings</h2>",
        table([{"rule": k, "count": v} for k, v in report["findings"].items()]),
    ]
    return ("<!DOCTYPE html><html><head><meta charset=utf-8>"
            f"<title>amqpscope: {esc(title)}</title><style>{CSS}</style></head><body>"
            + "\n".join(sections) + "</body></html>\n")  # fmt: skip

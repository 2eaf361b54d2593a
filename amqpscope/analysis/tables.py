"""The stats report as rich tables for a terminal."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.table import Table

from ..diagnose.text import render as render_diagnosis

MAX_ROWS = 30  # rows per listing table on a terminal; the JSON report has them all (up to its cap)


def _lat(d: dict[str, Any] | None) -> str:
    if not d or not d.get("count"):
        return "-"
    return f"p50 {d['p50']} · p90 {d.get('p90', '-')} · p99 {d['p99']} · max {d.get('max', '-')} ms (n={d['count']})"


def _v(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}"
    if isinstance(v, dict):
        return ", ".join(f"{k}: {x}" for k, x in v.items()) or "-"
    if isinstance(v, (list, tuple)):
        return ", ".join(map(str, v)) or "-"
    return str(v)


def _kv(title: str, rows: list[tuple[str, Any]]) -> Table:
    t = Table(title=title, show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column()
    for k, v in rows:
        t.add_row(k, _v(v))
    return t


@dataclass(frozen=True, slots=True)
class Col:
    """A listing's column: ``drop`` > 0 is the order in which it is left out on a narrow terminal
    (highest first; 0 never); an ``ident`` (address, queue, tag, method) is never wrapped nor cut."""

    key: str
    heading: str
    drop: int = 0
    ident: bool = False


TEXT_MIN = 12  # a wrapping column is not made narrower than this (or its longest word)


def _fit(cols: list[Col], cells: dict[str, list[str]], width: int) -> tuple[list[Col], list[int]]:
    """The columns kept and their widths for a table at most ``width`` wide (borders and padding
    take 3 columns each, plus 1): the least important are left out first, the rest get at least
    their minimum (all of an identifier or number, the longest word of a text)."""

    def natural(c: Col) -> int:
        return max([len(c.heading), *(len(v) for v in cells[c.key])])

    def minimum(c: Col) -> int:
        heading_words = [len(w) for w in c.heading.split()]
        if c.ident or all(_is_number(v) for v in cells[c.key]):
            return max([*heading_words, *(len(v) for v in cells[c.key])])  # the heading may wrap
        words = [len(w) for v in cells[c.key] for w in v.split()]
        return max([min(natural(c), TEXT_MIN), *heading_words, *words])

    kept = list(cols)
    while sum(minimum(c) for c in kept) + 3 * len(kept) + 1 > width and any(c.drop for c in kept):
        worst = max(c.drop for c in kept)
        kept.remove([c for c in kept if c.drop == worst][-1])
    widths = [minimum(c) for c in kept]
    spare = width - sum(widths) - 3 * len(kept) - 1
    # the columns grow back towards their natural width, those nearest it first (fewer wrapped cells)
    for i in sorted(range(len(kept)), key=lambda i: natural(kept[i]) - widths[i]):
        grow = max(0, min(spare, natural(kept[i]) - widths[i]))
        widths[i] += grow
        spare -= grow
    return kept, widths


def _is_number(v: str) -> bool:
    try:
        float(v)
    except ValueError:
        return v == "-"
    return True


def _listing(console: Console, title: str, rows: list[dict[str, Any]], columns: list[Col | tuple[str, str]],
             total: int | None = None) -> Table:  # fmt: skip
    """A table of dict rows that fits the console: numbers right-aligned, identifiers whole, the
    least important columns left out when it is narrow (the title says which)."""
    shown = rows[:MAX_ROWS]
    more = (total if total is not None else len(rows)) - len(shown)
    cols = [c if isinstance(c, Col) else Col(*c) for c in columns]
    cells = {c.key: [_v(r.get(c.key)) for r in shown] for c in cols}
    kept, widths = _fit(cols, cells, console.width)
    note = f" (first {len(shown)} of {len(shown) + more})" if more > 0 else ""
    left_out = [c.heading for c in cols if c not in kept]
    if left_out:
        note += f" — narrow terminal, without: {', '.join(left_out)} (-T json has them)"
    t = Table(title=title + note, title_justify="left")
    for c, w in zip(kept, widths, strict=True):
        numeric = bool(shown) and all(isinstance(r.get(c.key), (int, float)) and not isinstance(r.get(c.key), bool)
                                      for r in shown)  # fmt: skip
        t.add_column(c.heading, justify="right" if numeric else "left", width=w,
                     no_wrap=c.ident or numeric, overflow="fold")  # fmt: skip
    for i in range(len(shown)):
        t.add_row(*(cells[c.key][i] for c in kept))
    return t


def _connections(report: dict[str, Any]) -> str:
    """The count of connections decoded, and of TLS connections that could not be: never a bare 0
    for a capture of AMQPS without keys."""
    total = report["connections_total"]
    tls = sum(len(b["connections"]) for b in report.get("not_seen", []) if b["rule"] == "tls.undecrypted")
    return f"{total} decoded, {tls} TLS not decrypted" if tls else str(total)


def render(report: dict[str, Any], console: Console) -> None:
    diagnosis = report.get("diagnosis")
    if diagnosis is not None:  # what went wrong comes first (docs/diagnose.md)
        render_diagnosis(console, diagnosis["causes"], diagnosis["quirks"], title="Diagnosis",
                         not_seen=report.get("not_seen"))  # fmt: skip
    cap = report["capture"]
    console.print(_kv("Capture", [("duration", f"{cap['duration_s']} s"), ("frames", cap["frames"]),
                                  ("messages", cap["messages"]), ("body bytes", cap["body_bytes"]),
                                  ("connections", _connections(report)),
                                  ("channels opened", report["channels_opened"]),
                                  ("gaps / resyncs / malformed", f"{cap['gaps']} / {cap['resyncs']} / {cap['malformed']}")]))  # fmt: skip

    conns = [dict(c, library=f"{c['client_product'] or '?'} {c['client_version'] or ''}".strip(),
                  close="" if c["close_code"] is None else f"{c['close_code']} by {c['close_by']}")
             for c in report["connections"]]  # fmt: skip
    console.print(_listing(console, "Connections", conns, [
        Col("conn", "conn", ident=True), Col("client", "client", ident=True), Col("library", "library", 1),
        Col("user", "user", 5), Col("vhost", "vhost", 4), Col("mechanism", "auth", 7),
        Col("frame_max", "frame max", 9), Col("channel_max", "channel max", 10), Col("heartbeat", "heartbeat s", 8),
        Col("channels_opened", "channels", 6), Col("close", "close", 3), Col("ended", "ended", 2)],
        report["connections_total"]))  # fmt: skip

    if report.get("channels"):
        chans = [dict(c, close="" if c["close_code"] is None else f"{c['close_code']} by {c['close_by']}",
                      life=None if c["opened"] is None or c["closed"] is None else c["closed"] - c["opened"])
                 for c in report["channels"]]  # fmt: skip
        console.print(_listing(console, "Channels", chans, [
            Col("conn", "conn"), Col("channel", "ch"), Col("mode", "mode", 4), Col("life", "open s", 6),
            Col("methods", "methods", 5), Col("publishes", "publish", 3), Col("deliveries", "deliver", 3),
            Col("returns", "return", 7), Col("client_settles", "settles", 8), Col("server_confirms", "confirms", 7),
            Col("body_bytes", "body bytes", 9), Col("close", "close", 2), Col("ended", "ended", 1)]))  # fmt: skip

    t = Table(title="Methods", title_justify="left")
    t.add_column("method")
    t.add_column("count", justify="right")
    for name, n in sorted(report["methods"].items(), key=lambda kv: (-kv[1], kv[0])):
        t.add_row(name, str(n))
    console.print(t)

    for key, title in (("exchanges", "Exchanges (publishes)"), ("queues", "Queues (declare/bind/consume/get…)"),
                       ("routing_keys", "Routing keys (publishes)")):  # fmt: skip
        if report[key]:
            console.print(_listing(console, title, report[key], [Col("name", "name", ident=True), Col("count", "count"),
                                                                  Col("rate_per_s", "per s", 1)]))

    if report["rpc"]:
        rows = [{"method": k, **v, **{p: v["latency_ms"][p] for p in ("p50", "p90", "p99", "max")}}
                for k, v in report["rpc"].items()]  # fmt: skip
        console.print(_listing(console, "Synchronous methods (request → reply, ms)", rows, [
            Col("method", "method", ident=True), Col("count", "count"), Col("answered", "answered", 1),
            Col("unanswered", "unanswered"), Col("closed_by_peer", "closed by peer", 5), Col("no_wait", "no-wait", 4),
            Col("p50", "p50"), Col("p90", "p90", 3), Col("p99", "p99"), Col("max", "max", 2)]))  # fmt: skip
    if report["rpc_unanswered"]:
        console.print(_listing(console, "Requests without their reply", report["rpc_unanswered"], [
            Col("conn", "conn"), Col("channel", "ch"), Col("dir", "dir", 2), Col("method", "method", ident=True),
            Col("packet", "packet"), Col("outcome", "outcome")], report["rpc_unanswered_total"]))  # fmt: skip

    c = report["confirms"]
    console.print(_kv("Publisher confirms", [
        ("published (in confirm mode)", f"{c['published']} ({c['published_in_confirm_mode']})"),
        ("acked / nacked / returned (then acked)", f"{c['acked']} / {c['nacked']} / {c['returned']} "
                                                   f"({c['returned_then_acked']})"),
        ("ack frames (multiple) / nack frames (multiple)",
         f"{c['ack_frames']} ({c['ack_multiple']}) / {c['nack_frames']} ({c['nack_multiple']})"),
        ("unknown tags / acks before confirm.select was seen", f"{c['unknown_tag']} / {c['select_not_seen']}"), ("unconfirmed at end / lost at close", f"{c['outstanding']} / {c['lost_at_close']}"),
        ("publish → confirm", _lat(c["latency_ms"]))]))  # fmt: skip
    if c["unconfirmed"]:
        console.print(_listing(console, "Unconfirmed publishes", c["unconfirmed"], [
            Col("conn", "conn"), Col("channel", "ch"), Col("seq", "seq"), Col("packet", "packet", 2),
            Col("exchange", "exchange", ident=True), Col("routing_key", "routing key", ident=True),
            Col("returned", "returned", 3), Col("fate", "fate")]))  # fmt: skip

    d = report["deliveries"]
    console.print(_kv("Consumer deliveries", [
        ("delivered (deliver / get-ok / no-ack)", f"{d['delivered']} ({d['via_deliver']} / {d['via_get']} / {d['no_ack']})"),
        ("acked / nacked / rejected / requeued", f"{d['acked']} / {d['nacked']} / {d['rejected']} / {d['requeued']}"),
        ("ack frames (multiple) / nack frames (multiple) / reject frames",
         f"{d['ack_frames']} ({d['ack_multiple']}) / {d['nack_frames']} ({d['nack_multiple']}) / {d['reject_frames']}"),
        ("redelivered", d["redelivered"]),
        ("unknown tag / double ack / wrong channel", f"{d['unknown_tag']} / {d['double_ack']} / {d['wrong_channel']}"),
        ("voided by recover / rolled back / released at close",
         f"{d['recovered']} / {d['rolled_back']} / {d['released_at_close']}"),
        ("settles of deliveries made before the capture", d["before_capture"]),
        ("unacked at end", d["outstanding"]), ("max in flight (over prefetch)", f"{d['max_in_flight']} ({d['over_prefetch']})"),
        ("server-initiated cancels", d["server_cancels"]), ("deliver → ack", _lat(d["latency_ms"]))]))  # fmt: skip
    if d["consumers"]:
        console.print(_listing(console, "Consumers", d["consumers"], [
            Col("conn", "conn"), Col("channel", "ch"), Col("consumer_tag", "consumer", ident=True),
            Col("no_ack", "no-ack", 2), Col("prefetch", "prefetch"), Col("delivered", "delivered"),
            Col("max_in_flight", "max in flight", 1)]))  # fmt: skip
    limited = [dict(r, over_prefetch=r.get("over_prefetch", 0)) for r in d["per_channel"]
               if r.get("prefetch") or r.get("global_prefetch") or r.get("max_in_flight")]  # fmt: skip
    if limited:
        console.print(_listing(console, "In flight against prefetch, per channel", limited, [
            Col("conn", "conn"), Col("channel", "ch"), Col("prefetch", "prefetch"), Col("global_prefetch", "global", 2),
            Col("max_in_flight", "max in flight"), Col("time_at_prefetch_limit_s", "s at limit"),
            Col("over_prefetch", "over limit", 1)]))  # fmt: skip
    if d["unacked"]:
        console.print(_listing(console, "Unacked deliveries", [dict(u, consumer=u["consumer_tag"] or "(get)") for u in d["unacked"]], [
            Col("conn", "conn"), Col("channel", "ch"), Col("delivery_tag", "tag"),
            Col("consumer", "consumer", ident=True), Col("routing_key", "routing key", ident=True),
            Col("redelivered", "redelivered", 2), Col("fate", "fate")]))  # fmt: skip
    if d["bad_acks"]:
        console.print(_listing(console, "Bad acknowledgements", d["bad_acks"], [
            Col("conn", "conn"), Col("channel", "ch"), Col("method", "method", ident=True), Col("delivery_tag", "tag"),
            Col("multiple", "multiple", 2), Col("packet", "packet", 1), Col("problem", "problem")]))  # fmt: skip

    h = report["heartbeats"]
    console.print(_listing(console, f"Heartbeats and connection ends ({h['heartbeat_frames']} heartbeat frames)",
                           h["connections"], [
        Col("conn", "conn"), Col("proposed", "proposed s", 5), Col("negotiated", "negotiated s"),
        Col("heartbeats_c2s", "beats c→s", 4), Col("heartbeats_s2c", "beats s→c", 4),
        Col("max_silence_c2s", "max silence c→s", 2), Col("max_silence_s2c", "max silence s→c", 2),
        Col("idle_before_end_c2s", "idle at end c→s", 3), Col("idle_before_end_s2c", "idle at end s→c", 3),
        Col("verdict", "verdict")]))  # fmt: skip

    b = report.get("blocked") or {}
    if b.get("list"):
        console.print(_listing(console, f"Blocked and flow-stopped periods ({_v(b['seconds'])} s)", b["list"], [
            Col("conn", "conn"), Col("channel", "ch"), Col("kind", "kind"), Col("reason", "reason"),
            Col("duration_s", "seconds"), Col("publishes_during", "publishes meanwhile", 1)], b["periods"]))  # fmt: skip

    tr = report["tracing"]
    m, rpc = tr["messages"], tr["rpc"]
    console.print(_kv("Tracing", [
        ("deliveries matched to a publish (cross-connection)", f"{m['matched_deliveries']} ({m['cross_connection']})"),
        ("unmatched deliveries / redeliveries", f"{m['unmatched_deliveries']} / {m['redelivered']}"),
        ("fan-out (deliveries: publishes)", m["fanout"]),
        ("publish → deliver", _lat(m["publish_to_deliver_ms"])),
        ("RPC requests (direct reply-to) / replied / completed / unanswered",
         f"{rpc['requests']} ({rpc['direct_reply_to']}) / {rpc['replied']} / {rpc['completed']} / {rpc['unanswered']}"),
        ("RPC service time (request → reply published)", _lat(rpc["service_ms"])),
        ("RPC round trip (request → reply delivered)", _lat(rpc["round_trip_ms"]))]))  # fmt: skip
    if rpc["pairs"]:
        console.print(_listing(console, "RPC pairs (correlation-id)", rpc["pairs"], [
            Col("correlation_id", "correlation-id", ident=True), Col("reply_to", "reply-to", ident=True),
            Col("request_conn", "request conn"), Col("request_packet", "request packet", 2),
            Col("reply_conn", "reply conn"), Col("reply_packet", "reply packet", 2), Col("service_ms", "service ms", 1),
            Col("round_trip_ms", "round trip ms")]))  # fmt: skip

    s = report["security"]
    console.print(_kv("Security audit", [
        ("users", s["users"]), ("vhosts", s["vhosts"]), ("mechanisms", s["mechanisms"]),
        ("client libraries", s["client_libraries"]), ("issues", s["issues"] or "none")]))  # fmt: skip
    if any(e["password"] for e in s["connections"]):
        console.print(_listing(console, "Credentials (shown because of --show-credentials)", s["connections"], [
            Col("conn", "conn"), Col("user", "user", ident=True), Col("password", "password", ident=True),
            Col("vhost", "vhost"), Col("mechanism", "mechanism", 1), Col("outcome", "outcome")]))  # fmt: skip

    if report["reply_codes"]:
        console.print(_kv("Reply codes", list(report["reply_codes"].items())))
    sev = report.get("findings_by_severity") or {}
    title = "Findings by rule" + (f" ({_v(sev)})" if sev else "")
    console.print(_kv(title, sorted(report["findings"].items(), key=lambda kv: (-kv[1], kv[0])) or [("none", "")]))

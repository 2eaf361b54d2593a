"""The stats report as rich tables for a terminal."""

from __future__ import annotations

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


def _listing(title: str, rows: list[dict[str, Any]], columns: list[tuple[str, str]], total: int | None = None) -> Table:
    """A table of dict rows: columns are (key, heading); numbers right-aligned."""
    shown = rows[:MAX_ROWS]
    more = (total if total is not None else len(rows)) - len(shown)
    t = Table(title=title + (f" (first {len(shown)} of {len(shown) + more})" if more > 0 else ""),
              title_justify="left")  # fmt: skip
    for key, heading in columns:
        numeric = bool(shown) and all(isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)
                                      for r in shown)  # fmt: skip
        t.add_column(heading, justify="right" if numeric else "left")
    for r in shown:
        t.add_row(*(_v(r.get(key)) for key, _ in columns))
    return t


def render(report: dict[str, Any], console: Console) -> None:
    diagnosis = report.get("diagnosis")
    if diagnosis is not None:  # what went wrong comes first (docs/diagnose.md)
        render_diagnosis(console, diagnosis["causes"], diagnosis["quirks"], title="Diagnosis")
    cap = report["capture"]
    console.print(_kv("Capture", [("duration", f"{cap['duration_s']} s"), ("frames", cap["frames"]),
                                  ("messages", cap["messages"]), ("body bytes", cap["body_bytes"]),
                                  ("connections", report["connections_total"]),
                                  ("channels opened", report["channels_opened"]),
                                  ("gaps / resyncs / malformed", f"{cap['gaps']} / {cap['resyncs']} / {cap['malformed']}")]))  # fmt: skip

    conns = [dict(c, library=f"{c['client_product'] or '?'} {c['client_version'] or ''}".strip(),
                  close="" if c["close_code"] is None else f"{c['close_code']} by {c['close_by']}")
             for c in report["connections"]]  # fmt: skip
    console.print(_listing("Connections", conns, [
        ("conn", "conn"), ("client", "client"), ("library", "library"), ("user", "user"), ("vhost", "vhost"),
        ("mechanism", "auth"), ("frame_max", "frame_max"), ("channel_max", "channel_max"),
        ("heartbeat", "heartbeat"), ("channels_opened", "channels"), ("close", "close"), ("ended", "ended")],
        report["connections_total"]))  # fmt: skip

    if report.get("channels"):
        chans = [dict(c, close="" if c["close_code"] is None else f"{c['close_code']} by {c['close_by']}",
                      life=None if c["opened"] is None or c["closed"] is None else c["closed"] - c["opened"])
                 for c in report["channels"]]  # fmt: skip
        console.print(_listing("Channels", chans, [
            ("conn", "conn"), ("channel", "ch"), ("mode", "mode"), ("life", "open s"), ("methods", "methods"),
            ("publishes", "publish"), ("deliveries", "deliver"), ("returns", "return"),
            ("client_settles", "ack/nack/reject"), ("server_confirms", "confirms"), ("body_bytes", "body bytes"),
            ("close", "close"), ("ended", "ended")]))  # fmt: skip

    t = Table(title="Methods", title_justify="left")
    t.add_column("method")
    t.add_column("count", justify="right")
    for name, n in sorted(report["methods"].items(), key=lambda kv: (-kv[1], kv[0])):
        t.add_row(name, str(n))
    console.print(t)

    for key, title in (("exchanges", "Exchanges (publishes)"), ("queues", "Queues (declare/bind/consume/get…)"),
                       ("routing_keys", "Routing keys (publishes)")):  # fmt: skip
        if report[key]:
            console.print(_listing(title, report[key], [("name", "name"), ("count", "count"), ("rate_per_s", "per s")]))

    if report["rpc"]:
        rows = [{"method": k, **v, **{p: v["latency_ms"][p] for p in ("p50", "p90", "p99", "max")}}
                for k, v in report["rpc"].items()]  # fmt: skip
        console.print(_listing("Synchronous methods (request → reply, ms)", rows, [
            ("method", "method"), ("count", "count"), ("answered", "answered"), ("unanswered", "unanswered"),
            ("closed_by_peer", "closed by peer"), ("no_wait", "no-wait"), ("p50", "p50"), ("p90", "p90"),
            ("p99", "p99"), ("max", "max")]))  # fmt: skip
    if report["rpc_unanswered"]:
        console.print(_listing("Requests without their reply", report["rpc_unanswered"], [
            ("conn", "conn"), ("channel", "ch"), ("dir", "dir"), ("method", "method"), ("packet", "packet"),
            ("outcome", "outcome")], report["rpc_unanswered_total"]))  # fmt: skip

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
        console.print(_listing("Unconfirmed publishes", c["unconfirmed"], [
            ("conn", "conn"), ("channel", "ch"), ("seq", "seq"), ("packet", "packet"), ("exchange", "exchange"),
            ("routing_key", "routing key"), ("returned", "returned"), ("fate", "fate")]))  # fmt: skip

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
        console.print(_listing("Consumers", d["consumers"], [
            ("conn", "conn"), ("channel", "ch"), ("consumer_tag", "consumer"), ("no_ack", "no-ack"),
            ("prefetch", "prefetch"), ("delivered", "delivered"), ("max_in_flight", "max in flight")]))  # fmt: skip
    limited = [dict(r, over_prefetch=r.get("over_prefetch", 0)) for r in d["per_channel"]
               if r.get("prefetch") or r.get("global_prefetch") or r.get("max_in_flight")]  # fmt: skip
    if limited:
        console.print(_listing("In flight against prefetch, per channel", limited, [
            ("conn", "conn"), ("channel", "ch"), ("prefetch", "prefetch"), ("global_prefetch", "global"),
            ("max_in_flight", "max in flight"), ("time_at_prefetch_limit_s", "s at limit"),
            ("over_prefetch", "over limit")]))  # fmt: skip
    if d["unacked"]:
        console.print(_listing("Unacked deliveries", [dict(u, consumer=u["consumer_tag"] or "(get)") for u in d["unacked"]], [
            ("conn", "conn"), ("channel", "ch"), ("delivery_tag", "tag"), ("consumer", "consumer"),
            ("routing_key", "routing key"), ("redelivered", "redelivered"), ("fate", "fate")]))  # fmt: skip
    if d["bad_acks"]:
        console.print(_listing("Bad acknowledgements", d["bad_acks"], [
            ("conn", "conn"), ("channel", "ch"), ("method", "method"), ("delivery_tag", "tag"),
            ("multiple", "multiple"), ("packet", "packet"), ("problem", "problem")]))  # fmt: skip

    h = report["heartbeats"]
    console.print(_listing(f"Heartbeats and connection ends ({h['heartbeat_frames']} heartbeat frames)",
                           h["connections"], [
        ("conn", "conn"), ("proposed", "proposed s"), ("negotiated", "negotiated s"), ("heartbeats_c2s", "beats c→s"),
        ("heartbeats_s2c", "beats s→c"), ("max_silence_c2s", "max silence c→s"),
        ("max_silence_s2c", "max silence s→c"), ("idle_before_end_c2s", "idle at end c→s"),
        ("idle_before_end_s2c", "idle at end s→c"), ("verdict", "verdict")]))  # fmt: skip

    b = report.get("blocked") or {}
    if b.get("list"):
        console.print(_listing(f"Blocked and flow-stopped periods ({_v(b['seconds'])} s)", b["list"], [
            ("conn", "conn"), ("channel", "ch"), ("kind", "kind"), ("reason", "reason"),
            ("duration_s", "seconds"), ("publishes_during", "publishes meanwhile")], b["periods"]))  # fmt: skip

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
        console.print(_listing("RPC pairs (correlation-id)", rpc["pairs"], [
            ("correlation_id", "correlation-id"), ("reply_to", "reply-to"), ("request_conn", "req conn"),
            ("request_packet", "req packet"), ("reply_conn", "reply conn"), ("reply_packet", "reply packet"),
            ("service_ms", "service ms"), ("round_trip_ms", "round trip ms")]))  # fmt: skip

    s = report["security"]
    console.print(_kv("Security audit", [
        ("users", s["users"]), ("vhosts", s["vhosts"]), ("mechanisms", s["mechanisms"]),
        ("client libraries", s["client_libraries"]), ("issues", s["issues"] or "none")]))  # fmt: skip
    if any(e["password"] for e in s["connections"]):
        console.print(_listing("Credentials (shown because of --show-credentials)", s["connections"], [
            ("conn", "conn"), ("user", "user"), ("password", "password"), ("vhost", "vhost"),
            ("mechanism", "mechanism"), ("outcome", "outcome")]))  # fmt: skip

    if report["reply_codes"]:
        console.print(_kv("Reply codes", list(report["reply_codes"].items())))
    sev = report.get("findings_by_severity") or {}
    title = "Findings by rule" + (f" ({_v(sev)})" if sev else "")
    console.print(_kv(title, sorted(report["findings"].items(), key=lambda kv: (-kv[1], kv[0])) or [("none", "")]))

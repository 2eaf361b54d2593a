"""The stats report as rich tables for a terminal."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def _lat(d: dict[str, Any] | None) -> str:
    if not d or not d.get("count"):
        return "-"
    return f"p50 {d['p50']} · p90 {d.get('p90', '-')} · p99 {d['p99']} · max {d.get('max', '-')} ms (n={d['count']})"


def _kv(title: str, rows: list[tuple[str, Any]]) -> Table:
    t = Table(title=title, show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column()
    for k, v in rows:
        t.add_row(k, str(v))
    return t


def render(report: dict[str, Any], console: Console) -> None:
    cap = report["capture"]
    console.print(_kv("Capture", [("duration", f"{cap['duration_s']} s"), ("frames", cap["frames"]),
                                  ("messages", cap["messages"]), ("body bytes", cap["body_bytes"]),
                                  ("connections", report["connections_total"]),
                                  ("channels opened", report["channels_opened"]),
                                  ("gaps / resyncs / malformed", f"{cap['gaps']} / {cap['resyncs']} / {cap['malformed']}")]))  # fmt: skip

    t = Table(title="Connections", title_justify="left")
    for col in ("conn", "client", "library", "user", "vhost", "frame_max", "channel_max", "heartbeat", "channels",
                "close", "ended"):  # fmt: skip
        t.add_column(col)
    for c in report["connections"]:
        lib = f"{c['client_product'] or '?'} {c['client_version'] or ''}".strip()
        close = "" if c["close_code"] is None else f"{c['close_code']} by {c['close_by']}"
        t.add_row(str(c["conn"]), c["client"], lib, str(c["user"]), str(c["vhost"]), str(c["frame_max"]),
                  str(c["channel_max"]), str(c["heartbeat"]), str(c["channels_opened"]), close, str(c["ended"]))  # fmt: skip
    console.print(t)

    t = Table(title="Methods", title_justify="left")
    t.add_column("method")
    t.add_column("count", justify="right")
    for name, n in sorted(report["methods"].items(), key=lambda kv: (-kv[1], kv[0])):
        t.add_row(name, str(n))
    console.print(t)

    for key, title in (("exchanges", "Exchanges (publishes)"), ("queues", "Queues (declare/bind/consume/get…)"),
                       ("routing_keys", "Routing keys (publishes)")):  # fmt: skip
        rows = report[key]
        if not rows:
            continue
        t = Table(title=title, title_justify="left")
        t.add_column("name")
        t.add_column("count", justify="right")
        t.add_column("per s", justify="right")
        for r in rows[:20]:
            t.add_row(r["name"], str(r["count"]), str(r["rate_per_s"]))
        console.print(t)

    if report["rpc"]:
        t = Table(title="Synchronous methods (request → reply)", title_justify="left")
        for col in ("method", "count", "answered", "unanswered", "closed by peer", "no-wait", "p50 ms", "p99 ms"):
            t.add_column(col, justify="left" if col == "method" else "right")
        for name, r in report["rpc"].items():
            lat = r["latency_ms"]
            t.add_row(name, str(r["count"]), str(r["answered"]), str(r["unanswered"]), str(r["closed_by_peer"]),
                      str(r["no_wait"]), str(lat["p50"] if lat["p50"] is not None else "-"),
                      str(lat["p99"] if lat["p99"] is not None else "-"))  # fmt: skip
        console.print(t)

    c = report["confirms"]
    console.print(_kv("Publisher confirms", [
        ("published (in confirm mode)", f"{c['published']} ({c['published_in_confirm_mode']})"),
        ("acked / nacked / returned", f"{c['acked']} / {c['nacked']} / {c['returned']}"),
        ("ack frames (multiple) / nack frames (multiple)",
         f"{c['ack_frames']} ({c['ack_multiple']}) / {c['nack_frames']} ({c['nack_multiple']})"),
        ("unknown tags", c["unknown_tag"]), ("unconfirmed at end / lost at close", f"{c['outstanding']} / {c['lost_at_close']}"),
        ("publish → confirm", _lat(c["latency_ms"]))]))  # fmt: skip

    d = report["deliveries"]
    console.print(_kv("Consumer deliveries", [
        ("delivered (deliver / get-ok / no-ack)", f"{d['delivered']} ({d['via_deliver']} / {d['via_get']} / {d['no_ack']})"),
        ("acked / nacked / rejected / requeued", f"{d['acked']} / {d['nacked']} / {d['rejected']} / {d['requeued']}"),
        ("redelivered", d["redelivered"]),
        ("unknown tag / double ack / wrong channel", f"{d['unknown_tag']} / {d['double_ack']} / {d['wrong_channel']}"),
        ("voided by recover / released at close", f"{d['recovered']} / {d['released_at_close']}"),
        ("unacked at end", d["outstanding"]), ("max in flight", d["max_in_flight"]),
        ("server-initiated cancels", d["server_cancels"]), ("deliver → ack", _lat(d["latency_ms"]))]))  # fmt: skip
    if d["unacked"]:
        t = Table(title="Unacked deliveries", title_justify="left")
        for col in ("conn", "channel", "tag", "consumer", "routing key", "fate"):
            t.add_column(col)
        for u in d["unacked"][:30]:
            t.add_row(str(u["conn"]), str(u["channel"]), str(u["delivery_tag"]), str(u["consumer_tag"] or "(get)"),
                      u["routing_key"], u["fate"])  # fmt: skip
        console.print(t)
    if d["bad_acks"]:
        t = Table(title="Bad acknowledgements", title_justify="left")
        for col in ("conn", "channel", "method", "tag", "multiple", "packet", "problem"):
            t.add_column(col)
        for b in d["bad_acks"][:30]:
            t.add_row(
                *(str(b[k]) for k in ("conn", "channel", "method", "delivery_tag", "multiple", "packet", "problem"))
            )
        console.print(t)

    h = report["heartbeats"]
    t = Table(title="Heartbeats and connection ends", title_justify="left")
    for col in (
        "conn",
        "proposed",
        "negotiated",
        "beats c→s",
        "beats s→c",
        "max silence c→s",
        "max silence s→c",
        "verdict",
    ):
        t.add_column(col)
    for r in h["connections"]:
        t.add_row(str(r["conn"]), str(r["proposed"]), str(r["negotiated"]), str(r["heartbeats_c2s"]),
                  str(r["heartbeats_s2c"]), f"{r['max_silence_c2s']}", f"{r['max_silence_s2c']}", r["verdict"])  # fmt: skip
    console.print(t)

    tr = report["tracing"]
    m, rpc = tr["messages"], tr["rpc"]
    console.print(_kv("Tracing", [
        ("deliveries matched to a publish (cross-connection)", f"{m['matched_deliveries']} ({m['cross_connection']})"),
        ("unmatched deliveries", m["unmatched_deliveries"]), ("fan-out (deliveries: publishes)", m["fanout"]),
        ("publish → deliver", _lat(m["publish_to_deliver_ms"])),
        ("RPC requests (direct reply-to) / replied / completed / unanswered",
         f"{rpc['requests']} ({rpc['direct_reply_to']}) / {rpc['replied']} / {rpc['completed']} / {rpc['unanswered']}"),
        ("RPC round trip", _lat(rpc["round_trip_ms"]))]))  # fmt: skip

    s = report["security"]
    console.print(_kv("Security audit", [
        ("users", s["users"]), ("vhosts", s["vhosts"]), ("mechanisms", s["mechanisms"]),
        ("client libraries", s["client_libraries"]), ("issues", s["issues"] or "none")]))  # fmt: skip

    rows = [(k, v) for k, v in report["reply_codes"].items()]
    if rows:
        console.print(_kv("Reply codes", rows))
    console.print(_kv("Findings", list(report["findings"].items()) or [("none", "")]))

"""One-line summaries of events: the arguments that matter, the way an operator reads them."""

from __future__ import annotations

from typing import Any

from ..events import Connection, Event, Finding, Frame, Gap, Ledger, Malformed, Message, ProtocolHeader, Resync

# the arguments worth a glance, per method; anything not listed shows its non-reserved arguments
_KEY_ARGS: dict[str, tuple[str, ...]] = {
    "connection.start": ("version_major", "version_minor", "mechanisms"),
    "connection.start-ok": ("mechanism", "response"),
    "connection.tune": ("channel_max", "frame_max", "heartbeat"),
    "connection.tune-ok": ("channel_max", "frame_max", "heartbeat"),
    "connection.open": ("virtual_host",),
    "connection.close": ("reply_code", "reply_text", "class_id", "method_id"),
    "channel.close": ("reply_code", "reply_text", "class_id", "method_id"),
    "basic.publish": ("exchange", "routing_key", "mandatory"),
    "basic.deliver": ("consumer_tag", "delivery_tag", "redelivered", "exchange", "routing_key"),
    "basic.get-ok": ("delivery_tag", "redelivered", "exchange", "routing_key", "message_count"),
    "basic.return": ("reply_code", "reply_text", "exchange", "routing_key"),
    "basic.ack": ("delivery_tag", "multiple"),
    "basic.nack": ("delivery_tag", "multiple", "requeue"),
    "basic.reject": ("delivery_tag", "requeue"),
    "basic.consume": ("queue", "consumer_tag", "no_ack", "exclusive"),
    "basic.qos": ("prefetch_count", "prefetch_size", "global_"),
    "queue.declare": ("queue", "passive", "durable", "exclusive", "auto_delete"),
    "queue.declare-ok": ("queue", "message_count", "consumer_count"),
    "exchange.declare": ("exchange", "type", "passive", "durable"),
}
_SKIP = {"client_properties", "server_properties", "arguments", "locales"}


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, str):
        s = v.replace("\x00", "\\0")
        return repr(s) if (not s or " " in s) else s
    if isinstance(v, (bytes, bytearray)):
        return "0x" + bytes(v[:16]).hex() + ("…" if len(v) > 16 else "")
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}={_fmt(x)}" for k, x in list(v.items())[:4]) + ("…" if len(v) > 4 else "") + "}"
    return str(v)


def args_summary(method: str | None, args: dict[str, Any] | None) -> str:
    if not args:
        return ""
    keys = _KEY_ARGS.get(method or "")
    if keys is None:
        keys = tuple(k for k in args if not k.startswith("reserved") and k not in _SKIP)
    return " ".join(f"{k.rstrip('_')}={_fmt(args[k])}" for k in keys if k in args)


def summary(ev: Event) -> str:
    """What the event says, without the base columns (time, connection, direction, channel)."""
    if isinstance(ev, Frame):
        if ev.type == "method":
            text = f"{ev.method} {args_summary(ev.method, ev.args)}".rstrip()
        elif ev.type == "header":
            props = ev.properties or {}
            shown = ", ".join(f"{k}={_fmt(v)}" for k, v in props.items() if k != "headers")
            text = f"content-header body-size={ev.body_size}" + (f" {shown}" if shown else "")
        elif ev.type == "body":
            text = f"content-body {ev.size} bytes"
        else:
            text = ev.type
        if ev.problem:
            text += f"  [problem: {ev.problem}]"
        return text
    if isinstance(ev, Message):
        ct = ev.properties.get("content_type")
        state = "" if ev.complete else f" INCOMPLETE ({ev.body_received} of {ev.body_size} bytes)"
        return f"message via {ev.method} {ev.body_size} bytes" + (f" {ct}" if ct else "") + state
    if isinstance(ev, ProtocolHeader):
        return f"protocol-header AMQP {ev.version}"
    if isinstance(ev, Connection):
        if ev.state == "open":
            return f"connection open {ev.client} → {ev.server}" + ("" if ev.syn_seen else " (handshake not captured)")
        parts = [f"connection closed ({ev.ended})"]
        if ev.user:
            parts.append(f"user={ev.user}")
        if ev.vhost is not None:
            parts.append(f"vhost={ev.vhost}")
        if ev.client_product:
            parts.append(f"client={ev.client_product} {ev.client_version or ''}".rstrip())
        if ev.close_code is not None:
            parts.append(f"close={ev.close_code} {ev.close_text or ''}".rstrip())
        return " ".join(parts)
    if isinstance(ev, Gap):
        return f"GAP {ev.size} bytes missing from capture" + (f" (lost {ev.lost_frame})" if ev.lost_frame else "")
    if isinstance(ev, Resync):
        return f"RESYNC after {ev.reason}: skipped {ev.skipped} bytes"
    if isinstance(ev, Malformed):
        return f"MALFORMED at stream offset {ev.offset}: {ev.reason}"
    if isinstance(ev, Finding):
        code = f" [{ev.code}]" if ev.code else ""
        return f"{ev.severity.upper()} {ev.rule}{code}: {ev.message}"
    if isinstance(ev, Ledger):
        return ledger_summary(ev)
    return ev.kind


def ledger_summary(ev: Ledger) -> str:
    """``ledger settle basic.ack tag=3 ack latency=1.2 ms (packet 9)``: the entry, then what it set."""
    parts = [f"ledger {ev.entry}"]
    if ev.request:
        parts.append(f"{ev.request} →")
    if ev.method:
        parts.append(ev.method)
    if ev.tag is not None:
        parts.append(f"tag={ev.tag}" + (" multiple" if ev.multiple else ""))
    if ev.outcome:
        parts.append(ev.outcome)
    if ev.count != 1:
        parts.append(f"count={ev.count}")
    for name, value in (("latency", ev.latency), ("duration", ev.duration), ("idle", ev.idle)):
        if value is not None:
            parts.append(f"{name}={value * 1000:.3f} ms")
    if ev.in_flight is not None:
        parts.append(f"in-flight={ev.in_flight}" + (f"/{ev.limit}" if ev.limit else ""))
    elif ev.limit is not None:
        parts.append(f"limit={ev.limit}")
    if ev.consumer_tag:
        parts.append(f"consumer={ev.consumer_tag}")
    if ev.ref_channel is not None:
        parts.append(f"(on channel {ev.ref_channel})")
    if ev.ref_packet is not None:
        parts.append(f"(packet {ev.ref_packet})")
    return " ".join(parts)

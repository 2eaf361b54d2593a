"""Human labels for the report's report-dict keys: ``time_at_prefetch_limit_s`` reads as
"time at prefetch limit (s)". Keys without their own label are spelled out from their parts."""

from __future__ import annotations

LABELS = {
    "conn": "connection", "ch": "channel", "c2s": "client → broker", "s2c": "broker → client",
    "rate_per_s": "rate (/s)", "duration_s": "duration (s)", "time_at_prefetch_limit_s": "time at prefetch limit (s)",
    "max_in_flight": "most unacked at once", "latency_ms": "latency (ms)", "ts": "time (s)",
    "start": "start (s)", "end": "end (s)", "opened": "opened (s)", "closed": "closed (s)",
    "frames_c2s": "frames client → broker", "frames_s2c": "frames broker → client",
    "bytes_c2s": "bytes client → broker", "bytes_s2c": "bytes broker → client",
    "heartbeats_c2s": "heartbeats client → broker", "heartbeats_s2c": "heartbeats broker → client",
    "max_silence_c2s": "longest silence client → broker (s)", "max_silence_s2c": "longest silence broker → client (s)",
    "idle_before_end_c2s": "client silent before the end (s)", "idle_before_end_s2c": "broker silent before the end (s)",
    "close_by": "closed by", "close_code": "close code", "close_text": "close reason", "ended": "ended by",
    "close_ok": "close-ok seen", "closed_for_missed": "closed for missed heartbeats", "missed": "missed heartbeats",
    "proposed": "heartbeat proposed (s)", "negotiated": "heartbeat negotiated (s)", "heartbeat": "heartbeat (s)",
    "frame_max": "frame max", "channel_max": "channel max", "vhost": "virtual host", "p50": "median",
    "ack_frames": "ack frames", "ack_multiple": "ack frames with multiple", "nack_multiple": "nack frames with multiple",
    "unknown_tag": "acks of unknown tags", "double_ack": "acks of settled deliveries",
    "wrong_channel": "acks on the wrong channel", "not_judged": "acks not judged (after a gap)",
    "released_at_close": "released by a close", "outstanding": "unacked at the end",
    "before_capture": "settled, delivered before the capture", "over_prefetch": "delivered over the prefetch",
    "no_ack": "delivered without ack (no-ack)", "via_deliver": "by basic.deliver", "via_get": "by basic.get",
    "consumer_tag": "consumer tag", "delivery_tag": "delivery tag", "routing_key": "routing key",
    "global_prefetch": "channel-wide prefetch", "unacked_by_consumer": "unacked by consumer",
    "client_product": "client library", "client_version": "client version", "client_platform": "client platform",
    "server_product": "broker", "server_version": "broker version", "channels_opened": "channels opened",
    "duration": "duration (s)", "body_bytes": "body bytes", "frame_types": "frame types",
    "start_utc": "start (UTC)", "end_utc": "end (UTC)",
    # frames, not the deliveries or publishes they settle (one multiple ack settles many)
    "client_settles": "ack/nack/reject frames", "server_confirms": "confirm frames (ack/nack)",
}  # fmt: skip


def human(key: str) -> str:
    """A readable label for a report key (never snake_case)."""
    got = LABELS.get(key)
    if got is not None:
        return got
    words = key.split("_")
    unit = ""
    if len(words) > 1 and words[-1] in ("s", "ms"):
        unit = f" ({words.pop()})"
    if len(words) > 1 and words[-1] in ("c2s", "s2c"):
        words[-1] = LABELS[words[-1]]
    return " ".join(words) + unit

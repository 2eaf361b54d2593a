"""One synthetic capture per checkable rule: exactly the intended finding fires, at the right packet.

Each case builds a capture with our own encoder (amqpscope.testing.synth) that is correct except
for one thing, and returns (rule id, packet, severity). The test asserts that the validator's
findings are exactly that one finding — nothing else fires on the otherwise clean traffic.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from amqpscope.dissect.codec import get_codec
from amqpscope.dissect.spec import bundled_spec_path
from amqpscope.dissect.wire import FRAME_METHOD, encode_frame, encode_protocol_header
from amqpscope.events import Finding
from amqpscope.testing.synth import Capture, SynthConn

Case = Callable[[Capture], tuple[str, int, str]]
CASES: dict[str, Case] = {}


def case(fn: Case) -> Case:
    CASES[fn.__name__] = fn
    return fn


def _ready(cap: Capture, channels: tuple[int, ...] = (1,), **tune: int) -> SynthConn:
    c = cap.connection()
    c.handshake(**tune)
    for ch in channels:
        c.open_channel(ch)
    return c


# --- frame rules ------------------------------------------------------------------------------------


@case
def frame_end(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    bad = c.method(1, "basic.qos", prefetch_count=1)[:-1] + b"\x00"
    p = c.send(True, bad)
    c.server(0, "connection.close", reply_code=501, reply_text="FRAME_ERROR")
    c.fin()
    return "frame.end", p, "violation"


@case
def frame_malformed(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    p = c.send(True, b"\x01\x00\x01\xff\xff\xff\xff" + b"\x00" * 16)
    c.fin()
    return "frame.malformed", p, "violation"


@case
def frame_type(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    p = c.send(True, encode_frame(9, 0, b""))
    return "frame.type", p, "violation"


@case
def heartbeat_channel(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    p = c.heartbeat(True, channel=1)
    return "frame.heartbeat-channel", p, "violation"


@case
def heartbeat_size(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    p = c.heartbeat(False, payload=b"\x00\x00")
    return "frame.heartbeat-size", p, "violation"


@case
def connection_method_on_channel(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    p = c.server(1, "connection.blocked", reason="low on memory")
    return "frame.connection-channel", p, "violation"


@case
def method_on_channel_zero(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    p = c.client(0, "basic.qos", prefetch_count=1)
    return "frame.channel-zero", p, "violation"


@case
def content_on_channel_zero(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    p = c.body_frame(True, 0, b"stray")
    return "frame.channel-zero", p, "violation"


@case
def frame_too_large(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap, frame_max=4096)
    c.client(1, "basic.publish", routing_key="q")
    c.header_frame(True, 1, 5000)
    p = c.body_frame(True, 1, b"x" * 5000)
    return "frame.max-size", p, "violation"


@case
def frame_eight_over(cap: Capture) -> tuple[str, int, str]:
    # rabbitmq-c style: a body payload of exactly frame-max (the frame is 8 octets over); RabbitMQ accepts
    c = _ready(cap, frame_max=4096)
    c.client(1, "basic.publish", routing_key="q")
    c.header_frame(True, 1, 4096)
    p = c.body_frame(True, 1, b"x" * 4096)
    return "frame.max-size", p, "deviation"


@case
def frame_before_tune(cap: Capture) -> tuple[str, int, str]:
    c = cap.connection()
    c.protocol_header()
    c.server(0, "connection.start", version_major=0, version_minor=9, mechanisms="PLAIN", locales="en_US")
    p = c.client(0, "connection.start-ok", client_properties={"pad": "x" * 5000}, mechanism="PLAIN",
                 response="\x00u\x00p", locale="en_US")  # fmt: skip
    return "frame.min-size", p, "warning"


@case
def channel_above_max(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap, channels=(), channel_max=10)
    p = c.client(11, "channel.open")
    c.server(11, "channel.open-ok")
    return "frame.channel-max", p, "violation"


@case
def trailing_bytes(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    payload = c.codec.encode_method("basic.qos", {"prefetch_count": 1}) + b"xx"
    p = c.send(True, encode_frame(FRAME_METHOD, 1, payload))
    c.server(1, "basic.qos-ok")
    return "frame.undecodable", p, "violation"


@case
def unknown_method(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    p = c.send(True, encode_frame(FRAME_METHOD, 1, b"\x00\x3c\x03\xe7"))  # 60/999
    return "method.unknown", p, "violation"


@case
def method_between_content(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    c.client(1, "basic.publish", routing_key="q")
    p = c.client(1, "basic.qos", prefetch_count=1)
    c.server(1, "basic.qos-ok")
    return "content.sequence", p, "violation"


@case
def header_without_method(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    p = c.header_frame(True, 1, 0)
    return "content.sequence", p, "violation"


@case
def body_without_header(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    c.client(1, "basic.publish", routing_key="q")
    p = c.body_frame(True, 1, b"x")
    return "content.sequence", p, "violation"


@case
def header_class_mismatch(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    c.client(1, "basic.publish", routing_key="q")
    p = c.header_frame(True, 1, 0, class_id=50)
    return "content.class-id", p, "violation"


@case
def body_overrun(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    c.client(1, "basic.publish", routing_key="q")
    c.header_frame(True, 1, 3)
    p = c.body_frame(True, 1, b"four")
    return "content.body-size", p, "violation"


# --- protocol header and connection grammar ----------------------------------------------------------


@case
def header_other_version(cap: Capture) -> tuple[str, int, str]:
    c = cap.connection()
    p = c.protocol_header("0-9")
    return "protocol.header-version", p, "info"


@case
def frames_after_refused_header(cap: Capture) -> tuple[str, int, str]:
    c = cap.connection()
    c.protocol_header()
    c.send(False, encode_protocol_header("0-9-1"))  # the server refuses (info finding, filtered below)
    p = c.server(0, "connection.start", version_major=0, version_minor=9, mechanisms="PLAIN", locales="en_US")
    return "connection.start.protocol-name", p, "violation"


@case
def no_protocol_header(cap: Capture) -> tuple[str, int, str]:
    c = cap.connection()
    p = c.heartbeat(True)
    return "protocol.header-missing", p, "violation"


@case
def handshake_out_of_order(cap: Capture) -> tuple[str, int, str]:
    c = cap.connection()
    c.protocol_header()
    c.server(0, "connection.start", version_major=0, version_minor=9, mechanisms="PLAIN", locales="en_US")
    c.client(0, "connection.start-ok", mechanism="PLAIN", response="\x00u\x00p", locale="en_US")
    c.server(0, "connection.tune", channel_max=10, frame_max=131072)
    p = c.client(0, "connection.open", virtual_host="/")  # tune-ok skipped
    return "grammar.connection", p, "violation"


@case
def channel_before_open_ok(cap: Capture) -> tuple[str, int, str]:
    c = cap.connection()
    c.protocol_header()
    c.server(0, "connection.start", version_major=0, version_minor=9, mechanisms="PLAIN", locales="en_US")
    c.client(0, "connection.start-ok", mechanism="PLAIN", response="\x00u\x00p", locale="en_US")
    c.server(0, "connection.tune", channel_max=10, frame_max=131072)
    c.client(0, "connection.tune-ok", channel_max=10, frame_max=131072)
    c.client(0, "connection.open", virtual_host="/")
    p = c.client(1, "channel.open")
    c.server(0, "connection.open-ok")
    return "grammar.connection", p, "violation"


@case
def close_during_handshake(cap: Capture) -> tuple[str, int, str]:
    c = cap.connection()
    c.protocol_header()
    c.server(0, "connection.start", version_major=0, version_minor=9, mechanisms="PLAIN", locales="en_US")
    c.client(0, "connection.start-ok", mechanism="PLAIN", response="\x00u\x00p", locale="en_US")
    p = c.server(0, "connection.close", reply_code=403, reply_text="ACCESS_REFUSED")
    c.client(0, "connection.close-ok")
    c.fin()
    return "connection.close.handshake", p, "deviation"


@case
def close_ok_missing(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    p = c.server(0, "connection.close", reply_code=320, reply_text="CONNECTION_FORCED")
    c.fin()  # the end of the connection proves it; the finding points at the unanswered close
    return "connection.close-ok.missing", p, "deviation"


@case
def channel_close_ok_missing(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    p = c.server(1, "channel.close", reply_code=403, reply_text="ACCESS_REFUSED", class_id=50, method_id=10)
    c.cap._add(c.tcp.rst())  # rabbitmq-c resets the connection instead of answering
    return "channel.close-ok.missing", p, "deviation"


@case
def use_after_connection_close(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    c.client(0, "connection.close", reply_code=200, reply_text="bye")
    p = c.client(1, "basic.qos", prefetch_count=1)
    c.server(0, "connection.close-ok")
    return "connection.close.stability", p, "violation"


# --- channels ---------------------------------------------------------------------------------------


@case
def channel_opened_twice(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    p = c.client(1, "channel.open")
    c.server(0, "connection.close", reply_code=504, reply_text="CHANNEL_ERROR", class_id=20, method_id=10)
    c.client(0, "connection.close-ok")
    return "channel.open.state", p, "violation"


@case
def channel_not_open(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    p = c.client(3, "basic.qos", prefetch_count=1)
    return "channel.not-open", p, "violation"


@case
def channel_used_after_close(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    c.close_channel(1)
    p = c.client(1, "basic.qos", prefetch_count=1)
    return "channel.not-open", p, "violation"


@case
def use_after_channel_close(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    c.client(1, "channel.close", reply_code=200, reply_text="bye")
    p = c.client(1, "basic.qos", prefetch_count=1)
    c.server(1, "channel.close-ok")
    return "channel.close.stability", p, "violation"


@case
def grammar_channel_0_9(cap: Capture) -> tuple[str, int, str]:
    # 0-9's queue grammar has no C:UNBIND S:UNBIND-OK: only the grammar can object
    c = _ready(cap)
    p = c.client(1, "queue.unbind", ticket=1, queue="q", exchange="x")
    c.server(1, "queue.unbind-ok")
    return "grammar.channel", p, "violation"


@case
def wrong_direction(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    p = c.client(1, "basic.deliver", consumer_tag="x", delivery_tag=1)
    return "method.direction", p, "violation"


@case
def reply_without_request(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    p = c.server(1, "queue.declare-ok", queue="q")
    return "sync.unexpected-reply", p, "violation"


@case
def reply_to_no_wait(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    c.client(1, "queue.declare", queue="q", no_wait=True)
    p = c.server(1, "queue.declare-ok", queue="q")
    return "sync.unexpected-reply", p, "violation"


@case
def wrong_reply(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    c.client(1, "queue.declare", queue="q")
    p = c.server(1, "queue.bind-ok")
    return "sync.wrong-reply", p, "violation"


@case
def pipelined_requests(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    c.client(1, "queue.declare", queue="a")
    p = c.client(1, "queue.declare", queue="b")
    c.server(1, "queue.declare-ok", queue="a")
    c.server(1, "queue.declare-ok", queue="b")
    return "sync.pipelined", p, "warning"


# --- delivery tags, consumers, transactions ---------------------------------------------------------------


def _consuming(cap: Capture, no_ack: bool = False) -> SynthConn:
    c = _ready(cap, channels=(1, 2))
    c.client(1, "basic.consume", queue="q", consumer_tag="ctag", no_ack=no_ack)
    c.server(1, "basic.consume-ok", consumer_tag="ctag")
    return c


@case
def ack_unknown_tag(cap: Capture) -> tuple[str, int, str]:
    c = _consuming(cap)
    c.deliver(1, 1)
    p = c.client(1, "basic.ack", delivery_tag=2)
    c.server(1, "channel.close", reply_code=406, reply_text="PRECONDITION_FAILED", class_id=60, method_id=80)
    c.client(1, "channel.close-ok")
    return "basic.ack.multiple.exists", p, "violation"


@case
def ack_twice(cap: Capture) -> tuple[str, int, str]:
    c = _consuming(cap)
    c.deliver(1, 1)
    c.client(1, "basic.ack", delivery_tag=1)
    p = c.client(1, "basic.ack", delivery_tag=1)
    return "basic.ack.multiple.exists", p, "violation"


@case
def ack_of_no_ack_delivery(cap: Capture) -> tuple[str, int, str]:
    c = _consuming(cap, no_ack=True)
    c.deliver(1, 1)
    p = c.client(1, "basic.ack", delivery_tag=1)
    return "basic.ack.multiple.exists", p, "violation"


@case
def nack_unknown_tag(cap: Capture) -> tuple[str, int, str]:
    c = _consuming(cap)
    c.deliver(1, 1)
    p = c.client(1, "basic.nack", delivery_tag=5, requeue=True)
    return "basic.nack.multiple.exists", p, "violation"


@case
def ack_on_other_channel(cap: Capture) -> tuple[str, int, str]:
    c = _consuming(cap)
    c.deliver(1, 1)
    p = c.client(2, "basic.ack", delivery_tag=1)
    return "delivery-tag.channel-local", p, "violation"


@case
def delivery_tag_zero(cap: Capture) -> tuple[str, int, str]:
    c = _consuming(cap)
    p = c.server(1, "basic.deliver", consumer_tag="ctag", delivery_tag=0, routing_key="q")
    c.content(False, 1, b"x")
    return "delivery-tag.non-zero", p, "violation"


@case
def confirm_without_select(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    c.publish(1)
    p = c.server(1, "basic.ack", delivery_tag=1)
    return "basic.ack.confirm-mode", p, "violation"


@case
def confirm_beyond_publishes(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    c.client(1, "confirm.select")
    c.server(1, "confirm.select-ok")
    c.publish(1)
    p = c.server(1, "basic.ack", delivery_tag=2)
    return "basic.ack.multiple.exists", p, "violation"


@case
def consumer_tag_reused(cap: Capture) -> tuple[str, int, str]:
    c = _consuming(cap)
    p = c.client(1, "basic.consume", queue="q2", consumer_tag="ctag")
    return "basic.consume.consumer-tag.01", p, "violation"


@case
def consumer_tag_other_channel(cap: Capture) -> tuple[str, int, str]:
    c = _consuming(cap)
    p = c.client(2, "basic.cancel", consumer_tag="ctag")
    c.server(2, "basic.cancel-ok", consumer_tag="ctag")
    return "basic.consume.consumer-tag.02", p, "violation"


@case
def prefetch_exceeded(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    c.client(1, "basic.qos", prefetch_count=2)
    c.server(1, "basic.qos-ok")
    c.client(1, "basic.consume", queue="q", consumer_tag="ctag")
    c.server(1, "basic.consume-ok", consumer_tag="ctag")
    c.deliver(1, 1)
    c.deliver(1, 2)
    c.client(1, "basic.ack", delivery_tag=1)
    c.deliver(1, 3)  # two unacknowledged again: fine
    p = c.server(1, "basic.deliver", consumer_tag="ctag", delivery_tag=4, routing_key="q")
    c.content(False, 1, b"x")
    return "basic.qos.prefetch-count.01", p, "violation"


@case
def flow_ok_mismatch(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    c.server(1, "channel.flow", active=False)
    p = c.client(1, "channel.flow-ok", active=True)
    return "channel.flow-ok.active", p, "violation"


@case
def reserved_field_set(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap, channels=())
    p = c.client(2, "channel.open", reserved_1="0")
    c.server(2, "channel.open-ok")
    return "field.reserved", p, "warning"


@case
def commit_not_transacted(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    p = c.client(1, "tx.commit")
    c.server(1, "channel.close", reply_code=406, reply_text="PRECONDITION_FAILED", class_id=90, method_id=20)
    c.client(1, "channel.close-ok")
    return "tx.commit.transacted", p, "violation"


@case
def rollback_not_transacted(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    p = c.client(1, "tx.rollback")
    c.server(1, "tx.rollback-ok")
    return "tx.rollback.transacted", p, "violation"


def _queue_known(method: str, **args: object) -> Case:
    def build(cap: Capture) -> tuple[str, int, str]:
        c = _ready(cap)
        p = c.client(1, method, queue="", **args)
        return f"{method}.queue.queue-known", p, "violation"

    build.__name__ = f"queue_known_{method.split('.')[1]}"
    return build


for _m, _a in (("queue.bind", {"exchange": "x"}), ("queue.unbind", {"exchange": "x"}), ("queue.purge", {}),
               ("queue.delete", {})):  # fmt: skip
    case(_queue_known(_m, **_a))


# --- asserts -----------------------------------------------------------------------------------------


@case
def exchange_name_empty(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    p = c.client(1, "exchange.declare", exchange="", type="direct")
    return "exchange.declare.exchange.assert-notnull", p, "violation"


@case
def exchange_name_syntax(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    p = c.client(1, "exchange.declare", exchange="my exchange", type="direct")
    c.server(1, "exchange.declare-ok")
    return "exchange.declare.exchange.syntax", p, "deviation"


@case
def queue_name_too_long(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    p = c.client(1, "queue.declare", queue="q" * 200)
    c.server(1, "channel.close", reply_code=406, reply_text="PRECONDITION_FAILED", class_id=50, method_id=10)
    c.client(1, "channel.close-ok")
    return "queue.declare.queue.syntax", p, "deviation"


@case
def declare_ok_without_name(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    c.client(1, "queue.declare", queue="")
    p = c.server(1, "queue.declare-ok", queue="")
    return "queue.declare-ok.queue.assert-notnull", p, "violation"


@case
def empty_vhost(cap: Capture) -> tuple[str, int, str]:
    c = cap.connection()
    c.protocol_header()
    c.server(0, "connection.start", version_major=0, version_minor=9, mechanisms="PLAIN", locales="en_US")
    c.client(0, "connection.start-ok", mechanism="PLAIN", response="\x00u\x00p", locale="en_US")
    c.server(0, "connection.tune", channel_max=10, frame_max=131072)
    c.client(0, "connection.tune-ok", channel_max=10, frame_max=131072)
    p = c.client(0, "connection.open", virtual_host="")
    c.server(0, "connection.open-ok")
    return "connection.open.virtual-host.assert-notnull", p, "violation"


@case
def close_reply_code_zero(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    p = c.client(1, "channel.close", reply_code=0, reply_text="Normal shutdown")
    c.server(1, "channel.close-ok")
    return "channel.close.reply-code.assert-notnull", p, "deviation"


@case
def channel_max_above_offer(cap: Capture) -> tuple[str, int, str]:
    c = cap.connection()
    c.protocol_header()
    c.server(0, "connection.start", version_major=0, version_minor=9, mechanisms="PLAIN", locales="en_US")
    c.client(0, "connection.start-ok", mechanism="PLAIN", response="\x00u\x00p", locale="en_US")
    c.server(0, "connection.tune", channel_max=10, frame_max=131072)
    p = c.client(0, "connection.tune-ok", channel_max=20, frame_max=131072)
    return "connection.tune-ok.channel-max.assert-le", p, "violation"


# --- negotiation and closes ------------------------------------------------------------------------------


def _handshake_until_tune(cap: Capture, mechanism: str = "PLAIN", locale: str = "en_US") -> SynthConn:
    c = cap.connection()
    c.protocol_header()
    c.server(0, "connection.start", version_major=0, version_minor=9, mechanisms="PLAIN AMQPLAIN", locales="en_US")
    c.client(0, "connection.start-ok", mechanism=mechanism, response="\x00u\x00p", locale=locale)
    c.server(0, "connection.tune", channel_max=10, frame_max=131072)
    return c


@case
def mechanism_not_offered(cap: Capture) -> tuple[str, int, str]:
    c = cap.connection()
    c.protocol_header()
    c.server(0, "connection.start", version_major=0, version_minor=9, mechanisms="PLAIN AMQPLAIN", locales="en_US")
    p = c.client(0, "connection.start-ok", mechanism="EXTERNAL", response="x", locale="en_US")
    return "connection.start-ok.mechanism.validity", p, "violation"


@case
def locale_not_offered(cap: Capture) -> tuple[str, int, str]:
    c = cap.connection()
    c.protocol_header()
    c.server(0, "connection.start", version_major=0, version_minor=9, mechanisms="PLAIN", locales="en_US")
    p = c.client(0, "connection.start-ok", mechanism="PLAIN", response="\x00u\x00p", locale="de_DE")
    return "connection.start-ok.locale.validity", p, "violation"


@case
def frame_max_below_minimum(cap: Capture) -> tuple[str, int, str]:
    c = _handshake_until_tune(cap)
    p = c.client(0, "connection.tune-ok", channel_max=10, frame_max=1024)
    return "connection.tune-ok.frame-max.minimum", p, "violation"


@case
def frame_max_above_offer(cap: Capture) -> tuple[str, int, str]:
    c = _handshake_until_tune(cap)
    p = c.client(0, "connection.tune-ok", channel_max=10, frame_max=262144)
    return "connection.tune-ok.frame-max.upper-limit", p, "violation"


@case
def undefined_reply_code(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    p = c.server(1, "channel.close", reply_code=999, reply_text="ODD")
    c.client(1, "channel.close-ok")
    return "close.reply-code", p, "warning"


@case
def hard_error_on_channel_close(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    p = c.server(1, "channel.close", reply_code=504, reply_text="CHANNEL_ERROR")
    c.client(1, "channel.close-ok")
    return "close.reply-code", p, "warning"


@case
def close_names_no_method(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    p = c.server(1, "channel.close", reply_code=406, reply_text="PRECONDITION_FAILED", class_id=60, method_id=999)
    c.client(1, "channel.close-ok")
    return "close.method-id", p, "warning"


@case
def cancel_notification_not_announced(cap: Capture) -> tuple[str, int, str]:
    c = cap.connection()
    c.handshake(capabilities={})
    c.open_channel(1)
    c.client(1, "basic.consume", queue="q", consumer_tag="t")
    c.server(1, "basic.consume-ok", consumer_tag="t")
    p = c.server(1, "basic.cancel", consumer_tag="t")
    return "capability.not-announced", p, "warning"


@case
def heartbeat_silence(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap, heartbeat=1)
    c.heartbeat(False)
    for _ in range(3):  # the client keeps talking; the server says nothing for 3 s (two intervals: 2 s)
        cap.ts_ns += 1_000_000_000
        c.heartbeat(True)
    p = c.heartbeat(False)
    return "heartbeat.silence", p, "warning"


@case
def publish_immediate(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    c.client(1, "basic.publish", routing_key="q", immediate=True)
    c.content(True, 1, b"x")
    return "rabbitmq.not-implemented", len(cap.records) - 1, "info"


# --- rules the server's reply decides; state across connections ---------------------------------------


@case
def reserved_exchange_name(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    p = c.client(1, "exchange.declare", exchange="amq.mine", type="direct")
    c.server(1, "channel.close", reply_code=403, reply_text="ACCESS_REFUSED", class_id=40, method_id=10)
    c.client(1, "channel.close-ok")
    return "exchange.declare.exchange.reserved", p, "violation"


@case
def reserved_queue_name(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    p = c.client(1, "queue.declare", queue="amq.mine")
    c.server(1, "channel.close", reply_code=403, reply_text="ACCESS_REFUSED", class_id=50, method_id=10)
    c.client(1, "channel.close-ok")
    return "queue.declare.queue.reserved", p, "violation"


@case
def publish_to_missing_exchange(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    p = c.client(1, "basic.publish", exchange="nope", routing_key="q")
    c.content(True, 1, b"x")
    c.server(1, "channel.close", reply_code=404, reply_text="NOT_FOUND - no exchange 'nope' in vhost '/'",
             class_id=60, method_id=40)  # fmt: skip
    c.client(1, "channel.close-ok")
    return "basic.publish.exchange.must-exist", p, "violation"


@case
def exchange_redeclared_with_other_type(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    c.client(1, "exchange.declare", exchange="ex", type="direct")
    c.server(1, "exchange.declare-ok")
    p = c.client(1, "exchange.declare", exchange="ex", type="fanout")
    c.server(1, "channel.close", reply_code=406, reply_text="PRECONDITION_FAILED - inequivalent arg 'type'",
             class_id=40, method_id=10)  # fmt: skip
    c.client(1, "channel.close-ok")
    return "exchange.declare.type.typed", p, "violation"


@case
def exchange_type_not_supported(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    p = c.client(1, "exchange.declare", exchange="ex", type="weird")
    c.server(0, "connection.close", reply_code=503, reply_text="COMMAND_INVALID - unknown exchange type 'weird'",
             class_id=40, method_id=10)  # fmt: skip
    c.client(0, "connection.close-ok")
    return "exchange.declare.type.support", p, "violation"


@case
def bind_to_missing_exchange(cap: Capture) -> tuple[str, int, str]:
    c = _ready(cap)
    p = c.client(1, "queue.bind", queue="q", exchange="nope", routing_key="k")
    c.server(1, "channel.close", reply_code=404, reply_text="NOT_FOUND - no exchange 'nope' in vhost '/'",
             class_id=50, method_id=20)  # fmt: skip
    c.client(1, "channel.close-ok")
    return "queue.bind.exchange.exchange-existence", p, "violation"


@case
def delete_missing_exchange(cap: Capture) -> tuple[str, int, str]:
    # the spec's server answers 404 (RabbitMQ deletes idempotently and never does)
    c = _ready(cap)
    p = c.client(1, "exchange.delete", exchange="gone")
    c.server(1, "channel.close", reply_code=404, reply_text="NOT_FOUND", class_id=40, method_id=20)
    c.client(1, "channel.close-ok")
    return "exchange.delete.exchange.exists", p, "violation"


@case
def exclusive_queue_from_other_connection(cap: Capture) -> tuple[str, int, str]:
    a = _ready(cap)
    a.client(1, "queue.declare", queue="mine", exclusive=True)
    a.server(1, "queue.declare-ok", queue="mine")
    b = _ready(cap)
    p = b.client(1, "basic.consume", queue="mine", consumer_tag="t")
    b.server(1, "channel.close", reply_code=405, reply_text="RESOURCE_LOCKED", class_id=60, method_id=20)
    b.client(1, "channel.close-ok")
    return "queue.declare.exclusive.exclusive", p, "violation"


_SPEC_09 = str(bundled_spec_path("amqp0-9.xml"))
_CODECS = {"grammar_channel_0_9": _SPEC_09}
_IGNORED = {"frames_after_refused_header": {"protocol.header-reply"}}  # the refusal itself is an info finding


@pytest.mark.parametrize("name", sorted(CASES))
def test_exactly_the_intended_finding(name: str) -> None:
    spec = _CODECS.get(name)
    cap = Capture(get_codec(spec) if spec else None)
    rule, packet, severity = CASES[name](cap)
    found = [f for f in cap.findings() if f.rule not in _IGNORED.get(name, set())]
    got = [(f.rule, f.packet, f.severity) for f in found]
    assert got == [(rule, packet, severity)], "\n".join(f"{f.rule} #{f.packet}: {f.message}" for f in found)
    finding: Finding = found[0]
    assert finding.message and finding.conn >= 0
    assert packet in finding.packets


def test_peer_reaction_matched_and_mismatched() -> None:
    cap = Capture()
    c = _consuming(cap)
    c.client(1, "basic.ack", delivery_tag=7)
    close = c.server(1, "channel.close", reply_code=406, reply_text="PRECONDITION_FAILED", class_id=60, method_id=80)
    c.client(1, "channel.close-ok")
    c.client(2, "basic.ack", delivery_tag=9)
    other = c.server(0, "connection.close", reply_code=541, reply_text="INTERNAL_ERROR")
    c.client(0, "connection.close-ok")
    found = cap.findings()
    assert [f.rule for f in found] == ["basic.ack.multiple.exists"] * 2
    assert found[0].code == 406 and found[0].peer_reaction == f"server sent channel.close 406 at packet {close}: matches"
    # an internal error naming no method, with another code, answers no bad ack: causality, not proximity
    assert found[1].peer_reaction == (f"no close from the server answers it (its connection.close 541 at packet "
                                      f"{other} answers something else)")  # fmt: skip


def test_peer_that_accepts_is_reported_as_such() -> None:
    cap = Capture()
    c = _ready(cap)
    c.client(1, "tx.commit")
    c.server(1, "tx.commit-ok")
    c.close()
    (f,) = cap.findings()
    assert f.rule == "tx.commit.transacted"
    assert f.peer_reaction is not None and f.peer_reaction.startswith("no close from the server")


def test_every_case_names_a_catalogued_rule() -> None:
    from amqpscope.validate.findings import OWN_RULES, Catalogue

    cat = Catalogue(get_codec().spec)
    for name in CASES:
        cap = Capture(get_codec(_CODECS[name]) if name in _CODECS else None)
        rule = CASES[name](cap)[0]
        assert rule in cat.rules or ".assert-" in rule or rule in OWN_RULES, rule

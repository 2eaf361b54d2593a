"""Legal traffic the validator must accept without a single finding, and captures whose history is
partly missing (mid-stream start, gaps) where it must not report what it could not see."""

from __future__ import annotations

from amqpscope.pcapwrite import TcpConversation
from amqpscope.testing.synth import Capture, SynthConn


def _ready(cap: Capture, channels: tuple[int, ...] = (1,), **tune: int) -> SynthConn:
    c = cap.connection()
    c.handshake(**tune)
    for ch in channels:
        c.open_channel(ch)
    return c


def _clean(cap: Capture) -> None:
    found = cap.findings()
    assert not found, "\n".join(f"{f.severity} {f.rule} #{f.packet}: {f.message}" for f in found)


def test_content_interleaved_across_channels() -> None:
    cap = Capture()
    c = _ready(cap, channels=(1, 2, 3), frame_max=4096)
    codec = c.codec
    body = b"x" * 10000  # three body frames of at most frame-max - 8 octets
    frames = {ch: codec.content_frames(ch, body, {"content_type": "text/plain"}, frame_max=4096) for ch in (1, 2)}
    c.client(1, "basic.publish", routing_key="a")
    c.client(2, "basic.publish", routing_key="b")
    # header and bodies of channel 1 and channel 2 alternate frame by frame; channel 3 publishes between
    split = {ch: _split_frames(frames[ch]) for ch in (1, 2)}
    for i in range(max(len(v) for v in split.values())):
        for ch in (1, 2):
            if i < len(split[ch]):
                c.send(True, split[ch][i])
        if i == 1:
            c.publish(3, b"")  # an empty body: a header with body-size 0 and no body frame
    c.server(1, "basic.deliver", consumer_tag="t", delivery_tag=1, routing_key="a")  # the peer's content on ch1
    c.content(False, 1, body, frame_max=4096)
    c.close_channel(1)
    c.close()
    _clean(cap)


def _split_frames(data: bytes) -> list[bytes]:
    out, i = [], 0
    while i < len(data):
        size = int.from_bytes(data[i + 3 : i + 7], "big")
        out.append(data[i : i + size + 8])
        i += size + 8
    return out


def test_crossing_closes() -> None:
    cap = Capture()
    c = _ready(cap, channels=(1, 2))
    c.client(1, "channel.close", reply_code=200, reply_text="bye")
    c.server(1, "channel.close", reply_code=406, reply_text="PRECONDITION_FAILED")
    c.server(1, "channel.close-ok")
    c.client(1, "channel.close-ok")
    c.server(2, "channel.close", reply_code=404, reply_text="NOT_FOUND")
    c.client(2, "channel.close", reply_code=200, reply_text="bye")
    c.client(2, "channel.close-ok")
    c.server(2, "channel.close-ok")
    c.open_channel(1)  # the number is free again
    c.client(0, "connection.close", reply_code=200, reply_text="bye")
    c.server(0, "connection.close", reply_code=320, reply_text="CONNECTION_FORCED")
    c.server(0, "connection.close-ok")
    c.client(0, "connection.close-ok")
    c.fin()
    _clean(cap)


def test_frames_in_flight_after_a_close_are_legal() -> None:
    cap = Capture()
    c = _ready(cap)
    c.client(1, "basic.consume", queue="q", consumer_tag="t")
    c.server(1, "basic.consume-ok", consumer_tag="t")
    c.server(1, "channel.close", reply_code=404, reply_text="NOT_FOUND", class_id=50, method_id=10)
    c.publish(1)  # sent before the client saw the close: the server discards it
    c.client(1, "basic.ack", delivery_tag=77)
    c.client(1, "channel.close-ok")
    c.client(0, "connection.close", reply_code=200, reply_text="bye")
    c.deliver(1, 1)  # the server's frames in flight towards the closing client
    c.server(0, "connection.close-ok")
    c.fin()
    _clean(cap)


def test_refusals_that_break_no_client_rule() -> None:
    """The server refusing a passive declare (404), a permission (403) or an inequivalent redeclare
    (406) applies its own rules: the client broke none."""
    cap = Capture()
    c = _ready(cap)
    for args, code in (({"queue": "missing", "passive": True}, 404), ({"queue": "forbidden"}, 403),
                       ({"queue": "q", "arguments": {"x-max-length": 20}}, 406)):  # fmt: skip
        c.client(1, "queue.declare", **args)
        c.server(1, "channel.close", reply_code=code, reply_text="refused", class_id=50, method_id=10)
        c.client(1, "channel.close-ok")
        c.open_channel(1)
    c.close()
    _clean(cap)


def test_consumer_life() -> None:
    cap = Capture()
    c = _ready(cap, channels=(1, 2))
    c.client(1, "basic.qos", prefetch_count=10)
    c.server(1, "basic.qos-ok")
    c.client(1, "queue.declare", queue="")
    c.server(1, "queue.declare-ok", queue="amq.gen-1")
    c.client(1, "queue.bind", queue="", exchange="amq.direct", routing_key="k")  # the channel's last queue
    c.server(1, "queue.bind-ok")
    c.client(1, "basic.consume", queue="amq.gen-1", consumer_tag="")
    c.server(1, "basic.consume-ok", consumer_tag="amq.ctag-1")
    for tag in range(1, 7):
        c.deliver(1, tag, consumer_tag="amq.ctag-1")
    c.client(1, "basic.ack", delivery_tag=2, multiple=True)
    c.client(1, "basic.reject", delivery_tag=3, requeue=False)
    c.client(1, "basic.nack", delivery_tag=5, multiple=True, requeue=True)
    c.client(1, "basic.recover", requeue=True)
    c.server(1, "basic.recover-ok")
    c.deliver(1, 7, consumer_tag="amq.ctag-1")
    c.client(1, "basic.ack", delivery_tag=0, multiple=True)  # everything so far
    c.client(2, "basic.get", queue="amq.gen-1", no_ack=True)
    c.server(2, "basic.get-ok", delivery_tag=1, routing_key="k", message_count=1)
    c.content(False, 2, b"got")
    c.client(2, "basic.get", queue="amq.gen-1")
    c.server(2, "basic.get-ok", delivery_tag=2, routing_key="k", message_count=0)
    c.content(False, 2, b"got")
    c.client(2, "basic.ack", delivery_tag=2)
    c.client(2, "basic.get", queue="amq.gen-1")
    c.server(2, "basic.get-empty")
    c.client(1, "basic.consume", queue="other", consumer_tag="mine", no_wait=True)
    c.client(1, "basic.cancel", consumer_tag="amq.ctag-1")
    c.deliver(1, 8, consumer_tag="amq.ctag-1")  # in flight before the cancel reached the server
    c.server(1, "basic.cancel-ok", consumer_tag="amq.ctag-1")
    c.client(1, "basic.ack", delivery_tag=8)
    c.server(1, "basic.cancel", consumer_tag="mine")  # consumer-cancel notification (queue deleted)
    c.client(1, "basic.consume", queue="other2", consumer_tag="mine")  # the tag is free again
    c.server(1, "basic.consume-ok", consumer_tag="mine")
    c.client(1, "queue.declare", queue="passive", passive=True)
    c.server(1, "queue.declare-ok", queue="passive")
    c.client(1, "exchange.declare", exchange="amq.direct", type="direct")  # exists: legal redeclare
    c.server(1, "exchange.declare-ok")
    c.close_channel(1)
    c.close_channel(2)
    c.close()
    _clean(cap)


def test_confirms_transactions_and_connection_extensions() -> None:
    cap = Capture()
    c = _ready(cap, channels=(1, 2), heartbeat=5)
    c.heartbeat(True)
    c.heartbeat(False)
    c.client(1, "confirm.select")
    c.server(1, "confirm.select-ok")
    for _ in range(5):
        c.publish(1, b"m", exchange="amq.topic", routing_key="r", mandatory=True)
    c.server(1, "basic.return", reply_code=312, reply_text="NO_ROUTE", exchange="amq.topic", routing_key="r")
    c.content(False, 1, b"m")
    c.server(1, "basic.ack", delivery_tag=2, multiple=True)
    c.server(1, "basic.nack", delivery_tag=3)
    c.server(1, "basic.ack", delivery_tag=5, multiple=True)
    c.server(0, "connection.blocked", reason="low on memory")
    c.server(0, "connection.unblocked")
    c.client(0, "connection.update-secret", new_secret="token", reason="refresh")
    c.server(0, "connection.update-secret-ok")
    c.client(2, "tx.select")
    c.server(2, "tx.select-ok")
    c.client(2, "basic.get", queue="q")
    c.server(2, "basic.get-ok", delivery_tag=1, routing_key="q")
    c.content(False, 2, b"tx")
    c.client(2, "basic.ack", delivery_tag=1)
    c.client(2, "tx.rollback")  # un-does the ack
    c.server(2, "tx.rollback-ok")
    c.client(2, "basic.ack", delivery_tag=1)
    c.publish(2)
    c.client(2, "tx.commit")
    c.server(2, "tx.commit-ok")
    c.client(2, "exchange.declare", exchange="ex", type="fanout", no_wait=True)  # no-wait: no reply
    c.client(2, "queue.declare", queue="qq", no_wait=True)
    c.publish(2, exchange="ex")  # declared above: known to exist
    c.client(1, "channel.flow", active=True)
    c.server(1, "channel.flow-ok", active=True)
    c.server(1, "channel.flow", active=True)
    c.client(1, "channel.flow-ok", active=True)
    c.close(by_client=False)
    _clean(cap)


def test_0_9_spec_session_is_clean() -> None:
    from amqpscope.dissect.codec import get_codec
    from amqpscope.dissect.spec import bundled_spec_path

    cap = Capture(get_codec(str(bundled_spec_path("amqp0-9.xml"))))
    c = cap.connection()
    c.handshake()
    c.open_channel(1)
    c.client(1, "access.request", realm="/data", active=True, read=True, write=True)
    c.server(1, "access.request-ok", ticket=1)
    c.client(1, "queue.declare", ticket=1, queue="q")
    c.server(1, "queue.declare-ok", queue="q")
    c.client(1, "basic.publish", ticket=1, routing_key="q")
    c.content(True, 1, b"0-9")
    c.close_channel(1)
    c.close()
    _clean(cap)


def test_capture_started_mid_connection() -> None:
    """No SYN, no handshake: acks of tags never seen, channels never seen opening, replies with no
    request — all of it happened before the capture started."""
    cap = Capture()
    c = cap.connection(syn=False)
    c.client(1, "basic.ack", delivery_tag=41)
    c.server(1, "queue.declare-ok", queue="q")
    c.server(1, "basic.deliver", consumer_tag="t", delivery_tag=42, routing_key="q")
    c.content(False, 1, b"x")
    c.client(1, "basic.ack", delivery_tag=42)
    c.client(1, "basic.ack", delivery_tag=40, multiple=True)
    c.close_channel(1)
    c.open_channel(1)  # from here on channel 1 is known
    c.close()
    # what the capture did not show is reported as such (not-seen), never as a broken rule
    assert [f.rule for f in cap.findings() if f.severity != "not-seen"] == []
    assert "capture.midstream-start" in {f.rule for f in cap.findings()}
    # once the channel is seen opening, its state is checked again
    c2 = cap.connection(syn=False)
    for _ in range(3):  # three frames each way: both directions are found before the channel opens
        c2.heartbeat(True)
        c2.heartbeat(False)
    c2.open_channel(1)
    p = c2.client(1, "basic.ack", delivery_tag=3)
    found = [f for f in cap.findings() if f.severity != "not-seen"]
    assert [(f.rule, f.packet) for f in found] == [("basic.ack.multiple.exists", p)]


def test_gap_hides_what_it_swallowed() -> None:
    """A lost segment held a delivery: its ack, the rest of its body and the reply to a request
    lost with it must not be reported."""
    cap = Capture()
    c = _ready(cap)
    c.client(1, "basic.consume", queue="q", consumer_tag="t")
    c.server(1, "basic.consume-ok", consumer_tag="t")
    c.server(1, "basic.deliver", consumer_tag="t", delivery_tag=1, routing_key="q")
    c.header_frame(False, 1, 8)
    lost = c.body_frame(False, 1, b"1234")  # dropped below: a gap in the server's stream
    c.body_frame(False, 1, b"5678")
    c.client(1, "basic.ack", delivery_tag=1)
    c.client(1, "queue.declare", queue="x")
    lost_reply = c.server(1, "queue.declare-ok", queue="x")
    c.server(1, "basic.deliver", consumer_tag="t", delivery_tag=2, routing_key="q")
    c.content(False, 1, b"later")
    c.client(1, "basic.ack", delivery_tag=2)
    c.close()
    del cap.records[lost_reply - 1]
    del cap.records[lost - 1]
    kinds = [ev.kind for ev in cap.events()]
    assert "gap" in kinds
    assert [f.rule for f in cap.findings() if f.severity != "not-seen"] == []
    assert "capture.gap" in {f.rule for f in cap.findings()}


def test_server_refuses_protocol_header() -> None:
    cap = Capture()
    c = cap.connection()
    c.protocol_header("0-10")
    c.send(False, b"AMQP\x00\x00\x09\x01")
    c.fin()
    found = cap.findings()
    # issue 16: a refused protocol header is a failed connection, said at warning level
    assert [(f.rule, f.severity) for f in found] == [("protocol.header-version", "info"),
                                                     ("protocol.header-reply", "warning")]  # fmt: skip
    assert found[1].message.startswith("connection failed")


def test_unused_conversation_helper_is_plain_tcp() -> None:
    # the synth module builds on pcapwrite's conversation: one packet per send, no ACKs
    conv = TcpConversation(ack_data=False)
    assert len(conv.send(True, b"x" * 10)) == 1

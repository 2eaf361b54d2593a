"""What the core tells of TCP: who sent the first FIN and RST, what a connection on the AMQP port that
never spoke AMQP 0-9-1 began with, the packets of frames after a TCP gap, and client frames sent after
its TCP acknowledgement covered the server's connection.close. Captures are built by hand."""

from __future__ import annotations

import pytest

from amqpscope.events import Connection, Finding, Frame, Gap
from amqpscope.packets import ACK, FIN, PSH, RST, SYN
from amqpscope.pcapwrite import Record, TcpConversation, tcp_packet
from amqpscope.testing.synth import Capture, SynthConn

HEADER_091 = b"AMQP\x00\x00\x09\x01"


def _closes(cap: Capture) -> list[Connection]:
    return [ev for ev in cap.events() if isinstance(ev, Connection) and ev.state == "close"]


def _raw(cap: Capture, records: list[Record]) -> int:
    return cap._add(records)


def test_client_fin_then_server_reset() -> None:
    cap = Capture()
    c = cap.connection()
    c.handshake()
    fin = _raw(cap, [c.tcp.packet(True, FIN | ACK)])
    rst = _raw(cap, [c.tcp.packet(False, RST | ACK)])
    (close,) = _closes(cap)
    assert (close.ended, close.fin_by, close.fin_packet, close.rst_by, close.rst_packet) == (
        "rst", "client", fin, "server", rst)  # fmt: skip
    assert close.opening is None


def test_orderly_close_names_the_first_fin_only() -> None:
    cap = Capture()
    c = cap.connection()
    c.handshake()
    c.close(by_client=False, fin=False)
    first = _raw(cap, c.tcp.fin(from_client=False))
    (close,) = _closes(cap)
    assert (close.ended, close.fin_by, close.fin_packet, close.rst_by, close.rst_packet) == (
        "connection.close", "server", first, None, None)  # fmt: skip


TLS_HELLO = bytes.fromhex("16030100310100002d0303") + bytes(32) + b"\x00\x00\x02\x13\x01\x01\x00"


@pytest.mark.parametrize(
    ("first", "opening"),
    [
        (b"AMQP\x00\x01\x00\x00", "amqp-1.0"),
        (b"AMQP\x03\x01\x00\x00", "amqp-1.0"),
        (b"AMQP\x01\x01\x00\x0a", "amqp-0-10"),
        (b"AMQP\x01\x01\x08\x00", "amqp-other"),
        (b"GET / HTTP/1.1\r\nHost: rabbit\r\n\r\n", "http"),
        (TLS_HELLO, "tls"),
        (b"\x00\x01garbage", "other"),
        (b"", "nothing"),
    ],
)
def test_a_connection_on_the_amqp_port_that_never_spoke_0_9_1(first: bytes, opening: str) -> None:
    cap = Capture()
    c = cap.connection()
    if first:
        c.send(True, first)
    _raw(cap, [c.tcp.packet(False, RST | ACK)])
    events = [ev for ev in cap.events() if isinstance(ev, Connection)]
    assert [ev.state for ev in events] == ["open", "close"]
    assert events[1].opening == opening
    assert events[1].rst_by == "server"


def test_refused_syn_is_a_connection_with_nothing_in_it() -> None:
    cap = Capture()
    conv = TcpConversation(("127.0.0.1", 40999), ("127.0.0.1", 5672), ack_data=False)
    syn = _raw(cap, [conv.packet(True, SYN)])
    rst = _raw(cap, [conv.packet(False, RST | ACK)])
    (close,) = _closes(cap)
    assert (close.opening, close.rst_by, close.rst_packet, close.packet) == ("nothing", "server", rst, rst)
    assert syn == rst - 1


def test_an_amqp_0_9_1_connection_has_no_opening() -> None:
    cap = Capture()
    c = cap.connection()
    c.handshake()
    c.close()
    (close,) = _closes(cap)
    assert close.opening is None and close.fin_by == "client"


# --- frames after a TCP gap ---------------------------------------------------------------------------


def _heartbeat() -> bytes:
    return b"\x08\x00\x00\x00\x00\x00\x00\xce"


def test_frames_after_a_hole_are_reported_at_their_own_packets() -> None:
    """Five client packets of one heartbeat each; the second is not captured. The server's ACK past
    the hole declares it; the frames of packets 3, 4, 5 are reported there, as tshark does, not
    at the ACK."""
    cap = Capture()
    c = cap.connection()
    opened = c.handshake()
    sent: list[int] = []
    lost: Record | None = None
    for i in range(5):
        rec = c.tcp.packet(True, PSH | ACK, _heartbeat())
        if i == 1:
            lost = rec  # never captured
            continue
        sent.append(_raw(cap, [rec]))
    assert lost is not None
    ack = _raw(cap, [c.tcp.packet(False, ACK)])
    events = list(cap.events())
    gaps = [ev for ev in events if isinstance(ev, Gap)]
    assert [(g.size, g.packet, g.dir) for g in gaps] == [(8, ack, "c2s")]
    frames = [ev.packet for ev in events if isinstance(ev, Frame) and ev.dir == "c2s" and ev.packet > opened]
    assert frames == sent and frames[-1] < ack


# --- a client method after its TCP ACK covered the server's connection.close ---------------------------


def _server_closes(cap: Capture) -> tuple[SynthConn, int]:
    c = cap.connection()
    c.handshake()
    c.open_channel(1)
    close = c.server(0, "connection.close", reply_code=320, reply_text="CONNECTION_FORCED - shutdown",
                     class_id=0, method_id=0)  # fmt: skip
    return c, close


RULE = "connection.frame-after-close-received"


def test_a_publish_whose_packet_acknowledges_the_close_is_reported() -> None:
    cap = Capture()
    c, close = _server_closes(cap)
    p = c.client(1, "basic.publish", exchange="", routing_key="q")  # its ACK covers the close
    c.content(True, 1, b"hello")
    c.client(1, "queue.declare", queue="q")  # once per close
    c.client(0, "connection.close-ok")
    c.fin()
    found = [f for f in cap.findings() if f.rule == RULE]
    assert len(found) == 1
    f = found[0]
    assert (f.packet, f.dir, f.severity, f.packets) == (p, "c2s", "warning", (close, p))
    assert f"connection.close (packet {close})" in f.message and "the same packet" in f.message


def _client_acking(c: SynthConn, ack: int, data: bytes) -> Record:
    """A client segment that acknowledges the server's stream only up to ``ack`` (it crossed the
    server's close in flight)."""
    seq = c.tcp.seq[True]
    c.tcp.seq[True] = (seq + len(data)) & 0xFFFFFFFF
    return (0, tcp_packet(c.tcp.client, c.tcp.server, seq, ack, PSH | ACK, data))


def test_a_publish_that_crossed_the_close_is_not_reported_until_an_ack_covers_it() -> None:
    cap = Capture()
    c = cap.connection()
    c.handshake()
    c.open_channel(1)
    before = c.tcp.seq[False]  # the server's stream before its close
    close = c.server(0, "connection.close", reply_code=320, reply_text="CONNECTION_FORCED", class_id=0,
                     method_id=0)  # fmt: skip
    crossed = _raw(cap, [_client_acking(c, before, c.method(1, "basic.publish", exchange="", routing_key="q"))])
    _raw(cap, [_client_acking(c, before, c.codec.content_frames(1, b"hello", None, frame_max=131072))])
    later = c.client(1, "queue.declare", queue="q")  # this packet acknowledges the close
    c.client(0, "connection.close-ok")
    c.fin()
    found = [f for f in cap.findings() if f.rule == RULE]
    assert [(f.packet, f.packets) for f in found] == [(later, (close, later))]
    assert crossed < later


def test_a_client_that_answers_with_close_ok_is_clean() -> None:
    cap = Capture()
    c, _ = _server_closes(cap)
    c.client(0, "connection.close-ok")
    c.fin()
    assert [f for f in cap.findings() if isinstance(f, Finding) and f.rule == RULE] == []

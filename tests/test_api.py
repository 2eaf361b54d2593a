"""The Python API: ``amqpscope.read(path)`` as an iterable of events, records and a DataFrame."""

from __future__ import annotations

from collections import Counter
from hashlib import sha256
from pathlib import Path

import pytest

import amqpscope
from amqpscope.events import Connection, Event, Frame, Message, ProtocolHeader
from amqpscope.filter import FilterError
from tests.conftest import CAPTURES

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
HELLO, ERRORS = SAMPLES / "hello.pcap", SAMPLES / "errors.pcap"


def test_read_iterates_typed_events_in_packet_order() -> None:
    stream = amqpscope.read(HELLO)
    events = list(stream)
    assert all(isinstance(e, Event) for e in events)
    assert isinstance(events[0], Connection) and events[0].state == "open"
    assert isinstance(events[-1], Connection) and events[-1].state == "close"
    (ph,) = [e for e in events if isinstance(e, ProtocolHeader)]
    assert ph.version == "0-9-1"
    frames = [e for e in events if isinstance(e, Frame)]
    assert len(frames) == 57  # samples/README.md: 57 AMQP frames (+1 protocol header)
    assert [f.packet for f in frames] == sorted(f.packet for f in frames)
    publish = next(f for f in frames if f.method == "basic.publish")
    assert publish.args and publish.args["routing_key"] and publish.class_id == 60 and publish.method_id == 40
    messages = [e for e in events if isinstance(e, Message)]
    assert len(messages) == 10 and all(m.complete and m.body is not None for m in messages)
    assert all(m.body is not None and m.body_sha256 == sha256(m.body).hexdigest() for m in messages)
    with pytest.raises(AttributeError):
        publish.channel = 9  # type: ignore[misc]  # events are frozen


def test_read_is_reiterable_and_lazy() -> None:
    stream = amqpscope.read(HELLO)
    first = [e.to_record() for e in stream]
    assert [e.to_record() for e in stream] == first
    it = iter(stream)
    assert isinstance(next(it), Connection)  # decoding starts only when pulled
    assert "hello.pcap" in repr(stream)


def test_records_kinds_filter_and_bodies() -> None:
    stream = amqpscope.read(HELLO)
    kinds = Counter(r["kind"] for r in stream.records())
    assert kinds["frame"] == 57 and kinds["message"] == 10 and kinds["protocol-header"] == 1
    only = list(stream.records(["message"]))
    assert len(only) == 10 and {r["kind"] for r in only} == {"message"}
    acks = list(stream.records(where="basic.ack"))
    assert len(acks) == 5 and all(r["args"]["delivery_tag"] >= 1 for r in acks)
    delivered = list(stream.records(["message"], where="method == basic.deliver", body="full"))
    assert len(delivered) == 5 and all("text" in r["body"] for r in delivered)
    with pytest.raises(FilterError):
        list(stream.records(where="channel =="))


def test_to_pandas() -> None:
    stream = amqpscope.read(HELLO)
    df = stream.to_pandas()
    assert len(df) == 57
    assert {"packet", "ts", "conn", "dir", "channel", "type", "method", "args", "properties"} <= set(df.columns)
    assert df["type"].value_counts().to_dict() == {"method": 37, "header": 10, "body": 10}
    assert (df["packet"].diff().dropna() >= 0).all()
    msgs = stream.to_pandas(["message"])
    assert len(msgs) == 10 and set(msgs["method"]) == {"basic.publish", "basic.deliver"}
    assert (msgs["body_received"] == msgs["body_size"]).all()
    per_method = stream.to_pandas(where="kind == frame and type == method").groupby("method").size()
    assert per_method["basic.publish"] == 5 and per_method["basic.deliver"] == 5


def test_credentials_through_the_api() -> None:
    hidden = [e for e in amqpscope.read(ERRORS) if isinstance(e, Connection) and e.state == "close"]
    assert {e.user for e in hidden} == {"guest", "alice"} and {e.password for e in hidden} == {None}
    shown = [e for e in amqpscope.read(ERRORS, show_credentials=True) if isinstance(e, Connection)]
    assert "s3cret" in {e.password for e in shown}


@pytest.mark.skipif(not CAPTURES.is_dir(), reason="shared captures not present")
def test_ports_and_spec_arguments() -> None:
    """s12 runs on 5673: found by its protocol headers either way; the 0-9 spec decodes it too
    (its method table lacks RabbitMQ's extensions, none of which s12 uses)."""
    path = CAPTURES / "s12_amqptools_port5673.pcap"
    default = [e.to_record() for e in amqpscope.read(path)]
    assert [e.to_record() for e in amqpscope.read(path, ports=[5673])] == default
    spec09 = Path(amqpscope.__file__).parent / "dissect" / "specs" / "amqp0-9.xml"
    frames = [e for e in amqpscope.read(path, spec=spec09) if isinstance(e, Frame)]
    assert len(frames) == 199 and not [f for f in frames if f.problem]


@pytest.mark.skipif(not CAPTURES.is_dir(), reason="shared captures not present")
def test_large_bodies_assembled_exactly() -> None:
    """s05: a 1 MiB body in 257 frames of frame_max 4096, an empty body, a 5 MiB body; each message's
    bytes are the concatenation of its body frames (checked against the frames themselves)."""
    events = list(amqpscope.read(CAPTURES / "s05_pika_large_bodies.pcap"))
    bodies: dict[tuple[int, str | None, int | None], list[bytes]] = {}
    checked = 0
    for e in events:
        if isinstance(e, Frame) and e.type == "body":
            bodies.setdefault((e.conn, e.dir, e.channel), []).append(e.payload or b"")
        elif isinstance(e, Message):
            raw = b"".join(bodies.pop((e.conn, e.dir, e.channel), []))
            assert e.complete and e.body == raw and len(raw) == e.body_size
            assert e.body_sha256 == sha256(raw).hexdigest()
            checked += 1
    sizes = sorted(m.body_size for m in events if isinstance(m, Message))
    assert checked == 8 and sizes[0] == 0 and sizes[-1] == 5 * 2**20 and 2**20 in sizes


def test_refused_connection_is_opened_and_closed(tmp_path: Path) -> None:
    """A SYN to the AMQP port answered by RST carries no AMQP, but it is a connection attempt: the
    event stream has its open before its close, as for every other connection."""
    from amqpscope.packets import ACK, RST, SYN
    from amqpscope.pcapwrite import TcpConversation, write_pcap

    conv = TcpConversation()
    conv.packet(True, SYN)
    conv.packet(False, RST | ACK)
    path = tmp_path / "refused.pcap"
    write_pcap(path, conv.records, conv.linktype)
    events = list(amqpscope.read(path))
    assert [(type(e).__name__, getattr(e, "state", None)) for e in events] == [
        ("Connection", "open"), ("Connection", "close")]  # fmt: skip
    assert events[1].ended == "rst" and events[0].conn == events[1].conn  # type: ignore[attr-defined]

"""Streams captured after the TCP handshake: the protocol header (client) or connection.start
(server) is the stream's start, SYN or not; only a start that really is mid-conversation or
mid-frame is a resync. The connection's version comes from the protocol header alone."""

from __future__ import annotations

from pathlib import Path

import pytest
import variants

from amqpscope.events import Connection, Event, Frame, ProtocolHeader, Resync
from amqpscope.pipeline import decode_source
from tests.conftest import CAPTURES

S01 = CAPTURES / "s01_pika_topology.pcap"
pytestmark = pytest.mark.skipif(not S01.is_file(), reason="shared captures not present")


def _first_payloads(src: Path) -> list[int]:
    """Packet numbers of the first data packets: the protocol header, connection.start, start-ok."""
    return [i for i, _seg in variants.data_packets(src)[:3]]


def _cut(tmp_path: Path, n: int) -> list[Event]:
    dst = tmp_path / "cut.pcap"
    variants.cut_first(S01, dst, n)
    return list(decode_source(dst))


def test_the_protocol_header_starts_a_stream_without_its_syn(tmp_path: Path) -> None:
    header, _start, _start_ok = _first_payloads(S01)
    events = _cut(tmp_path, header - 1)  # the handshake is gone, the header is the first payload
    assert [e.version for e in events if isinstance(e, ProtocolHeader)] == ["0-9-1"]
    assert not [e for e in events if isinstance(e, Resync)]
    assert not [e for e in events if isinstance(e, Frame) and e.resync]
    (close,) = [e for e in events if isinstance(e, Connection) and e.state == "close"]
    assert close.version == "0-9-1" and not close.syn_seen
    whole = [e.to_record() for e in decode_source(S01) if isinstance(e, Frame)]
    assert len([e for e in events if isinstance(e, Frame)]) == len(whole)


def test_connection_start_starts_the_servers_stream(tmp_path: Path) -> None:
    _header, start, _start_ok = _first_payloads(S01)
    events = _cut(tmp_path, start - 1)  # the client's header is gone: its side is mid-conversation
    resyncs = [e for e in events if isinstance(e, Resync)]
    assert [r.dir for r in resyncs] == ["c2s"] and resyncs[0].reason == "stream start not captured"
    frames = [e for e in events if isinstance(e, Frame)]
    first = next(f for f in frames if f.dir == "s2c")  # reported once the frames after it confirm it
    assert first.method == "connection.start" and first.packet == start - (start - 1)
    assert all(f.resync == (f.dir == "c2s") for f in frames)
    (close,) = [e for e in events if isinstance(e, Connection) and e.state == "close"]
    assert close.version is None  # connection.start's 0/9 is the same in 0-9 and 0-9-1: unknown


def test_a_start_inside_a_frame_is_a_resync_as_before(tmp_path: Path) -> None:
    dst = tmp_path / "mid.pcap"
    variants.cut_first(S01, dst, 30)
    mid = tmp_path / "mid-frame.pcap"
    # the first data packet of the cut loses its first 3 payload bytes: the stream starts mid-frame
    first, seg = variants.data_packets(dst)[0]
    variants.trim_payload(dst, mid, first, 3)
    events = list(decode_source(mid))
    resync = next(e for e in events if isinstance(e, Resync) and e.dir == ("c2s" if seg.dst[1] == 5672 else "s2c"))
    # the rest of the cut frame, however many packets the search took
    assert resync.skipped == len(seg.payload) - 3 and resync.reason == "stream start not captured"

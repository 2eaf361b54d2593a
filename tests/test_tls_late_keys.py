"""Keys that arrive after a TLS connection's first records, without a broker: the shipped TLS 1.3
sample (samples/tls) fed packet by packet to the core's ``Engine``, its key log handed over late —
as text (``add_tls_keylog``, what a Decryption Secrets Block later in a pcapng does) and as a file
the engine follows (``tls_follow``, what ``sniff --tls-keylog`` does). The events must be those of
a decode that had the keys from the start."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from amqpscope import _native
from amqpscope.capture import read_packets
from amqpscope.dissect.codec import get_codec
from amqpscope.events import Event, Frame, Tls

SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "tls" / "amqps-tls13.pcap"
KEYS = SAMPLE.with_suffix(".keys")
FOLLOW_INTERVAL = 0.1  # tls::follow::FOLLOW_INTERVAL


def engine(**kw: Any) -> Any:
    return _native.Engine(get_codec().tables, [5672], False, True, None, **kw)


def key(ev: Event) -> tuple[Any, ...]:
    return (ev.kind, ev.packet, ev.conn, ev.dir, getattr(ev, "method", None), getattr(ev, "type", None))


def reference() -> list[Event]:
    e = engine(tls_keylog=KEYS.read_text())
    out = [ev for p in read_packets(SAMPLE) for ev in e.feed([p])]
    return out + e.finish()


def frames_of(events: list[Event]) -> list[tuple[Any, ...]]:
    return [key(e) for e in events if isinstance(e, Frame)]


def test_records_held_until_keys_handed_over_decode_as_with_keys() -> None:
    ref = reference()
    packets = list(read_packets(SAMPLE))
    e = engine()
    half = len(packets) // 2
    early = [ev for p in packets[:half] for ev in e.feed([p])]
    assert not [ev for ev in early if isinstance(ev, Frame)]  # nothing to decrypt with yet
    assert e.add_tls_keylog(KEYS.read_text()) > 0
    late = [ev for p in packets[half:] for ev in e.feed([p])] + e.finish()
    events = early + late
    assert frames_of(events) == frames_of(ref) and len(frames_of(ref)) > 10
    (tls,) = [ev for ev in events if isinstance(ev, Tls)]
    assert (tls.decrypted, tls.reason, tls.records_lost, tls.records_failed) == (True, None, 0, 0)
    # the frames carry the TLS record they came in, as with the keys from the start
    assert [f.tls for f in events if isinstance(f, Frame)] == [f.tls for f in ref if isinstance(f, Frame)]


def test_a_followed_key_log_written_mid_capture(tmp_path: Path) -> None:
    ref = reference()
    packets = list(read_packets(SAMPLE))
    path = tmp_path / "keys.txt"  # does not exist yet
    e = engine(tls_follow=[str(path)])
    half = len(packets) // 2
    events = [ev for p in packets[:half] for ev in e.feed([p])]
    assert not [ev for ev in events if isinstance(ev, Frame)]
    text = KEYS.read_text()
    path.write_text(text[: len(text) // 3])  # a partial line is not taken before its end comes
    time.sleep(FOLLOW_INTERVAL * 1.5)
    path.write_text(text)
    time.sleep(FOLLOW_INTERVAL * 1.5)
    events += [ev for p in packets[half:] for ev in e.feed([p])] + e.finish()
    assert frames_of(events) == frames_of(ref)


def test_a_followed_key_log_is_read_once_more_at_the_end(tmp_path: Path) -> None:
    ref = reference()
    path = tmp_path / "keys.txt"
    e = engine(tls_follow=[str(path)])
    events = [ev for p in read_packets(SAMPLE) for ev in e.feed([p])]
    path.write_text(KEYS.read_text())  # after the last packet, at once: no interval passed
    events += e.finish()
    assert frames_of(events) == frames_of(ref)
    (tls,) = [ev for ev in events if isinstance(ev, Tls)]
    assert tls.decrypted and tls.reason is None

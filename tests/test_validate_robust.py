"""The core's validator never loses, reorders or changes an event and never fails, whatever
the bytes (a fixed-seed mutation run over a real capture)."""

from __future__ import annotations

import io
import random
from pathlib import Path

from amqpscope.capture import read_packets
from amqpscope.dissect.codec import get_codec
from amqpscope.events import Finding
from amqpscope.pcapwrite import write_pcap
from amqpscope.pipeline import Options, decode_packets


def test_validation_passes_every_event_through_on_mutated_bytes(captures_dir: Path) -> None:
    codec = get_codec()
    packets = list(read_packets(captures_dir / "s04_pika_consumer_acks.pcap"))
    rnd = random.Random(4)
    for _ in range(12):
        records = []
        for p in packets:
            data = bytearray(p.data)
            if len(data) > 66 and rnd.random() < 0.08:  # past the Ethernet/IPv4/TCP headers
                for _ in range(rnd.randint(1, 3)):
                    data[rnd.randrange(66, len(data))] = rnd.randrange(256)
            records.append((p.ts_ns, bytes(data)))
        buf = io.BytesIO()
        write_pcap(buf, records)
        raw = buf.getvalue()
        plain = list(decode_packets(read_packets(io.BytesIO(raw)), codec, Options()))
        checked = list(decode_packets(read_packets(io.BytesIO(raw)), codec, Options(validate=True)))
        assert [ev for ev in checked if not isinstance(ev, Finding)] == plain
        for f in (ev for ev in checked if isinstance(ev, Finding)):
            assert f.rule and f.severity in ("violation", "deviation", "warning", "info") and f.message

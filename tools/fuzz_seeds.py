"""Seed corpora for the cargo-fuzz targets (tools/fuzz-native.sh), from the shipped samples.

frames: a mode byte then one direction's stream cut into its packets (the targets' 4-byte separator
between them); field_table: every method and header payload; stream: a whole connection, each piece a
direction byte then a packet's payload. Parsed and reassembled by the test-side tcpwalk, so the seeds
owe nothing to the core they feed.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from amqpscope.testing.frames import RawFrame, decode_frame
from amqpscope.testing.tcpwalk import TcpData, segments, walk

SEP = b"\xfe\xed\xfa\xce"
ROOT = Path(__file__).resolve().parent.parent


def _put(corpus: Path, data: bytes) -> None:
    corpus.mkdir(parents=True, exist_ok=True)
    (corpus / hashlib.sha1(data).hexdigest()).write_bytes(data)


def main(out: Path) -> int:
    for capture in sorted((ROOT / "samples").glob("*.pcap")):
        pieces: dict[tuple[int, object], list[bytes]] = {}
        conn: dict[int, list[bytes]] = {}
        clients: dict[int, object] = {}
        for ev in walk(segments(capture)):
            if isinstance(ev, TcpData):
                pieces.setdefault((ev.flow, ev.src), []).append(ev.data)
                client = clients.setdefault(ev.flow, ev.src) == ev.src  # the protocol header comes first
                # the stream target reads a piece's first byte: bit 0 the direction, 0x20 and up data
                conn.setdefault(ev.flow, []).append(bytes((0x20 if client else 0x21,)) + ev.data)
        for parts in pieces.values():
            _put(out / "frames", b"\x01" + SEP.join(parts))
            stream = b"".join(parts)
            off = 8 if stream.startswith(b"AMQP") else 0
            while isinstance(got := decode_frame(stream, off), RawFrame):
                if got.type in (1, 2):
                    _put(out / "field_table", got.payload)
                off = got.end
        for parts in conn.values():
            _put(out / "stream", b"\x03" + SEP.join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "crates/amqpscope-core/fuzz/corpus"))

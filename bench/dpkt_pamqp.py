#!/usr/bin/env python3
"""Baseline for bench/decode.py: the obvious dpkt + pamqp decoder.

dpkt reads the capture and parses Ethernet/IP/TCP; a small per-direction reassembler puts the
payloads in sequence order (retransmissions trimmed, out-of-order segments held until the hole is
filled); every complete AMQP frame is handed to ``pamqp.frame.unmarshal``, which decodes the method
with its arguments, the content header with its properties, or the body. That is the same decoding
work ``amqpscope decode`` does. With ``--jsonl`` each frame is also written to stdout as one JSON
line (packet, connection key, channel, frame kind, the decoded arguments or properties; the stdlib
``json`` module, as an obvious script would): the same output work as ``amqpscope decode --format
jsonl``. Without it only frames are counted. amqpscope does more on top either way (sessions,
message assembly with body hashes, credentials redaction).

Usage: python bench/dpkt_pamqp.py CAPTURE [--port N] [--jsonl]
Prints one JSON object on stderr: frames by kind, and what could not be decoded.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import TextIO

import dpkt
from pamqp import frame as pamqp_frame
from pamqp.base import Frame as PamqpFrame
from pamqp.body import ContentBody
from pamqp.exceptions import UnmarshalingException
from pamqp.header import ContentHeader

Key = tuple[bytes, int, bytes, int]


class Direction:
    __slots__ = ("buf", "held", "next_seq")

    def __init__(self) -> None:
        self.buf = b""
        self.next_seq: int | None = None
        self.held: dict[int, bytes] = {}


def reader(f):  # type: ignore[no-untyped-def]
    magic = f.read(4)
    f.seek(0)
    return dpkt.pcapng.Reader(f) if magic == b"\x0a\x0d\x0d\x0a" else dpkt.pcap.Reader(f)


def feed(d: Direction, seq: int, payload: bytes) -> bool:
    """Append in-order bytes; hold segments beyond a hole. True when something was appended."""
    if d.next_seq is None:
        d.next_seq = seq
    off = (seq - d.next_seq) & 0xFFFFFFFF
    if off and off < 0x80000000:
        d.held[seq] = payload
        return False
    if off:  # (partly) retransmitted
        old = (d.next_seq - seq) & 0xFFFFFFFF
        if old >= len(payload):
            return False
        payload = payload[old:]
    d.buf += payload
    d.next_seq = (d.next_seq + len(payload)) & 0xFFFFFFFF
    while d.held:
        nxt = d.held.pop(d.next_seq, None)
        if nxt is None:
            break
        d.buf += nxt
        d.next_seq = (d.next_seq + len(nxt)) & 0xFFFFFFFF
    return True


def _jsonable(v: object) -> object:
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    return str(v)


def frame_record(packet: int, key: Key, channel: int, value: object) -> dict[str, object]:
    rec: dict[str, object] = {"packet": packet, "conn": f"{key[0].hex()}:{key[1]}-{key[2].hex()}:{key[3]}",
                              "channel": channel, "frame": type(value).__name__}  # fmt: skip
    if isinstance(value, ContentHeader):
        rec["body_size"] = value.body_size
        rec["properties"] = {k: _jsonable(v) for k, v in dict(value.properties).items() if v is not None}
    elif isinstance(value, ContentBody):
        rec["size"] = len(value.value)
    elif isinstance(value, PamqpFrame):
        rec["name"] = value.name
        rec["args"] = {k: _jsonable(v) for k, v in dict(value).items()}
    return rec


def frames(d: Direction, counts: Counter[str], packet: int, key: Key, out: TextIO | None) -> None:
    buf = d.buf
    off = 0
    n = len(buf)
    unmarshal = pamqp_frame.unmarshal
    while n - off >= 8:
        if buf[off : off + 4] == b"AMQP":
            size = 8
        else:
            size = 8 + int.from_bytes(buf[off + 3 : off + 7], "big")
            if n - off < size:
                break
        try:
            _consumed, channel, value = unmarshal(buf[off : off + size])
        except UnmarshalingException:
            counts["undecodable"] += 1
        else:
            counts[type(value).__name__] += 1
            if out is not None:
                out.write(json.dumps(frame_record(packet, key, channel, value)) + "\n")
        off += size
    d.buf = buf[off:]


def run(path: str, port: int, out: TextIO | None) -> Counter[str]:
    dirs: dict[Key, Direction] = {}
    counts: Counter[str] = Counter()
    with open(path, "rb") as f:
        for packet, (_ts, raw) in enumerate(reader(f), 1):
            eth = dpkt.ethernet.Ethernet(raw)
            ip = eth.data
            if not isinstance(ip, (dpkt.ip.IP, dpkt.ip6.IP6)):
                continue
            tcp = ip.data
            if not isinstance(tcp, dpkt.tcp.TCP) or not tcp.data or port not in (tcp.sport, tcp.dport):
                continue
            key = (ip.src, tcp.sport, ip.dst, tcp.dport)
            d = dirs.get(key)
            if d is None:
                d = dirs[key] = Direction()
            if feed(d, tcp.seq, bytes(tcp.data)):
                frames(d, counts, packet, key, out)
    return counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("capture")
    ap.add_argument("--port", type=int, default=5672)
    ap.add_argument("--jsonl", action="store_true", help="write every frame as a JSON line to stdout")
    args = ap.parse_args()
    counts = run(args.capture, args.port, sys.stdout if args.jsonl else None)
    sys.stdout.flush()
    frames_total = sum(v for k, v in counts.items() if k not in ("ProtocolHeader", "undecodable"))
    print(json.dumps({"frames": frames_total, **dict(sorted(counts.items()))}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

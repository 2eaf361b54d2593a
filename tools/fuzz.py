#!/usr/bin/env python3
"""A plain-Python mutation fuzzer for amqpscope: the native core's decoders and the whole pipeline,
through the Python API (``tools/fuzz-native.sh`` fuzzes the core's Rust entry points directly).

Seeds are real captures (``samples/*.pcap`` and, when present, the small captures of
``../shared/captures``). Every execution is derived from one integer seed, so any crash can be
replayed exactly: ``tools/fuzz.py --target T --replay SEED``.

Targets
  frame     bytes -> ``decode_frame`` (the test-side splitter of ``amqpscope.testing.frames``:
            need-more / frame / malformed, nothing else)
  method    method payloads -> ``Codec.decode_method`` (the core's; a DecodedMethod, problems as values)
  header    content-header payloads -> ``Codec.decode_header``
  table     field tables -> ``decode_table`` (the core's table decoder; value or ``Truncated``)
  stream    one direction's bytes, cut into random chunks with random gaps, written as the
            segments of one TCP connection (``amqpscope.testing.streams``) -> ``decode_packets``;
            the byte accounting must balance at the end and count exactly the gaps made
  pipeline  mutated capture files (bit flips, byte insert/delete, truncation, dropped /
            duplicated / reordered packets, mutated payloads, spliced captures) ->
            ``read_packets`` -> ``decode_packets`` (or ``decode_source``, the core reading the
            file itself) -> records and text summaries; the accounting must balance
  cli       the same mutated files through ``amqpscope decode`` (in process, click's runner):
            exit code 0 or 2..6, at most one error line on stderr, never a traceback
  paths     (not in the default set) the same mutated files both ways, ``decode_source`` and
            ``read_packets`` -> ``decode_packets``: the same records, error and accounting

A crash is any exception other than the documented ones (``CaptureError`` subclasses for the
pipeline, ``Truncated`` for ``decode_table``), an execution over the time limit, or a broken
invariant. Each distinct crash (by exception type and innermost amqpscope line) is saved to the
crash directory as ``<target>-<seed>.bin`` (the input) and ``.txt`` (traceback, seed, replay
command). A summary line per target is printed as JSON at the end.

Examples::

    nice -n 19 .venv/bin/python tools/fuzz.py --target frame,method,header,table,stream --execs 200000
    nice -n 19 .venv/bin/python tools/fuzz.py --target pipeline --seconds 1800 --crash-dir fuzz-crashes
    .venv/bin/python tools/fuzz.py --target pipeline --replay 1234567
"""

from __future__ import annotations

import argparse
import io
import json
import random
import resource
import signal
import struct
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from amqpscope.capture import CaptureError, read_packets  # noqa: E402
from amqpscope.dissect.codec import Codec, get_codec  # noqa: E402
from amqpscope.dissect.values import Truncated, decode_table  # noqa: E402
from amqpscope.dissect.wire import FRAME_HEADER, FRAME_METHOD  # noqa: E402
from amqpscope.events import Event  # noqa: E402
from amqpscope.output.records import dumpb, record  # noqa: E402
from amqpscope.output.summary import summary  # noqa: E402
from amqpscope.packets import RawPacket  # noqa: E402
from amqpscope.pcapwrite import pcap_header, pcap_record, pcapng_epb, pcapng_idb, pcapng_shb  # noqa: E402
from amqpscope.pipeline import Options, RunStats, decode_packets, decode_source  # noqa: E402
from amqpscope.scapy.table import encode_table  # noqa: E402
from amqpscope.testing import tcpwalk  # noqa: E402
from amqpscope.testing.frames import Malformed, NeedMore, RawFrame, decode_frame  # noqa: E402
from amqpscope.testing.streams import OneWay  # noqa: E402

SHARED_CAPTURES = ROOT.parent / "shared" / "captures"
SMALL_CAPTURE = 64 * 1024  # larger shared captures cost too much per execution
CODEC_TARGETS = ("frame", "method", "header", "table", "stream")
ALL_TARGETS = (*CODEC_TARGETS, "pipeline", "cli", "paths")
DEFAULT_LIMIT_S = {"pipeline": 10.0, "cli": 15.0, "paths": 20.0}  # per execution; codec targets: 2 s


class ExecTimeout(Exception):
    """One execution ran past its time limit (a hang, for the fuzzer)."""


class Invariant(Exception):
    """A documented property of the output does not hold."""


# --- seeds ---------------------------------------------------------------------------------------


@dataclass
class Corpus:
    captures: list[tuple[str, list[RawPacket]]] = field(default_factory=list)
    streams: list[bytes] = field(default_factory=list)
    frames: list[bytes] = field(default_factory=list)
    methods: list[bytes] = field(default_factory=list)
    headers: list[bytes] = field(default_factory=list)
    tables: list[bytes] = field(default_factory=list)


def seed_files(extra: list[Path] | None = None) -> list[Path]:
    files = sorted((ROOT / "samples").glob("*.pcap"))
    if SHARED_CAPTURES.is_dir():
        files += [p for p in sorted(SHARED_CAPTURES.glob("*.pcap")) if p.stat().st_size <= SMALL_CAPTURE]
    return files + list(extra or [])


def _streams_of(packets: list[RawPacket]) -> list[bytes]:
    """Each direction's bytes, by the independent TCP walk of the test tooling (seeds only)."""
    chunks: dict[tuple[int, Any], list[bytes]] = {}
    segs = (seg for p in packets if (seg := tcpwalk.parse(p)) is not None)
    for ev in tcpwalk.walk(segs):
        if isinstance(ev, tcpwalk.TcpData):
            chunks.setdefault((ev.flow, ev.src), []).append(ev.data)
    return [b"".join(v) for v in chunks.values()]


def build_corpus(files: list[Path]) -> Corpus:
    c = Corpus()
    for path in files:
        packets = list(read_packets(path))
        c.captures.append((path.name, packets))
        for s in _streams_of(packets):
            c.streams.append(s)
            off = 8 if s.startswith(b"AMQP") else 0
            while True:
                r = decode_frame(s, off)
                if not isinstance(r, RawFrame):
                    break
                c.frames.append(s[off : r.end])
                if r.type == FRAME_METHOD:
                    c.methods.append(r.payload)
                    _tables_of_method(r.payload, c.tables)
                elif r.type == FRAME_HEADER:
                    c.headers.append(r.payload)
                off = r.end
    codec = get_codec()
    for h in c.headers[:200]:
        props = codec.decode_header(h).properties
        if isinstance(props.get("headers"), dict):
            c.tables.append(encode_table(props["headers"]))
    nested: Any = {"k": 1}
    for _ in range(5):
        nested = {"t": nested, "a": [nested, "x", 1.5, None, True]}
    c.tables.append(encode_table(nested))
    c.tables.append(encode_table({"A": [1, [2, [3, []]], {"x": b"\x00\xff"}]}))
    c.tables.append(b"\x00\x00\x00\x00")
    c.methods.append(b"\x00\x0a\x00\x0b" + encode_table({"LOGIN": "alice", "PASSWORD": "x"})[4:])
    # de-duplicate, keep order (the same frames repeat across captures)
    for name in ("streams", "frames", "methods", "headers", "tables"):
        setattr(c, name, list(dict.fromkeys(getattr(c, name))))
    return c


def _tables_of_method(payload: bytes, out: list[bytes]) -> None:
    """Raw field tables inside connection.start (server-properties) and start-ok (client-properties)."""
    cid, mid = struct.unpack_from(">HH", payload, 0) if len(payload) >= 4 else (0, 0)
    start = {(10, 10): 6, (10, 11): 4}.get((cid, mid))
    if start is None:
        return
    try:
        _, end = decode_table(payload, start)
    except (Truncated, struct.error, IndexError):
        return
    out.append(payload[start:end])


# --- byte mutations ------------------------------------------------------------------------------

INTERESTING_8 = (0, 1, 0x7F, 0x80, 0xCE, 0xFF, ord("A"), ord("F"), ord("S"), ord("x"), 1, 2, 3, 8)
INTERESTING_16 = (0, 1, 0x7FFF, 0x8000, 0xFFFF, 10, 60, 0xFFFE)
INTERESTING_32 = (0, 1, 7, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0xFFFFFFF0, 131072, 1 << 20, 1 << 28)
INTERESTING_64 = (0, 1 << 63, (1 << 64) - 1, (1 << 63) - 1, 1 << 32)


def mutate_bytes(rng: random.Random, data: bytes, pool: list[bytes], max_len: int = 1 << 20) -> bytes:
    """One to five stacked mutations of ``data``; ``pool`` supplies splice partners."""
    b = bytearray(data)
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 5))):
        op = rng.randrange(12)
        n = len(b)
        if op == 0 and n:  # bit flip
            i = rng.randrange(n)
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1 and n:  # interesting byte
            b[rng.randrange(n)] = rng.choice(INTERESTING_8)
        elif op == 2 and n >= 2:
            i = rng.randrange(n - 1)
            b[i : i + 2] = struct.pack(">H", rng.choice(INTERESTING_16))
        elif op == 3 and n >= 4:
            i = rng.randrange(n - 3)
            b[i : i + 4] = struct.pack(">I", rng.choice(INTERESTING_32))
        elif op == 4 and n >= 8:
            i = rng.randrange(n - 7)
            b[i : i + 8] = struct.pack(">Q", rng.choice(INTERESTING_64))
        elif op == 5:  # insert random bytes
            i = rng.randrange(n + 1)
            b[i:i] = rng.randbytes(rng.choice((1, 1, 2, 4, 7, 16, 64)))
        elif op == 6 and n:  # delete a range
            i = rng.randrange(n)
            del b[i : i + rng.choice((1, 1, 2, 4, 8, 64, 512))]
        elif op == 7 and n:  # duplicate a range in place
            i = rng.randrange(n)
            j = min(n, i + rng.choice((1, 7, 8, 16, 64, 300)))
            b[j:j] = b[i:j]
        elif op == 8 and n:  # truncate
            del b[rng.randrange(n) :]
        elif op == 9 and pool:  # splice with another seed
            other = rng.choice(pool)
            i, j = rng.randrange(n + 1), rng.randrange(len(other) + 1)
            b = b[:i] + bytearray(other[j:])
        elif op == 10 and n:  # random bytes over a range
            i = rng.randrange(n)
            k = min(n - i, rng.choice((1, 4, 16)))
            b[i : i + k] = rng.randbytes(k)
        elif op == 11 and n:  # add/subtract a small amount to one byte (lengths off by one)
            i = rng.randrange(n)
            b[i] = (b[i] + rng.choice((-2, -1, 1, 2))) & 0xFF
        if len(b) > max_len:
            del b[max_len:]
    return bytes(b)


# --- packet-level mutations ----------------------------------------------------------------------


def _payload_offset(data: bytes) -> int:
    """Where the TCP payload probably starts in an Ethernet/IPv4 frame (mutate AMQP bytes more)."""
    if len(data) > 54 and data[12:14] == b"\x08\x00":
        ihl = (data[14] & 0x0F) * 4
        tcp = 14 + ihl
        if len(data) > tcp + 13:
            return min(len(data), tcp + (data[tcp + 12] >> 4) * 4)
    return 0


def mutate_packets(rng: random.Random, packets: list[RawPacket], other: list[RawPacket]) -> list[RawPacket]:
    pk = list(packets)
    for _ in range(rng.choice((1, 1, 2, 3))):
        op = rng.randrange(9)
        n = len(pk)
        if not n:
            break
        if op == 0:  # drop packets
            for _ in range(rng.choice((1, 1, 2, 5))):
                if pk:
                    del pk[rng.randrange(len(pk))]
        elif op == 1:  # duplicate a packet (right after it, or later)
            i = rng.randrange(n)
            pk.insert(min(n, i + rng.choice((1, 1, 3, 10))), pk[i])
        elif op == 2 and n > 1:  # swap adjacent
            i = rng.randrange(n - 1)
            pk[i], pk[i + 1] = pk[i + 1], pk[i]
        elif op == 3:  # move one packet far away
            p = pk.pop(rng.randrange(n))
            pk.insert(rng.randrange(len(pk) + 1), p)
        elif op in (4, 5, 6):  # mutate one packet's bytes, mostly inside the TCP payload
            i = rng.randrange(n)
            p = pk[i]
            start = _payload_offset(p.data) if rng.random() < 0.75 else 0
            head, tail = p.data[:start], p.data[start:]
            data = head + mutate_bytes(rng, tail, [], max_len=1 << 16)
            pk[i] = RawPacket(p.index, p.ts_ns, p.linktype, data, p.wirelen)
        elif op == 7 and other:  # splice: interleave the packets of another capture
            a, b, merged = pk, list(other), []
            while a or b:
                src = a if (a and (not b or rng.random() < 0.5)) else b
                merged.append(src.pop(0))
            pk = merged
        elif op == 8 and other:  # splice: this capture's head, another capture's tail
            pk = pk[: rng.randrange(n + 1)] + other[rng.randrange(len(other) + 1) :]
    return pk


def to_file_bytes(rng: random.Random, packets: list[RawPacket]) -> bytes:
    lt = packets[0].linktype if packets else 1
    if rng.random() < 0.2:
        parts = [pcapng_shb(), pcapng_idb(lt, 9)]
        parts += [pcapng_epb(p.ts_ns, p.data, 0, 9) for p in packets]
        return b"".join(parts)
    nano = rng.random() < 0.1
    return pcap_header(lt, nano) + b"".join(pcap_record(p.ts_ns, p.data, nano) for p in packets)


def make_capture(rng: random.Random, corpus: Corpus) -> bytes:
    """A mutated capture file: packet-level damage, then (sometimes) file-level byte damage."""
    _, packets = rng.choice(corpus.captures)
    _, other = rng.choice(corpus.captures)
    if rng.random() < 0.85:
        packets = mutate_packets(rng, packets, other)
    data = to_file_bytes(rng, packets)
    if rng.random() < 0.3:
        data = mutate_bytes(rng, data, [], max_len=len(data) + 4096)
    return data


# --- targets -------------------------------------------------------------------------------------

# what one direction's bytes turn into (plus the connection and the messages of the session)
_STREAM_KINDS = {"protocol-header", "frame", "gap", "resync", "malformed", "connection", "message"}


def run_frame(data: bytes, codec: Codec) -> None:
    r = decode_frame(data, 0)
    if isinstance(r, RawFrame):
        if r.end != 8 + len(r.payload) or data[r.end - 1] != 0xCE:
            raise Invariant(f"frame end {r.end} does not match payload {len(r.payload)}")
    elif isinstance(r, NeedMore):
        if r.needed <= len(data):
            raise Invariant(f"need-more {r.needed} with {len(data)} bytes present")
    elif not isinstance(r, Malformed):
        raise Invariant(f"decode_frame returned {type(r).__name__}")


def run_method(data: bytes, codec: Codec) -> None:
    m = codec.decode_method(data)
    if not isinstance(m.args, dict) or (m.problem is not None and not isinstance(m.problem, str)):
        raise Invariant("decode_method result has the wrong shape")
    dumpb(m.args)  # decoded values must be serialisable for the JSON outputs


def run_header(data: bytes, codec: Codec) -> None:
    h = codec.decode_header(data)
    if not isinstance(h.properties, dict):
        raise Invariant("decode_header result has the wrong shape")
    dumpb(h.properties)


def run_table(data: bytes, codec: Codec) -> None:
    try:
        table, end = decode_table(data, 0)
    except Truncated:
        return
    except struct.error:
        if len(data) >= 4:
            raise
        return  # fewer than 4 bytes: no length prefix at all
    if end > len(data):
        raise Invariant("table ends past the input")
    dumpb(table)


def run_stream(data: bytes, codec: Codec, rng: random.Random) -> None:
    """The bytes as client-to-server segments of one TCP connection (with a SYN, or mid-stream),
    some ranges left out as holes, through the core."""
    stream = OneWay(at_start=rng.random() < 0.7)
    off = 0
    while off < len(data):
        if rng.random() < 0.05:
            size = rng.choice((1, 7, 100, 5000))
            stream.gap(size)
            off += size
        else:
            n = rng.choice((1, 3, 8, 100, 1460, 65536))
            stream.feed(data[off : off + n])
            off += n
    stats = RunStats()
    options = Options(ports=frozenset({stream.server_port}))
    for ev in decode_packets(stream.packets(), codec, options, stats):
        if not isinstance(ev, Event) or ev.kind not in _STREAM_KINDS:
            raise Invariant(f"stream event {type(ev).__name__} ({getattr(ev, 'kind', '?')})")
        dumpb(record(ev, "full"))
    acc = stats.accounting
    if not acc.balanced():
        raise Invariant(f"stream accounting does not balance: {acc}")
    if acc.stream_bytes != stream.fed_bytes:
        raise Invariant(f"stream_bytes {acc.stream_bytes} != bytes sent {stream.fed_bytes}")
    if acc.gap_bytes != stream.visible_gap_bytes:
        raise Invariant(f"gap_bytes {acc.gap_bytes} != bytes removed {stream.visible_gap_bytes}")


def run_pipeline(data: bytes, codec: Codec, options: Options, validate: bool = False, whole_file: bool = False) -> int:
    """Decode, render every event; with ``validate`` the validator runs as a stage (as in decode).
    ``whole_file``: the core reads the capture itself (``decode_source``, as the CLI does) instead
    of decoding the packets Python read (``read_packets`` -> ``decode_packets``, as live capture)."""
    stats = RunStats()
    n = 0
    if validate:
        options = replace(options, validate=True)
    try:  # the core opens the file at once: a bad file header raises here already
        if whole_file:
            events = decode_source(io.BytesIO(data), codec, options, stats)
        else:
            events = decode_packets(read_packets(io.BytesIO(data)), codec, options, stats)
        for ev in events:
            rec = record(ev, "full")
            dumpb(rec)
            summary(ev)
            n += 1
    except CaptureError as exc:
        if "\n" in str(exc):
            raise Invariant(f"capture error message spans lines: {exc!r}") from None
    if not stats.accounting.balanced():
        raise Invariant(f"run accounting does not balance: {stats.accounting}")
    return n


def _records(data: bytes, codec: Codec, options: Options, whole_file: bool) -> tuple[list[bytes], str | None, Any]:
    stats = RunStats()
    out: list[bytes] = []
    error = None
    try:
        if whole_file:
            events = decode_source(io.BytesIO(data), codec, options, stats)
        else:
            events = decode_packets(read_packets(io.BytesIO(data)), codec, options, stats)
        out += (dumpb(record(ev, "full")) for ev in events)
    except CaptureError as exc:
        error = f"{type(exc).__name__}: {exc}"
    return out, error, stats.accounting


def run_paths(data: bytes, codec: Codec, options: Options) -> None:
    """The core reading the file itself and the core fed the packets Python read must agree."""
    a_recs, a_err, a_acc = _records(data, codec, options, True)
    b_recs, b_err, b_acc = _records(data, codec, options, False)
    if a_err != b_err:
        raise Invariant(f"errors differ: decode_source {a_err!r}, decode_packets {b_err!r}")
    if len(a_recs) != len(b_recs):
        raise Invariant(f"decode_source gave {len(a_recs)} records, decode_packets {len(b_recs)} (error: {a_err})")
    for i, (x, y) in enumerate(zip(a_recs, b_recs, strict=True)):
        if x != y:
            raise Invariant(f"record {i} differs: decode_source {x[:200]!r}, decode_packets {y[:200]!r}")
    if a_acc != b_acc:
        raise Invariant(f"accounting differs: decode_source {a_acc}, decode_packets {b_acc}")


_CLI_COMMANDS = (
    ["decode", "-T", "jsonl", "--stats", "--no-progress"],
    ["decode", "-T", "csv", "--no-progress"],
    ["decode", "-T", "table", "--no-progress"],
    ["decode", "-T", "json", "--body", "full", "--no-progress"],
    ["decode", "-T", "text", "-V", "--body", "full", "--no-progress"],
    ["validate", "-T", "jsonl"],
    ["stats", "-T", "json"],
    ["flow", "-T", "text"],
    ["report", "-o", "{out}/report.html"],
)
CLI_EXIT_CODES = (0, 1, 2, 3, 4, 5, 6, 11)  # 1: validate findings; 2: e.g. flow without a connection


def run_cli(data: bytes, rng: random.Random, workdir: Path) -> None:
    from click.testing import CliRunner

    from cli.main import cli

    path = workdir / "input.pcap"
    path.write_bytes(data)
    args = [a.replace("{out}", str(workdir)) for a in rng.choice(_CLI_COMMANDS)] + [str(path)]
    result = CliRunner().invoke(cli, args, catch_exceptions=True)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    if result.exit_code not in CLI_EXIT_CODES:
        raise Invariant(f"{args[0]}: exit code {result.exit_code}")
    # one line for what went wrong; a command that still wrote its file (a report of what was decoded
    # before the damage) also says what it wrote, on a line of its own
    err = result.stderr
    said = [line for line in err.splitlines() if line.strip() and not line.startswith("amqpscope: wrote ")]
    if "Traceback" in err or len(said) > 1:
        raise Invariant(f"{args[0]}: stderr is not one line: {err[:300]!r}")


# --- driver --------------------------------------------------------------------------------------


@dataclass
class Tally:
    target: str
    execs: int = 0
    crashes: int = 0
    signatures: dict[str, int] = field(default_factory=dict)
    max_exec_s: float = 0.0
    elapsed_s: float = 0.0


def _alarm(signum: int, frame: Any) -> None:
    raise ExecTimeout("execution exceeded its time limit")


def _signature(exc: BaseException) -> str:
    tb = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in tb if "amqpscope" in f.filename or "/cli/" in f.filename]
    where = f"{Path(ours[-1].filename).name}:{ours[-1].lineno}" if ours else "?"
    return f"{type(exc).__name__}@{where}"


def make_input(target: str, rng: random.Random, corpus: Corpus) -> bytes:
    if target in ("pipeline", "cli", "paths"):
        return make_capture(rng, corpus)
    pool = {
        "frame": corpus.frames,
        "method": corpus.methods,
        "header": corpus.headers,
        "table": corpus.tables,
        "stream": corpus.streams,
    }[target]
    if rng.random() < 0.02:
        return rng.randbytes(rng.randrange(64))
    return mutate_bytes(rng, rng.choice(pool), pool)


def execute(target: str, data: bytes, rng: random.Random, codec: Codec, options: Options, workdir: Path) -> None:
    if target == "frame":
        run_frame(data, codec)
    elif target == "method":
        run_method(data, codec)
    elif target == "header":
        run_header(data, codec)
    elif target == "table":
        run_table(data, codec)
    elif target == "stream":
        run_stream(data, codec, rng)
    elif target == "pipeline":
        run_pipeline(data, codec, options, validate=rng.random() < 0.25, whole_file=rng.random() < 0.5)
    elif target == "cli":
        run_cli(data, rng, workdir)
    elif target == "paths":
        run_paths(data, codec, options)
    else:
        raise ValueError(f"unknown target {target}")


def one(target: str, seed: int, corpus: Corpus, codec: Codec, options: Options, workdir: Path) -> bytes:
    """Build and run execution ``seed`` of ``target``; returns its input. Raises on a crash."""
    rng = random.Random(seed)
    data = make_input(target, rng, corpus)
    execute(target, data, rng, codec, options, workdir)
    return data


def fuzz(
    target: str,
    corpus: Corpus,
    first_seed: int,
    execs: int | None,
    seconds: float | None,
    crash_dir: Path | None,
    limit_s: float,
    on_crash: Callable[[str, int, bytes, BaseException], None] | None = None,
) -> Tally:
    codec = get_codec()
    options = Options(ports=frozenset({5672, 5673, 25672}))
    tally = Tally(target)
    t0 = time.monotonic()
    deadline = t0 + seconds if seconds else None
    old = signal.signal(signal.SIGALRM, _alarm)
    with tempfile.TemporaryDirectory(prefix="amqpscope-fuzz-") as tmp:
        workdir = Path(tmp)
        seed = first_seed
        try:
            while (execs is None or tally.execs < execs) and (deadline is None or time.monotonic() < deadline):
                rng = random.Random(seed)
                data = make_input(target, rng, corpus)
                start = time.perf_counter()
                signal.setitimer(signal.ITIMER_REAL, limit_s)
                try:
                    execute(target, data, rng, codec, options, workdir)
                except (Exception, RecursionError) as exc:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                    _record_crash(tally, target, seed, data, exc, crash_dir)
                    if on_crash is not None:
                        on_crash(target, seed, data, exc)
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                took = time.perf_counter() - start
                tally.max_exec_s = max(tally.max_exec_s, took)
                tally.execs += 1
                seed += 1
        finally:
            signal.signal(signal.SIGALRM, old)
    tally.elapsed_s = time.monotonic() - t0
    return tally


def _record_crash(
    tally: Tally, target: str, seed: int, data: bytes, exc: BaseException, crash_dir: Path | None
) -> None:
    tally.crashes += 1
    sig = _signature(exc)
    seen = tally.signatures.get(sig, 0)
    tally.signatures[sig] = seen + 1
    if crash_dir is None or seen >= 3:  # a few examples per distinct crash are enough
        return
    crash_dir.mkdir(parents=True, exist_ok=True)
    stem = crash_dir / f"{target}-{seed}"
    stem.with_suffix(".bin").write_bytes(data)
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    stem.with_suffix(".txt").write_text(
        f"target: {target}\nseed: {seed}\nsignature: {sig}\n"
        f"replay: .venv/bin/python tools/fuzz.py --target {target} --replay {seed}\n\n{tb}"
    )


def _limit_memory(mb: int) -> None:
    if mb > 0:
        soft = mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (soft, resource.getrlimit(resource.RLIMIT_AS)[1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="frame,method,header,table,stream,pipeline",
                    help=f"comma-separated targets: {', '.join(ALL_TARGETS)}")  # fmt: skip
    ap.add_argument("--execs", type=int, default=None, help="executions per target")
    ap.add_argument("--seconds", type=float, default=None, help="time per target")
    ap.add_argument("--seed", type=int, default=0, help="first seed (execution i uses seed+i)")
    ap.add_argument("--crash-dir", type=Path, default=ROOT / "fuzz-crashes")
    ap.add_argument("--limit", type=float, default=None, help="seconds per execution (hang threshold)")
    ap.add_argument("--max-memory-mb", type=int, default=3072, help="address-space limit (0 = none)")
    ap.add_argument("--replay", type=int, default=None, help="run one seed and show its traceback")
    ap.add_argument("--seed-file", type=Path, action="append", default=[], help="extra seed capture")
    args = ap.parse_args(argv)
    targets = [t for t in args.target.split(",") if t]
    for t in targets:
        if t not in ALL_TARGETS:
            ap.error(f"unknown target {t!r}")
    sys.setrecursionlimit(10_000)
    corpus = build_corpus(seed_files(args.seed_file))
    if args.replay is not None:
        with tempfile.TemporaryDirectory() as tmp:
            for t in targets:
                data = one(
                    t, args.replay, corpus, get_codec(), Options(ports=frozenset({5672, 5673, 25672})), Path(tmp)
                )
                print(f"{t} seed {args.replay}: {len(data)} bytes, no crash")
        return 0
    if args.execs is None and args.seconds is None:
        args.execs = 10_000
    _limit_memory(args.max_memory_mb)
    print(json.dumps({"seeds": {"captures": len(corpus.captures), "streams": len(corpus.streams),
                                "frames": len(corpus.frames), "methods": len(corpus.methods),
                                "headers": len(corpus.headers), "tables": len(corpus.tables)}}), flush=True)  # fmt: skip
    failed = 0
    for t in targets:
        limit = args.limit or DEFAULT_LIMIT_S.get(t, 2.0)
        tally = fuzz(t, corpus, args.seed, args.execs, args.seconds, args.crash_dir, limit)
        failed += tally.crashes
        print(json.dumps({"target": t, "execs": tally.execs, "crashes": tally.crashes,
                          "distinct": tally.signatures, "elapsed_s": round(tally.elapsed_s, 1),
                          "execs_per_s": round(tally.execs / max(tally.elapsed_s, 1e-9), 1),
                          "max_exec_s": round(tally.max_exec_s, 4)}), flush=True)  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

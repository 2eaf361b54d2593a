"""Capture reading: formats, compression, numbering, errors."""

from __future__ import annotations

import io
import os
import struct
from pathlib import Path

import dpkt
import pytest
import variants

from amqpscope.capture import (
    CaptureError,
    CaptureUnreadable,
    CorruptCapture,
    NotACapture,
    TruncatedCapture,
    read_packets,
)
from amqpscope.packets import RawPacket
from amqpscope.pcapwrite import (
    TcpConversation,
    _block,
    pcapng_epb,
    pcapng_idb,
    pcapng_obsolete_pb,
    pcapng_shb,
    pcapng_spb,
    write_pcap,
)

CAPTURES = Path(__file__).resolve().parents[2] / "shared" / "captures"
SHARED = sorted(CAPTURES.glob("*.pcap")) if CAPTURES.is_dir() else []
needs_shared = pytest.mark.skipif(not SHARED, reason="shared captures not present")
SMALL = CAPTURES / "s03_amqpstorm_tx.pcap"


def _sample(tmp_path: Path) -> Path:
    conv = TcpConversation()
    conv.handshake()
    conv.send(True, b"AMQP\x00\x00\x09\x01")
    conv.send(False, bytes(range(256)) * 20, mss=1000)
    conv.fin()
    path = tmp_path / "sample.pcap"
    write_pcap(path, conv.records)
    return path


def _key(pkts: list[RawPacket]) -> list[tuple[int, int, int, bytes]]:
    return [(p.index, p.ts_ns // 1000, p.linktype, p.data) for p in pkts]


@needs_shared
@pytest.mark.parametrize("path", SHARED, ids=lambda p: p.name)
def test_shared_capture_matches_dpkt(path: Path) -> None:
    ours = list(read_packets(path))
    with open(path, "rb") as f:
        theirs = [(ts, buf) for ts, buf in dpkt.pcap.Reader(f)]
    assert len(ours) == len(theirs)
    assert [p.index for p in ours] == list(range(1, len(theirs) + 1))
    assert all(p.data == buf for p, (_, buf) in zip(ours, theirs, strict=True))
    assert all(abs(p.ts_ns / 1e9 - ts) < 1e-5 for p, (ts, _) in zip(ours, theirs, strict=True))
    assert all(p.linktype == 1 and p.wirelen == len(p.data) for p in ours)


@pytest.mark.parametrize(
    "make",
    [
        lambda s, d: variants.to_pcapng(s, d, 9),
        lambda s, d: variants.to_pcapng(s, d, 6),
        variants.to_nanosecond,
        variants.to_big_endian,
        lambda s, d: variants.compress(s, d, "gz"),
        lambda s, d: variants.compress(s, d, "bz2"),
        lambda s, d: variants.compress(s, d, "xz"),
    ],
    ids=["pcapng-ns", "pcapng-us", "pcap-ns", "pcap-be", "gz", "bz2", "xz"],
)
def test_format_variants_same_packets(tmp_path: Path, make: object) -> None:
    src = SMALL if SMALL.exists() else _sample(tmp_path)
    dst = tmp_path / "variant"
    make(src, dst)  # type: ignore[operator]
    assert _key(list(read_packets(dst))) == _key(list(read_packets(src)))


def test_nanosecond_precision_kept(tmp_path: Path) -> None:
    path = tmp_path / "ns.pcap"
    write_pcap(path, [(1_700_000_000_123_456_789, b"x" * 20)], nanosecond=True)
    assert next(iter(read_packets(path))).ts_ns == 1_700_000_000_123_456_789


def test_pcapng_two_interfaces(tmp_path: Path) -> None:
    src = _sample(tmp_path)
    dst = tmp_path / "two.pcapng"
    variants.to_pcapng_two_interfaces(src, dst)
    got = list(read_packets(dst))
    assert got[0].linktype == 147 and got[0].data == b"junk" and got[0].index == 1
    orig = list(read_packets(src))
    assert [(p.ts_ns // 1000, p.data) for p in got[1:]] == [(p.ts_ns // 1000, p.data) for p in orig]
    assert [p.index for p in got] == list(range(1, len(orig) + 2))


def test_pcapng_spb_obsolete_pb_sections_and_binary_resolution(tmp_path: Path) -> None:
    # Section 1: ether with 2^-10 s resolution, EPB + SPB + obsolete PB, plus a skipped NRB.
    # Section 2: a new interface list (id 0 again) with raw IP.
    ts = 1_700_000_000 * 1_000_000_000
    blob = (
        pcapng_shb()
        + pcapng_idb(1, tsresol=0x80 | 10)
        + pcapng_epb(ts, b"a" * 14, 0, tsresol=0x80 | 10)
        + pcapng_spb(b"b" * 15)
        + _block(4, b"\x00\x00\x00\x00")  # name resolution block, ignored
        + pcapng_obsolete_pb(ts + 1_000_000_000, b"c" * 16, 0, tsresol=0x80 | 10)
        + pcapng_shb()
        + pcapng_idb(101, tsresol=6)
        + pcapng_epb(ts + 5_000, b"d" * 17, 0, tsresol=6)
    )
    path = tmp_path / "mixed.pcapng"
    path.write_bytes(blob)
    got = list(read_packets(path))
    assert [(p.index, p.linktype, p.data) for p in got] == [
        (1, 1, b"a" * 14),
        (2, 1, b"b" * 15),
        (3, 1, b"c" * 16),
        (4, 101, b"d" * 17),
    ]
    assert got[0].ts_ns == ts
    assert got[2].ts_ns == ts + 1_000_000_000
    assert got[3].ts_ns == ts + 5_000


def test_pcapng_big_endian_section(tmp_path: Path) -> None:
    shb = struct.pack(">IIIHHq", 0x0A0D0D0A, 28, 0x1A2B3C4D, 1, 0, -1) + struct.pack(">I", 28)
    idb = struct.pack(">IIHHI", 1, 20, 1, 0, 0) + struct.pack(">I", 20)
    body = struct.pack(">IIIII", 0, 0, 1_000_000, 4, 4) + b"wxyz"
    epb = struct.pack(">II", 6, len(body) + 12) + body + struct.pack(">I", len(body) + 12)
    path = tmp_path / "be.pcapng"
    path.write_bytes(shb + idb + epb)
    (p,) = list(read_packets(path))
    assert p.data == b"wxyz" and p.ts_ns == 1_000_000_000 and p.linktype == 1


def test_file_object_and_stdin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = _sample(tmp_path)
    want = _key(list(read_packets(src)))
    assert _key(list(read_packets(io.BytesIO(src.read_bytes())))) == want
    gz = tmp_path / "s.pcap.gz"
    variants.compress(src, gz, "gz")

    class FakeStdin:
        buffer = io.BytesIO(gz.read_bytes())

    monkeypatch.setattr("sys.stdin", FakeStdin())
    assert _key(list(read_packets("-"))) == want


def test_unknown_linktype_passed_through(tmp_path: Path) -> None:
    path = tmp_path / "lt.pcap"
    write_pcap(path, [(0, b"hello")], linktype=147)
    assert next(iter(read_packets(path))).linktype == 147


# --- bad files ----------------------------------------------------------------------------------


def _fails(path: object) -> CaptureError:
    with pytest.raises(CaptureError) as info:
        list(read_packets(path))  # type: ignore[arg-type]
    err = info.value
    assert "\n" not in str(err) and "Traceback" not in str(err)
    return err


def test_empty_file(tmp_path: Path) -> None:
    p = tmp_path / "empty.pcap"
    p.write_bytes(b"")
    err = _fails(p)
    assert isinstance(err, NotACapture) and err.exit_code == 4 and "empty" in str(err)


def test_not_a_capture(tmp_path: Path) -> None:
    p = tmp_path / "x.pcap"
    p.write_text("hello world, not a capture\n")
    assert isinstance(_fails(p), NotACapture)


def test_gzip_of_text_is_not_a_capture(tmp_path: Path) -> None:
    p = tmp_path / "x.txt"
    p.write_text("plain text " * 100)
    variants.compress(p, tmp_path / "x.gz", "gz")
    assert isinstance(_fails(tmp_path / "x.gz"), NotACapture)


def test_truncated_header(tmp_path: Path) -> None:
    p = tmp_path / "h.pcap"
    p.write_bytes(_sample(tmp_path).read_bytes()[:10])
    err = _fails(p)
    assert isinstance(err, TruncatedCapture) and err.exit_code == 5


@pytest.mark.parametrize("fmt", ["pcap", "pcapng", "gz"])
def test_truncated_last_record_yields_complete_packets_first(tmp_path: Path, fmt: str) -> None:
    src = _sample(tmp_path)
    n = len(list(read_packets(src)))
    if fmt == "pcapng":
        ng = tmp_path / "s.pcapng"
        variants.to_pcapng(src, ng)
        src = ng
    cut = tmp_path / "cut"
    variants.truncate_bytes(src, cut, 7)
    if fmt == "gz":
        gz = tmp_path / "cut.gz"
        variants.compress(cut, gz, "gz")
        cut = gz
    got: list[RawPacket] = []
    with pytest.raises(TruncatedCapture) as info:
        for p in read_packets(cut):
            got.append(p)
    assert len(got) == n - 1
    assert info.value.packets_read == n - 1
    assert f"packet {n}" in str(info.value) or fmt == "pcapng"


def test_truncated_gzip_stream(tmp_path: Path) -> None:
    src = _sample(tmp_path)
    gz = tmp_path / "s.gz"
    variants.compress(src, gz, "gz")
    gz.write_bytes(gz.read_bytes()[:-20])
    assert isinstance(_fails(gz), TruncatedCapture)


def test_corrupt_xz_stream(tmp_path: Path) -> None:
    src = _sample(tmp_path)
    xz = tmp_path / "s.xz"
    variants.compress(src, xz, "xz")
    data = bytearray(xz.read_bytes())
    data[40:60] = b"\xff" * 20
    xz.write_bytes(bytes(data))
    err = _fails(xz)
    assert isinstance(err, (CorruptCapture, TruncatedCapture))


def test_absurd_record_length_is_corrupt(tmp_path: Path) -> None:
    p = tmp_path / "big.pcap"
    write_pcap(p, [(0, b"x" * 20)])
    data = bytearray(p.read_bytes())
    struct.pack_into("<I", data, 24 + 8, 0x7FFFFFFF)
    p.write_bytes(bytes(data))
    assert isinstance(_fails(p), CorruptCapture)


def test_missing_file(tmp_path: Path) -> None:
    err = _fails(tmp_path / "nope.pcap")
    assert isinstance(err, CaptureUnreadable) and err.exit_code == 3
    assert str(err) == f"cannot read capture '{tmp_path / 'nope.pcap'}': No such file or directory"


def test_directory(tmp_path: Path) -> None:
    err = _fails(tmp_path)
    assert isinstance(err, CaptureUnreadable) and "Is a directory" in str(err)


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root can read anything")
def test_unreadable(tmp_path: Path) -> None:
    p = _sample(tmp_path)
    p.chmod(0)
    err = _fails(p)
    assert isinstance(err, CaptureUnreadable) and "Permission denied" in str(err)


def test_exit_codes_distinct() -> None:
    codes = [c.exit_code for c in (CaptureUnreadable, NotACapture, TruncatedCapture, CorruptCapture)]
    assert len(set(codes)) == len(codes)

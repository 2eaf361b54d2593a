"""Reading capture files: pcap and pcapng, optionally gzip/bz2/xz compressed.

``read_packets(source)`` yields :class:`RawPacket` objects in file order. The format is
detected by magic number, never by file name, so ``capture.pcap.gz`` piped through stdin
works the same as a plain file.

The record loops are hand-written over a large in-memory chunk (``struct.unpack_from`` at
an offset) rather than dpkt's readers: one ``read()`` call per megabyte instead of two per
packet makes the reader several times faster, which matters because this is the first
stage of every pipeline run.

Errors are :class:`CaptureError` subclasses carrying a one-line message and a process exit
code, so the CLI can print ``str(err)`` and ``sys.exit(err.exit_code)``:

==========  ======================  ===============================================
exit code   class                   meaning
==========  ======================  ===============================================
3           ``CaptureUnreadable``   the file cannot be opened or read (OSError)
4           ``NotACapture``         unknown magic number (includes an empty file)
5           ``TruncatedCapture``    file header or last record cut short
6           ``CorruptCapture``      impossible record/block length, broken compression
==========  ======================  ===============================================

A truncated last record is the usual state of a capture copied while tcpdump was still
writing; every complete packet is yielded first and ``TruncatedCapture`` is raised after.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import struct
import sys
import zlib
from collections.abc import Callable, Iterator
from typing import IO, BinaryIO, Protocol, Union, cast

from amqpscope.packets import RawPacket

Source = Union[str, "os.PathLike[str]", BinaryIO, IO[bytes]]

_CHUNK = 1 << 20  # bytes read from the (decompressed) stream at a time
_MAX_RECORD = 1 << 28  # larger caplen/block length means a corrupt file, not a packet

# --- errors ----------------------------------------------------------------------------------------


class CaptureError(Exception):
    """Base class: a capture cannot be read (completely). ``str(err)`` is one line."""

    exit_code: int = 2


class CaptureUnreadable(CaptureError):
    """The file does not exist, is a directory, is not readable, or reading it failed."""

    exit_code = 3


class NotACapture(CaptureError):
    """The first bytes are not a pcap, pcapng or supported compression magic."""

    exit_code = 4


class TruncatedCapture(CaptureError):
    """The file ends inside the file header or inside a record.

    ``packets_read`` is the number of complete packets yielded before the error.
    """

    exit_code = 5

    def __init__(self, message: str, packets_read: int = 0) -> None:
        super().__init__(message)
        self.packets_read = packets_read


class CorruptCapture(CaptureError):
    """Structurally impossible content (absurd lengths, bad block trailer, bad compression)."""

    exit_code = 6


# --- opening and format detection --------------------------------------------------------------


class _Reader(Protocol):
    def read(self, n: int = -1, /) -> bytes: ...


class _Prefixed:
    """A read()-only stream that first returns ``prefix`` then reads from ``inner``.

    Used because magic detection must consume bytes from streams that cannot seek (stdin).
    """

    def __init__(self, prefix: bytes, inner: _Reader) -> None:
        self._prefix = prefix
        self._inner = inner

    def read(self, n: int = -1) -> bytes:
        if self._prefix:
            if n < 0:
                data = self._prefix + self._inner.read()
                self._prefix = b""
                return data
            head, self._prefix = self._prefix[:n], self._prefix[n:]
            if len(head) < n:
                head += self._inner.read(n - len(head))
            return head
        return self._inner.read(n)


def _read_upto(f: _Reader, n: int) -> bytes:
    """Read up to ``n`` bytes, looping over short reads (pipes return what they have)."""
    parts: list[bytes] = []
    got = 0
    while got < n:
        b = f.read(n - got)
        if not b:
            break
        parts.append(b)
        got += len(b)
    return b"".join(parts)


def _display_name(source: Source) -> str:
    if isinstance(source, (str, os.PathLike)):
        name = os.fspath(source)
        return "<stdin>" if name == "-" else name
    attr = getattr(source, "name", None)
    return attr if isinstance(attr, str) else "<stream>"


def _oserror(name: str, err: OSError) -> CaptureUnreadable:
    reason = err.strerror or str(err) or type(err).__name__
    return CaptureUnreadable(f"cannot read capture {name!r}: {reason}")


_Decompressor = Callable[[_Reader], _Reader]


def _gunzip(f: _Reader) -> _Reader:
    return gzip.GzipFile(fileobj=cast(IO[bytes], f), mode="rb")  # only read() is used


def _bunzip(f: _Reader) -> _Reader:
    return bz2.BZ2File(cast(IO[bytes], f), mode="rb")


def _unxz(f: _Reader) -> _Reader:
    return lzma.LZMAFile(cast(IO[bytes], f), mode="rb")


_COMPRESSION: tuple[tuple[bytes, str, _Decompressor], ...] = (
    (b"\x1f\x8b", "gzip", _gunzip),
    (b"BZh", "bzip2", _bunzip),
    (b"\xfd7zXZ\x00", "xz", _unxz),
)

_PCAP_MAGICS = {
    b"\xd4\xc3\xb2\xa1": ("<", False),  # little-endian, microseconds
    b"\xa1\xb2\xc3\xd4": (">", False),
    b"\x4d\x3c\xb2\xa1": ("<", True),  # little-endian, nanoseconds
    b"\xa1\xb2\x3c\x4d": (">", True),
}
_PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"


def read_packets(source: Source) -> Iterator[RawPacket]:
    """Yield every packet of a capture file, in file order.

    ``source`` is a path, ``"-"`` for standard input, or a binary file object (left open).
    Raises :class:`CaptureError` subclasses; see the module documentation for exit codes.
    """
    name = _display_name(source)
    owned: IO[bytes] | None = None
    if isinstance(source, (str, os.PathLike)):
        if os.fspath(source) == "-":
            f: IO[bytes] = sys.stdin.buffer
        else:
            try:
                owned = f = open(source, "rb")  # noqa: SIM115 - closed in finally
            except OSError as err:
                raise _oserror(name, err) from None
    else:
        f = source
    try:
        yield from _read_stream(f, name)
    except OSError as err:
        # lzma/bz2 report corrupt data as OSError/LZMAError without errno; real I/O errors
        # carry an errno.
        if err.errno is None:
            raise CorruptCapture(f"corrupt compressed capture {name!r}: {err}") from None
        raise _oserror(name, err) from None
    except EOFError:
        raise TruncatedCapture(f"capture {name!r} is truncated (compressed stream ends early)") from None
    except (zlib.error, lzma.LZMAError) as err:
        raise CorruptCapture(f"corrupt compressed capture {name!r}: {err}") from None
    finally:
        if owned is not None:
            owned.close()


def _read_stream(f: IO[bytes], name: str) -> Iterator[RawPacket]:
    head = _read_upto(f, 6)
    stream: _Reader = _Prefixed(head, f)
    for magic, kind, opener in _COMPRESSION:
        if head.startswith(magic):
            stream = opener(stream)
            head = _read_upto(stream, 4)
            stream = _Prefixed(head, stream)
            if not head:
                raise NotACapture(f"{name!r} is not a capture file (empty {kind} stream)")
            break
    magic4 = head[:4]
    if magic4 in _PCAP_MAGICS:
        endian, nano = _PCAP_MAGICS[magic4]
        yield from _read_pcap(stream, name, endian, nano)
    elif magic4 == _PCAPNG_MAGIC:
        yield from _read_pcapng(stream, name)
    elif not head:
        raise NotACapture(f"{name!r} is not a capture file (empty file)")
    else:
        raise NotACapture(f"{name!r} is not a capture file (unknown magic {head[:4].hex()})")


# --- pcap ------------------------------------------------------------------------------------------


def _read_pcap(f: _Reader, name: str, endian: str, nano: bool) -> Iterator[RawPacket]:
    header = _read_upto(f, 24)
    if len(header) < 24:
        raise TruncatedCapture(f"capture {name!r} is truncated (pcap file header has {len(header)} of 24 bytes)")
    linktype = struct.unpack_from(endian + "I", header, 20)[0] & 0x0FFFFFFF  # upper bits: FCS info
    rec = struct.Struct(endian + "IIII")
    unpack_from = rec.unpack_from
    frac_mult = 1 if nano else 1000
    read = f.read
    buf = read(_CHUNK)
    pos = 0
    end = len(buf)
    index = 0
    while True:
        if end - pos < 16:
            more = read(_CHUNK)
            if not more:
                break
            buf = buf[pos:] + more
            pos = 0
            end = len(buf)
            continue
        sec, frac, caplen, wirelen = unpack_from(buf, pos)
        start = pos + 16
        stop = start + caplen
        if stop > end:
            if caplen > _MAX_RECORD:
                raise CorruptCapture(
                    f"capture {name!r} is corrupt: packet {index + 1} claims {caplen} captured bytes"
                )
            # Record straddles the chunk: read its remainder directly rather than growing the
            # chunk (large packets would otherwise be copied several times).
            rest = _read_upto(f, stop - end)
            if len(rest) < stop - end:
                buf = buf[pos:] + rest
                pos = 0
                end = len(buf)
                break
            index += 1
            yield RawPacket(index, sec * 1_000_000_000 + frac * frac_mult, linktype, buf[start:] + rest, wirelen)
            buf = read(_CHUNK)
            pos = 0
            end = len(buf)
            continue
        index += 1
        yield RawPacket(index, sec * 1_000_000_000 + frac * frac_mult, linktype, buf[start:stop], wirelen)
        pos = stop
    if pos < end:
        raise TruncatedCapture(
            f"capture {name!r} is truncated: last record (packet {index + 1}) is incomplete "
            f"({end - pos} bytes left)",
            packets_read=index,
        )


# --- pcapng ----------------------------------------------------------------------------------------

_SHB, _IDB, _PB, _SPB, _EPB = 0x0A0D0D0A, 0x00000001, 0x00000002, 0x00000003, 0x00000006


class _Interface:
    __slots__ = ("linktype", "snaplen", "ts_div", "ts_mult", "ts_offset_ns")

    def __init__(self, linktype: int, snaplen: int, resol: int, offset_s: int) -> None:
        self.linktype = linktype
        self.snaplen = snaplen
        # ticks per second from if_tsresol: MSB clear -> 10^-n, set -> 2^-n. Keep an integer
        # multiplier when it divides 1e9 (the usual 10^-6 / 10^-9) so conversion is one multiply.
        per_sec = 1 << (resol & 0x7F) if resol & 0x80 else 10**resol
        if 1_000_000_000 % per_sec == 0:
            self.ts_mult, self.ts_div = 1_000_000_000 // per_sec, 1
        else:
            self.ts_mult, self.ts_div = 1_000_000_000, per_sec
        self.ts_offset_ns = offset_s * 1_000_000_000

    def ts_ns(self, ticks: int) -> int:
        if self.ts_div == 1:
            return ticks * self.ts_mult + self.ts_offset_ns
        return ticks * self.ts_mult // self.ts_div + self.ts_offset_ns


def _idb_options(body: bytes, off: int, endian: str) -> tuple[int, int]:
    """Return (if_tsresol, if_tsoffset) from an IDB option list starting at ``off``."""
    resol, offset = 6, 0
    opt = struct.Struct(endian + "HH")
    while off + 4 <= len(body):
        code, length = opt.unpack_from(body, off)
        off += 4
        if code == 0:
            break
        if code == 9 and length >= 1:
            resol = body[off]
        elif code == 14 and length >= 8:
            offset = struct.unpack_from(endian + "q", body, off)[0]
        off += (length + 3) & ~3
    return resol, offset


def _read_pcapng(f: _Reader, name: str) -> Iterator[RawPacket]:
    read = f.read
    buf = read(_CHUNK)
    pos = 0
    end = len(buf)
    index = 0
    endian = "<"
    hdr = struct.Struct("<II")
    epb = struct.Struct("<IIIII")
    spb = struct.Struct("<I")
    opb = struct.Struct("<HHIIII")
    ifaces: list[_Interface] = []
    first = True
    while True:
        if end - pos < 12:
            more = read(_CHUNK)
            if more:
                buf = buf[pos:] + more
                pos = 0
                end = len(buf)
                continue
            if pos == end:
                return
            break  # leftover bytes: truncated
        btype = struct.unpack_from(endian + "I", buf, pos)[0]
        if btype == _SHB:
            # The byte-order magic decides the endianness of this section and all its blocks.
            bom = buf[pos + 8 : pos + 12]
            if bom == b"\x4d\x3c\x2b\x1a":
                endian = "<"
            elif bom == b"\x1a\x2b\x3c\x4d":
                endian = ">"
            else:
                raise CorruptCapture(f"capture {name!r} is corrupt: bad pcapng byte-order magic")
            hdr = struct.Struct(endian + "II")
            epb = struct.Struct(endian + "IIIII")
            spb = struct.Struct(endian + "I")
            opb = struct.Struct(endian + "HHIIII")
            ifaces = []  # interface ids are per section
        elif first:
            raise NotACapture(f"{name!r} is not a capture file (pcapng without section header)")
        first = False
        btype, blen = hdr.unpack_from(buf, pos)
        if blen < 12 or blen & 3 or blen > _MAX_RECORD:
            raise CorruptCapture(f"capture {name!r} is corrupt: pcapng block of length {blen}")
        if pos + blen > end:
            more = read(max(_CHUNK, pos + blen - end))
            if not more:
                break
            buf = buf[pos:] + more
            pos = 0
            end = len(buf)
            continue
        body = pos + 8
        if btype == _EPB:
            iface_id, ts_hi, ts_lo, caplen, wirelen = epb.unpack_from(buf, body)
            try:
                iface = ifaces[iface_id]
            except IndexError:
                raise CorruptCapture(
                    f"capture {name!r} is corrupt: packet {index + 1} on undeclared interface {iface_id}"
                ) from None
            if 20 + caplen > blen - 12:
                raise CorruptCapture(f"capture {name!r} is corrupt: packet {index + 1} overruns its block")
            index += 1
            data = buf[body + 20 : body + 20 + caplen]
            yield RawPacket(index, iface.ts_ns((ts_hi << 32) | ts_lo), iface.linktype, data, wirelen)
        elif btype == _SPB:
            if not ifaces:
                raise CorruptCapture(f"capture {name!r} is corrupt: simple packet before any interface")
            iface = ifaces[0]
            (wirelen,) = spb.unpack_from(buf, body)
            caplen = min(wirelen, blen - 16)
            if iface.snaplen:
                caplen = min(caplen, iface.snaplen)
            index += 1
            # SPB has no timestamp; 0 is what tshark shows as well.
            yield RawPacket(index, 0, iface.linktype, buf[body + 4 : body + 4 + caplen], wirelen)
        elif btype == _PB:
            iface_id, _drops, ts_hi, ts_lo, caplen, wirelen = opb.unpack_from(buf, body)
            if iface_id >= len(ifaces) or 20 + caplen > blen - 12:
                raise CorruptCapture(f"capture {name!r} is corrupt: bad obsolete packet block")
            iface = ifaces[iface_id]
            index += 1
            data = buf[body + 20 : body + 20 + caplen]
            yield RawPacket(index, iface.ts_ns((ts_hi << 32) | ts_lo), iface.linktype, data, wirelen)
        elif btype == _IDB:
            linktype, _reserved, snaplen = struct.unpack_from(endian + "HHI", buf, body)
            resol, offset = _idb_options(buf[body + 8 : pos + blen - 4], 0, endian)
            ifaces.append(_Interface(linktype, snaplen, resol, offset))
        # every other block type (NRB, ISB, DSB, custom …) carries no packets
        pos += blen
    raise TruncatedCapture(
        f"capture {name!r} is truncated: last pcapng block is incomplete ({end - pos} bytes left)",
        packets_read=index,
    )

"""Reading capture files: pcap and pcapng, optionally gzip/bz2/xz compressed.

``read_packets(source)`` yields :class:`RawPacket` objects in file order. The format is
detected by magic number, never by file name, so ``capture.pcap.gz`` piped through stdin
works the same as a plain file.

The reader is the native core's (``amqpscope._native.PacketReader``): the same code the
decoder runs, handed to Python a batch of packets at a time.

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

import os
import sys
from collections.abc import Iterator
from typing import IO, BinaryIO, Union

from amqpscope import _native
from amqpscope.packets import RawPacket

Source = Union[str, "os.PathLike[str]", BinaryIO, IO[bytes]]

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


class _Named:
    """A stream under the name error messages call it by."""

    def __init__(self, stream: IO[bytes], name: str) -> None:
        self.read = stream.read
        self.name = name


def native_source(source: Source) -> str | IO[bytes]:
    """What the core opens: a path (it reads "-", the process's standard input, itself) or a
    stream it reads through Python, such as a replaced ``sys.stdin`` (tests, embedding)."""
    if isinstance(source, os.PathLike):
        return os.fspath(source)
    if source == "-":
        try:
            sys.stdin.buffer.fileno()
        except (AttributeError, OSError, ValueError):
            return _Named(sys.stdin.buffer, "<stdin>")  # type: ignore[return-value]
    return source  # type: ignore[return-value]


def read_packets(source: Source) -> Iterator[RawPacket]:
    """Yield every packet of a capture file, in file order.

    ``source`` is a path, ``"-"`` for standard input, or a binary file object (left open).
    Raises :class:`CaptureError` subclasses; see the module documentation for exit codes.
    """
    reader = _native.PacketReader(native_source(source))
    while batch := reader.batch():
        yield from batch

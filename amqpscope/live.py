"""Live capture: packets from a network interface as :class:`RawPacket`, for the same pipeline as files.

Two capture back ends, both through scapy:

* ``libpcap`` (used whenever libpcap is installed): scapy's ctypes bindings of libpcap
  (``scapy.libs.winpcapy``): ``pcap_create``/``pcap_activate`` with a 256 KiB snap length,
  nanosecond timestamps where the kernel gives them, a 32 MiB kernel buffer and the capture
  filter compiled by libpcap. Kernel drops come from ``pcap_stats``.
* ``socket`` (Linux without libpcap, or on request): scapy's ``L2ListenSocket``, an AF_PACKET
  socket. On loopback every packet is seen twice (as sent and as received); the outgoing copy is
  skipped, as libpcap does. Kernel drops come from ``PACKET_STATISTICS``. Compiling a BPF filter
  needs libpcap: without it the default ``tcp`` filter is left to the parser (which ignores
  everything but TCP) and an explicit filter is an error.

A capture thread reads the interface and hands packets to the pipeline through a bounded
backlog. When the pipeline (or the terminal it prints to) cannot keep up, the backlog fills and
packets are dropped *and counted*; the kernel's own drops are read from the capture handle. Both
are in :class:`LiveStats`, for the summary and for warnings while the capture runs.

Packets are numbered 1, 2, 3 … in the order they are handed to the pipeline; ``write_to``
writes exactly those packets to a pcap, so decoding the file reproduces the live events.

Errors are :class:`LiveCaptureError` subclasses with a one-line message and a process exit code
(after the capture-file codes 3-6 of :mod:`amqpscope.capture`):

==========  ===========================  ====================================================
exit code   class                        meaning
==========  ===========================  ====================================================
7           ``CapturePermissionError``   not root and no CAP_NET_RAW
8           ``NoSuchInterface``          the interface does not exist or is down
9           ``BadCaptureFilter``         the BPF capture filter does not compile
10          ``LiveCaptureError``         any other failure opening or reading the interface,
                                         or creating the ``write_to`` file
==========  ===========================  ====================================================
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import select
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import IO, Any

from .packets import RawPacket
from .pcapwrite import pcap_header, pcap_record

DEFAULT_FILTER = "tcp"
SNAPLEN = 262144  # loopback carries 64 KiB segments; tcpdump's default
BUFFER_BYTES = 32 << 20  # kernel capture buffer: what absorbs a burst while Python is busy
BACKLOG_PACKETS = 200_000  # hand-over between capture thread and pipeline, in packets …
BACKLOG_BYTES = 64 << 20  # … and in bytes: whichever fills first
READ_TIMEOUT_MS = 50  # longest a packet waits in a half-filled kernel block (libpcap)
STATS_EVERY = 0.5  # seconds between reads of the kernel's drop counters

Record = tuple[int, bytes, int]
"""(ts_ns, data, wirelen) as read from the interface."""


# --- errors -----------------------------------------------------------------------------------------


class LiveCaptureError(Exception):
    """The interface cannot be opened or read. ``str(err)`` is one line."""

    exit_code = 10


class CapturePermissionError(LiveCaptureError):
    exit_code = 7


class NoSuchInterface(LiveCaptureError):
    exit_code = 8


class BadCaptureFilter(LiveCaptureError):
    exit_code = 9


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _permission(iface: str) -> CapturePermissionError:
    return CapturePermissionError(
        f"no permission to capture on {iface!r}: the in-process capture back ends need root; as an "
        "ordinary user use the default capture helper (dumpcap), see docs/sniffing.md"
    )


# --- statistics -------------------------------------------------------------------------------------


@dataclass(slots=True)
class LiveStats:
    """What the capture saw and lost. Kernel counters are None when the back end has none."""

    backend: str = ""
    linktype: int = -1
    captured: int = 0  # packets read from the interface by amqpscope
    delivered: int = 0  # handed to the pipeline (and written with ``write_to``)
    backlog_dropped: int = 0  # read, but the backlog was full: never decoded, never written
    unprocessed: int = 0  # read, but the capture stopped before the pipeline took them
    kernel_received: int | None = None  # passed the filter, as the kernel counts them
    kernel_dropped: int | None = None  # the kernel buffer was full: never read
    interface_dropped: int | None = None  # dropped by the interface or driver
    helper_dropped: int | None = None  # capture helper (dumpcap, tcpdump): dropped by the helper itself

    @property
    def dropped(self) -> int:
        """Every packet that matched the filter but was not decoded because something was full."""
        return (self.backlog_dropped + (self.kernel_dropped or 0) + (self.interface_dropped or 0)
                + (self.helper_dropped or 0))  # fmt: skip


# --- back ends --------------------------------------------------------------------------------------


class _Source:
    """One open capture handle; used by the capture thread only once started."""

    name = ""
    linktype = -1

    def read(self, out: list[Record], limit: int) -> None:
        """Append packets that are ready now (at most ``limit``); never blocks."""
        raise NotImplementedError

    def wait(self, timeout: float) -> None:
        """Block until packets may be ready or ``timeout`` seconds passed."""
        raise NotImplementedError

    def update(self, stats: LiveStats) -> None:
        """Copy the kernel's counters into ``stats``."""

    def close(self) -> None:
        raise NotImplementedError


def libpcap_available() -> bool:
    try:
        from scapy.libs import winpcapy  # noqa: F401 - raises OSError without libpcap
    except OSError:
        return False
    return True


class _PcapSource(_Source):
    """libpcap through scapy's ctypes bindings."""

    name = "libpcap"

    def __init__(self, iface: str, bpf: str | None, snaplen: int, buffer_bytes: int) -> None:
        from scapy.libs import winpcapy as pc

        self._pc = pc
        lib = ctypes.CDLL(pc._lib_name)  # own function objects for what scapy does not declare
        # pcap_next_ex is called in non-blocking mode, so it may keep the GIL: a ctypes call that
        # releases it hands the GIL to the busy pipeline thread after every packet and waits a
        # whole switch interval to get it back. Holding it, a burst is drained in one go.
        self._next_ex = ctypes.PyDLL(pc._lib_name).pcap_next_ex
        self._next_ex.restype = ctypes.c_int
        self._next_ex.argtypes = pc.pcap_next_ex.argtypes
        err = ctypes.create_string_buffer(pc.PCAP_ERRBUF_SIZE)
        handle = pc.pcap_create(iface.encode(), err)
        if not handle:
            raise LiveCaptureError(f"cannot open {iface!r}: {_one_line(err.value.decode(errors='replace'))}")
        self._p = handle
        try:
            pc.pcap_set_snaplen(handle, snaplen)
            pc.pcap_set_promisc(handle, 0)
            pc.pcap_set_timeout(handle, READ_TIMEOUT_MS)
            set_buffer = getattr(pc, "pcap_set_buffer_size", None)  # absent from very old libpcap
            if set_buffer is not None:
                set_buffer(handle, buffer_bytes)
            self._nano = _optional(lib, "pcap_set_tstamp_precision", pc)(handle, 1) == 0
            status = pc.pcap_activate(handle)
            if status < 0:
                raise _activate_error(status, iface, self._geterr())
            if self._nano:
                self._nano = _optional(lib, "pcap_get_tstamp_precision", pc, 0)(handle) == 1
            self.linktype = pc.pcap_datalink(handle)
            if bpf:
                self._set_filter(bpf)
            if pc.pcap_setnonblock(handle, 1, err) < 0:
                raise LiveCaptureError(f"cannot read {iface!r}: {self._geterr()}")
            self._fd = pc.pcap_get_selectable_fd(handle)
            if self._fd < 0:
                raise LiveCaptureError(f"cannot read {iface!r}: libpcap gives no selectable descriptor")
        except BaseException:
            pc.pcap_close(handle)
            raise
        self._poll = select.poll()
        self._poll.register(self._fd, select.POLLIN)
        self._hdr = ctypes.POINTER(pc.pcap_pkthdr)()
        self._data = ctypes.POINTER(ctypes.c_ubyte)()
        self._stat = pc.pcap_stat()

    def _geterr(self) -> str:
        return _one_line(self._pc.pcap_geterr(self._p).decode(errors="replace"))

    def _set_filter(self, bpf: str) -> None:
        pc = self._pc
        prog = pc.bpf_program()
        # netmask unknown (PCAP_NETMASK_UNKNOWN): only "ip broadcast" needs it
        if pc.pcap_compile(self._p, ctypes.byref(prog), bpf.encode(), 1, 0xFFFFFFFF) < 0:
            raise BadCaptureFilter(f"invalid capture filter {bpf!r}: {self._geterr()}")
        try:
            if pc.pcap_setfilter(self._p, ctypes.byref(prog)) < 0:
                raise BadCaptureFilter(f"cannot set capture filter {bpf!r}: {self._geterr()}")
        finally:
            pc.pcap_freecode(ctypes.byref(prog))

    def read(self, out: list[Record], limit: int) -> None:
        nxt, p, hdr, data = self._next_ex, self._p, self._hdr, self._data
        href, dref = ctypes.byref(hdr), ctypes.byref(data)
        string_at = ctypes.string_at
        mult = 1 if self._nano else 1000
        append = out.append
        while len(out) < limit:
            rc = nxt(p, href, dref)
            if rc == 1:
                h = hdr.contents
                ts = h.ts
                append((ts.tv_sec * 1_000_000_000 + ts.tv_usec * mult, string_at(data, h.caplen), h.len))
            elif rc == 0:
                return
            else:
                raise LiveCaptureError(f"capture failed: {self._geterr()}")

    def wait(self, timeout: float) -> None:
        self._poll.poll(timeout * 1000)

    def update(self, stats: LiveStats) -> None:
        if self._pc.pcap_stats(self._p, ctypes.byref(self._stat)) == 0:
            st = self._stat
            stats.kernel_received, stats.kernel_dropped, stats.interface_dropped = st.ps_recv, st.ps_drop, st.ps_ifdrop

    def close(self) -> None:
        self._pc.pcap_close(self._p)


def _optional(lib: Any, name: str, pc: Any, nargs: int = 1) -> Any:
    """A libpcap function that older versions lack; missing ones return -1 (not done)."""
    fn = getattr(lib, name, None)
    if fn is None:
        return lambda *a: -1
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.POINTER(pc.pcap_t)] + [ctypes.c_int] * nargs
    return fn


# pcap_activate's status codes (pcap/pcap.h)
_PCAP_ERROR_NO_SUCH_DEVICE, _PCAP_ERROR_PERM_DENIED, _PCAP_ERROR_IFACE_NOT_UP = -5, -8, -9
_PCAP_ERROR_PROMISC_PERM_DENIED = -11


def _activate_error(status: int, iface: str, detail: str) -> LiveCaptureError:
    if status in (_PCAP_ERROR_PERM_DENIED, _PCAP_ERROR_PROMISC_PERM_DENIED):
        return _permission(iface)
    if status == _PCAP_ERROR_NO_SUCH_DEVICE:
        return NoSuchInterface(f"no such interface {iface!r}")
    if status == _PCAP_ERROR_IFACE_NOT_UP:
        return NoSuchInterface(f"interface {iface!r} is down")
    return LiveCaptureError(f"cannot capture on {iface!r}: {detail or f'libpcap status {status}'}")


_SOL_PACKET, _PACKET_STATISTICS, _SO_RCVBUFFORCE = 263, 6, 33
_ARPHRD_LOOPBACK = 772


class _SocketSource(_Source):
    """scapy's Linux AF_PACKET listen socket."""

    name = "socket"

    def __init__(self, iface: str, bpf: str | None, snaplen: int, buffer_bytes: int) -> None:
        if not hasattr(socket, "AF_PACKET"):
            raise LiveCaptureError("the socket capture back end needs Linux (AF_PACKET); install libpcap")
        flags = _iface_flags(iface)
        if flags is None:
            raise NoSuchInterface(f"no such interface {iface!r}")
        if not flags & 1:  # IFF_UP
            raise NoSuchInterface(f"interface {iface!r} is down")
        if bpf and not libpcap_available():
            if bpf.strip() != DEFAULT_FILTER:
                raise BadCaptureFilter(f"cannot use capture filter {bpf!r}: compiling BPF needs libpcap")
            bpf = None  # "tcp" only: the segment parser ignores everything else anyway
        from scapy.arch.linux import L2ListenSocket, get_last_packet_timestamp
        from scapy.data import ARPHRD_TO_DLT
        from scapy.error import Scapy_Exception

        self._last_ts = get_last_packet_timestamp
        try:
            with _quiet_scapy():  # it warns that it has no dissector for loopback: we do not dissect
                sock = L2ListenSocket(iface=iface, filter=bpf or None, promisc=False)
        except PermissionError:
            raise _permission(iface) from None
        except Scapy_Exception as exc:
            raise BadCaptureFilter(f"invalid capture filter {bpf!r}: {_one_line(str(exc))}") from None
        except ValueError as exc:  # scapy: "Interface 'x' not found"
            raise NoSuchInterface(f"no such interface {iface!r}") from exc
        except OSError as exc:
            if exc.errno in (errno.ENODEV, errno.ENXIO):
                raise NoSuchInterface(f"no such interface {iface!r}") from None
            if exc.errno in (errno.EPERM, errno.EACCES):
                raise _permission(iface) from None
            raise LiveCaptureError(f"cannot capture on {iface!r}: {exc.strerror or exc}") from None
        self._sock = sock
        ins: socket.socket = sock.ins
        hatype = ins.getsockname()[3]
        linktype = ARPHRD_TO_DLT.get(hatype, -1)
        if linktype < 0:
            sock.close()
            raise LiveCaptureError(f"cannot capture on {iface!r}: unknown hardware type {hatype}")
        self.linktype = linktype
        self._loopback = hatype == _ARPHRD_LOOPBACK
        for opt in (_SO_RCVBUFFORCE, socket.SO_RCVBUF):  # FORCE passes rmem_max, with CAP_NET_ADMIN
            try:
                ins.setsockopt(socket.SOL_SOCKET, opt, buffer_bytes)
                break
            except OSError:
                continue
        ins.setblocking(False)
        self._ins = ins
        self._snaplen = snaplen
        self._received = self._dropped = 0

    def read(self, out: list[Record], limit: int) -> None:
        sock, ins, snaplen = self._sock, self._ins, self._snaplen
        outgoing = socket.PACKET_OUTGOING
        while len(out) < limit:
            try:
                data, sa_ll, ts = sock._recv_raw(ins, snaplen)
            except BlockingIOError:
                return
            except OSError as exc:
                raise LiveCaptureError(f"capture failed: {exc.strerror or exc}") from None
            if self._loopback and sa_ll[2] == outgoing:
                continue  # the same packet comes back as received
            if ts is None:
                ts = self._last_ts(ins)
            # the socket gives a float: keep microseconds, the digits below are rounding noise
            out.append((round(ts * 1e6) * 1000, data, len(data)))

    def wait(self, timeout: float) -> None:
        select.select([self._ins], [], [], timeout)

    def update(self, stats: LiveStats) -> None:
        with contextlib.suppress(OSError):
            # tpacket_stats: the counters reset on every read
            received, dropped = struct.unpack("II", self._ins.getsockopt(_SOL_PACKET, _PACKET_STATISTICS, 8))
            self._received += received
            self._dropped += dropped
            stats.kernel_received, stats.kernel_dropped = self._received, self._dropped

    def close(self) -> None:
        self._sock.close()


@contextlib.contextmanager
def _quiet_scapy() -> Iterator[None]:
    log = logging.getLogger("scapy.runtime")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def _iface_flags(iface: str) -> int | None:
    """The interface's IFF_* flags, None when there is no such interface."""
    try:
        socket.if_nametoindex(iface)
    except (OSError, ValueError):
        return None
    try:
        with open(f"/sys/class/net/{iface}/flags") as f:
            return int(f.read().strip(), 16)
    except (OSError, ValueError):
        return 1  # no sysfs: assume up, binding will tell


BACKENDS = ("auto", "libpcap", "socket")


def open_source(iface: str, bpf: str | None, backend: str = "auto", snaplen: int = SNAPLEN,
                buffer_bytes: int = BUFFER_BYTES) -> _Source:  # fmt: skip
    """Open the interface with the chosen back end ("auto": libpcap when installed, else socket)."""
    if backend not in BACKENDS:
        raise LiveCaptureError(f"unknown capture back end {backend!r}")
    if backend == "libpcap" or (backend == "auto" and libpcap_available()):
        if not libpcap_available():
            raise LiveCaptureError("libpcap is not installed (use the socket back end)")
        return _PcapSource(iface, bpf, snaplen, buffer_bytes)
    return _SocketSource(iface, bpf, snaplen, buffer_bytes)


# --- the hand-over ----------------------------------------------------------------------------------


class _Backlog:
    """Bounded, thread-safe queue of records; a full backlog drops and counts, never blocks."""

    def __init__(self, max_packets: int, max_bytes: int) -> None:
        self.max_packets = max_packets
        self.max_bytes = max_bytes
        self._items: deque[Record] = deque()
        self._bytes = 0
        self._cv = threading.Condition(threading.Lock())
        self.closed = False

    def put(self, batch: list[Record]) -> int:
        """Queue what fits; returns how many records were dropped."""
        dropped = 0
        with self._cv:
            items, size = self._items, self._bytes
            for rec in batch:
                n = len(rec[1])
                if len(items) >= self.max_packets or size + n > self.max_bytes:
                    dropped += 1
                    continue
                items.append(rec)
                size += n
            self._bytes = size
            self._cv.notify()
        return dropped

    def take(self, timeout: float) -> deque[Record]:
        """Everything queued, waiting up to ``timeout`` seconds when empty (then maybe empty)."""
        with self._cv:
            if not self._items and not self.closed:
                self._cv.wait(timeout)
            items, self._items, self._bytes = self._items, deque(), 0
            return items

    def close(self) -> None:
        with self._cv:
            self.closed = True
            self._cv.notify_all()


# --- the capture ------------------------------------------------------------------------------------


class LiveCapture:
    """Packets of one interface, read by a thread, consumed with :meth:`packets`.

    ``open()`` raises :class:`LiveCaptureError` subclasses; once it returns the kernel is capturing
    (packets arriving before :meth:`start` wait in the kernel buffer).
    """

    def __init__(
        self,
        iface: str,
        bpf: str | None = DEFAULT_FILTER,
        *,
        backend: str = "auto",
        write_to: str | None = None,
        snaplen: int = SNAPLEN,
        buffer_bytes: int = BUFFER_BYTES,
        backlog_packets: int = BACKLOG_PACKETS,
        backlog_bytes: int = BACKLOG_BYTES,
    ) -> None:
        self.iface = iface
        self.bpf = bpf
        self.backend = backend
        self.write_to = write_to
        self.snaplen = snaplen
        self.buffer_bytes = buffer_bytes
        self.stats = LiveStats()
        self.error: LiveCaptureError | None = None  # why the capture thread ended early, if it did
        self._backlog = _Backlog(backlog_packets, backlog_bytes)
        self._source: _Source | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._abandon = threading.Event()
        self._out: IO[bytes] | None = None

    # --- life cycle -------------------------------------------------------------------------------

    def open(self) -> LiveCapture:
        self._source = open_source(self.iface, self.bpf, self.backend, self.snaplen, self.buffer_bytes)
        self.stats.backend = self._source.name
        self.stats.linktype = self._source.linktype
        if self.write_to is not None:
            try:
                self._out = open(self.write_to, "wb", buffering=1 << 20)  # noqa: SIM115 - closed in close()
                self._out.write(pcap_header(self._source.linktype, nanosecond=True, snaplen=self.snaplen))
            except OSError as exc:
                self._source.close()
                self._source = None
                raise LiveCaptureError(f"cannot write {self.write_to!r}: {exc.strerror or exc}") from None
        return self

    def start(self) -> None:
        if self._source is None:
            self.open()
        self._thread = threading.Thread(target=self._run, name="amqpscope-capture", daemon=True)
        self._thread.start()

    def stop(self, abandon: bool = False) -> None:
        """Stop reading the interface. Packets already read are still handed over unless ``abandon``."""
        self._stop.set()
        if abandon:
            self._abandon.set()
            self._backlog.close()

    def close(self) -> None:
        self.stop()
        if self._thread is not None:
            self._thread.join(timeout=5)
            # read, but the consumer stopped before taking them (-c reached, second Ctrl-C)
            self.stats.unprocessed += len(self._backlog.take(0))
        elif self._source is not None:
            self._source.close()  # opened, never started
        self._source = None
        if self._out is not None:
            with contextlib.suppress(OSError):
                self._out.close()
            self._out = None

    def __enter__(self) -> LiveCapture:
        return self.open()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:  # fmt: skip
        self.close()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # --- the capture thread -----------------------------------------------------------------------

    def _run(self) -> None:
        src = self._source
        assert src is not None
        stats, backlog, stop = self.stats, self._backlog, self._stop
        batch: list[Record] = []
        next_stats = 0.0
        try:
            while not stop.is_set():
                src.read(batch, 1024)
                got = len(batch)
                if got:
                    stats.captured += got
                    stats.backlog_dropped += backlog.put(batch)
                    batch = []
                now = time.monotonic()
                if now >= next_stats:
                    src.update(stats)
                    next_stats = now + STATS_EVERY
                if not got:
                    src.wait(0.1)
            if not self._abandon.is_set():
                self._drain(src, batch)
        except LiveCaptureError as exc:
            self.error = exc
        except OSError as exc:
            self.error = LiveCaptureError(f"capture failed: {exc.strerror or exc}")
        finally:
            with contextlib.suppress(LiveCaptureError, OSError):
                src.update(stats)
            src.close()
            backlog.close()

    def _drain(self, src: _Source, batch: list[Record]) -> None:
        """After a stop: read what reached the kernel before it (a half-filled block is handed
        over after the read timeout), until a whole timeout passes without packets."""
        quiet_until = time.monotonic() + 2 * READ_TIMEOUT_MS / 1000
        while not self._abandon.is_set():
            src.read(batch, 1024)
            if batch:
                self.stats.captured += len(batch)
                self.stats.backlog_dropped += self._backlog.put(batch)
                batch.clear()
                quiet_until = time.monotonic() + 2 * READ_TIMEOUT_MS / 1000
                continue
            left = quiet_until - time.monotonic()
            if left <= 0:
                return
            src.wait(left)

    # --- the consumer -----------------------------------------------------------------------------

    def packets(self) -> Iterator[RawPacket]:
        """The captured packets, numbered from 1, until the capture stops and its backlog is empty."""
        if self._thread is None:
            self.start()
        linktype = self.stats.linktype
        stats, backlog, abandon = self.stats, self._backlog, self._abandon
        out = self._out
        index = 0
        while True:
            items = backlog.take(0.2)
            if not items:
                if out is not None:
                    out.flush()  # idle: let a reader of the file see everything so far
                if backlog.closed or abandon.is_set():
                    return
                continue
            while items:
                if abandon.is_set():
                    stats.unprocessed += len(items)
                    return
                ts_ns, data, wirelen = items.popleft()
                index += 1
                stats.delivered = index
                if out is not None:
                    out.write(pcap_record(ts_ns, data, nanosecond=True, wirelen=wirelen))
                yield RawPacket(index, ts_ns, linktype, data, wirelen)

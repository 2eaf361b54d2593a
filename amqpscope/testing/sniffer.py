"""Record loopback traffic of one TCP port to a pcap file with tcpdump.

``LoopbackRecorder`` runs ``tcpdump -i lo -s 0 -U -w FILE tcp port N``, returns from
``__enter__`` only once tcpdump reports it is capturing, and stops it with SIGINT at
exit so the pcap file is complete (tcpdump flushes and closes it on SIGINT).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType


class RecorderError(RuntimeError):
    """tcpdump could not be started or did not stop cleanly."""


def tcpdump_available() -> bool:
    return shutil.which("tcpdump") is not None


class LoopbackRecorder:
    """Context manager recording ``tcp port PORT`` on interface ``lo`` into ``path``.

    ``extra_filter`` is and-ed to the BPF filter. ``settle`` is a short pause after
    the last packet of interest before stopping (the kernel may still be delivering
    the final FIN/ACK segments to the capture socket).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        port: int,
        *,
        interface: str = "lo",
        extra_filter: str | None = None,
        buffer_kib: int = 32768,
        start_timeout: float = 15.0,
        settle: float = 0.3,
        also_ports: tuple[int, ...] = (),
    ) -> None:
        self.path = Path(path)
        self.port = port
        self.also_ports = also_ports  # more ports recorded in the same file
        self.interface = interface
        self.extra_filter = extra_filter
        self.buffer_kib = buffer_kib
        self.start_timeout = start_timeout
        self.settle = settle
        self.packets_captured: int | None = None
        self.packets_dropped: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr_lines: list[str] = []
        self._listening = threading.Event()
        self._reader: threading.Thread | None = None

    @property
    def bpf_filter(self) -> str:
        flt = f"tcp port {self.port}"
        if self.also_ports:
            flt = " or ".join(f"tcp port {p}" for p in (self.port, *self.also_ports))
        if self.extra_filter:
            flt = f"({flt}) and ({self.extra_filter})"
        return flt

    def __enter__(self) -> LoopbackRecorder:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        if self._proc is not None:
            raise RecorderError("recorder already started")
        tcpdump = shutil.which("tcpdump")
        if tcpdump is None:
            raise RecorderError("tcpdump is not installed (run tools/install-system-deps.sh)")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        cmd = [
            tcpdump,
            "-i",
            self.interface,
            "-s",
            "0",
            "-U",
            # TPACKET_V2 without block timeout: nothing is left in a half-filled ring
            # block when tcpdump is stopped.
            "--immediate-mode",
            "-n",
            "-B",
            str(self.buffer_kib),
            # Keep root's privileges: the output file stays writable by the caller.
            "-Z",
            "root",
            "-w",
            str(self.path),
            self.bpf_filter,
        ]
        if os.geteuid() != 0:
            cmd.remove("-Z")
            cmd.remove("root")
        self._proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + self.start_timeout
        while not self._listening.wait(0.02):
            if self._proc.poll() is not None:
                if self._reader is not None:
                    self._reader.join(timeout=2)
                raise RecorderError(f"tcpdump exited with {self._proc.returncode}: " + "".join(self._stderr_lines))
            if time.monotonic() > deadline:
                self._terminate()
                raise RecorderError("tcpdump did not start capturing: " + "".join(self._stderr_lines))

    def stop(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if self.settle > 0 and proc.poll() is None:
            time.sleep(self.settle)
        self._terminate()
        if self._reader is not None:
            self._reader.join(timeout=5)
        self._parse_stats()
        if proc.returncode not in (0, -signal.SIGINT):
            raise RecorderError(f"tcpdump exited with {proc.returncode}: " + "".join(self._stderr_lines))

    @property
    def stderr(self) -> str:
        return "".join(self._stderr_lines)

    def _terminate(self) -> None:
        proc = self._proc
        if proc is None:
            return
        self._proc = None
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait(timeout=5)

    def _read_stderr(self) -> None:
        proc = self._proc
        if proc is None or proc.stderr is None:
            return
        for raw in proc.stderr:
            line = raw.decode("utf-8", "replace")
            self._stderr_lines.append(line)
            if "listening on" in line:
                self._listening.set()
        proc.stderr.close()

    def _parse_stats(self) -> None:
        for line in self._stderr_lines:
            words = line.split()
            if len(words) >= 3 and words[1] == "packets":
                with contextlib.suppress(ValueError):
                    if words[2] == "captured":
                        self.packets_captured = int(words[0])
                    elif words[2:4] == ["dropped", "by"] and words[-1] == "kernel":
                        self.packets_dropped = int(words[0])


# -- a small independent AMQP frame walker, for provenance notes and smoke tests --------

_CLASSES = {10: "Connection", 20: "Channel", 40: "Exchange", 50: "Queue", 60: "Basic", 85: "Confirm", 90: "Tx"}
_METHODS: dict[int, dict[int, str]] = {
    10: {
        10: "Start",
        11: "Start-Ok",
        20: "Secure",
        21: "Secure-Ok",
        30: "Tune",
        31: "Tune-Ok",
        40: "Open",
        41: "Open-Ok",
        50: "Close",
        51: "Close-Ok",
        60: "Blocked",
        61: "Unblocked",
        70: "Update-Secret",
        71: "Update-Secret-Ok",
    },
    20: {10: "Open", 11: "Open-Ok", 20: "Flow", 21: "Flow-Ok", 40: "Close", 41: "Close-Ok"},
    40: {
        10: "Declare",
        11: "Declare-Ok",
        20: "Delete",
        21: "Delete-Ok",
        30: "Bind",
        31: "Bind-Ok",
        40: "Unbind",
        51: "Unbind-Ok",
    },
    50: {
        10: "Declare",
        11: "Declare-Ok",
        20: "Bind",
        21: "Bind-Ok",
        30: "Purge",
        31: "Purge-Ok",
        40: "Delete",
        41: "Delete-Ok",
        50: "Unbind",
        51: "Unbind-Ok",
    },
    60: {
        10: "Qos",
        11: "Qos-Ok",
        20: "Consume",
        21: "Consume-Ok",
        30: "Cancel",
        31: "Cancel-Ok",
        40: "Publish",
        50: "Return",
        60: "Deliver",
        70: "Get",
        71: "Get-Ok",
        72: "Get-Empty",
        80: "Ack",
        90: "Reject",
        100: "Recover-Async",
        110: "Recover",
        111: "Recover-Ok",
        120: "Nack",
    },
    85: {10: "Select", 11: "Select-Ok"},
    90: {10: "Select", 11: "Select-Ok", 20: "Commit", 21: "Commit-Ok", 30: "Rollback", 31: "Rollback-Ok"},
}


def amqp_method_name(class_id: int, method_id: int) -> str:
    cls = _CLASSES.get(class_id, f"Class{class_id}")
    meth = _METHODS.get(class_id, {}).get(method_id, f"Method{method_id}")
    return f"{cls}.{meth}"


def _tcp_payloads(path: str | os.PathLike[str]) -> Iterator[tuple[tuple[str, int, str, int], int, bytes]]:
    """Yield ((src, sport, dst, dport), seq, payload) for IPv4/IPv6 TCP packets of a pcap."""
    import ipaddress
    import struct

    with open(path, "rb") as f:
        header = f.read(24)
        if len(header) < 24:
            return
        magic = header[:4]
        if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
            endian = "<"
        elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
            endian = ">"
        else:
            raise ValueError(f"{path}: not a classic pcap file")
        linktype = struct.unpack(endian + "I", header[20:24])[0] & 0x0FFFFFFF
        rec = struct.Struct(endian + "IIII")
        while True:
            rh = f.read(16)
            if len(rh) < 16:
                return
            _, _, incl, _ = rec.unpack(rh)
            pkt = f.read(incl)
            if linktype == 1:  # Ethernet
                ethertype = struct.unpack("!H", pkt[12:14])[0]
                off = 14
            elif linktype == 113:  # Linux cooked (SLL)
                ethertype = struct.unpack("!H", pkt[14:16])[0]
                off = 16
            elif linktype in (0, 108):  # BSD loopback
                off = 4
                ethertype = 0x0800 if pkt[off] >> 4 == 4 else 0x86DD
            else:
                continue
            if ethertype == 0x0800:
                ihl = (pkt[off] & 0x0F) * 4
                if pkt[off + 9] != 6:
                    continue
                total = struct.unpack("!H", pkt[off + 2 : off + 4])[0]
                src = str(ipaddress.IPv4Address(pkt[off + 12 : off + 16]))
                dst = str(ipaddress.IPv4Address(pkt[off + 16 : off + 20]))
                end = off + total
                off += ihl
            elif ethertype == 0x86DD:
                if pkt[off + 6] != 6:
                    continue
                plen = struct.unpack("!H", pkt[off + 4 : off + 6])[0]
                src = str(ipaddress.IPv6Address(pkt[off + 8 : off + 24]))
                dst = str(ipaddress.IPv6Address(pkt[off + 24 : off + 40]))
                off += 40
                end = off + plen
            else:
                continue
            sport, dport, seq = struct.unpack("!HHI", pkt[off : off + 8])
            doff = (pkt[off + 12] >> 4) * 4
            yield (src, sport, dst, dport), seq, pkt[off + doff : end]


def count_amqp_frames(path: str | os.PathLike[str]) -> Counter[str]:
    """Count AMQP frames in a loopback capture (retransmitted bytes are skipped).

    Keys: ``protocol-header``, ``Class.Method`` (``Basic.Ack(S2C)`` / ``(C2S)`` for
    acks and nacks, which both peers send), ``Basic.Ack(S2C) multiple=1``...,
    ``content-header``, ``content-body``, ``heartbeat``, ``connections`` and ``frames``.
    A connection is a TCP flow whose client sent the protocol header. Out-of-order
    segments are held until the gap before them is filled (``unfilled-gaps`` counts
    those never filled: data lost by the capture).
    """
    import struct

    streams: dict[tuple[str, int, str, int], bytearray] = {}
    next_seq: dict[tuple[str, int, str, int], int] = {}
    pending: dict[tuple[str, int, str, int], dict[int, bytes]] = {}

    def add(key: tuple[str, int, str, int], seq: int, payload: bytes) -> bool:
        """Append in-order data; False when the segment is ahead of the expected byte."""
        exp = next_seq.get(key)
        if exp is not None:
            ahead = (seq - exp) & 0xFFFFFFFF
            if ahead and ahead < 0x80000000:
                return False  # a gap: keep it until the missing bytes arrive
            if ahead:  # (partly) old data: a retransmission
                skip = (exp - seq) & 0xFFFFFFFF
                if skip >= len(payload):
                    return True
                payload = payload[skip:]
                seq = exp
        streams.setdefault(key, bytearray()).extend(payload)
        next_seq[key] = (seq + len(payload)) & 0xFFFFFFFF
        return True

    for key, seq, payload in _tcp_payloads(path):
        if not payload:
            continue
        if not add(key, seq, payload):
            pending.setdefault(key, {})[seq] = payload
            continue
        waiting = pending.get(key)
        while waiting:
            progressed = False
            for wseq in list(waiting):
                if add(key, wseq, waiting[wseq]):
                    del waiting[wseq]
                    progressed = True
            if not progressed:
                break
    counts_gap = sum(len(w) for w in pending.values())

    counts: Counter[str] = Counter()
    clients = {k for k, data in streams.items() if data.startswith(b"AMQP")}
    counts["connections"] = len(clients)
    if counts_gap:
        counts["unfilled-gaps"] = counts_gap
    for key, data in streams.items():
        direction = "C2S" if key in clients else "S2C"
        if key not in clients and (key[2], key[3], key[0], key[1]) not in clients:
            continue  # not an AMQP connection seen from its start
        pos = 0
        if data.startswith(b"AMQP"):
            counts["protocol-header"] += 1
            pos = 8
        while pos + 7 <= len(data):
            ftype, _channel, size = struct.unpack_from("!BHI", data, pos)
            if pos + 8 + size > len(data):
                break
            body = data[pos + 7 : pos + 7 + size]
            if data[pos + 7 + size] != 0xCE:
                counts["bad-frame-end"] += 1
                break
            counts["frames"] += 1
            if ftype == 1:
                class_id, method_id = struct.unpack_from("!HH", body, 0)
                name = amqp_method_name(class_id, method_id)
                if class_id == 60 and method_id in (80, 120):
                    name += f"({direction})"
                    # delivery-tag (8 bytes) then a bit field: multiple is bit 0.
                    if body[12] & 1:
                        counts[f"{name} multiple=1"] += 1
                counts[name] += 1
            elif ftype == 2:
                counts["content-header"] += 1
            elif ftype == 3:
                counts["content-body"] += 1
            elif ftype == 8:
                counts["heartbeat"] += 1
            pos += 8 + size
    return counts

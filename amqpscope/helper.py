"""Live capture through an unprivileged analyzer: a capture helper holds the privilege.

``amqpscope sniff`` does not open the interface itself. It starts a small capture program that
parses nothing, ``dumpcap`` (Wireshark's capture helper) or else ``tcpdump``, reads the capture
stream that program writes to a pipe (pcapng from dumpcap, pcap from tcpdump) and decodes it in
the native core with the GIL released (``_native.LiveDecoder``). Only the helper needs
CAP_NET_RAW/CAP_NET_ADMIN; on Debian and Ubuntu, ``dpkg-reconfigure wireshark-common`` gives them
to ``dumpcap`` for the members of the ``wireshark`` group. See docs/sniffing.md.

Drops are read from the helper, never guessed: the pcapng Interface Statistics Blocks dumpcap
writes when it stops (``isb_ifrecv``, ``isb_ifdrop``), and the closing statistics both helpers
print on stderr, which tell the kernel's drops (``pcap``, ``ps_ifdrop``) from the helper's own
(``dumpcap``, ``flushed``).

Errors are :mod:`amqpscope.live`'s classes and exit codes: 7 the helper may not capture (the
message names the helper, what it lacks and the command that fixes it), 8 no such interface or it
is down, 9 invalid capture filter, 10 any other failure (helper not installed, helper died).
"""

from __future__ import annotations

import contextlib
import grp
import os
import re
import select
import shutil
import signal
import stat
import subprocess
import threading
import time
from dataclasses import dataclass

from .live import BadCaptureFilter, CapturePermissionError, LiveCaptureError, NoSuchInterface

HELPERS = ("dumpcap", "tcpdump")
START_TIMEOUT = 10.0  # seconds for the helper to open the interface (or fail)
STOP_TIMEOUT = 5.0  # seconds for the helper to flush and exit after SIGTERM before SIGKILL
# A stop is passed on this much later: dumpcap and tcpdump hand packets over in blocks with a timeout
# (libpcap's TPACKET_V3, dumpcap's 250 ms), and those still in the kernel's ring when they get
# SIGTERM are lost without being counted as drops. Waiting a little longer than that first lets
# every packet that arrived before Ctrl-C, SIGTERM or the end of --duration reach the decode.
STOP_DELAY = 0.6
SNAPLEN = 262144


def helper_path(name: str) -> str | None:
    """Where ``name`` is installed (PATH first, then the sbin directories tcpdump lives in)."""
    found = shutil.which(name)
    if found:
        return found
    for d in ("/usr/sbin", "/sbin", "/usr/local/sbin", "/usr/local/bin", "/usr/bin"):
        p = os.path.join(d, name)
        if os.path.isfile(p):
            return p
    return None


def choose_helper(backend: str) -> tuple[str, str]:
    """(name, path) of the helper for ``--capture-backend`` auto, dumpcap or tcpdump."""
    names = HELPERS if backend == "auto" else (backend,)
    for name in names:
        path = helper_path(name)
        if path is not None:
            return name, path
    if backend == "auto":
        raise LiveCaptureError(
            "no capture helper installed: install dumpcap (Debian/Ubuntu: sudo apt install wireshark-common; "
            "Fedora: sudo dnf install wireshark-cli) or tcpdump; as root, --capture-backend libpcap captures in process"
        )
    pkg = "wireshark-common" if backend == "dumpcap" else "tcpdump"
    raise LiveCaptureError(f"{backend} is not installed (Debian/Ubuntu: sudo apt install {pkg})")


def helper_command(name: str, path: str, iface: str, bpf: str | None, buffer_mib: int,
                   snaplen: int = SNAPLEN) -> list[str]:  # fmt: skip
    """The helper's command line: capture ``iface`` through ``bpf`` into a large kernel buffer, write to stdout."""
    if name == "dumpcap":
        cmd = [path, "-q", "-n", "-i", iface, "-B", str(buffer_mib), "-s", str(snaplen)]
        if bpf:
            cmd += ["-f", bpf]
        return [*cmd, "-w", "-"]
    cmd = [path, "-U", "-n", "-i", iface, "-B", str(buffer_mib * 1024), "-s", str(snaplen),
           "--time-stamp-precision=nano", "-w", "-"]  # fmt: skip
    if bpf:
        cmd.append(bpf)
    return cmd


# --- privileges: what the helper lacks, and the command that fixes it --------------------------------


def _file_caps(path: str) -> bytes | None:
    try:
        return os.getxattr(path, "security.capability")
    except OSError:
        return None


def _caps_text(raw: bytes | None) -> str:
    """Which of CAP_NET_RAW (13) and CAP_NET_ADMIN (12) a file's permitted set holds."""
    if not raw or len(raw) < 8:
        return "no capabilities"
    permitted = int.from_bytes(raw[4:8], "little")
    have = [n for bit, n in ((13, "cap_net_raw"), (12, "cap_net_admin")) if permitted >> bit & 1]
    return "+".join(have) if have else "no network capabilities"


def _user_groups() -> set[int]:
    return {os.getegid(), *os.getgroups()}


def permission_hint(name: str, path: str) -> str:
    """What keeps ``name`` from capturing for this user, and the exact command that fixes it."""
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError:
        st = None
    user = os.environ.get("USER") or os.environ.get("LOGNAME") or "$USER"
    if st is not None and st.st_gid != 0 and not st.st_mode & stat.S_IXOTH:
        try:
            group = grp.getgrgid(st.st_gid).gr_name
        except KeyError:
            group = str(st.st_gid)
        if st.st_gid not in _user_groups():
            return (f"{name} ({real}) may only be run by the group '{group}' and this user is not in it; "
                    f"fix: sudo usermod -aG {group} {user} (then log in again)")  # fmt: skip
    caps = _caps_text(_file_caps(real))
    setuid = st is not None and st.st_mode & stat.S_ISUID and st.st_uid == 0
    if "cap_net_raw" in caps or setuid:
        return (f"{name} ({real}) has {caps if not setuid else 'setuid root'} but the capture was refused; "
                "check that this user is in the group allowed to run it and logged in again")  # fmt: skip
    if name == "dumpcap":
        return (f"{name} ({real}) has {caps} (needs cap_net_raw and cap_net_admin); fix: "
                "sudo dpkg-reconfigure wireshark-common (answer Yes) && sudo usermod -aG wireshark "
                f"{user} (Debian/Ubuntu; then log in again), or: sudo setcap cap_net_raw,cap_net_admin=eip {real}")  # fmt: skip
    return (f"{name} ({real}) has {caps} (needs cap_net_raw and cap_net_admin); fix: install dumpcap "
            "(sudo apt install wireshark-common, answer Yes, then sudo usermod -aG wireshark "
            f"{user}), or run as root")  # fmt: skip


def _classify(name: str, path: str, iface: str, bpf: str | None, err: str, rc: int | None) -> LiveCaptureError:
    """The helper's failure to start, as one line with the right exit code."""
    low = err.lower()
    if "permission" in low or "operation not permitted" in low:
        return CapturePermissionError(f"no permission to capture on {iface!r}: {permission_hint(name, path)}")
    if "no such device" in low or "no device named" in low or "doesn't exist" in low:
        return NoSuchInterface(f"no such interface {iface!r}")
    if "not up" in low:
        return NoSuchInterface(f"interface {iface!r} is down")
    if "filter" in low and ("invalid" in low or "syntax" in low or "parse" in low):
        return BadCaptureFilter(f"invalid capture filter {bpf!r}: {_first_line(err, name)}")
    how = f"exit code {rc}" if rc is not None and rc >= 0 else f"signal {-(rc or 0)}"
    return LiveCaptureError(f"capture helper {name} failed ({how}): {_first_line(err, name) or 'no message'}")


def _first_line(err: str, name: str) -> str:
    for line in err.splitlines():
        line = line.strip()
        if not line or line.startswith(("Capturing on", "File:", "Packets")) or "listening on" in line:
            continue
        return line.removeprefix(f"{name}: ")
    return ""


# --- closing statistics ---------------------------------------------------------------------------------

_DUMPCAP_STATS = re.compile(
    r"Packets received/dropped on interface '.*': (\d+)/(\d+) "
    r"\(pcap:(\d+)/dumpcap:(\d+)/flushed:(\d+)/ps_ifdrop:(\d+)\)"
)
_TCPDUMP_STATS = re.compile(r"^(\d+) packets (captured|received by filter|dropped by kernel|dropped by interface)$")


@dataclass(slots=True)
class HelperStats:
    """The helper's own counters; None where it gave none (killed before its statistics)."""

    received: int | None = None  # packets the kernel passed through the filter
    kernel_dropped: int | None = None  # the kernel's buffer was full (pcap ps_drop)
    interface_dropped: int | None = None  # dropped by the interface or driver (ps_ifdrop)
    helper_dropped: int | None = None  # dropped by the helper itself (dumpcap: dumpcap + flushed)
    captured: int | None = None  # packets the helper wrote


def parse_stats(name: str, stderr: str) -> HelperStats:
    st = HelperStats()
    if name == "dumpcap":
        for m in _DUMPCAP_STATS.finditer(stderr):
            recv, _drop, pcap, own, flushed, ifdrop = map(int, m.groups())
            st.received = (st.received or 0) + recv
            st.kernel_dropped = (st.kernel_dropped or 0) + pcap
            st.helper_dropped = (st.helper_dropped or 0) + own + flushed
            st.interface_dropped = (st.interface_dropped or 0) + ifdrop
        total = re.search(r"Packets captured: (\d+)", stderr)
        if total:
            st.captured = int(total.group(1))
        return st
    for line in stderr.splitlines():
        hit = _TCPDUMP_STATS.match(line.strip())
        if not hit:
            continue
        n, what = int(hit.group(1)), hit.group(2)
        if what == "captured":
            st.captured = n
        elif what == "received by filter":
            st.received = n
        elif what == "dropped by kernel":
            st.kernel_dropped = n
        else:
            st.interface_dropped = n
    if st.kernel_dropped is not None:
        st.helper_dropped = 0  # tcpdump -U writes every packet it reads
    return st


# --- the helper process -----------------------------------------------------------------------------------


class CaptureHelper:
    """One helper process writing the capture of ``iface`` to a pipe.

    ``start()`` returns once the helper has opened the interface and written its file header, or
    raises the helper's error. ``pipe_path`` is what ``_native.LiveDecoder`` opens. ``stop()`` asks
    the helper to end (SIGTERM: it flushes, writes its statistics and exits); ``close()`` makes sure
    it is gone (SIGKILL after STOP_TIMEOUT) and reaps it: no orphan is ever left.
    """

    def __init__(self, name: str, path: str, iface: str, bpf: str | None, buffer_mib: int,
                 snaplen: int = SNAPLEN) -> None:  # fmt: skip
        self.name, self.path, self.iface, self.bpf = name, path, iface, bpf
        self.command = helper_command(name, path, iface, bpf, buffer_mib, snaplen)
        self.proc: subprocess.Popen[bytes] | None = None
        self.stopped = False  # we asked it to stop
        self._timer: threading.Timer | None = None
        self._stderr: list[str] = []
        self._reader: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    @property
    def stderr(self) -> str:
        return "".join(self._stderr)

    @property
    def pipe_path(self) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        return f"/proc/self/fd/{self.proc.stdout.fileno()}"

    def start(self, timeout: float = START_TIMEOUT) -> None:
        try:
            # its own process group: a Ctrl-C on the terminal reaches amqpscope only, which passes the
            # stop on after STOP_DELAY (and always reaps the helper; see close())
            self.proc = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, bufsize=0, close_fds=True,
                                         process_group=0)  # fmt: skip
        except PermissionError:
            raise CapturePermissionError(
                f"no permission to capture on {self.iface!r}: {permission_hint(self.name, self.path)}"
            ) from None
        except FileNotFoundError:
            raise LiveCaptureError(f"{self.name} is not installed ({self.path} not found)") from None
        except OSError as exc:
            raise LiveCaptureError(f"cannot start {self.name}: {exc.strerror or exc}") from None
        self._reader = threading.Thread(target=self._read_stderr, name="amqpscope-helper-stderr", daemon=True)
        self._reader.start()
        assert self.proc.stdout is not None
        poll = select.poll()
        poll.register(self.proc.stdout.fileno(), select.POLLIN)
        deadline = time.monotonic() + timeout
        while True:
            ready = poll.poll(100)
            if ready and ready[0][1] & select.POLLIN:
                if self.stopped:  # asked to stop while it was starting
                    self._terminate()
                return  # the file header is there: the interface is open
            if ready or self.proc.poll() is not None:  # POLLHUP: it exited without writing
                rc = self.proc.wait()
                self._join_stderr()
                self.close()
                raise _classify(self.name, self.path, self.iface, self.bpf, self.stderr, rc)
            if time.monotonic() > deadline:
                self.close()
                raise LiveCaptureError(f"{self.name} did not start capturing within {timeout:.0f} s: "
                                       f"{_first_line(self.stderr, self.name) or 'no message'}")  # fmt: skip

    def _read_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for raw in iter(self.proc.stderr.readline, b""):
            self._stderr.append(raw.decode(errors="replace").replace("\r", ""))

    def _join_stderr(self) -> None:
        if self._reader is not None:
            self._reader.join(timeout=STOP_TIMEOUT)

    def stop(self, delay: float = STOP_DELAY) -> None:
        """Ask the helper to end, ``delay`` seconds from now (see STOP_DELAY); the pipe then reaches
        its end once it has flushed what it captured and written its statistics."""
        if self.stopped:
            return
        self.stopped = True
        if delay <= 0:
            self._terminate()
            return
        self._timer = threading.Timer(delay, self._terminate)
        self._timer.daemon = True
        self._timer.start()

    def _terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.stopped = True
        if self._timer is not None:
            self._timer.cancel()
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()

    def close(self, grace: float | None = None) -> int | None:
        """Stop and reap the helper; its exit status (negative: the signal that ended it). ``grace``:
        how long it may take to exit after SIGTERM before its pipe is closed (STOP_TIMEOUT)."""
        if self.proc is None:
            return None
        if self.stopped:
            if self._timer is not None:
                self._timer.join()  # a stop on its way: let it arrive
        else:
            self.stop(delay=0)
        try:
            rc = self.proc.wait(timeout=STOP_TIMEOUT if grace is None else grace)
        except subprocess.TimeoutExpired:
            # blocked writing to a pipe nobody reads any more (-c reached): closing our end ends it
            if self.proc.stdout is not None:
                with contextlib.suppress(OSError):
                    self.proc.stdout.close()
            try:
                rc = self.proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                rc = self.proc.wait()
        self._join_stderr()
        for f in (self.proc.stdout, self.proc.stderr):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()
        return rc

    def exit_status(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def stats(self) -> HelperStats:
        return parse_stats(self.name, self.stderr)


def describe_exit(rc: int | None) -> str:
    if rc is None:
        return "still running"
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit code {rc}"

"""``amqpscope sniff``: AMQP on a live interface, decoded and printed as it happens.

The packets go through the same pipeline, writers and display filter as ``decode``; only the
source differs (:mod:`amqpscope.live`). ``-c N`` counts AMQP frames (method, header, body and
heartbeat frames, before the display filter): the capture stops after the packet that completes the
N-th frame, so the events of that packet are printed too and nothing else.

Exit codes, besides those of :mod:`cli.common` (0 fine, 2 usage, spec or display-filter error):
7 no permission to capture (not root, no CAP_NET_RAW); 8 no such interface, or it is down;
9 invalid capture filter (``-f``); 10 any other capture failure (opening or reading the
interface, creating the ``-w`` file). A stop by Ctrl-C, SIGTERM, ``-c`` or ``--duration`` is a normal
end: 0. A second Ctrl-C stops without decoding the packets still waiting.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any

import click

from amqpscope.events import Connection, Finding, Frame, Message
from amqpscope.filter import compile_filter
from amqpscope.live import BACKENDS, BUFFER_BYTES, DEFAULT_FILTER, LiveCapture, LiveCaptureError, LiveStats
from amqpscope.output.records import dumps, record
from amqpscope.output.writers import JsonlWriter
from amqpscope.packets import RawPacket
from amqpscope.pipeline import RunStats, decode_packets

from .common import fail, input_options, load_codec, options_from, run_guarded, warn
from .decode import FORMATS, make_writer

LINKTYPE_NAMES = {0: "NULL", 1: "EN10MB", 12: "RAW", 101: "RAW", 108: "LOOP", 113: "LINUX_SLL", 276: "LINUX_SLL2"}
WARN_EVERY = 2.0  # seconds between drop warnings while capturing


class _Stopper:
    """Ctrl-C / SIGTERM / --duration end the capture without an exception in the middle of output."""

    def __init__(self, capture: LiveCapture, duration: float | None) -> None:
        self.capture = capture
        self.signals = 0
        self._previous: dict[int, Any] = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._on_signal)
        self._timer: threading.Timer | None = None
        if duration is not None:
            self._timer = threading.Timer(duration, capture.stop)
            self._timer.daemon = True

    def start(self) -> None:
        if self._timer is not None:
            self._timer.start()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals += 1
        # the first stops the capture and decodes what was read; a second one stops at once
        self.capture.stop(abandon=self.signals > 1)

    def restore(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


class _DropWatch:
    """Warns on stderr while capturing when packets are being dropped (throttled)."""

    def __init__(self, stats: LiveStats) -> None:
        self.stats = stats
        self.reported = 0
        self.next_check = 0.0

    def packets(self, packets: Iterator[RawPacket]) -> Iterator[RawPacket]:
        for i, p in enumerate(packets):
            if not i & 255:
                self.check()
            yield p

    def check(self) -> None:
        now = time.monotonic()
        if now < self.next_check:
            return
        self.next_check = now + WARN_EVERY
        st = self.stats
        if st.dropped > self.reported:
            self.reported = st.dropped
            warn(f"{st.dropped} packets dropped so far ({_drop_parts(st)}): the decode has gaps")


def _drop_parts(st: LiveStats) -> str:
    kernel = "n/a" if st.kernel_dropped is None else str(st.kernel_dropped + (st.interface_dropped or 0))
    return f"kernel {kernel}, backlog {st.backlog_dropped}"


def summary_line(iface: str, seconds: float, st: LiveStats, counts: dict[str, int]) -> str:
    text = (f"{iface}: {seconds:.1f} s, {st.captured} packets captured, {st.delivered} decoded, "
            f"{counts['frames']} AMQP frames, {counts['messages']} messages, {counts['connections']} connections, "
            f"{counts['findings']} findings; "
            f"{st.dropped} dropped ({_drop_parts(st)})")  # fmt: skip
    if st.unprocessed:
        text += f"; {st.unprocessed} read but not decoded (stopped)"
    return text


@click.command()
@click.option("-i", "--interface", "iface", required=True, metavar="IFACE",
              help="Interface to capture on (lo, eth0, any …).")
@click.option("-f", "--capture-filter", "bpf", default=None, metavar="BPF",
              help=f"BPF capture filter; replaces the default '{DEFAULT_FILTER}'.")
@input_options
@click.option("-c", "--count", type=click.IntRange(min=1), default=None,
              help="Stop after N AMQP frames (counted before the display filter).")
@click.option("--duration", type=click.FloatRange(min=0, min_open=True), default=None, metavar="S",
              help="Stop after S seconds.")
@click.option("-w", "--write", "write_to", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Also write the decoded packets to a pcap FILE (readable by decode, tshark, tcpdump).")
@click.option("-T", "--format", "fmt", type=click.Choice(FORMATS), default="auto", show_default=True,
              help="Output format; auto is rich on a terminal, jsonl otherwise (flushed per line).")
@click.option("-V", "--verbose", is_flag=True, help="Full tree of arguments and properties (rich view).")
@click.option("-Y", "--filter", "display_filter", default=None, metavar="EXPR",
              help="Display filter, as for decode, e.g. 'basic.publish or basic.deliver'.")
@click.option("--body", type=click.Choice(["none", "preview", "full"]), default=None,
              help="Message bodies (default: preview on a terminal, none otherwise).")
@click.option("--no-validate", is_flag=True, help="No inline findings (spec validation, as in decode).")
@click.option("--analysis", "analysis_to", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Run the conversation analytics live and write their JSON report to FILE at the end.")
@click.option("--idle-timeout", type=click.FloatRange(min=1), default=600.0, show_default=True, metavar="S",
              help="Forget TCP flows without packets for S seconds (keeps memory bounded).")
@click.option("-B", "--buffer-size", "buffer_mib", type=click.IntRange(min=1), default=BUFFER_BYTES >> 20,
              show_default=True, metavar="MiB", help="Kernel capture buffer: what absorbs bursts while decoding lags.")
@click.option("--backend", type=click.Choice(BACKENDS), default="auto", show_default=True,
              help="Capture through libpcap, or an AF_PACKET socket (Linux); auto prefers libpcap.")
def sniff(iface: str, bpf: str | None, spec: str | None, ports: tuple[int, ...], show_credentials: bool,
          count: int | None, duration: float | None, write_to: str | None, fmt: str, verbose: bool,
          display_filter: str | None, body: str | None, no_validate: bool, analysis_to: str | None,
          idle_timeout: float, buffer_mib: int, backend: str) -> None:  # fmt: skip
    """Decode AMQP live on interface IFACE (needs root or CAP_NET_RAW; see docs/sniffing.md)."""

    def run() -> int:
        predicate = compile_filter(display_filter)
        codec = load_codec(spec)
        writer = make_writer(fmt, body, verbose)
        if isinstance(writer, JsonlWriter):
            writer.flush_each = True
        flush_out = None if isinstance(writer, JsonlWriter) else writer.out.flush
        options = options_from(ports, show_credentials, keep_bodies=writer.body != "none")
        analyzer = None
        if analysis_to is not None:
            from amqpscope.analysis.stats import Analyzer

            analyzer = Analyzer(codec.spec)
        capture = LiveCapture(iface, DEFAULT_FILTER if bpf is None else bpf, backend=backend, write_to=write_to,
                              buffer_bytes=buffer_mib << 20)  # fmt: skip
        try:
            capture.open()
        except LiveCaptureError as exc:
            fail(str(exc), exc.exit_code)
        stopper = _Stopper(capture, duration)
        st = capture.stats
        lt = LINKTYPE_NAMES.get(st.linktype, str(st.linktype))
        shown_filter = DEFAULT_FILTER if bpf is None else bpf
        click.echo(f"amqpscope: capturing on {iface} ({st.backend}, link type {lt}, "
                   f"capture filter {shown_filter!r}); Ctrl-C stops", err=True)  # fmt: skip
        counts = {"frames": 0, "messages": 0, "connections": 0, "findings": 0}
        stages: tuple[Any, ...] = ()
        if not no_validate:
            from amqpscope.validate.validator import Validator  # the same inline findings as decode

            stages = (Validator(codec.spec).stage,)
        watch = _DropWatch(st)
        t0 = time.monotonic()
        stopper.start()
        capture.start()
        try:
            events = decode_packets(watch.packets(capture.packets()), codec, options, RunStats(), stages,
                                    idle_timeout_ns=int(idle_timeout * 1e9))  # fmt: skip
            for ev in events:
                t = type(ev)
                if t is Frame:
                    counts["frames"] += 1
                    if count is not None and counts["frames"] >= count:
                        capture.stop(abandon=True)  # the rest of this packet's events still come
                elif t is Message:
                    counts["messages"] += 1
                elif t is Connection and ev.state == "open":  # type: ignore[attr-defined]
                    counts["connections"] += 1
                elif t is Finding:
                    counts["findings"] += 1
                if analyzer is not None:
                    analyzer.feed(ev)
                rec = record(ev, writer.body)
                if predicate is None or predicate(rec):
                    writer.write(ev, rec)
                    if flush_out is not None:
                        flush_out()
        finally:
            stopper.restore()
            capture.close()
            writer.close()
        seconds = time.monotonic() - t0
        if analyzer is not None and analysis_to is not None:
            analyzer.finish()
            try:
                with open(analysis_to, "w", encoding="utf-8") as f:
                    f.write(dumps(analyzer.report()) + "\n")
            except OSError as exc:
                warn(f"cannot write analysis {analysis_to!r}: {exc.strerror or exc}")
        click.echo("amqpscope: " + summary_line(iface, seconds, st, counts), err=True)
        if st.dropped:
            warn(f"{st.dropped} packets matched the capture filter but were dropped ({_drop_parts(st)}); "
                 "the decode has gaps where they were")  # fmt: skip
        if capture.error is not None:
            click.echo(f"amqpscope: error: {capture.error}", err=True)
            return capture.error.exit_code
        return 0

    run_guarded(run)


"""``amqpscope sniff``: AMQP on a live interface, decoded and printed as it happens.

The analyzer holds no privilege: by default a capture helper (``dumpcap``, else ``tcpdump``,
:mod:`amqpscope.helper`) captures and writes its stream to a pipe, which the native core decodes
with the GIL released. ``--capture-backend libpcap|socket`` captures in this process instead
(:mod:`amqpscope.live`; needs root). The events go through the same writers and display filter
as ``decode``. ``-c N`` counts AMQP frames (method, header, body and
heartbeat frames, before the display filter): the capture stops after the packet that completes the
N-th frame, so the events of that packet are printed too and nothing else.

Exit codes, besides those of :mod:`cli.common` (0 fine, 2 usage, spec or display-filter error):
7 no permission to capture (the helper lacks its capabilities or this user its group; the message
names the fix); 8 no such interface, or it is down; 9 invalid capture filter (``-f``); 10 any other
capture failure (no helper installed, the helper died mid-capture, creating the ``-w`` file). A stop by Ctrl-C, SIGTERM, ``-c`` or ``--duration`` is a normal
end: 0. A second Ctrl-C stops without decoding the packets still waiting.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any

import click

from amqpscope.diagnose import Diagnoser, Diagnosis
from amqpscope.diagnose.text import print_cause
from amqpscope.events import Connection, Finding, Frame, Ledger, Message
from amqpscope.filter import compile_filter
from amqpscope.helper import CaptureHelper, choose_helper, describe_exit
from amqpscope.live import BUFFER_BYTES, DEFAULT_FILTER, LiveCapture, LiveCaptureError, LiveStats
from amqpscope.output.records import dumps, record
from amqpscope.output.writers import JsonlWriter
from amqpscope.packets import RawPacket
from amqpscope.pipeline import RunStats, _ports, _validation, decode_packets, live_batches

from .common import fail, format_option, input_options, load_codec, options_from, run_guarded, warn, wrote
from .decode import STREAM_FORMATS, make_writer

LINKTYPE_NAMES = {0: "NULL", 1: "EN10MB", 12: "RAW", 101: "RAW", 108: "LOOP", 113: "LINUX_SLL", 276: "LINUX_SLL2"}
WARN_EVERY = 2.0  # seconds between drop warnings while capturing
CAPTURE_BACKENDS = ("auto", "dumpcap", "tcpdump", "libpcap", "socket")
IN_PROCESS = ("libpcap", "socket")
HELPER_BUFFER_MIB = 256  # the helper's kernel buffer: what absorbs bursts while decoding lags
RICH_MAX_RATE = 200  # events per second above which the rich view shows a live summary instead


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
    if st.backend in IN_PROCESS:
        return f"kernel {kernel}, backlog {st.backlog_dropped}"
    helper = "n/a" if st.helper_dropped is None else str(st.helper_dropped)
    return f"kernel {kernel}, {st.backend} {helper}"


def summary_line(iface: str, seconds: float, st: LiveStats, counts: dict[str, int]) -> str:
    text = (f"{iface}: {seconds:.1f} s, {st.captured} packets captured, {st.delivered} decoded, "
            f"{counts['frames']} AMQP frames, {counts['messages']} messages, {counts['connections']} connections, "
            f"{counts['findings']} findings, {counts.get('causes', 0)} causes; "
            f"{st.dropped} dropped ({_drop_parts(st)})")  # fmt: skip
    if st.unprocessed:
        text += f"; {st.unprocessed} read but not decoded (stopped)"
    if st.backend not in IN_PROCESS and st.kernel_received is not None and st.kernel_received > st.captured + st.dropped:
        text += f"; the kernel passed {st.kernel_received} through the filter (the rest came after the stop)"
    return text


class _LiveView:
    """The rich terminal view at high rates: above RICH_MAX_RATE events a second it stops printing
    every event and prints a one-line live summary each second (rates, connections, findings);
    it goes back to every event once the rate drops."""

    def __init__(self, writer: Any, counts: dict[str, int], packets: Any) -> None:
        self.console = getattr(writer, "console", None)
        self.counts = counts
        self.packets = packets  # () -> packets decoded so far
        self.window_start = time.monotonic()
        self.window_events = 0
        self.summary = False
        self.hidden = 0
        self._last = (self.window_start, 0, 0)

    def show(self) -> bool:
        """Whether this event is printed."""
        self.window_events += 1
        if self.summary:
            self.hidden += 1
            return False
        if self.window_events > RICH_MAX_RATE:
            self.summary = True
            if self.console is not None:
                self.console.print(f"[dim]-- more than {RICH_MAX_RATE} events/s: live summary once a second "
                                   "instead of every event (--format jsonl or -Y show them all) --[/]")  # fmt: skip
        return True

    def tick(self) -> None:
        """After each batch: print the summary, close the one-second window."""
        now = time.monotonic()
        if now - self.window_start < 1.0:
            return
        if self.summary and self.console is not None:
            t0, p0, f0 = self._last
            dt = max(now - t0, 1e-6)
            packets, c = self.packets(), self.counts
            self.console.print(
                f"[bold]live[/] {(packets - p0) / dt:,.0f} packets/s, {(c['frames'] - f0) / dt:,.0f} frames/s; "
                f"{c['connections']} connections, {c['messages']} messages, {c['findings']} findings, "
                f"{c.get('causes', 0)} causes; "
                f"{self.hidden} events not shown",
                highlight=False,
            )
            self._last = (now, packets, c["frames"])
        elif not self.summary:
            self._last = (now, self.packets(), self.counts["frames"])
        if self.summary and self.window_events <= RICH_MAX_RATE // 2:
            self.summary = False  # quiet again: every event
        self.window_start, self.window_events = now, 0


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
              help="Also write the decoded packets to FILE (the helper's pcapng or pcap; readable by decode, "
                   "tshark, tcpdump).")
@format_option(STREAM_FORMATS, help="Output format; auto is text on a terminal, jsonl otherwise (flushed per batch).")
@click.option("-V", "--verbose", is_flag=True, help="Full tree of arguments and properties (rich view).")
@click.option("-Y", "--filter", "display_filter", default=None, metavar="EXPR",
              help="Display filter, as for decode, e.g. 'basic.publish or basic.deliver'.")
@click.option("--body", type=click.Choice(["none", "preview", "full"]), default=None,
              help="Message bodies (default: preview on a terminal, none otherwise).")
@click.option("--no-validate", is_flag=True, help="No inline findings (spec validation, as in decode).")
@click.option("--diagnose", "diagnose_jsonl", is_flag=True,
              help="With JSON lines, also write diagnosis records as connections end (Python then reads every "
                   "event: below line rate). The rich view always shows causes.")  # fmt: skip
@click.option("--analysis", "analysis_to", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Run the conversation analytics live and write their JSON report to FILE at the end.")
@click.option("--idle-timeout", type=click.FloatRange(min=1), default=600.0, show_default=True, metavar="S",
              help="Forget TCP flows without packets for S seconds (keeps memory bounded).")
@click.option("-B", "--buffer-size", "buffer_mib", type=click.IntRange(min=1), default=None, metavar="MiB",
              help=f"Kernel capture buffer: what absorbs bursts while decoding lags [default: {HELPER_BUFFER_MIB} "
                   f"with a helper, {BUFFER_BYTES >> 20} in process].")
@click.option("--capture-backend", "--backend", "backend", type=click.Choice(CAPTURE_BACKENDS), default="auto",
              show_default=True,
              help="Who captures: a helper (dumpcap, else tcpdump; auto), or this process (libpcap, socket; root "
                   "only).")
def sniff(iface: str, bpf: str | None, spec: str | None, ports: tuple[int, ...], show_credentials: bool,
          count: int | None, duration: float | None, write_to: str | None, fmt: str, verbose: bool,
          display_filter: str | None, body: str | None, no_validate: bool, diagnose_jsonl: bool,
          analysis_to: str | None, idle_timeout: float, buffer_mib: int | None, backend: str) -> None:  # fmt: skip
    """Decode AMQP live on interface IFACE, captured by dumpcap or tcpdump (see docs/sniffing.md)."""

    def run() -> int:
        codec = load_codec(spec)
        predicate = compile_filter(display_filter, codec.spec)
        writer = make_writer(fmt, body, verbose)
        # a client writing SSLKEYLOGFILE appends as it connects: the key logs are followed
        options = options_from(ports, show_credentials, keep_bodies=writer.body != "none", follow_keylogs=True)
        analyzer = None
        if analysis_to is not None:
            from amqpscope.analysis.stats import Analyzer

            # the core's ledger events feed the analysis; they are not written
            options = dataclasses.replace(options, ledger=True)
            analyzer = Analyzer(codec.spec, ledger_in_stream=True)
        if not no_validate:
            options = dataclasses.replace(options, validate=True)  # the same inline findings as decode
        if analyzer is not None or predicate is not None or diagnose_jsonl or not isinstance(writer, JsonlWriter):
            # Python events are made anyway (not the core's JSON-lines fast path): the ledger's
            # records let causes such as consumer-stalled show live; they are not written
            options = dataclasses.replace(options, ledger=True)
        job = _Job(iface, DEFAULT_FILTER if bpf is None else bpf, count, duration, write_to, writer, predicate,
                   analyzer, codec, options, idle_timeout, diagnose_jsonl)  # fmt: skip
        if backend in IN_PROCESS:
            code = job.in_process(backend, (buffer_mib or BUFFER_BYTES >> 20) << 20)
        else:
            code = job.helper(backend, buffer_mib or HELPER_BUFFER_MIB)
        if analyzer is not None and analysis_to is not None:
            analyzer.finish()
            try:
                with open(analysis_to, "w", encoding="utf-8") as f:
                    f.write(dumps(analyzer.report()) + "\n")
                wrote(analysis_to, "the analysis (JSON)")
            except OSError as exc:
                warn(f"cannot write analysis {analysis_to!r}: {exc.strerror or exc}")
        if write_to is not None and os.path.exists(write_to):
            wrote(write_to, "the captured packets")
        return code

    run_guarded(run)


class _Job:
    """One sniff run: the capture, the decode loop and the summary."""

    def __init__(self, iface: str, bpf: str, count: int | None, duration: float | None, write_to: str | None,
                 writer: Any, predicate: Any, analyzer: Any, codec: Any, options: Any, idle_timeout: float,
                 diagnose_jsonl: bool = False) -> None:  # fmt: skip
        self.iface, self.bpf, self.count, self.duration, self.write_to = iface, bpf, count, duration, write_to
        self.writer, self.predicate, self.analyzer = writer, predicate, analyzer
        self.codec, self.options, self.idle_timeout_ns = codec, options, int(idle_timeout * 1e9)
        self.counts = {"frames": 0, "messages": 0, "connections": 0, "findings": 0, "causes": 0}
        # causes are shown as their connection ends; the JSON-lines fast path makes no Python events,
        # so there they come only with --diagnose (which gives up the fast path)
        self.diagnoser = Diagnoser()
        self.diagnose_jsonl = diagnose_jsonl

    def _causes(self, found: list[Diagnosis]) -> None:
        """Show causes as they are diagnosed: records in the JSON lines, lines on the rich view."""
        writer = self.writer
        for d in found:
            self.counts["causes"] += 1
            rec = d.to_record()
            if isinstance(writer, JsonlWriter):
                writer.write(d, rec)  # type: ignore[arg-type]  # a record like any event's
            elif getattr(writer, "console", None) is not None:
                print_cause(writer.console, self.counts["causes"], rec)

    def finish_causes(self) -> None:
        """The causes of connections still open when the capture stops."""
        self._causes(self.diagnoser.finish())
        if isinstance(self.writer, JsonlWriter):
            self.writer.flush()

    def _consume(self, events: Any, on_frame_limit: Any = None) -> None:
        """Count, analyse, filter and write events (an iterator of batches)."""
        counts, analyzer, predicate, writer, count = self.counts, self.analyzer, self.predicate, self.writer, self.count
        is_jsonl = isinstance(writer, JsonlWriter)
        flush_out = writer.flush if is_jsonl else writer.out.flush
        view = None if is_jsonl or not hasattr(writer, "console") else _LiveView(writer, counts, self._packets)
        body = writer.body
        tight = is_jsonl and predicate is None and analyzer is None and body == "none"
        diag = self.diagnoser.feed
        for batch in events:
            if tight:  # count, then the writer's own loop (as decode's validated path)
                found: list[Diagnosis] = []
                for ev in batch:
                    found += diag(ev)
                    t = type(ev)
                    if t is Frame:
                        counts["frames"] += 1
                    elif t is Message:
                        counts["messages"] += 1
                    elif t is Finding:
                        counts["findings"] += 1
                    elif t is Connection and ev.state == "open":
                        counts["connections"] += 1
                writer.write_all([ev for ev in batch if type(ev) is not Ledger] if self.options.ledger else batch)
                self._causes(found)
                flush_out()
                if count is not None and counts["frames"] >= count and on_frame_limit is not None:
                    on_frame_limit()
                continue
            for ev in batch:
                self._causes(diag(ev))
                t = type(ev)
                if t is Ledger:
                    if analyzer is not None:
                        analyzer.feed(ev)
                    continue
                if t is Frame:
                    counts["frames"] += 1
                    if count is not None and counts["frames"] >= count and on_frame_limit is not None:
                        on_frame_limit()  # the rest of this packet's events still come
                elif t is Message:
                    counts["messages"] += 1
                elif t is Connection and ev.state == "open":
                    counts["connections"] += 1
                elif t is Finding:
                    counts["findings"] += 1
                if analyzer is not None:
                    analyzer.feed(ev)
                rec = ev.to_record() if body == "none" else record(ev, body)
                if (predicate is None or predicate(rec)) and (view is None or view.show()):
                    writer.write(ev, rec)
            flush_out()
            if view is not None:
                view.tick()

    def _packets(self) -> int:
        return 0

    # --- the capture helper (default) ----------------------------------------------------------------

    def helper(self, backend: str, buffer_mib: int) -> int:
        try:
            name, path = choose_helper(backend)
        except LiveCaptureError as exc:
            fail(str(exc), exc.exit_code)
        if self.write_to is not None:
            try:
                open(self.write_to, "wb").close()  # only whether it can be created
            except OSError as exc:
                fail(f"cannot write {self.write_to!r}: {exc.strerror or exc}", LiveCaptureError.exit_code)
        helper = CaptureHelper(name, path, self.iface, self.bpf, buffer_mib)
        abandon = threading.Event()
        # the signal handlers first: a Ctrl-C or SIGTERM from now on stops the helper cleanly
        stopper = _HelperStopper(helper, abandon, self.duration)
        try:
            return self._helper_run(name, helper, stopper, abandon)
        finally:
            stopper.restore()

    def _helper_run(self, name: str, helper: CaptureHelper, stopper: _HelperStopper, abandon: threading.Event) -> int:
        try:
            helper.start()
        except LiveCaptureError as exc:
            fail(str(exc), exc.exit_code)
        from amqpscope import _native

        try:
            dec = _native.LiveDecoder(helper.pipe_path, self.codec.tables, _ports(self.options),
                                      self.options.show_credentials, self.options.keep_bodies, self.idle_timeout_ns,
                                      self.count, self.write_to, _validation(self.codec, self.options),
                                      self.options.ledger, list(self.options.tls_follow))  # fmt: skip
        except BaseException as exc:
            helper.close()
            if isinstance(exc, OSError):
                fail(f"cannot write {self.write_to!r}: {exc.strerror or exc}", LiveCaptureError.exit_code)
            raise
        fmt_name = "pcapng" if name == "dumpcap" else "pcap"
        click.echo(f"amqpscope: capturing on {self.iface} ({name} pid {helper.pid}, {fmt_name} stream decoded by "
                   f"the core, capture filter {self.bpf!r}); Ctrl-C stops", err=True)  # fmt: skip
        self._packets = lambda: dec.capture_stats()["packets"]  # type: ignore[method-assign]
        t0 = time.monotonic()
        run_stats = RunStats()
        failure: list[BaseException] = []

        def work() -> None:
            try:
                if self._fast_path():
                    while not abandon.is_set() and (chunk := dec.jsonl(self.writer.body)) is not None:
                        self.writer.write_bytes((chunk,))
                        self.writer.flush()
                else:
                    self._consume(_until(live_batches(dec, run_stats), abandon))
                    self.finish_causes()
            except BaseException as exc:  # reported by the main thread, after the cleanup
                failure.append(exc)

        worker = threading.Thread(target=work, name="amqpscope-decode", daemon=True)
        worker.start()
        stopper.start()
        try:
            while worker.is_alive():
                worker.join(0.2)
        finally:
            stopper.restore()
            ended_alone = not helper.stopped and helper.exit_status() is not None  # nobody asked it to
            reading_done = bool(dec.capture_stats()["done"])
            rc = helper.close(grace=0.5 if reading_done else None)
            worker.join(timeout=5)
            self.writer.close()
        seconds = time.monotonic() - t0
        cs = dec.capture_stats()
        if self._fast_path():
            self.counts.update(frames=cs["frames"], messages=cs["messages"], connections=cs["connections"])
        st = _helper_stats(name, helper, cs)
        click.echo("amqpscope: " + summary_line(self.iface, seconds, st, self.counts), err=True)
        if cs["copy_error"]:
            warn(f"writing {self.write_to!r} stopped: {cs['copy_error']}")
        if st.dropped:
            warn(f"{st.dropped} packets matched the capture filter but were dropped ({_drop_parts(st)}); "
                 "the decode has gaps where they were")  # fmt: skip
        elif st.kernel_dropped is None:
            warn(f"{name} gave no statistics ({describe_exit(rc)}): whether packets were dropped is unknown")
        capture_error = None
        from amqpscope.capture import CaptureError

        for err in failure:
            if not isinstance(err, CaptureError):
                raise err
            capture_error = err
        limit_reached = self.count is not None and cs["frames"] >= self.count
        if ended_alone and not limit_reached:
            why = f": {capture_error}" if capture_error is not None else ""
            last = _last_error_line(helper.stderr)
            click.echo(f"amqpscope: error: capture helper {name} ended unexpectedly ({describe_exit(rc)}) after "
                       f"{cs['packets']} packets{why}{'; ' + last if last else ''}; the events decoded before it "
                       "are kept above", err=True)  # fmt: skip
            return LiveCaptureError.exit_code
        if capture_error is not None and not limit_reached:
            click.echo(f"amqpscope: error: the capture stream of {name} ended badly: {capture_error}", err=True)
            return LiveCaptureError.exit_code
        return 0

    def _fast_path(self) -> bool:
        """JSON lines straight from the core: no Python object per event."""
        return (isinstance(self.writer, JsonlWriter) and self.predicate is None and self.analyzer is None
                and not self.diagnose_jsonl)  # fmt: skip

    # --- in process (root) -----------------------------------------------------------------------------

    def in_process(self, backend: str, buffer_bytes: int) -> int:
        capture = LiveCapture(self.iface, self.bpf, backend=backend, write_to=self.write_to, buffer_bytes=buffer_bytes)
        try:
            capture.open()
        except LiveCaptureError as exc:
            fail(str(exc), exc.exit_code)
        stopper = _Stopper(capture, self.duration)
        st = capture.stats
        lt = LINKTYPE_NAMES.get(st.linktype, str(st.linktype))
        click.echo(f"amqpscope: capturing on {self.iface} ({st.backend} in process, link type {lt}, "
                   f"capture filter {self.bpf!r}); Ctrl-C stops", err=True)  # fmt: skip
        watch = _DropWatch(st)
        self._packets = lambda: st.delivered  # type: ignore[method-assign]
        t0 = time.monotonic()
        stopper.start()
        capture.start()
        try:
            events = decode_packets(watch.packets(capture.packets()), self.codec, self.options, RunStats(),
                                    idle_timeout_ns=self.idle_timeout_ns)
            self._consume(([ev] for ev in events), lambda: capture.stop(abandon=True))
            self.finish_causes()
        finally:
            stopper.restore()
            capture.close()
            self.writer.close()
        seconds = time.monotonic() - t0
        click.echo("amqpscope: " + summary_line(self.iface, seconds, st, self.counts), err=True)
        if st.dropped:
            warn(f"{st.dropped} packets matched the capture filter but were dropped ({_drop_parts(st)}); "
                 "the decode has gaps where they were")  # fmt: skip
        if capture.error is not None:
            click.echo(f"amqpscope: error: {capture.error}", err=True)
            return capture.error.exit_code
        return 0


def _until(batches: Iterator[list[Any]], abandon: threading.Event) -> Iterator[list[Any]]:
    for batch in batches:
        if abandon.is_set():
            return
        yield batch


def _last_error_line(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip() and not ln.startswith(("Capturing on", "File:"))]
    lines = [ln for ln in lines if not ln.startswith("Packets") and "listening on" not in ln]
    return lines[-1] if lines else ""


def _helper_stats(name: str, helper: CaptureHelper, cs: dict[str, Any]) -> LiveStats:
    """Kernel and helper drops apart: the helper's closing statistics, else its pcapng ISBs."""
    hs = helper.stats()
    st = LiveStats(backend=name)
    st.delivered = cs["packets"]
    st.captured = hs.captured if hs.captured is not None else cs["packets"]
    st.kernel_received, st.kernel_dropped = hs.received, hs.kernel_dropped
    st.interface_dropped, st.helper_dropped = hs.interface_dropped, hs.helper_dropped
    isbs = cs["interfaces"]
    if isbs:
        recv = sum(i["ifrecv"] or 0 for i in isbs)
        drop = sum(i["ifdrop"] or 0 for i in isbs) + sum(i["osdrop"] or 0 for i in isbs)
        if st.kernel_received is None:
            st.kernel_received = recv
        if st.kernel_dropped is None:
            st.kernel_dropped, st.interface_dropped = drop, 0
        else:  # never report less than the statistics blocks say
            st.kernel_dropped = max(st.kernel_dropped, drop - (st.interface_dropped or 0))
    return st


class _HelperStopper:
    """Ctrl-C / SIGTERM / --duration ask the helper to stop: it flushes what it captured, writes its
    statistics and closes the pipe, and the decode ends at the end of the stream. A second Ctrl-C
    kills the helper and abandons what is still in the pipe."""

    def __init__(self, helper: CaptureHelper, abandon: threading.Event, duration: float | None) -> None:
        self.helper, self.abandon = helper, abandon
        self.signals = 0
        self._previous: dict[int, Any] = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._on_signal)
        self._timer: threading.Timer | None = None
        if duration is not None:
            self._timer = threading.Timer(duration, helper.stop)
            self._timer.daemon = True

    def start(self) -> None:
        if self._timer is not None:
            self._timer.start()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals += 1
        if self.signals > 1:
            self.abandon.set()
            self.helper.kill()
        else:
            self.helper.stop()

    def restore(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

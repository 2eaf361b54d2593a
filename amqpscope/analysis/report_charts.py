"""The report's charts: inline SVG on one time axis that fits where the traffic is.

Times are seconds from the capture's start. The axis shows the stretches with traffic and
squeezes each idle stretch (longer than a tenth of the capture and a quarter second) into a
marked break, so a capture whose traffic is all in its first 0.15 s does not leave 95 % of every
chart empty. Rates are per second only from buckets of at least one second; over a shorter span
the charts count messages per bucket and say so, so 400 deliveries in 68 ms are not drawn as a
400k msg/s spike. Settled deliveries are counted from the core ledger's ``settle`` records (one
per delivery an ack, nack or reject settles, ``multiple`` included), not from ack frames.
"""

from __future__ import annotations

import html
import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass

from ..events import C2S
from .percentiles import Bucket, TimeSeries
from .report_evidence import BeatTimeline
from .stats import Analyzer

esc = html.escape
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f",
           "#bcbd22")  # fmt: skip
PLOTTED_CHANNELS = 4  # the busiest channels drawn in the in-flight plot (with their prefetch)
TARGET_BUCKETS = 120
PER_SECOND_FROM = 10.0  # shown seconds from which rates are per second (buckets ≥ 1 s)
# an idle stretch is squeezed into a break when it would take more than this share of the axis
# left after the longer breaks, and lasts at least IDLE_MIN seconds; at most MAX_BREAKS of them
IDLE_SHARE, IDLE_MIN, MAX_BREAKS = 1 / 3, 0.25, 6
BREAK_PX = 36
WIDTH, HEIGHT = 1200, 240
ML, MR, MT, MB = 70, 250, 26, 40


def nice(x: float) -> float:
    """1, 2 or 5 times a power of ten, at least ``x``."""
    if x <= 0:
        return 1.0
    e = 10 ** math.floor(math.log10(x))
    return next(m * e for m in (1, 2, 5, 10) if m * e >= x * (1 - 1e-9))


def tick(v: float) -> str:
    if abs(v) >= 10_000:
        return f"{v / 1000:g}k"
    return f"{v:.4g}"


def seconds(v: float) -> str:
    return f"{v * 1000:.4g} ms" if 0 < v < 1 else f"{v:.4g} s"


# --- the time axis -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Axis:
    """Shown stretches (seconds from the capture's start) and the idle breaks around them."""

    segments: tuple[tuple[float, float], ...]
    duration: float  # the capture's
    bucket: float  # seconds per bucket
    per_second: bool  # rates per second; otherwise counts per bucket

    @property
    def shown(self) -> float:
        return sum(b - a for a, b in self.segments)

    @property
    def breaks(self) -> list[tuple[float, float]]:
        """Idle stretches left out: before the first segment, between segments, after the last."""
        edges = [0.0, *[t for s in self.segments for t in s], self.duration]
        return [(edges[i], edges[i + 1]) for i in range(0, len(edges), 2) if edges[i + 1] - edges[i] > 1e-9]

    def _layout(self, pw: float) -> list[tuple[float, float, float]]:
        """(segment start s, segment end s, pixel x of its start) for each segment."""
        out, x = [], 0.0
        lead = self.segments[0][0] > 1e-9
        nbreaks = len(self.breaks)
        scale = (pw - BREAK_PX * nbreaks) / max(self.shown, 1e-9)
        if lead:
            x += BREAK_PX
        for a, b in self.segments:
            out.append((a, b, x))
            x += (b - a) * scale + BREAK_PX
        return out

    def break_positions(self, pw: float) -> list[float]:
        """The pixel x of each break, in the order of ``breaks``."""
        k, layout = self.scale(pw), self._layout(pw)
        ends = [x + (b - a) * k for a, b, x in layout]
        lead = [0.0] if self.segments[0][0] > 1e-9 else []
        trail = ends[-1:] if self.duration - self.segments[-1][1] > 1e-9 else []
        return [*lead, *ends[:-1], *trail]

    def scale(self, pw: float) -> float:
        return (pw - BREAK_PX * len(self.breaks)) / max(self.shown, 1e-9)


def _activity(series: Iterable[TimeSeries], origin: float) -> list[tuple[float, float]]:
    """The intervals (seconds from ``origin``) where any series has a bucket, merged when they touch."""
    spans = sorted((s.origin + i * s.width - origin, s.origin + (i + 1) * s.width - origin)
                   for s in series if s.origin is not None for i in s.buckets)  # fmt: skip
    merged: list[list[float]] = []
    for a, b in spans:
        if merged and a <= merged[-1][1] + 1e-9:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


def make_axis(series: Iterable[TimeSeries], origin: float, duration: float) -> Axis | None:
    spans = _activity(list(series), origin)
    if not spans:
        return None
    duration = max(duration, spans[-1][1])
    # the idle stretches: before the first activity, between activities, after the last
    edges = [0.0, *[t for sp in spans for t in sp], duration]
    idle = sorted(((edges[i + 1] - edges[i], edges[i], edges[i + 1]) for i in range(0, len(edges), 2)), reverse=True)
    shown, cut = duration, []
    for length, a, b in idle[:MAX_BREAKS]:
        if length < IDLE_MIN or length <= IDLE_SHARE * shown:
            break
        cut.append((a, b))
        shown -= length
    bounds = sorted(t for c in cut for t in c)
    segments = [(bounds[i - 1] if i else 0.0, bounds[i] if i < len(bounds) else duration)
                for i in range(0, len(bounds) + 1, 2)]  # fmt: skip
    segments = [(a, b) for a, b in segments if b - a > 1e-12]
    shown = sum(b - a for a, b in segments)
    if shown >= PER_SECOND_FROM:
        bucket, per_second = max(1.0, nice(shown / TARGET_BUCKETS)), True
    else:
        native = max((s.width for s in series if s.origin is not None), default=0.001)  # type: ignore[union-attr]
        bucket, per_second = nice(max(shown / TARGET_BUCKETS, native)), False
    # each segment a whole number of buckets, its start on a bucket boundary
    segs: list[tuple[float, float]] = []
    for a, b in segments:
        a = math.floor(a / bucket + 1e-9) * bucket
        b = max(a + bucket, math.ceil(b / bucket - 1e-9) * bucket)
        if segs and a <= segs[-1][1]:
            segs[-1] = (segs[-1][0], b)
        else:
            segs.append((a, b))
    return Axis(tuple(segs), max(duration, segs[-1][1]), bucket, per_second)


def binned(s: TimeSeries, axis: Axis, origin: float) -> list[list[Bucket | None]]:
    """The series in the axis' buckets: one list per segment, None where nothing happened."""
    out: list[list[Bucket | None]] = [[None] * max(1, round((b - a) / axis.bucket)) for a, b in axis.segments]
    if s.origin is None:
        return out
    for idx in sorted(s.buckets):
        t = s.origin + idx * s.width - origin
        for n, (a, b) in enumerate(axis.segments):
            if a - 1e-9 <= t < b:
                k = min(int((t - a) / axis.bucket + 1e-9), len(out[n]) - 1)
                cell = out[n][k]
                if cell is None:
                    cell = out[n][k] = Bucket()
                cell.merge(s.buckets[idx])
                break
    return out


# --- drawing -------------------------------------------------------------------------------------

Points = list[list[tuple[float, float]]]  # one polyline per segment, x in seconds from the capture's start


@dataclass(slots=True)
class Line:
    name: str
    points: Points
    dashed: bool = False
    dots: bool = False
    total: float | None = None  # what the line adds up to (messages), for readers and tests


@dataclass(frozen=True, slots=True)
class Mark:
    """A cause's time span (seconds from the capture's start), drawn as a band linked to it."""

    since: float
    until: float
    number: int  # the cause's place in the diagnosis (its anchor is cause-N)
    label: str


def chart(title: str, lines: list[Line], unit: str, axis: Axis, note: str = "", ident: str = "",
          marks: tuple[Mark, ...] = ()) -> str:  # fmt: skip
    """An SVG chart of lines over the axis' segments, idle breaks hatched and labelled."""
    pts = [p for ln in lines for seg in ln.points for p in seg]
    if not pts:
        return f"<p class=muted>{esc(title)}: no data.</p>"
    pw, ph = WIDTH - ML - MR, HEIGHT - MT - MB
    top = max(y for _, y in pts) or 1.0
    ystep = nice(top / 4)
    ymax = ystep * max(1, math.ceil(top / ystep - 1e-9))
    layout = axis._layout(pw)
    k = axis.scale(pw)

    def sx(t: float) -> float:
        for a, b, x in layout:
            if t <= b + 1e-9:
                return ML + x + (max(t, a) - a) * k
        a, b, x = layout[-1]
        return ML + x + (b - a) * k

    def sy(y: float) -> float:
        return MT + ph * (1 - y / ymax)

    x0, x1 = axis.segments[0][0], axis.segments[-1][1]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}"'
           f' font-size="11" font-family="sans-serif" class="chart" id="{esc(ident)}" data-x0="{x0:g}" data-x1="{x1:g}"'
           f' data-bucket-s="{axis.bucket:g}" data-per-second="{int(axis.per_second)}" data-unit="{esc(unit)}">'
           f'<text x="{ML}" y="16" font-weight="bold">{esc(title)}</text>'
           f'<text x="14" y="{MT + ph / 2:.1f}" text-anchor="middle" fill="#555" '
           f'transform="rotate(-90 14 {MT + ph / 2:.1f})">{esc(unit)}</text>']  # fmt: skip
    out.append('<defs><pattern id="idle" width="6" height="6" patternUnits="userSpaceOnUse" '
               'patternTransform="rotate(45)"><line x1="0" y1="0" x2="0" y2="6" stroke="#ccc" stroke-width="2"/>'
               "</pattern></defs>")  # fmt: skip
    for i in range(round(ymax / ystep) + 1):
        yv = ystep * i
        out.append(f'<line x1="{ML}" y1="{sy(yv):.1f}" x2="{ML + pw}" y2="{sy(yv):.1f}" stroke="#eee"/>'
                   f'<text x="{ML - 4}" y="{sy(yv) + 4:.1f}" text-anchor="end" fill="#555">{tick(yv)}</text>')  # fmt: skip
    # the idle breaks: a hatched band in the gap before, between or after the segments
    for (a, b), bx in zip(axis.breaks, axis.break_positions(pw), strict=True):
        out.append(f'<rect x="{ML + bx:.1f}" y="{MT}" width="{BREAK_PX}" height="{ph}" fill="url(#idle)" '
                   f'class="idle" data-since="{a:g}" data-until="{b:g}"><title>idle {a:.3f}–{b:.3f} s</title></rect>'
                   f'<text x="{ML + bx + BREAK_PX / 2:.1f}" y="{MT + ph / 2:.1f}" text-anchor="middle" fill="#666" '
                   f'transform="rotate(-90 {ML + bx + BREAK_PX / 2:.1f} {MT + ph / 2:.1f})">idle {seconds(b - a)}'
                   "</text>")  # fmt: skip
    for a, b, x in layout:
        step = nice(70 / k) if k > 0 else 1.0
        # a segment after a break says where it starts, whether or not a round tick falls there
        ticks = [] if abs(a - round(a / step) * step) < 1e-9 or a < 1e-9 else [a]
        t = math.ceil(a / step - 1e-9) * step
        while t <= b + 1e-9:
            if not ticks or (t - ticks[-1]) * k >= 50:
                ticks.append(t)
            t += step
        for t in ticks:
            px = ML + x + (t - a) * k
            out.append(f'<line x1="{px:.1f}" y1="{MT + ph}" x2="{px:.1f}" y2="{MT + ph + 4}" stroke="#888"/>'
                       f'<text x="{px:.1f}" y="{MT + ph + 15}" text-anchor="middle" fill="#555">{round(t, 6):g}</text>')
        out.append(f'<line x1="{ML + x:.1f}" y1="{MT + ph}" x2="{ML + x + (b - a) * k:.1f}" y2="{MT + ph}" '
                   'stroke="#888"/>')  # fmt: skip
    out.append(f'<line x1="{ML}" y1="{MT}" x2="{ML}" y2="{MT + ph}" stroke="#888"/>'
               f'<text x="{ML + pw / 2}" y="{HEIGHT - 6}" text-anchor="middle" fill="#555">'
               "seconds from the capture's start</text>")  # fmt: skip
    for m in marks:
        if m.until < x0 or m.since > x1:
            continue
        left, right = sx(m.since), sx(m.until)
        out.append(f'<a href="#cause-{m.number}"><rect x="{left:.1f}" y="{MT}" width="{max(2.0, right - left):.1f}" '
                   f'height="{ph}" fill="#d62728" fill-opacity="0.10" class="cause-mark"><title>cause {m.number}: '
                   f'{esc(m.label)}, {m.since:.3f}–{m.until:.3f} s</title></rect>'
                   f'<text x="{left + 2:.1f}" y="{MT + 10}" fill="#b22" font-size="10">{m.number}</text></a>')  # fmt: skip
    for i, ln in enumerate(lines):
        colour = COLOURS[i % len(COLOURS)]
        dash = ' stroke-dasharray="5 3"' if ln.dashed else ""
        # each line a little thinner than the one under it: lines that coincide stay visible
        thick = max(1.2, 3.5 - 0.8 * i)
        total = "" if ln.total is None else f' data-total="{ln.total:g}"'
        for seg in ln.points:
            if not seg:
                continue
            path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in seg)
            out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="{thick:g}"{dash} points="{path}" '
                       f'data-series="{esc(ln.name)}"{total}/>')  # fmt: skip
            if ln.dots or len(seg) == 1:
                out += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{colour}"/>' for x, y in seg]
        out.append(f'<rect x="{ML + pw + 12}" y="{MT + 16 * i}" width="10" height="10" fill="{colour}"/>'
                   f'<text x="{ML + pw + 26}" y="{MT + 9 + 16 * i}">{esc(ln.name)}</text>')  # fmt: skip
    if note:
        out.append(f'<text x="{ML + pw + 12}" y="{MT + 16 * len(lines) + 10}" fill="#555" font-style="italic">'
                   f"{esc(note)}</text>")  # fmt: skip
    out.append("</svg>")
    return "".join(out)


def _steps(cells: list[list[Bucket | None]], axis: Axis) -> tuple[Points, float]:
    """Counts (or rates) per bucket as steps, zero where nothing happened; and their total count."""
    pts: Points = []
    total = 0.0
    div = axis.bucket if axis.per_second else 1.0
    for (a, _), seg in zip(axis.segments, cells, strict=True):
        line = []
        for i, b in enumerate(seg):
            n = b.count if b is not None else 0
            total += n
            y = n / div
            line += [(a + i * axis.bucket, y), (a + (i + 1) * axis.bucket, y)]
        pts.append(line)
    return pts, total


def _levels(cells: list[list[Bucket | None]], axis: Axis) -> Points:
    """A level (in flight) per bucket: its maximum there, carried on through quiet buckets."""
    pts: Points = []
    level = 0.0
    for (a, _), seg in zip(axis.segments, cells, strict=True):
        line = []
        for i, b in enumerate(seg):
            top = b.max if b is not None else level
            line += [(a + i * axis.bucket, top), (a + (i + 1) * axis.bucket, top)]
            if b is not None:
                level = b.last
        if line and line[-1][1] != level:  # a segment's last bucket ends at its last level (a close's 0)
            line.append((line[-1][0], level))
        pts.append(line)
    return pts


def _means(cells: list[list[Bucket | None]], axis: Axis) -> tuple[Points, Points]:
    mean: Points = []
    top: Points = []
    for (a, _), seg in zip(axis.segments, cells, strict=True):
        mid = [(a + (i + 0.5) * axis.bucket, b) for i, b in enumerate(seg) if b is not None and b.count]
        mean.append([(x, b.total / b.count * 1000) for x, b in mid])
        top.append([(x, b.max * 1000) for x, b in mid])
    return mean, top


def plots(a: Analyzer, channels_with_deliveries: int, marks: tuple[Mark, ...] = ()) -> list[str]:
    """Message rates, latencies, and deliveries in flight against the prefetch, on one axis, with
    the causes' time spans marked."""
    origin = a.first_ts or 0.0
    dl, cf = a.deliveries, a.confirms
    rated = {"published": a.series["publish"], "delivered": a.series["deliver"],
             "settled (ack, nack, reject)": dl.latency_series, "confirmed": cf.latency_series}  # fmt: skip
    every = [*rated.values(), dl.in_flight_series, *(t.series for t in dl.channel_series.values())]
    axis = make_axis(every, origin, a.duration)
    if axis is None:
        return ["<p class=muted>No messages were published, delivered or settled: nothing to plot.</p>"]
    lines = []
    for name, s in rated.items():
        if s.origin is None:
            continue
        pts, total = _steps(binned(s, axis, origin), axis)
        lines.append(Line(name, pts, total=total))
    if axis.per_second:
        title, unit = f"Messages per second ({seconds(axis.bucket)} buckets)", "msg/s"
    else:
        title, unit = (f"Messages per {seconds(axis.bucket)} (counts per bucket: the traffic spans "
                       f"{axis.shown:.3g} s, too short for per-second rates)", f"msgs / {seconds(axis.bucket)}")  # fmt: skip
    lat: list[Line] = []
    for name, s in (("publish → confirm", cf.latency_series), ("deliver → settle", dl.latency_series)):
        if s.origin is not None:
            mean, top = _means(binned(s, axis, origin), axis)
            lat += [Line(f"{name} mean", mean, dots=True), Line(f"{name} max", top, dashed=True, dots=True)]
    flight: list[Line] = []
    tracks = dl.channel_series
    if len(tracks) > 1 and dl.in_flight_series.origin is not None:
        # drawn first (underneath): a channel that holds everything would otherwise be hidden by it
        flight.append(Line("all channels, unacked", _levels(binned(dl.in_flight_series, axis, origin), axis),
                           dashed=True))  # fmt: skip
    busiest = sorted(tracks, key=lambda k: (-tracks[k].peak, k))[:PLOTTED_CHANNELS]
    for conn, ch in sorted(busiest):
        t = tracks[(conn, ch)]
        flight.append(Line(f"conn {conn} ch {ch} unacked", _levels(binned(t.series, axis, origin), axis)))
        if t.limit:
            flight.append(Line(f"conn {conn} ch {ch} prefetch",
                               [[(a, float(t.limit)), (b, float(t.limit))] for a, b in axis.segments], dashed=True))
    shown = len(busiest)
    total = max(channels_with_deliveries, len(tracks))
    note = f"{shown} of {total} channels shown (the busiest)" if total > shown else ""
    return [
        chart(title, lines, unit, axis, ident="chart-rates", marks=marks),
        chart(f"Latencies (mean and maximum per {seconds(axis.bucket)})", lat, "ms", axis, ident="chart-latency",
              marks=marks),
        chart("Consumer deliveries in flight (unacked) against the prefetch", flight, "msgs", axis, note=note,
              ident="chart-in-flight", marks=marks),
    ]  # fmt: skip


# --- heartbeats ----------------------------------------------------------------------------------

LANES = ((C2S, "client → broker"), ("s2c", "broker → client"))


def beat_timeline(line: BeatTimeline, capture_start: float) -> str:
    """Each direction's heartbeats and other frames over the connection's life, its silences
    longer than the heartbeat interval shaded (red past twice the interval, the timeout), and the
    TCP end that followed."""
    t0 = line.start - capture_start
    t1 = (line.end if line.end is not None else line.start) - capture_start
    marks = [t - capture_start for lane in line.lanes.values() for t in (*lane.heartbeats, *lane.frames)]
    t0 = min([t0, *marks])
    t1 = max([t1, *marks, t0 + 1e-3])
    lane_h, top, ml = 46, 34, 110
    height = top + lane_h * len(LANES) + 44
    pw = WIDTH - ml - 40
    k = pw / (t1 - t0)

    def sx(t: float) -> float:
        return ml + (t - t0) * k

    iv = line.interval
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}"'
           f' font-size="11" font-family="sans-serif" class="chart beats" id="beats-{line.conn}" data-x0="{t0:g}"'
           f' data-x1="{t1:g}"><text x="{ml}" y="16" font-weight="bold">Connection {line.conn}: heartbeats and '
           f"silences (heartbeat {iv} s negotiated; a peer may close after {2 * iv} s of silence)</text>"]  # fmt: skip
    for n, (d, name) in enumerate(LANES):
        lane = line.lanes[d]
        y = top + n * lane_h
        times = sorted(t - capture_start for t in (*lane.heartbeats, *lane.frames))
        edge = [t0, *times, t1]
        for a, b in itertools.pairwise(edge):
            if iv and b - a > iv:
                colour = "#f4b4b4" if b - a > 2 * iv else "#fde7b0"
                out.append(f'<rect x="{sx(a):.1f}" y="{y + 4}" width="{max(1.0, (b - a) * k):.1f}" height="{lane_h - 14}"'
                           f' fill="{colour}" class="silence" data-dir="{d}" data-s="{b - a:.3f}"><title>silent '
                           f"{b - a:.3f} s ({a:.3f}–{b:.3f} s)</title></rect>")  # fmt: skip
                if (b - a) * k > 70:
                    out.append(f'<text x="{(sx(a) + sx(b)) / 2:.1f}" y="{y + lane_h / 2 + 2:.1f}" '
                               f'text-anchor="middle" fill="#822">silent {b - a:.1f} s</text>')  # fmt: skip
        out.append(f'<text x="{ml - 6}" y="{y + lane_h / 2:.1f}" text-anchor="end" fill="#333">{esc(name)}</text>'
                   f'<line x1="{ml}" y1="{y + lane_h - 10}" x2="{ml + pw}" y2="{y + lane_h - 10}" stroke="#bbb"/>')
        out += [f'<line x1="{sx(t - capture_start):.1f}" y1="{y + 12}" x2="{sx(t - capture_start):.1f}" '
                f'y2="{y + lane_h - 10}" stroke="#2a6" stroke-width="2" class="beat"/>' for t in lane.heartbeats]
        out += [f'<line x1="{sx(t - capture_start):.1f}" y1="{y + 22}" x2="{sx(t - capture_start):.1f}" '
                f'y2="{y + lane_h - 10}" stroke="#888"/>' for t in lane.frames]
    bottom = top + lane_h * len(LANES)
    for ts, label, _d in line.ends:
        x = sx(ts - capture_start)
        anchor = "end" if x > ml + pw / 2 else "start"  # the label inside the chart
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{bottom}" stroke="#b00" stroke-width="2"/>'
                   f'<text x="{x + (-4 if anchor == "end" else 4):.1f}" y="{top - 4}" fill="#b00" '
                   f'text-anchor="{anchor}">{esc(label)} at {ts - capture_start:.3f} s</text>')  # fmt: skip
    step = nice(80 / k)
    t = math.ceil(t0 / step) * step
    while t <= t1 + 1e-9:
        out.append(f'<text x="{sx(t):.1f}" y="{bottom + 14}" text-anchor="middle" fill="#555">{t:.6g}</text>')
        t += step
    legend = bottom + 32
    out.append(f'<line x1="{ml}" y1="{legend - 8}" x2="{ml}" y2="{legend + 2}" stroke="#2a6" stroke-width="2"/>'
               f'<text x="{ml + 6}" y="{legend}">heartbeat</text>'
               f'<line x1="{ml + 80}" y1="{legend - 8}" x2="{ml + 80}" y2="{legend + 2}" stroke="#888"/>'
               f'<text x="{ml + 86}" y="{legend}">other frame</text>'
               f'<rect x="{ml + 170}" y="{legend - 9}" width="12" height="10" fill="#fde7b0"/>'
               f'<text x="{ml + 186}" y="{legend}">silent &gt; {iv} s</text>'
               f'<rect x="{ml + 270}" y="{legend - 9}" width="12" height="10" fill="#f4b4b4"/>'
               f'<text x="{ml + 286}" y="{legend}">silent &gt; {2 * iv} s</text>'
               f'<text x="{ml + pw}" y="{legend}" text-anchor="end" fill="#555">seconds from the capture\'s start'
               "</text></svg>")  # fmt: skip
    return "".join(out)

"""Bounded latency samples and time series: memory stays fixed however long the capture is."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

DEFAULT_CAPACITY = 100_000


class Reservoir:
    """A uniform sample of at most ``capacity`` values (Vitter's algorithm R).

    Below the capacity every value is kept, so small captures give exact percentiles; above it the
    sample stays uniform over the whole run. The generator is seeded so that reports are
    reproducible run to run.
    """

    __slots__ = ("_rng", "_sorted", "capacity", "count", "max", "min", "samples", "total")

    def __init__(self, capacity: int = DEFAULT_CAPACITY, seed: int = 0x5C09E) -> None:
        self.capacity = capacity
        self.samples: list[float] = []
        self.count = 0
        self.total = 0.0
        self.min = math.inf
        self.max = -math.inf
        self._rng = random.Random(seed)
        self._sorted = True

    def add(self, value: float) -> None:
        self.count += 1
        self.total += value
        if value < self.min:
            self.min = value
        if value > self.max:
            self.max = value
        if len(self.samples) < self.capacity:
            self.samples.append(value)
        else:
            j = self._rng.randrange(self.count)
            if j < self.capacity:
                self.samples[j] = value
        self._sorted = False

    def percentile(self, p: float) -> float | None:
        """Linear interpolation between closest ranks (numpy's default), or None when empty."""
        if not self.samples:
            return None
        if not self._sorted:
            self.samples.sort()
            self._sorted = True
        s = self.samples
        k = (len(s) - 1) * p / 100.0
        lo = math.floor(k)
        hi = min(lo + 1, len(s) - 1)
        return s[lo] + (s[hi] - s[lo]) * (k - lo)

    def summary(self, scale: float = 1000.0, points: tuple[int, ...] = (50, 90, 99)) -> dict[str, Any]:
        """count, min, mean, max and the percentiles, scaled (seconds → milliseconds by default)."""
        out: dict[str, Any] = {"count": self.count}
        if not self.count:
            out.update({f"p{p}": None for p in points})
            out.update(min=None, mean=None, max=None)
            return out
        for p in points:
            v = self.percentile(p)
            out[f"p{p}"] = None if v is None else round(v * scale, 3)
        out["min"] = round(self.min * scale, 3)
        out["mean"] = round(self.total / self.count * scale, 3)
        out["max"] = round(self.max * scale, 3)
        return out


@dataclass(slots=True)
class Bucket:
    count: int = 0
    total: float = 0.0
    max: float = 0.0
    last: float = 0.0  # the value added last (a level such as in-flight carries on from it)

    def merge(self, b: Bucket) -> None:
        """Fold in ``b``, a bucket that comes later in time."""
        self.max = b.max if not self.count else max(self.max, b.max)
        self.count += b.count
        self.total += b.total
        self.last = b.last


class TimeSeries:
    """Counts (and optional values) per time bucket, with at most ``max_buckets`` buckets.

    The capture's length is not known in advance, so buckets start at ``width`` seconds and the
    width doubles (neighbours merged) whenever the series would grow past ``max_buckets``.
    """

    def __init__(self, width: float = 0.001, max_buckets: int = 400) -> None:
        self.width = width
        self.max_buckets = max_buckets
        self.origin: float | None = None
        self.buckets: dict[int, Bucket] = {}

    def add(self, ts: float, value: float = 0.0) -> None:
        origin = self.origin
        if origin is None:
            origin = self.origin = ts
        idx = int((ts - origin) // self.width) if ts >= origin else 0
        while idx >= self.max_buckets:
            self._coarsen()
            idx = int((ts - origin) // self.width)
        b = self.buckets.get(idx)
        if b is None:
            b = self.buckets[idx] = Bucket()
        if not b.count or value > b.max:
            b.max = value
        b.count += 1
        b.total += value
        b.last = value

    def _coarsen(self) -> None:
        merged: dict[int, Bucket] = {}
        for idx in sorted(self.buckets):
            merged.setdefault(idx // 2, Bucket()).merge(self.buckets[idx])
        self.buckets = merged
        self.width *= 2

    def rebase(self, width: float, origin: float) -> list[tuple[float, Bucket]]:
        """(start offset in seconds from ``origin``, bucket) at a common ``width`` ≥ our own."""
        if self.origin is None:
            return []
        out: dict[int, Bucket] = {}
        for idx in sorted(self.buckets):
            start = self.origin + idx * self.width - origin
            out.setdefault(int(start // width), Bucket()).merge(self.buckets[idx])
        return [(i * width, out[i]) for i in sorted(out)]

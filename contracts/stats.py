"""One percentile definition for the whole project, and a lateness histogram that keeps it.

Why one definition: the validity verdict compares a switch's P99 lateness and an endpoint's
P99 lateness with limits, and a step-time P99 is a headline figure; computed with different
index rules (``int(0.99 * (n - 1))``, ``int(0.99 * n)``, nearest rank), the same samples gave
different P99s depending on which part of the project read them.

The rule: **nearest rank**. The P-th percentile of n values is the ceil(P/100 x n)-th smallest
(1-based), for 0 < P <= 100; so every reported percentile is a value that was really measured,
P100 is the maximum, and P99 of fewer than 100 values is the maximum too. P = 0 means the
minimum. No interpolation.

Why a histogram for lateness: a switch or endpoint process samples its lateness on every
wake-up that finds a deadline due (thousands per real second when loaded), over runs of
minutes. A list of recent samples (what the processes kept before) judged only the end of a
run; a list of all of them costs memory and a sort. `LateHistogram` counts every sample of
the run in log-spaced buckets (BUCKETS_PER_OCTAVE per doubling, i.e. 2.2 % wide): its
percentile is the nearest-rank sample's bucket, reported as that bucket's upper edge (capped
at the largest sample), so it is never below the exact value and at most 2.2 % above it --
an error that can only make the verdict stricter. Histograms add and subtract bucket by
bucket, so a reader can take the samples of one interval (the workload, a soak window) from
two reads of a process's cumulative histogram.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

BUCKETS_PER_OCTAVE = 32
FLOOR_US = 1e-3
"""Samples below this (virtual µs) share bucket 0, reported as FLOOR_US: a nanosecond of
virtual lateness is below anything the verdict's limits could care about."""


def rank(n: int, p: float) -> int:
    """The 0-based index of the nearest-rank P-th percentile among n sorted values."""
    if not 0.0 <= p <= 100.0:
        raise ValueError(f"percentile: p must be within 0..100, got {p!r}")
    if n <= 0:
        raise ValueError("percentile: no values")
    return max(0, math.ceil(p / 100.0 * n) - 1)


def percentile(values: Iterable[float], p: float, *, presorted: bool = False) -> float | None:
    """The nearest-rank P-th percentile of `values` (None if there are none)."""
    data: Sequence[float] = values if presorted else sorted(values)  # type: ignore[assignment]
    if not data:
        return None
    return data[rank(len(data), p)]


def _bucket(x: float) -> int:
    if x < FLOOR_US:
        return 0
    return 1 + int(math.log2(x / FLOOR_US) * BUCKETS_PER_OCTAVE)


def _upper_edge(b: int) -> float:
    return FLOOR_US * 2.0 ** (b / BUCKETS_PER_OCTAVE)


class LateHistogram:
    """Every lateness sample of a process (virtual µs), counted in log-spaced buckets.

    `add` is what a wake-up pays: one log2 and a dict update. `to_json`/`from_json` carry it
    in a counters reply; `minus` takes an earlier read from a later one."""

    __slots__ = ("counts", "n", "max_us")

    def __init__(self, counts: Mapping[int, int] | None = None, max_us: float = 0.0) -> None:
        self.counts: dict[int, int] = {b: c for b, c in (counts or {}).items() if c > 0}
        self.n = sum(self.counts.values())
        self.max_us = max_us

    def add(self, late_us: float) -> None:
        if late_us < 0.0:
            late_us = 0.0
        b = _bucket(late_us)
        counts = self.counts
        counts[b] = counts.get(b, 0) + 1
        self.n += 1
        if late_us > self.max_us:
            self.max_us = late_us

    def percentile(self, p: float) -> float | None:
        """The nearest-rank P-th percentile (the upper edge of its bucket, at most the largest
        sample); None if there were no samples."""
        if self.n == 0:
            return None
        want = rank(self.n, p) + 1
        seen = 0
        for b in sorted(self.counts):
            seen += self.counts[b]
            if seen >= want:
                return min(_upper_edge(b), self.max_us)
        raise AssertionError("unreachable: counts sum to n")

    def minus(self, earlier: LateHistogram) -> LateHistogram:
        """The samples added since `earlier` (a read of the same histogram). The largest
        sample of the interval is not known exactly: the result carries the upper edge of its
        top bucket, capped at the later read's maximum."""
        keys = self.counts.keys() | earlier.counts.keys()
        counts = {b: self.counts.get(b, 0) - earlier.counts.get(b, 0) for b in keys}
        if any(c < 0 for c in counts.values()):
            raise ValueError("lateness histogram: the earlier read has samples the later lacks")
        out = LateHistogram(counts)
        if out.n:
            top = max(out.counts)
            out.max_us = min(_upper_edge(top), self.max_us)
        return out

    def to_json(self) -> dict:
        return {"buckets_per_octave": BUCKETS_PER_OCTAVE, "floor_us": FLOOR_US,
                "counts": {str(b): c for b, c in sorted(self.counts.items())},
                "max_us": self.max_us}  # fmt: skip

    @classmethod
    def from_json(cls, d: Mapping) -> LateHistogram:
        """Read `to_json`'s form; ValueError if it is not that form (a fail-closed reader
        counts the lateness as missing)."""
        if d.get("buckets_per_octave") != BUCKETS_PER_OCTAVE or d.get("floor_us") != FLOOR_US:
            raise ValueError("lateness histogram: unknown bucket layout")
        counts, top = d.get("counts"), d.get("max_us")
        if not isinstance(counts, Mapping) or not isinstance(top, (int, float)):
            raise ValueError("lateness histogram: no counts or no max_us")
        return cls({int(b): int(c) for b, c in counts.items()}, float(top))


__all__ = ["BUCKETS_PER_OCTAVE", "FLOOR_US", "LateHistogram", "percentile", "rank"]

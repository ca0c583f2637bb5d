"""The verdict's inputs read off what the switches and endpoint processes reported, failing closed.

Why a module of its own: the runner (one run) and the soak (window after window) read the same
counters and stats replies, and a reader that defaults an absent figure to zero judges a run
whose switch never reported its lateness as a run with no lateness. Here an absent or
unreadable figure is `None` plus a line in `missing`, which `validity.judge` turns into a
reason the run is invalid.

Lateness is read from the processes' cumulative histograms (contracts.stats.LateHistogram): the
samples of an interval (the workload, a soak window) are the later read minus the earlier, so
start-up and earlier windows count nowhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from contracts.stats import LateHistogram


@dataclass
class Lateness:
    """The worst process's P99 and the largest sample of an interval (virtual µs); None where
    nothing was measured, and why in `missing`."""

    p99_us: float | None = None
    max_us: float | None = None
    samples: int = 0
    missing: list[str] = field(default_factory=list)


def read_histogram(reply: object) -> LateHistogram | None:
    """A process's `timer_late_hist` from its counters or stats reply; None if absent or not
    in the known form."""
    if not isinstance(reply, Mapping) or "error" in reply:
        return None
    try:
        return LateHistogram.from_json(reply["timer_late_hist"])
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def interval_lateness(
    end: Mapping[str, object],
    start: Mapping[str, LateHistogram] | None,
    what: str,
    *,
    need_samples: bool,
) -> Lateness:
    """Lateness over an interval from each process's histogram at its end (`end`: name ->
    reply) less the one at its start (`start`: name -> histogram; None: since the process
    started).

    A process whose histogram is unreadable is missing. With `need_samples`, an interval in
    which no process recorded any sample is missing too: a switch that forwarded frames on
    shaped links served departures, and a fabric where none of them was timed has not measured
    its lateness (an endpoint's timers, by contrast, may never come due in a healthy run)."""
    out = Lateness()
    worst: list[float] = []
    largest: list[float] = []
    if not end:
        out.missing.append(f"{what} lateness: no {what} reported")
        return out
    for name, reply in end.items():
        hist = read_histogram(reply)
        if hist is None:
            out.missing.append(f"{what} lateness: {name} reported no lateness histogram")
            continue
        if start is not None and name in start:
            try:
                hist = hist.minus(start[name])
            except ValueError:
                out.missing.append(f"{what} lateness: {name}'s histogram went backwards")
                continue
        out.samples += hist.n
        if hist.n:
            worst.append(hist.percentile(99))  # type: ignore[arg-type]
            largest.append(hist.max_us)
    if out.missing:
        return out
    if not worst:
        if need_samples:
            out.missing.append(f"{what} lateness: no {what} recorded a sample")
            return out
        out.p99_us, out.max_us = 0.0, 0.0
        return out
    out.p99_us, out.max_us = max(worst), max(largest)
    return out


def start_histograms(replies: Mapping[str, object]) -> dict[str, LateHistogram]:
    """The readable histograms of a read at an interval's start (an unreadable one is caught
    at the end's read, where it counts)."""
    out = {}
    for name, reply in replies.items():
        hist = read_histogram(reply)
        if hist is not None:
            out[name] = hist
    return out


def nic_lost(stats: Mapping[str, object]) -> tuple[float | None, list[str]]:
    """The worst endpoint process's share of NIC time lost while frames waited (endpoint.pacer),
    and what could not be read."""
    shares, missing = [], []
    for host, p in stats.items():
        if not isinstance(p, Mapping) or "nic_lost_bytes" not in p or "nic_sent_bytes" not in p:
            missing.append(f"endpoint NIC time: {host} reported no NIC figures")
            continue
        lost, sent = float(p["nic_lost_bytes"]), float(p["nic_sent_bytes"])
        shares.append(lost / (lost + sent) if lost + sent > 0 else 0.0)
    if missing or not shares:
        return None, missing or ["endpoint NIC time: no endpoint reported"]
    return max(shares), []


def switch_kernel_drops(counters: Mapping[str, object]) -> tuple[int | None, list[str]]:
    """Frames the switches' kernels dropped (rings, socket buffers), and what was unreadable."""
    total, missing = 0, []
    for name, c in counters.items():
        if not isinstance(c, Mapping) or not isinstance(c.get("kernel_drops"), int):
            missing.append(f"kernel drops: switch {name} reported none")
            continue
        total += c["kernel_drops"]
    if not counters:
        missing.append("kernel drops: no switch reported")
    return (None if missing else total), missing


__all__ = [
    "Lateness",
    "interval_lateness",
    "nic_lost",
    "read_histogram",
    "start_histograms",
    "switch_kernel_drops",
]

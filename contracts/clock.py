"""Virtual time: the one clock every part of a time-dilated fabric reads.

Time dilation (as in DieCast and time-warped emulation) runs the whole emulated network N times
slower than the datacenter it stands for: a 10 Gbps link is served at 10/N Gbps of real time,
a 1 µs delay lasts N µs, an RTO of 50 µs waits 50 N µs. Everything stays consistent if every
clock the project owns reads

    virtual seconds = CLOCK_MONOTONIC seconds / N

and converts a virtual interval to a real one (x N) only where it finally sleeps. The
monotonic clock is one clock for every process of the machine (namespaces do not change it), so
switches, endpoints and the runner agree on virtual time without sharing an epoch; timestamps
carried in packets (send time, echo) stay comparable across hosts.

What cannot be dilated, and must therefore be divided by N wherever it is used as a budget:
the machine's own latencies (a wake-up costs ~50 µs of *real* time, a descheduled process
waits tens of real ms). Those are "real-time hazards"; `hazard()` turns one into virtual time.
Kernel transports (tcp, mptcp) read the kernel's clocks, which nobody can dilate: they run at
N = 1 only.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

MAX_DILATION = 2_000_000.0
"""Beyond this 1 ms of virtual time takes more than half an hour of real time; a larger factor
is a typo. A 64-host fabric at 100 Gbps asks for ~160,000 (docs/performance.md) and the same
at 800 Gbps eight times that: the old ceiling of 100,000 forced such runs to go invalid."""


def check_dilation(n: object, key: str = "time_dilation") -> float:
    """`n` as a dilation factor, or ValueError naming `key`: a finite number in [1, MAX]."""
    if isinstance(n, bool) or not isinstance(n, (int, float)) or not math.isfinite(n):
        raise ValueError(f"{key}: expected a number >= 1, got {n!r}")
    if not 1.0 <= n <= MAX_DILATION:
        raise ValueError(f"{key}: must be between 1 and {MAX_DILATION:.0f}, got {n!r}")
    return float(n)


def virtual_clock(dilation: float = 1.0) -> Callable[[], float]:
    """A zero-argument function returning virtual seconds (time.monotonic itself at N = 1:
    the per-packet loops call it often, and a bound builtin is the cheapest call there is)."""
    if dilation == 1.0:
        return time.monotonic
    inv = 1.0 / dilation
    mono = time.monotonic

    def now() -> float:
        return mono() * inv

    return now


class Clock:
    """Virtual time at dilation N, for code that is not on a per-packet path."""

    __slots__ = ("dilation", "now")

    def __init__(self, dilation: float = 1.0) -> None:
        self.dilation = check_dilation(dilation)
        self.now = virtual_clock(self.dilation)

    def real(self, virtual_s: float) -> float:
        """How long `virtual_s` lasts on the machine."""
        return virtual_s * self.dilation

    def virtual(self, real_s: float) -> float:
        """What a real interval (a wake-up, a deschedule) amounts to in virtual time."""
        return real_s / self.dilation

    def sleep(self, virtual_s: float) -> None:
        if virtual_s > 0:
            time.sleep(virtual_s * self.dilation)

    def __repr__(self) -> str:
        return f"Clock(dilation={self.dilation:g})"


def hazard(real_s: float, dilation: float) -> float:
    """A real-time hazard (e.g. "a process may wait 50 ms for a CPU") in virtual seconds."""
    return real_s / dilation

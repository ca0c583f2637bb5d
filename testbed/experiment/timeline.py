"""The scenario's timeline during a run: each event applied at t0 + at, and when it took effect.

`Timeline` is the thread that sends each event to the fabric's supervisor (`ctl_request`, the
same plan `testbed ctl` uses) at its virtual time and records when the last switch acknowledged
it (CLOCK_MONOTONIC, shared by every namespace): the applied times the analysis measures
failover from. The runner and the soak both drive their events through it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from contracts.clock import Clock
from testbed.analysis.durations import fmt_duration, unit_for
from testbed.analysis.metrics import (
    AppliedEvent,
)
from testbed.experiment.progress import Progress
from testbed.fabric import client
from testbed.scenario import (
    Event,
)


def event_line(applied: float, planned: float, what: str) -> str:
    """`  750.4 µs  applied blackhole spine1-leaf2 (planned 750 µs; 420 ns late)`: both times
    in the unit that fits them, to four significant digits, and the difference, so that an
    event applied on time reads as on time at any time scale (rounded to the millisecond, a
    dilated run's 0.75 ms event read `0.001s applied ... (planned 0.00075s)`)."""
    name, size = unit_for(max(abs(applied), abs(planned)))
    late = applied - planned
    if late == 0:
        off = "on time"
    else:
        off = f"{fmt_duration(abs(late), 2)} {'late' if late > 0 else 'early'}"
    return (
        f"  {applied / size:>8.4g} {name:<2} applied {what} "
        f"(planned {fmt_duration(planned, 4, unit=name)}; {off})"
    )


def ctl_request(event: Event) -> dict:
    """The supervisor request applying one scenario event (the same plan `testbed ctl` uses)."""
    return {"op": "ctl", **event.plan_kwargs()}


class Timeline(threading.Thread):
    """Applies the scenario's events at t0 + at and records when each took effect."""

    def __init__(
        self, name: str, events: Sequence[Event], t0: float, progress: Progress, clock: Clock
    ) -> None:
        super().__init__(daemon=True, name="timeline")
        self.clock = clock  # `at` and t0 are virtual: waits last N times longer
        self.fabric_name = name
        self.events = list(events)
        self.t0 = t0
        self.progress = progress
        self.applied: dict[int, float] = {}
        self.errors: list[str] = []
        self.cancel = threading.Event()
        self.index = 0

    def next_event(self) -> str:
        if self.index >= len(self.events):
            return "—"
        e = self.events[self.index]
        return f"{e.describe()} at {fmt_duration(e.at, 4)}"

    def run(self) -> None:
        for i, e in enumerate(self.events):
            self.index = i
            if self.cancel.wait(max(0.0, self.clock.real(self.t0 + e.at - self.clock.now()))):
                return
            try:
                reply = client.call(self.fabric_name, ctl_request(e), timeout=10)
            except client.ClientError as exc:
                self.errors.append(f"events[{i}] {e.describe()}: {exc}")
                continue
            if not reply.get("ok"):
                self.errors.append(f"events[{i}] {e.describe()}: {reply.get('error')}")
                continue
            # The supervisor answers in real monotonic seconds (shared by every namespace).
            applied_real = reply.get("applied_mono", time.monotonic())
            self.applied[i] = self.clock.virtual(applied_real) - self.t0
            self.progress.line(event_line(self.applied[i], e.at, e.describe()))
        self.index = len(self.events)

    def results(self) -> list[AppliedEvent]:
        return [AppliedEvent(e, self.applied.get(i)) for i, e in enumerate(self.events)]

"""The runner's progress output: one line per transport start, event and end.

On a terminal the run's live state is one line that rich redraws: virtual time done of the
run's length in the unit that fits the run (a dilated 17 ms run counts in ms, not `0.0/0.017s`
throughout), the real time it has taken and will take at time dilation N, the goodput, the
emulator's verdict so far when the monitor measures lateness, the next event. Elsewhere (CI
logs, a pipe) the same line is printed once at the start and then every PLAIN_EVERY_S of *real*
time: a dilated run's virtual seconds may never pass while its real minutes do. Shared by
`testbed run`/`compare` (testbed.experiment.runner), the soak and the benches that run
scenarios.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from rich.console import Console
from rich.live import Live

from testbed.analysis.durations import decimals_for, fmt_duration, unit_for

PLAIN_EVERY_S = 10.0
"""Real seconds between two plain status lines (no terminal): a CI log hears from a run of
minutes, and reads a line per 10 s rather than four a second."""


def status_text(
    elapsed: float,
    duration: float,
    next_event: str,
    mbps: float | None,
    dilation: float = 1.0,
    verdict: str | None = None,
) -> str:
    """The status line: `elapsed` of `duration` virtual seconds in the unit that fits the
    run, real time so far and left at time dilation `dilation` (virtual time is real time / N,
    so the real time of t virtual seconds is t x N), goodput, `verdict`, the next event."""
    name, size = unit_for(duration)
    places = decimals_for(duration / size)
    done = f"t={elapsed / size:.{places}f}/{duration / size:.{places}f} {name}"
    real = f"real {fmt_duration(elapsed * dilation)}"
    left = f"~{fmt_duration(max(duration - elapsed, 0.0) * dilation, 2)} left"
    rate = "—" if mbps is None else f"{mbps:.1f} Mbps"
    parts = [done, f"{real}, {left} (N={dilation:g})", f"goodput {rate}"]
    if verdict:
        parts.append(verdict)
    parts.append(f"next: {next_event}")
    return "  " + " · ".join(parts)


class Progress:
    """One line per transport start, event and end; a live line on a terminal (rich), plain
    lines every PLAIN_EVERY_S real seconds otherwise (CI logs). `clock`: real seconds (a test
    passes a fake one)."""

    def __init__(
        self,
        stream: TextIO | None = None,
        live: bool | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        plain_every_s: float = PLAIN_EVERY_S,
    ) -> None:
        self.stream = stream or sys.stdout
        self.live = self.stream.isatty() if live is None else live
        self.clock = clock
        self.plain_every_s = plain_every_s
        self._rich = None
        self._next_plain: float | None = None  # real time of the next plain line; None: now

    def line(self, text: str) -> None:
        if self._rich is not None:
            self._rich.console.print(text)
        else:
            print(text, file=self.stream, flush=True)

    def begin(self, title: str) -> None:
        self.line(title)
        self._next_plain = None
        if self.live:
            # On our stream: with --json the live line and the event lines go to stderr, and
            # stdout carries the summary alone.
            console = Console(file=self.stream)
            self._rich = Live("", console=console, refresh_per_second=4, transient=True)
            self._rich.start()

    def status(
        self,
        elapsed: float,
        duration: float,
        next_event: str,
        mbps: float | None,
        *,
        dilation: float = 1.0,
        verdict: str | None = None,
    ) -> None:
        """The run's state now (virtual seconds); redrawn live, or printed if a plain line
        is due."""
        text = status_text(elapsed, duration, next_event, mbps, dilation, verdict)
        if self._rich is not None:
            self._rich.update(text)
            return
        now = self.clock()
        if self._next_plain is None or now >= self._next_plain:
            self._next_plain = now + self.plain_every_s
            self.line(text)

    def end(self) -> None:
        if self._rich is not None:
            self._rich.stop()
            self._rich = None
        self._next_plain = None

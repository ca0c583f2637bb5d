"""The runner's progress output: one line per transport start, event and end.

On a terminal the run's live state (elapsed time, goodput, the next event) is one line that
rich redraws; elsewhere (CI logs, a pipe) it is a plain line every few seconds, so a log stays
readable. Shared by `testbed run`/`compare` (testbed.experiment.runner), the soak and the
benches that run scenarios.
"""

from __future__ import annotations

import sys
from typing import TextIO

from rich.live import Live


class Progress:
    """One line per transport start, event and end; a live line on a terminal (rich), plain
    lines every few seconds otherwise (CI logs)."""

    def __init__(self, stream: TextIO | None = None, live: bool | None = None) -> None:
        self.stream = stream or sys.stdout
        self.live = self.stream.isatty() if live is None else live
        self._rich = None
        self._last_plain = 0.0

    def line(self, text: str) -> None:
        if self._rich is not None:
            self._rich.console.print(text)
        else:
            print(text, file=self.stream, flush=True)

    def begin(self, title: str) -> None:
        self.line(title)
        if self.live:
            self._rich = Live("", refresh_per_second=4, transient=True)
            self._rich.start()

    def status(self, elapsed: float, duration: float, next_event: str, mbps: float | None) -> None:
        rate = "—" if mbps is None else f"{mbps:6.1f} Mbps"
        text = f"  t={elapsed:5.1f}/{duration:g}s  goodput {rate}  next: {next_event}"
        if self._rich is not None:
            self._rich.update(text)
        elif elapsed - self._last_plain >= 2.0 or elapsed < self._last_plain:
            self._last_plain = elapsed
            self.line(text)

    def end(self) -> None:
        if self._rich is not None:
            self._rich.stop()
            self._rich = None
        self._last_plain = 0.0

"""Processes a kernel baseline owns: started, timestamped, read and ended by their own PID.

`Child` wraps one Popen with the monotonic time it exited (a thread waits for it), optionally
timestamping each stdout line as it arrives (iperf3 servers: their lines anchor each test's
start). `terminate` ends a list of them, SIGTERM then SIGKILL, and never signals a PID that
is not ours: Popen.send_signal does nothing once the child has been reaped.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

KILL_GRACE_S = 3.0  # iperf3 writes its JSON on SIGTERM: time for that on a loaded machine


class Child:
    """A process of ours: its Popen, the monotonic time it exited, optionally its stdout lines."""

    def __init__(
        self,
        argv: list[str],
        out: Path,
        err: Path,
        *,
        read_lines: bool = False,
        on_exit: Callable[[], object] | None = None,
    ) -> None:
        self.argv = argv
        self._on_exit = on_exit
        self.started = time.monotonic()
        self.ended: float | None = None
        self.lines: list[tuple[float, str]] = []
        self.done = threading.Event()
        self._err = err.open("w")
        self._out: IO[str] | None = None
        if read_lines:
            self.proc = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=self._err, text=True, bufsize=1
            )
            self._reader = threading.Thread(target=self._read, args=(out,), daemon=True)
            self._reader.start()
        else:
            self._out = out.open("w")
            self.proc = subprocess.Popen(argv, stdout=self._out, stderr=self._err, text=True)
            self._reader = None
        self.pid = self.proc.pid
        self._waiter = threading.Thread(target=self._wait, daemon=True)
        self._waiter.start()

    def _read(self, out: Path) -> None:
        assert self.proc.stdout is not None
        with out.open("w") as f:
            for line in self.proc.stdout:
                t = time.monotonic()
                self.lines.append((t, line.rstrip("\n")))
                f.write(f"{t:.6f} {line}")
                f.flush()

    def _wait(self) -> None:
        self.proc.wait()
        self.ended = time.monotonic()
        if self._reader is not None:
            self._reader.join(5)
        for f in (self._out, self._err):
            if f is not None:
                f.close()
        self.done.set()
        if self._on_exit is not None:
            self._on_exit()

    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int) -> None:
        # Popen.send_signal does nothing once the child has been reaped, so a recycled PID is
        # never hit.
        self.proc.send_signal(sig)


def terminate(children: Sequence[Child], grace: float = KILL_GRACE_S) -> None:
    """SIGTERM, then SIGKILL after `grace` what is still running; wait until all are reaped."""
    live = [c for c in children if c.running]
    for c in live:
        c.signal(signal.SIGTERM)
    until = time.monotonic() + grace
    for c in live:
        c.done.wait(max(0.0, until - time.monotonic()))
    for c in live:
        if c.running:
            c.signal(signal.SIGKILL)
    for c in live:
        c.done.wait(5)

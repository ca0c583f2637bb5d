"""Signals that end a run: SIGINT, SIGTERM and SIGHUP unwind it, and its teardown runs whole.

A run (`testbed run`, `compare`, a bench) owns fabrics, endpoint processes and a run directory
under /run/testbed. Python's defaults kill the process on SIGTERM and SIGHUP without running a
single ``finally``, and a KeyboardInterrupt can land in the middle of a teardown and cut it
short. So the command line runs every command under `install()`:

- each of these signals raises `Interrupted` (a KeyboardInterrupt carrying the signal) in the
  main thread, so every ``finally`` and context manager on the way out tears down what it
  built;
- code that must not be cut in two -- starting a supervisor and recording it, a teardown --
  runs inside `deferred()`: a signal that arrives there is raised when the block ends, unless
  an `Interrupted` is already unwinding the run (the teardown under way is the answer to it);
- a SIGHUP usually means the terminal is gone: stdout and stderr are pointed at /dev/null
  first, so the teardown's progress lines cannot fail it with EIO.

The command exits with 128 + the signal's number (130 for Ctrl-C, 143 for SIGTERM, 129 for
SIGHUP), the shell's rule. A SIGKILL runs nothing: the fabric's supervisor watches its owner's
PID and tears the fabric down itself (testbed.fabric.supervisor).
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """A run was ended by a signal (SIGINT, SIGTERM or SIGHUP)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum

    @property
    def exit_status(self) -> int:
        return 128 + self.signum


_lock = threading.Lock()
_installed = False  # between `install()` and `uninstall()`
_depth = 0  # nesting of deferred() blocks
_pending: int | None = None  # a signal that arrived inside deferred()
_received: int | None = None  # the first signal this process got (its exit status)
_raised = False  # an Interrupted was raised: the run is unwinding


def _handler(signum: int, _frame: FrameType | None) -> None:
    global _pending, _received, _raised
    if signum == signal.SIGHUP:
        quiet_dead_terminal()
    if _received is None:
        _received = signum
    if _depth > 0:
        if _pending is None:
            _pending = signum
        return
    _raised = True
    raise Interrupted(signum)


def install() -> dict[int, Any]:
    """Route SIGINT, SIGTERM and SIGHUP through `_handler` until `uninstall` (the command line
    does it around a command); returns the handlers to put back. Main thread only; elsewhere
    it does nothing. A signal this process was started ignoring stays ignored."""
    global _installed, _pending, _received, _raised
    if threading.current_thread() is not threading.main_thread():
        return {}
    old = {}
    for sig in SIGNALS:
        prev = signal.getsignal(sig)
        if prev is signal.SIG_IGN:
            continue  # ignored by whoever started us (a background job, `nohup`): kept so
        old[sig] = signal.signal(sig, _handler)
    _installed = True
    _pending = _received = None
    _raised = False
    return old


def uninstall(old: dict[int, Any]) -> None:
    global _installed
    for sig, prev in old.items():
        signal.signal(sig, prev)
    _installed = False


def installed() -> bool:
    return _installed


def received() -> int | None:
    """The first of SIGINT, SIGTERM, SIGHUP this process received, if any."""
    return _received


def catch(signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGHUP)) -> dict[int, Any]:
    """Temporarily route `signals` through `_handler` (a `with Fabric(...)` block does it, so a
    `kill` unwinds the block); returns what to hand back to `release`. Does nothing where
    `install()` already did it, or outside the main thread."""
    if _installed or threading.current_thread() is not threading.main_thread():
        return {}
    old = {}
    for sig in signals:
        prev = signal.getsignal(sig)
        if prev is signal.SIG_IGN or prev is _handler:
            continue
        old[sig] = signal.signal(sig, _handler)
    return old


def release(old: dict[int, Any]) -> None:
    global _raised, _received
    for sig, prev in old.items():
        signal.signal(sig, prev)
    if old and _depth == 0:
        _raised = False  # the block that caught it is over; a later run starts afresh
        _received = None


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A block that a signal must not cut in two: SIGINT, SIGTERM or SIGHUP arriving inside is
    delivered when the block ends (raised as `Interrupted` under `install()`; else re-sent to
    this process after the previous handlers are back, so it does what it would have done)."""
    global _depth, _pending, _raised
    main = threading.current_thread() is threading.main_thread()
    if not main:
        yield  # signals are handled in the main thread: nothing here is cut short by them
        return
    old = {}
    with _lock:
        if not _installed and _depth == 0:
            for sig in SIGNALS:
                prev = signal.getsignal(sig)
                if prev is not signal.SIG_IGN and prev is not _handler and prev is not None:
                    old[sig] = signal.signal(sig, _handler)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            outermost = _depth == 0
            pending = _pending if outermost else None
            if outermost:
                _pending = None
        if outermost:
            for sig, prev in old.items():
                signal.signal(sig, prev)
            if pending is not None:
                if old or not _installed:
                    signal.raise_signal(pending)  # the caller's own handling of it
                elif not _raised:
                    _raised = True
                    raise Interrupted(pending)


def quiet_dead_terminal() -> None:
    """Point stdout and stderr at /dev/null when they are a terminal or a pipe (what a hangup
    takes away), so that printing while tearing down cannot fail; files are kept."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    try:
        for fd in (1, 2):
            try:
                mode = os.fstat(fd).st_mode
            except OSError:
                continue
            if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
                os.dup2(null, fd)
    finally:
        os.close(null)

"""Enter another network namespace for a moment, so one process can own sockets in several.

Why: a switch process that serves several switch nodes (`python -m switch` with more than one
`--config`) opens each node's AF_PACKET sockets inside that node's namespace, and an endpoint
process that serves several hosts (`python -m endpoint` with more than one `--host`,
endpoint/shared.py) opens each host's UDP sockets inside that host's. A socket stays in
the namespace it was created in, so the process enters each namespace only to create sockets
(and to look an interface up by name) and returns at once. The namespace is given as an open
descriptor: Mininet's nodes are anonymous namespaces, reachable only as /proc/PID/ns/net.
setns moves the calling thread alone, so other threads are not disturbed. CPython gained
`os.setns` only in 3.12 (Debian 12 ships 3.11) and PyPy 3.9 has none, so where `os` lacks it
the system call comes from the C library through ctypes: no dependency, and the switch runs
on either interpreter (`TESTBED_SWITCH_PYTHON`, docs/performance.md).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator
from contextlib import contextmanager

CLONE_NEWNET = 0x40000000


def _libc_setns(fd: int, nstype: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, nstype) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


_SETNS = getattr(os, "setns", None) or _libc_setns


def _setns(fd: int) -> None:
    # CLONE_NEWNET: the descriptor must be a network namespace (OSError otherwise).
    _SETNS(fd, CLONE_NEWNET)


class Netns:
    """A handle on one network namespace, by a path such as /proc/PID/ns/net."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)

    @contextmanager
    def entered(self) -> Iterator[None]:
        """Run the body inside this namespace; the caller's namespace is restored after."""
        home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            _setns(self.fd)
            try:
                yield
            finally:
                _setns(home)
        finally:
            os.close(home)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Netns:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

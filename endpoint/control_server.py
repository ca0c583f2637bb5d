"""Server side of the control channel; `endpoint.control` holds the protocol and the client.

The endpoint process has one thread and one ``select()`` loop, so this server never blocks and
never selects by itself: the loop watches its ``listener`` and ``clients`` (and ``writers()``
while replies wait) and hands it the ready ones. It owns the listening Unix socket, the
connected clients with their partial request lines and unsent reply bytes, and the ``wait``
requests not yet answered. What a request does is the process's business: each ``op`` is dispatched through the table of
handlers it passes in, and a handler that returns None answers later (``wait``).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from endpoint.control import OPS, LineBuffer, encode, parse_request

if TYPE_CHECKING:
    from endpoint.workloads import Job


class ControlConnection:
    """One connected client: its socket, its partial request line, its unsent reply bytes."""

    __slots__ = ("sock", "lines", "out")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.lines = LineBuffer()
        self.out = b""


# (request, the client that sent it, now) -> the reply, or None to answer later
Handler = Callable[[dict, ControlConnection, float], dict | None]


class ControlServer:
    """The control socket at ``path`` and its clients; requests go to ``handlers[op]``."""

    def __init__(
        self,
        path: str,
        handlers: Mapping[str, Handler],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.clock = clock  # the process's (virtual) clock: handlers get its `now`
        missing = [op for op in OPS if op not in handlers]
        if missing:
            raise ValueError(f"no handler for {', '.join(missing)}")
        self.path = path
        self.handlers = handlers
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        os.chmod(path, 0o600)
        self.listener.listen(16)
        self.listener.setblocking(False)
        self.clients: dict[socket.socket, ControlConnection] = {}
        self.fds_dirty = True  # the select() read list must be rebuilt (clients came or went)
        self.pending_out = False  # some client has reply bytes the socket did not take yet
        self._waits: list[tuple[int, float, ControlConnection]] = []  # job, deadline, client

    # ----- what the loop watches ------------------------------------------------------------

    def writers(self) -> list[socket.socket]:
        return [c.sock for c in self.clients.values() if c.out]

    def on_readable(self, s: socket.socket) -> None:
        if s is self.listener:
            self._accept()
        else:
            self._client_readable(s)

    def on_writable(self, s: socket.socket) -> None:
        c = self.clients.get(s)
        if c is not None:
            self._flush(c)

    # ----- replies --------------------------------------------------------------------------

    def reply(self, c: ControlConnection, reply: dict) -> None:
        if c.sock not in self.clients:
            return
        c.out += encode(reply)
        self._flush(c)

    def wait(self, c: ControlConnection, job_id: int, deadline: float) -> None:
        """Answer ``c`` when job ``job_id`` is done or at ``deadline`` (see `answer_waits`)."""
        self._waits.append((job_id, deadline, c))

    def next_wait_deadline(self) -> float | None:
        """When the earliest pending wait times out (virtual seconds), None without one: the
        loop wakes for it. Answered only at bin ticks, a wait timed out up to a bin late, and
        at N = 200,000 a bin is 24 real seconds, past the caller's 10 s of margin: runs whose
        job never finished (a one-path flow on a dead link) aborted on "no reply"."""
        if not self._waits:  # every loop turn asks: the usual answer costs nothing
            return None
        return min(d for _, d, _ in self._waits)

    def answer_waits(self, jobs: Mapping[int, Job], now: float | None) -> None:
        """Answer the waits whose job is done or gone or whose deadline passed; every one when
        ``now`` is None (the process is stopping)."""
        for job_id, deadline, client in list(self._waits):
            job = jobs.get(job_id)
            if now is None or job is None or job.done or now >= deadline:
                self._waits.remove((job_id, deadline, client))
                status = job.status() if job is not None else {}
                self.reply(client, {"ok": True, "done": bool(job and job.done), "status": status})

    def close(self) -> None:
        """Send what the sockets take of the pending replies, then close everything."""
        for c in list(self.clients.values()):
            self._flush(c)
            self._drop(c)
        self.listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    # ----- clients --------------------------------------------------------------------------

    def _accept(self) -> None:
        try:
            s, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        s.setblocking(False)
        self.clients[s] = ControlConnection(s)
        self.fds_dirty = True

    def _client_readable(self, s: socket.socket) -> None:
        c = self.clients.get(s)
        if c is None:
            return
        try:
            data = s.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(c)
            return
        try:
            lines = c.lines.feed(data)
        except ValueError as exc:
            self.reply(c, {"ok": False, "error": str(exc)})
            return
        for line in lines:
            try:
                req = parse_request(line)
                reply = self.handlers[req["op"]](req, c, self.clock())
            except ValueError as exc:  # ConfigError and WorkloadError are ValueErrors too
                reply = {"ok": False, "error": str(exc)}
            if reply is not None:
                self.reply(c, reply)

    def _flush(self, c: ControlConnection) -> None:
        try:
            n = c.sock.send(c.out)
            c.out = c.out[n:]
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self._drop(c)
        self.pending_out = any(x.out for x in self.clients.values())

    def _drop(self, c: ControlConnection) -> None:
        self.clients.pop(c.sock, None)
        self.fds_dirty = True
        self._waits = [w for w in self._waits if w[2] is not c]
        with contextlib.suppress(OSError):
            c.sock.close()

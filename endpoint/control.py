"""Control channel of an endpoint process: one JSON object per line over a Unix socket.

Requests (every reply is one line with ``"ok": true|false``; errors name the bad key):

``{"op": "ping"}``                         -> host, pid, jobs
``{"op": "start", "job": J, "workload": {...}, "mode": "mrc", "evs": 64, "ev_base": 49152,
   "transport": {TransportConfig field: value}, "go": false}``
                                           -> prepares job J: creates its connections (QPs) so
                                              that peers' packets are accepted; with
                                              ``"go": true`` it also starts at once; with
                                              ``"transport": {"ev_seed": S}`` each connection
                                              draws its own EV base (`TransportConfig`);
                                              ``"msg_records": false`` writes no per-message
                                              records (long runs: `testbed soak`)
``{"op": "go", "job": J}``                 -> the workload starts sending (``t`` = when)
``{"op": "wait", "job": J, "timeout": S}`` -> answered when J is done (``done: true``) or after
                                              S seconds (``done: false``); other requests on
                                              other connections are served meanwhile
``{"op": "stats", "job": J?}``             -> process and per-connection counters, job status
                                              (with its exactly-once ``ledger``)
``{"op": "drain", "job": J}``              -> J posts no new message; those in flight complete
                                              (how `testbed soak` ends its endless jobs)
``{"op": "stop"}``                         -> flushes the metrics and exits (also on SIGTERM)
``{"op": "deny", "mask": M, "value": V}``  -> every EV with ev & M == V is DENIED on every
                                             connection, now and later (MRC's EV deny mask);
                                             with ``"peers": [host, ...]`` only on the
                                             connections to those hosts (MRC denies per QP)
``{"op": "allow", "mask": M, "value": V}`` -> lifts that rule (the same ``peers``)
``{"op": "events"}``                       -> the EV state changes since the last such request
                                              (virtual time, qp, peer, ev, old, new, reason) and
                                              how many were ``dropped``: MRC's EV event queue
``{"op": "probe", "peer": P, "evs": [EV, ...], "timeout_us": T, "job": J?}``
                                           -> one PROBE per EV (default: every EV) on the
                                              connection to P (job J's, or the newest), in a
                                              sequence space of their own (endpoint.ev_probe);
                                              answered when all are answered or T virtual µs
                                              passed: ``probes`` [{ev, rtt_us | null}] in
                                              virtual µs, each EV's ``states`` when asked.
                                              MRC's controller EV probe
``{"op": "replace", "entries": [{"ev": E, "ev_new": N, "state": "good"|"denied",
   "all_copies": false}, ...], "peers": [host, ...]?}``
                                           -> MRC's REPLACE_EV on every connection (or those to
                                              ``peers``) that has E: one slot of E (every slot
                                              with ``all_copies``) becomes N; an N already in
                                              the array makes a copy. All or none: ``replaced``
                                              slots, or an error naming the entry
``{"op": "evs", "peers": [host, ...]?}``   -> each connection's EV array, slot by slot (ev,
                                              plane, state, weight): MRC's QUERY_EV_ARRAY

A coordinator (a test, the scenario runner) synchronises hosts without sleeping: ``start``
every endpoint, then ``go`` every endpoint, then ``wait`` on each — see :class:`Coordinator`.
This module holds the line framing shared by both sides and the client; the server loop is in
``endpoint.control_server``.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterable, Mapping, Sequence

MAX_LINE = 1 << 20
OPS = (
    "ping", "start", "go", "wait", "stats", "stop", "deny", "allow", "events", "drain", "probe",
    "replace", "evs",
)  # fmt: skip


class ControlError(RuntimeError):
    """An endpoint answered ``ok: false``, or could not be reached."""


class LineBuffer:
    """Splits a byte stream into lines; refuses lines longer than ``MAX_LINE``."""

    def __init__(self) -> None:
        self.buf = b""

    def feed(self, data: bytes) -> list[bytes]:
        self.buf += data
        if b"\n" not in self.buf:
            if len(self.buf) > MAX_LINE:
                self.buf = b""
                raise ValueError(f"request longer than {MAX_LINE} bytes")
            return []
        *lines, self.buf = self.buf.split(b"\n")
        return [ln for ln in lines if ln.strip()]


def parse_request(line: bytes) -> dict:
    """A request object, or ValueError with a message fit for the error reply."""
    try:
        req = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(req, dict):
        raise ValueError("request must be a JSON object")
    op = req.get("op")
    if op not in OPS:
        raise ValueError(f"op: expected one of {', '.join(OPS)}, got {op!r}")
    return req


def encode(reply: dict) -> bytes:
    return json.dumps(reply, separators=(",", ":"), default=str).encode() + b"\n"


class ControlClient:
    """A connection to one endpoint's control socket (requests are answered in order)."""

    def __init__(self, path: str, timeout: float = 30.0, connect_timeout: float = 10.0) -> None:
        self.path = str(path)
        self.timeout = timeout
        deadline = time.monotonic() + connect_timeout
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(self.path)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                s.close()
                if time.monotonic() > deadline:
                    raise ControlError(f"{self.path}: no endpoint listening") from None
                time.sleep(0.02)  # the process is still starting: poll for its socket
        self.sock = s
        self._lines = LineBuffer()
        self._ready: list[bytes] = []

    def send(self, req: dict) -> None:
        self.sock.settimeout(self.timeout)
        self.sock.sendall(encode(req))

    def receive(self, timeout: float | None = None) -> dict:
        self.sock.settimeout(self.timeout if timeout is None else timeout)
        while not self._ready:
            try:
                chunk = self.sock.recv(1 << 20)
            except TimeoutError:
                raise ControlError(f"{self.path}: no reply") from None
            if not chunk:
                raise ControlError(f"{self.path}: endpoint closed the control connection")
            self._ready.extend(self._lines.feed(chunk))
        reply = json.loads(self._ready.pop(0))
        if not reply.get("ok"):
            raise ControlError(f"{self.path}: {reply.get('error', 'unknown error')}")
        return reply

    def call(self, req: dict, timeout: float | None = None) -> dict:
        self.send(req)
        return self.receive(timeout)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _rule(op: str, mask: int, value: int, peers: Iterable[str] | None) -> dict:
    req: dict = {"op": op, "mask": mask, "value": value}
    if peers is not None:
        req["peers"] = sorted(peers)
    return req


class Coordinator:
    """Runs one job across many endpoint processes: start all, go all, wait for all.

    ``clients`` maps host names to control socket paths. Synchronisation is by request and
    reply only: nothing is sent before every host has its connections, nothing is read before
    every host said it is done.
    """

    def __init__(self, sockets: Mapping[str, str], timeout: float = 60.0) -> None:
        self.clients = {h: ControlClient(p, timeout=timeout) for h, p in sockets.items()}

    def _all(self, req: dict, hosts: Iterable[str] | None) -> dict[str, dict]:
        """Send ``req`` to every host first, then collect: the hosts act within a few ms."""
        hosts = list(hosts) if hosts is not None else list(self.clients)
        return self._each({h: req for h in hosts})

    def _each(self, reqs: Mapping[str, dict], timeout: float | None = None) -> dict[str, dict]:
        """Send each host its request first, then collect every reply."""
        for h, req in reqs.items():
            self.clients[h].send(req)
        out, errors = {}, []
        for h in reqs:  # read every reply, even after an error, so the streams stay in step
            try:
                out[h] = self.clients[h].receive(timeout)
            except ControlError as exc:
                errors.append(exc)
        if errors:
            raise errors[0]
        return out

    def start(self, job: int, request: dict, hosts: Iterable[str] | None = None) -> dict:
        """Prepare ``job`` everywhere; returns only when every host has its connections."""
        return self._all({"op": "start", "job": job, **request}, hosts)

    def go(self, job: int, hosts: Iterable[str] | None = None) -> dict[str, float]:
        """Start sending everywhere; returns each host's start time (CLOCK_MONOTONIC)."""
        return {h: r["t"] for h, r in self._all({"op": "go", "job": job}, hosts).items()}

    def wait(self, job: int, timeout: float = 60.0) -> dict[str, dict]:
        """Every host's final job status (``done`` False where it timed out)."""
        for c in self.clients.values():
            c.send({"op": "wait", "job": job, "timeout": timeout})
        return {h: c.receive(timeout + 10.0)["status"] for h, c in self.clients.items()}

    def run(self, job: int, request: dict, timeout: float = 60.0) -> dict[str, dict]:
        self.start(job, request)
        self.go(job)
        return self.wait(job, timeout)

    def deny(
        self,
        mask: int,
        value: int,
        hosts: Iterable[str] | None = None,
        peers: Iterable[str] | None = None,
    ) -> dict[str, dict]:
        """MRC's deny mask on every connection of `hosts` (default all) -- or only on those to
        `peers` -- now and later."""
        return self._all(_rule("deny", mask, value, peers), hosts)

    def allow(
        self,
        mask: int,
        value: int,
        hosts: Iterable[str] | None = None,
        peers: Iterable[str] | None = None,
    ) -> dict[str, dict]:
        """Lift a deny rule (the same mask, value and peers)."""
        return self._all(_rule("allow", mask, value, peers), hosts)

    def replace(
        self,
        entries: Sequence[Mapping],
        hosts: Iterable[str] | None = None,
        peers: Iterable[str] | None = None,
    ) -> dict[str, dict]:
        """MRC's REPLACE_EV on every connection of `hosts` (default all), or only on those to
        `peers`: each entry is {ev, ev_new, state, all_copies?} (the `replace` op above)."""
        req: dict = {"op": "replace", "entries": [dict(e) for e in entries]}
        if peers is not None:
            req["peers"] = sorted(peers)
        return self._all(req, hosts)

    def ev_arrays(
        self, hosts: Iterable[str] | None = None, peers: Iterable[str] | None = None
    ) -> dict[str, dict]:
        """Every host's EV arrays, per connection, slot by slot (MRC's QUERY_EV_ARRAY)."""
        req: dict = {"op": "evs"}
        if peers is not None:
            req["peers"] = sorted(peers)
        return self._all(req, hosts)

    def events(self, hosts: Iterable[str] | None = None) -> dict[str, dict]:
        """Every host's EV events since the last call (and its drop count)."""
        return self._all({"op": "events"}, hosts)

    def probe(
        self,
        targets: Mapping[str, tuple[str, Sequence[int] | None]],
        timeout_us: float,
        dilation: float = 1.0,
    ) -> dict[str, dict]:
        """MRC's controller EV probes: ``targets`` maps a host to (peer, EVs or None for all);
        each host probes its connection to that peer, all hosts at once. Replies come within
        ``timeout_us`` of virtual time: ``dilation`` times that in real seconds (plus slack)."""
        reqs = {}
        for h, (peer, evs) in targets.items():
            req: dict = {"op": "probe", "peer": peer, "timeout_us": timeout_us}
            if evs is not None:
                req["evs"] = list(evs)
            reqs[h] = req
        return self._each(reqs, timeout_us * 1e-6 * dilation + 10.0)

    def drain(self, job: int, hosts: Iterable[str] | None = None) -> dict[str, dict]:
        """Every host's job `job` stops posting; what is in flight completes."""
        return self._all({"op": "drain", "job": job}, hosts)

    def stats(self, job: int | None = None) -> dict[str, dict]:
        req: dict = {"op": "stats"} if job is None else {"op": "stats", "job": job}
        return {h: c.call(req) for h, c in self.clients.items()}

    def stop(self) -> None:
        for c in self.clients.values():
            try:
                c.call({"op": "stop"}, timeout=10.0)
            except (ControlError, OSError):
                pass
            c.close()

    def close(self) -> None:
        for c in self.clients.values():
            c.close()

"""What one host does in a job: send and receive its flows, or be one rank of a ring all-reduce.

**Ring all-reduce in synchronised steps.** Ranks are ``hosts`` in order; each step is a
reduce-scatter followed by an all-gather: ``2(N-1)`` phases, in each of which rank r sends one
chunk to rank r+1. Phase p of a step may leave only after phase p-1's chunk from r-1 arrived
(the data dependency of a real all-reduce). The bytes a rank sends per step are exactly
``ceil(2(N-1) x bytes / N)`` (the scenario runner's per-hop flow size), split over the phases
as evenly as possible (at least the 16-byte header per phase). A rank *finishes* a step when it has received all its chunks and the
successor acknowledged all it sent. Steps are separated by a barrier made of tiny messages on
the same ring, not by sleeping: rank 0 starts a step by sending GO along the ring (a rank that
receives GO, or already a chunk of the step, starts it and forwards GO); once finished, each
rank passes a DONE token on (rank 0 at once, the others after receiving it from their
predecessor), carrying the latest finish time seen. When DONE returns to rank 0 every rank has
finished: rank 0 records the step (start = its release, end = the slowest rank's finish,
comparable across hosts because all namespaces share CLOCK_MONOTONIC) and starts the next.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from contracts.workloads import Flow, allreduce_per_hop
from endpoint.workload_messages import (
    DONE_EXTRA,
    HEADER,
    K_FLOW,
    K_RING_DATA,
    K_RING_DONE,
    K_RING_GO,
    make_message,
    parse_message,
)

RECORDS_KEPT = 1000
"""Step records an all-reduce rank keeps for its status (the most recent): a soak runs tens of
thousands of steps, and a list of all of them would grow the process for as long as it runs."""


class JobContext(Protocol):
    """What a role uses of its job (``endpoint.workloads.Job``, which imports this module)."""

    job_id: int
    hosts: list[str]
    msg_records: bool
    emit: Callable[[dict], None]

    def send(self, peer: str, data: bytes, now: float) -> int: ...


class Role:
    """What one host does in a job. ``ctx`` is the Job (send, emit)."""

    peers: list[str]
    done: bool = False

    def start(self, now: float) -> None: ...

    def on_message(self, peer: str, data: bytes, now: float) -> None: ...

    def on_acked(self, peer: str, msg_id: int, now: float) -> None: ...

    def drain(self, now: float) -> None:
        """Post nothing new from now on; what is in flight completes (a soak's end)."""

    def poll(self, now: float) -> None:
        """Act on timers due at `now` (roles that wait in virtual time: a trace's compute)."""

    def next_deadline(self) -> float | None:
        return None

    def summary(self) -> dict:
        return {}


class FlowRole(Role):
    """Sends this host's flows as messages (``window`` posted ahead), receives its inbound."""

    def __init__(
        self, ctx: JobContext, flows: list[Flow], host: str, message_bytes: int, window: int
    ):
        self.ctx = ctx
        self.host = host
        self.out = {f.dst: f.bytes for f in flows if f.src == host}
        self.inbound = {f.src: f.bytes for f in flows if f.dst == host}
        self.peers = sorted(set(self.out) | set(self.inbound), key=ctx.hosts.index)
        self.message_bytes = message_bytes
        self.window = window
        self.posted = dict.fromkeys(self.out, 0)  # bytes posted so far, per destination
        self.outstanding = dict.fromkeys(self.out, 0)  # messages posted, not yet acked
        self.seq = dict.fromkeys(self.out, 0)
        self.acked = dict.fromkeys(self.out, 0)
        self.received = dict.fromkeys(self.inbound, 0)
        self.bad_messages = 0
        self.started = False
        self.draining = False
        self.first_rx: float | None = None
        self.last_rx: float | None = None
        self.finished_at: float | None = None
        self._sizes: dict[tuple[str, int], int] = {}

    def start(self, now: float) -> None:
        self.started = True
        for dst in self.out:
            self._fill(dst, now)
        self._check(now)

    def drain(self, now: float) -> None:
        self.draining = True

    def _fill(self, dst: str, now: float) -> None:
        if self.draining:
            return
        total = self.out[dst]
        while self.outstanding[dst] < self.window and (
            self.posted[dst] < total or (total == 0 and self.seq[dst] == 0)
        ):
            size = min(self.message_bytes, total - self.posted[dst])
            data = make_message(K_FLOW, self.ctx.job_id, 0, self.seq[dst], size)
            msg_id = self.ctx.send(dst, data, now)
            self._sizes[(dst, msg_id)] = size
            self.posted[dst] += size
            self.seq[dst] += 1
            self.outstanding[dst] += 1

    def on_message(self, peer: str, data: bytes, now: float) -> None:
        parsed = parse_message(data, self.ctx.job_id)
        if peer not in self.received or parsed is None or parsed[0] != K_FLOW:
            self.bad_messages += 1
            return
        self.received[peer] += len(data)
        self.first_rx = now if self.first_rx is None else self.first_rx
        self.last_rx = now
        self._check(now)

    def on_acked(self, peer: str, msg_id: int, now: float) -> None:
        size = self._sizes.pop((peer, msg_id), None)
        if size is None:
            return
        self.acked[peer] += size
        self.outstanding[peer] -= 1
        self._fill(peer, now)
        self._check(now)

    def _check(self, now: float) -> None:
        if self.done or not self.started:
            return
        sent = all(
            self.acked[d] >= self.out[d] and self.outstanding[d] == 0 and self.posted[d] >= n
            for d, n in self.out.items()
        )
        got = all(self.received[s] >= n for s, n in self.inbound.items())
        if sent and got:
            self.done = True
            self.finished_at = now

    def summary(self) -> dict:
        return {
            "sent_bytes": sum(self.acked.values()),
            "received_bytes": sum(self.received.values()),
            "expected_tx": sum(self.out.values()),
            "expected_rx": sum(self.inbound.values()),
            "bad_messages": self.bad_messages,
            "first_rx": self.first_rx,
            "last_rx": self.last_rx,
            "finished_at": self.finished_at,
        }


@dataclass
class _Step:
    index: int
    started: bool = False
    start: float = 0.0
    go_forwarded: bool = False
    next_phase: int = 0  # next phase to send
    received: set | None = None
    acked: int = 0
    finished: bool = False
    end: float = 0.0
    token: int | None = None  # latest finish (ns) carried by the DONE token from the predecessor
    token_sent: bool = False


class AllreduceRole(Role):
    """One rank of a ring all-reduce in synchronised steps (module docstring)."""

    def __init__(
        self, ctx: JobContext, ring: list[str], host: str, nbytes: int, steps: int
    ) -> None:
        self.ctx = ctx
        self.ring = ring
        self.n = n = len(ring)
        self.rank = ring.index(host)
        self.next = ring[(self.rank + 1) % n]
        self.prev = ring[(self.rank - 1) % n]
        self.peers = [] if n == 1 else sorted({self.next, self.prev}, key=ctx.hosts.index)
        self.steps = steps
        self.phases = 2 * (n - 1)
        self.per_hop = allreduce_per_hop(n, nbytes)
        q, r = divmod(self.per_hop, self.phases) if n > 1 else (0, 0)
        self.sizes = [q + (1 if k < r else 0) for k in range(self.phases)]
        self.bytes = nbytes
        self.cur: _Step | None = None
        self.step_state: dict[int, _Step] = {}
        self.posted: dict[int, tuple[int, int]] = {}  # msg_id -> (kind, step)
        self.records: deque[dict] = deque(maxlen=RECORDS_KEPT)  # this rank's latest steps
        self.global_steps: deque[dict] = deque(maxlen=RECORDS_KEPT)  # rank 0 only
        self.bad_messages = 0
        self.late_messages = 0  # of a step whose state was already released (see _begin)
        self.finished_steps = 0
        self.draining = False
        self._floor = 0  # steps below this are over everywhere; their state is released

    def _state(self, k: int) -> _Step:
        st = self.step_state.get(k)
        if st is None:
            st = self.step_state[k] = _Step(k, received=set())
        return st

    def start(self, now: float) -> None:
        if self.rank == 0:
            self._begin(0, now)

    def _send(self, kind: int, k: int, index: int, size: int, now: float, extra=b"") -> None:
        data = make_message(kind, self.ctx.job_id, k, index, size, extra)
        msg_id = self.ctx.send(self.next, data, now)
        self.posted[msg_id] = (kind, k)

    def drain(self, now: float) -> None:
        self.draining = True  # rank 0 starts no further step; the others follow rank 0

    def _begin(self, k: int, now: float) -> None:
        st = self._state(k)
        if st.started:
            return
        # Step k starts only after every rank finished step k-1 (the DONE token came round
        # rank 0), so nothing of step k-2 is still needed here: release it, and ignore a
        # straggler of it (a GO retransmitted late) instead of starting that step again.
        if k - 1 > self._floor:
            for old in [j for j in self.step_state if j < k - 1]:
                del self.step_state[old]
            self._floor = k - 1
        st.started = True
        st.start = now
        self.cur = st
        if self.n == 1:
            self._finish(st, now)
            return
        if self.next != self.ring[0] and not st.go_forwarded:
            st.go_forwarded = True
            self._send(K_RING_GO, k, 0, HEADER.size, now)
        self._send_phase(st, now)
        self._check(st, now)

    def _send_phase(self, st: _Step, now: float) -> None:
        # Phase p leaves once phase p-1 arrived (phase 0 at once).
        while st.next_phase < self.phases and (
            st.next_phase == 0 or (st.next_phase - 1) in st.received
        ):
            p = st.next_phase
            st.next_phase += 1
            self._send(K_RING_DATA, st.index, p, max(self.sizes[p], HEADER.size), now)

    def on_message(self, peer: str, data: bytes, now: float) -> None:
        parsed = parse_message(data, self.ctx.job_id)
        if parsed is None or peer != self.prev or parsed[1] >= self.steps:
            self.bad_messages += 1
            return
        kind, k, index, extra = parsed
        if k < self._floor:
            self.late_messages += 1
            return
        st = self._state(k)
        if kind == K_RING_GO:
            self._begin(k, now)
        elif kind == K_RING_DATA:
            if index >= self.phases or index in st.received:
                self.bad_messages += 1
                return
            st.received.add(index)
            self._begin(k, now)  # a chunk of the step means its GO has passed
            self._send_phase(st, now)
            self._check(st, now)
        elif kind == K_RING_DONE:
            (st.token,) = DONE_EXTRA.unpack(extra)
            if self.rank == 0:
                self._step_complete(st, now)
            else:
                self._pass_token(st, now)
        else:
            self.bad_messages += 1

    def on_acked(self, peer: str, msg_id: int, now: float) -> None:
        info = self.posted.pop(msg_id, None)
        if info is None:
            return
        kind, k = info
        if kind == K_RING_DATA:
            st = self._state(k)
            st.acked += 1
            self._check(st, now)

    def _check(self, st: _Step, now: float) -> None:
        if st.finished or not st.started:
            return
        if len(st.received) == self.phases and st.acked == self.phases:
            self._finish(st, now)

    def _finish(self, st: _Step, now: float) -> None:
        st.finished = True
        st.end = now
        self.finished_steps += 1
        rec = {"step": st.index, "rank": self.rank, "start": st.start, "end": now}
        self.records.append(rec)
        if self.ctx.msg_records:
            self.ctx.emit({"type": "rank_step", "t": now, "job": self.ctx.job_id, **rec})
        if self.n == 1:
            self._record_global(st, now, now)
            self._next_step(st, now)
        elif self.rank == 0:
            if not st.token_sent:
                st.token_sent = True
                self._send_done(st.index, int(now * 1e9), now)
        else:
            self._pass_token(st, now)

    def _send_done(self, k: int, latest_ns: int, now: float) -> None:
        size = HEADER.size + DONE_EXTRA.size
        self._send(K_RING_DONE, k, 0, size, now, DONE_EXTRA.pack(latest_ns))

    def _pass_token(self, st: _Step, now: float) -> None:
        if st.finished and st.token is not None and not st.token_sent:
            st.token_sent = True
            self._send_done(st.index, max(st.token, int(st.end * 1e9)), now)
            if st.index == self.steps - 1:
                self.done = True

    def _step_complete(self, st: _Step, now: float) -> None:
        if not st.finished:  # cannot happen with a correct ring: the token follows our finish
            self.bad_messages += 1
            return
        latest = max(st.token / 1e9 if st.token is not None else st.end, st.end)
        self._record_global(st, latest, now)
        self._next_step(st, now)

    def _record_global(self, st: _Step, end: float, now: float) -> None:
        rec = {"step": st.index, "start": st.start, "end": end, "ms": (end - st.start) * 1e3}
        self.global_steps.append(rec)
        self.ctx.emit({"type": "step", "t": now, "job": self.ctx.job_id, **rec})

    def _next_step(self, st: _Step, now: float) -> None:
        if self.draining:
            self.done = True
        elif st.index + 1 < self.steps:
            self._begin(st.index + 1, now)
        else:
            self.done = True

    def summary(self) -> dict:
        return {
            "rank": self.rank,
            "ranks": self.n,
            "steps_finished": self.finished_steps,
            "steps": self.steps,
            "per_hop_bytes": self.per_hop,
            "rank_steps": list(self.records),
            "global_steps": list(self.global_steps),
            "bad_messages": self.bad_messages,
            "late_messages": self.late_messages,
        }


class IdleRole(Role):
    """A host the workload does not involve."""

    def __init__(self) -> None:
        self.peers = []
        self.done = True

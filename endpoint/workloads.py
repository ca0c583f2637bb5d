"""Workloads an endpoint runs, and the job that binds one to the transport's connections.

Sans-IO like the transport: a :class:`Job` is told the time, the messages delivered and the
messages the peer acknowledged, and it posts messages on its connections. The endpoint process
(``endpoint.process``) drives it over UDP; tests drive the very same code on ``endpoint.simnet``.

Kinds (sizes in bytes, or strings such as ``"20MB"``, ``"1MiB"``; the schema, the host checks
and the flow matrix are ``contracts.workloads``, shared with the scenario file):

* ``bulk``        ``{src, dst, bytes}``: one pair.
* ``permutation`` ``{bytes, pairs?}``: every host sends to one and receives from one. The
  scenario runner passes ``pairs`` (its ``flows()`` is the one definition of the matrix);
  without them hosts in config order send to the host half the list further on.
* ``incast``      ``{dst, srcs: [..] | "all", bytes}``: N-to-1, all at once.
* ``alltoall``    ``{bytes}``: every host to every other host at once.
* ``flows``       ``{flows: [[src, dst, bytes], ...]}``: any matrix.
* ``allreduce``   ``{hosts: [..] | "all", bytes, steps}``: ring all-reduce (below).

Common options: ``message_bytes`` (a flow is cut into messages of this size, default 1 MiB)
and ``window_messages`` (messages posted ahead per connection, default 4).

Every message starts with a 16-byte header (magic ``MW``, kind, job, step, index) and the rest
is a fixed pattern, so the receiver checks each message end to end on top of the transport's
crc. Messages shorter than the header carry only the pattern's first bytes.

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

import struct
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from contracts.sizes import SizeError
from contracts.sizes import parse_size as parse_bytes
from contracts.workloads import (
    AllreduceWorkload,
    Flow,
    WorkloadSpecError,
    allreduce_per_hop,
    parse_job,
    ring,
)
from contracts.workloads import flows_of as _flows_of
from endpoint.config import TransportConfig
from endpoint.ledger import Ledger
from endpoint.receiver import Delivery
from endpoint.stats import MessageCompletion
from endpoint.transport import Connection, Endpoint

MAX_JOB = 4095  # QP = job << 12 | host index: both 12 bits
MAX_HOSTS = 4095

HEADER = struct.Struct("!2sBBIII")  # magic, kind, version, job, step, index
MAGIC = b"MW"
K_FLOW, K_RING_DATA, K_RING_GO, K_RING_DONE = 1, 2, 3, 4
_DONE_EXTRA = struct.Struct("!Q")  # DONE carries the latest finish time seen (ns)
RECORDS_KEPT = 1000
"""Step records an all-reduce rank keeps for its status (the most recent): a soak runs tens of
thousands of steps, and a list of all of them would grow the process for as long as it runs."""


class WorkloadError(ValueError):
    """A workload spec that cannot run; the message names the key path."""


def parse_size(value: object, key: str) -> int:
    """`contracts.sizes.parse_size`, its error a WorkloadError naming `key`."""
    try:
        return parse_bytes(value)
    except SizeError as exc:
        raise WorkloadError(f"{key}: {exc}") from None


def flows_of(spec: object, hosts: list[str], path: str = "workload") -> list[Flow]:
    """The traffic matrix of a flow workload (not allreduce), validated."""
    try:
        workload = parse_job(spec, hosts, path)
    except WorkloadSpecError as exc:
        raise WorkloadError(str(exc)) from None
    if isinstance(workload, AllreduceWorkload):
        raise WorkloadError(f"{path}.kind: allreduce has no flow list")
    return _flows_of(workload, hosts)


def qp_number(job: int, host_index: int) -> int:
    return (job << 12) | host_index


def initial_psn(job: int, src: str, dst: str) -> int:
    """The first PSN of src's sends to dst in a job: both ends compute it, nothing exchanged."""
    return zlib.crc32(f"{job}:{src}>{dst}".encode()) & 0xFFFFFF


# ----- the payload ------------------------------------------------------------------------------

_BASE = bytes(range(256))
_patterns: dict[int, tuple[bytes, bytes]] = {}  # size -> (pattern, its tail after the header)


def _pattern_and_tail(n: int) -> tuple[bytes, bytes]:
    """The pattern of ``n`` bytes and its part after a message header, built once per size
    (a message is 1 MiB: rebuilding or slicing it per message cost ~1 ns per byte)."""
    pt = _patterns.get(n)
    if pt is None:
        p = (_BASE * (n // 256 + 1))[:n]
        if len(_patterns) > 16:
            _patterns.clear()
        pt = _patterns[n] = (p, p[HEADER.size :])
    return pt


def _pattern(n: int) -> bytes:
    return _pattern_and_tail(n)[0]


def make_message(
    kind: int, job: int, step: int, index: int, size: int, extra: bytes = b""
) -> bytes:
    head = HEADER.pack(MAGIC, kind, 1, job, step, index) + extra
    if size < len(head):
        if extra:
            raise ValueError("message too small for its control fields")
        return _pattern(size)
    # One copy of the pattern's bytes: no slice of it first.
    return b"".join((head, memoryview(_pattern(size))[len(head) :]))


def parse_message(data: bytes, job: int) -> tuple[int, int, int, bytes] | None:
    """(kind, step, index, extra) of a message of this job, or None if it is not one."""
    n = len(data)
    if n < HEADER.size:
        return (K_FLOW, 0, 0, b"") if data == _pattern(n) else None
    magic, kind, version, mjob, step, index = HEADER.unpack_from(data)
    if magic != MAGIC or version != 1 or mjob != job:
        return None
    extra = b""
    if kind == K_RING_DONE:
        if n < HEADER.size + _DONE_EXTRA.size:
            return None
        extra = bytes(data[HEADER.size : HEADER.size + _DONE_EXTRA.size])
    elif n > HEADER.size:
        # The pattern's tail compared in place (memcmp), against a cached copy: no temporaries.
        if not isinstance(data, bytes):
            data = bytes(data)
        if not data.endswith(_pattern_and_tail(n)[1]):
            return None
    return kind, step, index, extra


# ----- roles ------------------------------------------------------------------------------------


class _Role:
    """What one host does in a job. ``ctx`` is the Job (send, emit)."""

    peers: list[str]
    done: bool = False

    def start(self, now: float) -> None: ...

    def on_message(self, peer: str, data: bytes, now: float) -> None: ...

    def on_acked(self, peer: str, msg_id: int, now: float) -> None: ...

    def drain(self, now: float) -> None:
        """Post nothing new from now on; what is in flight completes (a soak's end)."""

    def summary(self) -> dict:
        return {}


class FlowRole(_Role):
    """Sends this host's flows as messages (``window`` posted ahead), receives its inbound."""

    def __init__(self, ctx: Job, flows: list[Flow], host: str, message_bytes: int, window: int):
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


class AllreduceRole(_Role):
    """One rank of a ring all-reduce in synchronised steps (module docstring)."""

    def __init__(self, ctx: Job, ring: list[str], host: str, nbytes: int, steps: int) -> None:
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
            (st.token,) = _DONE_EXTRA.unpack(extra)
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
        size = HEADER.size + _DONE_EXTRA.size
        self._send(K_RING_DONE, k, 0, size, now, _DONE_EXTRA.pack(latest_ns))

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


# ----- the job ----------------------------------------------------------------------------------


class Job:
    """One workload run on one host: its connections (one QP pair per peer) and its role.

    QP numbers need no exchange: on host A the QP towards B is ``job << 12 | index(B)`` and
    B's QP towards A is ``job << 12 | index(A)``, indices being positions in ``hosts`` (1-based).
    """

    def __init__(
        self,
        job_id: int,
        spec: dict,
        host: str,
        hosts: list[str],
        endpoint: Endpoint,
        cfg: TransportConfig,
        emit: Callable[[dict], None] | None = None,
        now: float = 0.0,
        msg_records: bool = True,
    ) -> None:
        if not isinstance(job_id, int) or isinstance(job_id, bool) or not 1 <= job_id <= MAX_JOB:
            raise WorkloadError(f"job: must be an integer 1..{MAX_JOB}")
        if len(hosts) > MAX_HOSTS:
            raise WorkloadError(f"hosts: at most {MAX_HOSTS}")
        if host not in hosts:
            raise WorkloadError(f"host {host!r} is not in the config's hosts")
        self.job_id = job_id
        self.spec = spec
        self.host = host
        self.hosts = hosts
        self.endpoint = endpoint
        self.cfg = cfg
        self.emit = emit or (lambda _r: None)
        # One `msg` record per message (and `rank_step` per step) is what a short run's
        # analysis reads; a soak turns them off: at tens of messages a second for 30 minutes
        # they would be most of the metrics file. The ledger counts every message either way.
        self.msg_records = msg_records
        self.ledger = Ledger()
        self.draining = False
        self.kind = spec.get("kind") if isinstance(spec, dict) else None
        try:
            workload = parse_job(spec, hosts)
        except WorkloadSpecError as exc:
            raise WorkloadError(str(exc)) from None
        if isinstance(workload, AllreduceWorkload):
            ranks = ring(workload, hosts)
            self.role: _Role = (
                AllreduceRole(self, ranks, host, workload.bytes, workload.steps)
                if host in ranks
                else _IdleRole()
            )
        else:
            flows = _flows_of(workload, hosts)
            self.role = FlowRole(
                self, flows, host, workload.message_bytes, workload.window_messages
            )
        self.index = hosts.index(host) + 1
        self.conns: dict[str, Connection] = {}
        self.peer_of_qp: dict[int, str] = {}
        for peer in self.role.peers:
            pi = hosts.index(peer) + 1
            local_qp = qp_number(job_id, pi)
            if local_qp in endpoint.connections:
                raise WorkloadError(f"job {job_id}: already prepared on this host")
        for peer in self.role.peers:
            pi = hosts.index(peer) + 1
            local_qp = qp_number(job_id, pi)
            remote_qp = qp_number(job_id, self.index)
            # With cfg.ev_seed each direction draws its own EV base, as each QP of a RoCE
            # connection picks its own source port; both ends compute both (nothing exchanged).
            conn = endpoint.connect(
                local_qp,
                remote_qp,
                peer,
                send_psn=initial_psn(job_id, host, peer),
                recv_psn=initial_psn(job_id, peer, host),
                cfg=cfg.for_connection(host, peer, local_qp),
                peer_ev_base=cfg.for_connection(peer, host, remote_qp).ev_base,
            )
            self.conns[peer] = conn
            self.peer_of_qp[local_qp] = peer
        self.prepared_at = now
        self.go_at: float | None = None
        self.done_at: float | None = None
        self._posted: dict[tuple[str, int], tuple[float, int]] = {}
        self.messages_rx = 0
        self.bytes_rx = 0

    # the role's view of the job

    def send(self, peer: str, data: bytes, now: float) -> int:
        msg_id = self.conns[peer].send(data, now)
        self._posted[(peer, msg_id)] = (now, len(data))
        self.ledger.post(peer, len(data))
        return msg_id

    # driven by the process (or a test)

    def go(self, now: float) -> None:
        if self.go_at is not None:
            return
        self.go_at = now
        self.role.start(now)
        self._maybe_done(now)

    def drain(self, now: float) -> None:
        """Stop posting new work; what was posted still completes (`testbed soak`'s end)."""
        self.draining = True
        self.role.drain(now)
        self._maybe_done(now)

    def on_delivery(self, d: Delivery) -> None:
        peer = self.peer_of_qp.get(d.qp)
        if peer is None:
            return
        if not self.ledger.deliver(peer, d.msg_id, len(d.data)):
            return  # handed up before: counted as a duplicate, not given to the role again
        self.messages_rx += 1
        self.bytes_rx += len(d.data)
        if not self.msg_records:
            self.role.on_message(peer, d.data, d.at)
            self._maybe_done(d.at)
            return
        self.emit(
            {
                "type": "msg",
                "t": d.at,
                "job": self.job_id,
                "peer": peer,
                "side": "rx",
                "msg_id": d.msg_id,
                "bytes": len(d.data),
            }
        )
        self.role.on_message(peer, d.data, d.at)
        self._maybe_done(d.at)

    def on_completion(self, c: MessageCompletion) -> None:
        peer = self.peer_of_qp.get(c.qp)
        if peer is None:
            return
        self._posted.pop((peer, c.msg_id), None)
        if not self.msg_records:
            self.role.on_acked(peer, c.msg_id, c.finished)
            self._maybe_done(c.finished)
            return
        self.emit(
            {
                "type": "msg",
                "t": c.finished,
                "job": self.job_id,
                "peer": peer,
                "side": "tx",
                "msg_id": c.msg_id,
                "bytes": c.nbytes,
                "posted": c.started,
                "acked": c.finished,
            }
        )
        self.role.on_acked(peer, c.msg_id, c.finished)
        self._maybe_done(c.finished)

    def _maybe_done(self, now: float) -> None:
        if self.done_at is None and self.go_at is not None and self.role.done:
            self.done_at = now

    @property
    def done(self) -> bool:
        return self.done_at is not None

    def status(self) -> dict:
        return {
            "job": self.job_id,
            "kind": self.kind,
            "peers": list(self.conns),
            "prepared_at": self.prepared_at,
            "go_at": self.go_at,
            "done_at": self.done_at,
            "done": self.done,
            "messages_rx": self.messages_rx,
            "bytes_rx": self.bytes_rx,
            "unacked_messages": len(self._posted),
            # (posted at, bytes) of each message still in flight: a run cut off at its deadline
            # still knows what was outstanding (stalls, never-delivered data).
            "unacked": [[t, n] for t, n in self._posted.values()],
            "draining": self.draining,
            # Exactly-once accounting (endpoint.ledger): per peer, posted and delivered
            # messages and bytes, duplicates handed up; and messages whose end-to-end crc32
            # failed (never delivered: endpoint.receiver).
            "ledger": self.ledger.as_dict(),
            "duplicates": self.ledger.duplicates,
            "crc_failures": sum(c.stats.drops["message_crc"] for c in self.conns.values()),
            **self.role.summary(),
        }


class _IdleRole(_Role):
    """A host the workload does not involve."""

    def __init__(self) -> None:
        self.peers = []
        self.done = True

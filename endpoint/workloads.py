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
* ``allreduce``   ``{hosts: [..] | "all", bytes, steps}``: ring all-reduce (``workload_roles``).

Common options: ``message_bytes`` (a flow is cut into messages of this size, default 1 MiB)
and ``window_messages`` (messages posted ahead per connection, default 4).

The messages' bytes are ``endpoint.workload_messages``; what each host does in a job (its
flows, or its rank of the ring all-reduce, with the all-reduce's step protocol) is
``endpoint.workload_roles``.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

from contracts.sizes import SizeError
from contracts.sizes import parse_size as parse_bytes
from contracts.trace import TraceError, graph_from_dict
from contracts.workloads import (
    AllreduceWorkload,
    Flow,
    TraceJob,
    WorkloadSpecError,
    parse_job,
    ring,
)
from contracts.workloads import flows_of as _flows_of
from endpoint.config import TransportConfig
from endpoint.ledger import Ledger
from endpoint.receiver import Delivery
from endpoint.stats import MessageCompletion
from endpoint.trace_role import TraceRole
from endpoint.transport import Connection, Endpoint
from endpoint.workload_roles import AllreduceRole, FlowRole, IdleRole, Role

MAX_JOB = 4095  # QP = job << 12 | host index: both 12 bits
MAX_HOSTS = 4095
MAX_HOSTS_MULTI_QP = 255  # with several QPs per peer the index keeps 8 bits (qp_number)


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


def qp_number(job: int, host_index: int, lane: int = 0) -> int:
    """The QP towards host `host_index` (1-based) in `job`: ``job << 12 | index``. A job with
    several QPs per peer numbers its further QPs ``job << 12 | lane << 8 | index`` (lanes 1..15),
    so it may have at most MAX_HOSTS_MULTI_QP hosts: lane 0 is the same QP either way."""
    return (job << 12) | (lane << 8) | host_index


def initial_psn(job: int, src: str, dst: str, lane: int = 0) -> int:
    """The first PSN of src's sends to dst in a job (on its QP `lane`): both ends compute it,
    nothing exchanged."""
    key = f"{job}:{src}>{dst}" if lane == 0 else f"{job}:{src}>{dst}:{lane}"
    return zlib.crc32(key.encode()) & 0xFFFFFF


def stripe(data: bytes, parts: int) -> list[bytes]:
    """`data` cut into `parts` consecutive slices as even as possible (the first ones take the
    remainder; a message shorter than `parts` leaves some slices empty)."""
    n = len(data)
    cuts = [i * n // parts for i in range(parts + 1)]
    return [data[cuts[i] : cuts[i + 1]] for i in range(parts)]


class Job:
    """One workload run on one host: its connections (``cfg.qps`` QP pairs per peer, one by
    default) and its role.

    QP numbers need no exchange: on host A the QP towards B is ``job << 12 | index(B)`` and
    B's QP towards A is ``job << 12 | index(A)``, indices being positions in ``hosts`` (1-based).

    **Several QPs per peer** (``cfg.qps`` > 1) is how RDMA collectives spread one peer's data
    over several paths without spraying: each QP has its own source port, hence its own ECMP
    hash (Meta's "QP scaling", SIGCOMM 2024; NCCL_IB_QPS_PER_CONNECTION with
    NCCL_IB_SPLIT_DATA_ON_QPS). Every message the role posts is cut into ``qps`` slices, slice i
    on the peer's QP i, so the QPs' message ids advance in lock step: message m of the job is
    message m on every QP. The receiver joins a message when all its slices arrived (any
    order), the sender reports it acknowledged when all its slices were: the role sees one
    message either way. Striping, not whole messages round-robin, because an all-reduce phase is
    one message here: round-robin would leave it on one path.
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
        if cfg.qps > 1 and len(hosts) > MAX_HOSTS_MULTI_QP:
            raise WorkloadError(
                f"transport.qps: {cfg.qps} QPs per peer need at most {MAX_HOSTS_MULTI_QP} hosts, "
                f"the job has {len(hosts)}"
            )
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
            self.role: Role = (
                AllreduceRole(self, ranks, host, workload.bytes, workload.steps)
                if host in ranks
                else IdleRole()
            )
        elif isinstance(workload, TraceJob):
            try:
                graph = graph_from_dict(workload.graph)
            except TraceError as exc:
                raise WorkloadError(f"workload.graph: {exc}") from None
            if graph.ranks != len(workload.ranks):
                raise WorkloadError(
                    f"workload.ranks: {len(workload.ranks)} hosts for a graph of {graph.ranks} ranks"
                )
            self.role = (
                TraceRole(
                    self,
                    graph,
                    workload.ranks,
                    host,
                    workload.iterations,
                    slowdown=workload.stragglers.get(host, 1.0),
                    jitter=workload.compute_jitter,
                    seed=workload.seed,
                )
                if host in workload.ranks
                else IdleRole()
            )
        else:
            flows = _flows_of(workload, hosts)
            self.role = FlowRole(
                self, flows, host, workload.message_bytes, workload.window_messages
            )
        self.index = hosts.index(host) + 1
        self.lanes = cfg.qps
        # peer -> its QPs in lane order (one unless cfg.qps > 1); QP -> (peer, lane).
        self.peer_qps: dict[str, list[Connection]] = {}
        self.peer_of_qp: dict[int, str] = {}
        self.lane_of_qp: dict[int, int] = {}
        wanted = [
            (peer, lane, qp_number(job_id, hosts.index(peer) + 1, lane))
            for peer in self.role.peers
            for lane in range(self.lanes)
        ]
        if any(qp in endpoint.connections for _, _, qp in wanted):
            raise WorkloadError(f"job {job_id}: already prepared on this host")
        for peer, lane, local_qp in wanted:
            remote_qp = qp_number(job_id, self.index, lane)
            # With cfg.ev_seed each direction draws its own EV base, as each QP of a RoCE
            # connection picks its own source port; both ends compute both (nothing exchanged).
            conn = endpoint.connect(
                local_qp,
                remote_qp,
                peer,
                send_psn=initial_psn(job_id, host, peer, lane),
                recv_psn=initial_psn(job_id, peer, host, lane),
                cfg=cfg.for_connection(host, peer, local_qp),
                peer_ev_base=cfg.for_connection(peer, host, remote_qp).ev_base,
            )
            self.peer_qps.setdefault(peer, []).append(conn)
            self.peer_of_qp[local_qp] = peer
            self.lane_of_qp[local_qp] = lane
        # Striped messages (lanes > 1): slices received so far, slices not yet acknowledged,
        # and each QP's own ledger of slices, which catches a slice handed up twice.
        self._slices: dict[tuple[str, int], list[bytes | None]] = {}
        self._unacked_slices: dict[tuple[str, int], int] = {}
        self._lane_ledger = Ledger()
        self.prepared_at = now
        self.go_at: float | None = None
        self.done_at: float | None = None
        self._posted: dict[tuple[str, int], tuple[float, int]] = {}
        self.messages_rx = 0
        self.bytes_rx = 0

    # the role's view of the job

    def send(self, peer: str, data: bytes, now: float) -> int:
        qps = self.peer_qps[peer]
        if self.lanes == 1:
            msg_id = qps[0].send(data, now)
        else:
            parts = stripe(data, self.lanes)
            ids = {conn.send(part, now) for conn, part in zip(qps, parts, strict=True)}
            if len(ids) != 1:  # every QP of a peer posts every message: ids in lock step
                raise RuntimeError(f"job {self.job_id}: QPs to {peer} out of step: ids {ids}")
            msg_id = ids.pop()
            self._unacked_slices[(peer, msg_id)] = self.lanes
        self._posted[(peer, msg_id)] = (now, len(data))
        self.ledger.post(peer, len(data))
        return msg_id

    def connections(self) -> list[tuple[str, Connection]]:
        """Every QP of the job, named: the peer for its first QP, ``peer#lane`` for the others
        (the names of `stats` and of the prepared record's EV bases)."""
        return [
            (peer if lane == 0 else f"{peer}#{lane}", conn)
            for peer, qps in self.peer_qps.items()
            for lane, conn in enumerate(qps)
        ]

    # driven by the process (or a test)

    def go(self, now: float) -> None:
        if self.go_at is not None:
            return
        self.go_at = now
        self.role.start(now)
        self._maybe_done(now)

    def poll(self, now: float) -> None:
        """The role's timers due at `now` (a trace's compute nodes); the process calls it every
        turn, before it asks for `next_deadline`."""
        self.role.poll(now)
        self._maybe_done(now)

    def next_deadline(self) -> float | None:
        """When the role's next timer is due (None: it has none)."""
        return self.role.next_deadline()

    def drain(self, now: float) -> None:
        """Stop posting new work; what was posted still completes (`testbed soak`'s end)."""
        self.draining = True
        self.role.drain(now)
        self._maybe_done(now)

    def on_delivery(self, d: Delivery) -> None:
        peer = self.peer_of_qp.get(d.qp)
        if peer is None:
            return
        data = d.data if self.lanes == 1 else self._join_slice(peer, d)
        if data is None:
            return  # a slice of a message whose other slices are still on their way
        if not self.ledger.deliver(peer, d.msg_id, len(data)):
            return  # handed up before: counted as a duplicate, not given to the role again
        self.messages_rx += 1
        self.bytes_rx += len(data)
        if self.msg_records:
            self.emit(
                {
                    "type": "msg",
                    "t": d.at,
                    "job": self.job_id,
                    "peer": peer,
                    "side": "rx",
                    "msg_id": d.msg_id,
                    "bytes": len(data),
                }
            )
        self.role.on_message(peer, data, d.at)
        self._maybe_done(d.at)

    def _join_slice(self, peer: str, d: Delivery) -> bytes | None:
        """Keep slice `d` of a striped message; the whole message once its last slice is in."""
        lane = self.lane_of_qp[d.qp]
        if not self._lane_ledger.deliver(f"{peer}#{lane}", d.msg_id, len(d.data)):
            self.ledger.duplicate(peer, len(d.data))  # this QP handed this slice up before
            return None
        key = (peer, d.msg_id)
        slots = self._slices.get(key)
        if slots is None:
            slots = self._slices[key] = [None] * self.lanes
        slots[lane] = d.data
        if any(part is None for part in slots):
            return None
        del self._slices[key]
        return b"".join(slots)  # type: ignore[arg-type]

    def on_completion(self, c: MessageCompletion) -> None:
        peer = self.peer_of_qp.get(c.qp)
        if peer is None:
            return
        key = (peer, c.msg_id)
        if self.lanes > 1:
            left = self._unacked_slices.get(key)
            if left is None:
                return
            if left > 1:
                self._unacked_slices[key] = left - 1
                return
            del self._unacked_slices[key]
        posted = self._posted.pop(key, None)
        started, nbytes = posted if posted is not None else (c.started, c.nbytes)
        if self.msg_records:
            self.emit(
                {
                    "type": "msg",
                    "t": c.finished,
                    "job": self.job_id,
                    "peer": peer,
                    "side": "tx",
                    "msg_id": c.msg_id,
                    "bytes": nbytes,
                    "posted": started,
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
            "peers": list(self.peer_qps),
            "qps_per_peer": self.lanes,
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
            "crc_failures": sum(c.stats.drops["message_crc"] for _, c in self.connections()),
            **self.role.summary(),
        }

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

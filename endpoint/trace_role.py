"""One rank of a trace workload: a training iteration's graph replayed with real messages.

The graph (`contracts.trace.TraceGraph`) gives this rank its nodes. A node starts when the
nodes it depends on have finished: a compute node then waits its duration in virtual time (a
timer: `next_deadline` / `poll`); a collective runs its schedule (`endpoint.collectives`),
each send a message to a peer of its group; a send or receive is one message. An iteration is
done on this rank when all its nodes are; the next one starts at once, until `iterations`.

Messages say which iteration, collective instance, lane and per-peer sequence number they
belong to (`endpoint.workload_messages.TRACE_EXTRA`), so a message that arrives before this
rank reached the collective -- a faster peer already in it -- is kept and counted when the
collective starts, and rounds are matched by the order of a peer's messages in a lane, not by
the sender's round number (a tree's child sends up in its round 1 what its parent receives in
round 0).

Records (`emit`): `trace_iter` per iteration on this rank (start, end, the compute it did in
all, and its critical path) and `trace_node` per
collective and point-to-point node (start, end, bytes), from which the runner builds iteration
times across ranks and says which collective held an iteration back.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

from contracts.trace import COLLECTIVE, COMPUTE, RECV, SEND, Node, TraceGraph
from endpoint.collectives import Schedule, schedule
from endpoint.workload_messages import K_TRACE, TRACE_EXTRA, TRACE_HEAD, make_message, parse_message
from endpoint.workload_roles import JobContext, Role


@dataclass
class _Running:
    """A collective or point-to-point node in progress on this rank."""

    node: Node
    start: float
    members: tuple[int, ...] = ()  # group ranks, in the schedule's order
    schedule: Schedule | None = None
    posted: list[int] = field(default_factory=list)  # rounds posted, per lane
    got: list[int] = field(default_factory=list)  # receives counted, per lane (in order)
    expect: list[list[tuple[int, int]]] = field(default_factory=list)  # per lane: (peer, seq)
    before: list[list[int]] = field(default_factory=list)  # per lane: receives before round k
    sent_seq: dict[tuple[int, int], int] = field(default_factory=dict)  # (lane, peer) -> next
    unacked: int = 0
    nbytes: int = 0


class TraceRole(Role):
    def __init__(
        self,
        ctx: JobContext,
        graph: TraceGraph,
        ranks: list[str],
        host: str,
        iterations: int,
        slowdown: float = 1.0,
        jitter: float = 0.0,
        seed: int = 0,
    ) -> None:
        """`slowdown` multiplies every compute time of this rank (a slow GPU); `jitter` is the
        relative standard deviation of each compute time's noise, drawn per iteration and
        node from `seed` and this rank, so a rerun with the same seed draws the same noise."""
        self.ctx = ctx
        self.slowdown = slowdown
        self.jitter = jitter
        self.seed = seed
        self.graph = graph
        self.ranks = ranks
        self.rank = ranks.index(host)
        self.iterations = iterations
        self.nodes = {n.id: n for n in graph.nodes[self.rank]}
        self.users: dict[int, list[int]] = {i: [] for i in self.nodes}
        for n in self.nodes.values():
            for d in n.deps:
                self.users[d].append(n.id)
        # Every rank numbers the collective instances alike: their ids, sorted.
        self.comm_index = {c: i for i, c in enumerate(sorted(graph.collectives()))}
        peers: set[int] = set()
        for n in self.nodes.values():
            if n.kind == COLLECTIVE:
                peers.update(graph.groups[n.group])
            elif n.kind in (SEND, RECV):
                peers.add(n.peer)
        peers.discard(self.rank)
        self.peers = sorted((ranks[p] for p in peers), key=ctx.hosts.index)
        self._schedules: dict[tuple, Schedule] = {}
        # Arrivals by (iteration, p2p, index) -> {(lane, peer rank, seq)}: kept until used.
        self._arrived: dict[tuple[int, int, int], set[tuple[int, int, int]]] = {}
        self._acks: dict[tuple[str, int], int] = {}  # (peer host, msg_id) -> node id
        self.iteration = -1
        self.iter_start = 0.0
        self.iteration_times: list[float] = []
        self.bad_messages = 0
        self.draining = False

    # ----- the iteration ---------------------------------------------------------------------

    def start(self, now: float) -> None:
        self._next_iteration(now)

    def drain(self, now: float) -> None:
        self.draining = True

    def _next_iteration(self, now: float) -> None:
        self.iteration += 1
        if self.iteration >= self.iterations or self.draining:
            self.done = True
            return
        self.iter_start = now
        self._waiting = {i: len(n.deps) for i, n in self.nodes.items()}
        self._left = len(self.nodes)
        self._timers: list[tuple[float, int]] = []
        self._running: dict[int, _Running] = {}
        # For the critical path: when each node started and ended, and the dependency that
        # ended last before it started (the one it waited for).
        self._began: dict[int, float] = {}
        self._ended: dict[int, float] = {}
        self._after: dict[int, int] = {}
        self._last = -1
        self._computed = 0.0  # virtual seconds of compute this iteration, on or off the path
        # A rank with no nodes (not in any group of the trace) still counts its iterations.
        ready = [i for i, k in self._waiting.items() if k == 0]
        if not ready:
            self._iteration_done(now)
            return
        for i in ready:
            self._start(self.nodes[i], now)

    def _iteration_done(self, now: float) -> None:
        self.iteration_times.append(now - self.iter_start)
        self.ctx.emit(
            {
                "type": "trace_iter",
                "t": now,
                "job": self.ctx.job_id,
                "rank": self.rank,
                "iteration": self.iteration,
                "start": self.iter_start,
                "end": now,
                "compute_s": self._computed,
                **self._critical_path(),
            }
        )
        self._next_iteration(now)

    def _critical_path(self) -> dict:
        """The chain of nodes this rank's iteration waited for, walked back from the node that
        ended last through the dependency each one waited for; its time split into compute and
        communication, and the communication node that cost it most (None: none on it)."""
        chain = []
        i = self._last
        while i >= 0:
            chain.append(i)
            i = self._after.get(i, -1)
        compute = comm = 0.0
        worst, worst_s = None, 0.0
        for i in chain:
            n = self.nodes[i]
            span = self._ended[i] - self._began[i]
            if n.kind == COMPUTE:
                compute += span
            else:
                comm += span
                if span > worst_s:
                    worst, worst_s = n.name, span
        return {
            "critical_compute_s": compute,
            "critical_comm_s": comm,
            "waited_for": worst,
            "critical_path": [self.nodes[i].name for i in reversed(chain)][-50:],
        }

    def _finish(self, node: Node, now: float) -> None:
        self._ended[node.id] = now
        self._last = node.id
        run = self._running.pop(node.id, None)
        if run is not None:
            self.ctx.emit(
                {
                    "type": "trace_node",
                    "t": now,
                    "job": self.ctx.job_id,
                    "rank": self.rank,
                    "iteration": self.iteration,
                    "node": node.id,
                    "name": node.name,
                    "kind": node.kind,
                    "comm": node.comm,
                    "start": run.start,
                    "end": now,
                    "bytes": run.nbytes,
                }
            )
        self._left -= 1
        ready = []
        for u in self.users[node.id]:
            self._waiting[u] -= 1
            if self._waiting[u] == 0:
                ready.append(u)
        for u in ready:
            self._start(self.nodes[u], now)
        if self._left == 0:
            self._iteration_done(now)

    def _start(self, node: Node, now: float) -> None:
        self._began[node.id] = now
        if node.deps:
            self._after[node.id] = max(node.deps, key=self._ended.__getitem__)
        if node.kind == COMPUTE:
            t = self._compute_s(node)
            self._computed += t
            heapq.heappush(self._timers, (now + t, node.id))
            return
        run = _Running(node, now)
        self._running[node.id] = run
        if node.kind == COLLECTIVE:
            members = self.graph.groups[node.group]
            key = (node.collective, node.algorithm, len(members), node.nbytes)
            sched = self._schedules.get(key)
            if sched is None:
                sched = self._schedules[key] = schedule(
                    node.collective, node.nbytes, len(members), node.algorithm or None
                )
            me = members.index(self.rank)
            run.members = members
            run.schedule = sched
            run.posted = [0] * len(sched.lanes)
            run.got = [0] * len(sched.lanes)
            for lane in sched.lanes:
                seen: dict[int, int] = {}
                expect = []
                before = []
                for rd in lane[me]:
                    before.append(len(expect))
                    for p in rd.recvs:
                        expect.append((members[p], seen.get(p, 0)))
                        seen[p] = seen.get(p, 0) + 1
                run.expect.append(expect)
                run.before.append(before)
            self._advance(run, now)
        elif node.kind == SEND:
            run.unacked = 1
            run.nbytes = node.nbytes
            self._post(run, node.peer, 0, 0, node.nbytes, now)
        else:  # RECV
            self._advance_recv(run, now)

    def _compute_s(self, node: Node) -> float:
        t = node.duration_s * self.slowdown
        if self.jitter and t > 0:
            rng = random.Random(f"{self.seed}:{self.rank}:{self.iteration}:{node.id}")
            t = max(0.0, t * (1.0 + self.jitter * rng.gauss(0.0, 1.0)))
        return t

    # ----- collectives and point to point ---------------------------------------------------

    def _key(self, node: Node) -> tuple[int, int, int]:
        if node.kind == COLLECTIVE:
            return (self.iteration, 0, self.comm_index[node.comm])
        return (self.iteration, 1, node.tag)

    def _advance(self, run: _Running, now: float) -> None:
        """Count what arrived, in order; post every round whose earlier receives are in."""
        sched = run.schedule
        assert sched is not None
        me = run.members.index(self.rank)
        arrived = self._arrived.get(self._key(run.node), set())
        for lane_i, lane in enumerate(sched.lanes):
            rounds = lane[me]
            expect = run.expect[lane_i]
            while run.got[lane_i] < len(expect):
                peer, seq = expect[run.got[lane_i]]
                if (lane_i, peer, seq) not in arrived:
                    break
                arrived.discard((lane_i, peer, seq))
                run.got[lane_i] += 1
            before = run.before[lane_i]
            while run.posted[lane_i] < len(rounds):
                k = run.posted[lane_i]
                if run.got[lane_i] < before[k]:
                    break
                for send in rounds[k].sends:
                    peer = run.members[send.peer]
                    seq = run.sent_seq.get((lane_i, peer), 0)
                    run.sent_seq[(lane_i, peer)] = seq + 1
                    run.unacked += 1
                    run.nbytes += send.nbytes
                    self._post(run, peer, lane_i, seq, send.nbytes, now)
                run.posted[lane_i] += 1
        done = all(
            run.posted[i] == len(lane[me]) and run.got[i] == len(run.expect[i])
            for i, lane in enumerate(sched.lanes)
        )
        if done and run.unacked == 0:
            self._finish(run.node, now)

    def _advance_recv(self, run: _Running, now: float) -> None:
        node = run.node
        arrived = self._arrived.get(self._key(node), set())
        if (0, node.peer, 0) in arrived:
            arrived.discard((0, node.peer, 0))
            run.nbytes = node.nbytes
            self._finish(node, now)

    def _post(self, run: _Running, peer: int, lane: int, seq: int, nbytes: int, now: float) -> None:
        _, p2p, index = self._key(run.node)
        extra = TRACE_EXTRA.pack(p2p, lane, seq)
        data = make_message(
            K_TRACE, self.ctx.job_id, self.iteration, index, max(nbytes, TRACE_HEAD), extra
        )
        host = self.ranks[peer]
        msg_id = self.ctx.send(host, data, now)
        self._acks[(host, msg_id)] = run.node.id

    def on_message(self, peer: str, data: bytes, now: float) -> None:
        parsed = parse_message(data, self.ctx.job_id)
        if parsed is None or parsed[0] != K_TRACE or peer not in self.ranks:
            self.bad_messages += 1
            return
        _, iteration, index, extra = parsed
        p2p, lane, seq = TRACE_EXTRA.unpack(extra)
        key = (iteration, p2p, index)
        self._arrived.setdefault(key, set()).add((lane, self.ranks.index(peer), seq))
        if iteration != self.iteration or self.done:
            return  # a peer already in the next iteration: kept for then
        for run in list(self._running.values()):
            if self._key(run.node) == key:
                if run.node.kind == COLLECTIVE:
                    self._advance(run, now)
                elif run.node.kind == RECV:
                    self._advance_recv(run, now)
        self._forget(key)

    def on_acked(self, peer: str, msg_id: int, now: float) -> None:
        node_id = self._acks.pop((peer, msg_id), None)
        run = self._running.get(node_id) if node_id is not None else None
        if run is None:
            return
        run.unacked -= 1
        if run.node.kind == SEND:
            if run.unacked == 0:
                self._finish(run.node, now)
        else:
            self._advance(run, now)

    def _forget(self, key: tuple[int, int, int]) -> None:
        s = self._arrived.get(key)
        if s is not None and not s:
            del self._arrived[key]

    # ----- timers ----------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        if self.done or not self._timers_live():
            return None
        return self._timers[0][0]

    def _timers_live(self) -> bool:
        return bool(getattr(self, "_timers", None))

    def poll(self, now: float) -> None:
        """Finish every compute node whose time has come, in time order."""
        while self._timers_live() and self._timers[0][0] <= now and not self.done:
            t, node_id = heapq.heappop(self._timers)
            self._finish(self.nodes[node_id], t)

    def summary(self) -> dict:
        times = self.iteration_times
        return {
            "rank": self.rank,
            "iterations": self.iterations,
            "iterations_finished": len(times),
            "iteration_s": times[-1000:],
            "bad_messages": self.bad_messages,
        }

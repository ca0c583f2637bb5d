"""The traffic a scenario's workload asks for: one definition for the runner, the endpoints,
the kernel baseline and the metrics."""

from __future__ import annotations

import random

from contracts.workloads import (
    AllreduceWorkload,
    Flow,
    PermutationWorkload,
    TraceWorkload,
    flows_of,
)
from contracts.workloads import workload_hosts as hosts_of
from testbed.scenario.schema import Scenario
from testbed.scenario.trace_workload import trace_flows

__all__ = ["Flow", "flows", "repetitions", "total_bytes", "workload_hosts"]


def workload_hosts(sc: Scenario) -> list[str]:
    """The hosts that take part, in fabric order (an all-reduce ring: in ring order)."""
    return hosts_of(sc.workload, sc.hosts())


def flows(sc: Scenario) -> list[Flow]:
    """The traffic matrix, one definition for the runner, the endpoints and the metrics.

    permutation: with two or more leaves every flow crosses the spine layer (the case where ECMP
    collisions matter): leaves are put in a seeded random cyclic order and each leaf's hosts send,
    in a seeded random matching, to the hosts of the next leaf. With one leaf it is a seeded
    random cyclic permutation. Either way each host sends once and receives once.
    Every other kind is `contracts.workloads.flows_of` (what an endpoint job expands it to);
    allreduce: a ring in `hosts` order; each host sends 2(N-1)/N x bytes per step to the next
    (reduce-scatter then all-gather), which is what one step's flows carry.
    """
    w = sc.workload
    hosts = workload_hosts(sc)
    if isinstance(w, TraceWorkload):
        return trace_flows(sc)
    if not isinstance(w, PermutationWorkload):
        return flows_of(w, hosts)
    rng = random.Random(sc.seed)
    fabric = sc.fabric()
    by_leaf: dict[str, list[str]] = {}
    for h in hosts:
        by_leaf.setdefault(fabric.interfaces[h][0].peer_node, []).append(h)
    groups = list(by_leaf.values())
    pairs: list[tuple[str, str]] = []
    if len(groups) >= 2:
        rng.shuffle(groups)
        for j, senders in enumerate(groups):
            receivers = list(groups[(j + 1) % len(groups)])
            rng.shuffle(receivers)
            pairs += zip(senders, receivers, strict=True)
    else:
        order = list(hosts)
        for i in range(len(order) - 1, 0, -1):  # Sattolo: a uniformly random single cycle
            k = rng.randrange(i)
            order[i], order[k] = order[k], order[i]
        pairs = [(order[i], order[(i + 1) % len(order)]) for i in range(len(order))]
    pairs.sort(key=lambda p: hosts.index(p[0]))
    return [Flow(a, b, w.bytes) for a, b in pairs]


def total_bytes(sc: Scenario) -> int:
    """Application bytes the whole workload must deliver."""
    steps = repetitions(sc)
    return steps * sum(f.bytes for f in flows(sc))


def repetitions(sc: Scenario) -> int:
    """How many times the workload's flows are sent: an all-reduce's steps, a trace's
    iterations, else once."""
    w = sc.workload
    if isinstance(w, AllreduceWorkload):
        return w.steps
    if isinstance(w, TraceWorkload):
        return w.iterations
    return 1

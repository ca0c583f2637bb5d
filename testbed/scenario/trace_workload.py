"""A scenario's trace workload: its graph read once, the traffic it makes, the endpoints' job.

The scenario names a file; everything else the project needs of it -- the check before a
fabric is built, the traffic matrix that sizes the emulation (`auto`'s demand, capacity), the
job each endpoint runs -- comes from the one graph read here, cached per file version, so the
run replays exactly what was checked.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from contracts.trace import SEND, TraceError, TraceGraph, graph_to_dict
from contracts.workloads import Flow, TraceWorkload, workload_hosts
from endpoint.collectives import schedule
from testbed.scenario.astra_text import read_astra_text
from testbed.scenario.chakra import read_chakra
from testbed.scenario.schema import Scenario


def trace_graph(sc: Scenario) -> TraceGraph:
    """The scenario's trace as one iteration's graph (contracts.trace.TraceError if it cannot
    run on the scenario's hosts)."""
    w = sc.workload
    assert isinstance(w, TraceWorkload)
    ranks = len(workload_hosts(w, sc.hosts()))
    path = Path(w.file if w.format == "astra-text" else f"{w.file}.0.et")
    try:
        version = path.stat().st_mtime_ns
    except OSError:
        version = -1  # the reader reports the file it cannot read
    algorithms = tuple(sorted(w.algorithms.items()))
    return _read(w.format, w.file, version, ranks, w.time_unit, w.cycle_ghz, algorithms)


@lru_cache(maxsize=8)
def _read(
    fmt: str, path: str, _version: int, ranks: int, unit, ghz, algorithms: tuple
) -> TraceGraph:
    if fmt == "chakra":
        return read_chakra(path, ranks, dict(algorithms))
    if unit is None:
        raise TraceError("time_unit: the astra-text format does not say what its times count")
    return read_astra_text(path, ranks, unit, ghz, dict(algorithms))


def trace_flows(sc: Scenario) -> list[Flow]:
    """One iteration's traffic between hosts: every collective's schedule and every send,
    summed per (source, destination) pair, in host order."""
    g = trace_graph(sc)
    hosts = workload_hosts(sc.workload, sc.hosts())
    per_pair: dict[tuple[int, int], int] = {}
    for _comm, posts in sorted(g.collectives().items()):
        node = posts[0][1]
        members = g.groups[node.group]
        sched = schedule(node.collective, node.nbytes, len(members), node.algorithm or None)
        for lane in sched.lanes:
            for i, rounds in enumerate(lane):
                for rd in rounds:
                    for send in rd.sends:
                        key = (members[i], members[send.peer])
                        per_pair[key] = per_pair.get(key, 0) + send.nbytes
    for r, nodes in enumerate(g.nodes):
        for n in nodes:
            if n.kind == SEND:
                per_pair[(r, n.peer)] = per_pair.get((r, n.peer), 0) + n.nbytes
    return [Flow(hosts[a], hosts[b], n) for (a, b), n in sorted(per_pair.items()) if n > 0]


def trace_job(sc: Scenario) -> dict:
    """The endpoints' job: the checked graph itself, the ranks' hosts and the iterations."""
    w = sc.workload
    assert isinstance(w, TraceWorkload)
    return {
        "kind": "trace",
        "ranks": workload_hosts(w, sc.hosts()),
        "iterations": w.iterations,
        "graph": graph_to_dict(trace_graph(sc)),
        "stragglers": dict(w.stragglers),
        "compute_jitter": w.compute_jitter,
        "seed": sc.seed,
    }

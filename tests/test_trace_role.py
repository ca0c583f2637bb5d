"""A trace workload's ranks on simulated endpoints (SimNet): iterations, collectives, overlap.

These run the real transport, jobs and `TraceRole` over `endpoint.simnet`, with virtual time
driven exactly (compute nodes end at their deadline), so the times below are the model's, not
the machine's.
"""

from __future__ import annotations

import pytest

from contracts.trace import COLLECTIVE, COMPUTE, RECV, SEND, Node, TraceGraph, graph_to_dict
from endpoint.collectives import schedule
from endpoint.config import TransportConfig
from endpoint.simnet import Bottleneck, PathSpec, SimNet
from endpoint.transport import Endpoint
from endpoint.workloads import Job, WorkloadError
from testbed.harness.transport_timing import transport_timing
from tests.conftest import drive_jobs
from topologies import TopologyParams

# A 10 Gbps leaf-spine with 1 us links (3 us one way host to host), its transport's timing.
DC = TopologyParams(spines=4, leaves=4, hosts_per_leaf=4, link_mbps=10_000, delay_us=1, queue_kb=12)
CFG = TransportConfig(**transport_timing(DC, 5000), line_rate_bps=10e9)
GBPS10 = Bottleneck(rate_bps=10e9)


def _run(
    graph: TraceGraph,
    hosts: list[str],
    iterations: int = 2,
    until: float = 1.0,
    posts=None,
    extra: dict | None = None,
    bottleneck=None,
):
    """Every host runs the trace (with `extra` trace-job keys: stragglers, jitter, seed; and
    `bottleneck`, (host, Bottleneck), on one host's link); returns (all done, jobs, records).
    `posts`, a list, collects (host, virtual time) of every message a job posts."""
    net = SimNet(seed=1, default_path=PathSpec(delay=3e-6))
    eps = {h: net.add_endpoint(h, Endpoint(CFG)) for h in hosts}
    for h in hosts:
        net.set_bottleneck(h, GBPS10)
    if bottleneck is not None:
        net.set_bottleneck(*bottleneck)
    records: list[dict] = []
    spec = {
        "kind": "trace",
        "ranks": hosts,
        "iterations": iterations,
        "graph": graph_to_dict(graph),
        **(extra or {}),
    }
    jobs = {h: Job(1, spec, h, hosts, eps[h], CFG, emit=records.append) for h in hosts}
    if posts is not None:
        for h, j in jobs.items():
            j.send = lambda peer, data, now, h=h, send=j.send: (
                posts.append((h, now)) or send(peer, data, now)
            )
    for j in jobs.values():
        j.go(net.now)
    return drive_jobs(net, eps, jobs, until), jobs, records


def _hosts(n: int) -> list[str]:
    return [f"h{i + 1}" for i in range(n)]


def _spmd(n: int, nodes: list[Node], groups=None) -> TraceGraph:
    return TraceGraph(
        "t", n, groups or {"all": tuple(range(n))}, tuple(tuple(nodes) for _ in range(n))
    )


def _coll(i, kind="allreduce", nbytes=400_000, deps=(), algo="", group="all", comm=None) -> Node:
    return Node(
        i,
        f"{kind}{i}",
        COLLECTIVE,
        deps,
        collective=kind,
        algorithm=algo,
        group=group,
        comm=comm or f"c{i}",
        nbytes=nbytes,
    )


@pytest.mark.parametrize(
    ("kind", "algo"),
    [
        ("allreduce", "ring"),
        ("allreduce", "tree"),
        ("allgather", ""),
        ("reducescatter", ""),
        ("alltoall", ""),
    ],
)
def test_each_collective_finishes_every_iteration_with_its_schedule_s_bytes(kind, algo):
    n = 4
    g = _spmd(n, [Node(0, "c", COMPUTE, duration_s=20e-6), _coll(1, kind, deps=(0,), algo=algo)])
    ok, jobs, records = _run(g, _hosts(n), iterations=3)
    assert ok
    sched = schedule(kind, 400_000, n, algo or None)
    nodes = [r for r in records if r["type"] == "trace_node"]
    assert len(nodes) == 3 * n
    for r in nodes:
        assert r["bytes"] == sched.sent_bytes(r["rank"])  # what the schedule says, to the byte
        assert r["end"] > r["start"]
    iters = [r for r in records if r["type"] == "trace_iter"]
    assert sorted((r["rank"], r["iteration"]) for r in iters) == [
        (k, i) for k in range(n) for i in range(3)
    ]
    for j in jobs.values():
        st = j.status()
        assert st["iterations_finished"] == 3 and st["bad_messages"] == 0 and st["duplicates"] == 0


def test_compute_only_iterations_take_exactly_their_compute():
    g = _spmd(
        2, [Node(0, "a", COMPUTE, duration_s=30e-6), Node(1, "b", COMPUTE, (0,), duration_s=70e-6)]
    )
    ok, jobs, _ = _run(g, _hosts(2), iterations=4)
    assert ok
    for j in jobs.values():
        assert j.status()["iteration_s"] == pytest.approx([100e-6] * 4, abs=1e-12)


def _overlap_graph(hidden: bool) -> TraceGraph:
    """Compute 1 ms in two halves and a 400 kB all-reduce on 4 ranks (600 kB a rank, 0.48 ms
    of 10 Gbps): started after the first half (it overlaps the second) or after both."""
    a = Node(0, "fwd", COMPUTE, duration_s=500e-6)
    b = Node(1, "bwd", COMPUTE, (0,), duration_s=500e-6)
    ar = _coll(2, nbytes=400_000, deps=(0,) if hidden else (1,))
    return _spmd(4, [a, b, ar])


def test_overlap_hides_a_collective_behind_compute():
    ok_h, jobs_h, _ = _run(_overlap_graph(hidden=True), _hosts(4), iterations=2)
    ok_e, jobs_e, _ = _run(_overlap_graph(hidden=False), _hosts(4), iterations=2)
    assert ok_h and ok_e
    hidden = max(max(j.status()["iteration_s"]) for j in jobs_h.values())
    exposed = max(max(j.status()["iteration_s"]) for j in jobs_e.values())
    comm = exposed - 1e-3  # the all-reduce's own time, nothing hiding it
    wire = 2 * 3 / 4 * 400_000 * 8 / 10e9
    assert wire <= comm <= 1.25 * wire, comm
    # Started half-way, the same all-reduce ends 0.5 ms earlier: all but what sticks out past
    # the compute is hidden.
    assert hidden == pytest.approx(max(1e-3, 500e-6 + comm), abs=5e-6)
    assert exposed - hidden == pytest.approx(500e-6, abs=5e-6)


def test_a_straggler_rank_delays_everyone_only_through_the_collective():
    n = 4
    nodes = []
    for r in range(n):
        slow = 2e-3 if r == 2 else 100e-6
        nodes.append((Node(0, "c", COMPUTE, duration_s=slow), _coll(1, deps=(0,), nbytes=100_000)))
    g = TraceGraph("t", n, {"all": tuple(range(n))}, tuple(nodes))
    posts: list[tuple[str, float]] = []
    ok, _jobs, records = _run(g, _hosts(n), iterations=1, posts=posts)
    assert ok
    # Rank 3 follows the straggler in the ring: it sends its own chunk at once, and each later
    # round only once the chunk from rank 2 came in, i.e. after 2 ms.
    early = [t for h, t in posts if h == "h4" and t < 2e-3]
    assert len(early) == 1 and len([1 for h, _ in posts if h == "h4"]) == 2 * (n - 1)
    ends = {r["rank"]: r["end"] for r in records if r["type"] == "trace_iter"}
    starts = {r["rank"]: r["start"] for r in records if r["type"] == "trace_node"}
    # The fast ranks entered the collective at 0.1 ms and waited: the ring cannot finish before
    # the straggler's data has gone round.
    assert starts[0] == pytest.approx(100e-6) and starts[2] == pytest.approx(2e-3)
    assert min(ends.values()) > 2e-3


def test_point_to_point_sends_pair_with_their_receives():
    g = TraceGraph(
        "t",
        2,
        {},
        (
            (
                Node(0, "s", SEND, peer=1, nbytes=50_000, tag=3),
                Node(1, "r", RECV, (0,), peer=1, nbytes=10, tag=4),
            ),
            (
                Node(0, "r", RECV, peer=0, nbytes=50_000, tag=3),
                Node(1, "s", SEND, (0,), peer=0, nbytes=10, tag=4),
            ),
        ),
    )
    ok, _jobs, records = _run(g, _hosts(2), iterations=2)
    assert ok
    recv = [r for r in records if r["type"] == "trace_node" and r["kind"] == "recv"]
    assert len(recv) == 4 and {r["bytes"] for r in recv} == {50_000, 10}


def test_a_graph_that_cannot_run_is_refused_when_the_job_is_made():
    g = _spmd(2, [_coll(0)])
    bad = graph_to_dict(g)
    bad["nodes"][1] = []  # rank 1 never posts the collective
    spec = {"kind": "trace", "ranks": ["h1", "h2"], "graph": bad}
    with pytest.raises(
        WorkloadError,
        match=r"^workload.graph: t: collective c0 \(allreduce0\) on all: rank 1 never posts it$",
    ):
        Job(1, spec, "h1", ["h1", "h2"], Endpoint(TransportConfig()), TransportConfig())
    spec = {"kind": "trace", "ranks": ["h1"], "graph": graph_to_dict(g)}
    with pytest.raises(WorkloadError, match=r"^workload.ranks: 1 hosts for a graph of 2 ranks$"):
        Job(1, spec, "h1", ["h1", "h2"], Endpoint(TransportConfig()), TransportConfig())


def _summary(records: list[dict]) -> dict:
    from testbed.analysis.trace_report import trace_summary

    iters = [r for r in records if r["type"] == "trace_iter"]
    nodes = [r for r in records if r["type"] == "trace_node"]
    return trace_summary(iters, nodes)


def _run_with(
    graph: TraceGraph, hosts: list[str], extra: dict, iterations: int = 2, bottleneck=None
):
    ok, _jobs, records = _run(graph, hosts, iterations, extra=extra, bottleneck=bottleneck)
    assert ok
    return records


def _layer_graph(n: int = 4) -> TraceGraph:
    """Compute 300 us, then a 200 kB all-reduce (~0.25 ms at 10 Gbps), then 100 us more."""
    return _spmd(
        n,
        [
            Node(0, "fwd", COMPUTE, duration_s=300e-6),
            _coll(1, nbytes=200_000, deps=(0,)),
            Node(2, "bwd", COMPUTE, (1,), duration_s=100e-6),
        ],
    )


def test_a_slow_gpu_is_reported_as_a_straggler_not_as_the_network():
    records = _run_with(_layer_graph(), _hosts(4), {"stragglers": {"h3": 3.0}})
    for it in _summary(records)["iterations"]:
        assert it["held_by"] == "straggler" and it["straggler_rank"] == 2, it
    # Compute of the others is what the trace says; rank 2's is three times it.
    fwd = {
        r["rank"]: r["start"] for r in records if r["type"] == "trace_node" and r["iteration"] == 0
    }
    assert fwd[2] == pytest.approx(900e-6) and fwd[0] == pytest.approx(300e-6)


def test_a_slow_link_is_reported_as_the_network_and_names_the_collective():
    # h3's receive link at 1 Gbps: every transfer into it is ten times slower.
    records = _run_with(_layer_graph(), _hosts(4), {}, bottleneck=("h3", Bottleneck(rate_bps=1e9)))
    for it in _summary(records)["iterations"]:
        assert it["held_by"] == "network" and it["waited_for"] == "allreduce1", it
        assert it["straggler_rank"] is None


def test_a_healthy_iteration_is_compute_bound_when_compute_dominates():
    g = _spmd(4, [Node(0, "fwd", COMPUTE, duration_s=2e-3), _coll(1, nbytes=10_000, deps=(0,))])
    for it in _summary(_run_with(g, _hosts(4), {}))["iterations"]:
        assert it["held_by"] == "compute" and it["critical_ms"]["compute"] == pytest.approx(2.0)


def test_compute_jitter_is_seeded_noise_around_the_traced_time():
    g = _spmd(2, [Node(0, "c", COMPUTE, duration_s=100e-6)])
    a = _run_with(g, _hosts(2), {"compute_jitter": 0.2, "seed": 7}, iterations=20)
    b = _run_with(g, _hosts(2), {"compute_jitter": 0.2, "seed": 7}, iterations=20)
    c = _run_with(g, _hosts(2), {"compute_jitter": 0.2, "seed": 8}, iterations=20)

    def times(recs):
        return [r["end"] - r["start"] for r in recs if r["type"] == "trace_iter"]

    assert times(a) == times(b) and times(a) != times(c)
    mean = sum(times(a)) / len(times(a))
    assert 80e-6 < mean < 120e-6 and max(times(a)) - min(times(a)) > 20e-6


def _overlap_failure_graph(overlap: bool) -> TraceGraph:
    """0.3 ms of compute, then a 400 kB all-reduce (~0.5 ms at 10 Gbps) and 1.5 ms more of
    compute that it overlaps (`overlap`) or that runs before it (no overlap)."""
    a = Node(0, "fwd", COMPUTE, duration_s=300e-6)
    if overlap:
        return _spmd(
            4,
            [
                a,
                _coll(1, nbytes=400_000, deps=(0,)),
                Node(2, "bwd", COMPUTE, (0,), duration_s=1.5e-3),
            ],
        )
    return _spmd(
        4,
        [a, Node(2, "bwd", COMPUTE, (0,), duration_s=1.5e-3), _coll(1, nbytes=400_000, deps=(2,))],
    )


def test_a_failure_that_slows_a_hidden_collective_costs_the_iteration_nothing():
    """From the report's iteration times: h3's link at half its rate doubles the all-reduce;
    hidden behind compute that costs under 5 %, exposed it costs its full time."""
    slow = ("h3", Bottleneck(rate_bps=5e9))

    def worst(overlap: bool, failed: bool) -> float:
        recs = _run_with(
            _overlap_failure_graph(overlap),
            _hosts(4),
            {},
            iterations=3,
            bottleneck=slow if failed else None,
        )
        return max(it["ms"] for it in _summary(recs)["iterations"])

    hidden = worst(True, True) / worst(True, False) - 1
    healthy = worst(False, False)
    exposed = worst(False, True) / healthy - 1
    assert hidden < 0.05, hidden
    # Exposed, the all-reduce's whole extra time shows: ~0.5 ms more on a ~2.3 ms iteration.
    assert exposed > 0.15, exposed

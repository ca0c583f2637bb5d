"""Facts derived from a scenario: traffic matrix, capacity, quick form."""

import copy
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed.scenario import (
    QUICK_FACTOR,
    capacity_mbps,
    flows,
    ideal_completion_s,
    lint,
    quick,
    total_bytes,
    validate,
)

BASE = {
    "name": "t",
    "description": "d",
    "topology": {"spines": 2, "leaves": 2, "hosts_per_leaf": 2, "link_mbps": 40},
    "workload": {"kind": "bulk", "src": "h1", "dst": "h3", "bytes": "20MB"},
    "duration_s": 9,
}


def sc_with(**kw):
    data = copy.deepcopy(BASE)
    for key, value in kw.items():
        if key == "topology":
            data["topology"].update(value)
        else:
            data[key] = value
    return validate(data)


@settings(max_examples=60, deadline=None)
@given(
    leaves=st.integers(1, 5),
    hpl=st.integers(1, 5),
    seed=st.integers(0, 10_000),
)
def test_permutation_is_a_permutation_across_leaves(leaves, hpl, seed):
    if leaves * hpl < 2:
        return
    sc = sc_with(
        topology={"leaves": leaves, "hosts_per_leaf": hpl},
        workload={"kind": "permutation", "bytes": "1MB"},
        seed=seed,
    )
    fl = flows(sc)
    hosts = sc.hosts()
    assert sorted(f.src for f in fl) == sorted(hosts)
    assert sorted(f.dst for f in fl) == sorted(hosts)
    assert all(f.src != f.dst for f in fl)
    leaf = {h: (int(h[1:]) - 1) // hpl for h in hosts}
    if leaves >= 2:
        assert all(leaf[f.src] != leaf[f.dst] for f in fl), "every flow crosses the spines"
    assert flows(sc) == fl, "same seed, same matrix"


def test_permutation_depends_on_seed():
    mats = {
        tuple(
            (f.src, f.dst)
            for f in flows(
                sc_with(
                    topology={"leaves": 3, "hosts_per_leaf": 3},
                    workload={"kind": "permutation", "bytes": "1MB"},
                    seed=s,
                )
            )
        )
        for s in range(10)
    }
    assert len(mats) > 1


def test_incast_alltoall_allreduce_flows():
    inc = sc_with(workload={"kind": "incast", "dst": "h4", "srcs": "all", "bytes": "1MB"})
    assert [(f.src, f.dst) for f in flows(inc)] == [("h1", "h4"), ("h2", "h4"), ("h3", "h4")]
    a2a = sc_with(workload={"kind": "alltoall", "bytes": "1MB"})
    assert len(flows(a2a)) == 12
    ar = sc_with(workload={"kind": "allreduce", "hosts": "all", "bytes": "1MB", "steps": 3})
    fl = flows(ar)
    assert [(f.src, f.dst) for f in fl] == [("h1", "h2"), ("h2", "h3"), ("h3", "h4"), ("h4", "h1")]
    assert fl[0].bytes == math.ceil(2 * 3 * 1_000_000 / 4)  # reduce-scatter + all-gather
    assert total_bytes(ar) == 3 * 4 * fl[0].bytes


def test_capacity_of_healthy_fabrics():
    assert capacity_mbps(sc_with()) == 40  # one flow, host NIC bound
    inc = sc_with(workload={"kind": "incast", "dst": "h4", "srcs": "all", "bytes": "1MB"})
    assert capacity_mbps(inc) == pytest.approx(40)  # receiver NIC shared by 3
    perm = sc_with(workload={"kind": "permutation", "bytes": "1MB"})
    assert capacity_mbps(perm) == 160
    planes = sc_with(topology={"planes": 2, "link_mbps": 20})
    assert capacity_mbps(planes) == 40  # one 20 Mbps NIC per plane


def test_capacity_after_failures():
    perm = sc_with(
        workload={"kind": "permutation", "bytes": "1MB"},
        events=[
            {"at": 1, "action": "switch-down", "node": "spine1"},
            {"at": 2, "action": "switch-up", "node": "spine1"},
            {"at": 3, "action": "degrade", "link": ["spine2", "leaf2"], "mbps": 10},
        ],
    )
    tl = perm.timeline()
    assert capacity_mbps(perm, tl[:1]) == 80  # half the uplinks
    assert capacity_mbps(perm, tl[:2]) == 160
    # leaf2 can now receive 40 + 10 over its spine links, shared by its two incoming flows.
    assert capacity_mbps(perm, tl[:3]) == pytest.approx(4 * 25)
    planes = sc_with(
        topology={"planes": 2, "link_mbps": 20},
        events=[{"at": 1, "action": "plane-down", "plane": 1}],
    )
    assert capacity_mbps(planes, planes.timeline()) == 20
    one_way = sc_with(
        events=[
            {"at": 1, "action": "blackhole", "link": ["h1", "leaf1"], "direction": ["leaf1", "h1"]}
        ]
    )
    assert (
        capacity_mbps(one_way, one_way.timeline()) == 40
    )  # h1 still sends; only its receive side died
    dead = sc_with(events=[{"at": 1, "action": "link-down", "link": ["h1", "leaf1"]}])
    assert capacity_mbps(dead, dead.timeline()) == 0


def test_ideal_completion_and_lint():
    sc = sc_with(events=[{"at": 5.0, "action": "link-down", "link": ["spine1", "leaf2"]}])
    assert ideal_completion_s(sc) == pytest.approx(4.0)
    assert any("hits nothing" in w for w in lint(sc))
    assert (
        lint(sc_with(events=[{"at": 1.0, "action": "link-down", "link": ["spine1", "leaf2"]}]))
        == []
    )
    assert any(w.startswith("duration_s:") for w in lint(sc_with(duration_s=4.5)))
    big = sc_with(
        topology={"link_mbps": 100},
        workload={"kind": "permutation", "bytes": "1MB"},
        emulation={"time_dilation": 1},
    )
    assert any(w.startswith("topology.link_mbps:") for w in lint(big))
    # Under auto (the default) N is chosen for the workload: nothing to warn about.
    auto = sc_with(topology={"link_mbps": 100}, workload={"kind": "permutation", "bytes": "1MB"})
    assert not any(w.startswith("topology.link_mbps:") for w in lint(auto))


def test_quick_scales_consistently():
    sc = sc_with(
        events=[
            {
                "at": 1.0,
                "action": "flap",
                "link": ["leaf1", "spine1"],
                "period_ms": 200,
                "count": 5,
            },
            {"at": 4.0, "action": "loss", "link": ["leaf1", "spine1"], "percent": 1},
        ],
        expect={"delivered_all": True, "max_stall_ms": 50, "max_failover_ms": 80},
    )
    q = quick(sc)
    assert q.duration_s == pytest.approx(9 * QUICK_FACTOR)
    assert q.workload.bytes == 5_000_000
    assert [e.at for e in q.timeline()] == [0.25, 1.0]
    flap = q.timeline()[0]
    assert flap.period_ms == 200 and flap.count == 2  # period kept, cycles scaled (rounded up)
    assert q.expect == sc.expect  # physical limits do not shrink
    assert ideal_completion_s(q) == pytest.approx(ideal_completion_s(sc) * QUICK_FACTOR)
    ar = sc_with(workload={"kind": "allreduce", "bytes": "256KiB", "steps": 30})
    qa = quick(ar)
    assert qa.workload.bytes == 256 * 1024 and qa.workload.steps == 8
    with pytest.raises(ValueError):
        quick(sc, 0)

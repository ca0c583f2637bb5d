"""ECMP collisions of single-path flows against balls into bins (testbed.analysis.ecmp).

The point of the `mixed` ECMP model is that collisions follow balls into bins, as in real
fabrics; the point of these tests is that the measurement can tell: the same metric, under the
old linear-CRC model with fixed source ports, is far off.
"""

from __future__ import annotations

import itertools
import math

import pytest

from endpoint.process_config import EndpointConfig, job_transport_config
from endpoint.transport import Endpoint
from endpoint.workloads import Job
from testbed.analysis.ecmp import (
    balls_into_bins,
    collisions,
    max_min_utilisation,
    single_path_sport,
    total_variation,
    uplink_loads,
)
from testbed.bench.ecmp_bench import format_ecmp_table, permutation_pairs, run_ecmp_bench
from testbed.harness.endpoint_driver import JOB, job_request
from testbed.harness.endpoints import fabric_endpoint_config
from testbed.scenario import validate

SEEDS = range(1, 201)


@pytest.mark.parametrize("n,m", [(0, 3), (1, 1), (3, 3), (4, 2), (4, 4), (5, 3), (2, 6)])
def test_balls_into_bins_is_exact(n: int, m: int) -> None:
    """Against every one of the m^n ways to throw the balls."""
    throws = list(itertools.product(range(m), repeat=n))
    loads = [[t.count(b) for b in range(m)] for t in throws]
    got = balls_into_bins(n, m)
    assert got.empty_fraction == pytest.approx(sum(ld.count(0) for ld in loads) / (m * len(loads)))
    maxima = [max(ld) for ld in loads]
    assert got.max_pmf == pytest.approx([maxima.count(k) / len(loads) for k in range(n + 1)])
    assert got.mean_max == pytest.approx(sum(maxima) / len(loads))
    per_bin = [ld[0] for ld in loads]
    assert got.load_pmf == pytest.approx([per_bin.count(k) / len(loads) for k in range(n + 1)])
    assert math.fsum(got.max_pmf) == pytest.approx(1)


def test_balls_into_bins_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="need n >= 0 and m >= 1"):
        balls_into_bins(3, 0)


def _measure(ecmp_hash: str):
    fab, pairs = permutation_pairs(4, 4, 4, ecmp_hash)
    got = collisions(fab, pairs, SEEDS)
    return got, balls_into_bins(got.balls, got.bins)


def test_a_4x4x4_permutation_collides_as_balls_into_bins() -> None:
    """4 single-path flows per leaf onto 4 uplinks, 200 seeds, pooled over the 4 leaves (800
    throws of 4 balls). The tolerances are 3-5 standard errors of a 200-seed estimate (empty
    fraction ~0.01, mean of the busiest uplink ~0.02, total variation ~0.01)."""
    got, want = _measure("mixed")
    assert (got.balls, got.bins, got.samples) == (4, 4, 800)
    assert want.empty_fraction == pytest.approx((3 / 4) ** 4)
    assert got.empty_fraction == pytest.approx(want.empty_fraction, abs=0.04)
    assert got.mean_max == pytest.approx(want.mean_max, abs=0.1)
    assert total_variation(got.load_pmf, want.load_pmf) < 0.05
    assert total_variation(got.max_pmf, want.max_pmf) < 0.06
    # Collisions cost a one-path transport about a third of a non-blocking fabric.
    assert 0.6 < got.utilisation < 0.75


def test_the_same_metrics_reject_the_linear_crc_with_fixed_ports() -> None:
    """The old model spreads every seed's permutation perfectly: no uplink idle, none shared --
    each metric is many tolerances away from balls into bins, so the test above can fail."""
    got, want = _measure("crc")
    assert got.empty_fraction == 0 and got.mean_max == 1 and got.utilisation == 1
    assert abs(got.empty_fraction - want.empty_fraction) > 7 * 0.04
    assert abs(got.mean_max - want.mean_max) > 10 * 0.1
    assert total_variation(got.load_pmf, want.load_pmf) > 10 * 0.05


@pytest.mark.parametrize("ecmp_hash", ["mixed", "crc"])
def test_the_analysis_uses_the_source_port_the_endpoints_use(ecmp_hash: str) -> None:
    """single_path_sport must be what an endpoint process's job really sends from: the runner's
    start request, the process's transport config, the Job's per-connection config."""
    sc = validate(
        {
            "name": "x",
            "topology": {"spines": 2, "leaves": 2, "hosts_per_leaf": 2, "ecmp_hash": ecmp_hash},
            "transport": "single-path",
            "workload": {"kind": "permutation", "bytes": "1MB"},
            "duration_s": 1,
            "seed": 5,
        }
    )
    fab = sc.fabric()
    config = EndpointConfig.from_obj(fabric_endpoint_config(fab))
    tcfg = job_transport_config(config, job_request(sc, "single-path"))
    spec = job_request(sc, "single-path")["workload"]
    ports = set()
    for host in fab.hosts():
        job = Job(JOB, spec, host, fab.hosts(), Endpoint(tcfg), tcfg)
        for peer, conn in job.connections():
            sport = conn.cfg.ev_values()[conn.cfg.single_path_ev_index]
            assert sport == single_path_sport(fab, sc.seed, host, peer), (host, peer)
            ports.add(sport)
    assert len(ports) > 1 if ecmp_hash == "mixed" else ports == {49152}


def test_uplink_loads_count_every_cross_leaf_flow_once() -> None:
    fab, pairs = permutation_pairs(3, 2, 3, "crc")
    loads = uplink_loads(fab, pairs, seed=1)
    assert set(loads) == {"leaf1", "leaf2"}
    assert all(len(v) == 3 and sum(v) == 3 for v in loads.values())
    # Lab 3's fabric and seed under the structured model: every flow of a leaf on one uplink.
    assert sorted(loads["leaf1"]) == [0, 0, 3]


def test_max_min_utilisation() -> None:
    fab, _ = permutation_pairs(2, 2, 2, "crc")
    apart = [["h1", "leaf1", "spine1", "leaf2", "h3"], ["h2", "leaf1", "spine2", "leaf2", "h4"]]
    shared = [["h1", "leaf1", "spine1", "leaf2", "h3"], ["h2", "leaf1", "spine1", "leaf2", "h4"]]
    assert max_min_utilisation(fab, apart) == pytest.approx(1.0)
    assert max_min_utilisation(fab, shared) == pytest.approx(0.5)
    # A third flow alone on spine2 takes its full share: (1/2 + 1/2 + 1) / 3.
    three = [*shared, ["h3", "leaf2", "spine2", "leaf1", "h1"]]
    assert max_min_utilisation(fab, three) == pytest.approx(2 / 3)
    assert max_min_utilisation(fab, []) == 1.0


def test_collisions_need_one_flow_count_per_leaf() -> None:
    fab, _ = permutation_pairs(2, 2, 2, "mixed")
    with pytest.raises(ValueError, match="every leaf must send the same number"):
        collisions(fab, [("h1", "h3"), ("h2", "h4"), ("h3", "h1")], [1])
    with pytest.raises(ValueError, match="no flow crosses the spines"):
        collisions(fab, [("h1", "h2")], [1])


def test_the_bench_prints_both_models_next_to_the_expectation() -> None:
    d = run_ecmp_bench(quick=True, seeds=5)
    assert d["bench"] == "ecmp" and d["seeds"] == 5
    row = next(r for r in d["results"] if (r["spines"], r["leaves"]) == (4, 4))
    assert row["crc"]["empty_fraction"] == 0
    assert row["expected"]["empty_fraction"] == pytest.approx(0.3164, abs=1e-4)
    assert set(d["hash_cost"]) == {
        "ring path, new flow (_decide)",
        "slow path (Fib.flow_hash)",
        "receive_batch, per frame",
    }
    # The finaliser adds work: on a shared 2-core machine the ratio is ~1.2-2.3 (docs).
    assert all(c["mixed_ns"] > 0 and c["ratio"] > 0.8 for c in d["hash_cost"].values())
    text = format_ecmp_table(d)
    assert "4x4x4" in text and "expected" in text and "mixed" in text and "crc" in text
    assert "slow path (Fib.flow_hash)" in text

"""`testbed bench fabric --quick --json` on real fabrics: the shape, and what must hold.

The goodput figures and the shared / per-node ratios are the bench's to report (a timed test
on a shared 2-core machine cannot hold them); what is asserted here is what any correct run
shows: every workload delivered, nothing faster than the shaped link can carry, the hop
count consistent with three switches on the path, and nothing left behind.
"""

from __future__ import annotations

import json

import pytest

from testbed.bench.endpoint_bench import BLAST_PAYLOAD
from testbed.bench.fabric_bench import WORKLOADS
from testbed.fabric.cleanup import leftovers
from testbed.fabric.switch_layout import LAYOUTS
from tests.conftest import tb

pytestmark = pytest.mark.netns


@pytest.fixture(scope="module")
def bench() -> dict:
    proc = tb("bench", "fabric", "--quick", "--json", timeout=600)
    return json.loads(proc.stdout)


def test_shape(bench) -> None:
    assert bench["bench"] == "fabric" and bench["link_mbps"] == 100
    rows = {(r["layout"], r["workload"]) for r in bench["results"]}
    assert rows == {(lay, w) for lay in LAYOUTS for w in WORKLOADS}
    for r in bench["results"]:
        assert len(r["runs"]) == bench["meta"]["reps"] == 1
    for w in WORKLOADS:
        assert f"{w}_goodput_shared_vs_per_node" in bench["ratio"]


def test_every_workload_delivers_within_the_shaped_rate(bench) -> None:
    for r in bench["results"]:
        assert 0 < r["goodput_mbps"] <= bench["ideal_mbps"][r["workload"]] * 1.03, r
        assert r["vs_link"] == pytest.approx(r["goodput_mbps"] / 100, abs=1e-3)


def test_hops_count_three_switches_per_packet(bench) -> None:
    """The CPU per hop divides by the fabric's forwarded frames: a UDP blast to h3 crosses
    leaf1, a spine and leaf2, so at least three hops per datagram the sink received."""
    seconds = bench["meta"]["scale"]["udp_s"]
    for r in bench["results"]:
        if r["workload"] != "udp":
            continue
        run = r["runs"][0]
        received = run["goodput_mbps"] * 1e6 * seconds / 8 / BLAST_PAYLOAD
        assert run["packet_hops"] >= 3 * received * 0.9, run
        assert run["switch_cpu_us_per_hop"] > 0


def test_nothing_of_the_run_is_left(bench) -> None:
    for name in bench["meta"]["fabrics"].values():
        assert leftovers(name) == []

"""tools/reps_htsim: the generators and the output parser, without the simulator."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = (
    ROOT / "tests" / "fixtures" / "reps_htsim" / "fail_one_switch_after_10us_for_100us__reps.out"
)


def _load():
    spec = importlib.util.spec_from_file_location(
        "reps_glue", ROOT / "tools" / "reps_htsim" / "reps_glue.py"
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules["reps_glue"] = mod
    spec.loader.exec_module(mod)
    return mod


glue = _load()


@pytest.mark.parametrize("seed", [0, 1, 2, 919, 12345])
def test_permutation_is_a_permutation_that_always_leaves_the_leaf(seed):
    flows = glue.permutation(seed)
    assert sorted(s for s, _ in flows) == list(range(32))
    assert sorted(d for _, d in flows) == list(range(32))
    assert all(glue.leaf_of(s) != glue.leaf_of(d) for s, d in flows)


def test_permutation_depends_on_the_seed_only():
    assert glue.permutation(919) == glue.permutation(919)
    assert glue.permutation(919) != glue.permutation(920)


def test_incast_is_eight_distinct_senders_off_the_receivers_leaf():
    flows = glue.incast(919)
    assert len(flows) == 8
    assert {d for _, d in flows} == {0}
    senders = [s for s, _ in flows]
    assert len(set(senders)) == 8
    assert all(glue.leaf_of(s) != glue.leaf_of(0) for s in senders)


def test_cm_text_is_the_forks_format():
    text = glue.cm_text([(0, 5), (5, 0)])
    lines = text.splitlines()
    assert lines[:2] == ["Nodes 32", "Connections 2"]
    assert lines[2] == "0->5 id 1 start 0 size 4194304"
    assert lines[3] == "5->0 id 2 start 0 size 4194304"


def _topo(text):
    tiers, cur = {}, None
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, value = line.split()
        if key == "Tier":
            cur = tiers.setdefault(int(value), {})
        elif cur is None:
            tiers.setdefault("header", {})[key] = int(value)
        else:
            cur[key] = int(value)
    return tiers


@pytest.mark.parametrize("gbps,oversub", [(800, 1), (100, 8)])
def test_topo_is_two_tier_4_spines_8_leaves_4_hosts(gbps, oversub):
    t = _topo(glue.topo_text(gbps))
    assert t["header"] == {"Nodes": 32, "Tiers": 2, "Podsize": 32}
    assert t[0]["Radix_Down"] == 4 and t[0]["Radix_Up"] == 4
    assert t[0]["Downlink_speed_Gbps"] == 800 and t[1]["Downlink_speed_Gbps"] == gbps
    assert t[1]["Radix_Down"] == 8
    assert t[0]["Oversubscribed"] == oversub
    # down bandwidth over up bandwidth of a leaf is the oversubscription
    assert 4 * 800 / (4 * gbps) == oversub
    assert t[0]["Downlink_Latency_ns"] == t[1]["Downlink_Latency_ns"] == 1000


def test_topo_refuses_a_non_integer_oversubscription():
    with pytest.raises(ValueError):
        glue.topo_text(300)


@pytest.mark.parametrize(
    "name,element",
    [
        ("Switch_LowerPod_0", "leaf1"),
        ("Switch_LowerPod_7", "leaf8"),
        ("Switch_UpperPod_3", "spine4"),
        ("Pipe-LS1->US0(0)", "leaf2->spine1"),
        ("Pipe-US2->LS7(0)", "spine3->leaf8"),
        ("Pipe-SRC5->LS1(0)", "h6->leaf2"),
        ("Pipe-LS1->DST5(0)", "leaf2->h6"),
        ("pipe_12(1us)", "leaf1->h1"),
        ("pipe_13(1us)", "h1->leaf1"),
        ("pipe_25(1us)", "h7->leaf2"),
        ("pipe_76(1us)", "spine1->leaf1"),
        ("pipe_83(1us)", "leaf1->spine4"),
        ("pipe_95(1us)", "leaf3->spine2"),
        ("pipe_139(1us)", "leaf8->spine4"),
        ("something_else", "something_else"),
    ],
)
def test_testbed_element_names(name, element):
    assert glue.testbed_element(name) == element


def test_parser_reads_the_fixtures_fcts_and_counters():
    text = FIXTURE.read_text()
    parsed = glue.parse_stdout(text)
    assert parsed["connections"] == 32
    assert len(parsed["flows"]) == 32
    expected = [float(x) for x in re.findall(r"Flow Completion time is ([\d.]+)", text)]
    assert [f["fct_us"] for f in parsed["flows"]] == expected
    first = parsed["flows"][0]
    assert first == {"src": "h25", "dst": "h2", "fct_us": 156.17264, "bytes": 4194304}
    assert all(f["bytes"] == 4194304 for f in parsed["flows"])
    assert parsed["nacks"] == 0
    assert parsed["dropped_packets"] == 11604
    assert parsed["recoveries"] == 1
    assert parsed["failure_events"] == [
        {
            "kind": "fail_switch",
            "htsim_name": "Switch_UpperPod_1",
            "element": "spine2",
            "at_us": 10.0,
            "for_us": pytest.approx(100.0),
        }
    ]
    s = glue.fct_summary([f["fct_us"] for f in parsed["flows"]])
    assert s["max_us"] == max(expected)
    assert min(expected) <= s["median_us"] <= s["p99_us"] <= s["max_us"]


def test_pipe_ids_cover_every_link_once():
    names = [glue.pipe_by_id(i) for i in range(12, 140)]
    assert len(set(names)) == 128
    assert sum("spine" in n for n in names) == 64
    for bad in (0, 11, 140):
        with pytest.raises(ValueError):
            glue.pipe_by_id(bad)


def test_parser_sums_nacks_and_reads_other_failure_events():
    text = "\n".join(
        [
            "Total NACKs: 3",
            "Total NACKs: 4",
            "Failed a new Cable name: Pipe-LS2->US1(0) at 0 for 123.000000 seconds",
            "New Switch degraded at:5000Switch_name: Switch_LowerPod_4 bitrate now 1000bps",
            "Degraded a new Cable name: Pipe-US0->LS3(0)",
            "Periodically failed a new Switch name: Switch_UpperPod_0 at 7 for 1.0 seconds",
        ]
    )
    parsed = glue.parse_stdout(text)
    assert parsed["nacks"] == 7
    assert parsed["dropped_packets"] is None
    assert [(e["kind"], e["element"]) for e in parsed["failure_events"]] == [
        ("fail_cable", "leaf3->spine2"),
        ("degrade_switch", "leaf5"),
        ("degrade_cable", "spine1->leaf4"),
        ("periodic_switch", "spine1"),
    ]
    assert parsed["failure_events"][1]["at_us"] == pytest.approx(0.005)


def test_percentile_is_nearest_rank():
    values = list(range(1, 101))
    assert glue.percentile(values, 99) == 99
    assert glue.percentile(values, 50) == 50
    assert glue.percentile([7.0], 99) == 7.0
    assert glue.fct_summary([])["median_us"] is None


def test_out_of_order_metrics_follow_the_authors_definition():
    assert glue.out_of_order([0, 1, 2, 3]) == {
        "ooo": 0,
        "arrivals": 4,
        "ratio": 0.0,
        "max_distance": 0,
    }
    # 2 arrives first, then 0 and 1 below the max; 1 arrives at position 2
    r = glue.out_of_order([2, 0, 1, 3])
    assert r["ooo"] == 2 and r["arrivals"] == 4 and r["ratio"] == 0.5
    assert r["max_distance"] == 1
    assert glue.out_of_order([5, 0])["max_distance"] == 1
    assert glue.out_of_order([])["ratio"] == 0.0


def test_every_failure_mode_but_the_baseline_names_a_fork_input_file():
    assert "none" in glue.FAILURE_MODES
    for mode in glue.FAILURE_MODES:
        assert re.fullmatch(r"[0-9a-z_-]+", mode)
    assert set(glue.BALANCERS) >= {"reps", "spraying"}

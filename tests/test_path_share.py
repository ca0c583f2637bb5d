"""testbed.analysis.path_share: how evenly a run's bytes spread over the paths, from the
switches' port counters; and its plot."""

from __future__ import annotations

from pathlib import Path

from testbed.analysis.path_share import (
    MIN_BYTES,
    max_deviation_pct,
    median_deviation_pct,
    path_shares,
    summary_entry,
)
from testbed.analysis.plots import plot_path_share
from topologies import leaf_spine

FAB = leaf_spine(spines=4, leaves=2, hosts_per_leaf=2)


def counters(up: dict[str, list[int]], down: dict[str, list[int]]) -> dict:
    """Switch counters with each leaf's uplinks sending `up[leaf][k]` bytes towards spine k+1,
    and spine k+1 sending `down[leaf][k]` towards the leaf; host ports busy too (ignored)."""
    c: dict = {sw: {"ports": {}} for sw in FAB.switches()}
    for leaf in ("leaf1", "leaf2"):
        for intf in FAB.interfaces[leaf]:
            if FAB.nodes[intf.peer_node].kind == "host":
                c[leaf]["ports"][intf.name] = {"tx_bytes": 10**9}
                continue
            k = int(intf.peer_node.removeprefix("spine")) - 1
            c[leaf]["ports"][intf.name] = {"tx_bytes": up.get(leaf, [0] * 4)[k]}
            c[intf.peer_node]["ports"][intf.peer_name] = {"tx_bytes": down.get(leaf, [0] * 4)[k]}
    return c


def test_even_spread_has_no_deviation():
    c = counters({"leaf1": [10**6] * 4, "leaf2": [10**6] * 4}, {"leaf2": [2 * 10**6] * 4})
    s = path_shares(FAB, c)
    assert s["uplinks"] == {"leaf1": dict.fromkeys(("spine1", "spine2", "spine3", "spine4"), 0.25),
                            "leaf2": dict.fromkeys(("spine1", "spine2", "spine3", "spine4"), 0.25)}  # fmt: skip
    assert list(s["downlinks"]) == ["leaf2"]  # leaf1 received nothing: left out
    assert max_deviation_pct(s) == 0.0


def test_a_hashed_collision_shows_as_the_worst_link():
    # leaf1 put 3 of its 8 flows' bytes on spine1, 1 on spine4: shares 3/8, 2/8, 2/8, 1/8.
    c = counters({"leaf1": [3 * 10**6, 2 * 10**6, 2 * 10**6, 10**6]}, {})
    s = path_shares(FAB, c)
    assert s["uplinks"]["leaf1"]["spine1"] == 0.375
    assert max_deviation_pct(s) == 50.0  # 0.375 is 1.5x the equal 0.25 (and 0.125 0.5x)


def test_one_leaf_off_equal_moves_the_worst_not_the_median():
    # leaf1's uplink to spine1 carried 20 % (the balancer moved weight off a trimming path);
    # leaf2's uplinks and both leaves' downlinks are even but for 2 %.
    c = counters(
        {"leaf1": [200, 270, 265, 265], "leaf2": [250, 245, 250, 255]},
        {"leaf1": [255, 250, 245, 250], "leaf2": [250, 250, 250, 250]},
    )
    c = {sw: {"ports": {k: {"tx_bytes": v["tx_bytes"] * 10**4} for k, v in d["ports"].items()}}
         for sw, d in c.items()}  # fmt: skip
    s = path_shares(FAB, c)
    assert max_deviation_pct(s) == 20.0
    # per leaf and direction: 20 (leaf1 up), 2 (leaf2 up), 2 (leaf1 down), 0 (leaf2 down)
    assert median_deviation_pct(s) == 2.0
    assert median_deviation_pct({"uplinks": {}, "downlinks": {}}) is None


def test_a_leaf_with_next_to_no_traffic_is_left_out():
    c = counters({"leaf1": [MIN_BYTES // 8] * 4}, {})
    assert path_shares(FAB, c) == {"uplinks": {}, "downlinks": {}}
    assert max_deviation_pct(path_shares(FAB, c)) is None


def test_summary_entry_rounds_and_carries_the_worst_deviation():
    c = counters({"leaf1": [1_000_000, 1_000_000, 1_100_000, 900_000]}, {})
    e = summary_entry(FAB, c)
    assert e["max_deviation_pct"] == 10.0 and e["median_deviation_pct"] == 10.0
    assert e["uplinks"]["leaf1"]["spine3"] == 0.275 and e["downlinks"] == {}


def test_plot_path_share_draws_both_directions_for_every_transport(tmp_path: Path):
    even = path_shares(FAB, counters({"leaf1": [10**6] * 4}, {"leaf2": [10**6] * 4}))
    skew = path_shares(FAB, counters({"leaf1": [3 * 10**6, 2 * 10**6, 2 * 10**6, 10**6]},
                                     {"leaf2": [10**6, 10**6, 3 * 10**6, 10**6]}))  # fmt: skip
    out = plot_path_share({"mrc": even, "mrc-hashed": skew}, tmp_path / "path_share.png")
    assert out.exists() and out.stat().st_size > 10_000


def test_plot_path_share_takes_summary_entries_as_the_runner_writes_them(tmp_path: Path):
    """summary.json's path_share carries max_deviation_pct beside the shares."""
    entry = summary_entry(FAB, counters({"leaf1": [10**6] * 4}, {"leaf2": [10**6] * 4}))
    assert entry["max_deviation_pct"] == 0.0
    out = plot_path_share({"mrc": entry}, tmp_path / "p.png")
    assert out.exists()

"""Lab 3 checks: your spray.py on made-up traffic and arrivals, and -- once capture.py has run --
on the real runs in results/: your link loads must spread over leaf uplinks as the switches'
own counters say, and your reorder figures must match the definition on the real capture."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest

from contracts.ports import ROCEV2_UDP_PORT
from testbed.fabric.paths import predict_path
from testbed.labs.grading import load_student
from testbed.scenario import load_scenario

LAB = Path(__file__).resolve().parent.parent
RESULTS = LAB / "results"


@pytest.fixture(scope="module")
def spray():
    return load_student("spray")


PATHS = {
    ("h1", "h4", 1): ["h1", "leaf1", "spine1", "leaf2", "h4"],
    ("h1", "h4", 2): ["h1", "leaf1", "spine2", "leaf2", "h4"],
    ("h2", "h3", 1): ["h2", "leaf1", "spine1", "leaf2", "h3"],
}


def test_link_loads_sums_bytes_along_each_path(spray) -> None:
    loads = spray.link_loads({("h1", "h4", 1): 100, ("h1", "h4", 2): 50, ("h2", "h3", 1): 7},
                             lambda s, d, e: PATHS[(s, d, e)])  # fmt: skip
    assert loads[("leaf1", "spine1")] == 107
    assert loads[("leaf1", "spine2")] == 50
    assert loads[("spine1", "leaf2")] == 107
    assert loads[("h1", "leaf1")] == 150
    assert loads[("leaf2", "h3")] == 7
    assert ("spine2", "leaf1") not in loads, "direction matters: nothing went spine2 -> leaf1"
    assert ("leaf2", "spine1") not in loads
    assert len(loads) == 8


def test_link_loads_of_nothing_is_empty(spray) -> None:
    assert spray.link_loads({}, lambda s, d, e: PATHS[(s, d, e)]) == {}


@pytest.mark.parametrize("values,want", [
    ([3, 0, 0], 3.0), ([1, 1, 1], 1.0), ([2, 1, 0], 2.0), ([5], 1.0), ([0, 0], 1.0), ([4, 2], 4 / 3),
])  # fmt: skip
def test_imbalance(spray, values, want) -> None:
    assert spray.imbalance(values) == pytest.approx(want)


def test_bottleneck_time(spray) -> None:
    loads = {("leaf1", "spine1"): 2_500_000, ("leaf1", "spine2"): 10_000}
    assert spray.bottleneck_time(loads, 10) == pytest.approx(2.0)
    assert spray.bottleneck_time(loads, 20) == pytest.approx(1.0)
    assert spray.bottleneck_time({}, 10) == 0


@pytest.mark.parametrize("seqs,want", [
    ([0, 1, 2, 3], (0, 0, 0)),                # in order: nothing to hold
    ([1, 0, 2, 3], (1, 1, 2)),
    ([0, 3, 1, 2, 4], (2, 2, 3)),
    ([0, 1, 1, 2], (0, 0, 0)),                # a duplicate is not late
    ([0, 2, 1, 2, 3], (1, 1, 2)),             # nor is a resend of one already there
    ([5, 4, 3, 2, 1, 0], (5, 5, 6)),
    ([], (0, 0, 0)),
])  # fmt: skip
def test_reorder_small_cases(spray, seqs, want) -> None:
    got = spray.reorder(seqs)
    assert (got["late"], got["max_distance"], got["window"]) == want, f"reorder({seqs})"


def _reference(seqs: list[int]) -> tuple[int, int, int]:
    """The definition, computed the slow way (quadratic): an independent statement of it."""
    first = []
    for s in seqs:
        if s not in first:
            first.append(s)
    late = max_distance = window = 0
    for i, s in enumerate(first):
        before = first[:i]
        highest = max(before + [s])
        if before and max(before) > s:
            late += 1
            max_distance = max(max_distance, max(before) - s)
        have = set(first[: i + 1])
        missing = next(n for n in range(len(have) + 1) if n not in have)
        window = max(window, highest + 1 - missing)
    return late, max_distance, window


def test_reorder_matches_the_definition_on_sprayed_arrivals(spray) -> None:
    rng = random.Random(3)
    for _ in range(40):
        n = rng.randrange(5, 120)
        # each packet delayed by a random path delay: sprayed packets overtake each other
        arrival = sorted(range(n), key=lambda i: i + rng.choice([0, 0, 0.5, 2.5, 7.5]))
        resends = [rng.randrange(n) for _ in range(rng.randrange(3))]
        seqs = arrival + resends
        got = spray.reorder(seqs)
        assert (got["late"], got["max_distance"], got["window"]) == _reference(seqs), seqs


def _runs() -> list[int]:
    return sorted(int(p.stem[4:-2]) for p in RESULTS.glob("run-*ev.json"))


def _need_runs() -> list[int]:
    runs = _runs()
    if not runs:
        pytest.skip("no captures in results/ yet: step 3 of the README (capture.py, needs root)")
    return runs


def test_your_loads_spread_like_the_switch_counters(spray) -> None:
    sc = load_scenario(LAB / "permutation.yaml")
    fab = sc.fabric()
    for evs in _need_runs():
        raw = json.loads((RESULTS / f"evbytes-{evs}ev.json").read_text())
        ev_bytes = {(k.split(",")[0], k.split(",")[1], int(k.split(",")[2])): v
                    for k, v in raw.items()}  # fmt: skip
        loads = spray.link_loads(
            ev_bytes, lambda s, d, e: predict_path(fab, s, d, e, ROCEV2_UDP_PORT, seed=sc.seed)
        )
        counters = json.loads((RESULTS / f"counters-{evs}ev.json").read_text())
        for leaf in ("leaf1", "leaf2"):
            ups = [i for i in fab.interfaces[leaf] if i.peer_node.startswith("spine")]
            mine = [loads.get((leaf, i.peer_node), 0) for i in ups]
            theirs = [counters[leaf]["ports"][i.name]["tx_bytes"] for i in ups]
            for m, t in zip(mine, theirs, strict=True):
                share_m, share_t = m / max(sum(mine), 1), t / max(sum(theirs), 1)
                assert share_m == pytest.approx(share_t, abs=0.05), (
                    f"{evs} EV(s), {leaf}: your uplink shares {mine} vs the counters' {theirs}"
                )
            assert spray.imbalance(mine) == pytest.approx(spray.imbalance(theirs), abs=0.15)


def test_your_reorder_on_the_real_capture(spray) -> None:
    for evs in _need_runs():
        with open(RESULTS / f"arrivals-{evs}ev.csv") as f:
            seqs = [int(r["seq"]) for r in csv.DictReader(f) if r["trimmed"] == "0"]
        got = spray.reorder(seqs)
        assert (got["late"], got["max_distance"], got["window"]) == _reference(seqs), (
            f"arrivals-{evs}ev.csv"
        )

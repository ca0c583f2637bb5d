"""Lab 5 checks: your steps.py against the definitions the scenario runner uses, on made-up
ranks and, once you have run the lab's scenarios, on the real runs in results/."""

from __future__ import annotations

import csv
import json
import math
import random
from pathlib import Path

import pytest

from testbed.analysis.metrics import percentiles
from testbed.labs.grading import load_student

LAB = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def steps():
    return load_student("steps")


def _ranks(rng: random.Random, n_steps: int, ranks: int) -> tuple[list[dict], list[tuple]]:
    """Made-up rank records, shuffled, and the (start, end) each step must come out as."""
    records, want = [], []
    t = 100.0
    for k in range(n_steps):
        starts = [t + rng.uniform(0, 0.002) for _ in range(ranks)]
        ends = [s + rng.uniform(0.15, 0.5) for s in starts]
        records += [
            {"step": k, "rank": r, "start": s, "end": e}
            for r, (s, e) in enumerate(zip(starts, ends, strict=True))
        ]
        want.append((min(starts), max(ends)))
        t = max(ends) + rng.uniform(0, 0.003)
    rng.shuffle(records)
    return records, want


def test_step_times_spans_first_start_to_last_end(steps) -> None:
    records, want = _ranks(random.Random(5), n_steps=12, ranks=4)
    assert steps.step_times(records) == want


def test_step_times_of_one_rank_is_its_own(steps) -> None:
    records = [{"step": 1, "rank": 0, "start": 2.0, "end": 2.5},
               {"step": 0, "rank": 0, "start": 1.0, "end": 1.9}]  # fmt: skip
    assert steps.step_times(records) == [(1.0, 1.9), (2.0, 2.5)]


def test_step_time_is_set_by_the_slowest_rank(steps) -> None:
    records = [{"step": 0, "rank": r, "start": 10.0, "end": 10.2} for r in range(8)]
    records[5]["end"] = 11.0  # one late rank
    ((start, end),) = steps.step_times(records)
    assert (start, end) == (10.0, 11.0)


@pytest.mark.parametrize("values,p,want", [
    ([4, 1, 3, 2], 50, 2), ([4, 1, 3, 2], 100, 4), ([4, 1, 3, 2], 99, 4), ([4, 1, 3, 2], 25, 1),
    ([7], 50, 7), ([5, 1, 9], 50, 5), (list(range(1, 101)), 99, 99), (list(range(1, 101)), 50, 50),
])  # fmt: skip
def test_percentile_nearest_rank(steps, values, p, want) -> None:
    assert steps.percentile(values, p) == want


def test_percentile_matches_the_runner(steps) -> None:
    rng = random.Random(50)
    for n in (1, 2, 3, 10, 29, 30, 31, 200):
        values = [rng.uniform(100, 600) for _ in range(n)]
        ref = percentiles(values)
        for p in (50, 99, 100):
            assert steps.percentile(values, p) == ref[f"p{p}"], f"P{p} of {n} values"


def test_during_finds_overlapping_steps(steps) -> None:
    s = [(0.0, 1.0), (1.0, 2.0), (2.0, 3.0), (3.0, 4.0)]
    assert steps.during(s, 1.5, 2.5) == [1, 2]
    assert steps.during(s, 1.0, 2.0) == [1], "touching at an end point is not overlapping"
    assert steps.during(s, 0.0, math.inf) == [0, 1, 2, 3]
    assert steps.during(s, 5.0, 6.0) == []


@pytest.mark.parametrize("loss,packets,want", [
    (1, 281, 1 - 0.99**281), (1, 1, 0.01), (0, 500, 0.0), (100, 3, 1.0), (0.1, 1000, 1 - 0.999**1000),
])  # fmt: skip
def test_p_step_hit(steps, loss, packets, want) -> None:
    assert steps.p_step_hit(loss, packets) == pytest.approx(want, rel=1e-9, abs=1e-12)


def _result_folders() -> list[Path]:
    return sorted(p.parent for p in LAB.glob("results/*/summary.json"))


def test_your_step_times_match_the_runs_in_results(steps) -> None:
    folders = [f for f in _result_folders() if list(f.glob("raw/*/job_status.json"))]
    if not folders:
        pytest.skip("no runs in results/ yet: `sudo testbed lab check 5` or the README's step 2")
    for folder in folders:
        summary = json.loads((folder / "summary.json").read_text())
        ref: dict[str, list[float]] = {}
        with open(folder / "step_times.csv") as f:
            for row in csv.DictReader(f):
                if row.get("finished", "1") == "1":  # an unfinished step has no step_ms
                    ref.setdefault(row["transport"], []).append(float(row["step_ms"]))
        for status in folder.glob("raw/*/job_status.json"):
            transport = status.parent.name
            st = json.loads(status.read_text())
            records = [r for host in st.values() for r in host.get("rank_steps", [])]
            ms = [(e - s) * 1000 for s, e in steps.step_times(records)]
            where = f"{folder.name} [{transport}]"
            assert ms == pytest.approx(ref[transport], abs=0.01), f"{where}: step times"
            want = summary["transports"][transport]["step_time_ms"]
            for p in (50, 99, 100):
                got = steps.percentile(ms, p)
                assert got == pytest.approx(want[f"p{p}"], abs=0.01), f"{where}: P{p}"

"""Repetitions without a fabric: the statistics (intervals of the median, the judged statistic,
invalid runs left out), the seeds a run uses, and the aggregate folder a repeated run writes
(from fake runs: the runner itself is exercised in tests/test_repetitions_netns.py)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from types import SimpleNamespace

import pytest

from testbed.analysis.aggregate import (
    aggregate,
    describe,
    judge,
    median_ci,
    repeated_valid,
    transport_stats,
)
from testbed.experiment import repetitions
from testbed.experiment.errors import RunError
from testbed.experiment.runner import Outcome, Progress
from testbed.scenario import Expect, ScenarioError, quick, validate
from tests.test_scenario_validation import BASE as _BASE

BASE = {k: v for k, v in _BASE.items() if k != "seed"}


def entry(
    goodput: float = 90.0,
    stall: float | None = 5.0,
    valid: bool = True,
    delivered: bool = True,
    failover: float | None = 1.0,
) -> dict:
    """A transport's entry of one run's summary.json, as measure()/build_summary write it."""
    return {
        "goodput_mbps": goodput,
        "bottleneck_mbps": 100.0,
        "max_stall_ms": stall,
        "failover_ms": failover,
        "lost_bytes": 0 if delivered else 1000,
        "retransmits": {"loss": 3, "rto": 1},
        "trims": 2,
        "step_time_ms": {"p50": None, "p99": None, "p100": None},
        "emulation": {"valid": valid},
        "expectations": {
            "passed": True,
            "checks": [
                {"name": "delivered_all", "limit": True, "value": delivered, "passed": delivered},
                {"name": "max_stall_ms", "limit": 50.0, "value": stall, "passed": True},
                {"name": "min_goodput_fraction", "limit": 0.8, "value": goodput / 100},
            ],
        },
    }


# --------------------------------------------------------------------------- statistics


def test_the_median_interval_is_exact_and_distribution_free():
    values = [9.0, 3.0, 4.0, 12.0, 5.0, 7.0, 6.0, 8.0, 11.0, 10.0]
    lo, hi, cover = median_ci(values)
    assert (lo, hi) == (4.0, 11.0)  # the 2nd smallest and the 2nd largest of 10
    assert cover == pytest.approx(1 - 2 * 11 / 1024)  # 97.9 %
    assert median_ci(values, confidence=0.99) == (3.0, 12.0, pytest.approx(1 - 2 / 1024))


@pytest.mark.parametrize(("n", "coverage"), [(1, 0.0), (2, 0.5), (3, 0.75), (5, 0.9375)])
def test_too_few_runs_give_their_range_with_its_real_coverage(n, coverage):
    values = [float(v) for v in range(n, 0, -1)]
    assert median_ci(values) == (1.0, float(n), pytest.approx(coverage))


def test_the_interval_covers_the_median_as_often_as_it_says():
    rng = random.Random(42)
    for n in (6, 10, 25):
        hits = 0
        for _ in range(2000):
            lo, hi, cover = median_ci([rng.expovariate(1.0) for _ in range(n)])
            hits += lo <= math.log(2) <= hi  # the exponential's true median
        assert cover >= 0.95 and abs(hits / 2000 - cover) < 0.03, (n, hits, cover)


def test_the_interval_shrinks_with_more_runs_at_the_same_coverage():
    rng = random.Random(7)
    widths = {}
    for n in (10, 40):
        w = [
            (lambda c: c[1] - c[0])(median_ci([rng.gauss(50, 10) for _ in range(n)]))
            for _ in range(200)
        ]
        widths[n] = sum(w) / len(w)
    assert widths[10] > 1.5 * widths[40]
    with pytest.raises(ValueError):
        median_ci([])


def test_describe_keeps_unmeasured_runs_visible_but_out_of_the_statistic():
    d = describe([1.0, None, 3.0])
    assert d["median"] == 2.0 and d["n"] == 2 and d["values"] == [1.0, None, 3.0]
    assert describe([None])["median"] is None


def test_invalid_runs_are_left_out_and_counted():
    entries = [entry(goodput=90), entry(goodput=10, valid=False), entry(goodput=80)]
    s = transport_stats(entries)
    assert (s["runs"], s["valid_runs"], s["invalid_runs"]) == (3, 2, 1)
    assert s["metrics"]["goodput_mbps"]["median"] == 85.0
    assert s["metrics"]["goodput_mbps"]["values"] == [90.0, 80.0]
    assert s["metrics"]["retransmits"]["median"] == 4.0  # every kind summed
    assert s["metrics"]["goodput_fraction"]["median"] == 0.85
    assert "step_p100_ms" not in s["metrics"]  # no run measured it


@pytest.mark.parametrize(
    ("statistic", "stall_passes", "goodput_passes"),
    [("median", True, True), ("worst", False, False)],
)
def test_expectations_are_judged_on_the_stated_statistic(statistic, stall_passes, goodput_passes):
    entries = [entry(stall=10, goodput=90), entry(stall=70, goodput=70), entry(stall=20)]
    expect = Expect(
        statistic=statistic, max_stall_ms=50, min_goodput_fraction=0.8, delivered_all=True
    )
    result = judge(expect, entries)
    checks = {c["name"]: c for c in result["checks"]}
    assert result["statistic"] == statistic and result["over_valid_runs"] == 3
    assert checks["max_stall_ms"]["passed"] is stall_passes
    assert checks["max_stall_ms"]["value"] == (20 if statistic == "median" else 70)
    assert checks["min_goodput_fraction"]["passed"] is goodput_passes
    assert result["passed"] is (stall_passes and goodput_passes)


def test_losing_data_in_any_valid_run_fails_delivered_all_even_on_the_median():
    entries = [entry(), entry(delivered=False), entry()]
    result = judge(Expect(delivered_all=True), entries)
    assert not result["passed"]
    # ...but not when that run was invalid: its numbers are the machine's.
    entries[1]["emulation"]["valid"] = False
    assert judge(Expect(delivered_all=True), entries)["passed"]


def test_an_unmeasured_value_counts_as_failing():
    entries = [entry(stall=None), entry(stall=None), entry(stall=1)]
    result = judge(Expect(max_stall_ms=50), entries)
    assert not result["passed"]  # the median is "never recovered"


def test_no_valid_run_judges_nothing_and_fails():
    entries = [entry(valid=False), entry(valid=False)]
    result = judge(Expect(max_stall_ms=50), entries)
    assert not result["passed"] and result["note"].startswith("no valid repetition")


def test_a_repeated_run_is_valid_only_when_half_its_runs_per_transport_are():
    leaves = [
        {"transports": {"mrc": entry(), "tcp": entry(valid=False)}},
        {"transports": {"mrc": entry(valid=False), "tcp": entry(valid=False)}},
    ]
    block = aggregate(leaves, Expect(), ["mrc", "tcp"])
    valid, reasons = repeated_valid(block)
    assert not valid and reasons == ["tcp: 0 of 2 repetitions valid"]
    assert repeated_valid({"mrc": block["mrc"]}) == (True, [])


# --------------------------------------------------------------------------- seeds


def test_seeds_come_from_the_file_or_from_seed_on():
    sc = validate(dict(BASE, seed=7))
    assert repetitions.seeds_for(sc, None) == [7]
    assert repetitions.seeds_for(sc, 3) == [7, 8, 9]
    listed = validate(dict(BASE, seeds=[11, 5, 2]))
    assert listed.seed == 11 and listed.run_seeds == [11, 5, 2]
    assert repetitions.seeds_for(listed, None) == [11, 5, 2]
    assert repetitions.seeds_for(listed, 3) == [11, 5, 2]
    with pytest.raises(RunError, match="lists 3 seeds"):
        repetitions.seeds_for(listed, 5)
    with pytest.raises(RunError, match="--repeat"):
        repetitions.seeds_for(sc, 0)


def test_seeds_in_the_file_are_checked():
    with pytest.raises(ScenarioError, match="not both"):
        validate(dict(BASE, seed=3, seeds=[1, 2]))
    with pytest.raises(ScenarioError, match="listed twice"):
        validate(dict(BASE, seeds=[1, 2, 1]))
    with pytest.raises(ScenarioError, match="expect.statistic"):
        validate(dict(BASE, expect={"statistic": "mean"}))
    sc = validate(dict(BASE, seeds=[4, 5]))
    assert quick(sc).run_seeds == [4, 5]  # a dumped scenario validates again


# --------------------------------------------------------------------------- the folder


def fake_outcome(out: Path, goodputs: dict[str, float], valid: bool = True) -> Outcome:
    """What run_scenario returns for one repetition (nothing is built)."""
    summary = {"transports": {t: entry(goodput=g, valid=valid) for t, g in goodputs.items()}}
    summary["emulation"] = {"valid": valid, "time_dilation": 2.0}
    # The aggregate reads only the goodput series of a run's metrics.
    times = [0.01 * i for i in range(50)]
    metrics = {
        t: SimpleNamespace(bin_times=times, goodput_bins=[g] * 50) for t, g in goodputs.items()
    }
    out.mkdir(parents=True)
    return Outcome(summary, metrics, out, {}, list(goodputs))


def test_the_aggregate_folder_has_summary_report_and_plots(tmp_path, monkeypatch):
    sc = validate(dict(BASE, seeds=[1, 2, 3], expect={"min_goodput_fraction": 0.6}))
    made = iter(
        [
            fake_outcome(tmp_path / "rep-01", {"mrc": 90, "tcp": 60}),
            fake_outcome(tmp_path / "rep-02", {"mrc": 10, "tcp": 10}, valid=False),
            fake_outcome(tmp_path / "rep-03", {"mrc": 80, "tcp": 40}),
        ]
    )
    seen = []

    def run_scenario(sc_i, transports, out, **kw):
        seen.append((sc_i.seed, sc_i.seeds, out.name, kw["annotate"]["repetition"]))
        return next(made)

    monkeypatch.setattr(repetitions, "run_scenario", run_scenario)
    o = repetitions.run_repeated(
        sc, [1, 2, 3], ["mrc", "tcp"], tmp_path, progress=Progress(stream=open("/dev/null", "w"))
    )
    assert [s[:3] for s in seen] == [(1, None, "rep-01"), (2, None, "rep-02"), (3, None, "rep-03")]
    assert seen[1][3] == {"index": 2, "of": 3, "seed": 2}
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary == json.loads(json.dumps(o.summary))
    assert summary["repetitions"]["seeds"] == [1, 2, 3]
    assert [r["valid"] for r in summary["repetitions"]["runs"]] == [True, False, True]
    mrc = summary["transports"]["mrc"]
    assert mrc["valid_runs"] == 2 and mrc["metrics"]["goodput_mbps"]["median"] == 85.0
    tcp = summary["transports"]["tcp"]
    assert tcp["expectations"]["passed"] is False  # the median fraction of 0.6 and 0.4
    assert summary["provenance"]["seeds"] == [1, 2, 3]
    report = (tmp_path / "report.md").read_text()
    assert "85 [80, 90, 50%] (n=2)" in report and "rep-02" in report and "**no**" in report
    assert (tmp_path / "goodput_band.png").stat().st_size > 5000
    assert (tmp_path / "metrics_ci.png").stat().st_size > 5000
    assert o.valid and not o.passed

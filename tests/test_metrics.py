"""Metric definitions on synthetic time series whose right answers are known."""

import json
import math

import pytest

from testbed.analysis.metrics import (
    AppliedEvent,
    Emulation,
    Message,
    TransportRun,
    build_summary,
    check_expectations,
    emulation_warning,
    failover,
    flow_entries,
    goodput_series,
    max_stall_ms,
    measure,
    outstanding_intervals,
    percentiles,
    step_rhythm_s,
    step_times_ms,
)
from testbed.harness.records import FlowRecord
from testbed.scenario import Expect, validate

MBPS_40_PER_MS = 40e6 / 8 / 1000  # bytes per ms at 40 Mbps


def deliveries(rate_of_t, start=0.0, end=5.0, step=0.001):
    """1 ms delivery samples with rate_of_t(t) in Mbps."""
    out, t = [], start
    while t < end - 1e-12:
        t += step
        n = int(rate_of_t(t) * 1e6 / 8 * step)
        if n:
            out.append((round(t, 6), n))
    return out


def series(rate_of_t, end=5.0):
    return goodput_series(deliveries(rate_of_t, end=end), end)


# ------------------------------------------------------------------ goodput and stalls


def test_goodput_series_bins_10ms():
    times, mbps = goodput_series([(0.005, 1250), (0.0151, 2500), (0.0199, 2500), (9.0, 1)], 0.03)
    assert times == pytest.approx([0.0, 0.01, 0.02])
    assert mbps == pytest.approx([1.0, 4.0, 0.0])


def test_outstanding_intervals_merge_and_clip():
    msgs = [
        Message(0.0, 1, 1.0),
        Message(0.5, 1, 2.0),
        Message(3.0, 1, None),
        Message(9.0, 1, None),
    ]
    assert outstanding_intervals(msgs, end_s=4.0) == [(0.0, 2.0), (3.0, 4.0)]


def test_stall_is_the_longest_gap_while_outstanding():
    times = [i / 1000 for i in range(1, 1000)]
    times = [t for t in times if not 0.4 < t < 0.431]  # a 31 ms hole
    assert max_stall_ms(times, [(0.0, 1.0)]) == pytest.approx(31, abs=0.01)


def test_stall_ignores_idle_time_and_counts_a_slow_start():
    # Two messages with a second of idleness between them: not a stall.
    times = [0.1 + i / 1000 for i in range(100)] + [1.5 + i / 1000 for i in range(100)]
    assert max_stall_ms(times, [(0.1, 0.2), (1.5, 1.6)]) == pytest.approx(1, abs=0.01)
    # Posted at 0 but nothing arrives before 0.2 s: a 200 ms stall.
    assert max_stall_ms([0.2, 0.201], [(0.0, 0.201)]) == pytest.approx(200)
    # Never delivered anything while outstanding: the whole interval.
    assert max_stall_ms([], [(1.0, 3.0)]) == pytest.approx(2000)


# ------------------------------------------------------------------ failover


def fo(rate_of_t, fail_at, end=5.0, done=None, **kw):
    times, mbps = series(rate_of_t, end)
    outstanding = [(0.0, done if done is not None else end)]
    return failover(times, mbps, outstanding, [fail_at], complete=done is not None, **kw)[0]


def test_failover_of_a_short_outage():
    f = fo(lambda t: 0 if 2.0 <= t < 2.03 else 40, 2.0)
    assert f.status == "recovered"
    assert f.ms == pytest.approx(30, abs=10)


def test_failover_zero_when_nothing_dips():
    f = fo(lambda t: 40, 2.0)
    assert f.status == "recovered" and f.ms == 0


def test_failover_never_recovered_while_data_outstanding():
    f = fo(lambda t: 40 if t < 2.0 else 5, 2.0)
    assert f.status == "not-recovered" and f.ms is None


def test_failover_slow_partial_recovery():
    f = fo(lambda t: 40 if t < 2.0 else (20 if t < 2.2 else 40), 2.0)
    assert f.ms == pytest.approx(200, abs=10)


def test_failover_not_fooled_by_a_burst_of_held_back_bytes():
    # 500 ms outage, then a 10 ms burst at 8x the rate, then another 300 ms of nothing.
    def rate(t):
        if 2.0 <= t < 2.5:
            return 0
        if 2.5 <= t < 2.51:
            return 320
        if 2.51 <= t < 2.81:
            return 0
        return 40

    f = fo(rate, 2.0)
    assert f.ms == pytest.approx(810, abs=10)


def test_failover_target_follows_lost_capacity():
    half = lambda t: 40 if t < 2.0 else 20  # noqa: E731 - one of two planes gone
    assert fo(half, 2.0).status == "not-recovered"
    f = fo(half, 2.0, capacity_ratios=[0.5])
    assert f.status == "recovered" and f.ms <= 10


def test_failover_when_the_transfer_finishes_during_the_outage():
    f = fo(lambda t: 40 if t < 2.0 else 0, 2.0, end=5.0, done=2.1)
    assert f.status == "recovered" and f.ms == pytest.approx(100, abs=1)


def test_failover_not_exercised_when_nothing_is_outstanding():
    f = fo(lambda t: 40 if t < 1.0 else 0, 2.0, done=1.0)
    assert f.status == "not-exercised" and f.ms is None


def test_failover_without_a_pre_window_uses_the_fallback():
    rate = lambda t: 0 if 0.05 <= t < 0.1 else 40  # noqa: E731
    assert fo(rate, 0.05).status == "not-exercised"
    f = fo(rate, 0.05, fallback_mbps=34)
    assert f.status == "recovered" and f.ms == pytest.approx(50, abs=10)


def test_failover_worst_of_several_failures():
    rate = lambda t: 0 if (1.0 <= t < 1.02 or 3.0 <= t < 3.2) else 40  # noqa: E731
    times, mbps = series(rate)
    total, each = failover(times, mbps, [(0.0, 5.0)], [1.0, 3.0], complete=False)
    assert [round(e.ms, -1) for e in each] == [20, 200]
    assert total.ms == each[1].ms


def test_failover_no_failure():
    f, each = failover([0.0], [1.0], [(0.0, 1.0)], [], complete=True)
    assert f.status == "no-failure" and each == []


# ------------------------------------------------------------------ percentiles and checks


def test_percentiles_nearest_rank():
    assert percentiles(range(1, 101)) == {"p50": 50, "p99": 99, "p100": 100}
    assert percentiles([5.0]) == {"p50": 5.0, "p99": 5.0, "p100": 5.0}
    assert percentiles([]) == {"p50": None, "p99": None, "p100": None}
    assert percentiles([1.0] * 9 + [math.inf]) == {"p50": 1.0, "p99": None, "p100": None}


def test_step_times():
    assert step_times_ms([(0.0, 0.15), (0.15, 0.5), (0.5, None)]) == (
        [150.0, pytest.approx(350.0)],
        1,
    )


def test_expectation_checks():
    expect = Expect(
        delivered_all=True,
        max_stall_ms=50,
        min_goodput_fraction=0.8,
        max_failover_ms=100,
        max_p100_over_p50=1.5,
    )
    good = {
        "delivered_all": True,
        "max_stall_ms": 50.0,
        "min_goodput_fraction": 0.8,
        "max_failover_ms": 3.1,
        "max_p100_over_p50": 1.2,
    }
    res = check_expectations(expect, good)
    assert res["passed"] is True
    assert [c["name"] for c in res["checks"]] == list(good)
    assert res["checks"][3] == {
        "name": "max_failover_ms",
        "limit": 100,
        "value": 3.1,
        "passed": True,
    }
    for name, bad in [
        ("delivered_all", False),
        ("max_stall_ms", 50.1),
        ("min_goodput_fraction", 0.79),
        ("max_failover_ms", None),  # never recovered
        ("max_p100_over_p50", None),  # a step never finished
    ]:
        res = check_expectations(expect, {**good, name: bad})
        assert res["passed"] is False
        assert [c["name"] for c in res["checks"] if not c["passed"]] == [name]
    assert check_expectations(Expect(), good) == {"passed": True, "checks": []}
    assert check_expectations(Expect(delivered_all=False), {"delivered_all": False})["passed"]


# ------------------------------------------------------------------ assembly

SCENARIO = {
    "name": "link-failure",
    "description": "d",
    "topology": {"spines": 2, "leaves": 2, "hosts_per_leaf": 2, "link_mbps": 40},
    "workload": {"kind": "bulk", "src": "h1", "dst": "h3", "bytes": "10MB"},
    "duration_s": 6,
    "events": [
        {"at": 1.0, "action": "link-down", "link": ["spine1", "leaf2"]},
        {"at": 2.0, "action": "link-up", "link": ["spine1", "leaf2"]},
    ],
    "expect": {
        "delivered_all": True,
        "max_stall_ms": 50,
        "min_goodput_fraction": 0.8,
        "max_failover_ms": 100,
    },
}


def bulk_run(name, outage, total=10_000_000, rate=38.0, end=6.0):
    got, samples, t = 0, [], 0.0
    while got < total and t < end:
        t = round(t + 0.001, 6)
        if outage[0] <= t < outage[1]:
            continue
        n = min(int(rate * 125), total - got)
        got += n
        samples.append((t, n))
    done = t if got >= total else None
    return TransportRun(
        name, samples, [Message(0.0, total, done)], end_s=end, retransmits={"nack": 4}, trims=7
    )


def applied(sc):
    return [AppliedEvent(e, e.at + 0.0004) for e in sc.events]


def test_measure_bulk_pass_and_fail():
    sc = validate(SCENARIO)
    good = measure(bulk_run("mrc", (1.0, 1.02)), sc, applied(sc))
    assert good.delivered_all and good.lost_bytes == 0
    assert good.bottleneck_mbps == 40
    assert good.goodput_mbps == pytest.approx(38 * 2.0 / 2.02, rel=0.01)
    assert good.max_stall_ms == pytest.approx(21, abs=1)
    assert good.failover.status == "recovered" and good.failover.ms < 30
    assert good.expectations["passed"] is True

    bad = measure(bulk_run("single-path", (1.0, 2.3)), sc, applied(sc))
    failed = {c["name"] for c in bad.expectations["checks"] if not c["passed"]}
    assert failed == {"max_stall_ms", "max_failover_ms", "min_goodput_fraction"}
    assert bad.failover.ms == pytest.approx(1300, abs=10)

    stuck = measure(bulk_run("tcp", (1.0, 99)), sc, applied(sc))
    assert not stuck.delivered_all and stuck.lost_bytes > 0
    assert stuck.failover.status == "not-recovered"
    assert stuck.expectations["passed"] is False


def test_unapplied_events_do_not_count():
    sc = validate(SCENARIO)
    m = measure(bulk_run("mrc", (1.0, 1.02)), sc, [AppliedEvent(e, None) for e in sc.events])
    assert m.failover.status == "no-failure"


def test_measure_allreduce_steps():
    sc = validate(
        {
            **SCENARIO,
            "workload": {"kind": "allreduce", "bytes": "100KB", "steps": 4},
            "expect": {"max_p100_over_p50": 1.5},
        }
    )
    steps = [(0.0, 0.1), (0.1, 0.2), (0.2, 0.3), (0.3, 0.35)]
    run = TransportRun("mrc", [(0.05, 1)], [Message(0.0, 1, 0.35)], end_s=1.0, steps=steps)
    m = measure(run, sc, [])
    assert m.step_percentiles == {
        "p50": pytest.approx(100),
        "p99": pytest.approx(100),
        "p100": pytest.approx(100),
    }
    assert m.expectations["passed"]
    slow = TransportRun("single-path", [], [], end_s=5.0, steps=[*steps[:3], (0.3, None)])
    m2 = measure(slow, sc, [])
    assert m2.step_percentiles["p100"] is None and m2.steps_unfinished == 1
    assert m2.p100_over_p50 is None
    assert m2.expectations["checks"][0] == {
        "name": "max_p100_over_p50",
        "limit": 1.5,
        "value": None,
        "passed": False,
    }


DESIGN_KEYS = {"scenario", "started", "seed", "topology", "events", "transports", "emulation"}
TRANSPORT_KEYS = {
    "delivered_bytes",
    "lost_bytes",
    "goodput_mbps",
    "bottleneck_mbps",
    "max_stall_ms",
    "failover_ms",
    "retransmits",
    "trims",
    "flows",
    "step_time_ms",
    "expectations",
}


def test_summary_has_exactly_the_design_shape():
    sc = validate(SCENARIO)
    ms = {"mrc": measure(bulk_run("mrc", (1.0, 1.02)), sc, applied(sc))}
    s = build_summary(
        sc,
        events=applied(sc),
        transports=ms,
        emulation=Emulation(0.41, 85.0, 0),
        started="2026-05-01T10:00:00+00:00",
    )
    assert set(s) == DESIGN_KEYS
    assert s["scenario"] == "link-failure" and s["seed"] == 1
    assert s["started"] == "2026-05-01T10:00:00+00:00"
    assert s["events"][0] == {
        "at": 1.0,
        "applied_at": 1.0004,
        "action": "link-down",
        "link": ["spine1", "leaf2"],
    }
    t = s["transports"]["mrc"]
    assert set(t) == TRANSPORT_KEYS
    assert set(t["step_time_ms"]) == {"p50", "p99", "p100"}
    assert set(t["expectations"]) == {"passed", "checks"}
    assert all(set(c) == {"name", "limit", "value", "passed"} for c in t["expectations"]["checks"])
    assert t["retransmits"] == {"nack": 4} and t["trims"] == 7
    assert s["emulation"] == {"cpu_util": 0.41, "timer_jitter_us_p99": 85.0, "kernel_drops": 0}
    assert s["topology"]["spines"] == 2 and s["topology"]["link_mbps"] == 40
    json.dumps(s, allow_nan=False)  # strict JSON: no NaN or Infinity anywhere


def test_kernel_drops_are_flagged_loudly():
    sc = validate(SCENARIO)
    s = build_summary(sc, events=[], transports={}, emulation=Emulation(0.99, 900, 12))
    assert s["emulation"]["kernel_drops"] == 12
    assert "EMULATION OVERLOADED" in s["emulation"]["warning"]
    assert "12 packets" in emulation_warning(Emulation(kernel_drops=12))
    assert emulation_warning(Emulation()) is None


def _steps(t: float, stall: tuple[float, float] | None = None) -> float:
    """An all-reduce's rhythm: 150 ms at 40 Mbps, then a 40 ms barrier with nothing, repeating;
    `stall` = (from, to) shifts everything after `from` by the stall's length."""
    if stall is not None:
        if stall[0] <= t < stall[1]:
            return 0
        if t >= stall[1]:
            t -= stall[1] - stall[0]
    return 40 if (t % 0.19) < 0.15 else 0


def test_failover_of_a_step_workload_is_measured_at_its_own_rhythm():
    # No stall at all: whatever phase of a step the failure lands in, it cost nothing.
    for at in (2.0, 2.05, 2.24):
        f = fo(_steps, at, rhythm_s=0.19)
        assert f.status == "recovered" and f.ms <= 20, (at, f)
    # A 60 ms stall at the failure reads about that long (to within a step's 10% slack).
    f = fo(lambda t: _steps(t, (2.0, 2.06)), 2.0, rhythm_s=0.19)
    assert 30 <= f.ms <= 80, f
    # Without the rhythm, a barrier right after the failure reads as an outage.
    assert fo(_steps, 2.24).ms >= 30


def test_step_rhythm_is_the_median_of_steps_done_before_the_failure():
    steps = [(0.0, 0.2), (0.2, 0.39), (0.39, 0.6), (0.6, 1.5), (1.5, None)]
    assert step_rhythm_s(steps, before=0.7) == pytest.approx(0.2)
    assert step_rhythm_s(steps, before=0.3) is None  # one step is not a rhythm


def test_failover_counts_an_outage_that_starts_after_a_moment_of_good_goodput():
    # The data already past the dead link keeps goodput up for 100 ms, then nothing until
    # 1.9 s after the failure; the failure heals at 3.5 s.
    def rate(t: float) -> float:
        return 0 if 2.1 <= t < 3.9 else 40

    f = failover(*series(rate), [(0.0, 5.0)], [2.0], complete=False, failure_ends=[3.5])[0]
    assert f.ms == pytest.approx(1900, abs=20)
    # An outage after the failure has ended is not this failure's.
    g = failover(*series(rate), [(0.0, 5.0)], [2.0], complete=False, failure_ends=[2.05])[0]
    assert g.ms == 0


def test_flow_entries_goodput_and_completion_per_flow():
    finished = FlowRecord("h1", "h3", 1_000_000, 1_000_000, 0.5, 1.3, {"nack": 2})
    unfinished = FlowRecord("h2", "h4", 1_000_000, 250_000, 1.0, None, {})
    silent = FlowRecord("h3", "h1", 1_000_000, 0, None, None, {})
    a, b, c = flow_entries([finished, unfinished, silent], end_s=2.0)
    assert a == {"src": "h1", "dst": "h3", "bytes": 1_000_000, "acked_bytes": 1_000_000,
                 "start_s": 0.5, "end_s": 1.3, "goodput_mbps": 10.0, "fct_ms": 800.0,
                 "retransmits": {"nack": 2}}  # fmt: skip
    # What it managed over its own active time, up to the end of the run; no completion.
    assert b["goodput_mbps"] == 2.0 and b["fct_ms"] is None and b["end_s"] is None
    assert b["acked_bytes"] == 250_000 and c["start_s"] is None
    assert c["goodput_mbps"] == 0.0 and c["fct_ms"] is None
    json.dumps([a, b, c], allow_nan=False)
    # The receiver placed 900 kB of it: the sender saw only whole messages acknowledged.
    placed = FlowRecord("h2", "h4", 1_000_000, 250_000, 1.0, None, {}, placed_bytes=900_000)
    (d,) = flow_entries([placed], end_s=2.0)
    assert d["goodput_mbps"] == pytest.approx(7.2) and d["acked_bytes"] == 250_000
    # Never more than the flow's bytes, and a finished flow keeps its own count.
    over = FlowRecord("h2", "h4", 1_000_000, 250_000, 1.0, None, {}, placed_bytes=5_000_000)
    done = FlowRecord("h1", "h3", 1_000_000, 1_000_000, 0.5, 1.3, {}, placed_bytes=2_000_000)
    (e, g) = flow_entries([over, done], end_s=2.0)
    assert e["goodput_mbps"] == pytest.approx(8.0) and g["goodput_mbps"] == 10.0


def test_measure_puts_flows_into_the_summary_entry():
    sc = validate(SCENARIO)
    run = bulk_run("mrc", (1.0, 1.02))
    run.flows = [FlowRecord("h1", "h3", 100, 100, 0.0, 0.5, {})]
    m = measure(run, sc, applied(sc))
    assert m.summary_entry()["flows"] == [
        {"src": "h1", "dst": "h3", "bytes": 100, "acked_bytes": 100, "start_s": 0.0,
         "end_s": 0.5, "goodput_mbps": 0.002, "fct_ms": 500.0, "retransmits": {}}
    ]  # fmt: skip
    assert m.flow_goodput_mbps() == {"mean": 0.002, "min": 0.002}

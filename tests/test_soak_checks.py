"""The soak's pure parts: the seeded failure schedule, exactly-once accounting, the RSS check,
the failure log check and validity stretch by stretch; each check shown failing too."""

from __future__ import annotations

import pytest

from testbed.analysis.soak import (
    RssSample,
    Window,
    accounting,
    failures_logged,
    rss_check,
    stretches,
    verdict,
)
from testbed.analysis.soak_report import soak_markdown
from testbed.analysis.validity import Thresholds, Timing
from testbed.scenario.soak_schedule import (
    REPAIR,
    FailureRates,
    ScheduleError,
    random_schedule,
    targets,
)
from topologies import leaf_spine


def _fab(planes: int = 2, spines: int = 2):
    return leaf_spine(spines=spines, leaves=2, hosts_per_leaf=2, planes=planes)


# ----- schedule ----------------------------------------------------------------------------------


def test_the_schedule_is_seeded_ordered_and_repairs_each_failure_before_the_next():
    fab = _fab()
    a = random_schedule(fab, 10, 1700, seed=5)
    assert a == random_schedule(fab, 10, 1700, seed=5)
    assert a != random_schedule(fab, 10, 1700, seed=6)
    assert len(a) % 2 == 0 and len(a) > 40
    times = [e.at for e in a]
    assert times == sorted(times) and 10 < times[0] and times[-1] <= 1700
    for fail, repair in zip(a[::2], a[1::2], strict=True):
        assert repair.action == REPAIR[fail.action]
        assert fail.plan_kwargs().get("link") == repair.plan_kwargs().get("link")
        assert getattr(fail, "node", None) == getattr(repair, "node", None)
        assert repair.at > fail.at
    for repair, nxt in zip(a[1::2], a[2::2], strict=False):
        assert nxt.at - repair.at >= FailureRates().min_gap_s - 1e-3  # one at a time
    assert {e.action for e in a} == {
        "link-down", "link-up", "blackhole", "heal", "switch-down", "switch-up",
        "plane-down", "plane-up",
    }  # fmt: skip


def test_the_mean_gap_and_duration_follow_the_rates():
    fab = _fab()
    rates = FailureRates(mtbf_s=20, mttr_s=4, min_gap_s=0)
    ev = random_schedule(fab, 0, 200_000, seed=1, rates=rates)
    fails, repairs = ev[::2], ev[1::2]
    mean_down = sum(r.at - f.at for f, r in zip(fails, repairs, strict=True)) / len(fails)
    assert 3.4 < mean_down < 4.6
    # gaps are counted from the repair: mean time between failures ~ mtbf + mttr
    cycle = (fails[-1].at - fails[0].at) / (len(fails) - 1)
    assert 21 < cycle < 27


def test_targets_never_cut_a_host_off():
    one = targets(_fab(planes=1))
    assert one["plane-down"] == []
    assert all(n.startswith("spine") for n in one["switch-down"])  # a leaf would cut its hosts
    two = targets(_fab(planes=2))
    assert two["plane-down"] == [1, 2]
    assert any(n.startswith("leaf") for n in two["switch-down"])
    assert all(not any(x.startswith("h") for x in link) for link in two["link-down"])
    single_spine = targets(_fab(planes=1, spines=1))
    assert single_spine["link-down"] == [] and single_spine["switch-down"] == []
    assert random_schedule(_fab(planes=1, spines=1), 0, 100, seed=1) == []


@pytest.mark.parametrize(
    "rates,field",
    [
        (FailureRates(mtbf_s=0), "mtbf_s"),
        (FailureRates(mttr_s=-1), "mttr_s"),
        (FailureRates(min_gap_s=-1), "min_gap_s"),
        (FailureRates(weights={"meteor": 1.0}), "weights.meteor"),
    ],
)
def test_bad_rates_are_refused_by_name(rates, field):
    with pytest.raises(ScheduleError, match=f"^{field}:"):
        random_schedule(_fab(), 0, 100, seed=1, rates=rates)


# ----- exactly once ------------------------------------------------------------------------------


def _ledger(posted=0, posted_b=0, delivered=0, delivered_b=0, dups=0):
    return {"posted_messages": posted, "posted_bytes": posted_b, "delivered_messages": delivered,
            "delivered_bytes": delivered_b, "duplicates": dups, "duplicate_bytes": 0}  # fmt: skip


def _statuses(lost: int = 0, dups: int = 0, crc: int = 0) -> dict:
    return {
        "h1": {"1": {"ledger": {"h2": _ledger(10, 1000)}, "crc_failures": crc, "bad_messages": 0}},
        "h2": {
            "1": {
                "ledger": {"h1": _ledger(0, 0, 10 - lost, 1000 - 100 * lost, dups)},
                "crc_failures": 0,
                "bad_messages": 0,
            }
        },  # fmt: skip
    }


def _summary(statuses, rss=None, failures=None) -> dict:
    return {
        "accounting": accounting(statuses, {"1": "allreduce"}),
        "rss": rss or {"applies": False, "passed": None, "processes": {}, "tolerance_pct": 5},
        "failures": failures or failures_logged([], 0, []),
    }


def test_accounting_balances_a_clean_run_and_the_verdict_passes():
    a = accounting(_statuses(), {"1": "allreduce"})
    assert a["total"]["sent_messages"] == a["total"]["delivered_messages"] == 10
    assert a["total"]["lost_bytes"] == 0
    assert a["jobs"]["allreduce"]["pairs"] == [
        {"src": "h1", "dst": "h2", "sent_messages": 10, "sent_bytes": 1000,
         "delivered_messages": 10, "delivered_bytes": 1000, "duplicates": 0,
         "duplicate_bytes": 0, "lost_messages": 0, "lost_bytes": 0}
    ]  # fmt: skip
    assert verdict(_summary(_statuses())) == (True, [])


@pytest.mark.parametrize(
    "kw,words",
    [({"lost": 2}, "200 bytes (2 messages) lost"), ({"dups": 1}, "1 messages delivered twice"),
     ({"crc": 3}, "3 messages failed their crc32")],
)  # fmt: skip
def test_each_accounting_breach_fails_the_verdict(kw, words):
    ok, why = verdict(_summary(_statuses(**kw)))
    assert not ok and any(words in w for w in why), why


def test_a_soak_that_sent_nothing_does_not_pass():
    ok, why = verdict(_summary({"h1": {"1": {"ledger": {}}}}))
    assert not ok and "nothing was tested" in why[0]


# ----- memory ------------------------------------------------------------------------------------


def _rss(grow_kb_per_min: float, minutes: int = 30, base: int = 50_000) -> list[RssSample]:
    out = []
    for t in range(0, minutes * 60, 5):
        for p in ("endpoint h1", "switch spine1"):
            kb = base + (grow_kb_per_min * t / 60 if p == "endpoint h1" else 0)
            out.append(RssSample(float(t), p, int(kb)))
    return out


def test_flat_memory_passes_and_slow_growth_fails_from_minute_5():
    flat = rss_check(_rss(0), 1800)
    assert flat["applies"] and flat["passed"]
    # 100 kB/min on 50 MB: 2.5 MB over 25 minutes = 5 %+ -> fails, and only that process
    leak = rss_check(_rss(110), 1800)
    assert leak["applies"] and leak["passed"] is False
    assert leak["processes"]["endpoint h1"]["passed"] is False
    assert leak["processes"]["switch spine1"]["passed"] is True
    assert 5 < leak["processes"]["endpoint h1"]["worst_deviation_pct"] < 6
    # growth before minute 5 (warming up) does not count
    warm = [RssSample(s.t_s, s.process, s.rss_kb - (10_000 if s.t_s < 300 else 0))
            for s in _rss(0)]  # fmt: skip
    assert rss_check(warm, 1800)["passed"]
    assert rss_check(warm, 1800, from_s=0)["passed"] is False
    ok, why = verdict(_summary(_statuses(), rss=leak))
    assert not ok and "endpoint h1" in why[0]


def test_the_rss_check_does_not_apply_to_a_short_run_and_skips_dead_processes():
    short = rss_check(_rss(500, minutes=1), 60)
    assert short["applies"] is False and short["passed"] is None and "shorter" in short["why_not"]
    assert verdict(_summary(_statuses(), rss=short))[0]
    dead = rss_check(_rss(500), 1800, dead=["endpoint h1"])
    assert dead["passed"] and dead["processes"]["endpoint h1"] == {"skipped": "died during the run"}


# ----- failures logged ---------------------------------------------------------------------------


def test_every_planned_event_and_every_death_must_be_in_the_log():
    log = [
        {"source": "schedule", "at": 1.0, "action": "link-down", "applied_at": 1.001},
        {"source": "schedule", "at": 2.0, "action": "link-up", "applied_at": None,
         "error": "events[1] link-up: spine1: dead"},
        {"source": "process", "at": 1.5, "action": "switch-process-died", "node": "spine1"},
    ]  # fmt: skip
    assert failures_logged(log, 2, ["spine1"])["passed"]
    assert not failures_logged(log, 3, ["spine1"])["passed"]  # one planned event missing
    assert failures_logged(log, 2, ["spine1", "leaf1"])["missing_deaths"] == ["leaf1"]
    silent = [dict(log[0], applied_at=None), *log[1:]]
    assert failures_logged(silent, 2, ["spine1"])["unexplained"] == 1
    ok, why = verdict(_summary(_statuses(), failures=failures_logged(silent, 2, ["spine1"])))
    assert not ok and "failure log incomplete" in why[0]


# ----- validity stretches ------------------------------------------------------------------------


def test_validity_is_reported_per_stretch():
    limits = Thresholds(switch_late_us=100.0, endpoint_late_us=100.0)
    measured = {"switch_late_us_p99": 1.0, "endpoint_late_us_p99": 1.0, "kernel_drops": 0,
                "endpoint_nic_lost": 0.0}  # fmt: skip
    good = Timing(cpu_util=0.5, **measured)
    busy = Timing(**{**measured, "cpu_util": 0.99, "endpoint_late_us_p99": 500})
    ws = [Window(0, 30, good), Window(30, 60, busy), Window(60, 90, busy), Window(90, 120, good)]
    r = stretches(ws, limits)
    assert not r["valid"] and r["invalid_s"] == 60
    assert [(s["start_s"], s["end_s"], s["valid"]) for s in r["stretches"]] == [
        (0, 30, True), (30, 90, False), (90, 120, True)]  # fmt: skip
    assert len(r["stretches"][1]["reasons"]) == 2  # each kind once, not once per window
    assert stretches([Window(0, 30, good)], limits)["valid"]
    # Fail closed: a window whose figures were not read, or no window at all, is not valid.
    unread = stretches([Window(0, 30, Timing(cpu_util=0.5))], limits)
    assert not unread["valid"]
    assert "not measured: switch lateness" in unread["stretches"][0]["reasons"]
    assert not stretches([], limits)["valid"]


MEASURED = Timing(cpu_util=0.5, endpoint_late_us_p99=1.0, kernel_drops=0, endpoint_nic_lost=0.0)


def test_the_report_shows_each_check():
    s = {
        "scenario": "soak", "transport": "mrc", "minutes": 1, "seed": 1, "passed": False,
        "failed_checks": ["2 bytes lost"], "run_s": 60, "time_dilation": 1,
        "switch_processes": "per-node", "traffic": {"allreduce": {"steps_finished": 3}},
        "accounting": accounting(_statuses(lost=1), {"1": "allreduce"}),
        "drain": {"complete": True, "real_s": 0.5, "unacked_messages": 0},
        "failures": failures_logged([], 0, []),
        "rss": rss_check(_rss(0, minutes=1), 60, window_s=10),
        "emulation": stretches([Window(0, 60, MEASURED)], Thresholds(None, 100.0)),
    }  # fmt: skip
    md = soak_markdown(s, [])
    assert "**FAILED**: 2 bytes lost" in md
    assert "| allreduce | 10 | 1000 | 9 | 900 | 100 |" in md
    assert "does not apply" in md and "| 0 | 60 | valid |" in md

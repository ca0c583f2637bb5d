"""The validity verdict end to end, without a fabric: one percentile rule, every limit's
boundary, inputs that were not measured, the overall verdict of a run and every reader of it.

These tests are what a broken verdict trips over (issue 31): a limit off by one, a verdict that
always says valid, a reader that takes a missing figure for a good one."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contracts.stats import LateHistogram, percentile, rank
from testbed.analysis.aggregate import transport_stats
from testbed.analysis.emulator_timing import interval_lateness, nic_lost, switch_kernel_drops
from testbed.analysis.validity import (
    CPU_SATURATION,
    ENDPOINT_NIC_LOST_FRACTION,
    Thresholds,
    Timing,
    Verdict,
    is_valid,
    judge,
)
from testbed.experiment.dilation import DilationPlan
from testbed.experiment.runner import Outcome, RunResult, _overall_verdict
from testbed.experiment.transport_run import _timing

# ----- one percentile rule -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "p", "index"),
    [(1, 99, 0), (100, 99, 98), (101, 99, 99), (200, 99, 197), (100, 100, 99), (100, 50, 49),
     (3, 50, 1), (4, 50, 1), (10, 0, 0), (10, 99, 9), (50, 99, 49), (1000, 99, 989)],
)  # fmt: skip
def test_nearest_rank_is_the_ceil_of_p_n_th_smallest(n, p, index):
    assert rank(n, p) == index
    assert percentile(list(range(n)), p) == index


def test_percentile_of_nothing_is_none_and_a_bad_p_is_an_error():
    assert percentile([], 99) is None
    with pytest.raises(ValueError, match="0..100"):
        percentile([1.0], 101)


def test_the_step_percentiles_use_the_same_rule():
    from testbed.analysis.metrics import percentiles

    values = [random.Random(3).uniform(0, 100) for _ in range(257)]
    got = percentiles(values)
    assert got == {f"p{p}": percentile(values, p) for p in (50, 99, 100)}


@given(st.lists(st.floats(min_value=0, max_value=1e7, allow_nan=False), min_size=1, max_size=400))
def test_the_histogram_percentile_is_never_below_the_exact_one_and_at_most_2_2_percent_above(xs):
    h = LateHistogram()
    for x in xs:
        h.add(x)
    exact = percentile(xs, 99)
    got = h.percentile(99)
    assert got >= exact or math.isclose(got, exact, rel_tol=1e-12)
    assert got <= max(exact * 2 ** (1 / 32), 1e-3) * (1 + 1e-12)
    assert h.n == len(xs) and h.max_us == max(xs)


def test_a_histogram_difference_holds_the_samples_of_the_interval_only():
    h = LateHistogram()
    for _ in range(1000):
        h.add(5000.0)  # start-up: late wake-ups that are not the workload's
    start = LateHistogram.from_json(h.to_json())
    for _ in range(1000):
        h.add(1.0)
    run = h.minus(start)
    assert run.n == 1000 and run.percentile(99) == pytest.approx(1.0, rel=0.023)
    assert h.percentile(99) > 4900  # the whole life would judge start-up
    with pytest.raises(ValueError, match="earlier read"):
        start.minus(h)


def test_a_histogram_in_an_unknown_form_is_refused():
    with pytest.raises(ValueError):
        LateHistogram.from_json({"counts": {}, "max_us": 0})
    with pytest.raises(ValueError):
        LateHistogram.from_json({**LateHistogram().to_json(), "max_us": None})


# ----- every limit's boundary ----------------------------------------------------------------------

LIMITS = Thresholds(switch_late_us=10.0, endpoint_late_us=20.0)
GOOD = Timing(
    time_dilation=100, cpu_util=0.5, switch_late_us_p99=1.0, endpoint_late_us_p99=1.0,
    kernel_drops=0, endpoint_nic_lost=0.0,
)  # fmt: skip


def _with(**kw) -> Timing:
    return Timing(**{**GOOD.__dict__, **kw})


@pytest.mark.parametrize(
    ("field", "at_limit", "past", "reason"),
    [
        ("switch_late_us_p99", 10.0, 10.001, "switch lateness"),
        ("endpoint_late_us_p99", 20.0, 20.001, "endpoint timer lateness"),
        ("endpoint_nic_lost", ENDPOINT_NIC_LOST_FRACTION, ENDPOINT_NIC_LOST_FRACTION + 1e-6,
         "endpoint NIC idle"),
        ("kernel_drops", 0, 1, "1 packets dropped by the kernel"),
        ("cpu_util", CPU_SATURATION, CPU_SATURATION + 1e-6, "CPU saturated"),
    ],
)  # fmt: skip
def test_a_value_at_its_limit_passes_and_one_past_it_fails(field, at_limit, past, reason):
    assert judge(GOOD, LIMITS) == Verdict(True, [])
    assert judge(_with(**{field: at_limit}), LIMITS).valid
    v = judge(_with(**{field: past}), LIMITS)
    assert not v.valid and len(v.reasons) == 1 and v.reasons[0].startswith(reason)


@pytest.mark.parametrize(
    ("field", "reason"),
    [("switch_late_us_p99", "switch lateness"), ("endpoint_late_us_p99", "endpoint lateness"),
     ("endpoint_nic_lost", "endpoint NIC time"), ("kernel_drops", "kernel drops"),
     ("cpu_util", "CPU utilisation")],
)  # fmt: skip
def test_an_input_not_measured_makes_the_run_invalid_naming_it(field, reason):
    v = judge(_with(**{field: None}), LIMITS)
    assert not v.valid and v.reasons == [f"not measured: {reason}"]


def test_switch_lateness_is_not_an_input_on_unshaped_links():
    assert judge(_with(switch_late_us_p99=None), Thresholds(None, 20.0)).valid


def test_a_timing_read_in_part_carries_what_was_missing():
    v = judge(_with(missing=("kernel drops: host h3's UDP counters unreadable",)), LIMITS)
    assert not v.valid and v.reasons == [
        "not measured: kernel drops: host h3's UDP counters unreadable"
    ]
    # An input that is None because of a line of `missing` is named once, by that line.
    v = judge(_with(kernel_drops=None, missing=("kernel drops: host h3 unreadable",)), LIMITS)
    assert v.reasons == ["not measured: kernel drops: host h3 unreadable"]


def test_a_timing_with_nothing_measured_is_invalid():
    assert not judge(Timing(), LIMITS).valid


# ----- reading a summary's verdict -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("block", "valid"),
    [({"valid": True}, True), ({"valid": False}, False), ({}, False), (None, False),
     ({"valid": "true"}, False), ({"valid": 1}, False)],
)  # fmt: skip
def test_only_an_explicit_true_is_valid(block, valid):
    assert is_valid(block) is valid


def test_readers_of_a_summary_fail_closed():
    outcome = Outcome({"transports": {}}, {}, None, {}, [])  # type: ignore[arg-type]
    assert outcome.valid is False
    stats = transport_stats([{"emulation": {"valid": True}}, {}, {"emulation": {}}])
    assert stats["valid_runs"] == 1 and stats["invalid_runs"] == 2


# ----- the overall verdict of a run ---------------------------------------------------------------


def _result(transport: str, verdict: Verdict | None, n: float = 100.0) -> RunResult:
    r = RunResult(transport, None, [], None, Timing(time_dilation=n, real_s=2.0, virtual_s=0.01))  # type: ignore[arg-type]
    if verdict is not None:
        r.verdict = verdict
    return r


SC = SimpleNamespace(emulation=SimpleNamespace(switch_processes="auto"))
PLAN = DilationPlan(100.0, True, 1e6, 2e4, "calibrated")


def test_the_overall_verdict_is_valid_only_if_every_transport_is():
    ok = _overall_verdict(SC, {"mrc": _result("mrc", Verdict(True, []))}, PLAN)
    assert ok["valid"] is True and ok["invalid_reasons"] == []
    bad = _overall_verdict(
        SC,
        {"mrc": _result("mrc", Verdict(True, [])),
         "single-path": _result("single-path", Verdict(False, ["CPU saturated (99% of all cores)"]), 200)},
        PLAN,
    )  # fmt: skip
    assert bad["valid"] is False
    assert bad["invalid_reasons"] == ["single-path: CPU saturated (99% of all cores)"]
    assert bad["time_dilation"] == 200 and bad["time_dilation_mode"] == "auto"


def test_a_transport_never_judged_is_invalid():
    assert _result("mrc", None).verdict.valid is False
    assert _overall_verdict(SC, {"mrc": _result("mrc", None)}, PLAN)["valid"] is False


# ----- the runner's reading of what the processes reported ----------------------------------------


def _hist(*samples: float) -> dict:
    h = LateHistogram()
    for x in samples:
        h.add(x)
    return h.to_json()


def _switch(*samples: float, drops: int = 0) -> dict:
    return {"timer_late_hist": _hist(*samples), "kernel_drops": drops, "ports": {}}


def _ep(*samples: float) -> dict:
    return {"timer_late_hist": _hist(*samples), "nic_lost_bytes": 0, "nic_sent_bytes": 1000}


def _run_timing(switch, ep_stats, host_drops=0, drops_missing=(), probe=1.0, shaped=True, n=100.0):
    clock = SimpleNamespace(dilation=n)
    return _timing(clock, 1.0, 0.01, 0.5, switch, {}, host_drops, list(drops_missing),
                   ep_stats, probe, shaped)  # fmt: skip


def test_the_runner_reads_a_complete_report_as_valid():
    t = _run_timing({"leaf1": _switch(1.0, 2.0), "spine1": _switch(3.0)}, {"h1": _ep(4.0)})
    assert judge(t, LIMITS).valid
    assert t.switch_late_us_p99 == pytest.approx(3.0, rel=0.023) and t.kernel_drops == 0


@pytest.mark.parametrize(
    ("switch", "ep_stats", "host_drops", "missing"),
    [
        ({"leaf1": _switch(1.0), "spine1": {"kernel_drops": 0}}, {"h1": _ep()}, 0,
         "switch lateness: spine1 reported no lateness histogram"),
        ({"leaf1": _switch(), "spine1": _switch()}, {"h1": _ep()}, 0,
         "switch lateness: no switch recorded a sample"),
        ({"leaf1": _switch(1.0)}, {"h1": _ep(), "h2": None}, 0,
         "endpoint lateness: h2 reported no lateness histogram"),
        ({"leaf1": _switch(1.0)}, {"h1": _ep()}, None, "kernel drops"),
        ({"leaf1": {"timer_late_hist": _hist(1.0)}}, {"h1": _ep()}, 0,
         "kernel drops: switch leaf1 reported none"),
        ({}, {"h1": _ep()}, 0, "switch lateness: no switch reported"),
    ],
)  # fmt: skip
def test_the_runner_fails_closed_on_anything_it_could_not_read(
    switch, ep_stats, host_drops, missing
):
    t = _run_timing(switch, ep_stats, host_drops)
    v = judge(t, LIMITS)
    assert not v.valid
    assert any(missing in r for r in v.reasons), v.reasons


def test_kernel_baselines_lean_on_the_probe_and_fail_closed_without_it():
    assert judge(_run_timing({"leaf1": _switch(1.0)}, None, probe=2.0), LIMITS).valid
    v = judge(_run_timing({"leaf1": _switch(1.0)}, None, probe=None), LIMITS)
    assert not v.valid and "the monitor's probe took no sample" in v.reasons[0]


def test_a_real_time_run_may_have_no_due_departure():
    """N = 1: a light load leaves within the 500 µs early window, no departure is ever due."""
    assert judge(_run_timing({"leaf1": _switch()}, {"h1": _ep()}, n=1.0), LIMITS).valid


def test_unshaped_links_need_no_switch_samples():
    t = _run_timing({"leaf1": _switch()}, {"h1": _ep()}, shaped=False)
    assert judge(t, Thresholds(None, 20.0)).valid


def test_an_endpoint_with_no_due_timer_is_no_lateness_but_an_unreadable_one_is_missing():
    late = interval_lateness({"h1": _ep(), "h2": _ep()}, None, "endpoint", need_samples=False)
    assert late.p99_us == 0.0 and not late.missing
    assert nic_lost({"h1": {"nic_lost_bytes": 10}})[0] is None
    assert switch_kernel_drops({"leaf1": {"kernel_drops": "3"}})[0] is None

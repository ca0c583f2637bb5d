"""Time dilation and the validity verdict, without a fabric: the clock, the derived timing, the
switch's egress window, the verdict's rules, auto's choice of N, the scenario key and the CLI's
exit status (issue 18)."""

from __future__ import annotations

import argparse
import time

import pytest

from contracts.clock import MAX_DILATION, Clock, check_dilation, hazard, virtual_clock
from endpoint.config import TransportConfig
from endpoint.process_config import EndpointConfig, job_transport_config
from switch.config import switch_config
from switch.dataplane import Switch
from switch.port import CATCH_UP_S, EARLY_S, egress_timing
from testbed.analysis.validity import EXIT_INVALID, Thresholds, Timing, judge
from testbed.cli.commands import _exit_status
from testbed.experiment.dilation import (
    demand_hops_per_s,
    kernel_fits,
    nice_ceil,
    parse_dilation,
    plan,
)
from testbed.harness.endpoints import fabric_endpoint_config
from testbed.harness.transport_timing import transport_timing
from testbed.scenario import ScenarioError, validate
from topologies import TopologyParams, leaf_spine
from topologies.timing import REFERENCE_BASE_RTT_S, base_rtt_s, time_scale

DC = TopologyParams(spines=2, leaves=2, hosts_per_leaf=2, link_mbps=10_000, delay_us=1)
DC_SCENARIO = {
    "name": "dc",
    "topology": {"spines": 2, "leaves": 2, "hosts_per_leaf": 2, "link_mbps": 10000,
                 "delay_us": 1, "queue_kb": 12},
    "workload": {"kind": "bulk", "src": "h1", "dst": "h3", "bytes": "4MB"},
    "duration_s": 0.01,
}  # fmt: skip


# ----- the clock -------------------------------------------------------------------------------


def test_virtual_time_runs_n_times_slower_and_is_monotonic_itself_at_1():
    assert virtual_clock(1.0) is time.monotonic
    now = virtual_clock(1000.0)
    real = time.monotonic()
    assert now() == pytest.approx(real / 1000.0, abs=1e-3)
    c = Clock(250)
    assert c.real(0.004) == pytest.approx(1.0) and c.virtual(1.0) == pytest.approx(0.004)
    assert hazard(0.05, 1000) == pytest.approx(50e-6)


@pytest.mark.parametrize("bad", [0, 0.5, -3, float("inf"), float("nan"), True, "2", 1e9])
def test_a_bad_dilation_is_refused_with_the_key_named(bad):
    with pytest.raises(ValueError, match="^time_dilation: "):
        check_dilation(bad)


# ----- the fabric's time scale and the timing derived from it ----------------------------------


def test_the_base_rtt_counts_propagation_and_store_and_forward():
    # 4 links x 2 directions x 1 µs, a full frame on 4 links at 10 Gbps, an ACK back.
    rtt = base_rtt_s(10_000, 1.0)
    assert 8e-6 + 4 * 1514 * 8 / 10e9 < rtt < 8e-6 + 4 * 1514 * 8 / 10e9 + 1e-6
    assert base_rtt_s(10_000, 1.0, leaves=1) < rtt  # one leaf: two links
    assert time_scale(TopologyParams()) == 1.0  # the reference fabric itself
    assert time_scale(DC) == pytest.approx(rtt / REFERENCE_BASE_RTT_S)
    assert time_scale(TopologyParams(link_mbps=10)) == 1.0  # slower fabrics keep the constants
    assert time_scale(TopologyParams(link_mbps=0)) == 1.0  # unshaped: no scale of its own


def test_transport_timers_follow_the_base_rtt_with_real_time_hazards_as_floors():
    ref = transport_timing(TopologyParams(), 1.0)
    # At N = 1 on the reference fabric: the emulation's measured floors (50 ms RTO, 2 ms RACK).
    assert ref["rto_min"] == 50e-3 and ref["reorder_min"] == 2e-3
    # NSCC's base RTT is the fabric's, from which it derives its target delay and window.
    # ... plus the emulator's own latency per round trip, real (N = 1) or / N.
    assert ref["base_rtt"] == pytest.approx(REFERENCE_BASE_RTT_S + 1e-3)
    dc = transport_timing(DC, 1000.0)
    scale = time_scale(DC)
    assert dc["base_rtt"] == pytest.approx(scale * REFERENCE_BASE_RTT_S + 1e-3 / 1000)
    assert "target_qdelay" not in dc  # 0.75 base RTT (UET 1.0 with trimming), not a scaled constant
    assert dc["probe_interval"] == pytest.approx(1e-3 * scale)
    assert dc["rto_min"] == pytest.approx(max(15e-3 * scale, 50e-3 / 1000))
    drain = DC.queue_kb * 1000 * 8 / 10e9  # a full queue at the link rate
    assert dc["reorder_min"] == pytest.approx(max(200e-6 * scale, 2e-3 / 1000, drain))
    assert dc["rto_min"] < 1e-3 and dc["rto_initial"] >= dc["rto_min"]
    TransportConfig(**dc)  # a valid configuration


def test_maxwnd_leaves_shallow_queues_room_and_deep_ones_the_default():
    """NSCC's MaxWnd on a fabric: the excess over the BDP takes at most a third of one port's
    queue (12 kB at 10 Gbps, BDP 16.7 kB: 1.24 BDPs); where queues are deep for the BDP
    (the reference fabric at N = 1, 9000 B frames with 72 kB queues) the default 1.5."""
    four = TopologyParams(
        spines=4, leaves=4, hosts_per_leaf=4, link_mbps=10_000, delay_us=1, queue_kb=12
    )
    dc = transport_timing(four, 5000.0)
    bdp = 10e9 / 8 * dc["base_rtt"]
    assert dc["max_window"] == pytest.approx(1 + 12_000 / 3 / bdp)
    assert 1.2 < dc["max_window"] < 1.3
    assert transport_timing(TopologyParams(), 1.0)["max_window"] == 1.5
    jumbo = TopologyParams(
        spines=4, leaves=4, hosts_per_leaf=4, link_mbps=10_000, delay_us=1, mtu=9000, queue_kb=72
    )
    assert transport_timing(jumbo, 5000.0)["max_window"] == 1.5
    cfg = EndpointConfig.from_obj(fabric_endpoint_config(leaf_spine(four), time_dilation=5000.0))
    assert job_transport_config(cfg, {"mode": "mrc"}).max_window == dc["max_window"]
    # A scenario's (a job's) own cc still wins.
    assert job_transport_config(cfg, {"transport": {"max_window": 2.0}}).max_window == 2.0


def test_the_endpoint_config_carries_the_dilation_timing_and_bins():
    fab = leaf_spine(DC)
    cfg = EndpointConfig.from_obj(fabric_endpoint_config(fab, time_dilation=500.0))
    assert cfg.time_dilation == 500.0
    assert cfg.bin_s == pytest.approx(0.010 * time_scale(DC))
    tcfg = job_transport_config(cfg, {"mode": "mrc"})
    assert tcfg.rto_min == pytest.approx(transport_timing(DC, 500.0)["rto_min"])
    # Without the harness's timing, the process's own real-time floors shrink by N.
    bare = EndpointConfig.from_obj({"hosts": {"h1": ["10.0.0.1"]}, "time_dilation": 100})
    assert job_transport_config(bare, {}).rto_min == pytest.approx(50e-3 / 100)
    with pytest.raises(ValueError, match="config.time_dilation"):
        EndpointConfig.from_obj({"hosts": {"h1": ["10.0.0.1"]}, "time_dilation": 0})


def test_the_switch_serves_early_within_an_eighth_of_a_packet_time_under_dilation():
    assert egress_timing(1.0, 1.2e-6) == (EARLY_S, CATCH_UP_S)
    ser = 1514 * 8 / 10e9
    early, catch_up = egress_timing(1000.0, ser)
    assert early == pytest.approx(min(500e-6 / 1000, ser / 8))
    assert early < ser / 4 and catch_up == pytest.approx(CATCH_UP_S / 1000)
    sw = Switch(switch_config(leaf_spine(DC), "leaf1", time_dilation=1000.0))
    assert sw.dilation == 1000.0 and sw.early_s == pytest.approx(early)
    assert all(p.early == sw.early_s and p.catch_up == sw.catch_up_s for p in sw.ports)


# ----- the verdict -----------------------------------------------------------------------------


def test_limits_derive_from_the_fabric():
    lim = Thresholds.for_fabric(DC)
    assert lim.switch_late_us == pytest.approx(0.5 * 1514 * 8 / 10e9 * 1e6)
    assert lim.endpoint_late_us == pytest.approx(0.25 * base_rtt_s(10_000, 1.0) * 1e6)
    assert Thresholds.for_fabric(TopologyParams(link_mbps=0)).switch_late_us is None


def test_a_run_within_every_limit_is_valid_and_each_breach_is_a_reason():
    lim = Thresholds.for_fabric(DC)
    ok = Timing(1000, 10, 0.01, 0.5, 0.1, 0.2, 0, endpoint_nic_lost=0.0)
    assert judge(ok, lim).valid and judge(ok, lim).reasons == []
    bad = Timing(1, 10, 10, 0.99, 172_000, 2_000, 5, endpoint_nic_lost=0.0)
    verdict = judge(bad, lim)
    assert not verdict.valid
    assert [r.split()[0] for r in verdict.reasons] == ["switch", "endpoint", "5", "CPU"]
    block = verdict.summary(bad, lim)
    assert block["valid"] is False and block["time_dilation"] == 1
    assert block["limits"]["kernel_drops"] == 0 and len(block["invalid_reasons"]) == 4


def test_an_endpoint_that_fell_behind_its_nic_makes_the_run_invalid():
    """Timers on time, CPU under the limit, and still 21 % of the NIC's time lost while frames
    waited (a 4x4x4 permutation at N = 1000 on two cores): not a measurement of the network."""
    lim = Thresholds.for_fabric(DC)
    busy = Timing(1000, 3, 0.003, 0.94, 0.2, 0.6, 0, endpoint_nic_lost=0.21)
    verdict = judge(busy, lim)
    assert not verdict.valid and verdict.reasons[0].startswith("endpoint NIC idle")
    assert "21.0%" in verdict.reasons[0]
    assert verdict.summary(busy, lim)["endpoint_nic_lost"] == 0.21
    assert judge(Timing(1000, 3, 0.003, 0.94, 0.2, 0.6, 0, endpoint_nic_lost=0.005), lim).valid


def test_the_largest_lateness_is_reported_beside_the_p99_and_not_judged():
    lim = Thresholds.for_fabric(DC)
    t = Timing(
        500, 5, 0.01, 0.6, 0.1, 0.2, 0, 0.0, switch_late_us_max=40.0, endpoint_late_us_max=9.5
    )
    verdict = judge(t, lim)
    assert verdict.valid
    block = verdict.summary(t, lim)
    assert block["switch_late_us_max"] == 40.0 and block["endpoint_late_us_max"] == 9.5


def test_the_issue_18_case_is_invalid_by_these_rules():
    """4x4x4 at 10 Mbps in real time: 172 ms switch lateness, CPU 99.6 % (issue 18)."""
    lim = Thresholds.for_fabric(TopologyParams(spines=4, leaves=4, hosts_per_leaf=4, link_mbps=10))
    verdict = judge(Timing(1, 5, 5, 0.996, 172_000, 20_000, 0, 0.0), lim)
    assert not verdict.valid and "switch lateness" in verdict.reasons[0]


def _outcome(valid: bool, passed: bool):
    return argparse.Namespace(valid=valid, passed=passed)


@pytest.mark.parametrize(
    ("valid", "passed", "allow", "status"),
    [(True, True, False, 0), (True, False, False, 1), (False, True, False, EXIT_INVALID),
     (False, False, False, EXIT_INVALID), (False, True, True, 0), (False, False, True, 1)],
)  # fmt: skip
def test_an_invalid_run_has_its_own_exit_status_unless_allowed(valid, passed, allow, status):
    assert _exit_status(_outcome(valid, passed), argparse.Namespace(allow_invalid=allow)) == status


# ----- choosing N ------------------------------------------------------------------------------


def test_nice_ceil_rounds_up_to_1_2_5():
    assert [nice_ceil(x) for x in (0.3, 1, 1.5, 2, 3, 7, 11, 990, 1001)] == [
        1, 1, 2, 2, 5, 10, 20, 1000, 2000]  # fmt: skip
    assert nice_ceil(1e12) == MAX_DILATION


def test_auto_predicts_n_from_demand_and_budget_and_a_given_n_wins():
    sc = validate(DC_SCENARIO)
    demand = demand_hops_per_s(sc)
    assert demand == pytest.approx(2 * 10e9 / (1514 * 8) * 3 * 2)  # 2 hosts, 3 switches, ACKs
    p = plan(sc, None, (10_000.0, "calibrated"))
    assert p.auto and p.time_dilation == nice_ceil(demand / (10_000 * 0.7))
    assert p.budget_source == "calibrated"
    assert plan(sc, None).budget_source == "fallback"
    given = plan(sc, 40.0, (10_000.0, "calibrated"))
    assert not given.auto and given.time_dilation == 40.0
    assert not kernel_fits(sc, (10_000.0, "calibrated"))
    slow = validate(DC_SCENARIO | {"topology": {"spines": 2, "leaves": 2, "hosts_per_leaf": 2,
                                                "link_mbps": 1}})  # fmt: skip
    assert kernel_fits(slow, (10_000.0, "calibrated"))


def test_the_time_dilation_option_takes_auto_or_a_number():
    assert parse_dilation("auto") == "auto" and parse_dilation("250") == 250.0
    for bad in ("0", "fast", "-2"):
        with pytest.raises(ValueError, match="^--time-dilation: expected 'auto' or a number"):
            parse_dilation(bad)


# ----- the scenario key ------------------------------------------------------------------------


def test_the_emulation_block_defaults_to_auto_and_names_a_bad_value():
    assert validate(DC_SCENARIO).emulation.time_dilation == "auto"
    assert (
        validate(DC_SCENARIO | {"emulation": {"time_dilation": 50}}).emulation.time_dilation == 50
    )
    for bad in (0, -1, "fast", 1e9):
        with pytest.raises(ScenarioError, match=r"emulation\.time_dilation: expected 'auto'"):
            validate(DC_SCENARIO | {"emulation": {"time_dilation": bad}})
    with pytest.raises(ScenarioError, match=r"emulation\.speed"):
        validate(DC_SCENARIO | {"emulation": {"speed": 2}})


def test_a_kernel_transport_with_a_given_dilation_is_refused_naming_the_key():
    with pytest.raises(ScenarioError, match=r"transport: tcp runs on the kernel's clocks"):
        validate(DC_SCENARIO | {"transport": ["mrc", "tcp"], "emulation": {"time_dilation": 10}})
    validate(DC_SCENARIO | {"transport": ["mrc", "tcp"], "emulation": {"time_dilation": 1}})
    validate(DC_SCENARIO | {"transport": ["mrc", "tcp"]})  # auto: decided once N is known


def test_an_unshaped_fabric_has_no_bottleneck_and_its_summary_is_strict_json(tmp_path):
    """link_mbps 0: capacity is unbounded; the summary says null instead of failing to write
    an infinity (write_summary is strict JSON)."""
    from testbed.analysis.metrics import Emulation, build_summary, measure
    from testbed.analysis.report import write_summary
    from testbed.harness.records import Message, TransportRun

    sc = validate(DC_SCENARIO | {"topology": DC_SCENARIO["topology"] | {"link_mbps": 0}})
    run = TransportRun(
        transport="mrc",
        deliveries=[(0.001, 2_000_000), (0.002, 2_000_000)],
        messages=[Message(0.0, 4_000_000, 0.002)],
        end_s=0.003,
    )
    m = measure(run, sc, [])
    assert m.goodput_fraction is None and m.summary_entry()["bottleneck_mbps"] is None
    summary = build_summary(sc, events=[], transports={"mrc": m}, emulation=Emulation())
    assert write_summary(tmp_path, summary).is_file()


def test_the_reachability_check_waits_as_long_as_the_dilated_fabric_needs():
    from testbed.fabric.builder import reachability_timeout

    assert reachability_timeout(4, 20, 1.0) == pytest.approx(2.0 + 12 * 20e-6 + 4 * 12 / 5000)
    # 64 hosts at N = 100,000: a 1.2 s round trip and ~48,000 packet-hops of pings
    big = reachability_timeout(64 * 63, 1, 100_000)
    assert big == pytest.approx(2.0 + 1.2 + 64 * 63 * 12 / 5000)
    assert big > 10

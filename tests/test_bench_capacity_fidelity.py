"""The pure parts of `testbed bench capacity` and `testbed bench fidelity`: the N search, the
figures taken from a results folder, the differences from htsim and the tables (no fabric)."""

from __future__ import annotations

import pytest

from contracts.framing import mrc_payload
from endpoint.config import TransportConfig
from testbed.bench import capacity_bench as cap
from testbed.bench import fidelity_figures as fid_fig
from testbed.bench import fidelity_scenarios as fid_scen
from testbed.bench import fidelity_table as fid_table
from testbed.bench.endpoint_bench import BenchError
from testbed.experiment.api import load

# ----- capacity: the search ---------------------------------------------------------------------


def _search(start: float, valid_from: float, max_steps: int = 6) -> tuple[list[float], float]:
    """Run next_dilation against a machine on which every N >= valid_from is valid."""
    tried: dict[float, bool] = {}
    order = []
    while (n := cap.next_dilation(tried, start, max_steps)) is not None:
        order.append(n)
        tried[n] = n >= valid_from
    return order, cap.smallest_valid(tried)


def test_search_halves_while_valid_until_bracketed():
    order, best = _search(8000, 1500)
    assert order == [8000, 4000, 2000, 1000] and best == 2000


def test_search_doubles_while_invalid_then_stops_at_the_first_valid():
    order, best = _search(1000, 3000)
    assert order == [1000, 2000, 4000] and best == 4000  # 2000 invalid already brackets it


def test_search_stops_at_n_1_and_after_max_steps():
    assert _search(4, 1) == ([4, 2, 1], 1)
    order, best = _search(100_000, 1, max_steps=3)
    assert order == [100_000, 50_000, 25_000] and best == 25_000


def test_search_never_passes_the_largest_dilation():
    from contracts.clock import MAX_DILATION

    order, best = _search(MAX_DILATION, MAX_DILATION * 4)
    assert order == [MAX_DILATION] and best is None


def test_search_takes_a_bracket_tighter_than_a_factor_2():
    tried = {3000.0: True, 2000.0: False}
    assert cap.next_dilation(tried, 3000, 10) is None


def test_search_starts_at_1_at_least():
    assert cap.next_dilation({}, 0.3, 4) == 1.0


# ----- capacity: figures from switch_counters.json ----------------------------------------------

COUNTERS = {
    "leaf1": {"cpu_s": 0.5, "ports": {"a": {"tx_packets": 600}, "b": {"tx_packets": 400}}},
    "spine1": {"cpu_s": 0.25, "ports": {"c": {"tx_packets": 1000}}},
}


def test_hops_and_cpu_per_hop():
    assert cap.fabric_hops(COUNTERS) == 2000
    assert cap.hops_per_real_s(COUNTERS, 2.0) == 1000
    assert cap.hops_per_real_s(COUNTERS, 0.0) is None
    assert cap.switch_cpu_us_per_hop(COUNTERS) == 375.0
    assert cap.switch_cpu_us_per_hop({}) is None


def test_a_shared_switch_process_is_counted_once():
    """Switches of one process all report that process's CPU: summing them would count it
    once per switch."""
    shared = {
        "leaf1": {"cpu_s": 0.6, "pid": 42, "ports": {"a": {"tx_packets": 1000}}},
        "spine1": {"cpu_s": 0.6, "pid": 42, "ports": {"c": {"tx_packets": 1000}}},
        "leaf2": {"cpu_s": 0.2, "pid": 43, "ports": {"d": {"tx_packets": 1000}}},
    }
    assert cap.switch_cpu_s(shared) == 0.8
    assert cap.switch_cpu_us_per_hop(shared) == round(0.8 / 3000 * 1e6, 2)
    shared["leaf1"]["cpu_sys_s"] = shared["spine1"]["cpu_sys_s"] = 0.3
    shared["leaf2"]["cpu_sys_s"] = 0.1
    assert cap.switch_cpu_s(shared, "cpu_sys_s") == 0.4
    assert cap.switch_kernel_us_per_hop(shared) == round(0.4 / 3000 * 1e6, 2)
    assert cap.switch_kernel_us_per_hop(COUNTERS) == 0.0  # counters from before the split
    # What each process had spent when the workload started is not the run's.
    shared["leaf1"]["cpu_s_at_go"] = shared["spine1"]["cpu_s_at_go"] = 0.2
    shared["leaf1"]["cpu_sys_s_at_go"] = shared["spine1"]["cpu_sys_s_at_go"] = 0.1
    assert cap.switch_cpu_s(shared) == 0.8
    assert cap.switch_cpu_s(shared, since_go=True) == pytest.approx(0.6)
    assert cap.switch_cpu_us_per_hop(shared) == round(0.6 / 3000 * 1e6, 2)
    assert cap.switch_kernel_us_per_hop(shared) == round(0.3 / 3000 * 1e6, 2)


def test_endpoint_cpu_is_the_run_share_and_fails_closed():
    stats = {
        "at_go": {"h1": {"cpu_s": 0.1}, "h2": {"cpu_s": 0.0}},
        "end": {"h1": {"cpu_s": 0.6}, "h2": {"cpu_s": 0.25}},
    }
    assert cap.endpoint_cpu_s(stats) == pytest.approx(0.75)
    assert cap.endpoint_cpu_s(None) is None
    stats["end"]["h2"] = None  # a host that did not answer: not measured, never 0
    assert cap.endpoint_cpu_s(stats) is None
    shared = {  # one process for both hosts: its CPU once (each host's own cpu0 cancels)
        "at_go": {"h1": {"cpu_s": 0.1, "pid": 7}, "h2": {"cpu_s": 0.05, "pid": 7}},
        "end": {"h1": {"cpu_s": 0.9, "pid": 7}, "h2": {"cpu_s": 0.85, "pid": 7}},
    }
    assert cap.endpoint_cpu_s(shared) == pytest.approx(0.8)


def test_cpu_breakdown_per_delivered_data_packet():
    payload = mrc_payload(1500)
    stats = {"at_go": {"h1": {"cpu_s": 0.0}}, "end": {"h1": {"cpu_s": 0.5}}}
    counters = {"leaf1": {"cpu_s": 0.5, "cpu_sys_s": 0.1, "ports": {"a": {"tx_packets": 5000}}}}
    b = cap.cpu_breakdown(counters, stats, 1000 * payload, 1500)
    assert b["data_packets"] == 1000
    assert b["switch_us_per_data_packet"] == 500.0
    assert b["switch_kernel_us_per_data_packet"] == 100.0
    assert b["endpoint_us_per_data_packet"] == 500.0
    assert b["total_us_per_data_packet"] == 1000.0
    assert b["total_us_per_hop"] == 200.0
    assert b["hops_per_data_packet"] == 5.0
    missing = cap.cpu_breakdown(counters, None, 1000 * payload, 1500)
    assert missing["endpoint_us_per_data_packet"] is None
    assert missing["total_us_per_data_packet"] is None
    assert cap.cpu_breakdown(counters, stats, 0, 1500)["switch_us_per_data_packet"] is None


def test_needed_dilation():
    assert cap.needed_dilation(20e6, 10e3) == 2000
    assert cap.needed_dilation(1e3, 10e3) == 1.0
    assert cap.needed_dilation(1e3, 0) is None


@pytest.mark.parametrize("fabric", list(cap.FABRICS))
def test_capacity_scenarios_validate(fabric):
    sc = load(cap.scenario(fabric))
    assert sc.topology.link_mbps == cap.LINK_MBPS and sc.emulation.max_reruns == 0


def _capacity_result() -> dict:
    run = {
        "time_dilation": 2000.0, "valid": True, "invalid_reasons": [], "hops_per_real_s": 9000.0,
        "goodput_fraction": 0.87, "wall_s": 5.0,
    }  # fmt: skip
    bad = run | {"time_dilation": 1.0, "valid": False, "invalid_reasons": ["CPU saturated"],
                 "hops_per_real_s": 30000.0, "goodput_fraction": 0.1}  # fmt: skip
    return {
        "bench": "capacity",
        "link_mbps": 10000.0,
        "fabrics": [
            {
                "fabric": "2x2x2",
                "hosts": 4,
                "aggregate_gbps": 40.0,
                "auto_predicted_n": 2000.0,
                "smallest_valid_n": 2000.0,
                "bracketed": False,
                "hops_per_real_s": 9000.0,
                "switch_cpu_us_per_hop": 40.0,
                "wall_s": 5.0,
                "baseline_n1": bad,
                "runs": [run],
            }
        ],
        "budget_hops_per_real_s": 9000.0,
        "budget_from": "2x2x2",
        "switch_bench": {"cpu_us_per_packet": None, "note": "not measured"},
        "results_dir": "/tmp/x",
        "meta": {"quick": True, "cpus": 2, "load_avg": (1.0, 1.0, 1.0), "seconds": 12.0},
    }


def test_capacity_table_marks_invalid_runs_and_an_unbracketed_n():
    text = cap.format_capacity_table(_capacity_result())
    assert "2000 (upper)" in text and "INVALID, 30,000 hops/s" in text
    assert "(CPU saturated)" in text and "9,000" in text


# ----- fidelity ---------------------------------------------------------------------------------


def test_utilisation_and_figures():
    flows = [{"goodput_mbps": 8000.0}, {"goodput_mbps": 9000.0}, {"goodput_mbps": None}]
    assert fid_fig.flow_utilisation_pct(flows, 10000) == [80.0, 90.0, 0.0]
    fig = fid_fig.permutation_figures([[80.0, 90.0], [70.0, 100.0]])
    assert fig == {"mean": 85.0, "min": 70.0}
    assert fid_fig.permutation_figures([]) == {"mean": None, "min": None}


def test_steady_utilisation_is_the_stretch_in_which_every_flow_ran(tmp_path):
    """htsim's measure: per-flow goodput while every flow runs. Two flows collide for 4 bins
    (5 Gbps each); then A finishes and B runs alone at 10 Gbps. Over their completion times
    B reads 2/3 of the link; while both ran, half -- what the collision left each."""
    dt = 0.0002
    csv_path = tmp_path / "goodput.csv"
    rows = ["time_s,transport,flow,src,dst,goodput_mbps"]
    a = [5000.0] * 5 + [0.0] * 5
    b = [5000.0] * 5 + [10000.0] * 5
    for k in range(10):
        rows.append(f"{k * dt},x,all,,,{a[k] + b[k]}")
        rows.append(f"{k * dt},x,h1->h5,h1,h5,{a[k]}")
        rows.append(f"{k * dt},x,h2->h6,h2,h6,{b[k]}")
        rows.append(f"{k * dt},other,h1->h5,h1,h5,1.0")  # another transport's: not read
    csv_path.write_text("\n".join(rows) + "\n")
    series = fid_fig.read_flow_series(csv_path, "x")
    assert sorted(series) == ["h1->h5", "h2->h6"] and len(series["h1->h5"]) == 10
    flows = [
        {"src": "h1", "dst": "h5", "start_s": 0.0, "end_s": 5 * dt, "goodput_mbps": 5000.0},
        {"src": "h2", "dst": "h6", "start_s": 1e-6, "end_s": 10 * dt, "goodput_mbps": 7500.0},
    ]
    util, window = fid_fig.steady_utilisation_pct(series, flows, 10_000.0)
    assert window == pytest.approx((dt + 1e-6, 5 * dt))  # start-up bin left out
    assert util == pytest.approx([50.0, 50.0])
    assert fid_fig.flow_utilisation_pct(flows, 10_000.0) == [50.0, 75.0]  # per completion time
    # A flow that never posted: no stretch in which every flow ran.
    silent = [*flows, {"src": "h3", "dst": "h7", "start_s": None, "end_s": None}]
    assert fid_fig.steady_utilisation_pct(series, silent, 10_000.0) is None
    # Nothing finished: the stretch runs to the end of the series.
    running = [dict(f, end_s=None) for f in flows]
    util, window = fid_fig.steady_utilisation_pct(series, running, 10_000.0)
    assert window[1] == pytest.approx(10 * dt) and util[1] == pytest.approx(81.25)  # bins 2-9


def test_diff_points():
    assert fid_fig.diff_points(85.04, 87.7) == -2.7
    assert fid_fig.diff_points(None, 87.7) is None


def test_incast_figures():
    entry = {
        "flows": [{"fct_ms": 7.0}, {"fct_ms": 6.5}],
        "retransmits": {"rto": 2, "nack": 30},
        "trims": 40,
    }
    fig = fid_fig.incast_figures(entry, senders=2, nbytes=1_000_000, link_mbps=10_000)
    assert fig["ideal_us"] == 1600.0 and fig["last_us"] == 7000.0
    assert fig["ideal_over_last_pct"] == round(100 * 1600 / 7000, 1)
    assert fig["rto"] == 2 and fig["retransmits_total"] == 32 and fig["all_done"]
    unfinished = fid_fig.incast_figures({"flows": [{"fct_ms": None}]}, 2, 1_000_000, 10_000)
    assert not unfinished["all_done"] and unfinished["last_us"] is None


def test_incast_senders_are_off_the_receivers_leaf():
    assert fid_scen.incast_senders(fid_scen.FABRIC) == [f"h{i}" for i in range(5, 13)]
    with pytest.raises(BenchError):
        fid_scen.incast_senders({"leaves": 2, "hosts_per_leaf": 2})


def test_fidelity_scenarios_validate():
    sc = load(fid_scen.permutation_scenario(2, 1_000_000))
    assert sc.seed == 2 and sc.workload.kind == "permutation" and len(sc.hosts()) == 16
    assert sc.topology.forwarding == "source-routed" and sc.transports == ["mrc"]
    for row in fid_scen.PERMUTATION_ROWS:
        sc = load(fid_scen.permutation_scenario(1, 1_000_000, row=row))
        assert sc.transports == [fid_scen.row_key(row)] and row in fid_scen.HTSIM
    sc = load(fid_scen.permutation_scenario(1, 1_000_000, row="mrc-16ev"))
    assert sc.topology.forwarding == "ecmp" and sc.transport_spec("mrc-16ev").evs == 16
    assert load(fid_scen.permutation_scenario(1, 1_000_000, row="mrc-9000")).topology.mtu == 9000


def test_the_permutation_ceiling_counts_the_acks_on_the_same_link():
    # 1420 B of payload in a 1514 B frame, and a 90 B ACK for the flow the host receives (48 B
    # of UDP payload since the ACK carries `coalesced` and `ack_delay`, docs/wire-format.md).
    # An ACK per packet: 1420 B of payload in a 1514 B frame plus a 90 B ACK frame; coalesced
    # (the default, 4 in-order packets per ACK), a quarter of one.
    assert fid_fig.permutation_ceiling_pct(1500, 1) == pytest.approx(
        100 * 1420 / (1514 + 90), abs=0.05
    )
    assert fid_fig.permutation_ceiling_pct(1500, 4) == pytest.approx(
        100 * 1420 / (1514 + 90 / 4), abs=0.05
    )
    assert fid_fig.permutation_ceiling_pct(1500) == fid_fig.permutation_ceiling_pct(
        1500, TransportConfig().ack_every
    )
    assert 97.5 < fid_fig.permutation_ceiling_pct(9000, 1) < 98.5
    for n in (fid_scen.INCAST_SENDERS, fid_scen.QUICK_INCAST_SENDERS):
        sc = load(fid_scen.incast_scenario(n=n))
        assert len(sc.workload.srcs) == n and sc.topology.trimming
        assert f"incast-{n}" in fid_scen.HTSIM


def test_validity_cell():
    assert fid_fig.validity_cell([{"valid": True}, {"valid": True}]) == "valid"
    assert fid_fig.validity_cell([{"valid": True}, {"valid": False}]) == "INVALID (1/2)"
    assert fid_fig.validity_cell([]) == "INVALID (0/0)"


def _run(valid: bool = True) -> dict:
    return {"valid": valid, "invalid_reasons": [] if valid else ["CPU saturated (97%)"],
            "time_dilation": 10000.0, "wall_s": 30.0}  # fmt: skip


def test_fidelity_table():
    d = {
        "fabric": {**fid_scen.FABRIC, **fid_scen.LINKS},
        "seeds": [1],
        "permutation_bytes": 1_000_000,
        "permutation": [
            {
                "row": "mrc",
                "htsim": fid_scen.HTSIM["mrc"],
                "measured": {"mean": 86.0, "min": 80.0},
                "per_fct": {"mean": 85.1, "min": 79.3},
                "diff_points": {"mean": -1.7, "min": -7.0},
                "ceiling_pct": 88.8,
                "validity": "valid",
                "runs": [_run()],
            },
            {
                "row": "single-path",
                "htsim": fid_scen.HTSIM["single-path"],
                "measured": {"mean": 50.0, "min": 20.0},
                "diff_points": {"mean": -3.5, "min": 8.5},
                "ceiling_pct": 88.8,
                "validity": "INVALID (1/1)",
                "runs": [_run(False)],
            },
        ],
        "incast": {
            "senders": 4,
            "bytes_each": 1_000_000,
            "htsim": fid_scen.HTSIM["incast-4"],
            "measured": {
                "last_us": 3500.0,
                "ideal_us": 3200.0,
                "ideal_over_last_pct": 91.4,
                "rto": 0,
                "retransmits_total": 20,
                "all_done": True,
            },
            "diff_points": {"ideal_over_last_pct": -3.2},
            "validity": "valid",
            "runs": [_run()],
        },
        "results_dir": "/tmp/x",
        "meta": {"quick": True, "seconds": 100.0},
    }
    text = fid_table.format_fidelity_table(d)
    assert "88.8" in text and "source-routed" in text
    assert "-1.7 / -7.0" in text and "87.7 / 87.0" in text and "85.1 / 79.3" in text
    assert "INVALID single-path at N=10000: CPU saturated (97%)" in text
    assert "+8.5" in text and "-3.2" in text and "(quick)" in text


def test_slow_link_figures_split_the_flows_of_the_slow_links_leaf_from_the_others():
    flows = [
        {"src": "h1", "dst": "h5", "goodput_mbps": 6000.0},  # from leaf1
        {"src": "h9", "dst": "h2", "goodput_mbps": 7000.0},  # to leaf1
        {"src": "h5", "dst": "h9", "goodput_mbps": 8800.0},
        {"src": "h6", "dst": "h13", "goodput_mbps": 8600.0},
    ]
    fig = fid_fig.slow_link_figures(flows, {"h1", "h2", "h3", "h4"}, 10_000.0)
    assert fig == {
        "affected_flows": 2,
        "affected_mean": 65.0,
        "affected_min": 60.0,
        "others_mean": 87.0,
        "others_min": 86.0,
    }


def test_slow_link_scenario_degrades_one_link_from_the_start_for_each_policy():
    from testbed.scenario import validate

    for row, spec in fid_scen.SLOW_LINK_ROWS.items():
        sc = validate(fid_scen.slow_link_scenario(1, 1_000_000, row))
        assert sc.topology.forwarding == "source-routed"
        assert sc.transports == [row] and sc.transport_spec(row).lb == spec["lb"]
        (ev,) = sc.events
        assert (ev.action, ev.at, tuple(ev.link), ev.mbps) == (
            "degrade",
            0,
            fid_scen.SLOW_LINK,
            1000.0,
        )
        late = row == "mrc-reps-late-ecn"
        assert sc.topology.ecn_kb == (fid_scen.LATE_ECN_KB if late else None), row


def test_the_late_ecn_row_marks_one_full_frame_below_the_queue():
    from contracts.framing import DEFAULT_MTU, max_frame_bytes

    assert fid_scen.LATE_ECN_KB == pytest.approx(
        fid_scen.LINKS["queue_kb"] - max_frame_bytes(DEFAULT_MTU) / 1000
    )
    assert fid_scen.LATE_ECN_KB < fid_scen.LINKS["queue_kb"]
    assert set(fid_scen.SLOW_LINK_TOPOLOGY) <= set(fid_scen.SLOW_LINK_ROWS)


def test_fidelity_table_with_only_the_slow_link_section():
    d = {
        "fabric": {**fid_scen.FABRIC, **fid_scen.LINKS},
        "seeds": [1],
        "permutation_bytes": 2_000_000,
        "permutation": [],
        "slow_link": {
            "link": list(fid_scen.SLOW_LINK),
            "link_mbps": 1000.0,
            "seed": 1,
            "htsim": fid_scen.HTSIM["slow-link"],
            "rows": [
                {
                    "row": "mrc-reps-late-ecn",
                    "ecn_kb": 10.486,
                    "measured": {
                        "affected_flows": 8,
                        "affected_mean": 67.1,
                        "affected_min": 61.0,
                        "others_mean": 87.2,
                        "others_min": 86.9,
                    },
                    "validity": "valid",
                    "runs": [_run()],
                }
            ],
        },
        "incast": None,
        "results_dir": "/tmp/x",
        "meta": {"quick": False, "seconds": 30.0},
    }
    text = fid_table.format_fidelity_table(d)
    assert "slow link: leaf1-spine1 at 1 Gbps (10 %)" in text
    assert "mrc-reps-late-ecn" in text and "67.1 / 61.0" in text and "58.2" in text
    assert "10.486" in text
    assert "permutation, per-flow" not in text and "incast" not in text


def test_datapath_ratios_pair_each_fabric_measured_on_both_paths():
    results = [
        {
            "fabric": "4x4x4",
            "datapath": "python",
            "hops_per_real_s": 5000,
            "smallest_valid_n": 8000,
        },
        {"fabric": "4x4x4", "datapath": "c", "hops_per_real_s": 40000, "smallest_valid_n": 1000},
        {
            "fabric": "4x8x4",
            "datapath": "python",
            "hops_per_real_s": None,
            "smallest_valid_n": None,
        },
        {"fabric": "4x8x4", "datapath": "c", "hops_per_real_s": 30000, "smallest_valid_n": 2000},
        {"fabric": "2x2x2", "datapath": "c", "hops_per_real_s": 1, "smallest_valid_n": 1},
    ]
    assert cap.datapath_ratios(results) == [
        {"fabric": "4x4x4", "hops_per_real_s_c_vs_python": 8.0, "n_python_vs_c": 8.0},
        # no valid Python run: no ratio, never a made-up one
        {"fabric": "4x8x4", "hops_per_real_s_c_vs_python": None, "n_python_vs_c": None},
    ]


def test_a_full_run_measures_both_datapaths_where_c_is_built(monkeypatch):
    from contracts import datapath

    monkeypatch.delenv(datapath.ENV, raising=False)
    monkeypatch.setattr(datapath, "missing", lambda c: None)
    assert cap._datapaths(quick=False) == ("python", "c")
    assert cap._datapaths(quick=True) == ("c",)
    monkeypatch.setenv(datapath.ENV, "python")
    assert cap._datapaths(quick=False) == ("python",)
    monkeypatch.delenv(datapath.ENV)
    monkeypatch.setattr(datapath, "missing", lambda c: "not built")
    assert cap._datapaths(quick=False) == ("python",)


def test_only_names_a_section_of_the_bench_it_is_given_to(capsys):
    from testbed.cli.app import main

    assert main(["bench", "capacity", "--only", "incast"]) == 2
    assert "bench capacity has no section 'incast' (it has 2x2x2, 4x4x4, 4x8x4)" in (
        capsys.readouterr().err
    )
    assert main(["bench", "fidelity", "--only", "4x4x4"]) == 2
    assert "bench fidelity has no section '4x4x4'" in capsys.readouterr().err
    assert main(["bench", "hop", "--only", "4x4x4"]) == 2
    assert "bench hop has no sections" in capsys.readouterr().err


def test_peak_memory_is_the_largest_process_of_each_kind():
    from contracts.runtime import peak_rss_mb
    from testbed.experiment.transport_run import peak_rss

    own = peak_rss_mb()
    assert own is not None and own > 1  # this test process: some MB
    switch = {"leaf1": {"rss_peak_mb": 40.0}, "spine1": {"rss_peak_mb": 42.5}, "x": {}}
    eps = {"h1": {"rss_peak_mb": 60.0}, "h2": None, "h3": {"rss_peak_mb": 61.5}}
    assert peak_rss(switch, eps) == {"switch": 42.5, "endpoint": 61.5}
    assert peak_rss({}, None) == {"switch": None, "endpoint": None}

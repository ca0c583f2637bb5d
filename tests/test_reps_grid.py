"""`testbed bench reps-grid` without a fabric: its cells, failure modes, figures and claims."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from testbed.bench import reps_grid_scenarios as g
from testbed.bench.endpoint_bench import BenchError
from testbed.bench.reps_grid import check_claims, format_reps_grid_table, run_reps_grid
from testbed.bench.reps_grid_figures import (
    avoid_figures,
    endpoint_figures,
    ev_failures,
    fct_figures,
    nearest_rank,
    switch_drops,
)
from testbed.cli.app import main
from testbed.experiment.api import load
from testbed.harness.ev_controller import path_links
from testbed.harness.records import Failure, failure_of


@pytest.mark.parametrize("fabric", list(g.FABRICS))
@pytest.mark.parametrize("mode", g.MODES)
def test_every_failure_mode_is_a_valid_scenario_on_both_fabrics(mode: str, fabric: str) -> None:
    sc = load(g.scenario(fabric, "permutation", mode, "reps"))
    p = sc.fabric().params
    assert (p.spines, p.leaves, p.hosts_per_leaf, p.link_mbps) == (4, 8, 4, 800_000.0)
    assert p.uplink_mbps == (800_000.0 if fabric == "1to1" else 100_000.0)
    assert (len(sc.events) == 0) == (mode == "none")
    assert all(e.is_failure for e in sc.events if e.action != "heal")


@pytest.mark.parametrize("row", list(g.ROWS))
def test_every_load_balancer_and_the_incast_are_valid(row: str) -> None:
    sc = load(g.scenario("1to1", "incast", "link-failed", row))
    assert sc.workload.dst == "h1" and len(sc.workload.srcs) == 8
    leaf_of = {h: (int(h[1:]) - 1) // 4 for h in sc.workload.srcs}
    assert 0 not in leaf_of.values()  # no sender on the receiver's leaf


def test_the_rows_without_copies_send_none_and_meet_the_simulators_rows() -> None:
    """The simulator resends without copies: `reps-1copy` and `oblivious-1copy` are its
    `reps` and `spraying` with MRC's copies off, and a grid runs them only when asked."""
    from endpoint.process_config import EndpointConfig, job_transport_config
    from testbed.bench.reps_grid import HTSIM_NAMES, _chosen
    from testbed.harness.endpoint_driver import job_request

    cfg = EndpointConfig.from_obj({"hosts": {"h1": ["10.1.1.1"], "h2": ["10.1.2.1"]}})
    for row, sim in (("reps-1copy", "reps"), ("oblivious-1copy", "spraying")):
        sc = load(g.scenario("8to1", "incast", "switch-failed", row))
        tcfg = job_transport_config(cfg, job_request(sc, row))
        assert tcfg.tail_copies == 1 and tcfg.lb == row.split("-")[0]
        assert HTSIM_NAMES["row"][row] == sim
    assert (
        job_transport_config(
            cfg, job_request(load(g.scenario("8to1", "incast", "none", "reps")), "reps")
        ).tail_copies
        == 3
    )
    rows = {c[3] for c in _chosen(None, None, None, None, {})}
    assert rows == set(g.DEFAULT_ROWS) and "reps-1copy" not in rows


def test_the_fixed_rto_rows_set_mrcs_65_us_ack_timeout_and_nothing_else() -> None:
    """`*-fixed-rto` are the two balancers with MRC's local ACK timeout near the simulator's
    constant one. What that timeout does (fixed, not RFC 6298's, doubling after the linear
    retries) is tests/test_endpoint_qp_timeout.py's; this checks the rows ask for it."""
    from endpoint.config import MRC_RETRY_LINEAR_MAX, MRC_TIMEOUT_UNIT_S
    from endpoint.process_config import EndpointConfig, job_transport_config
    from testbed.bench.reps_grid import HTSIM_NAMES, _chosen
    from testbed.harness.endpoint_driver import job_request

    cfg = EndpointConfig.from_obj({"hosts": {"h1": ["10.1.1.1"], "h2": ["10.1.2.1"]}})
    for row, sim in (("reps-fixed-rto", "reps"), ("oblivious-fixed-rto", "spraying")):
        sc = load(g.scenario("8to1", "permutation", "switch-degraded", row))
        tcfg = job_transport_config(cfg, job_request(sc, row))
        assert tcfg.ack_timeout == g.FIXED_ACK_TIMEOUT and tcfg.lb == row.split("-")[0]
        assert tcfg.tail_copies == 3  # only the timeout differs from the plain row
        assert abs(MRC_TIMEOUT_UNIT_S * 2**tcfg.ack_timeout - 65.5e-6) < 0.1e-6
        assert HTSIM_NAMES["row"][row] == sim
    both = job_transport_config(
        cfg, job_request(load(g.scenario("8to1", "permutation", "none", "reps-1copy-fixed-rto")),
                         "reps-1copy-fixed-rto")
    )  # fmt: skip
    assert (both.ack_timeout, both.tail_copies, both.lb) == (g.FIXED_ACK_TIMEOUT, 1, "reps")
    assert both.retry_linear_cnt == 0  # backs off at once, as MRC's default
    sim = job_transport_config(
        cfg, job_request(load(g.scenario("8to1", "permutation", "none", "reps-sim-resend")),
                         "reps-sim-resend")
    )  # fmt: skip
    assert (sim.ack_timeout, sim.tail_copies, sim.retry_linear_cnt) == (
        g.FIXED_ACK_TIMEOUT,
        1,
        MRC_RETRY_LINEAR_MAX,
    )
    assert HTSIM_NAMES["row"]["reps-sim-resend"] == "reps"
    plain = load(g.scenario("8to1", "permutation", "switch-degraded", "reps"))
    assert job_transport_config(cfg, job_request(plain, "reps")).ack_timeout is None
    assert "reps-fixed-rto" not in {c[3] for c in _chosen(None, None, None, None, {})}


def test_the_permutation_leaves_every_leaf_and_uses_4_mib_flows() -> None:
    from testbed.scenario.traffic import flows

    fl = flows(load(g.scenario("1to1", "permutation", "none", "reps")))
    assert len(fl) == 32 and {f.bytes for f in fl} == {4 * 1024 * 1024}
    assert all((int(f.src[1:]) - 1) // 4 != (int(f.dst[1:]) - 1) // 4 for f in fl)


def test_the_failure_modes_fail_what_the_simulator_fails() -> None:
    ev = g.mode_events("link-failed-100us")
    assert [(e["at"], e["action"], e["direction"]) for e in ev] == [
        (10e-6, "blackhole", ["spine2", "leaf2"]),  # one cable: one direction of the link
        (110e-6, "heal", ["spine2", "leaf2"]),
    ]
    assert g.failure_window("link-failed-100us") == (10e-6, 110e-6)
    assert g.failure_window("link-failed") == (0.0, None)
    assert g.failure_window("none") is None
    dead = g.mode_events("switch-failed")
    assert sorted(tuple(e["direction"]) for e in dead) == [
        ("spine4", f"leaf{k}") for k in range(1, 9)
    ]  # a dead spine forwards nothing
    every = g.mode_events("switch-drops-every-10th")
    assert all(e["direction"][0] == "spine4" and e["drop_every"] == 10 for e in every)
    assert len(every) == 8
    # "Degraded" is lossy in the simulator (10 % at a switch, 33 % on a cable), on any fabric
    # (a switch is also slowed: test_a_degraded_switch_is_slowed_to_a_tenth_and_lossy_...).
    sw = g.mode_events("switch-degraded")
    assert {e["percent"] for e in sw if e["action"] == "loss"} == {10.0}
    one, eight = (g.scenario(f, "permutation", "link-degraded", "reps") for f in ("1to1", "8to1"))
    assert one["events"] == eight["events"] and one["topology"] != eight["topology"]
    assert g.mode_events("link-degraded")[0]["percent"] == 33.0
    # 1 % BER: every cross-leaf packet crosses one uplink (cable BER) and one spine (switch).
    assert len(g.mode_events("link-ber-1pct")) == 32
    spines = {f"spine{k}" for k in range(1, 5)}
    assert {e["direction"][0] for e in g.mode_events("switch-ber-1pct")} == spines
    assert {e["direction"][1] for e in g.mode_events("link-ber-1pct")} == spines
    tenp = {tuple(e["direction"]) for e in g.mode_events("10pct-links-failed", "8to1", "incast")}
    assert len(tenp) == 6 and all(leaf.startswith("leaf") for leaf, _ in tenp)  # uplinks
    assert set(g.MODES) - {"none"} == set(g.HTSIM_MODE)  # each mode has its simulator file
    with pytest.raises(ValueError, match="mode: one of"):
        g.mode_events("meteor-strike")


HTSIM_RESULTS = Path(__file__).resolve().parents[1] / "tools" / "reps_htsim" / "results"
HTSIM_TRAFFIC = {"permutation": "perm", "incast": "incast8"}


@pytest.mark.parametrize("fabric", sorted(g.FABRICS))
@pytest.mark.parametrize("traffic", g.TRAFFIC)
@pytest.mark.parametrize(
    "mode",
    [
        "link-failed",
        "link-failed-100us",
        "switch-failed",
        "switch-failed-100us",
        "link-degraded",
        "switch-and-link-failed-100us",
        "switch-and-link-failed",
        "10pct-links-failed",
        "10pct-links-degraded",
        "10pct-switches-failed",
        "10pct-switches-degraded",
    ],
)
def test_each_cell_fails_the_element_the_simulators_reps_run_failed(
    fabric: str, traffic: str, mode: str
) -> None:
    """The simulator picks its element per run (the first a packet meets): in the incast it is
    a sender's uplink, not the permutation's. Each cell fails what that cell's REPS run did."""
    name = f"ls_{fabric}__{HTSIM_TRAFFIC[traffic]}__{g.HTSIM_MODE[mode]}__reps.json"
    want = {e["element"] for e in json.loads((HTSIM_RESULTS / name).read_text())["failure_events"]}
    ev = [e for e in g.mode_events(mode, fabric, traffic) if e["action"] != "heal"]
    cables = {"->".join(e["direction"]) for e in ev}
    spines = {sw for sw in (f"spine{k}" for k in range(1, 5)) if set(g.egress(sw)) <= {
        tuple(e["direction"]) for e in ev}}  # fmt: skip
    want_spines = {x for x in want if "->" not in x}
    want_cables = want - want_spines
    # A cable of a dead spine is dead with it (the simulator sometimes picked one of those).
    assert spines == want_spines and want_cables <= cables
    assert all(c in want_cables or c.split("->")[0] in spines for c in cables)


@pytest.mark.parametrize("fabric", sorted(g.FABRICS))
@pytest.mark.parametrize("traffic", g.TRAFFIC)
def test_link_flaps_fail_the_simulators_cables_in_its_order_then_go_on(
    fabric: str, traffic: str
) -> None:
    """In the incast the simulator's flaps hit the receiver's-leaf downlinks, which carry all
    of its data; cables drawn at random would mostly carry nothing."""
    name = f"ls_{fabric}__{HTSIM_TRAFFIC[traffic]}__{g.HTSIM_MODE['link-flaps']}__reps.json"
    want = [e["element"] for e in json.loads((HTSIM_RESULTS / name).read_text())["failure_events"]]
    holes = [e for e in g.mode_events("link-flaps", fabric, traffic) if e["action"] == "blackhole"]
    assert ["->".join(e["direction"]) for e in holes[: len(want)]] == want
    assert [e["at"] for e in holes[:3]] == pytest.approx([10e-6, 110e-6, 210e-6])
    assert len(holes) > len(want) and holes[-1]["at"] < g.DURATION_S  # it goes on to the end


@pytest.mark.parametrize("fabric", sorted(g.FABRICS))
def test_the_incast_has_the_simulators_senders_and_receiver(fabric: str) -> None:
    """Where the senders sit decides which flows a failed uplink touches."""
    runs = sorted(HTSIM_RESULTS.glob(f"ls_{fabric}__incast8__*__reps.json"))
    assert len(runs) == len(g.MODES)  # one per mode, "none" included
    for f in runs:
        flows = json.loads(f.read_text())["flows"]
        assert sorted(x["src"] for x in flows) == sorted(g.INCAST_SRCS), f.name
        assert {x["dst"] for x in flows} == {g.INCAST_DST}, f.name


def test_an_incast_fails_a_senders_uplink_not_an_ack_only_cable() -> None:
    (hole,) = g.mode_events("link-failed", "1to1", "incast")
    leaf = hole["direction"][0]
    hosts = {f"h{4 * (int(leaf[4:]) - 1) + k}" for k in range(1, 5)}
    assert hole["direction"][1].startswith("spine") and hosts & set(g.INCAST_SRCS)
    with pytest.raises(ValueError, match="fabric, traffic"):
        g.mode_events("link-failed", "1to1", "alltoall")


def test_flaps_fail_a_new_cable_every_100us_for_50us() -> None:
    ev = g.mode_events("link-flaps")
    holes = [e for e in ev if e["action"] == "blackhole"]
    heals = {tuple(e["direction"]): e["at"] for e in ev if e["action"] == "heal"}
    starts = [e["at"] for e in holes]
    assert starts[0] == pytest.approx(10e-6) and holes[0]["direction"] == ["leaf1", "spine4"]
    assert all(b - a == pytest.approx(100e-6) for a, b in zip(starts, starts[1:], strict=False))
    assert starts[-1] < g.DURATION_S
    cables = [tuple(e["direction"]) for e in holes]
    assert len(set(cables)) == len(cables)  # 20 flaps, 64 cables: a new one each time
    assert all(heals[tuple(e["direction"])] == pytest.approx(e["at"] + 50e-6) for e in holes)
    # The 8:1 incast's simulator run flapped spine1 -> leaf1 twice running: so does its cell.
    ev = g.mode_events("link-flaps", "8to1", "incast")
    holes = [e for e in ev if e["action"] == "blackhole"]
    heals = [(tuple(e["direction"]), e["at"]) for e in ev if e["action"] == "heal"]
    assert [d for d, _ in heals] == [tuple(e["direction"]) for e in holes]
    assert [t for _, t in heals] == pytest.approx([e["at"] + 50e-6 for e in holes])
    spines = g.mode_events("switch-flaps")
    first = {e["direction"][0] for e in spines if e["at"] == pytest.approx(10e-6)}
    assert first == {"spine4"}


def test_nearest_rank_and_fct_figures_never_hide_an_unfinished_flow() -> None:
    assert nearest_rank([5, 1, 3], 50) == 3 and nearest_rank(list(range(1, 101)), 99) == 99
    flows = [{"fct_ms": x} for x in (0.05, 0.06, 0.07)] + [{"fct_ms": None}]
    f = fct_figures(flows)
    assert f["median_us"] == 60.0 and f["unfinished"] == 1
    assert f["p99_us"] is None and f["max_us"] is None  # they fall on the unfinished flow
    done = fct_figures(flows[:3])
    assert (done["median_us"], done["p99_us"], done["max_us"]) == (60.0, 70.0, 70.0)


def test_the_tail_figure_names_the_slowest_flow_and_what_it_resent() -> None:
    flows = [
        {"src": "h1", "dst": "h9", "fct_ms": 0.30, "retransmits": {"loss": 2}},
        {"src": "h2", "dst": "h10", "fct_ms": 0.45, "retransmits": {"tlp": 1, "loss": 3}},
        {"src": "h3", "dst": "h11", "fct_ms": 0.41},
    ]
    t = fct_figures(flows)["tail"]
    assert t == {
        "flow": "h2->h10",
        "fct_us": 450.0,
        "after_second_us": 40.0,
        "retransmits": {"loss": 3, "tlp": 1},
    }
    stuck = fct_figures(flows + [{"src": "h4", "dst": "h12", "fct_ms": None}])["tail"]
    assert stuck["flow"] == "h4->h12" and stuck["fct_us"] is None
    assert stuck["after_second_us"] is None and stuck["retransmits"] == {}
    assert fct_figures([])["tail"] is None


def _write_run(tmp: Path) -> Path:
    """A run folder as the runner leaves it, with the records the figures read."""
    raw = tmp / "raw" / "reps"
    (raw / "endpoints").mkdir(parents=True)
    sc = load(g.scenario("1to1", "permutation", "link-failed-100us", "reps"))
    fab = sc.fabric()
    # An EV of h1 -> h5 whose data path crosses leaf1-spine1, and one that does not.
    crossing = next(
        ev for ev in range(1, 400) if ("leaf2", "spine2") in path_links(fab, "h1", "h5", ev, 1)
    )
    other = next(
        ev
        for ev in range(1, 400)
        if ("leaf2", "spine2") not in path_links(fab, "h1", "h5", ev, 1)
        and ("leaf2", "spine2") not in path_links(fab, "h5", "h1", ev, 1)
    )
    h1 = [
        {"type": "job", "job": 1, "event": "go", "t": 100.0},
        {"type": "ev", "job": 1, "peer": "h5", "ev": crossing, "new": "failed", "t": 100.000040},
        {"type": "ev", "job": 1, "peer": "h5", "ev": other, "new": "failed", "t": 100.000050},
        {"type": "ev", "job": 1, "peer": "h5", "ev": crossing, "new": "failed", "t": 100.000300},
    ]
    h5 = [
        {"type": "job", "job": 1, "event": "go", "t": 100.0},
        {"type": "counters", "job": 1, "peer": "h1", "qp": 7,
         "counters": {"nack_tx": 3, "data_rx": 10, "ooo_rx": 2, "ooo_max_psns": 4}},
        {"type": "counters", "job": 1, "peer": "h1", "qp": 7,
         "counters": {"nack_tx": 5, "data_rx": 20, "ooo_rx": 5, "ooo_max_psns": 9}},
    ]  # fmt: skip
    for host, recs in (("h1", h1), ("h5", h5)):
        (raw / "endpoints" / f"{host}.jsonl").write_text("\n".join(json.dumps(r) for r in recs))
    (raw / "switch_counters.json").write_text(
        json.dumps(
            {
                "leaf1": {
                    "drops": {"no_route": 1},
                    "ports": {"leaf1-eth4": {"drops": {"blackhole": 7}}},
                },
                "spine1": {"drops": {}, "ports": {"spine1-eth0": {"drops": {"blackhole": 2}}}},
            }
        )
    )
    return raw


def test_figures_from_a_run_folder(tmp_path: Path) -> None:
    raw = _write_run(tmp_path)
    e = endpoint_figures(raw)
    assert e == {"nacks": 5, "trimmed_rx": 0, "data_rx": 20, "ooo_ratio": 0.25, "ooo_max_psns": 9}
    assert switch_drops(raw) == {"blackhole": 9, "no_route": 1}
    fails = ev_failures(raw)
    assert [round(f.t * 1e6) for f in fails] == [40, 50, 300]
    sc = load(g.scenario("1to1", "permutation", "link-failed-100us", "reps"))
    a = avoid_figures(fails, sc, "reps", g.failed_links("link-failed-100us"), (10e-6, 110e-6))
    # The crossing EV retired at 40 µs: 30 µs after the failure; the one at 300 µs came after
    # the heal and the one at 50 µs does not cross the link.
    # These records carry no last send (written before endpoints kept it): the retirement
    # stands in, and the figure says so.
    assert a == {
        "avoided_us": 30.0,
        "avoided_p90_us": None,
        "avoided_from": "retirement",
        "retired_us": 30.0,
        "evs_retired": 1,
    }
    assert avoid_figures(fails, sc, "reps", [], None)["avoided_us"] is None


def test_avoid_figures_take_the_last_send_on_a_damaged_ev_not_its_retirement() -> None:
    """A tail-loss probe can retire, at 115 µs, an EV last used at 25 µs: traffic had left
    the link at 25 µs, and that is what the claim is about."""
    sc = load(g.scenario("1to1", "permutation", "link-failed-100us", "reps"))
    fab, links = sc.fabric(), g.failed_links("link-failed-100us")
    crossing = [
        ev for ev in range(1, 400) if ("leaf2", "spine2") in path_links(fab, "h1", "h5", ev, 1)
    ][:2]
    window = (10e-6, 110e-6)
    fails = [
        Failure("h1", "h5", crossing[0], 115e-6, 25e-6),  # retired late, left early
        Failure("h1", "h5", crossing[1], 40e-6, 18e-6),
        Failure("h1", "h5", crossing[1], 300e-6, 250e-6),  # after the heal: not this failure
    ]
    a = avoid_figures(fails, sc, "reps", links, window)
    assert a == {
        "avoided_us": 15.0,
        "avoided_p90_us": 15.0,
        "avoided_from": "last_send",
        "retired_us": 105.0,
        "evs_retired": 2,
    }
    # One EV explored late sets the last send; 90 % of them had left long before.
    many = [
        ev for ev in range(1, 4000) if ("leaf2", "spine2") in path_links(fab, "h1", "h5", ev, 1)
    ][:10]
    late = [Failure("h1", "h5", ev, 100e-6, (10 + k) * 1e-6) for k, ev in enumerate(many[:9])]
    late.append(Failure("h1", "h5", many[9], 105e-6, 90e-6))
    b = avoid_figures(late, sc, "reps", links, window)
    assert (b["avoided_us"], b["avoided_p90_us"], b["evs_retired"]) == (80.0, 8.0, 10)
    # Every damaged EV last used before the failure began: traffic avoided it from the start.
    early = [Failure("h1", "h5", crossing[0], 60e-6, 5e-6)]
    assert avoid_figures(early, sc, "reps", links, window)["avoided_us"] == 0.0


def test_an_ev_records_last_send_is_read_on_the_workloads_clock() -> None:
    rec = {"peer": "h5", "ev": 7, "t": 5.0}
    assert failure_of("h1", {**rec, "last_tx": 4.5}, 4.0) == Failure("h1", "h5", 7, 1.0, 0.5)
    assert failure_of("h1", {**rec, "last_tx": None}, 4.0).last_tx == -math.inf  # never sent
    assert failure_of("h1", rec, 4.0).last_tx is None  # written before endpoints kept it


def _cell(mode: str, row: str, p99: float | None, valid: bool = True, **kw) -> dict:
    return {
        "fabric": "1to1", "traffic": "permutation", "mode": mode, "row": row,
        "median_us": 50.0, "p99_us": p99, "max_us": p99, "unfinished": 0 if p99 else 1,
        "lost_bytes": 0, "nacks": 1, "ooo_ratio": 0.1, "ooo_max_psns": 3,
        "avoided_us": kw.get("avoided_us"), "avoided_from": kw.get("avoided_from", "last_send"),
        "retired_us": kw.get("avoided_us"), "drops": {"blackhole": 3},
        "run": {"valid": valid, "time_dilation": 500000, "invalid_reasons": [] if valid else ["CPU saturated"]},
    }  # fmt: skip


def test_claims_pass_fail_and_ignore_invalid_runs() -> None:
    cells = [
        _cell("link-failed", "reps", 80.0, avoided_us=40.0),
        _cell("link-failed", "oblivious", 120.0),
        _cell("link-degraded", "reps", 90.0),
        _cell("link-degraded", "oblivious", 95.0),
    ]
    c = {x["claim"][:20]: x for x in check_claims(cells)}
    assert [x["verdict"] for x in c.values()] == ["pass", "pass", "pass"]
    worse = [*cells[:3], _cell("link-degraded", "oblivious", 85.0)]
    assert check_claims(worse)[1]["verdict"] == "fail"
    slow = [_cell("link-failed", "reps", 80.0, avoided_us=150.0), *cells[1:]]
    assert check_claims(slow)[0]["verdict"] == "fail"
    assert check_claims(slow)[0]["numbers"]["1to1/permutation/link-failed"]["last_us"] == 150.0
    # Only the last retirement known: under the bar passes, over it decides nothing.
    bound = [_cell("link-failed", "reps", 80.0, avoided_us=150.0, avoided_from="retirement")]
    assert check_claims([*bound, *cells[1:]])[0]["verdict"] == "undecided (upper bound only)"
    bound = [_cell("link-failed", "reps", 80.0, avoided_us=60.0, avoided_from="retirement")]
    assert check_claims([*bound, *cells[1:]])[0]["verdict"] == "pass"
    # An INVALID run is no evidence either way.
    invalid = [_cell("link-failed", "reps", 500.0, valid=False, avoided_us=900.0), *cells[1:]]
    v = check_claims(invalid)
    assert v[0]["verdict"] == "not measured"
    assert "1to1/permutation/link-failed" not in v[1]["numbers"]
    lossy = [_cell("link-failed", "reps", None, avoided_us=40.0), *cells[1:]]
    assert check_claims(lossy)[2]["verdict"] == "fail"
    table = format_reps_grid_table({"results_dir": "x", "cells": invalid, "claims": v})
    assert "INVALID (CPU saturated)" in table and "NOT MEASURED" in table


def test_bad_cell_filters_are_refused_before_anything_runs(capsys) -> None:
    with pytest.raises(BenchError, match="--modes: unknown 'meteor'"):
        run_reps_grid(modes=["meteor"])
    with pytest.raises(BenchError, match="--rows: unknown 'circular'"):
        run_reps_grid(rows=["circular"])  # the paper's REPS circular: not a row here
    assert main(["bench", "fidelity", "--rows", "reps"]) == 2
    assert "--rows: only bench reps-grid" in capsys.readouterr().err


def test_the_authors_simulator_is_read_by_the_papers_names(tmp_path: Path) -> None:
    from testbed.bench.reps_grid import _with_htsim, diff_pct, htsim_cell

    (tmp_path / "ls_8to1__incast8__fail_one_cable__spraying.json").write_text(
        json.dumps({"median_us": 100.0, "p99_us": 200.0, "max_us": 210.0, "flows_completed": 8,
                    "flows_total": 8, "nacks": 4, "out_of_order": {"ooo_ratio_mean": 0.5}})
    )  # fmt: skip
    ref = htsim_cell("8to1", "incast", "link-failed", "oblivious", root=tmp_path)
    assert ref["p99_us"] == 200.0 and ref["ooo_ratio"] == 0.5
    assert htsim_cell("8to1", "incast", "link-failed", "wrr", root=tmp_path) is None  # no wrr
    assert htsim_cell("1to1", "incast", "link-failed", "oblivious", root=tmp_path) is None
    assert diff_pct(230.0, 200.0) == 15.0 and diff_pct(None, 200.0) is None
    cell = _cell("link-failed", "reps", 80.0)
    cell["htsim"] = {**ref, "flows_completed": 8, "flows_total": 8}
    cell["htsim_diff_pct"] = {"median_us": diff_pct(50.0, 100.0), "p99_us": diff_pct(80.0, 200.0)}
    table = format_reps_grid_table({"results_dir": "x", "cells": [cell], "claims": []})
    assert "htsim reps" in table and "differs by more than 15 %: median -50 %, p99 -60 %" in table
    assert _with_htsim(_cell("none", "wrr", 50.0))["htsim"] is None


def test_the_markdown_table_marks_invalid_runs_and_large_gaps() -> None:
    from testbed.bench.reps_grid import format_reps_grid_markdown

    ok = _cell("link-failed", "reps", 80.0, avoided_us=40.0)
    ok["htsim"] = {"median_us": 50.0, "p99_us": 160.0, "max_us": 170.0, "flows_completed": 32,
                   "flows_total": 32}  # fmt: skip
    ok["htsim_diff_pct"] = {"median_us": 0.0, "p99_us": -50.0}
    bad = _cell("link-failed", "oblivious", 90.0, valid=False)
    md = format_reps_grid_markdown({"cells": [ok, bad], "claims": check_claims([ok, bad])})
    rows = [line for line in md.splitlines() if line.startswith("| link-failed")]
    assert "(**p99 -50 %**)" in rows[0] and "valid, N=500000" in rows[0] and "| 40/40 |" in rows[0]
    assert "**INVALID**" in rows[1]
    assert "- **not measured**: REPS beats oblivious" in md  # the invalid run is no evidence


def test_a_cell_run_under_another_definition_is_not_read_back_as_this_one(tmp_path: Path) -> None:
    from testbed.bench.reps_grid import read_cell

    raw = _write_run(tmp_path)
    sc = g.scenario("1to1", "permutation", "link-failed-100us", "reps")
    ran = load(sc).model_dump(mode="json", exclude_none=True)
    entry = {"flows": [{"fct_ms": 0.06}], "lost_bytes": 0, "emulation": {"valid": True}}
    summary = {"transports": {"reps": entry}, "provenance": {"scenario": ran}}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    cell = ("1to1", "permutation", "link-failed-100us", "reps")
    assert read_cell(tmp_path, *cell)["median_us"] == 60.0
    assert raw.is_dir()
    ran["events"] = []  # as if the mode had been defined otherwise when it ran
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(BenchError, match="a different `events` than the grid defines now"):
        read_cell(tmp_path, *cell)


def test_read_back_judges_the_cells_in_a_folder_and_runs_none(tmp_path: Path, capsys) -> None:
    """A grid built over several sittings is read whole, without root: the cells present are
    judged, the chosen ones absent are listed as missing."""
    from testbed.bench.reps_grid import read_back_reps_grid

    cell = tmp_path / "1to1-permutation-link-failed-100us-reps"
    _write_run(cell)
    sc = g.scenario("1to1", "permutation", "link-failed-100us", "reps")
    ran = load(sc).model_dump(mode="json", exclude_none=True)
    entry = {
        "flows": [{"fct_ms": 0.06}],
        "lost_bytes": 0,
        "emulation": {"valid": True, "time_dilation": 500000},
    }
    summary = {"transports": {"reps": entry}, "provenance": {"scenario": ran}}
    (cell / "summary.json").write_text(json.dumps(summary))
    d = read_back_reps_grid(
        tmp_path, fabrics=["1to1"], traffic=["permutation"], modes=["link-failed-100us"]
    )
    assert [c["row"] for c in d["cells"]] == ["reps"] and d["cells"][0]["median_us"] == 60.0
    assert d["cells"][0]["htsim"]["file"].startswith("ls_1to1__perm__fail_one_cable_after")
    assert "1to1-permutation-link-failed-100us-oblivious" in d["missing"]
    assert len(d["missing"]) == len(g.DEFAULT_ROWS) - 1
    assert main(["bench", "reps-grid", "--read-back", "--out", str(tmp_path), "--modes",
                 "link-failed-100us", "--fabrics", "1to1", "--traffic", "permutation"]) == 0  # fmt: skip
    assert "not in the folder (not run): 4 cells" in capsys.readouterr().out
    assert main(["bench", "reps-grid", "--read-back"]) == 2
    assert "--read-back: name the results folder" in capsys.readouterr().err
    assert main(["bench", "fidelity", "--read-back", "--out", str(tmp_path)]) == 2
    with pytest.raises(BenchError, match="no such results folder"):
        read_back_reps_grid(tmp_path / "nowhere")


def test_the_ecmp_row_is_mrcs_recovery_on_one_ev_against_the_simulators_ecmp() -> None:
    """`single-path` and `roce` recover as RC does (go-back-N); the simulator's ECMP row
    recovers as its REPS does, on one path: `ecmp` is MRC's recovery on one EV."""
    from endpoint.process_config import EndpointConfig, job_transport_config
    from testbed.bench.reps_grid import HTSIM_NAMES, _chosen
    from testbed.harness.endpoint_driver import job_request

    cfg = EndpointConfig.from_obj({"hosts": {"h1": ["10.1.1.1"], "h2": ["10.1.2.1"]}})
    sc = load(g.scenario("1to1", "permutation", "link-failed", "ecmp"))
    tcfg = job_transport_config(cfg, job_request(sc, "ecmp"))
    assert tcfg.mode.value == "mrc" and tcfg.num_evs == 1 and tcfg.tail_copies == 1
    assert HTSIM_NAMES["row"]["ecmp"] == "ecmp" == HTSIM_NAMES["row"]["single-path"]
    assert "ecmp" not in {c[3] for c in _chosen(None, None, None, None, {})}


def test_a_degraded_switch_is_slowed_to_a_tenth_and_lossy_as_the_simulators() -> None:
    """sim/failuregenerator.cpp divides every port's rate of a degraded switch by 10 and drops
    10 % of its packets; a degraded cable only drops."""
    for fabric, rate in (("1to1", 80_000.0), ("8to1", 10_000.0)):
        events = g.mode_events("switch-degraded", fabric, "permutation")
        slowed = {tuple(e["direction"]): e["mbps"] for e in events if e["action"] == "degrade"}
        lossy = {tuple(e["direction"]): e["percent"] for e in events if e["action"] == "loss"}
        assert slowed == {c: rate for c in g.egress("spine4")}
        assert lossy == {c: 10.0 for c in g.egress("spine4")}
    ten = g.mode_events("10pct-switches-degraded", "8to1", "permutation")
    assert {e["action"] for e in ten} == {"degrade", "loss"} and len(ten) == 4 * 8
    cable = g.mode_events("link-degraded", "8to1", "permutation")
    assert [e["action"] for e in cable] == ["loss"] and cable[0]["percent"] == 33.0

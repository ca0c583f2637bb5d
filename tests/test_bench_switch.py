"""`testbed bench switch --json --quick` on real namespaces: the JSON shape and sanity facts.

No timing targets here (the machine is shared and noisy; the figures are in
docs/performance.md). What is asserted can still fail: a DUT that forwards nothing, a shaper
that exceeds its rate or misses 10 Mbps, a queue whose delay is not backlog/rate, a kernel
bridge slower than a per-packet scapy loop, a leftover namespace.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from testbed.bench import switch_bench
from tests.conftest import tb

DUTS = {"switch", "switch_unshaped", "repeater", "scapy_naive", "kernel_bridge"}
RATIOS = {"switch_vs_repeater", "switch_vs_scapy_naive", "switch_vs_kernel_bridge"}


def _bench_namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.startswith("tbb")}


@pytest.fixture(scope="module")
def bench():
    if os.geteuid() != 0:
        pytest.skip("needs root to create network namespaces (run: sudo make test)")
    before = _bench_namespaces()
    proc = tb("bench", "switch", "--json", "--quick", timeout=180)
    left = _bench_namespaces() - before
    return json.loads(proc.stdout), left


@pytest.mark.netns
def test_json_shape(bench):
    result, _ = bench
    assert result["bench"] == "switch"
    assert [r["frame_bytes"] for r in result["results"]] == [1400, 64]
    for r in result["results"]:
        assert set(r["pps"]) == DUTS
        assert set(r["ratio"]) == RATIOS
        assert all(isinstance(v, (int, float)) for v in r["pps"].values())
        assert all(isinstance(v, float) for v in r["ratio"].values())
    assert [s["mbps"] for s in result["shaper"]] == [10, 100, 200]
    for s in result["shaper"]:
        assert {"mbps", "measured_mbps", "error_pct"} <= set(s)
    assert [q["mbps"] for q in result["queue_delay"]] == [10, 50]
    for q in result["queue_delay"]:
        assert {
            "expected_ms",
            "expected_at_drain_ms",
            "drain_mbps",
            "measured_ms_median",
            "measured_ms_p99",
            "backlog_bytes",
        } <= set(q)
    assert isinstance(result["rss_mb"]["switch"], float)


@pytest.mark.netns
def test_every_dut_forwards_and_ratios_are_of_these_figures(bench):
    result, _ = bench
    for r in result["results"]:
        pps = r["pps"]
        assert all(v > 0 for v in pps.values()), pps
        for base in ("repeater", "scapy_naive", "kernel_bridge"):
            assert r["ratio"][f"switch_vs_{base}"] == pytest.approx(
                pps["switch"] / pps[base], rel=1e-2
            )
        # Nothing forwards more than was offered (a duplicating DUT would show 2x). The two are
        # counted at different ends over windows that do not quite coincide: in --quick form
        # on a loaded machine the kernel bridge read 9 % over its offered rate.
        for dut, d in r["detail"].items():
            assert pps[dut] <= d["offered_pps"] * 1.15, (dut, pps[dut], d["offered_pps"])


@pytest.mark.netns
def test_kernel_bridge_beats_the_naive_scapy_forwarder(bench):
    result, _ = bench
    for r in result["results"]:
        assert r["pps"]["kernel_bridge"] > r["pps"]["scapy_naive"], r["pps"]
        assert r["pps"]["switch"] > r["pps"]["scapy_naive"], r["pps"]


@pytest.mark.netns
def test_shaper_holds_10_mbps_and_never_exceeds_a_rate(bench):
    result, _ = bench
    for s in result["shaper"]:
        # The window's own timing error (`read_uncertainty_pct`, ~0.2 % since the counters
        # are read by netlink ahead of the generator) is printed with a failure, not allowed.
        assert s["measured_mbps"] <= s["mbps"] * 1.02, s
    ten = result["shaper"][0]
    # The shaper can only lose the time the switch was kept off its CPU by other load on this
    # shared machine (dut_wait_share, and steal_share: the host's), never more; without such load it is within 5%. It cannot
    # send what was never offered either: on a busy machine the paced generator can fall below
    # its 1.5x target, and then the rate to hold is what it did offer.
    slack = 100 * (ten.get("dut_wait_share", 0.0) + ten.get("steal_share", 0.0))
    target = min(ten["mbps"], ten["offered_mbps"])
    error_pct = (ten["measured_mbps"] - target) / target * 100
    assert -5.0 - slack <= error_pct, ten
    assert ten["error_pct"] <= 5.0, ten


@pytest.mark.netns
def test_queueing_delay_is_backlog_over_rate(bench):
    result, _ = bench
    for q in result["queue_delay"]:
        assert q["probes_used"] > 0, q
        assert q["backlog_bytes"] > 0.5 * q["queue_kb"] * 1000, q  # saturated: the queue is full
        assert q["measured_ms_p99"] >= q["measured_ms_median"] > 0, q
        assert 0 < q["drain_mbps"] <= q["mbps"] * 1.02, q  # the shaper never exceeds its rate
    # Delay = backlog / the rate the port really drained at. That rate is below the configured
    # one only when the switch lost CPU time: to a neighbour on its core or, invisibly inside a
    # VM, to the host (one CI run measured 76.6 ms against 50.4 ms nominal while the switch had
    # waited only 5 %). Holding the configured rate is the shaper test's job.
    for q in result["queue_delay"]:
        expected = q["expected_at_drain_ms"]
        assert 0.8 * expected <= q["measured_ms_median"] <= 1.25 * expected, q


@pytest.mark.netns
def test_switch_memory_and_teardown(bench):
    result, left = bench
    assert 0 < result["rss_mb"]["switch"] <= 60, result["rss_mb"]
    assert not left, f"bench left namespaces behind: {left}"


def test_not_root_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(switch_bench.BenchError, match="needs root"):
        switch_bench.run_switch_bench(duration_s=0.1, quick=True)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")
def test_loadgen_is_built_once_per_source(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = switch_bench.build_loadgen()
    assert first.parent == tmp_path / "testbed" and os.access(first, os.X_OK)
    mtime = first.stat().st_mtime_ns
    assert switch_bench.build_loadgen() == first
    assert first.stat().st_mtime_ns == mtime  # cached, not recompiled
    usage = subprocess.run([str(first)], capture_output=True, text=True)
    assert usage.returncode == 2 and "usage" in usage.stderr


def test_format_table_names_every_row():
    row = {
        "pps": dict.fromkeys(sorted(DUTS), 1000),
        "ratio": dict.fromkeys(sorted(RATIOS), 1.0),
        "detail": {},
    }
    result = {
        "bench": "switch",
        "results": [{"frame_bytes": 1400, **row}, {"frame_bytes": 64, **row}],
        "shaper": [{"mbps": 10, "measured_mbps": 9.9, "error_pct": -1.0}],
        "queue_delay": [],
        "rss_mb": {"switch": 17.0},
    }
    text = switch_bench.format_table(result)
    for dut in DUTS:
        assert dut in text
    assert "1400 B" in text and "64 B" in text and "10 Mbps" in text
    assert "by vector" not in text
    result["results"][0]["detail"] = {"switch": {"vector_share": 0.98, "vector_mean_burst": 215.4}}
    assert "98% by vector, ~215 a burst" in switch_bench.format_table(result)

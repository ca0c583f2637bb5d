"""testbed/bench/hop_bench.py: the switches on a fake clock forward every frame, and say how much.

The bench's figure is only a forwarding cost if the wired switches really carried the
permutation: every offered frame comes out at a host port (whole or trimmed to a header), each
crossed three switches, and the wake-up period gives the rate of wake-ups it claims. Timing
itself is the bench's business (`testbed bench hop`), not a test's.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys

from testbed.bench import hop_bench

T = 150e-6  # virtual: ~2000 frames over the bench's own 4x4x4 fabric


@functools.cache
def _fabric_row() -> hop_bench.HopRun:
    """run_hops(0.13, T), which three tests read (a run on the fake clock: the same frames,
    hops and wake-ups every time), run once per process."""
    return hop_bench.run_hops(0.13, T)


def test_every_offered_frame_reaches_a_host_across_three_switches() -> None:
    run = _fabric_row()
    assert run.offered > 1900  # 16 hosts at 10 Gbps for 150 µs: ~124 frames each
    assert run.conserved, run.to_dict()
    assert run.hops == 3 * run.offered  # leaf, spine, leaf: no frame stayed on its leaf
    assert run.trims > 0, "line rate sprayed into 12 kB queues should trim some frames"
    assert 0.1 < run.wakeups_per_hop < 0.16  # the period was set for 0.13
    assert run.cpu_us_per_hop > 0


def test_the_batched_row_wakes_five_times_less_often() -> None:
    fabric = _fabric_row()
    batched = hop_bench.run_hops(0.13 / hop_bench.BATCH_FACTOR, T)
    assert batched.conserved
    assert batched.offered == fabric.offered  # the same traffic, only the wake-ups differ
    ratio = fabric.wakeups_per_hop / batched.wakeups_per_hop
    assert 3.5 < ratio < 6.0  # the drain at the end wakes on the same period in both


def test_half_load_queues_less() -> None:
    full = _fabric_row()
    half = hop_bench.run_hops(0.13, T, load=0.5)
    assert half.conserved
    assert half.offered < 0.6 * full.offered
    assert half.trims < full.trims


def _bench_hop(*args: str) -> subprocess.CompletedProcess:
    """`testbed bench hop ARGS` as a user runs it (no root needed)."""
    return subprocess.run(
        [sys.executable, "-m", "testbed.cli", "bench", "hop", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_prints_the_table_without_root() -> None:
    out = _bench_hop("--quick", "--json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["conserved"] is True
    assert set(d["rows"]) == {"fabric", "batched"}
    assert d["rows"]["fabric"]["cpu_us_per_hop"] > 0
    assert d["rows"]["fabric"]["datapath"] == "python"
    assert d["fabric_vs_batched"] > 0
    # Both data paths of switch.core on the same workload, when the C one is built.
    assert set(d["rows_by_datapath"]) == set(d["datapaths"])
    if "c" in d["datapaths"]:
        assert d["rows_by_datapath"]["c"]["fabric"]["datapath"] == "c"
        assert d["python_vs_c"]["fabric"] > 1
    else:
        assert d["c_unavailable"]


def test_cli_refuses_a_time_dilation_in_one_line() -> None:
    out = _bench_hop("--time-dilation", "100")
    assert out.returncode != 0
    assert out.stderr.strip().count("\n") == 0
    assert "--time-dilation" in out.stderr and "fake clock" in out.stderr

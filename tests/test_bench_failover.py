"""The failover bench's sliding-window failover: testbed.analysis.metrics' definition in 1 ms steps."""

from __future__ import annotations

import pytest

from testbed.bench.failover_bench import ratios_to_mrc, sliding_failover_ms

PER_MS = 11_250  # bytes per 1 ms sample at 90 Mbps


def stream(end_s: float, gaps=(), rate=lambda t: PER_MS) -> list[tuple[float, int]]:
    """One delivery sample per millisecond, none inside `gaps` ((start, end) in seconds)."""
    out = []
    for k in range(round(end_s * 1000)):
        t = k / 1000
        if not any(a <= t < b for a, b in gaps):
            out.append((t, rate(t)))
    return out


def test_a_failure_that_costs_nothing_reads_zero() -> None:
    assert sliding_failover_ms(stream(2.0), 1.0, 2.0) == 0.0


@pytest.mark.parametrize("gap_ms", [8, 20, 37])
def test_a_gap_reads_as_the_gap_less_the_five_ms_a_90_percent_window_forgives(gap_ms) -> None:
    # 50 ms at >= 90 % tolerates 5 ms of nothing: the window may start 5 ms before the gap ends.
    got = sliding_failover_ms(stream(2.0, [(1.0, 1.0 + gap_ms / 1000)]), 1.0, 2.0)
    assert got == pytest.approx(gap_ms - 5, abs=1.0)


def test_a_burst_of_held_back_bytes_is_not_a_recovery() -> None:
    # 100 ms at a quarter of the rate, then everything that was held back in 10 ms.
    def rate(t):
        if 1.0 <= t < 1.1:
            return PER_MS // 4
        if 1.1 <= t < 1.11:
            return PER_MS * 8
        return PER_MS

    got = sliding_failover_ms(stream(2.0, rate=rate), 1.0, 2.0)
    # Uncapped, a window from 60 ms on would average 180 %; capped per 10 ms piece, the burst
    # only fills the piece it lands in.
    assert 85.0 <= got <= 100.0


def test_never_back_or_nothing_before_reads_none() -> None:
    assert sliding_failover_ms(stream(2.0, [(1.0, 2.0)]), 1.0, 2.0) is None
    assert sliding_failover_ms(stream(2.0, [(0.0, 1.0)]), 1.0, 2.0) is None


def test_ratios_count_a_zero_ms_mrc_failover_as_one_step() -> None:
    def row(stall, fo):
        return {"max_stall_ms": stall, "sliding_failover_ms": fo}

    summary = {
        "mrc": row(4.0, 0.0),
        "spray-no-failover": row(8.0, 790.0),
        "single-path": row(998.0, None),
    }
    r = ratios_to_mrc(summary)
    assert r["spray_no_failover_vs_mrc_sliding_failover"] == 790.0
    assert r["spray_no_failover_vs_mrc_max_stall"] == 2.0
    assert r["single_path_vs_mrc_max_stall"] == 249.5
    assert r["single_path_vs_mrc_sliding_failover"] is None  # never recovered: no ratio
    summary["mrc"] = row(4.0, 5.0)
    assert ratios_to_mrc(summary)["spray_no_failover_vs_mrc_sliding_failover"] == 158.0

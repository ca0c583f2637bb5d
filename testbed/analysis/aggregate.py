"""Repeated runs summarised: medians with confidence intervals, judged on a statistic.

One run is one draw: on this machine the same scenario's MRC failover spans 0-19 ms over 12
runs. So a repeated experiment reports, per transport and metric, the median of the valid
repetitions with a confidence interval for that median, and judges the scenario's expectations
on a stated statistic of the repetitions: their median, or their worst.

The interval is the distribution-free one for a median, from order statistics: the k-th
smallest and k-th largest run, with k the largest for which the binomial(n, 1/2) chance that
the true median lies outside is at most 5 %. It assumes nothing about the distribution (failover
times are anything but normal) and its coverage is exact, so it is reported with it
(`ci_coverage`). Below 6 runs no such 95 % interval exists: it is then the range of the runs,
with its lower coverage said (75 % at n = 3). A percentile bootstrap of the median, tried
first, gives the same range at n = 3 and calls it 95 %: over 10 runs of silent-blackhole its
3-run intervals were no wider than the 10-run one. Invalid runs (the emulator did not keep up, testbed.analysis.validity) are not
results: they are excluded from every statistic and counted.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from testbed.analysis.metrics import check_expectations
from testbed.analysis.validity import is_valid
from testbed.scenario import Expect

CONFIDENCE = 0.95
MIN_VALID_FRACTION = 0.5
"""A repeated run counts as valid when, for every transport, at least this share of its
repetitions (and at least one) was valid: a median of the few runs that kept up, out of many
that did not, would be a selected sample, not the network's."""


def _retransmits(entry: Mapping[str, Any]) -> float | None:
    r = entry.get("retransmits")
    return float(sum(r.values())) if isinstance(r, Mapping) else None


def _fraction(entry: Mapping[str, Any]) -> float | None:
    g, b = entry.get("goodput_mbps"), entry.get("bottleneck_mbps")
    return g / b if g is not None and b else None


def _step(key: str) -> Callable[[Mapping[str, Any]], float | None]:
    return lambda entry: (entry.get("step_time_ms") or {}).get(key)


def _p100_over_p50(entry: Mapping[str, Any]) -> float | None:
    steps = entry.get("step_time_ms") or {}
    p50, p100 = steps.get("p50"), steps.get("p100")
    return p100 / p50 if p50 and p100 is not None else None


METRICS: dict[str, tuple[str, Callable[[Mapping[str, Any]], float | None]]] = {
    "goodput_mbps": ("Mbps", lambda e: e.get("goodput_mbps")),
    "goodput_fraction": ("of the bottleneck", _fraction),
    "max_stall_ms": ("ms", lambda e: e.get("max_stall_ms")),
    "failover_ms": ("ms", lambda e: e.get("failover_ms")),
    "step_p50_ms": ("ms", _step("p50")),
    "step_p99_ms": ("ms", _step("p99")),
    "step_p100_ms": ("ms", _step("p100")),
    "p100_over_p50": ("", _p100_over_p50),
    "lost_bytes": ("B", lambda e: e.get("lost_bytes")),
    "retransmits": ("packets", _retransmits),
    "trims": ("packets", lambda e: e.get("trims")),
}
"""What is aggregated per transport: name -> (unit, how to read it from a run's summary entry)."""


def median_ci(
    values: Sequence[float], confidence: float = CONFIDENCE
) -> tuple[float, float, float]:
    """(low, high, coverage): the distribution-free interval of the median of `values`.

    [x_(k), x_(n+1-k)] covers the median with probability 1 - 2 P(Binomial(n, 1/2) < k); k is
    the largest with that coverage at least `confidence`, or 1 (the range) when even the range
    falls short (n < 6 at 95 %)."""
    data = sorted(float(v) for v in values if v is not None)
    n = len(data)
    if n == 0:
        raise ValueError("median_ci needs at least one value")

    def coverage(k: int) -> float:
        return 1.0 - 2.0 * sum(math.comb(n, i) for i in range(k)) / 2.0**n

    k = 1
    while k + 1 <= (n + 1) // 2 and coverage(k + 1) >= confidence:
        k += 1
    return data[k - 1], data[n - k], coverage(k)


def describe(values: Sequence[float | None]) -> dict[str, Any]:
    """median, its confidence interval and that interval's coverage, n, and the values
    themselves (None: not measured)."""
    present = [float(v) for v in values if v is not None and not math.isnan(v)]
    if not present:
        return {
            "median": None, "ci_low": None, "ci_high": None, "ci_coverage": None, "n": 0,
            "values": list(values),
        }  # fmt: skip
    lo, hi, cover = median_ci(present)
    return {
        "median": round(statistics.median(present), 4),
        "ci_low": round(lo, 4),
        "ci_high": round(hi, 4),
        "ci_coverage": round(cover, 4),
        "n": len(present),
        "values": [None if v is None else round(float(v), 4) for v in values],
    }


def _entry_valid(entry: Mapping[str, Any]) -> bool:
    return is_valid(entry.get("emulation"))


def transport_stats(entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One transport over its repetitions' summary entries: counts and every metric's stats
    over the valid ones (a metric no valid run measured is left out)."""
    valid = [e for e in entries if _entry_valid(e)]
    metrics = {}
    for name, (unit, read) in METRICS.items():
        values = [read(e) for e in valid]
        if any(v is not None for v in values):
            metrics[name] = {**describe(values), "unit": unit}
    return {
        "runs": len(entries),
        "valid_runs": len(valid),
        "invalid_runs": len(entries) - len(valid),
        "metrics": metrics,
    }


def _statistic(name: str, values: Sequence[Any], statistic: str) -> Any:
    """The value an expectation is judged on. A run that could not measure it (None: never
    recovered, a step unfinished) counts as failing it, as it does in a single run."""
    if name == "delivered_all":
        return all(v is True for v in values)
    worst_is_high = name.startswith("max_")
    nums = [(math.inf if worst_is_high else -math.inf) if v is None else float(v) for v in values]
    if statistic == "worst":
        value = max(nums) if worst_is_high else min(nums)
    else:
        value = statistics.median(nums)
    return None if math.isinf(value) else value


def judge(expect: Expect, entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The expectations judged on `expect.statistic` of the valid repetitions' measured values.

    With no valid repetition nothing can be judged: every check fails, saying so."""
    valid = [e for e in entries if _entry_valid(e)]
    per_check: dict[str, list[Any]] = {}
    for e in valid:
        for c in e.get("expectations", {}).get("checks", []):
            per_check.setdefault(c["name"], []).append(c["value"])
    measured = {n: _statistic(n, v, expect.statistic) for n, v in per_check.items()}
    result = check_expectations(expect, measured)
    result["statistic"] = expect.statistic
    result["over_valid_runs"] = len(valid)
    if not valid:
        result["passed"] = False
        for c in result["checks"]:
            c["passed"] = False
            c["value"] = None
        result["note"] = "no valid repetition: nothing to judge"
    return result


def aggregate(
    leaves: Sequence[Mapping[str, Any]], expect: Expect, transports: Sequence[str]
) -> dict[str, Any]:
    """The `transports` block of a repeated run's summary.json from its leaf summaries."""
    out: dict[str, Any] = {}
    for t in transports:
        entries = [s["transports"][t] for s in leaves if t in s.get("transports", {})]
        if not entries:
            continue
        out[t] = {**transport_stats(entries), "expectations": judge(expect, entries)}
    return out


def repeated_valid(block: Mapping[str, Mapping[str, Any]]) -> tuple[bool, list[str]]:
    """Whether a repeated run is a result (MIN_VALID_FRACTION), and why not."""
    reasons = []
    for t, s in block.items():
        if s["valid_runs"] == 0 or s["valid_runs"] < MIN_VALID_FRACTION * s["runs"]:
            reasons.append(f"{t}: {s['valid_runs']} of {s['runs']} repetitions valid")
    return not reasons, reasons

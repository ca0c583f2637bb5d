"""Repeated runs summarised: medians with bootstrap confidence intervals, judged on a statistic.

One run is one draw: on this machine the same scenario's MRC failover spans 0-19 ms over 12
runs. So a repeated experiment reports, per transport and metric, the median of the valid
repetitions with a 95 % confidence interval for that median (a percentile bootstrap: it assumes
nothing about the shape of the distribution, which for failover times is anything but normal),
and judges the scenario's expectations on a stated statistic of the repetitions: their median,
or their worst. Invalid runs (the emulator did not keep up, testbed.analysis.validity) are not
results: they are excluded from every statistic and counted.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from testbed.analysis.metrics import check_expectations
from testbed.scenario import Expect

CONFIDENCE = 0.95
RESAMPLES = 4000
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


def bootstrap_ci(
    values: Sequence[float],
    *,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile-bootstrap confidence interval of the median of `values`.

    Seeded, so the same values always give the same interval. With one value the interval is
    that value: a single run says nothing about its spread, and the report shows n beside it."""
    data = np.asarray([v for v in values if v is not None], dtype=float)
    if data.size == 0:
        raise ValueError("bootstrap_ci needs at least one value")
    if data.size == 1 or np.all(data == data[0]):
        return float(data[0]), float(data[0])
    rng = np.random.default_rng(seed)
    samples = rng.choice(data, size=(resamples, data.size), replace=True)
    medians = np.median(samples, axis=1)
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(medians, [tail, 100 - tail])
    return float(lo), float(hi)


def describe(values: Sequence[float | None]) -> dict[str, Any]:
    """median, its confidence interval, n, and the values themselves (None: not measured)."""
    present = [float(v) for v in values if v is not None and not math.isnan(v)]
    if not present:
        return {"median": None, "ci_low": None, "ci_high": None, "n": 0, "values": list(values)}
    lo, hi = bootstrap_ci(present)
    return {
        "median": round(statistics.median(present), 4),
        "ci_low": round(lo, 4),
        "ci_high": round(hi, 4),
        "n": len(present),
        "values": [None if v is None else round(float(v), 4) for v in values],
    }


def _entry_valid(entry: Mapping[str, Any]) -> bool:
    return bool(entry.get("emulation", {}).get("valid", True))


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

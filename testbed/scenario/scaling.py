"""The `--quick` form of a scenario: the same experiment on a shorter timeline."""

from __future__ import annotations

import math

from testbed.scenario.schema import Scenario
from testbed.scenario.validation import validate

QUICK_FACTOR = 0.25
"""`--quick` shortens the timeline to a quarter; see `quick()` for what is scaled and why."""


def quick(sc: Scenario, factor: float = QUICK_FACTOR) -> Scenario:
    """The `--quick` form: the same experiment on a timeline `factor` times as long.

    Scaled by `factor`: duration_s, every event time, the bytes of bulk/permutation/incast/
    alltoall (so each transfer still spans the same events at the same rates), the number of
    allreduce steps and of flap cycles (rounded up, at least 1), and the times of random failures. Kept: every rate, queue, per-step
    size and flap period, and every expectation -- stall and failover limits are physical
    timer and detection times, which must not shrink with the timeline.
    """
    if not 0 < factor <= 1:
        raise ValueError(f"factor must be in (0, 1], got {factor}")
    data = sc.model_dump(mode="python", exclude_none=True)
    data["duration_s"] = sc.duration_s * factor
    w = data["workload"]
    if w["kind"] == "allreduce":
        w["steps"] = max(1, math.ceil(w["steps"] * factor))
    elif w["kind"] == "trace":
        w["iterations"] = max(1, math.ceil(w["iterations"] * factor))
    else:
        w["bytes"] = max(1, round(w["bytes"] * factor))
    for e in data["events"]:
        e["at"] = round(e["at"] * factor, 6)
        if e["action"] == "flap":
            e["count"] = max(1, math.ceil(e["count"] * factor))
    # Random failures: every time of the process scales, so the same seed draws the same
    # failures at `factor` times the times (an exponential draw scales with its mean).
    for rf in data.get("random_failures", []):
        for key in ("mtbf_s", "mttr_s", "from_s", "until_s"):
            if rf.get(key) is not None:
                rf[key] = rf[key] * factor
    return validate(data)

"""`testbed calibrate`: measure the machine's budget for `time_dilation: auto`, and cache it.

The budget is packet-hops per real second that the machine carries with every run still valid
(testbed.analysis.validity). It is measured the way `auto` uses it: a permutation on a 2x2x2
fabric at datacenter speed (10 Gbps, 1 µs links) at a time dilation N, searching for the
smallest N whose run is valid; the budget is then the scenario's demand / N
(testbed.experiment.dilation.demand_hops_per_s), so a scenario with the same demand gets the
same N back (`bench capacity` reports the packet-hops the switches really carried instead). The
search is the capacity bench's. The result is cached (testbed.experiment.calibration) and tied
to this machine.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from testbed.analysis.validity import is_valid
from testbed.bench.capacity_bench import next_dilation, smallest_valid
from testbed.experiment.calibration import save_budget
from testbed.experiment.dilation import demand_hops_per_s, plan
from testbed.experiment.runner import Progress, run_scenario
from testbed.scenario import validate

SCENARIO = {
    "name": "calibrate",
    "description": "A 2x2x2 permutation at datacenter speed: what the machine carries validly.",
    "topology": {
        "spines": 2,
        "leaves": 2,
        "hosts_per_leaf": 2,
        "link_mbps": 10_000,
        "delay_us": 1,
        "queue_kb": 12,
    },
    "transport": "mrc",
    "workload": {"kind": "permutation", "bytes": "1MB"},
    "duration_s": 0.02,
}
MAX_STEPS = 4


@dataclass
class Calibration:
    budget_hops_per_s: float
    n_valid: float
    trials: list[dict] = field(default_factory=list)


def calibrate(quick: bool = False, progress: Progress | None = None) -> Calibration:
    """Search N (MAX_STEPS runs at most) and return the budget; raises if no N was valid."""
    progress = progress or Progress()
    small = {"workload": {"kind": "permutation", "bytes": "256KB"}} if quick else {}
    sc = validate(SCENARIO | small)
    demand = demand_hops_per_s(sc)
    tried: dict[float, bool] = {}
    detail: list[dict] = []
    n = next_dilation(tried, plan(sc, "auto").time_dilation, MAX_STEPS)
    with tempfile.TemporaryDirectory(prefix="calibrate-") as tmp:
        for step in range(MAX_STEPS):
            outcome = run_scenario(sc, ["mrc"], Path(tmp) / f"n{step}", progress=progress,
                                   time_dilation=n)  # fmt: skip
            emu = outcome.summary["transports"]["mrc"]["emulation"]
            tried[n] = is_valid(emu)
            detail.append({"time_dilation": n, **{k: emu[k] for k in (
                "valid", "invalid_reasons", "real_s", "switch_late_us_p99",
                "endpoint_late_us_p99", "cpu_util", "kernel_drops")}})  # fmt: skip
            progress.line(f"calibrate: N={n:g} {'valid' if emu['valid'] else 'invalid'}")
            nxt = next_dilation(tried, n, MAX_STEPS)
            if nxt is None:
                break
            n = nxt
    best = smallest_valid(tried)
    if best is None:
        raise RuntimeError(
            f"calibrate: no time dilation up to {max(tried):g} gave a valid run: "
            + "; ".join(detail[-1]["invalid_reasons"])
        )
    return Calibration(demand / best, best, detail)


def run_calibration(quick: bool = False, progress: Progress | None = None) -> Path:
    cal = calibrate(quick, progress)
    return save_budget(
        cal.budget_hops_per_s,
        {"n_valid": cal.n_valid, "scenario": SCENARIO["name"], "trials": cal.trials},
    )

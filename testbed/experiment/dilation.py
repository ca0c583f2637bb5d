"""Choosing the time dilation of a run: `emulation.time_dilation: auto | N`, `--time-dilation`.

`auto` predicts the smallest N at which the machine keeps up, from two numbers:

- the scenario's demand: packet-hops per *virtual* second at full load -- every sending host
  at line rate in full frames, each frame crossing the fabric's switches, one ACK back the same
  way per frame;
- the machine's budget: packet-hops per *real* second it carries with its timing error still
  within the validity limits (testbed.analysis.validity). `testbed calibrate` measures it and
  caches it (testbed.experiment.calibration); without a calibration, FALLBACK_BUDGET stands in,
  measured on the 2-core VMs this project is developed on.

N = demand / (budget x HEADROOM), rounded up to a "nice" value (1, 2, 5 x 10^k), never below 1.
A prediction can be wrong; the runner judges every run and, under `auto`, reruns an invalid
one at RERUN_FACTOR x N (`emulation.max_reruns` times at most).

Kernel transports (tcp, mptcp) run on the kernel's clocks, which cannot be dilated: they run
at N = 1 only (`kernel_fits`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from contracts.clock import MAX_DILATION, check_dilation
from testbed.scenario import Scenario, workload_hosts
from topologies.timing import path_links

FALLBACK_BUDGET = 20_000.0
"""Packet-hops per real second, when no calibration exists (see calibrate)."""
HEADROOM = 0.7
"""Plan for this fraction of the budget: lateness grows steeply near saturation."""
RERUN_FACTOR = 2.0


@dataclass(frozen=True)
class DilationPlan:
    """The N a run starts with and where it came from."""

    time_dilation: float
    auto: bool
    demand_hops_per_s: float
    budget_hops_per_s: float
    budget_source: str  # "calibrated" | "fallback" | "given"

    def describe(self) -> str:
        how = "auto" if self.auto else "given"
        return (
            f"time dilation {self.time_dilation:g} ({how}; demand {self.demand_hops_per_s:,.0f} "
            f"packet-hops per virtual s, budget {self.budget_hops_per_s:,.0f} per real s, "
            f"{self.budget_source})"
        )


def demand_hops_per_s(sc: Scenario) -> float:
    """Packet-hops per virtual second of `sc` at full load (see the module docstring)."""
    p = sc.topology
    if p.link_mbps <= 0:
        return 0.0
    senders = len(workload_hosts(sc))
    frames_per_s = p.link_mbps * 1e6 / ((p.mtu + 14) * 8)
    switches = path_links(p.leaves) - 1  # switches on the longest path
    return senders * frames_per_s * switches * 2  # a data frame and its ACK


def nice_ceil(x: float) -> float:
    """The smallest of 1, 2, 5, 10, 20, 50, ... that is >= x."""
    if x <= 1:
        return 1.0
    exp = 10 ** math.floor(math.log10(x))
    for m in (1, 2, 5, 10):
        if m * exp >= x - 1e-9:
            return float(min(m * exp, MAX_DILATION))
    return float(min(10 * exp, MAX_DILATION))


def plan(
    sc: Scenario, requested: float | str | None = None, budget: tuple[float, str] | None = None
) -> DilationPlan:
    """The dilation a run of `sc` starts at: `requested` (the CLI's) over the scenario's own
    `emulation.time_dilation`; `auto` predicts it from `budget` ((hops/s, source))."""
    want = requested if requested is not None else sc.emulation.time_dilation
    demand = demand_hops_per_s(sc)
    hops, source = budget if budget is not None else (FALLBACK_BUDGET, "fallback")
    if want != "auto":
        return DilationPlan(check_dilation(want, "--time-dilation"), False, demand, hops, "given")
    n = nice_ceil(demand / (hops * HEADROOM)) if hops > 0 else 1.0
    return DilationPlan(n, True, demand, hops, source)


def kernel_fits(sc: Scenario, budget: tuple[float, str] | None = None) -> bool:
    """Whether the kernel baselines can run `sc` validly in real time (auto's N is 1)."""
    return plan(sc, "auto", budget).time_dilation <= 1.0


def parse_dilation(text: str) -> float | str:
    """`--time-dilation auto|N`: one line naming the option on a bad value."""
    if text == "auto":
        return "auto"
    try:
        return check_dilation(float(text), "--time-dilation")
    except ValueError as exc:
        raise ValueError(
            f"--time-dilation: expected 'auto' or a number between 1 and {MAX_DILATION:.0f}, "
            f"got {text!r}"
        ) from exc

"""Warnings about a valid scenario that would not show what it claims to: `testbed run` prints
them before it builds anything and runs anyway; they tell the author what it will not measure."""

from __future__ import annotations

from testbed.scenario.capacity import capacity_mbps, ideal_completion_s
from testbed.scenario.schema import PlaneDown, Scenario

EMULATION_BUDGET_MBPS = 80.0
"""Aggregate ideal goodput above which `lint` warns that two cores may not keep up.

Measured with `testbed run --quick` on this 2-core machine (docs/scenario-format.md, "Emulator
capacity"): four cross-leaf flows at 25 Mbps (100 Mbps in aggregate) reached 36-66% of the
ideal with the CPU 93% busy, at 10 Mbps (40 in aggregate) 66-79%; a four-rank all-reduce at
80 Mbps in aggregate 57-62%. No run had kernel drops: the machine runs out of CPU time (and
the endpoints' timers get late) before its sockets overflow.
"""


def lint(sc: Scenario) -> list[str]:
    """Warnings about a valid scenario that would not show what it claims to.

    A failure that lands after the workload has ideally finished tests nothing; a workload that
    cannot finish even ideally makes `delivered_all` meaningless; an aggregate rate beyond what the
    emulator carries measures the machine, not the protocol.
    """
    out: list[str] = []
    done = ideal_completion_s(sc)
    for i, event in enumerate(sc.events):
        if event.is_failure and event.at >= done:
            out.append(
                f"events[{i}].at: {event.at:g} s is after the workload ideally finishes "
                f"({done:.2f} s), so the failure hits nothing"
            )
        if isinstance(event, PlaneDown) and sc.topology.planes == 1:
            out.append(f"events[{i}].plane: plane-down of the only plane cuts every host off")
    if done / 0.7 > sc.duration_s:
        out.append(
            f"duration_s: {sc.duration_s:g} s leaves little room; the workload ideally takes "
            f"{done:.2f} s (at 70% efficiency {done / 0.7:.2f} s)"
        )
    agg = capacity_mbps(sc)
    n = sc.emulation.time_dilation
    if n != "auto" and agg > EMULATION_BUDGET_MBPS * n:
        # Under `auto` the runner picks N for the workload and judges the run; a given N can
        # be too small, which this says before the run does.
        out.append(
            f"topology.link_mbps: the workload can reach {agg:g} Mbps in aggregate, more than the "
            f"{EMULATION_BUDGET_MBPS * n:g} Mbps the emulator carries at time dilation {n:g} "
            "(emulation.time_dilation: auto picks a larger one)"
        )
    return out

"""Warnings about a valid scenario that would not show what it claims to: `testbed run` prints
them before it builds anything and runs anyway; they tell the author what it will not measure."""

from __future__ import annotations

from contracts.framing import max_frame_bytes
from testbed.scenario.capacity import capacity_mbps, frame_rate_pps, ideal_completion_s
from testbed.scenario.schema import PlaneDown, Scenario

EMULATION_BUDGET_MBPS = 80.0
"""Aggregate ideal goodput above which `lint` warns that two cores may not keep up, at the
frames it was measured with (`BUDGET_FRAME_BYTES`).

Measured with `testbed run --quick` on this 2-core machine (docs/scenario-format.md, "Emulator
capacity"): four cross-leaf flows at 25 Mbps (100 Mbps in aggregate) reached 36-66% of the
ideal with the CPU 93% busy, at 10 Mbps (40 in aggregate) 66-79%; a four-rank all-reduce at
80 Mbps in aggregate 57-62%. No run had kernel drops: the machine runs out of CPU time (and
the endpoints' timers get late) before its sockets overflow.
"""
BUDGET_FRAME_BYTES = 1494
"""The full data frames of those runs (1400 B of message, MTU 1500)."""
PACKET_COST_BYTES = 2700
"""What a packet costs the emulator beyond its bytes, in bytes of frame: the emulator's CPU
per data packet (both endpoints and three switches, its ACK included) was 110 µs + 0.041 µs
per frame byte -- 173 µs at MTU 1500, 484 µs at 9000, medians of 5 and 6 runs (20 MB MRC
bulk at 100 Mbps, 1 spine and 2 leaves, on this 2-core machine under other people's load;
docs/performance.md, "MTU"). So a packet is not all the cost: a 9014-byte frame cost 2.8x a
1514-byte one, and a byte at MTU 9000 costs 0.44x what it costs at 1500."""
EMULATION_WORK = (
    EMULATION_BUDGET_MBPS * 1e6 / 8 / BUDGET_FRAME_BYTES * (PACKET_COST_BYTES + BUDGET_FRAME_BYTES)
)
"""The budget as work per second, in `PACKET_COST_BYTES + frame bytes` per full frame."""


def emulation_budget_pps(mtu: int) -> float:
    """Full frames per second of MTU `mtu` the emulator is budgeted to carry: 6.7 k at 1500,
    2.4 k at 9000."""
    return EMULATION_WORK / (PACKET_COST_BYTES + max_frame_bytes(mtu))


def emulation_budget_mbps(mtu: int) -> float:
    """`emulation_budget_pps(mtu)` in Mbps of full frames: 81 at 1500, 173 at 9000."""
    return emulation_budget_pps(mtu) * max_frame_bytes(mtu) * 8 / 1e6


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
    mtu = sc.topology.mtu
    pps = frame_rate_pps(sc)
    n = sc.emulation.time_dilation
    if n != "auto" and pps > emulation_budget_pps(mtu) * n:
        # Under `auto` the runner picks N for the workload and judges the run; a given N can
        # be too small, which this says before the run does.
        out.append(
            f"topology.link_mbps: the workload can reach {agg:g} Mbps in aggregate "
            f"({pps / 1000:.1f} kpps of {max_frame_bytes(mtu)} B frames), more than the "
            f"{emulation_budget_mbps(mtu) * n:.0f} Mbps the emulator carries at time dilation "
            f"{n:g} (emulation.time_dilation: auto picks a larger one)"
        )
    return out

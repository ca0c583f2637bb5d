"""Did the emulator keep up? The validity verdict every run carries.

An emulator that falls behind does not crash: its switches serve departures late, its
endpoints fire timers late, its kernel drops what nobody read in time -- and the run still
reports a goodput, which is then the machine's and not the network's. (A 16-host permutation
at 10 Mbps on two cores ran with 172 ms of switch lateness and reported MRC at 28 % of ideal,
"expectations met".) So every run measures its own timing error *in virtual time* and judges it
against thresholds derived from the fabric it emulates:

- switch departure lateness P99 <= SWITCH_LATE_FRACTION x one full frame's serialisation at
  the link rate: a switch that sends later than a packet time changes queueing itself;
- endpoint timer lateness P99 <= ENDPOINT_LATE_FRACTION x the base RTT: a transport whose
  timers fire a round trip late is not the transport being measured;
- endpoint NIC time lost <= ENDPOINT_NIC_LOST_FRACTION of what the NICs sent: frames waited in
  the endpoint's pacer while its NIC's token bucket overflowed, i.e. the process woke too
  late to send at the NIC's rate. Timer lateness misses this: a process that is busy all the
  time fires its timers on time and still sends too little (a 4x4x4 permutation at N = 1000
  on two cores lost 21 % of its NIC time, every flow at ~65 % of line rate against ~85 % at
  N = 5000, at 97 % CPU; a 94.6 % CPU run of it had passed the verdict);
- zero kernel drops (rings or socket buffers overrun: losses of the machine);
- CPU below CPU_SATURATION: a saturated machine's timing is whatever the scheduler made it.

Pure: the runner hands in what it measured; tests and `testbed calibrate` use the same rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from topologies import TopologyParams
from topologies.timing import base_rtt_s, serialisation_s

SWITCH_LATE_FRACTION = 0.5
ENDPOINT_LATE_FRACTION = 0.25
ENDPOINT_NIC_LOST_FRACTION = 0.01
CPU_SATURATION = 0.95
EXIT_INVALID = 3
"""Exit status of `testbed run`/`compare` when a run was invalid (1: expectations not met,
2: bad input or an aborted run)."""


@dataclass(frozen=True)
class Thresholds:
    """The limits one fabric's runs are judged against (virtual microseconds)."""

    switch_late_us: float | None  # None: unshaped links, no packet time to compare with
    endpoint_late_us: float
    max_kernel_drops: int = 0
    max_endpoint_nic_lost: float = ENDPOINT_NIC_LOST_FRACTION
    max_cpu_util: float = CPU_SATURATION

    @classmethod
    def for_fabric(cls, params: TopologyParams) -> Thresholds:
        frame = params.mtu + 14
        ser = serialisation_s(frame, params.link_mbps)
        rtt = base_rtt_s(
            params.link_mbps, params.delay_us, params.leaves, params.uplink_mbps, frame
        )
        return cls(
            switch_late_us=SWITCH_LATE_FRACTION * ser * 1e6 if ser > 0 else None,
            endpoint_late_us=ENDPOINT_LATE_FRACTION * rtt * 1e6,
        )


@dataclass(frozen=True)
class Timing:
    """What one run measured of the emulator itself.

    Every judged input defaults to None, "not measured", and a judged input that is None makes
    the run invalid (fail closed): a collector that could not read a switch's lateness or a
    host's drop counters must say so, never report zero. `missing` names inputs that were read
    only in part (one host of eight unreadable), each one reason of the verdict."""

    time_dilation: float = 1.0
    real_s: float = 0.0  # wall time of the workload
    virtual_s: float = 0.0  # the same span in virtual time
    cpu_util: float | None = None  # mean busy fraction of all cores (0..1)
    switch_late_us_p99: float | None = None  # worst switch, virtual µs
    endpoint_late_us_p99: float | None = None  # worst endpoint process, virtual µs
    kernel_drops: int | None = None
    # Worst endpoint process: share of its NICs' time lost while frames waited (0..1).
    endpoint_nic_lost: float | None = None
    # The largest single lateness (virtual µs), reported beside the P99s and not judged: one
    # stall is one sample among thousands, yet it can make a step's P100.
    switch_late_us_max: float | None = None
    endpoint_late_us_max: float | None = None
    # How many lateness samples the P99s rest on (a P99 of fewer than 100 is the maximum).
    switch_late_samples: int | None = None
    endpoint_late_samples: int | None = None
    missing: tuple[str, ...] = ()
    # What the rest of the machine took (testbed.experiment.machine_load), not judged: shares
    # of all cores used by processes outside the run and stolen by the hypervisor, and a
    # sentence when together they reach BUSY_ELSEWHERE_SHARE. An invalid run with that
    # sentence is the machine's fault; rerun it when the machine is quiet.
    foreign_cpu: float | None = None
    steal_cpu: float | None = None
    busy_elsewhere: str | None = None


@dataclass(frozen=True)
class Verdict:
    valid: bool
    reasons: list[str] = field(default_factory=list)

    def summary(self, timing: Timing, limits: Thresholds) -> dict[str, Any]:
        """The `emulation` block of summary.json (docs/scenario-format.md); an input that was
        not measured is null."""
        return {
            "valid": self.valid,
            "invalid_reasons": list(self.reasons),
            "time_dilation": timing.time_dilation,
            "real_s": round(timing.real_s, 3),
            "virtual_s": round(timing.virtual_s, 6),
            "cpu_util": _round(timing.cpu_util, 3),
            "switch_late_us_p99": _round(timing.switch_late_us_p99, 3),
            "endpoint_late_us_p99": _round(timing.endpoint_late_us_p99, 3),
            "endpoint_nic_lost": _round(timing.endpoint_nic_lost, 4),
            "switch_late_us_max": _round(timing.switch_late_us_max, 3),
            "endpoint_late_us_max": _round(timing.endpoint_late_us_max, 3),
            "switch_late_samples": timing.switch_late_samples,
            "endpoint_late_samples": timing.endpoint_late_samples,
            "kernel_drops": None if timing.kernel_drops is None else int(timing.kernel_drops),
            "foreign_cpu": _round(timing.foreign_cpu, 3),
            "steal_cpu": _round(timing.steal_cpu, 3),
            "busy_elsewhere": timing.busy_elsewhere,
            "limits": {
                "switch_late_us": _round(limits.switch_late_us, 3),
                "endpoint_late_us": round(limits.endpoint_late_us, 3),
                "endpoint_nic_lost": limits.max_endpoint_nic_lost,
                "kernel_drops": limits.max_kernel_drops,
                "cpu_util": limits.max_cpu_util,
            },
        }


def _round(x: float | None, digits: int) -> float | None:
    return None if x is None else round(x, digits)


def judge(timing: Timing, limits: Thresholds) -> Verdict:
    """Valid iff every judged input was measured and is within its limit; each breach and each
    input not measured is one reason. A value equal to its limit passes."""
    reasons = [f"not measured: {what}" for what in timing.missing]

    def unmeasured(value: object, what: str) -> bool:
        if value is None:
            # Once, however many lines of `missing` already said why.
            if not any(m.startswith(what) for m in timing.missing):
                reasons.append(f"not measured: {what}")
            return True
        return False

    if limits.switch_late_us is not None and not unmeasured(
        timing.switch_late_us_p99, "switch lateness"
    ):
        if timing.switch_late_us_p99 > limits.switch_late_us:
            reasons.append(
                f"switch lateness P99 {timing.switch_late_us_p99:.3g} µs > "
                f"{limits.switch_late_us:.3g} µs ({SWITCH_LATE_FRACTION:g} of a frame's "
                "serialisation)"
            )
    if not unmeasured(timing.endpoint_late_us_p99, "endpoint lateness"):
        if timing.endpoint_late_us_p99 > limits.endpoint_late_us:
            reasons.append(
                f"endpoint timer lateness P99 {timing.endpoint_late_us_p99:.3g} µs > "
                f"{limits.endpoint_late_us:.3g} µs ({ENDPOINT_LATE_FRACTION:g} of the base RTT)"
            )
    if not unmeasured(timing.endpoint_nic_lost, "endpoint NIC time"):
        if timing.endpoint_nic_lost > limits.max_endpoint_nic_lost:
            reasons.append(
                f"endpoint NIC idle while frames waited: {timing.endpoint_nic_lost:.1%} of its "
                f"time > {limits.max_endpoint_nic_lost:.0%} (the endpoint process fell behind "
                "its NIC)"
            )
    if not unmeasured(timing.kernel_drops, "kernel drops"):
        if timing.kernel_drops > limits.max_kernel_drops:
            reasons.append(
                f"{timing.kernel_drops} packets dropped by the kernel (rings or sockets)"
            )
    if not unmeasured(timing.cpu_util, "CPU utilisation"):
        if timing.cpu_util > limits.max_cpu_util:
            reasons.append(f"CPU saturated ({timing.cpu_util:.0%} of all cores)")
    return Verdict(not reasons, reasons)


def is_valid(emulation: Mapping[str, Any] | None) -> bool:
    """Whether a summary's (or a transport entry's) `emulation` block says valid: the one
    reading every consumer uses (runner, aggregate, repetitions, benches, soak). A block that
    is missing, or has no `valid` that is exactly true, is invalid: fail closed."""
    return isinstance(emulation, Mapping) and emulation.get("valid") is True


def banner(verdict: Verdict, time_dilation: float) -> str:
    """One line for the terminal and the report: what the numbers of this run are worth."""
    if verdict.valid:
        return f"emulation valid at time dilation {time_dilation:g}: the emulator kept up"
    return (
        f"INVALID RUN at time dilation {time_dilation:g}: "
        + "; ".join(verdict.reasons)
        + ". Its numbers are the machine's, not the network's: raise --time-dilation "
        "(or use auto), or shrink the fabric or workload."
    )

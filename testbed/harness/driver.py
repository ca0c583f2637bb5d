"""One protocol for every transport the runner drives: prepare, go, wait, collect, stop.

The MRC-style endpoints (`EndpointDriver`) and the kernel baselines (`KernelBaseline`: iperf3
over TCP or MPTCP) differ in everything but these five moves, so the runner's timeline,
monitoring and teardown are written once, and a new transport (a RoCE RC baseline, say) is one
more driver.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from testbed.harness.endpoint_driver import ENDPOINT_TRANSPORTS, EndpointDriver
from testbed.harness.kernel_baseline import KernelBaseline
from testbed.harness.records import TransportRun
from testbed.scenario import Scenario
from testbed.scenario.transports import KERNEL_TRANSPORTS


class Driver(Protocol):
    transport: str

    def prepare(self) -> None:
        """Start what the transport needs on the fabric; nothing is sent yet."""

    def go(self) -> float:
        """Start the workload on every host at once; return t0 in the fabric's virtual seconds
        (contracts.clock; time.monotonic() at N = 1)."""

    def wait(self, deadline: float) -> bool:
        """Block until the workload finished (True) or `deadline` (virtual) passed."""

    def collect(self, t0: float, end_s: float) -> TransportRun:
        """What the workload did, times relative to `t0`, measured up to `end_s`."""

    def stop(self) -> None:
        """Stop every process the driver started (idempotent; safe after a failure)."""


def driver_for(name: str, sc: Scenario, transport: str, workdir: Path) -> Driver:
    """The driver of `transport` (a name, or a configuration's label) on the running fabric
    `name`."""
    if sc.transport_name(transport) in ENDPOINT_TRANSPORTS:
        return EndpointDriver(name, sc, transport, workdir)
    if transport in KERNEL_TRANSPORTS:
        return KernelBaseline(name, sc, transport, workdir / "kernel")
    raise ValueError(f"transport: no driver for {transport!r}")

"""One transport's run: a fabric of its own, the workload under the timeline, what it collected.

`run_transport` builds the fabric (at a time dilation), starts the transport's driver (the
endpoint processes or a kernel baseline), says go, runs the `Timeline`, the `Monitor` and the EV
controller beside the workload until it is done or the deadline passes, collects the switches'
counters and the driver's records into a `RunResult`, and tears everything down -- on success,
on an exception and on Ctrl-C alike. `_timing` turns what was read into the verdict's inputs,
failing closed: what could not be read is named, never taken for zero. The whole-run logic
(reruns, the summary, the report) is testbed.experiment.runner's.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from contracts.clock import Clock
from contracts.stats import LateHistogram
from endpoint.control import ControlError
from testbed.analysis.emulator_timing import (
    interval_lateness,
    nic_lost,
    start_histograms,
    switch_kernel_drops,
)
from testbed.analysis.metrics import (
    AppliedEvent,
    Emulation,
    TransportRun,
)
from testbed.analysis.port_series import (
    queue_series,
    sparse_json,
)
from testbed.analysis.validity import Thresholds, Timing, Verdict
from testbed.experiment import machine_load
from testbed.experiment.errors import RunError
from testbed.experiment.monitor import Monitor, cpu_times, host_udp_drops
from testbed.experiment.progress import Progress
from testbed.experiment.timeline import Timeline
from testbed.fabric import client, pcap
from testbed.fabric.cleanup import clean_fabric
from testbed.fabric.lifecycle import tear_down
from testbed.fabric.session import Fabric, new_name
from testbed.fabric.switch_layout import layout_for_run
from testbed.harness.driver import Driver, driver_for
from testbed.harness.endpoint_driver import EndpointDriver, reply_pairs
from testbed.harness.errors import BaselineError
from testbed.harness.ev_controller import EvController
from testbed.scenario import (
    Scenario,
    workload_hosts,
)
from testbed.scenario.capture import capture_ports

WAIT_GRACE_S = 0.5  # after duration_s, how long a finishing workload may still take to report


# ----- what one transport's run collected ------------------------------------------------------


@dataclass
class RunResult:
    """Raw material of one transport's run, before `measure`."""

    transport: str
    run: TransportRun
    applied: list[AppliedEvent]
    emulation: Emulation
    timing: Timing = field(default_factory=Timing)
    verdict: Verdict = field(default_factory=lambda: Verdict(False, ["not judged"]))
    reruns: int = 0
    port_queues: dict[str, tuple[list[float], list[float]]] = field(default_factory=dict)
    """port -> (s since t0, deepest data queue per interval in bytes)."""
    port_counters: dict[str, dict] = field(default_factory=dict)
    queue_interval_s: float | None = None  # the switches' queue-maximum interval (virtual)
    switch_counters: dict[str, dict] = field(default_factory=dict)  # `testbed counters`, at the end
    controller: dict | None = None  # the EV controller's report, if the scenario ran one
    capture: dict | None = None  # the switches' pcap files and counts (`capture:`, --pcap)
    note: str = ""
    rss_peak_mb: dict[str, float | None] = field(default_factory=dict)
    """The largest peak resident memory of any switch process and of any endpoint process."""


def peak_rss(switch: dict, ep_stats: dict | None) -> dict[str, float | None]:
    """{"switch": MB, "endpoint": MB}: the largest VmHWM any process of each kind reported
    (None where none did: kernel baselines have no endpoint process of ours)."""

    def largest(replies) -> float | None:
        seen = [r.get("rss_peak_mb") for r in replies if isinstance(r, dict)]
        seen = [x for x in seen if isinstance(x, (int, float))]
        return max(seen) if seen else None

    return {
        "switch": largest(switch.values()),
        "endpoint": largest((ep_stats or {}).values()),
    }


# ----- one transport ---------------------------------------------------------------------------


def run_transport(
    sc: Scenario,
    transport: str,
    workdir: Path,
    progress: Progress,
    time_dilation: float = 1.0,
) -> RunResult:
    """Build a fabric at `time_dilation`, run the workload under the timeline, collect, tear
    down (always)."""
    name = new_name("r")
    fab = sc.fabric()
    workdir.mkdir(parents=True, exist_ok=True)
    progress.begin(f"[{transport}] fabric {name}: {sc.topology.spines} spines, "
                   f"{sc.topology.leaves} leaves, {len(fab.hosts())} hosts; {sc.duration_s:g}s"
                   + (f" at time dilation {time_dilation:g}" if time_dilation != 1 else ""))  # fmt: skip
    driver: Driver | None = None
    try:
        # Owned: it dies with this process however that ends, also when the run is a library
        # call (testbed.run, a bench, a test) that nothing set `own_fabrics` for, and a SIGTERM
        # ends the process without a `finally` (tests/test_interrupt_netns.py).
        Fabric(
            sc.topology.params(),
            name=name,
            seed=sc.seed,
            time_dilation=time_dilation,
            switch_processes=layout_for_run(sc.emulation.switch_processes, time_dilation),
        ).up(owned=True)
        driver = driver_for(name, sc, transport, workdir)  # reads the running fabric's state
        return _drive(name, sc, driver, workdir, progress, Clock(time_dilation))
    except (ControlError, OSError, client.ClientError, BaselineError, pcap.CaptureError) as exc:
        dead = driver.dead() if isinstance(driver, EndpointDriver) else ""
        why = f"endpoint process died: {dead}" if dead else str(exc)
        raise RunError(f"[{transport}] run aborted, fabric torn down: {why}") from None
    finally:
        progress.end()
        if driver is not None:
            with contextlib.suppress(Exception):
                driver.stop()
        with contextlib.suppress(Exception):
            tear_down(name)
        clean_fabric(name)


def _counters(name: str) -> dict[str, dict]:
    """Every switch's counters now (one request; it drains the queue maxima)."""
    return client.call(name, {"op": "counters", "node": None}, timeout=10)["counters"]


def _switch_cpu(counters: Mapping[str, Any]) -> dict[str, tuple[float, float]]:
    """Each switch's process CPU seconds (all, kernel) in a counters read; empty if the
    switches predate the split."""
    return {
        node: (c["cpu_s"], c["cpu_sys_s"])
        for node, c in counters.items()
        if isinstance(c, dict) and "cpu_sys_s" in c
    }


def _drive(
    name: str, sc: Scenario, driver: Driver, workdir: Path, progress: Progress, clock: Clock
) -> RunResult:
    """The workload on the running fabric `name`: go, the timeline of events, monitoring,
    the end of the workload or the deadline, then what the switches and the driver saw.
    Every time here is virtual (`clock`); only sleeps and the wall time are real."""
    capture = _start_capture(name, sc, workdir / "pcap")
    driver.prepare()
    # The switches' CPU so far (start-up, endpoints starting): the run's own share is the
    # final figure less this (`cpu_s_at_go` in switch_counters.json; bench capacity).
    # ... and their lateness histograms so far: the run's samples are the final read's less
    # these (start-up's wake-ups are not the workload's).
    go_counters = _counters(name)
    at_go = _switch_cpu(go_counters)
    late_at_go = start_histograms(go_counters)
    # The endpoint processes' own CPU so far, likewise (endpoint_stats.json; bench capacity).
    ep_at_go = driver.process_stats() if isinstance(driver, EndpointDriver) else None
    cpu0 = cpu_times()
    machine0 = machine_load.snapshot()
    real0 = time.monotonic()
    t0 = driver.go()
    live = (
        driver.live_bytes.mbps if isinstance(driver, EndpointDriver) and driver.live_bytes else None
    )
    timeline = Timeline(name, sc.timeline(), t0, progress, clock)
    limits = Thresholds.for_fabric(sc.topology.params())
    monitor = Monitor(
        name, t0, sc.duration_s, progress, live, timeline.next_event, clock,
        late_limit_us=limits.endpoint_late_us,
    )  # fmt: skip
    controller = None
    if sc.controller.enabled and isinstance(driver, EndpointDriver):
        c = sc.controller
        controller = EvController(
            driver.sockets(), sc.fabric(), sc.seed, clock, t0,
            c.min_votes, c.poll_ms, c.hold_ms, c.confirm_us, reply_pairs(sc, driver.transport),
            c.confirm, c.probe_timeout_us, c.rtt_map,
        )  # fmt: skip
    try:
        timeline.start()
        monitor.start()
        if controller is not None:
            controller.start()
        deadline = t0 + sc.duration_s
        completed = driver.wait(deadline)
        end_s = min(clock.now(), deadline + clock.virtual(WAIT_GRACE_S)) - t0
        real_s = time.monotonic() - real0
        cpu1 = cpu_times()
        machine1 = machine_load.snapshot()
    finally:
        timeline.cancel.set()
        monitor.stop_flag.set()
        report = controller.stop().as_dict() if controller is not None else None
    timeline.join(5)
    monitor.join(5)
    captured = _stop_capture(name, capture, t0, workdir) if capture is not None else None
    switch = _counters(name)
    for node, cpu in at_go.items():
        if node in switch:
            switch[node]["cpu_s_at_go"], switch[node]["cpu_sys_s_at_go"] = cpu
    monitor.collect(switch)  # the maxima since the monitor's last read
    host_drops, drops_missing = host_udp_drops(name, workload_hosts(sc))
    # The endpoint processes' own figures, before `collect` stops them (kernel baselines have
    # no process of ours: the monitor's probe stands for their hosts' timers).
    ep_stats = driver.process_stats() if isinstance(driver, EndpointDriver) else None
    run = driver.collect(t0, end_s)
    run.trims = sum(p["trims"] for c in switch.values() for p in c["ports"].values())
    cpu_util = (cpu1[0] - cpu0[0]) / max(cpu1[1] - cpu0[1], 1.0)
    timing = _timing(
        clock, real_s, end_s, cpu_util, switch, late_at_go, host_drops, drops_missing,
        ep_stats, monitor.jitter_p99_us(),
        limits.switch_late_us is not None,
    )  # fmt: skip
    load = machine_load.foreign_load(machine0, machine1, os.getpid())
    timing = replace(
        timing,
        foreign_cpu=load.foreign,
        steal_cpu=load.steal,
        busy_elsewhere=load.describe() if load.busy_elsewhere else None,
    )
    emulation = Emulation(
        cpu_util=cpu_util,
        timer_jitter_us_p99=max(
            x
            for x in (
                monitor.jitter_p99_us(),
                timing.switch_late_us_p99,
                timing.endpoint_late_us_p99,
                0.0,
            )
            if x is not None
        ),  # fmt: skip
        kernel_drops=timing.kernel_drops or 0,
    )
    port_counters = {
        port: {"trims": pc["trims"], "drops": pc["drops"]}
        for c in switch.values()
        for port, pc in c["ports"].items()
    }
    note = "; ".join(timeline.errors)
    if not completed:
        note = (note + "; " if note else "") + f"workload not finished in {sc.duration_s:g}s"
    (workdir / "switch_counters.json").write_text(json.dumps(switch, indent=1))
    if ep_stats is not None:
        # Per host: the process's figures at go and at the end (CPU, datagrams, lateness).
        (workdir / "endpoint_stats.json").write_text(json.dumps(
            {"at_go": ep_at_go, "end": ep_stats}, indent=1
        ))  # fmt: skip
    (workdir / "queue_max.json").write_text(json.dumps(
        {"interval_s": monitor.interval_s, "ports": sparse_json(monitor.maxima, t0)}
    ))  # fmt: skip
    return RunResult(
        driver.transport,
        run,
        timeline.results(),
        emulation,
        timing,
        port_queues=queue_series(monitor.maxima, t0, monitor.interval_s)
        if monitor.interval_s
        else {},
        port_counters=port_counters,
        queue_interval_s=monitor.interval_s,
        switch_counters=switch,
        controller=report,
        capture=captured,
        note=note,
        rss_peak_mb=peak_rss(switch, ep_stats),
    )


def _timing(
    clock: Clock,
    real_s: float,
    end_s: float,
    cpu_util: float,
    switch: Mapping[str, Any],
    late_at_go: Mapping[str, LateHistogram],
    host_drops: int | None,
    drops_missing: list[str],
    ep_stats: Mapping[str, dict | None] | None,
    probe_p99_us: float | None,
    shaped: bool = True,
) -> Timing:
    """The verdict's inputs of one run, failing closed: whatever could not be read is None and
    named in `missing` (testbed.analysis.emulator_timing). On unshaped links (`shaped` false)
    switch lateness has no limit to meet and is reported only.

    Under dilation every frame through a shaped port gets a departure the loop must serve on
    time (the early window is under 1/8 of a frame), so a dilated run in which no switch
    recorded a sample has not measured its lateness. In real time the 500 µs early window lets
    a switch send every frame of a light load on arrival, with no departure ever due: zero
    samples is then a measurement."""
    need = shaped and clock.dilation > 1
    sw_late = interval_lateness(switch, late_at_go, "switch", need_samples=need)
    sw_drops, sw_missing = switch_kernel_drops(switch)
    missing = [*(sw_late.missing if shaped else []), *sw_missing, *drops_missing]
    ep_samples = None
    if ep_stats is None:  # kernel baselines: the probe stands for the hosts' timers
        ep_p99, ep_max, nic = probe_p99_us, None, 0.0
        if probe_p99_us is None:
            missing.append("endpoint timer lateness: the monitor's probe took no sample")
    else:
        ep_late = interval_lateness(ep_stats, None, "endpoint", need_samples=False)
        nic, nic_missing = nic_lost(ep_stats)
        ep_p99, ep_max, ep_samples = ep_late.p99_us, ep_late.max_us, ep_late.samples
        missing += ep_late.missing + nic_missing
    return Timing(
        time_dilation=clock.dilation,
        real_s=real_s,
        virtual_s=end_s,
        cpu_util=cpu_util,
        switch_late_us_p99=sw_late.p99_us,
        endpoint_late_us_p99=ep_p99,
        endpoint_nic_lost=nic,
        switch_late_us_max=sw_late.max_us,
        endpoint_late_us_max=ep_max,
        switch_late_samples=sw_late.samples,
        endpoint_late_samples=ep_samples,
        kernel_drops=None if sw_drops is None or host_drops is None else sw_drops + host_drops,
        missing=tuple(missing),
    )


def _start_capture(name: str, sc: Scenario, directory: Path) -> dict[str, list[str]] | None:
    """Start the switches' captures (`capture:` / --pcap) before any traffic; the ports."""
    spec = sc.capture
    if not spec.enabled:
        return None
    ports = capture_ports(sc.fabric(), spec.ports, "capture.ports")
    pcap.start(name, ports, directory, spec.direction, spec.snaplen, spec.max_mb)
    return ports


def _stop_capture(name: str, ports: dict[str, list[str]], t0: float, workdir: Path) -> dict:
    """Stop them once the workload is over: summary.json's `capture` entry of a transport.

    Per file: frames written, frames past the cap (`not_written`) and what the port's own
    counters say it carried meanwhile (`tx_packets`/`rx_packets`; written + not_written is
    their sum). `t0_virtual_s`: the run's t = 0 on the pcap's clock (virtual seconds)."""
    stats = pcap.stop(name, list(ports))
    files = [
        {"port": where, "file": f"raw/{workdir.name}/pcap/{s['file']}",
         **{k: s[k] for k in ("written", "not_written", "bytes", "tx_packets", "rx_packets")}}
        for where, s in stats.items()
    ]  # fmt: skip
    return {"t0_virtual_s": round(t0, 9), "files": files}

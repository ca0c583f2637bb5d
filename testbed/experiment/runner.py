"""`testbed run` and `testbed compare`: a scenario file becomes runs, a results folder and an
exit code a script can trust.

One run per transport, each on a fabric of its own (built from the scenario's topology and seed,
torn down after), so no transport inherits another's queues, counters or half-healed links:

1. the scenario is validated whole before anything is created (`load_scenario`);
2. `Fabric.up` builds the fabric; the endpoint processes (``mrc``, ``single-path``,
   ``spray-no-failover``) or the kernel baselines (``tcp``, ``mptcp``:
   `testbed.harness.kernel_baseline`) are started in the workload's hosts;
3. the workload starts everywhere at once (t0); a timeline thread applies each event at
   ``t0 + at`` through the supervisor and records when the last switch acknowledged it
   (``applied_at``, CLOCK_MONOTONIC, shared by every namespace); a monitor thread collects
   the switch ports' queue maxima per 10 ms (which each counters read drains), a timer-jitter
   probe and the live goodput;
4. the run ends when the workload is done or ``duration_s`` has passed; counters and the
   endpoints' JSON-lines metrics are collected, and everything is torn down -- on success,
   on an exception and on Ctrl-C alike (``finally``), so `testbed clean` finds nothing;
5. `testbed.analysis.metrics` turns what was collected into summary.json, `testbed.analysis.report` and
   `testbed.analysis.plots` into report.md, CSVs and PNGs.

The exit code is 0 iff every transport that ran met every expectation (`compare` reports the
baselines without judging them: only the scenario's own ``transport`` list is held to them).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from rich.live import Live

from contracts import datapath
from contracts.clock import MAX_DILATION, Clock
from contracts.stats import LateHistogram, percentile
from endpoint.config import TransportConfig
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
    TransportMetrics,
    TransportRun,
    build_summary,
    emulation_warning,
    measure,
)
from testbed.analysis.path_share import summary_entry as path_share_entry
from testbed.analysis.plots import PLOT_FORMATS, event_marks, plot_run
from testbed.analysis.port_series import (
    QueueMaxima,
    merge_queue_maxima,
    queue_series,
    sparse_json,
)
from testbed.analysis.report import write_report, write_summary, write_timeseries_csv
from testbed.analysis.validity import Thresholds, Timing, Verdict, banner, is_valid, judge
from testbed.experiment.calibration import load_budget
from testbed.experiment.dilation import (
    RERUN_FACTOR,
    DilationPlan,
    kernel_fits,
    plan,
)
from testbed.experiment.errors import RunError
from testbed.experiment.ownership import first_missing, hand_over, invoking_user
from testbed.experiment.provenance import provenance
from testbed.fabric import client, pcap
from testbed.fabric.cleanup import clean_fabric
from testbed.fabric.lifecycle import tear_down
from testbed.fabric.session import Fabric, new_name
from testbed.fabric.switch_layout import layout_for_run
from testbed.harness.driver import Driver, driver_for
from testbed.harness.endpoint_driver import EndpointDriver, job_request
from testbed.harness.ev_controller import EvController
from testbed.harness.kernel_baseline import BaselineError
from testbed.scenario import (
    TRANSPORTS,
    Event,
    Scenario,
    workload_hosts,
)
from testbed.scenario.capture import capture_ports
from testbed.scenario.schema import KERNEL_TRANSPORTS

MONITOR_S = 0.25  # switch counters read (draining the queue maxima) and progress refresh
JITTER_TICK_S = 0.002  # the jitter probe's sleep
DATA_FORMATS = ("csv", "parquet")  # --format: the CSVs always; parquet adds testbed.results' frames
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


# ----- progress --------------------------------------------------------------------------------


class Progress:
    """One line per transport start, event and end; a live line on a terminal (rich), plain
    lines every few seconds otherwise (CI logs)."""

    def __init__(self, stream: TextIO | None = None, live: bool | None = None) -> None:
        self.stream = stream or sys.stdout
        self.live = self.stream.isatty() if live is None else live
        self._rich = None
        self._last_plain = 0.0

    def line(self, text: str) -> None:
        if self._rich is not None:
            self._rich.console.print(text)
        else:
            print(text, file=self.stream, flush=True)

    def begin(self, title: str) -> None:
        self.line(title)
        if self.live:
            self._rich = Live("", refresh_per_second=4, transient=True)
            self._rich.start()

    def status(self, elapsed: float, duration: float, next_event: str, mbps: float | None) -> None:
        rate = "—" if mbps is None else f"{mbps:6.1f} Mbps"
        text = f"  t={elapsed:5.1f}/{duration:g}s  goodput {rate}  next: {next_event}"
        if self._rich is not None:
            self._rich.update(text)
        elif elapsed - self._last_plain >= 2.0 or elapsed < self._last_plain:
            self._last_plain = elapsed
            self.line(text)

    def end(self) -> None:
        if self._rich is not None:
            self._rich.stop()
            self._rich = None
        self._last_plain = 0.0


# ----- helpers on a running fabric -------------------------------------------------------------


def ctl_request(event: Event) -> dict:
    """The supervisor request applying one scenario event (the same plan `testbed ctl` uses)."""
    return {"op": "ctl", **event.plan_kwargs()}


def _cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of all cores, from /proc/stat."""
    with open("/proc/stat") as f:
        parts = [int(x) for x in f.readline().split()[1:]]
    idle = parts[3] + (parts[4] if len(parts) > 4 else 0)
    return float(sum(parts) - idle), float(sum(parts))


def _host_udp_drops(name: str, hosts: Sequence[str]) -> tuple[int | None, list[str]]:
    """UDP datagrams the hosts' kernels dropped for a full receive or send buffer (per netns),
    and the hosts whose counters could not be read: a host that cannot be read is not a host
    with no drops (None then, and the verdict says what was missing)."""
    try:
        st = client.state(name)
    except (client.ClientError, OSError) as exc:
        return None, [f"kernel drops: the fabric's state is unreadable ({exc})"]
    total, missing = 0, []
    for h in hosts:
        try:
            out = subprocess.run(
                ["mnexec", "-a", str(st.nodes[h]["pid"]), "cat", "/proc/net/snmp"],
                capture_output=True,
                text=True,
                timeout=10,
                check=True,
            ).stdout
            rows = [line.split() for line in out.splitlines() if line.startswith("Udp:")]
            stats = dict(zip(rows[0][1:], rows[1][1:], strict=False))
            total += int(stats["RcvbufErrors"]) + int(stats["SndbufErrors"])
        except (subprocess.SubprocessError, OSError, KeyError, IndexError, ValueError) as exc:
            missing.append(f"kernel drops: host {h}'s UDP counters unreadable ({exc!r})")
    return (None if missing else total), missing


class Monitor(threading.Thread):
    """Collects the switches' queue maxima, the machine's timer lateness and the live goodput.

    Every MONITOR_S it reads every switch's counters, which drains each port's per-interval
    queue maxima (switch.port.QueueMaxima): a queue that fills and empties between two reads is
    still seen, and the harness never polls at the queue's own time scale."""

    def __init__(
        self,
        name: str,
        t0: float,
        duration: float,
        progress: Progress,
        live_bytes: Callable[[], int] | None,
        next_event: Callable[[], str],
        clock: Clock,
    ) -> None:
        super().__init__(daemon=True, name="monitor")
        self.clock = clock  # t0 and every sample time are virtual; the probe's sleeps real
        self.fabric_name = name
        self.t0 = t0
        self.duration = duration
        self.progress = progress
        self.live_bytes = live_bytes
        self.next_event = next_event
        self.stop_flag = threading.Event()
        self.maxima: QueueMaxima = {}
        self.interval_s: float | None = None
        self.late_us: list[float] = []
        self.errors = 0

    def run(self) -> None:
        clock = self.clock
        next_sample = time.monotonic()
        last_bytes, last_t = 0, clock.now()
        while not self.stop_flag.is_set():
            before = time.monotonic()
            time.sleep(JITTER_TICK_S)
            late_real = max(0.0, time.monotonic() - before - JITTER_TICK_S)
            self.late_us.append(clock.virtual(late_real) * 1e6)
            now = time.monotonic()
            if now < next_sample:
                continue
            next_sample = now + MONITOR_S
            now = clock.now()
            try:
                counters = client.call(
                    self.fabric_name, {"op": "counters", "node": None}, timeout=5
                )["counters"]
            except (client.ClientError, KeyError, OSError):
                self.errors += 1
                counters = {}
            t = now - self.t0
            self.collect(counters)
            mbps = None
            if self.live_bytes is not None:
                got = self.live_bytes()
                dt = max(now - last_t, clock.virtual(1e-3))
                mbps = (got - last_bytes) * 8 / dt / 1e6
                last_bytes, last_t = got, now
            self.progress.status(t, self.duration, self.next_event(), mbps)

    def collect(self, counters: dict) -> None:
        """Merge one counters read's queue maxima (also the final read's, after the run)."""
        merge_queue_maxima(self.maxima, counters)
        for sw in counters.values():
            if sw.get("queue_max_interval_s"):
                self.interval_s = float(sw["queue_max_interval_s"])

    def jitter_p99_us(self) -> float | None:
        """The probe's nearest-rank P99 (contracts.stats); None before its first sample."""
        return percentile(self.late_us, 99)


class Timeline(threading.Thread):
    """Applies the scenario's events at t0 + at and records when each took effect."""

    def __init__(
        self, name: str, events: Sequence[Event], t0: float, progress: Progress, clock: Clock
    ) -> None:
        super().__init__(daemon=True, name="timeline")
        self.clock = clock  # `at` and t0 are virtual: waits last N times longer
        self.fabric_name = name
        self.events = list(events)
        self.t0 = t0
        self.progress = progress
        self.applied: dict[int, float] = {}
        self.errors: list[str] = []
        self.cancel = threading.Event()
        self.index = 0

    def next_event(self) -> str:
        if self.index >= len(self.events):
            return "—"
        e = self.events[self.index]
        return f"{e.describe()} at {e.at:g}s"

    def run(self) -> None:
        for i, e in enumerate(self.events):
            self.index = i
            if self.cancel.wait(max(0.0, self.clock.real(self.t0 + e.at - self.clock.now()))):
                return
            try:
                reply = client.call(self.fabric_name, ctl_request(e), timeout=10)
            except client.ClientError as exc:
                self.errors.append(f"events[{i}] {e.describe()}: {exc}")
                continue
            if not reply.get("ok"):
                self.errors.append(f"events[{i}] {e.describe()}: {reply.get('error')}")
                continue
            # The supervisor answers in real monotonic seconds (shared by every namespace).
            applied_real = reply.get("applied_mono", time.monotonic())
            self.applied[i] = self.clock.virtual(applied_real) - self.t0
            self.progress.line(
                f"  {self.applied[i]:7.3f}s applied {e.describe()} (planned {e.at:g}s)"
            )
        self.index = len(self.events)

    def results(self) -> list[AppliedEvent]:
        return [AppliedEvent(e, self.applied.get(i)) for i, e in enumerate(self.events)]


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
        Fabric(
            sc.topology.params(),
            name=name,
            seed=sc.seed,
            time_dilation=time_dilation,
            switch_processes=layout_for_run(sc.emulation.switch_processes, time_dilation),
        ).up()
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
    cpu0 = _cpu_times()
    real0 = time.monotonic()
    t0 = driver.go()
    live = driver.live_bytes if isinstance(driver, EndpointDriver) else None
    timeline = Timeline(name, sc.timeline(), t0, progress, clock)
    monitor = Monitor(name, t0, sc.duration_s, progress, live, timeline.next_event, clock)
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
        cpu1 = _cpu_times()
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
    host_drops, drops_missing = _host_udp_drops(name, workload_hosts(sc))
    # The endpoint processes' own figures, before `collect` stops them (kernel baselines have
    # no process of ours: the monitor's probe stands for their hosts' timers).
    ep_stats = driver.process_stats() if isinstance(driver, EndpointDriver) else None
    run = driver.collect(t0, end_s)
    run.trims = sum(p["trims"] for c in switch.values() for p in c["ports"].values())
    cpu_util = (cpu1[0] - cpu0[0]) / max(cpu1[1] - cpu0[1], 1.0)
    timing = _timing(
        clock, real_s, end_s, cpu_util, switch, late_at_go, host_drops, drops_missing,
        ep_stats, monitor.jitter_p99_us(),
        Thresholds.for_fabric(sc.topology.params()).switch_late_us is not None,
    )  # fmt: skip
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


# ----- a whole run -----------------------------------------------------------------------------


@dataclass
class Outcome:
    summary: dict[str, Any]
    metrics: dict[str, TransportMetrics]
    out_dir: Path
    plots: dict[str, Path]
    judged: list[str]
    data: list[Path] = field(default_factory=list)  # the CSVs (and parquet files) written

    @property
    def passed(self) -> bool:
        return all(
            self.summary["transports"][t]["expectations"]["passed"]
            for t in self.judged
            if t in self.summary["transports"]
        )

    @property
    def valid(self) -> bool:
        """Every run kept up with its fabric (testbed.analysis.validity); no verdict: invalid."""
        return is_valid(self.summary.get("emulation"))


def default_out_dir(sc: Scenario, root: Path | None = None) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return (root or Path("results")) / f"{sc.name}-{stamp}"


def run_scenario(
    sc: Scenario,
    transports: Sequence[str],
    out_dir: Path,
    *,
    judged: Sequence[str] | None = None,
    progress: Progress | None = None,
    time_dilation: float | str | None = None,
    annotate: Mapping[str, Any] | None = None,
    data_format: str = "csv",
    plot_format: str = "png",
) -> Outcome:
    """Run `sc` once per transport and write the results folder; nothing is left running.

    `plot_format`: png, svg or pdf (testbed.analysis.plots.PLOT_FORMATS), for every plot.
    `annotate`: blocks added to summary.json as they are (a repetition's index and seed, a
    sweep point's values: testbed.experiment.repetitions).

    `time_dilation` (auto or N) overrides the scenario's `emulation.time_dilation`.
    `data_format` "parquet" also writes the tidy frames (`testbed.results`) as
    `<frame>.parquet` in `out_dir`; the CSVs are always written. A judged
    kernel transport at N > 1 is refused before anything is built; an unjudged one (compare's
    baselines) runs at N = 1 if the fabric fits there, else is skipped with the reason."""
    progress = progress or Progress()
    if plot_format not in PLOT_FORMATS:
        raise RunError(f"--plot-format: {plot_format!r} is not one of {', '.join(PLOT_FORMATS)}")
    dilation = plan(sc, time_dilation, load_budget())
    judged_kernel = [
        t for t in (judged or transports) if t in KERNEL_TRANSPORTS and t in transports
    ]
    if dilation.time_dilation > 1 and judged_kernel:
        raise RunError(
            f"transport: {judged_kernel[0]} runs on the kernel's clocks, which cannot be dilated, "
            f"and this run needs {dilation.describe()}; run it at --time-dilation 1 or "
            "compare it as a baseline"
        )
    if data_format not in DATA_FORMATS:
        raise RunError(f"--format: {data_format!r} is not one of {', '.join(DATA_FORMATS)}")
    created = first_missing(out_dir)  # what this run creates, handed to the sudo user at the end
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        outcome = _run_all(
            sc, transports, out_dir, judged, progress, dilation, annotate or {}, plot_format
        )
        if data_format == "parquet":
            # pandas loads in ~0.3 s: only runs that ask for parquet pay for it.
            from testbed.results import write_parquet

            outcome.data += write_parquet(out_dir)
        return outcome
    finally:
        hand_over(created, invoking_user())  # also what an aborted run left


def _run_all(
    sc: Scenario,
    transports: Sequence[str],
    out_dir: Path,
    judged: Sequence[str] | None,
    progress: Progress,
    dilation: DilationPlan,
    annotate: Mapping[str, Any],
    plot_format: str = "png",
) -> Outcome:
    started = datetime.now(timezone.utc)
    progress.line(dilation.describe())
    limits = Thresholds.for_fabric(sc.topology.params())
    results: dict[str, RunResult] = {}
    skipped: dict[str, str] = {}
    for t in transports:
        if t in KERNEL_TRANSPORTS and dilation.time_dilation > 1:
            if not kernel_fits(sc, load_budget()):
                skipped[t] = (
                    "kernel transport: runs in real time only, and this fabric needs "
                    f"time dilation {dilation.time_dilation:g}; not comparable with dilated runs"
                )
                progress.line(f"[{t}] skipped: {skipped[t]}")
                continue
        results[t] = _run_judged(sc, t, out_dir / "raw" / t, progress, dilation, limits)
        if results[t].note:
            progress.line(f"[{t}] note: {results[t].note}")
    if not results:
        raise RunError("transport: nothing could run (see the skipped transports above)")
    transports = list(results)
    fab_spines = sc.topology.spines
    metrics = {t: measure(r.run, sc, r.applied) for t, r in results.items()}
    first = results[transports[0]]
    emus = [r.emulation for r in results.values()]
    emulation = Emulation(
        cpu_util=statistics.fmean(e.cpu_util for e in emus),
        timer_jitter_us_p99=max(e.timer_jitter_us_p99 for e in emus),
        kernel_drops=sum(e.kernel_drops for e in emus),
    )
    summary = build_summary(
        sc, events=first.applied, transports=metrics, emulation=emulation, started=started
    )
    summary["provenance"] = provenance(sc)
    summary.update(annotate)
    summary["emulation"].update(_overall_verdict(sc, results, dilation))
    # What forwarded and what carried the bytes (contracts.datapath; docs/performance.md).
    summary["emulation"]["datapath"] = datapath.check(None, datapath.ENV)
    summary["emulation"]["payload"] = "real"
    if skipped:
        summary["skipped"] = skipped
    for t, r in results.items():
        entry = summary["transports"][t]
        entry["applied_events"] = [
            None if a.applied_at is None else round(a.applied_at, 4) for a in r.applied
        ]
        entry["emulation"] = {
            **r.verdict.summary(r.timing, limits),
            "reruns": r.reruns,
            "timer_jitter_us_p99": round(r.emulation.timer_jitter_us_p99, 1),
        }
        if r.note:
            entry["note"] = r.note
        if r.run.ev_retirements or name_is_endpoint(t):
            entry["ev_retirements"] = r.run.ev_retirements
            entry["qp_errors"] = r.run.qp_errors
        if r.controller is not None:
            entry["controller"] = controller_entry(r.controller, r.applied)
        if r.capture is not None:
            spec = sc.capture
            entry["capture"] = {
                "direction": spec.direction, "snaplen": spec.snaplen, "max_mb": spec.max_mb,
                **r.capture,
            }  # fmt: skip
            written = sum(f["written"] for f in r.capture["files"])
            lost = sum(f["not_written"] for f in r.capture["files"])
            progress.line(
                f"[{t}] pcap: {len(r.capture['files'])} files in "
                f"{out_dir / 'raw' / t / 'pcap'}, {written} frames"
                + (f", {lost} not written (past max_mb {spec.max_mb:g})" if lost else "")
            )
        if r.switch_counters and fab_spines > 1:
            entry["path_share"] = path_share_entry(sc.fabric(), r.switch_counters)

    write_summary(out_dir, summary)
    data = write_timeseries_csv(out_dir, metrics)
    shares = {
        t: e["path_share"]
        for t, e in summary["transports"].items()
        if e.get("path_share", {}).get("max_deviation_pct") is not None
    }
    intervals = [r.queue_interval_s for r in results.values() if r.queue_interval_s]
    plots = plot_run(
        out_dir,
        metrics,
        events=event_marks(first.applied),
        ports={t: (r.port_queues, r.port_counters) for t, r in results.items()},
        path_shares=shares,
        queue_limit_kb=sc.topology.queue_kb,
        queue_interval_ms=intervals[0] * 1000 if intervals else None,
        title=f"{sc.name} ({transports[0]})" if len(transports) == 1 else sc.name,
        fmt=plot_format,
    )
    write_report(out_dir, summary, scenario=sc, metrics=metrics, plots=plots)
    warning = emulation_warning(emulation)
    if warning:
        progress.line(warning)
    if not summary["emulation"]["valid"]:
        progress.line(
            "INVALID: "
            + "; ".join(summary["emulation"]["invalid_reasons"])
            + " -- these numbers are the machine's, not the network's"
        )
    judged = [t for t in (judged or transports) if t in results]
    return Outcome(summary, metrics, out_dir, plots, judged, data)


def _run_judged(
    sc: Scenario,
    transport: str,
    workdir: Path,
    progress: Progress,
    dilation: DilationPlan,
    limits: Thresholds,
) -> RunResult:
    """One transport's run, judged; under `auto`, an invalid run is rerun at a higher N."""
    n = 1.0 if transport in KERNEL_TRANSPORTS else dilation.time_dilation
    reruns = 0
    while True:
        r = run_transport(sc, transport, workdir, progress, n)
        r.verdict = judge(r.timing, limits)
        r.reruns = reruns
        progress.line(f"[{transport}] {banner(r.verdict, n)}")
        if (
            r.verdict.valid
            or not dilation.auto
            or transport in KERNEL_TRANSPORTS
            or reruns >= sc.emulation.max_reruns
            or n >= MAX_DILATION
        ):
            return r
        reruns += 1
        n = min(n * RERUN_FACTOR, MAX_DILATION)
        progress.line(f"[{transport}] auto: rerunning at time dilation {n:g}")
        shutil.rmtree(workdir, ignore_errors=True)


def reply_pairs(sc: Scenario, transport: str) -> dict[int, int]:
    """The EV -> reply EV pairing of the run's connections (as their endpoints compute it from
    the job's transport configuration), for the controller's view of round trips."""
    req = job_request(sc, transport)
    over = {k: v for k, v in req.get("transport", {}).items() if k != "ev_seed"}
    cfg = TransportConfig(
        num_evs=req.get("evs", TransportConfig.num_evs), planes=sc.topology.planes, **over
    )
    return cfg.reply_pairs()


def name_is_endpoint(transport: str) -> bool:
    return transport not in KERNEL_TRANSPORTS


def controller_entry(report: dict, applied: Sequence[AppliedEvent]) -> dict:
    """The controller's report, with each deny's delay after the first failure event of the
    timeline (virtual seconds): the time from failure to deny."""
    failed_at = [a.applied_at for a in applied if a.event.is_failure and a.applied_at is not None]
    first = min(failed_at) if failed_at else None
    out = dict(report)
    out["denies"] = []
    for d in report.get("denies", []):
        d = dict(d)
        if first is not None and d.get("denied_s") is not None:
            d["failure_to_deny_s"] = round(d["denied_s"] - first, 6)
        out["denies"].append(d)
    return out


def _overall_verdict(
    sc: Scenario, results: dict[str, RunResult], dilation: DilationPlan
) -> dict[str, Any]:
    """summary.json's `emulation` verdict over every transport's run."""
    reasons = [f"{t}: {why}" for t, r in results.items() for why in r.verdict.reasons]
    return {
        "valid": not reasons,
        "invalid_reasons": reasons,
        "time_dilation": max(r.timing.time_dilation for r in results.values()),
        "time_dilation_mode": "auto" if dilation.auto else "given",
        "switch_processes": {
            t: layout_for_run(sc.emulation.switch_processes, r.timing.time_dilation)
            for t, r in results.items()
        },
        "budget_hops_per_s": round(dilation.budget_hops_per_s),
        "budget_source": dilation.budget_source,
        "demand_hops_per_s": round(dilation.demand_hops_per_s),
        "real_s": round(sum(r.timing.real_s for r in results.values()), 3),
        "virtual_s": round(max(r.timing.virtual_s for r in results.values()), 6),
    }


def check_runnable(transports: Sequence[str]) -> None:
    """Fail before anything is built if a kernel baseline's tools are not installed."""
    needs = {"tcp": ("iperf3",), "mptcp": ("iperf3", "mptcpize")}
    for t in transports:
        for tool in needs.get(t, ()):
            if shutil.which(tool) is None:
                raise RunError(
                    f"--transports: {t!r} needs {tool}, which is not installed "
                    "(sudo bash scripts/setup.sh installs it)"
                )


COMPARE_BASELINES = ("mrc", "single-path", "spray-no-failover", "tcp", "mptcp")
"""What `compare` runs beside a scenario that names one transport."""


def compare_transports(listed: Sequence[str]) -> list[str]:
    """`compare`'s default: the scenario's own list when it names two or more transports (a
    file that lists three means those three); else its one transport first, then the
    baselines."""
    if len(listed) >= 2:
        return list(listed)
    return list(dict.fromkeys([*listed, *COMPARE_BASELINES]))


def transports_arg(text: str, labels: Sequence[str] = ()) -> list[str]:
    """`--transports a,b,c`, validated: one line naming a bad one. A name, or the label of a
    configuration the scenario lists (`labels`)."""

    names = [t.strip() for t in text.split(",") if t.strip()]
    known = list(TRANSPORTS) + [x for x in labels if x not in TRANSPORTS]
    for t in names:
        if t not in known:
            raise ValueError(f"--transports: unknown transport {t!r} (one of {', '.join(known)})")
    if not names:
        raise ValueError("--transports: empty list")
    return list(dict.fromkeys(names))


__all__ = [
    "Outcome",
    "Progress",
    "RunError",
    "default_out_dir",
    "run_scenario",
    "run_transport",
    "compare_transports",
    "transports_arg",
]

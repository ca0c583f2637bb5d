"""`testbed soak`: continuous all-reduce and permutation traffic under random failures, with
every message accounted for exactly once (docs/soak.md).

One fabric, one endpoint process per host, two jobs that never end by themselves: a ring
all-reduce of MAX_STEPS steps and a permutation of an endless byte count, both with per-message
records off (the ledger of each job counts every message; endpoint.ledger). Then:

1. a seeded schedule of failures (`testbed.scenario.soak_schedule`) is applied through the
   supervisor as a scenario timeline is, each with the time it took effect;
2. every SAMPLE_S the soak checks its processes: an endpoint that died ends the run at once
   (`EndpointDied`: one line, everything torn down -- a host's application is gone, its
   messages cannot be accounted for); a switch process that died is logged as a failure
   (`switch-process-died`) and the run goes on. What a dead switch looks like to its
   neighbours: its veths keep their carrier (the kernel holds both ends; only the process
   reading them is gone), so the neighbours' ports stay up and every packet sent to it is
   dropped unseen -- a **black hole**, not a link-down, and nobody prunes it from ECMP;
   under `emulation.switch_processes: shared` one process carries every switch, so one kill
   fails all of them (the log names them all);
3. every SAMPLE_S the RSS of every switch and endpoint process is read from /proc;
   every window the emulation's timing is measured and judged (`validity.judge`);
4. at the end the jobs are drained (nothing new is posted; what is in flight completes) and
   the final job statuses give the accounting: posted vs delivered per direction.

Results: summary.json, failures.jsonl (every failure applied, with times), rss.csv,
report.md, raw/endpoints/ (metrics files and logs), processes.json (written as soon as the
fabric is up: the PIDs a user -- or a test -- may kill).
"""

from __future__ import annotations

import contextlib
import csv
import json
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from contracts.clock import Clock
from contracts.stats import percentile
from contracts.workloads import MAX_STEPS
from endpoint.control import ControlError
from testbed.analysis.emulator_timing import (
    interval_lateness,
    nic_lost,
    start_histograms,
    switch_kernel_drops,
)
from testbed.analysis.soak import (
    RssSample,
    Window,
    accounting,
    failures_logged,
    read_rss_kb,
    rss_check,
    stretches,
    verdict,
)
from testbed.analysis.soak_report import write_soak_report
from testbed.analysis.validity import Thresholds, Timing
from testbed.experiment.errors import RunError
from testbed.experiment.monitor import cpu_times, host_udp_drops
from testbed.experiment.ownership import first_missing, hand_over, invoking_user
from testbed.experiment.progress import Progress
from testbed.experiment.provenance import provenance
from testbed.experiment.timeline import Timeline
from testbed.fabric import client
from testbed.fabric.cleanup import clean_fabric
from testbed.fabric.lifecycle import tear_down
from testbed.fabric.session import Fabric, new_name
from testbed.fabric.state import process_start_ticks
from testbed.fabric.switch_layout import layout_for_run
from testbed.harness.endpoint_driver import job_request, keep_files
from testbed.harness.endpoints import FabricEndpoints
from testbed.scenario import Scenario
from testbed.scenario.soak_schedule import FailureRates, describe_schedule, random_schedule

SAMPLE_S = 2.0  # real seconds between process checks and RSS samples
JITTER_TICK_S = 0.002
DRAIN_TIMEOUT_S = 60.0  # real seconds the in-flight messages get to complete at the end
QUICK_MINUTES = 0.75
SOAK_BIN_S = 1.0  # the endpoints' metrics bins (virtual s): 100x fewer records than a run's
SOAK_STATS_S = 5.0  # counters records (real s)
JOBS = {"1": "allreduce", "2": "permutation"}
PERMUTATION_BYTES = 10**15  # never reached: the permutation ends by draining
MESSAGE_BYTES = 64 * 1024


class EndpointDied(RunError):
    """An endpoint process exited during the soak: the run cannot account for its messages."""


@dataclass
class SoakOptions:
    minutes: float
    seed: int
    out_dir: Path
    rates: FailureRates = field(default_factory=FailureRates)
    transport: str | None = None  # default: the scenario's first

    @property
    def duration_s(self) -> float:
        return self.minutes * 60.0


@dataclass
class SoakOutcome:
    summary: dict[str, Any]
    out_dir: Path
    passed: bool
    reasons: list[str]


def validity_window_s(duration_s: float) -> float:
    """30 s windows for a long soak; a short one still gets about six."""
    return max(5.0, min(30.0, duration_s / 6.0))


class _JitterProbe(threading.Thread):
    """The machine's timer lateness (as the runner's monitor measures it), per window:
    `take()` returns the P99 of the samples since the last call and starts afresh, so a
    30-minute run keeps one window of samples, not all of them."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(daemon=True, name="soak-jitter")
        self.clock = clock
        self.stop_flag = threading.Event()
        self._late: list[float] = []
        self._lock = threading.Lock()

    def run(self) -> None:
        while not self.stop_flag.is_set():
            before = time.monotonic()
            time.sleep(JITTER_TICK_S)
            late = max(0.0, time.monotonic() - before - JITTER_TICK_S)
            with self._lock:
                self._late.append(self.clock.virtual(late) * 1e6)

    def take(self) -> float | None:
        """The nearest-rank P99 (contracts.stats) of the window's samples; None if none."""
        with self._lock:
            late, self._late = self._late, []
        return percentile(late, 99)


def _fmt(x: float | None, spec: str) -> str:
    return "not measured" if x is None else format(x, spec)


def _window_nic(procs: dict, prev: dict) -> dict:
    """The endpoint processes' NIC bytes (sent, lost) of one window: cumulative less `prev`."""
    keys = ("nic_lost_bytes", "nic_sent_bytes")
    out: dict = {}
    for h, p in procs.items():
        if not isinstance(p, dict) or not all(k in p for k in keys):
            out[h] = p
            continue
        before = prev.get(h, {})
        out[h] = {k: p[k] - before.get(k, 0) for k in keys}
    return out


def _signal_text(code: int | None) -> str:
    if code is None:
        return "exited"
    if code < 0:
        return f"killed by signal {-code}"
    return f"exit status {code}"


class Soak:
    """One soak: build, run, check, drain, collect, tear down (always)."""

    def __init__(self, sc: Scenario, opts: SoakOptions, progress: Progress) -> None:
        n = sc.emulation.time_dilation
        if n == "auto":
            raise RunError(
                "emulation.time_dilation: a soak needs a number (auto reruns invalid runs, "
                "which a soak reports stretch by stretch instead)"
            )
        self.sc = sc
        self.opts = opts
        self.progress = progress
        self.clock = Clock(float(n))
        self.transport = opts.transport or sc.transports[0]
        if sc.transport_name(self.transport) not in ("mrc", "single-path", "spray-no-failover"):
            raise RunError(f"transport: a soak runs an endpoint transport, not {self.transport!r}")
        self.layout = layout_for_run(sc.emulation.switch_processes, float(n))
        self.name = new_name("s")
        self.fab = sc.fabric()
        self.hosts = self.fab.hosts()
        self.eps: FabricEndpoints | None = None
        self.switch_pids: dict[str, tuple[int, int]] = {}  # node -> (pid, start ticks)
        self.dead_switches: dict[str, float] = {}
        self.log: list[dict] = []
        self.rss: list[RssSample] = []
        self.windows: list[Window] = []
        self.t0 = 0.0
        self.real0 = 0.0

    # ----- life cycle ----------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        sc, opts = self.sc, self.opts
        started = datetime.now(timezone.utc)
        self.progress.line(
            f"soak {self.name}: {sc.topology.spines} spines, {sc.topology.leaves} leaves, "
            f"{len(self.hosts)} hosts, {sc.topology.planes} plane(s), {self.layout} switch "
            f"processes, {self.transport}, {opts.minutes:g} min, seed {opts.seed}"
        )
        try:
            Fabric(
                sc.topology.params(),
                name=self.name,
                seed=sc.seed,
                time_dilation=self.clock.dilation,
                switch_processes=self.layout,
            ).up(owned=True)
            self._start_endpoints()
            result = self._drive()
        finally:
            self._teardown()
        return self._summarise(result, started)

    def _start_endpoints(self) -> None:
        st = client.state(self.name)
        for p in st.processes:
            if p.role == "switch":
                self.switch_pids[p.node] = (p.pid, p.start_ticks)
        self.eps = FabricEndpoints(
            self.name,
            self.fab,
            self.hosts,
            pace_mbps=self.sc.topology.link_mbps,
            bin_s=SOAK_BIN_S,
            stats_interval=SOAK_STATS_S,
            flush_interval=1.0,
        )
        self.opts.out_dir.mkdir(parents=True, exist_ok=True)
        procs = {
            "fabric": self.name,
            "switch_processes": self.layout,
            "switches": {n: pid for n, (pid, _) in self.switch_pids.items()},
            "endpoints": {h: p.pid for h, p in self.eps.procs.items()},
            "endpoint_dir": str(self.eps.dir),
        }
        (self.opts.out_dir / "processes.json").write_text(json.dumps(procs, indent=1))

    def _job_requests(self) -> dict[str, dict]:
        base = job_request(self.sc, self.transport)
        common = {k: v for k, v in base.items() if k != "workload"}
        w = self.sc.workload
        ar_bytes = getattr(w, "bytes", 256 * 1024)
        return {
            "1": {**common, "msg_records": False, "workload": {
                "kind": "allreduce", "hosts": self.hosts, "bytes": ar_bytes,
                "steps": MAX_STEPS, "message_bytes": MESSAGE_BYTES}},
            "2": {**common, "msg_records": False, "workload": {
                "kind": "permutation", "bytes": PERMUTATION_BYTES,
                "message_bytes": MESSAGE_BYTES, "window_messages": 2}},
        }  # fmt: skip

    def _drive(self) -> dict[str, Any]:
        co = self.eps.coordinator
        for job, req in self._job_requests().items():
            co.start(int(job), req)
        cpu_prev = cpu_times()
        self.real0 = time.monotonic()
        self.t0 = min(co.go(1).values())
        co.go(2)
        duration = self.opts.duration_s
        vduration = self.clock.virtual(duration)
        # Failures from 10 % in to 10 % before the end: the traffic is up before the first,
        # and the last is repaired before the drain.
        schedule = random_schedule(
            self.fab, 0.1 * vduration, 0.9 * vduration, self.opts.seed, self.opts.rates
        )
        self.progress.line(f"  schedule: {describe_schedule(schedule)} (seed {self.opts.seed})")
        timeline = Timeline(self.name, schedule, self.t0, self.progress, self.clock)
        probe = _JitterProbe(self.clock)
        limits = Thresholds.for_fabric(self.sc.topology.params())
        window_s = validity_window_s(duration)
        drops_prev, _ = self._kernel_drops()
        # Cumulative figures at the window's start: lateness histograms, NIC bytes.
        self._late_prev, self._ep_late_prev, self._nic_prev = {}, {}, {}
        timeline.start()
        probe.start()
        next_window = self.real0 + window_s
        win_start = 0.0
        try:
            while True:
                now = time.monotonic()
                elapsed = now - self.real0
                self._check_processes(elapsed)
                self._sample_rss(elapsed)
                if now >= next_window or elapsed >= duration:
                    cpu = cpu_times()
                    drops, missing = self._kernel_drops()
                    delta = None if drops is None or drops_prev is None else drops - drops_prev
                    self.windows.append(
                        self._window(win_start, elapsed, cpu_prev, cpu, delta, missing, probe)
                    )
                    cpu_prev, drops_prev, win_start = cpu, drops, elapsed
                    next_window = now + window_s
                    self.progress.line(self._status_line(elapsed))
                if elapsed >= duration:
                    break
                time.sleep(min(SAMPLE_S, max(0.05, duration - elapsed)))
        finally:
            timeline.cancel.set()
            probe.stop_flag.set()
        timeline.join(10)
        probe.join(2)
        self._log_schedule(timeline)
        drained = self._drain()
        statuses = self._statuses()
        switch = client.call(self.name, {"op": "counters", "node": None}, timeout=10)["counters"]
        return {"statuses": statuses, "switch": switch, "drained": drained,
                "planned": len(schedule), "limits": limits}  # fmt: skip

    def _teardown(self) -> None:
        if self.eps is not None:
            with contextlib.suppress(Exception):
                self.eps.stop()
            with contextlib.suppress(Exception):
                keep_files(self.eps.dir, self.opts.out_dir / "raw" / "endpoints")
            self.eps.cleanup()
        with contextlib.suppress(Exception):
            tear_down(self.name)
        clean_fabric(self.name)

    # ----- checks while running ------------------------------------------------------------

    def _t(self, elapsed_real: float) -> float:
        return round(self.clock.virtual(elapsed_real), 3)

    def _check_processes(self, elapsed: float) -> None:
        for host, p in self.eps.procs.items():
            code = p.poll()
            if code is not None:
                raise EndpointDied(
                    f"endpoint on {host} died ({_signal_text(code)}) at t={self._t(elapsed):g}s; "
                    "soak stopped, fabric and processes torn down"
                )
        newly = [
            n
            for n, (pid, ticks) in self.switch_pids.items()
            if n not in self.dead_switches and process_start_ticks(pid) != ticks
        ]
        if not newly:
            return
        how = self._switch_exit_codes()
        for n in newly:
            self.dead_switches[n] = elapsed
            pid = self.switch_pids[n][0]
            shared = sorted(m for m, (q, _) in self.switch_pids.items() if q == pid and m != n)
            entry = {
                "source": "process",
                "action": "switch-process-died",
                "node": n,
                "pid": pid,
                "at": self._t(elapsed),
                "applied_at": self._t(elapsed),
                "how": _signal_text(how.get(n)) if n in how else "exited",
                "seen_by_neighbours": "black hole (veth carrier stays up; no port goes down)",
            }
            if shared:
                entry["same_process_as"] = shared
            self.log.append(entry)
            self.progress.line(
                f"  {entry['at']:7.3f}s switch process of {n} (pid {pid}) died ({entry['how']}): "
                "logged as a failure, the soak goes on"
            )

    def _switch_exit_codes(self) -> dict[str, int]:
        """Exit statuses the supervisor saw ("switch died: spine1 (exit -9): ...")."""
        with contextlib.suppress(client.ClientError, KeyError):
            msg = client.call(self.name, {"op": "inspect"}, timeout=5)["state"]["message"]
            return {m[0]: int(m[1]) for m in re.findall(r"(\S+) \(exit (-?\d+)\)", msg)}
        return {}

    def _sample_rss(self, elapsed: float) -> None:
        seen: set[int] = set()
        for n, (pid, _) in self.switch_pids.items():
            if n in self.dead_switches or pid in seen:
                continue
            seen.add(pid)
            kb = read_rss_kb(pid)
            if kb is not None:
                label = n if self.layout != "shared" else "switches (shared)"
                self.rss.append(RssSample(elapsed, f"switch {label}", kb))
        for host, p in self.eps.procs.items():
            kb = read_rss_kb(p.pid)
            if kb is not None:
                self.rss.append(RssSample(elapsed, f"endpoint {host}", kb))

    def _kernel_drops(self) -> tuple[int | None, list[str]]:
        """Kernel drops so far (switches and hosts), or None and what could not be read."""
        try:
            sw = client.call(self.name, {"op": "counters", "node": None}, timeout=10)["counters"]
        except client.ClientError as exc:
            return None, [f"kernel drops: switch counters unreadable ({exc})"]
        sw_drops, missing = switch_kernel_drops(sw)
        host, host_missing = host_udp_drops(self.name, self.hosts)
        missing += host_missing
        return (None if missing or sw_drops is None or host is None else sw_drops + host), missing

    def _window(
        self, start, end, cpu0, cpu1, drops: int | None, missing: list[str], probe: _JitterProbe
    ) -> Window:
        """One window's verdict inputs, failing closed (testbed.analysis.emulator_timing):
        lateness from the processes' histograms less their previous window's."""
        try:
            sw = client.call(self.name, {"op": "counters", "node": None}, timeout=10)["counters"]
        except client.ClientError:
            sw = {}
        sw_late = interval_lateness(sw, self._late_prev, "switch", need_samples=False)
        self._late_prev = start_histograms(sw)
        try:
            stats = self.eps.coordinator.stats()
        except (ControlError, OSError):
            self._check_processes(end)  # an endpoint gone: say so, not "control error"
            raise
        procs = {h: r.get("process") if isinstance(r, dict) else None for h, r in stats.items()}
        ep_late = interval_lateness(procs, self._ep_late_prev, "endpoint", need_samples=False)
        self._ep_late_prev = start_histograms(procs)
        nic, nic_missing = nic_lost(_window_nic(procs, self._nic_prev))
        self._nic_prev = {h: p for h, p in procs.items() if isinstance(p, dict)}
        cpu_util = (cpu1[0] - cpu0[0]) / max(cpu1[1] - cpu0[1], 1.0)
        jitter = probe.take()
        ep_p99 = ep_late.p99_us
        if ep_p99 is not None and jitter is not None:
            ep_p99 = max(ep_p99, jitter)
        shaped = Thresholds.for_fabric(self.sc.topology.params()).switch_late_us is not None
        timing = Timing(
            time_dilation=self.clock.dilation,
            real_s=end - start,
            virtual_s=self.clock.virtual(end - start),
            cpu_util=cpu_util,
            switch_late_us_p99=sw_late.p99_us,
            endpoint_late_us_p99=ep_p99,
            endpoint_nic_lost=nic,
            kernel_drops=drops,
            missing=tuple(
                [*missing, *(sw_late.missing if shaped else []), *ep_late.missing, *nic_missing]
            ),
        )
        return Window(self._t(start), self._t(end), timing)

    def _status_line(self, elapsed: float) -> str:
        w = self.windows[-1].timing
        rss = {}
        for s in self.rss[-len(self.switch_pids) - len(self.hosts) :]:
            rss[s.process.split()[0]] = rss.get(s.process.split()[0], 0) + s.rss_kb
        return (
            f"  t={self._t(elapsed):7.1f}s  cpu {_fmt(w.cpu_util, '.0%')}  endpoint late p99 "
            f"{_fmt(w.endpoint_late_us_p99, '.0f')} us  RSS switches {rss.get('switch', 0) / 1024:.1f} "
            f"MB, endpoints {rss.get('endpoint', 0) / 1024:.1f} MB"
            + (f"  dead switches: {', '.join(self.dead_switches)}" if self.dead_switches else "")
        )

    def _log_schedule(self, timeline: Timeline) -> None:
        errors = {}
        for e in timeline.errors:
            m = re.match(r"events\[(\d+)\] ", e)
            if m:
                errors[int(m.group(1))] = e
        for i, a in enumerate(timeline.results()):
            entry: dict[str, Any] = {"source": "schedule", "at": a.event.at,
                                     "action": a.event.action, "what": a.event.describe(),
                                     **a.event.plan_kwargs()}  # fmt: skip
            entry.pop("action", None)
            entry["action"] = a.event.action
            entry["applied_at"] = None if a.applied_at is None else round(a.applied_at, 4)
            if i in errors:
                entry["error"] = errors[i]
            elif a.applied_at is None and timeline.index <= i:
                entry["error"] = "not reached: the soak ended before it"
            self.log.append(entry)
        self.log.sort(key=lambda e: e["at"])

    # ----- the end ------------------------------------------------------------------------

    def _drain(self) -> dict[str, Any]:
        """Nothing new is posted; wait until every posted message is acknowledged."""
        co = self.eps.coordinator
        t_drain = time.monotonic()
        for job in JOBS:
            co.drain(int(job))
        self.progress.line("  draining: no new messages; waiting for those in flight")
        while True:
            self._check_processes(time.monotonic() - self.real0)
            st = self._statuses()
            left = sum(s.get("unacked_messages", 0) for h in st.values() for s in h.values())
            waited = time.monotonic() - t_drain
            if left == 0 or waited > DRAIN_TIMEOUT_S:
                return {"complete": left == 0, "unacked_messages": left, "real_s": round(waited, 2)}
            time.sleep(0.5)

    def _statuses(self) -> dict[str, dict[str, dict]]:
        try:
            stats = self.eps.coordinator.stats()
        except (ControlError, OSError):
            self._check_processes(time.monotonic() - self.real0)
            raise
        return {h: {j: v["status"] for j, v in r["jobs"].items()} for h, r in stats.items()}

    def _summarise(self, result: dict[str, Any], started: datetime) -> dict[str, Any]:
        opts, sc = self.opts, self.sc
        run_s = self.windows[-1].end_s if self.windows else 0.0
        acct = accounting(result["statuses"], JOBS)
        if not result["drained"]["complete"]:
            acct["note"] = (
                f"{result['drained']['unacked_messages']} messages still unacknowledged after "
                f"{DRAIN_TIMEOUT_S:g}s of draining: counted as lost"
            )
        real_s = self.clock.real(run_s)
        rss = rss_check(
            self.rss, real_s, dead=self._dead_labels(), window_s=60.0 if real_s >= 360 else 10.0
        )
        stretch = stretches(self.windows, result["limits"])
        steps = result["statuses"].get(self.hosts[0], {}).get("1", {}).get("steps_finished", 0)
        switch_drops = {
            n: {k: v for k, v in c.get("drops", {}).items() if v}
            for n, c in result["switch"].items()
            if isinstance(c, dict) and "error" not in c
        }
        summary = {
            "kind": "soak",
            "scenario": sc.name,
            "started": started.isoformat(timespec="seconds"),
            "transport": self.transport,
            "seed": opts.seed,
            "minutes": opts.minutes,
            "run_s": run_s,
            "time_dilation": self.clock.dilation,
            "switch_processes": self.layout,
            "topology": sc.topology.model_dump(),
            "traffic": {
                "allreduce": {
                    "hosts": self.hosts,
                    "steps_finished": steps,
                    "bytes": self._job_requests()["1"]["workload"]["bytes"],
                },
                "permutation": {"message_bytes": MESSAGE_BYTES},
            },  # fmt: skip
            "failure_rates": {
                "mtbf_s": opts.rates.mtbf_s,
                "mttr_s": opts.rates.mttr_s,
                "min_gap_s": opts.rates.min_gap_s,
                "generator": "testbed.scenario.soak_schedule.random_schedule",
            },
            "accounting": acct,
            "drain": result["drained"],
            "failures": failures_logged(self.log, result["planned"], self.dead_switches),
            "switch_deaths": [e for e in self.log if e.get("action") == "switch-process-died"],
            "rss": rss,
            "emulation": stretch,
            "switch_drops": switch_drops,
            "metrics_bytes": self._metrics_bytes(),
            "provenance": provenance(sc),
        }
        passed, reasons = verdict(summary)
        summary["passed"] = passed
        summary["failed_checks"] = reasons
        return summary

    def _dead_labels(self) -> list[str]:
        if self.layout == "shared":
            return ["switch switches (shared)"] if self.dead_switches else []
        return [f"switch {n}" for n in self.dead_switches]

    def _metrics_bytes(self) -> dict[str, int]:
        d = self.opts.out_dir / "raw" / "endpoints"
        return {p.stem: p.stat().st_size for p in sorted(d.glob("*.jsonl"))} if d.is_dir() else {}


def run_soak(sc: Scenario, opts: SoakOptions, progress: Progress | None = None) -> SoakOutcome:
    """Run a soak and write its results folder; nothing is left running, whatever happens."""
    progress = progress or Progress()
    created = first_missing(opts.out_dir)
    opts.out_dir.mkdir(parents=True, exist_ok=True)
    soak = Soak(sc, opts, progress)
    try:
        summary = soak.run()
        write_results(opts.out_dir, summary, soak.log, soak.rss)
    finally:
        hand_over(created, invoking_user())
    return SoakOutcome(summary, opts.out_dir, summary["passed"], summary["failed_checks"])


def write_results(out: Path, summary: dict, log: list[dict], rss: list[RssSample]) -> None:
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    with open(out / "failures.jsonl", "w") as f:
        for e in log:
            f.write(json.dumps(e, separators=(",", ":")) + "\n")
    with open(out / "rss.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t_s", "process", "rss_kb"])
        for s in rss:
            w.writerow([round(s.t_s, 2), s.process, s.rss_kb])
    write_soak_report(out / "report.md", summary, log)

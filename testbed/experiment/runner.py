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

This module is the whole run (reruns, the summary, the report, the verdict); one transport's
run is testbed.experiment.transport_run, beside it the event timeline (.timeline), the monitor
of queues and timers (.monitor) and the progress line (.progress).

The exit code is 0 iff every transport that ran met every expectation (`compare` reports the
baselines without judging them: only the scenario's own ``transport`` list is held to them).
"""

from __future__ import annotations

import contextlib
import shutil
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from contracts import datapath
from contracts.clock import MAX_DILATION
from testbed.analysis.html_report import write_html_report
from testbed.analysis.metrics import (
    AppliedEvent,
    Emulation,
    TransportMetrics,
    build_summary,
    emulation_warning,
    measure,
)
from testbed.analysis.path_share import summary_entry as path_share_entry
from testbed.analysis.plots import PLOT_FORMATS, event_marks, plot_run
from testbed.analysis.report import write_report, write_summary, write_timeseries_csv
from testbed.analysis.trace_plots import plot_timelines
from testbed.analysis.validity import Thresholds, banner, is_valid, judge
from testbed.experiment.calibration import load_budget
from testbed.experiment.choices import COMPARE_BASELINES, DATA_FORMATS
from testbed.experiment.dilation import (
    RERUN_FACTOR,
    DilationPlan,
    kernel_fits,
    plan,
)
from testbed.experiment.errors import RunError
from testbed.experiment.ownership import first_missing, hand_over, invoking_user
from testbed.experiment.progress import Progress
from testbed.experiment.provenance import provenance
from testbed.experiment.transport_run import RunResult, run_transport
from testbed.fabric.switch_layout import layout_for_run
from testbed.scenario import (
    TRANSPORTS,
    Scenario,
)
from testbed.scenario.datapath_needs import python_only_features
from testbed.scenario.transports import KERNEL_TRANSPORTS

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
    with _switch_datapath(sc, progress):
        return _run_scenario(
            sc, transports, out_dir, judged, progress, time_dilation, annotate, data_format,
            plot_format,
        )  # fmt: skip


@contextlib.contextmanager
def _switch_datapath(sc: Scenario, progress: Progress):
    """The data path of this run's processes: Python if the scenario needs what only it has
    (testbed.scenario.datapath_needs) -- an error if the compiled one was asked for -- else
    the one asked for or built; restored after the run."""
    needs = python_only_features(sc)
    if not needs or datapath.check(None, datapath.ENV) == datapath.PYTHON:
        yield
        return
    if datapath.requested() == datapath.C:
        raise RunError(
            f"--datapath c: {needs[0]} runs in the Python data path only; use --datapath python"
        )
    progress.line(f"data path: python ({needs[0]} runs in the Python data path only)")
    with datapath.forced(datapath.PYTHON):
        yield


def _run_scenario(
    sc: Scenario,
    transports: Sequence[str],
    out_dir: Path,
    judged: Sequence[str] | None,
    progress: Progress,
    time_dilation: float | str | None,
    annotate: Mapping[str, Any] | None,
    data_format: str,
    plot_format: str,
) -> Outcome:
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
            "rss_peak_mb": r.rss_peak_mb,
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
    plots.update(
        plot_timelines(
            out_dir, metrics, events=event_marks(first.applied), title=sc.name, fmt=plot_format
        )  # fmt: skip
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
    write_html_report(out_dir, summary, scenario=sc, metrics=metrics, plots=plots, judged=judged)
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
        if not r.verdict.valid and r.timing.busy_elsewhere:
            progress.line(f"[{transport}] {r.timing.busy_elsewhere}: rerun when it is quiet")
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
    "RunResult",
    "RunError",
    "default_out_dir",
    "run_scenario",
    "run_transport",
    "compare_transports",
    "transports_arg",
]

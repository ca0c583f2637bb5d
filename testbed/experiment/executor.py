"""Where the runs of an experiment execute: here, one after another (local, the default), or
as one Slurm job array, one run per node (slurm).

With Slurm the experiment is expanded into its manifest (testbed.experiment.manifest), the
lines with no finished result are submitted as one array (testbed.experiment.slurm), each task
runs its line on a node of its own and writes its folder on the shared filesystem, and this
process waits, then aggregates from those folders exactly as a local repeat or sweep does
(testbed.experiment.repetitions): the same summary, report and plots. Before pooling it checks
that every run used the same emulator calibration (`check_pooling`): medians over runs of
different emulators, or of machines measured to carry different budgets, are not one sample.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast

from testbed.analysis.report import write_summary
from testbed.analysis.validity import is_valid
from testbed.experiment.errors import RunError
from testbed.experiment.manifest import (
    FINISHED,
    Experiment,
    ManifestLine,
    build_manifest,
    check_resumable,
    clear_run,
    line_status,
    pending,
    read_experiment,
    write_experiment,
)
from testbed.experiment.repetitions import (
    RepeatedOutcome,
    run_experiment,
    run_sweep,
    seeds_for,
    summarise_repeated,
)
from testbed.experiment.runner import Outcome, Progress
from testbed.experiment.slurm import SlurmOptions, active, cancel, last_job, preflight, submit, wait
from testbed.scenario import Scenario, quick
from testbed.scenario.sweep import SweepPoint, sweep_points

BUDGET_TOLERANCE = 0.10
"""Two calibrations whose budgets differ by more than this share are different emulators for
pooling: a run's time dilation and validity depend on its budget."""


@dataclass
class Cluster:
    """`--executor slurm` and its options."""

    options: SlurmOptions
    resume: bool = False
    allow_mixed_calibration: bool = False


def run_with_executor(
    sc: Scenario,
    transports: Sequence[str],
    out_dir: Path,
    *,
    cluster: Cluster | None = None,
    judged: Sequence[str] | None = None,
    progress: Progress | None = None,
    time_dilation: float | str | None = None,
    repeat: int | None = None,
    sweep: Mapping[str, Sequence[Any]] | None = None,
    quick_run: bool = False,
    data_format: str = "csv",
    plot_format: str = "png",
) -> Outcome | RepeatedOutcome:
    """`run_experiment` here (cluster None) or through Slurm: the same outcome either way."""
    if cluster is None:
        return run_experiment(
            sc, transports, out_dir, judged=judged, progress=progress,
            time_dilation=time_dilation, repeat=repeat, sweep=sweep, quick_run=quick_run,
            data_format=data_format, plot_format=plot_format,
        )  # fmt: skip
    progress = progress or Progress()
    exp = build_manifest(
        sc, transports, judged=judged, seeds=seeds_for(sc, repeat), repeat=repeat, sweep=sweep,
        quick_run=quick_run, time_dilation=time_dilation, plot_format=plot_format,
    )  # fmt: skip
    todo = select_lines(out_dir, exp, cluster.resume)
    preflight(out_dir, cluster.options)
    if cluster.resume:
        previous = last_job(out_dir)
        if previous is not None and active(previous):
            raise RunError(
                f"--resume: job {previous} of this experiment is still queued or running; "
                f"wait for it (squeue -j {previous}) or cancel it (scancel {previous}) first"
            )
    started = datetime.now(timezone.utc)
    if todo:
        for line in todo:
            if line_status(out_dir, line) == "partial":
                clear_run(out_dir, line)  # a partial folder is replaced, never read
        write_experiment(out_dir, exp)
        job = submit(out_dir, sc.name, [x.index for x in todo], cluster.options)
        progress.line(
            f"slurm: job {job}: {len(todo)} of {len(exp.lines)} runs submitted "
            f"(results in {out_dir}; logs in {out_dir / 'slurm' / 'logs'})"
        )
        seen = [-1]

        def poll(left: int) -> None:
            done = sum(line_status(out_dir, x) == FINISHED for x in exp.lines)
            if done != seen[0]:
                seen[0] = done
                progress.line(f"slurm: job {job}: {done} of {len(exp.lines)} runs finished")

        try:
            wait(job, poll_s=cluster.options.poll_s, on_poll=poll)
        except BaseException:
            # Interrupted (Ctrl-C, a signal): the array goes too, as a local run's fabric
            # does; --resume runs what did not finish.
            cancel(job)
            progress.line(f"slurm: job {job} cancelled; --resume --out {out_dir} finishes it")
            raise
    else:
        progress.line(f"slurm: all {len(exp.lines)} runs already finished; aggregating")
    unfinished = [x for x in exp.lines if line_status(out_dir, x) != FINISHED]
    if unfinished:
        shown = "; ".join(x.label() for x in unfinished[:5])
        more = f" and {len(unfinished) - 5} more" if len(unfinished) > 5 else ""
        raise RunError(
            f"slurm: {len(unfinished)} of {len(exp.lines)} runs did not finish ({shown}{more}); "
            f"see {out_dir / 'slurm' / 'logs'}, then run again with --resume --out {out_dir}"
        )
    outcome = aggregate_runs(
        sc, exp, out_dir, progress, started, allow_mixed=cluster.allow_mixed_calibration
    )
    if data_format == "parquet":
        from testbed.results import write_parquet  # pandas only when asked for

        outcome.data = write_parquet(out_dir)
    return outcome


def select_lines(out_dir: Path, exp: Experiment, resume: bool) -> list[ManifestLine]:
    """The lines to submit: all of them for a new experiment (whose folder must not hold one
    already), those with no valid finished result on --resume (of the same experiment)."""
    has_manifest = (out_dir / "slurm" / "manifest.jsonl").exists()
    if not resume:
        if has_manifest:
            raise RunError(
                f"--out: {out_dir} holds an experiment already; add --resume to finish it, "
                "or choose another folder"
            )
        if out_dir.is_dir() and any(out_dir.iterdir()):
            # A resume clears unfinished runs' folders: the experiment must own its folder.
            raise RunError(f"--out: {out_dir} is not empty; a Slurm experiment needs a new folder")
        return list(exp.lines)
    if not has_manifest:
        raise RunError(f"--resume: {out_dir} holds no experiment to resume (no slurm/manifest)")
    check_resumable(read_experiment(out_dir), exp)
    return pending(out_dir, exp.lines)


# ----- the aggregate ------------------------------------------------------------------------


@dataclass
class _Series:
    """A run's goodput over time as goodput.csv holds it: what the band plot draws."""

    bin_times: list[float]
    goodput_bins: list[float]


def load_outcome(folder: Path, judged: Sequence[str]) -> Outcome:
    """A finished run's Outcome from its folder: summary.json, and goodput.csv's
    whole-transport series (all a repeated run's aggregate reads besides the summary)."""
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    series: dict[str, _Series] = {}
    try:
        with (folder / "goodput.csv").open(newline="", encoding="utf-8") as fh:
            for row in csv.DictReader(fh):
                if row.get("flow") != "all":
                    continue
                s = series.setdefault(row["transport"], _Series([], []))
                s.bin_times.append(float(row["time_s"]))
                s.goodput_bins.append(float(row["goodput_mbps"]))
    except (OSError, KeyError, ValueError):
        series = {}
    plots = {p.stem: p for p in sorted(folder.iterdir()) if p.suffix in (".png", ".svg", ".pdf")}
    judged_here = [t for t in judged if t in summary.get("transports", {})]
    return Outcome(summary, cast(dict, series), folder, plots, judged_here)


def merge_transports(group: Path, runs: Sequence[Outcome]) -> Outcome:
    """One run's outcome from its transports' runs (each in by-transport/T): the summary a
    local run of them all would carry in its transports, verdict and provenance; written as
    the group's summary.json, beside a report.md that links each transport's own."""
    if len(runs) == 1 and runs[0].out_dir == group:
        return runs[0]
    first = runs[0].summary
    emus = [r.summary.get("emulation", {}) for r in runs]
    summary: dict[str, Any] = {
        **{k: v for k, v in first.items() if k not in ("transports", "emulation", "task")},
        "transports": {t: e for r in runs for t, e in r.summary["transports"].items()},
        "emulation": {
            "valid": all(is_valid(e) for e in emus),
            "invalid_reasons": [why for e in emus for why in e.get("invalid_reasons", [])],
            "time_dilation": max((e.get("time_dilation") or 1) for e in emus),
            "real_s": round(sum(e.get("real_s") or 0 for e in emus), 3),
            "virtual_s": max((e.get("virtual_s") or 0) for e in emus),
        },
        "by_transport": {
            t: str(r.out_dir.relative_to(group)) for r in runs for t in r.summary["transports"]
        },
    }
    write_summary(group, summary)
    lines = [f"# {summary.get('scenario', '')}: one run per transport", ""]
    lines += [f"- [{t}]({d}/report.md)" for t, d in summary["by_transport"].items()]
    (group / "report.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    metrics = {t: m for r in runs for t, m in r.metrics.items()}
    judged = [t for r in runs for t in r.judged]
    return Outcome(summary, metrics, group, {}, judged)


def calibration_key(summary: Mapping[str, Any]) -> dict[str, Any] | None:
    """What makes two runs' emulators the same (from the run's provenance.calibration)."""
    cal = (summary.get("provenance") or {}).get("calibration")
    if not isinstance(cal, Mapping):
        return None
    return cal


def check_pooling(summaries: Sequence[Mapping[str, Any]], allow_mixed: bool = False) -> None:
    """Refuse to pool runs whose emulator calibration differs (unless `allow_mixed`), naming
    how: a different emulator version or data path, CPU or core count, or a budget more
    than BUDGET_TOLERANCE apart, or some runs calibrated and some not."""
    if allow_mixed or len(summaries) < 2:
        return
    keys = [calibration_key(s) for s in summaries]
    node = [((s.get("provenance") or {}).get("node") or "?") for s in summaries]
    ref, ref_node = keys[0], node[0]
    for k, n in zip(keys[1:], node[1:], strict=True):
        why = _differs(ref, k)
        if why:
            raise RunError(
                f"calibration: runs on {ref_node} and {n} used different emulator calibrations "
                f"({why}); their numbers are not one sample. Calibrate the nodes alike "
                "(testbed calibrate on each), or pool them anyway with --allow-mixed-calibration"
            )


def _differs(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> str | None:
    if a is None and b is None:
        return None
    if a is None or b is None:
        return "one calibrated, one on the fallback budget"
    ma, mb = a.get("machine") or {}, b.get("machine") or {}
    for key, what in (("emulator", "emulator version"), ("datapath", "data path"),
                      ("cpu", "CPU model"), ("cores", "core count")):  # fmt: skip
        if ma.get(key) != mb.get(key):
            return f"{what} {ma.get(key)!r} vs {mb.get(key)!r}"
    ba, bb = a.get("budget_hops_per_s"), b.get("budget_hops_per_s")
    if ba and bb and abs(ba - bb) > BUDGET_TOLERANCE * max(ba, bb):
        return f"budget {ba:,.0f} vs {bb:,.0f} packet-hops/s"
    return None


def aggregate_runs(
    sc: Scenario,
    exp: Experiment,
    out_dir: Path,
    progress: Progress,
    started: datetime,
    allow_mixed: bool = False,
) -> Outcome | RepeatedOutcome:
    """The finished lines' folders aggregated as a local run of the same experiment would."""
    by_group: dict[str, list[ManifestLine]] = {}
    for line in exp.lines:
        by_group.setdefault(line.group, []).append(line)
    runs: dict[str, Outcome] = {}
    for group, lines in by_group.items():
        parts = [load_outcome(out_dir / x.dir, exp.judged) for x in lines]
        runs[group] = merge_transports(out_dir / group, parts)
    check_pooling([r.summary for r in runs.values()], allow_mixed)
    seeds = exp.seeds
    judged = exp.judged
    if exp.kind == "single":
        # The series read back are not the runner's whole metrics: printing reads only the
        # summary then, as it does for a run that measured nothing more.
        one = runs["."]
        data = sorted(p for p in one.out_dir.glob("*.csv"))
        return Outcome(one.summary, {}, one.out_dir, one.plots, one.judged, data)
    if exp.kind == "repeat":
        run_sc = quick(sc) if exp.quick else sc
        return summarise_repeated(
            run_sc, seeds, [runs[f"rep-{i:02d}"] for i in range(1, len(seeds) + 1)], out_dir,
            judged, started, None, progress, exp.plot_format,
        )  # fmt: skip
    points = sweep_points(sc, exp.sweep)

    def made(p: SweepPoint, where: Path, tag: dict[str, Any]) -> Outcome | RepeatedOutcome:
        base = str(where.relative_to(out_dir))
        if len(seeds) == 1:
            return runs[base]
        point_sc = quick(p.scenario) if exp.quick else p.scenario
        reps = [runs[f"{base}/rep-{i:02d}"] for i in range(1, len(seeds) + 1)]
        return summarise_repeated(
            point_sc, seeds, reps, where, judged, started, tag, progress, exp.plot_format
        )

    return run_sweep(
        sc, points, exp.transports, out_dir, judged, progress, exp.time_dilation, exp.repeat,
        exp.quick, exp.plot_format, made=made,
    )  # fmt: skip

"""Repetitions and sweeps: a scenario run once per seed, and at every point of a sweep.

A single run is one draw of a noisy process, so a claim needs repetitions: each on a fresh
fabric with its own seed (the seed picks the permutation, the ECMP hash and the source ports,
so another seed is another set of collisions), each a complete results folder of its own
(`rep-01/`, ...), and beside them an aggregate: per transport and metric the median of the
valid repetitions with a 95 % distribution-free confidence interval, the expectations judged on the
scenario's stated statistic (`expect.statistic`), and how many runs were invalid and left out.

A sweep runs the scenario at every point of its `sweep:` grid (testbed.scenario.sweep), each
point a run or a repeated run under `points/`, and draws every headline metric against the
swept value. Every point is validated before the first is built.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from testbed.analysis.aggregate import CONFIDENCE, aggregate, repeated_valid
from testbed.analysis.html_report import write_html_report
from testbed.analysis.report import markdown_table, write_summary
from testbed.analysis.spread_plots import plot_goodput_band, plot_metric_intervals, plot_sweep
from testbed.analysis.validity import is_valid
from testbed.experiment.errors import RunError
from testbed.experiment.ownership import first_missing, hand_over, invoking_user
from testbed.experiment.provenance import provenance
from testbed.experiment.runner import Outcome, Progress, run_scenario
from testbed.scenario import Scenario, quick
from testbed.scenario.sweep import SweepPoint, sweep_points


@dataclass
class RepeatedOutcome:
    """A repeated run (or a sweep): the aggregate summary and where everything went."""

    summary: dict[str, Any]
    out_dir: Path
    plots: dict[str, Path]
    judged: list[str]
    runs: list[Outcome] = field(default_factory=list)
    data: list[Path] = field(default_factory=list)  # the tidy frames written (--format parquet)

    @property
    def passed(self) -> bool:
        if "points" in self.summary:
            return all(p["passed"] for p in self.summary["points"])
        ts = self.summary["transports"]
        return all(ts[t]["expectations"]["passed"] for t in self.judged if t in ts)

    @property
    def valid(self) -> bool:
        return is_valid(self.summary.get("emulation"))


def seeds_for(sc: Scenario, repeat: int | None) -> list[int]:
    """The seeds of the runs: the file's `seeds`, else `repeat` seeds from `seed` on."""
    if repeat is None:
        return sc.run_seeds
    if repeat < 1:
        raise RunError(f"--repeat: must be 1 or more, got {repeat}")
    if sc.seeds is not None and repeat != len(sc.seeds):
        raise RunError(
            f"--repeat {repeat}: the scenario lists {len(sc.seeds)} seeds; "
            "drop --repeat or change `seeds`"
        )
    return sc.run_seeds if sc.seeds is not None else [sc.seed + i for i in range(repeat)]


def run_experiment(
    sc: Scenario,
    transports: Sequence[str],
    out_dir: Path,
    *,
    judged: Sequence[str] | None = None,
    progress: Progress | None = None,
    time_dilation: float | str | None = None,
    repeat: int | None = None,
    sweep: Mapping[str, Sequence[Any]] | None = None,
    quick_run: bool = False,
    data_format: str = "csv",
    plot_format: str = "png",
) -> Outcome | RepeatedOutcome:
    """Whatever the scenario and options ask for: a sweep, a repeated run, or one run.

    `sc` is the scenario as written; `quick_run` shortens every run (after the sweep's values
    are set). A single run gives the plain `Outcome` of `run_scenario`. With `data_format`
    "parquet", the tidy frames of every run below `out_dir` go into `out_dir` (one set)."""
    progress = progress or Progress()
    points = sweep_points(sc, sweep) if (sweep or sc.sweep) else []
    seeds = seeds_for(sc, repeat)  # checked before anything is built
    created = first_missing(out_dir)
    try:
        if points:
            outcome: RepeatedOutcome = run_sweep(
                sc, points, transports, out_dir, judged, progress, time_dilation, repeat,
                quick_run, plot_format,
            )  # fmt: skip
        else:
            sc = quick(sc) if quick_run else sc
            if len(seeds) == 1:
                return run_scenario(
                    _with_seed(sc, seeds[0]),
                    transports,
                    out_dir,
                    judged=judged,
                    progress=progress,
                    time_dilation=time_dilation,
                    data_format=data_format,
                    plot_format=plot_format,
                )
            outcome = run_repeated(
                sc, seeds, transports, out_dir, judged=judged, progress=progress,
                time_dilation=time_dilation, plot_format=plot_format,
            )  # fmt: skip
        if data_format == "parquet":
            from testbed.results import write_parquet  # pandas only when asked for

            outcome.data = write_parquet(out_dir)
        return outcome
    finally:
        hand_over(created, invoking_user())


def _with_seed(sc: Scenario, seed: int) -> Scenario:
    return sc.model_copy(update={"seed": seed, "seeds": None, "sweep": None})


def run_repeated(
    sc: Scenario,
    seeds: Sequence[int],
    transports: Sequence[str],
    out_dir: Path,
    *,
    judged: Sequence[str] | None = None,
    progress: Progress | None = None,
    time_dilation: float | str | None = None,
    annotate: Mapping[str, Any] | None = None,
    plot_format: str = "png",
) -> RepeatedOutcome:
    """`sc` once per seed, each in out_dir/rep-NN, then the aggregate in out_dir."""
    progress = progress or Progress()
    started = datetime.now(timezone.utc)
    out_dir.mkdir(parents=True, exist_ok=True)
    runs: list[Outcome] = []
    for i, seed in enumerate(seeds, start=1):
        progress.line(f"== repetition {i} of {len(seeds)} (seed {seed})")
        tag = {"repetition": {"index": i, "of": len(seeds), "seed": seed}, **(annotate or {})}
        runs.append(
            run_scenario(
                _with_seed(sc, seed),
                transports,
                out_dir / f"rep-{i:02d}",
                judged=judged,
                progress=progress,
                time_dilation=time_dilation,
                annotate=tag,
                plot_format=plot_format,
            )
        )
    return summarise_repeated(
        sc, seeds, runs, out_dir, judged, started, annotate, progress, plot_format
    )


def summarise_repeated(
    sc: Scenario,
    seeds: Sequence[int],
    runs: Sequence[Outcome],
    out_dir: Path,
    judged: Sequence[str] | None,
    started: datetime,
    annotate: Mapping[str, Any] | None,
    progress: Progress,
    plot_format: str = "png",
) -> RepeatedOutcome:
    leaves = [r.summary for r in runs]
    transports = list(dict.fromkeys(t for s in leaves for t in s["transports"]))
    block = aggregate(leaves, sc.expect, transports)
    valid, reasons = repeated_valid(block)
    prov = provenance(sc)
    prov["seeds"] = list(seeds)
    summary: dict[str, Any] = {
        "scenario": sc.name,
        "started": started.isoformat(timespec="seconds"),
        "repetitions": {
            "n": len(seeds),
            "seeds": list(seeds),
            "statistic": sc.expect.statistic,
            "confidence": CONFIDENCE,
            "interval": "distribution-free interval of the median (order statistics); below 6 runs "
            "the range of the runs, with its lower coverage",
            "runs": [
                {
                    "index": i,
                    "seed": seed,
                    "dir": r.out_dir.name,
                    "valid": r.valid,
                    "passed": r.passed,
                    "time_dilation": r.summary.get("emulation", {}).get("time_dilation"),
                }
                for i, (seed, r) in enumerate(zip(seeds, runs, strict=True), start=1)
            ],
        },
        **dict(annotate or {}),
        "transports": block,
        "emulation": {"valid": valid, "invalid_reasons": reasons},
        "provenance": prov,
    }
    write_summary(out_dir, summary)
    plots = {}
    series = {
        t: [
            (r.metrics[t].bin_times, r.metrics[t].goodput_bins)
            for r in runs
            if t in r.metrics and is_valid(r.summary["transports"][t].get("emulation"))
        ]
        for t in transports
    }
    if any(series.values()):
        plots["Goodput over time: median and range of the valid runs"] = plot_goodput_band(
            series, out_dir / f"goodput_band.{plot_format}", title=sc.name
        )
    plots["Headline metrics: median, 95 % CI and every valid run"] = plot_metric_intervals(
        block, out_dir / f"metrics_ci.{plot_format}", title=sc.name
    )
    (out_dir / "report.md").write_text(
        render_repeated_report(summary, plots, out_dir), encoding="utf-8"
    )
    if not valid:
        progress.line("INVALID: " + "; ".join(reasons) + " -- too few runs kept up to be a result")
    judged_list = [t for t in (judged or transports) if t in block]
    write_html_report(
        out_dir, summary, plots=plots, judged=judged_list, table=repeated_rows(block), scenario=sc
    )
    return RepeatedOutcome(summary, out_dir, plots, judged_list, list(runs))


def _cell(stats: Mapping[str, Any] | None, fmt: str = ".3g") -> str:
    if not stats or stats.get("median") is None:
        return "—"
    if stats["n"] == 1:  # one run: a value, no interval
        return f"{stats['median']:{fmt}} (n=1)"
    cover = stats.get("ci_coverage")
    short = f", {cover:.0%}" if cover is not None and cover < CONFIDENCE else ""
    return (
        f"{stats['median']:{fmt}} [{stats['ci_low']:{fmt}}, {stats['ci_high']:{fmt}}{short}] "
        f"(n={stats['n']})"
    )


def repeated_rows(block: Mapping[str, Mapping[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The report's table: one row per metric, a column per transport."""
    transports = list(block)
    metrics = list(dict.fromkeys(m for s in block.values() for m in s["metrics"]))
    rows = [
        [f"{m} ({block[transports[0]]['metrics'].get(m, {}).get('unit', '')})".replace(" ()", "")]
        + [_cell(block[t]["metrics"].get(m)) for t in transports]
        for m in metrics
    ]
    rows.append(
        ["valid runs"] + [f"{block[t]['valid_runs']} of {block[t]['runs']}" for t in transports]
    )
    rows.append(
        ["expectations"]
        + [
            ("pass" if block[t]["expectations"]["passed"] else "FAIL")
            + f" ({block[t]['expectations']['statistic']})"
            for t in transports
        ]
    )
    return ["metric", *transports], rows


def format_plain_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Aligned plain text for the terminal and CI logs."""
    table = [list(header), *map(list, rows)]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines = ["  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def render_repeated_report(
    summary: Mapping[str, Any], plots: Mapping[str, Path], out_dir: Path
) -> str:
    rep = summary["repetitions"]
    header, rows = repeated_rows(summary["transports"])
    lines = [
        f"# {summary['scenario']}: {rep['n']} repetitions",
        "",
        f"Seeds {', '.join(map(str, rep['seeds']))}. Each cell: the median of the valid runs "
        f"[{rep['confidence']:.0%} confidence interval of that median, {rep['interval']}] "
        "(n = valid runs that measured it). Invalid runs are left out of every statistic.",
        "",
    ]
    if not summary["emulation"]["valid"]:
        lines += [
            "**INVALID**: "
            + "; ".join(summary["emulation"]["invalid_reasons"])
            + ". These figures are the machine's, not the network's.",
            "",
        ]
    lines += [markdown_table(header, rows), "", "## Expectations", ""]
    for t, s in summary["transports"].items():
        e = s["expectations"]
        checks = ", ".join(
            f"{c['name']} {c['value']} vs {c['limit']}: {'pass' if c['passed'] else 'FAIL'}"
            for c in e["checks"]
        )
        lines.append(
            f"- {t}: judged on the {e['statistic']} of {e['over_valid_runs']} valid runs: "
            + (checks or "nothing to check")
        )
    lines += ["", "## Runs", ""]
    lines.append(
        markdown_table(
            ["run", "seed", "time dilation", "valid", "expectations"],
            [
                [
                    f"[{r['dir']}]({r['dir']}/report.md)",
                    str(r["seed"]),
                    f"{r['time_dilation']}",
                    "yes" if r["valid"] else "**no**",
                    "pass" if r["passed"] else "FAIL",
                ]
                for r in rep["runs"]
            ],
        )  # fmt: skip
    )
    for caption, path in plots.items():
        lines += ["", f"## {caption}", "", f"![{caption}]({Path(path).relative_to(out_dir)})"]
    return "\n".join(lines) + "\n"


def run_sweep(
    sc: Scenario,
    points: Sequence[SweepPoint],
    transports: Sequence[str],
    out_dir: Path,
    judged: Sequence[str] | None,
    progress: Progress,
    time_dilation: float | str | None,
    repeat: int | None,
    quick_run: bool,
    plot_format: str = "png",
    made: Callable[[SweepPoint, Path, dict[str, Any]], Outcome | RepeatedOutcome] | None = None,
) -> RepeatedOutcome:
    """Every point of the sweep under out_dir/points/, then sweep.json, sweep.md and a plot.

    `made(point, folder, tag)`: the point's outcome from runs made elsewhere (a Slurm array,
    testbed.experiment.executor), read instead of run."""
    started = datetime.now(timezone.utc)
    out_dir.mkdir(parents=True, exist_ok=True)
    done = []
    for p in points:
        point_sc = quick(p.scenario) if quick_run else p.scenario
        seeds = seeds_for(sc, repeat)
        where = out_dir / "points" / p.slug
        shown = ", ".join(f"{k} = {v}" for k, v in p.values.items())
        progress.line(f"== sweep point {p.index} of {len(points)}: {shown}")
        tag = {"sweep_point": dict(p.values)}
        if made is not None:
            o = made(p, where, tag)
            block = (
                o.summary["transports"]
                if isinstance(o, RepeatedOutcome)
                else aggregate([o.summary], sc.expect, list(o.summary["transports"]))
            )
        elif len(seeds) == 1:
            o = run_scenario(
                _with_seed(point_sc, seeds[0]), transports, where, judged=judged,
                progress=progress, time_dilation=time_dilation, annotate=tag,
                plot_format=plot_format,
            )  # fmt: skip
            block = aggregate([o.summary], sc.expect, list(o.summary["transports"]))
        else:
            o = run_repeated(
                point_sc, seeds, transports, where, judged=judged, progress=progress,
                time_dilation=time_dilation, annotate=tag, plot_format=plot_format,
            )  # fmt: skip
            block = o.summary["transports"]
        done.append(
            {
                "index": p.index,
                "values": dict(p.values),
                "dir": str(where.relative_to(out_dir)),
                "valid": o.valid,
                "passed": o.passed,
                "transports": block,
            }
        )
    summary = {
        "scenario": sc.name,
        "started": started.isoformat(timespec="seconds"),
        "sweep": _axes(points),
        "points": done,
        "emulation": {
            "valid": all(d["valid"] for d in done),
            "invalid_reasons": [f"point {d['index']} ({d['dir']})" for d in done if not d["valid"]],
        },
        "provenance": provenance(sc),
    }
    (out_dir / "sweep.json").write_text(
        json.dumps(summary, indent=2, allow_nan=False) + "\n", encoding="utf-8"
    )
    plots = {}
    for key in summary["sweep"]:
        name = "sweep" if len(summary["sweep"]) == 1 else f"sweep_{_file_safe(key)}"
        plots[f"Headline metrics against {key}"] = plot_sweep(
            done, key, out_dir / f"{name}.{plot_format}", title=sc.name
        )
    (out_dir / "sweep.md").write_text(
        render_sweep_report(summary, plots, out_dir), encoding="utf-8"
    )
    if not summary["emulation"]["valid"]:
        progress.line("INVALID points: " + "; ".join(summary["emulation"]["invalid_reasons"]))
    judged_list = list(judged or transports)
    write_html_report(out_dir, summary, plots=plots, table=sweep_rows(summary), scenario=sc)
    return RepeatedOutcome(summary, out_dir, plots, judged_list)


def _axes(points: Sequence[SweepPoint]) -> dict[str, list[Any]]:
    axes: dict[str, list[Any]] = {}
    for p in points:
        for k, v in p.values.items():
            if v not in axes.setdefault(k, []):
                axes[k].append(v)
    return axes


def _file_safe(key: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in key).strip("_")


def sweep_rows(summary: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The sweep's table: one row per point and transport."""
    keys = list(summary["sweep"])
    transports = list(dict.fromkeys(t for p in summary["points"] for t in p["transports"]))
    metrics = ("goodput_mbps", "max_stall_ms", "failover_ms", "step_p100_ms")
    header = [*keys, "transport", *metrics, "valid runs", "expectations"]
    rows = []
    for p in summary["points"]:
        for t in transports:
            s = p["transports"].get(t)
            if s is None:
                continue
            rows.append(
                [str(p["values"][k]) for k in keys]
                + [t]
                + [_cell(s["metrics"].get(m)) for m in metrics]
                + [
                    f"{s['valid_runs']} of {s['runs']}",
                    "pass" if s["expectations"]["passed"] else "FAIL",
                ]
            )
    return header, rows


def render_sweep_report(
    summary: Mapping[str, Any], plots: Mapping[str, Path], out_dir: Path
) -> str:
    keys = list(summary["sweep"])
    header, rows = sweep_rows(summary)
    lines = [
        f"# {summary['scenario']}: sweep over {', '.join(keys)}",
        "",
        "Each cell: the median of the point's valid runs [95 % interval of the median] (n). A point's "
        "folder under `points/` holds its full results.",
        "",
    ]
    if not summary["emulation"]["valid"]:
        lines += [
            "**INVALID points** (their figures are the machine's, not the network's): "
            + "; ".join(summary["emulation"]["invalid_reasons"]),
            "",
        ]
    lines += [markdown_table(header, rows)]
    for caption, path in plots.items():
        lines += ["", f"## {caption}", "", f"![{caption}]({Path(path).relative_to(out_dir)})"]
    return "\n".join(lines) + "\n"

"""Running scenarios from Python: `load`, `validate` and `run`, the calls behind `testbed run`.

A scenario may be given as a shipped scenario's name (``"silent-blackhole"``), a YAML path, a
dict with the same keys as the file, or an already validated `Scenario`. Everything is checked
before anything is built, exactly as on the command line, so a script gets the same one-line
`ScenarioError` a user of the CLI would.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from testbed.analysis.plots import PLOT_FORMATS
from testbed.experiment.executor import Cluster, run_with_executor
from testbed.experiment.repetitions import RepeatedOutcome, seeds_for
from testbed.experiment.runner import (
    Outcome,
    Progress,
    check_runnable,
    default_out_dir,
    transports_arg,
)
from testbed.fabric.lifecycle import need_root
from testbed.scenario import Scenario, load_scenario, quick
from testbed.scenario import validate as validate_dict
from testbed.scenario.catalog import find_scenario
from testbed.scenario.sweep import sweep_points

ScenarioLike = Scenario | Mapping[str, Any] | str | Path


def load(scenario: ScenarioLike, *, quick_run: bool = False) -> Scenario:
    """The validated scenario behind `scenario` (name, path, dict or Scenario).

    `quick_run`: shorten the timeline to a quarter (what ``--quick`` does)."""
    if isinstance(scenario, Scenario):
        sc = scenario
    elif isinstance(scenario, Mapping):
        sc = validate_dict(dict(scenario))
    else:
        sc = load_scenario(find_scenario(str(scenario)))
    return quick(sc) if quick_run else sc


def validate(scenario: ScenarioLike) -> Scenario:
    """Check a scenario completely (shape and meaning) without building anything."""
    return load(scenario)


def run_outcome(
    scenario: ScenarioLike,
    *,
    transports: Sequence[str] | str | None = None,
    out: str | Path | None = None,
    quick_run: bool = False,
    progress: Progress | None = None,
    time_dilation: float | str | None = None,
    repeat: int | None = None,
    sweep: Mapping[str, Sequence[Any]] | None = None,
    data_format: str = "csv",
    plot_format: str = "png",
    cluster: Cluster | None = None,
) -> Outcome | RepeatedOutcome:
    """`run`, returning the whole outcome (summary, plots, pass/fail, validity): an `Outcome`
    for one run, a `RepeatedOutcome` for repetitions or a sweep.

    `cluster`: run every run as a task of one Slurm job array and aggregate here
    (testbed.experiment.executor; docs/cluster.md); None runs them here."""
    sc = load(scenario)
    if plot_format not in PLOT_FORMATS:
        raise ValueError(f"plot_format: {plot_format!r} is not one of {', '.join(PLOT_FORMATS)}")
    if transports is None:
        chosen = list(sc.transports)
    elif isinstance(transports, str):
        chosen = transports_arg(transports, sc.transports)
    else:
        chosen = transports_arg(",".join(transports), sc.transports)
    check_runnable(chosen)
    if sweep:
        sweep_points(sc, sweep)  # every point checked before anything is built
    seeds_for(sc, repeat)
    if cluster is None:  # on Slurm, the tasks need root on their nodes
        need_root("testbed run")
    out_dir = Path(out) if out is not None else default_out_dir(sc)
    return run_with_executor(
        sc, chosen, out_dir, cluster=cluster, progress=progress, time_dilation=time_dilation,
        repeat=repeat, sweep=sweep, quick_run=quick_run, data_format=data_format,
        plot_format=plot_format,
    )  # fmt: skip


def run(
    scenario: ScenarioLike,
    *,
    transports: Sequence[str] | str | None = None,
    out: str | Path | None = None,
    quick_run: bool = False,
    progress: Progress | None = None,
    time_dilation: float | str | None = None,
    repeat: int | None = None,
    sweep: Mapping[str, Sequence[Any]] | None = None,
    data_format: str = "csv",
    plot_format: str = "png",
    cluster: Cluster | None = None,
) -> dict[str, Any]:
    """Run a scenario once per transport on fresh fabrics and return its summary (the content
    of ``summary.json``); the results folder (report, CSVs, plots) is `out`, default
    ``results/NAME-TIMESTAMP``. `transports` defaults to the scenario's own. `time_dilation`
    (auto or N) overrides the scenario's `emulation.time_dilation`. `data_format` "parquet"
    also writes the tidy frames of `testbed.results` as `<frame>.parquet`. `plot_format`: png, svg
    or pdf, for every plot. Needs root.

    `repeat` N (or the scenario's `seeds`): N runs, the summary holds medians with intervals
    (docs/results.md). `sweep` ({"events[0].percent": [0, 1, 2]}, or the scenario's own):
    the summary is sweep.json's, one entry per point.

    ``passed``: every judged transport met its expectations; ``valid``: every run kept up
    with its fabric (an invalid run's numbers are the machine's, not the network's).

    `cluster` (testbed.experiment.executor.Cluster): the runs as one Slurm job array, one per
    node, aggregated here as above (docs/cluster.md)."""
    outcome = run_outcome(
        scenario,
        transports=transports,
        out=out,
        quick_run=quick_run,
        progress=progress,
        time_dilation=time_dilation,
        repeat=repeat,
        sweep=sweep,
        data_format=data_format,
        plot_format=plot_format,
        cluster=cluster,
    )
    summary = dict(outcome.summary)
    summary["out_dir"] = str(outcome.out_dir)
    summary["passed"] = outcome.passed
    summary["valid"] = outcome.valid
    return summary

"""One Slurm array task: run exactly one manifest line (testbed.experiment.manifest).

`python -m testbed.cli.slurm_task RESULTS_DIR TASK_ID`, from the batch script that
testbed.experiment.slurm writes. The line's folder is marked PARTIAL and its state "running"
(node, job, start) before the run, and only after the run's summary is written is the state
"finished" (with the end) and the mark removed: a node that dies in between leaves a folder a
resume recognises and replaces. A task that finds a partial folder of its own line (Slurm
requeued it after its node failed) clears it first. The exit status is 0 when the run finished,
whatever its expectations; the parent judges the experiment as a whole.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import traceback
from pathlib import Path

from testbed.experiment.manifest import (
    FAILED,
    FINISHED,
    PARTIAL,
    RUNNING,
    clear_run,
    line_status,
    read_experiment,
    write_state,
)
from testbed.experiment.progress import Progress
from testbed.experiment.runner import run_scenario
from testbed.fabric import interrupts
from testbed.fabric.lifecycle import own_fabrics
from testbed.scenario import validate


def _job() -> dict[str, str | None]:
    env = os.environ
    return {
        "job": env.get("SLURM_ARRAY_JOB_ID") or env.get("SLURM_JOB_ID"),
        "task": env.get("SLURM_ARRAY_TASK_ID"),
        "restart": env.get("SLURM_RESTART_COUNT"),
        "node": env.get("SLURMD_NODENAME") or socket.gethostname(),
    }


def run_line(out_dir: Path, index: int) -> int:
    exp = read_experiment(out_dir)
    if not 0 <= index < len(exp.lines):
        print(f"slurm_task: no line {index} in the manifest of {out_dir}", file=sys.stderr)
        return 2
    line = exp.lines[index]
    if line_status(out_dir, line) == FINISHED:
        print(f"slurm_task: {line.label()} already finished", file=sys.stderr)
        return 0
    if line_status(out_dir, line) == "partial":
        clear_run(out_dir, line)  # a requeued task's own leftovers (never a stranger's files)
    folder = out_dir / line.dir
    folder.mkdir(parents=True, exist_ok=True)
    job = _job()
    started = time.time()
    (folder / PARTIAL).write_text(json.dumps({**job, "started": started}) + "\n")
    write_state(out_dir, line, {"status": RUNNING, **job, "pid": os.getpid(), "started": started})
    _calibrate_if_needed(exp.time_dilation, line.scenario)
    try:
        sc = validate(line.scenario)
        run_scenario(
            sc,
            [line.transport],
            folder,
            judged=[line.transport] if line.judged else [],
            progress=Progress(stream=sys.stderr),
            time_dilation=exp.time_dilation,
            annotate=line.annotate,
            plot_format=exp.plot_format,
        )
    except BaseException as exc:
        write_state(out_dir, line, {"status": FAILED, **job, "started": started,
                                    "ended": time.time(), "error": repr(exc)})  # fmt: skip
        traceback.print_exc()
        return 1
    ended = time.time()
    task = {**job, "line": line.index, "hash": line.hash, "started": started, "ended": ended}
    summary_path = folder / "summary.json"
    summary = json.loads(summary_path.read_text(encoding="utf-8"))
    summary["task"] = task
    summary_path.write_text(json.dumps(summary, indent=2, allow_nan=False) + "\n")
    write_state(out_dir, line, {"status": FINISHED, **task})
    (folder / PARTIAL).unlink(missing_ok=True)
    return 0


def _calibrate_if_needed(time_dilation, scenario: dict) -> None:
    """`auto` on a node with no calibration of its own: measure it once, as `testbed run`
    does (each node is its own machine; the cache is per node)."""
    wanted = time_dilation
    if wanted is None:
        wanted = (scenario.get("emulation") or {}).get("time_dilation", 1)
    from testbed.experiment.calibration import load_budget

    if wanted == "auto" and load_budget() is None:
        from testbed.bench.calibrate import run_calibration

        run_calibration(quick=True, progress=Progress(stream=sys.stderr))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or not args[1].isdigit():
        print("usage: python -m testbed.cli.slurm_task RESULTS_DIR TASK_ID", file=sys.stderr)
        return 2
    # As `testbed run`: a signal (scancel, a requeue) unwinds the run, and every fabric it
    # builds dies with this process however it ends.
    old = interrupts.install()
    own_fabrics(True)
    try:
        return run_line(Path(args[0]), int(args[1]))
    finally:
        own_fabrics(False)
        interrupts.uninstall(old)


if __name__ == "__main__":
    sys.exit(main())

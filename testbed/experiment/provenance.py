"""Where a result came from: what ran, on what, how it was asked for.

A number in a summary is only worth what can be said about how it was made: the same scenario
gives MRC failovers of 0-19 ms across runs on this kind of machine, and a figure from a
different commit, kernel or CPU is a different measurement. So every `summary.json` carries
the project's version and commit, the interpreter, kernel and CPU, the time dilation, the
seeds, the command line and the scenario exactly as it ran (after `--quick`).
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from contracts import datapath
from contracts.project import __version__, checkout
from testbed.experiment.calibration import current_record
from testbed.scenario import Scenario


def git_commit() -> str | None:
    """The checkout's commit, with "+dirty" if files differ from it; None when installed."""
    root = checkout()
    if root is None:
        return None
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


def cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def provenance(sc: Scenario, argv: list[str] | None = None) -> dict[str, Any]:
    """The `provenance` object of summary.json for a run of `sc` (docs/design.md "Results")."""
    return {
        "version": __version__,
        "commit": git_commit(),
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "kernel": platform.release(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "time_dilation": 1,
        "seeds": [sc.seed],
        "command": list(sys.argv if argv is None else argv),
        "scenario": sc.model_dump(mode="json", exclude_none=True),
        # Which node of a cluster, with which data path and emulator calibration: runs pooled
        # into one median must have had the same emulator (testbed.experiment.executor).
        "node": platform.node(),
        "datapath": datapath.check(None, datapath.ENV),
        "install_path": str(checkout() or Path(__file__).resolve().parents[2]),
        "calibration": current_record(),
    }

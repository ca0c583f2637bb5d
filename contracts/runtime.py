"""Where the project's packages live, for the child processes that must import them.

Switch, supervisor and endpoint processes are started with ``python -m ...`` inside other
namespaces and from other working directories; they find the packages through PYTHONPATH set to
this folder (the checkout, or site-packages when installed), never through the caller's cwd.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[1]


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment with PACKAGE_ROOT first on PYTHONPATH (plus `extra`)."""
    env = dict(os.environ)
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(PACKAGE_ROOT) + (os.pathsep + old if old else "")
    env.update(extra or {})
    return env


def peak_rss_mb() -> float | None:
    """This process's peak resident memory (VmHWM) in MB, None where /proc does not say: every
    switch and endpoint reports it, so that a large fabric's memory is a measured figure."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    return None

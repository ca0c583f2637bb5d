"""The machine's measured budget: packet-hops per real second it carries validly, cached.

`testbed calibrate` (testbed.bench.calibrate) measures it on a small fabric and writes it here;
`time_dilation: auto` reads it (testbed.experiment.dilation). A calibration is tied to the
machine it was measured on: one from another CPU model or core count, another Python, another
emulator (EMULATOR) or data path, or older than MAX_AGE_DAYS is stale and ignored (the fallback budget applies, and the run says so).
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

from contracts import datapath

CACHE_ENV = "TESTBED_CALIBRATION"
DEFAULT_PATH = Path("/var/cache/mrc-testbed/calibration.json")
MAX_AGE_DAYS = 30
EMULATOR = 4
"""What the emulator spends per packet-hop, or what a valid run is, changed (2: dilated runs use
one shared switch process with links wired in memory; 3: the verdict also fails an endpoint
that fell behind its NIC; 4: lateness is sampled at every due deadline over the whole workload,
and an input not measured is invalid): a calibration of an older emulator is stale."""


def cache_path() -> Path:
    return Path(os.environ.get(CACHE_ENV, DEFAULT_PATH))


def machine() -> dict:
    """What a calibration is valid for."""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "emulator": EMULATOR,
        # The compiled and the Python data paths carry different budgets (contracts.datapath):
        # a calibration of one is stale for the other.
        "datapath": datapath.check(None, datapath.ENV),
    }


def _records(path: Path) -> list[dict]:
    """The calibrations in the cache: one per data path (a list), or an older file's one."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    if isinstance(data, dict) and isinstance(data.get("calibrations"), list):
        return [r for r in data["calibrations"] if isinstance(r, dict)]
    return [data] if isinstance(data, dict) else []


def save_budget(hops_per_s: float, detail: dict, path: Path | None = None) -> Path:
    """Cache this machine's budget beside those of its other data path: a user who alternates
    `--datapath c` and `python` keeps both calibrations (one record a data path)."""
    path = path or cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "budget_hops_per_s": hops_per_s,
        "measured_at": time.time(),
        "machine": machine(),
        "detail": detail,
    }
    mine = record["machine"]["datapath"]
    kept = [
        r
        for r in _records(path)
        if isinstance(r.get("machine"), dict) and r["machine"].get("datapath") != mine
    ]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"calibrations": [*kept, record]}, indent=1))
    os.replace(tmp, path)
    return path


def load_budget(path: Path | None = None) -> tuple[float, str] | None:
    """(packet-hops per real second, "calibrated") if a fresh calibration of this machine,
    emulator and data path exists, else None."""
    path = path or cache_path()
    me = machine()
    for record in _records(path):
        try:
            hops = float(record["budget_hops_per_s"])
            age_days = (time.time() - float(record["measured_at"])) / 86400
        except (ValueError, KeyError, TypeError):
            continue
        if record.get("machine") == me and 0 <= age_days <= MAX_AGE_DAYS and hops > 0:
            return hops, "calibrated"
    return None


def current_record(path: Path | None = None) -> dict | None:
    """The calibration `load_budget` would use here (budget, when, machine), for a run's
    provenance; None if this machine has no fresh one (the fallback budget applies)."""
    path = path or cache_path()
    found = load_budget(path)
    if found is None:
        return None
    me = machine()
    for record in _records(path):
        if record.get("machine") == me and float(record.get("budget_hops_per_s", 0)) == found[0]:
            return {k: record.get(k) for k in ("budget_hops_per_s", "measured_at", "machine")}
    return None

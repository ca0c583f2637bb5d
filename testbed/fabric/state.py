"""Where a running fabric keeps its state, and how it is found again.

Every fabric lives under RUN_ROOT/<name>/: the supervisor's socket, each switch's control socket
and config, logs, and `state.json` -- the list of every process (PID plus its start time, so a
recycled PID is never killed by mistake) and every namespace that this fabric created. Cleanup
reads only these files: it never kills by process name and never touches an interface or a
namespace that is not listed, so other people's Mininet networks, containers and veths are safe.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

RUN_ROOT = Path(os.environ.get("TESTBED_RUN_ROOT", "/run/testbed"))
NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,15}$")
DEFAULT_NAME = "tb"


class StateError(RuntimeError):
    """No such fabric, or its state is unreadable."""


def check_name(name: str) -> str:
    if not NAME_RE.match(name):
        raise StateError(f"--name: {name!r} must be 1-16 of a-z, 0-9, '-' starting with a letter")
    return name


def run_dir(name: str) -> Path:
    return RUN_ROOT / check_name(name)


@dataclass
class ProcessRecord:
    role: str  # "supervisor" | "node-shell" | "switch" | "endpoint" | "helper"
    node: str
    pid: int
    start_ticks: int  # /proc/PID/stat field 22: tells a live process from a recycled PID

    def alive(self) -> bool:
        return process_start_ticks(self.pid) == self.start_ticks


PROCESS_FIELDS = frozenset(f.name for f in fields(ProcessRecord))


@dataclass
class FabricState:
    name: str
    status: str = "starting"  # starting | up | degraded | failed | stopping
    message: str = ""
    params: dict = field(default_factory=dict)
    seed: int = 1  # ECMP hash seeds derive from it
    time_dilation: float = 1.0  # real seconds per virtual second (contracts.clock)
    processes: list[ProcessRecord] = field(default_factory=list)
    nodes: dict[str, dict] = field(default_factory=dict)  # name -> {kind, pid, plane, intfs...}
    switch_sockets: dict[str, str] = field(default_factory=dict)

    def save(self, directory: Path) -> None:
        tmp = directory / "state.json.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=1))
        os.replace(tmp, directory / "state.json")

    @classmethod
    def load(cls, directory: Path) -> FabricState:
        try:
            d = json.loads((directory / "state.json").read_text())
        except FileNotFoundError:
            raise StateError(
                f"no fabric named {directory.name!r} is up (no {directory}/state.json)"
            ) from None
        except (OSError, json.JSONDecodeError) as exc:
            raise StateError(f"{directory}/state.json unreadable: {exc}") from None
        # Keys this version does not know (a newer testbed wrote the file) are ignored, so
        # `testbed clean` can still read -- and remove -- any fabric of this tool.
        known = {f.name for f in fields(cls)}
        d = {k: v for k, v in d.items() if k in known}
        d["processes"] = [
            ProcessRecord(**{k: v for k, v in p.items() if k in PROCESS_FIELDS})
            for p in d.get("processes", [])
        ]
        return cls(**d)


def process_start_ticks(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may contain spaces and parentheses: split after the last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])


def record(role: str, node: str, pid: int) -> ProcessRecord:
    ticks = process_start_ticks(pid)
    if ticks is None:
        raise StateError(f"process {pid} ({role} {node}) is not running")
    return ProcessRecord(role, node, pid, ticks)


def list_fabrics() -> list[str]:
    if not RUN_ROOT.is_dir():
        return []
    return sorted(p.name for p in RUN_ROOT.iterdir() if p.is_dir() and NAME_RE.match(p.name))

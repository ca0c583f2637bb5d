"""Per-run packet capture: tell the switches of a running fabric to write pcaps, then stop.

The switches write the files themselves (switch/capture.py: virtual timestamps, in-memory
links included); this module only asks each switch over its control socket, the same one
`testbed ctl` uses, and gathers what they report. Which ports: testbed/scenario/capture.py.
"""

from __future__ import annotations

import os
from pathlib import Path

from switch.control import ControlError, request
from testbed.fabric import client


class CaptureError(RuntimeError):
    """A switch refused or could not start or stop its capture."""


def start(
    fabric_name: str,
    ports: dict[str, list[str]],
    directory: Path,
    direction: str,
    snaplen: int,
    max_mb: float,
) -> list[Path]:
    """Start capturing `ports` ({switch: [port]}) into `directory`; the files to be written.
    If one switch refuses, those already started are stopped again."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o755)
    sockets = client.state(fabric_name).switch_sockets
    started: list[str] = []
    files: list[Path] = []
    try:
        for sw, names in ports.items():
            reply = request(
                sockets[sw],
                {"op": "capture", "on": True, "dir": str(directory), "ports": names,
                 "direction": direction, "snaplen": snaplen, "max_mb": max_mb},
            )  # fmt: skip
            started.append(sw)
            files += [Path(f) for f in reply["files"].values()]
    except (ControlError, KeyError) as exc:
        for sw in started:
            try:
                request(sockets[sw], {"op": "capture", "on": False})
            except ControlError:
                pass
        raise CaptureError(f"capture: cannot start: {exc}") from None
    return files


def stop(fabric_name: str, switches: list[str]) -> dict[str, dict]:
    """Stop every switch's capture (flushing its files); {"switch:port": what it captured}
    (switch.capture.PortCapture.stats). A switch that cannot answer is reported, not fatal."""
    sockets = client.state(fabric_name).switch_sockets
    out: dict[str, dict] = {}
    errors = []
    for sw in switches:
        try:
            reply = request(sockets[sw], {"op": "capture", "on": False}, timeout=10)
        except (ControlError, KeyError) as exc:
            errors.append(f"{sw}: {exc}")
            continue
        for port, stats in reply["ports"].items():
            out[f"{sw}:{port}"] = stats
    if errors:
        raise CaptureError("capture: cannot stop: " + "; ".join(errors))
    return out

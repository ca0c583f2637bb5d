"""Bringing a fabric up and down: a detached supervisor process owns it in between.

`bring_up` starts ``python -m testbed.fabric.supervisor`` in a session of its own, so the fabric
outlives the command that built it (``testbed up`` returns; ``testbed down`` later ends it), and
waits until the supervisor reports that every switch forwards. Any failure on the way -- a bad
parameter, a switch that does not start, Ctrl-C -- removes everything of that name before the
error propagates. `tear_down` asks the supervisor to stop, then removes from the state file
whatever it could not (see `cleanup`), and raises if anything of the fabric is left.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from contracts.clock import check_dilation
from contracts.runtime import child_env
from testbed.fabric import client
from testbed.fabric.cleanup import clean_fabric, leftovers, pid_exists
from testbed.fabric.state import FabricState, StateError, check_name, run_dir
from testbed.fabric.switch_layout import ENV as SWITCH_LAYOUT_ENV
from testbed.fabric.switch_layout import switch_layout
from topologies import TopologyParams

UP_TIMEOUT_S = 120.0
DOWN_TIMEOUT_S = 20.0


class FabricError(RuntimeError):
    """A fabric could not be built, reached or removed; the message says which and why."""


def need_root(what: str) -> None:
    if os.geteuid() != 0:
        raise FabricError(f"{what} needs root (network namespaces): run it with sudo")


def bring_up(
    name: str,
    params: TopologyParams,
    seed: int = 1,
    switch_processes: str | None = None,
    time_dilation: float = 1.0,
) -> FabricState:
    """Start a detached supervisor for fabric `name` and return once it forwards.

    `time_dilation`: real seconds per virtual second of every clock of the fabric
    (contracts.clock); link rates and delays in `params` are virtual.

    `switch_processes`: testbed.fabric.switch_layout's per-node or shared (default: the
    environment's choice, else per-node). On failure or Ctrl-C everything of `name` is removed
    before the error propagates.
    """
    check_name(name)
    params.validate()
    try:
        time_dilation = check_dilation(time_dilation, "--time-dilation")
    except ValueError as exc:
        raise FabricError(str(exc)) from None
    try:
        layout = switch_layout(switch_processes)
    except ValueError as exc:
        raise FabricError(str(exc)) from None
    need_root("testbed up")
    directory = run_dir(name)
    if directory.exists():
        try:
            st = FabricState.load(directory)
            if any(p.role == "supervisor" and p.alive() for p in st.processes):
                raise FabricError(
                    f"--name: fabric {name!r} is already up (testbed down --name {name})"
                )
        except StateError:
            pass
        clean_fabric(name)  # stale leftovers of a crashed run of the same name
    directory.mkdir(parents=True, mode=0o700)
    log = open(directory / "supervisor.log", "ab")  # noqa: SIM115 - handed to the child
    env = child_env({"TESTBED_FABRIC": name, SWITCH_LAYOUT_ENV: layout})
    argv = [sys.executable, "-m", "testbed.fabric.supervisor", "--name", name,
            "--params", json.dumps(asdict(params)), "--seed", str(seed),
            "--time-dilation", repr(time_dilation)]  # fmt: skip
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
        cwd="/",
    )
    log.close()
    try:
        return _wait_up(name, proc, directory)
    except (KeyboardInterrupt, FabricError):
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                pass
        clean_fabric(name)
        raise


def _wait_up(name: str, proc: subprocess.Popen, directory: Path) -> FabricState:
    t0 = time.monotonic()
    while True:
        time.sleep(0.2)
        try:
            st = FabricState.load(directory)
        except StateError:
            st = None
        if st is not None and st.status in ("up", "degraded"):
            return st
        if proc.poll() is not None or (st is not None and st.status == "failed"):
            msg = st.message if st else ""
            tail = _last_line(directory / "supervisor.log")
            proc.wait(10)
            raise FabricError(f"fabric {name!r} failed to start: {msg or tail}")
        if time.monotonic() - t0 > UP_TIMEOUT_S:
            raise FabricError(
                f"fabric {name!r} not up after {UP_TIMEOUT_S:g}s (see {directory}/supervisor.log)"
            )


def _last_line(path: Path, n: int = 600) -> str:
    try:
        return path.read_text(errors="replace")[-n:].strip().splitlines()[-1]
    except (OSError, IndexError):
        return ""


def tear_down(name: str) -> None:
    """Stop fabric `name` through its supervisor, then remove whatever is left of it.

    Raises FabricError naming what could not be removed."""
    directory = run_dir(name)
    try:
        supervisor = [
            p.pid for p in FabricState.load(directory).processes if p.role == "supervisor"
        ]
    except StateError:
        supervisor = []
    try:
        client.call(name, {"op": "down"}, timeout=5)
        deadline = time.monotonic() + DOWN_TIMEOUT_S
        while (
            directory.exists() or any(pid_exists(p) for p in supervisor)
        ) and time.monotonic() < deadline:
            time.sleep(0.1)
    except client.ClientError:
        pass  # supervisor gone: clean up from the state file below
    clean_fabric(name)  # anything the supervisor could not remove
    left = leftovers(name)
    if left:
        raise FabricError(f"down: left behind {left}")

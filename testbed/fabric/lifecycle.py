"""Bringing a fabric up and down: a detached supervisor process owns it in between.

`bring_up` starts ``python -m testbed.fabric.supervisor`` in a session of its own, so the fabric
outlives the command that built it (``testbed up`` returns; ``testbed down`` later ends it), and
waits until the supervisor reports that every switch forwards. Any failure on the way -- a bad
parameter, a switch that does not start, Ctrl-C, SIGTERM -- removes everything of that name
before the error propagates. `tear_down` asks the supervisor to stop, then removes from the
state file whatever it could not (see `cleanup`), and raises if anything of the fabric is left.

Owned fabrics: the supervisor is told who started it (PID and start time) and watches that
process. Until the fabric is up, every fabric dies with its starter (a `testbed up` killed
mid-build leaves nothing); an *owned* fabric -- a run's, a bench's, a ``with Fabric(...)``
block's -- also after that, so even a SIGKILL of its owner takes it down. `testbed up` builds
the one kind that stays: detached, until `down`. `own_fabrics()` makes "owned" the default of
this process (the command line does it for every command but `up`).
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
from testbed.fabric import client, interrupts
from testbed.fabric.cleanup import clean_fabric, leftovers, pid_exists
from testbed.fabric.state import (
    FabricState,
    StateError,
    check_name,
    process_start_ticks,
    run_dir,
)
from testbed.fabric.switch_layout import ENV as SWITCH_LAYOUT_ENV
from testbed.fabric.switch_layout import switch_layout
from topologies import TopologyParams

UP_TIMEOUT_S = 120.0
DOWN_TIMEOUT_S = 20.0

_owned_by_default = False


def own_fabrics(owned: bool = True) -> None:
    """Fabrics this process brings up from now on die with it (`bring_up`'s `owned` default)."""
    global _owned_by_default
    _owned_by_default = owned


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
    owned: bool | None = None,
) -> FabricState:
    """Start a detached supervisor for fabric `name` and return once it forwards.

    `owned`: the fabric dies with this process, however it ends (default: `own_fabrics`);
    else it stays up after this process exits, until `tear_down` (`testbed up`).

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
    owned = _owned_by_default if owned is None else owned
    me = os.getpid()
    env = child_env({"TESTBED_FABRIC": name, SWITCH_LAYOUT_ENV: layout})
    argv = [sys.executable, "-m", "testbed.fabric.supervisor", "--name", name,
            "--params", json.dumps(asdict(params)), "--seed", str(seed),
            "--time-dilation", repr(time_dilation),
            "--owner", f"{me}:{process_start_ticks(me)}"]  # fmt: skip
    if not owned:
        argv.append("--detach-when-up")
    # The directory and the supervisor come into being together: a signal in between would
    # leave one without the other (it is raised at the `try` below instead).
    with interrupts.deferred():
        directory.mkdir(parents=True, mode=0o700)
        try:
            log = open(directory / "supervisor.log", "ab")  # noqa: SIM115 - handed to the child
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
        except BaseException:
            clean_fabric(name)
            raise
    try:
        return _wait_up(name, proc, directory)
    except BaseException:
        with interrupts.deferred():
            if proc.poll() is None:
                proc.terminate()  # the supervisor stops building and removes what it built
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

    Raises FabricError naming what could not be removed. A signal arriving meanwhile is
    delivered once the fabric is gone (`interrupts.deferred`)."""
    with interrupts.deferred():
        _tear_down(name)


def _tear_down(name: str) -> None:
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

"""Removes what this tool left behind, and only that.

A fabric is found by its run directory (RUN_ROOT/<name>/state.json lists every process it
started, with start times) and, for processes that were started after the last save, by the
TESTBED_FABRIC=<name> variable every one of them inherits; a process that lives in one of the
fabric's namespaces without either (a kernel baseline's iperf, a capture) is found there.
Namespaces and the veths inside them disappear when the last process holding them is gone, so
killing exactly these processes is a complete teardown. Nothing is ever killed by name, and no
interface is deleted by pattern.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

from testbed.fabric import interrupts
from testbed.fabric.state import (
    RUN_ROOT,
    FabricState,
    StateError,
    list_fabrics,
    process_start_ticks,
)

FABRIC_ENV = b"TESTBED_FABRIC="
ROLE_ORDER = ("endpoint", "helper", "switch", "node-shell", "supervisor")


def tagged_pids(name: str) -> list[int]:
    """PIDs whose environment says they belong to fabric `name`."""
    tag = FABRIC_ENV + name.encode()
    found = []
    me = os.getpid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        if tag in env.split(b"\0"):
            found.append(int(entry.name))
    return found


def kill_pids(pids: list[int], grace_s: float) -> list[int]:
    """SIGTERM, wait up to `grace_s`, then SIGKILL; returns what was still alive at the end."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if pid_exists(p)]
    for pid in alive:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    time.sleep(0.05)
    return [p for p in alive if pid_exists(p)]


def pid_exists(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def netns_of(pid: int) -> int | None:
    """The inode of `pid`'s network namespace (None if it is gone)."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def pids_in_netns(inodes: set[int], exclude: set[int] = frozenset()) -> list[int]:
    """Every process (but `exclude` and this one) whose network namespace is one of `inodes`."""
    if not inodes:
        return []
    me = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid == me or pid in exclude:
            continue
        if netns_of(pid) in inodes:
            found.append(pid)
    return found


def clean_fabric(name: str, grace_s: float = 2.0) -> list[str]:
    """Kill every process of fabric `name` and remove its run directory; returns what was done.

    A signal arriving meanwhile is delivered when it is done (`interrupts.deferred`)."""
    with interrupts.deferred():
        return _clean_fabric(name, grace_s)


def _clean_fabric(name: str, grace_s: float) -> list[str]:
    done: list[str] = []
    directory = RUN_ROOT / name
    records = []
    try:
        records = FabricState.load(directory).processes
    except StateError:
        pass
    by_role = {
        r: [p.pid for p in records if p.role == r and process_start_ticks(p.pid) == p.start_ticks]
        for r in ROLE_ORDER
    }
    known = {pid for pids in by_role.values() for pid in pids}
    # The namespaces' inodes while their shells still hold them: whatever else runs in them
    # (untagged) goes with the endpoints.
    shells = set(by_role["node-shell"])
    inodes = {i for i in map(netns_of, shells) if i is not None and i != netns_of(os.getpid())}
    orphans = [p for p in tagged_pids(name) if p not in known]
    orphans += [p for p in pids_in_netns(inodes, known) if p not in orphans]
    for role in ROLE_ORDER:
        pids = by_role[role] + (orphans if role == "endpoint" else [])
        if pids:
            left = kill_pids(pids, grace_s)
            done.append(f"killed {len(pids) - len(left)} {role} process(es)")
            if left:
                done.append(f"could not kill {left}")
    # A supervisor killed mid-build may have started a process after the first look.
    for _ in range(5):
        late = tagged_pids(name)
        if not late:
            break
        left = kill_pids(late, grace_s)
        done.append(f"killed {len(late) - len(left)} late process(es)")
    if directory.exists():
        shutil.rmtree(directory, ignore_errors=True)
        done.append(f"removed {directory}")
    return done


def is_live(name: str) -> bool:
    """A fabric whose supervisor still runs is in use, not a leftover."""
    try:
        st = FabricState.load(RUN_ROOT / name)
    except StateError:
        return False
    return any(
        p.role == "supervisor" and process_start_ticks(p.pid) == p.start_ticks and pid_exists(p.pid)
        for p in st.processes
    )


def clean_all(include_live: bool = False) -> dict[str, list[str]]:
    """`testbed clean`: every stale fabric this tool knows of; live ones only if asked."""
    done = {}
    for name in list_fabrics():
        if is_live(name) and not include_live:
            done[name] = [f"up, left alone (testbed down --name {name}, or clean --all)"]
        else:
            done[name] = clean_fabric(name)
    return done


def leftovers(name: str) -> list[str]:
    """What of fabric `name` still exists (tests, and `tear_down`, which reports it)."""
    found = []
    if (RUN_ROOT / name).exists():
        found.append(str(RUN_ROOT / name))
    found += [f"pid {p}" for p in tagged_pids(name)]
    return found

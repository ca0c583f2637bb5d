"""What the rest of the machine did during a run: CPU used by processes that are not the run's,
and CPU the hypervisor stole.

Why: an invalid verdict says the emulator fell behind, not why. On a shared 2-core VM the cause
is often outside the run (another job, a package install, a noisy neighbour's steal), and the
fix is then to rerun when the machine is quiet, not to raise N or shrink the fabric. This
module gives the verdict that evidence: the share of all cores that went elsewhere.

"The run's" processes are the runner and its descendants (the fabric supervisor, the switches,
the endpoint processes, the kernel baselines' iperf3s). Kernel threads are left out: softirq
work that forwards the run's own packets runs in them and is not someone else's load. A process
that both started and ended inside the window is not seen (undercounting, never overcounting).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

PF_KTHREAD = 0x00200000  # task flags: a kernel thread (include/linux/sched.h)
BUSY_ELSEWHERE_SHARE = 0.10
"""Foreign CPU plus steal, as a share of all cores, from which a run's timing is attributed to
the machine: idle, this VM's foreign load is under 1 % of its cores."""


@dataclass(frozen=True)
class ProcessCpu:
    ppid: int
    ticks: int  # user + system clock ticks so far
    name: str


@dataclass(frozen=True)
class Snapshot:
    """Every user process's CPU so far, and the machine's steal and total jiffies."""

    processes: Mapping[int, ProcessCpu]
    steal: int
    total: int


@dataclass(frozen=True)
class ForeignLoad:
    """Shares of all cores over a window (0..1), and the busiest foreign processes."""

    foreign: float
    steal: float
    top: tuple[tuple[str, float], ...]

    @property
    def busy_elsewhere(self) -> bool:
        return self.foreign + self.steal >= BUSY_ELSEWHERE_SHARE

    def describe(self) -> str:
        names = ", ".join(f"{n} {s:.0%}" for n, s in self.top if s >= 0.005)
        return (
            f"the machine was busy elsewhere: other processes used {self.foreign:.0%} of all "
            f"cores{f' ({names})' if names else ''}, the hypervisor stole {self.steal:.0%}"
        )


def parse_stat(text: str) -> tuple[ProcessCpu, bool] | None:
    """One /proc/PID/stat line: the process's CPU and whether it is a kernel thread; None if
    the line is not one (a process can vanish between listing and reading)."""
    close = text.rfind(")")
    if close < 0:
        return None
    rest = text[close + 2 :].split()
    if len(rest) < 13:
        return None
    name = text[text.find("(") + 1 : close]
    cpu = ProcessCpu(ppid=int(rest[1]), ticks=int(rest[11]) + int(rest[12]), name=name)
    return cpu, bool(int(rest[6]) & PF_KTHREAD)


def snapshot(proc: str = "/proc") -> Snapshot:
    processes: dict[int, ProcessCpu] = {}
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        try:
            with open(f"{proc}/{entry}/stat") as f:
                parsed = parse_stat(f.read())
        except OSError:
            continue
        if parsed is not None and not parsed[1]:
            processes[int(entry)] = parsed[0]
    with open(f"{proc}/stat") as f:
        jiffies = [int(x) for x in f.readline().split()[1:]]
    steal = jiffies[7] if len(jiffies) > 7 else 0
    return Snapshot(processes, steal=steal, total=sum(jiffies))


def descendants(processes: Mapping[int, ProcessCpu], root: int) -> set[int]:
    """`root` and every process whose parent chain reaches it."""
    children: dict[int, list[int]] = {}
    for pid, p in processes.items():
        children.setdefault(p.ppid, []).append(pid)
    ours, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in ours:
                ours.add(child)
                todo.append(child)
    return ours


def foreign_load(before: Snapshot, after: Snapshot, root: int, top: int = 3) -> ForeignLoad:
    """The CPU that went to processes outside `root`'s tree between two snapshots, and the
    steal, as shares of all cores. A process's tree is read at both ends (an endpoint that
    exited before `after` was ours at `before`)."""
    total = max(after.total - before.total, 1)
    ours = descendants(before.processes, root) | descendants(after.processes, root)
    used: dict[int, int] = {}
    for pid, p in after.processes.items():
        if pid in ours:
            continue
        was = before.processes.get(pid)
        # A pid reused by a new process (its CPU below the old one's) counts from zero.
        delta = p.ticks - (was.ticks if was and was.ticks <= p.ticks else 0)
        if delta > 0:
            used[pid] = delta
    # /proc/stat counts jiffies over all cores and per-process ticks use the same clock, so
    # their ratio is a share of all cores.
    busiest = sorted(used, key=used.__getitem__, reverse=True)[:top]
    return ForeignLoad(
        foreign=sum(used.values()) / total,
        steal=max(after.steal - before.steal, 0) / total,
        top=tuple((after.processes[p].name, used[p] / total) for p in busiest),
    )

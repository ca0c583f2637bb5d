"""The machine's load outside a run: which processes are the run's, what the others and the
hypervisor took, and when that is enough to call an invalid run the machine's fault."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from testbed.analysis.validity import Thresholds, Timing, judge
from testbed.experiment.machine_load import (
    ProcessCpu,
    Snapshot,
    descendants,
    foreign_load,
    parse_stat,
    snapshot,
)


def _stat(pid: int, name: str, ppid: int, utime: int, stime: int, flags: int = 0) -> str:
    # Fields 3.. of /proc/PID/stat: state ppid pgrp session tty tpgid flags minflt cminflt
    # majflt cmajflt utime stime ...
    return f"{pid} ({name}) S {ppid} {pid} {pid} 0 -1 {flags} 0 0 0 0 {utime} {stime} 0 0 20 0 1 0"


def test_parse_stat_reads_a_name_with_spaces_and_parens_and_flags_kernel_threads():
    cpu, kthread = parse_stat(_stat(42, "tmux: (server)", 1, 30, 12))
    assert cpu == ProcessCpu(ppid=1, ticks=42, name="tmux: (server)") and not kthread
    assert parse_stat(_stat(7, "ksoftirqd/0", 2, 5, 5, flags=0x00208040))[1] is True
    assert parse_stat("12 (truncated") is None
    assert parse_stat("12 (short) S 1 2") is None


def _snap(total: int, steal: int, **procs: tuple[int, int, int]) -> Snapshot:
    """procs: name=(pid, ppid, ticks)."""
    return Snapshot(
        {pid: ProcessCpu(ppid, ticks, name) for name, (pid, ppid, ticks) in procs.items()},
        steal=steal,
        total=total,
    )


def test_descendants_follow_the_parent_chain_only():
    s = _snap(
        0, 0, init=(1, 0, 0), runner=(10, 1, 0), sup=(11, 10, 0), sw=(12, 11, 0), x=(13, 1, 0)
    )
    assert descendants(s.processes, 10) == {10, 11, 12}


def test_foreign_load_counts_only_processes_outside_the_run_and_the_steal():
    before = _snap(1000, 50, runner=(10, 1, 100), sw=(11, 10, 0), job=(20, 1, 500), gone=(30, 1, 9))
    # 200 jiffies later (2 cores, 1 s at USER_HZ 100): the switch took 150 (ours), `job` 30,
    # a process born in the window 10, the steal 20; `gone` exited (unseen, not counted).
    after = _snap(
        1200, 70, runner=(10, 1, 120), sw=(11, 10, 150), job=(20, 1, 530), new=(40, 1, 10)
    )
    load = foreign_load(before, after, root=10)
    assert load.foreign == (30 + 10) / 200 and load.steal == 20 / 200
    assert load.top == (("job", 0.15), ("new", 0.05))
    assert load.busy_elsewhere  # 0.2 + 0.1 of all cores
    assert "other processes used 20% of all cores (job 15%, new 5%)" in load.describe()
    assert "stole 10%" in load.describe()


def test_a_quiet_machine_is_not_busy_elsewhere_and_a_reused_pid_counts_from_zero():
    before = _snap(1000, 0, runner=(10, 1, 0), old=(20, 1, 900))
    after = _snap(2000, 0, runner=(10, 1, 800), old=(20, 1, 5))  # pid 20 is a new process
    load = foreign_load(before, after, root=10)
    assert load.foreign == 5 / 1000 and not load.busy_elsewhere


def test_a_real_busy_process_outside_the_tree_is_seen_and_our_own_child_is_not(tmp_path):
    """On this machine: a spinning child of ours is the run's; a spinning process detached
    from our tree (re-parented to init) is someone else's. Each runs python through a symlink
    of its own name, which becomes its process name."""
    spin = "import time\nt=time.monotonic()\nwhile time.monotonic()-t<1.0: pass"
    ours, theirs = tmp_path / "tbspin_ours", tmp_path / "tbspin_theirs"
    for link in (ours, theirs):
        link.symlink_to(sys.executable)
    before = snapshot()
    child = subprocess.Popen([str(ours), "-c", spin])
    # A shell that starts the spinner in the background and exits: its parent becomes init
    # (or a subreaper), outside our tree.
    subprocess.run(["sh", "-c", f"'{theirs}' -c '{spin}' >/dev/null 2>&1 &"], check=True)
    child.wait()
    time.sleep(0.1)
    after = snapshot()
    load = dict(foreign_load(before, after, root=os.getpid(), top=50).top)
    assert "tbspin_ours" not in load, load
    # About one core's worth of the ~1.1 s window, as a share of all cores.
    cores = os.cpu_count() or 1
    assert 0.3 / cores < load.get("tbspin_theirs", 0) < 1.0 / cores + 0.1, load


def test_the_verdict_reports_the_machine_load_and_does_not_judge_it():
    limits = Thresholds(switch_late_us=1.0, endpoint_late_us=10.0)
    timing = Timing(
        time_dilation=100, real_s=1, virtual_s=0.01, cpu_util=0.5, switch_late_us_p99=2.0,
        endpoint_late_us_p99=1.0, endpoint_nic_lost=0.0, kernel_drops=0, switch_late_samples=500,
        foreign_cpu=0.3, steal_cpu=0.0, busy_elsewhere="the machine was busy elsewhere: ...",
    )  # fmt: skip
    verdict = judge(timing, limits)
    assert not verdict.valid and len(verdict.reasons) == 1  # the switch lateness alone
    block = verdict.summary(timing, limits)
    assert block["foreign_cpu"] == 0.3 and block["busy_elsewhere"].startswith("the machine")


def test_the_report_shows_the_busiest_transports_load_from_elsewhere():
    from testbed.analysis.report import LOAD_HEADER, load_row

    summary = {
        "emulation": {"cpu_util": 0.42, "timer_jitter_us_p99": 3.0, "kernel_drops": 0},
        "transports": {
            "mrc": {"emulation": {"foreign_cpu": 0.02, "steal_cpu": 0.01}},
            "tcp": {"emulation": {"foreign_cpu": 0.2, "steal_cpu": 0.05}},
        },
    }
    row = dict(zip(LOAD_HEADER, load_row(summary), strict=True))
    assert row["of it other processes + steal"] == "20% + 5%"
    summary["transports"] = {"mrc": {"emulation": {"valid": True}}}  # an older summary
    assert load_row(summary)[1] == "not measured"

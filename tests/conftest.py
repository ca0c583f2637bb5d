"""Shared fixtures: tests marked `netns` need root and skip with a clear reason otherwise."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


# A test on real namespaces measures a 2-core machine shared with other people's work: when it
# fails, it runs once more (pytest-rerunfailures; the summary lists every rerun, so a flaky
# test stays visible). Module-scoped measurements (a bench run, the incast fabric) are not
# repeated by a rerun, only the test's own.
NETNS_RERUNS = 1


# What the data path (contracts.datapath: the compiled one or its Python twin) can change: a
# test module that imports the switch, the endpoint, the benches, the labs or the choice itself.
# `make test` runs every pure test on the default path and these again on the Python one.
_DATAPATH_IMPORT = re.compile(
    r"^\s*(from|import)\s+(switch|endpoint|contracts\.datapath|testbed\.bench|testbed\.labs)\b",
    re.M,
)
_touches_datapath: dict[Path, bool] = {}


def _mark_datapath(items) -> None:
    """Mark `datapath` every test whose module imports what the data path can change."""
    for item in items:
        path = Path(str(item.fspath))
        if path not in _touches_datapath:
            _touches_datapath[path] = bool(_DATAPATH_IMPORT.search(path.read_text()))
        if _touches_datapath[path]:
            item.add_marker(pytest.mark.datapath)


@pytest.hookimpl(tryfirst=True)  # before `-m` selects: the marker must be there by then
def pytest_collection_modifyitems(config, items):
    _mark_datapath(items)
    reasons = []
    if os.geteuid() != 0:
        reasons.append("needs root to create network namespaces (run: sudo make test)")
    elif shutil.which("mnexec") is None:
        reasons.append("needs mnexec (apt-get install mininet; scripts/setup.sh does it)")
    if not reasons:
        if config.pluginmanager.hasplugin("rerunfailures"):
            for item in items:
                if "netns" in item.keywords and item.get_closest_marker("flaky") is None:
                    item.add_marker(pytest.mark.flaky(reruns=NETNS_RERUNS, reruns_delay=1))
        return
    skip = pytest.mark.skip(reason="; ".join(reasons))
    for item in items:
        if "netns" in item.keywords:
            item.add_marker(skip)


def tb(*args: str, check: bool = True, timeout: float = 180) -> subprocess.CompletedProcess:
    """Run the real `testbed` command line, as a user would."""
    proc = subprocess.run(
        [sys.executable, "-m", "testbed.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"testbed {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        )
    return proc


def interruptible() -> None:
    """A child's SIGINT back to the default, for tests that interrupt it (Popen preexec_fn).

    A shell starts a background job (`make test &`, a CI runner's script) with SIGINT ignored,
    the child inherits that, and Python then keeps it ignored: the interrupted run would run to
    its end and the test would fail on how it was launched, not on what it tests.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def unique_name(prefix: str = "t") -> str:
    return f"{prefix}{uuid.uuid4().hex[:6]}"


def keep_deliveries(job) -> list:
    """Every Delivery handed to `job` from now on, in order (the job still gets each): a test
    can hand one back again to check the exactly-once accounting."""
    kept: list = []
    orig = job.on_delivery

    def keep(d) -> None:
        kept.append(d)
        orig(d)

    job.on_delivery = keep
    return kept


def drive_jobs(net, eps: dict, jobs: dict, until: float = 5.0) -> bool:
    """Run endpoint jobs on a SimNet until every job is done (True) or `until` (False).

    Each slice hands the endpoints' deliveries and completions to their jobs. Slices are short
    (2 ms) because SimNet.run polls the endpoints first: messages a job posts from a delivery
    go out at the start of the next slice."""

    def done() -> bool:
        for h, ep in eps.items():
            for d in ep.take_deliveries():
                jobs[h].on_delivery(d)
            for c in ep.take_completions():
                jobs[h].on_completion(c)
        for j in jobs.values():
            j.poll(net.now)  # roles that wait in virtual time (a trace's compute)
        return all(j.done for j in jobs.values())

    ok = False
    while not ok and net.now < until:
        # A slice also ends at the next job timer, so a compute node ends at its deadline.
        deadlines = [d for j in jobs.values() if (d := j.next_deadline()) is not None]
        ok = net.run(min([until, net.now + 0.002, *deadlines]), stop=done)
    return ok


def record_sends(net, src: str | None = None) -> list[tuple[float, int]]:
    """Wrap a SimNet's inject: every packet that `src` (default: any host) sends is recorded as
    (virtual time, EV) in the returned list, which fills as the network runs."""
    sent: list[tuple[float, int]] = []
    inject = net.inject

    def spy(host, tx):
        if src is None or host == src:
            sent.append((net.now, tx.ev))
        inject(host, tx)

    net.inject = spy
    return sent


def verdict_implied(emu: dict) -> bool:
    """The verdict that a summary's recorded figures and limits imply (validity.judge run again
    on them): a test compares it with the recorded `valid`, which is then more than a copy of
    itself."""
    from testbed.analysis.validity import Thresholds, Timing, judge

    lim = emu["limits"]
    timing = Timing(
        time_dilation=emu["time_dilation"],
        cpu_util=emu["cpu_util"],
        switch_late_us_p99=emu["switch_late_us_p99"],
        endpoint_late_us_p99=emu["endpoint_late_us_p99"],
        kernel_drops=emu["kernel_drops"],
        endpoint_nic_lost=emu["endpoint_nic_lost"],
    )
    limits = Thresholds(
        switch_late_us=lim["switch_late_us"],
        endpoint_late_us=lim["endpoint_late_us"],
        max_kernel_drops=lim["kernel_drops"],
        max_endpoint_nic_lost=lim["endpoint_nic_lost"],
        max_cpu_util=lim["cpu_util"],
    )
    return judge(timing, limits).valid

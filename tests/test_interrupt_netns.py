"""An interrupted `testbed run`/`compare` leaves nothing: every signal, at every moment.

Each case starts the real command line on the smallest shipped scenario (silent-blackhole,
2 spines x 2 leaves x 2 hosts, `--quick`) in a session of its own, waits for a moment --
a fabric mid-build, a workload under way, an auto rerun, the second transport of a compare,
the second repetition of `--repeat` -- and sends a signal to the whole process group, as a
terminal (Ctrl-C, hangup) or `timeout` does. Then, within a few seconds, nothing of the run
may be left: no process of it (found by the TESTBED_FABRIC=<name> every process of a fabric
carries, and by a marker variable this test gives the command, which everything it starts
inherits), no process in any of its fabrics' namespaces (what keeps a namespace and its veths
alive), no new fabric interface in the root namespace, no named namespace of it, and no run
directory under /run/testbed. SIGINT, SIGTERM and SIGHUP exit with 128 + the signal; SIGKILL
runs nothing in the command, so the fabric's supervisor, which watches its owner, must tear
the fabric down itself.

Forcing an auto rerun: a calibration (TESTBED_CALIBRATION, the cache `testbed calibrate`
writes) that claims an enormous budget makes `auto` start at time dilation 1, and the scenario
is stretched to 0.3 s of traffic (a --quick run's 7.5 ms can end before the machine falls
behind): 10 Gbps in real time saturates any machine this runs on, the run is judged invalid,
and the runner reruns it at 2x (RERUN_FACTOR).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from testbed.fabric.state import RUN_ROOT
from tests.conftest import ROOT

pytestmark = pytest.mark.netns

SCENARIO = ROOT / "scenarios" / "silent-blackhole.yaml"
MARK = "TESTBED_TEST_INTERRUPT_MARK"  # read by nothing but this test
FABRIC_LINE = re.compile(r"\] fabric (r[0-9a-f]{6}):")
INTF = re.compile(r"^(h|leaf|spine)\d+(p\d+)?-eth\d+$")
GONE_WITHIN_S = 15.0


def default_signals() -> None:
    """The child starts with default dispositions and its own process group (Popen
    preexec_fn): a background job ignores SIGINT, `nohup` SIGHUP, and Python keeps that."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def root_links() -> set[str]:
    out = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line}


def named_netns() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def netns_inode(pid: int | str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


class Run:
    """`testbed ARGS...` as a subprocess; its output lines as they come."""

    def __init__(
        self,
        args: list[str],
        out: Path,
        env_extra: dict[str, str] | None = None,
        argv: list[str] | None = None,
    ):
        """`argv`: the whole command instead of the command line's (a Python API caller)."""
        self.mark = uuid.uuid4().hex
        self.links_before = root_links()
        self.netns_before = named_netns()
        env = {**os.environ, "PYTHONUNBUFFERED": "1", MARK: self.mark, **(env_extra or {})}
        self.proc = subprocess.Popen(
            argv or [sys.executable, "-m", "testbed.cli", *args, "--out", str(out)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=default_signals,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self.namespaces: set[int] = set()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def names(self) -> list[str]:
        """Every fabric the run announced (before building it)."""
        return FABRIC_LINE.findall(self.output)

    def wait_for(self, pred, what: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return
            if self.proc.poll() is not None:
                time.sleep(0.2)  # the last lines
                raise AssertionError(f"the run ended before {what}:\n{self.output}")
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}:\n{self.output}")

    def wait_moment(self, after: str | None, phase: str) -> None:
        """The first fabric announced after the line holding `after` (None: the run's first
        fabric) mid-build, or with its workload under way."""

        def start() -> int | None:
            if after is None:
                return 0
            i = self.output.find(after)
            return None if i < 0 else i

        def fabric() -> re.Match | None:
            at = start()
            return None if at is None else FABRIC_LINE.search(self.output, at)

        self.wait_for(lambda: fabric() is not None, f"a fabric after {after!r}")
        m = fabric()
        name = m.group(1)
        if phase == "start-up":
            self.wait_for(lambda: (RUN_ROOT / name / "state.json").exists(), f"{name} building")
            time.sleep(0.3)  # namespaces and some nodes exist, the switches not yet
        else:
            self.wait_for(lambda: "applied" in self.output[m.end() :], f"{name}'s workload")
        self.namespaces |= self._fabric_namespaces()

    def _fabric_namespaces(self) -> set[int]:
        """The network namespaces of this run's processes now (the root's left out)."""
        root = netns_inode(os.getpid())
        return {
            ns for pid, _ in self.processes() if (ns := netns_inode(pid)) is not None and ns != root
        }

    def processes(self) -> list[tuple[int, str]]:
        """Every live process that is this run's: its marker, or a fabric of it, in its
        environment."""
        tags = {f"{MARK}={self.mark}".encode()} | {
            f"TESTBED_FABRIC={n}".encode() for n in self.names()
        }
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                env = set((entry / "environ").read_bytes().split(b"\0"))
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if tags & env and stat[stat.rindex(")") + 2] != "Z":
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ")[:90]
                found.append((int(entry.name), cmd.decode(errors="replace")))
        return found

    def leftovers(self) -> list[str]:
        left = [f"process {pid} ({cmd})" for pid, cmd in self.processes()]
        left += [f"run directory {RUN_ROOT / n}" for n in self.names() if (RUN_ROOT / n).exists()]
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and netns_inode(entry.name) in self.namespaces:
                left.append(f"process {entry.name} in a namespace of the run")
        left += [
            f"interface {i} in the root namespace"
            for i in root_links() - self.links_before
            if INTF.match(i)
        ]
        left += [
            f"named namespace {n}"
            for n in named_netns() - self.netns_before
            if any(name in n for name in self.names())
        ]
        return left

    def interrupt(self, sig: int) -> int:
        os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)
        return self.proc.returncode

    def assert_nothing_left(self) -> None:
        deadline = time.monotonic() + GONE_WITHIN_S
        while (left := self.leftovers()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert left == [], f"left behind: {left}\n{self.output}"


def forced_rerun(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """The scenario with 0.3 s of traffic, and a calibration claiming an enormous budget:
    `auto` starts at N = 1, where that run is invalid."""
    from testbed.experiment.calibration import machine

    text = SCENARIO.read_text()
    for old, new in (("duration_s: 0.03", "duration_s: 0.3"), ("bytes: 12MB", "bytes: 400MB")):
        assert old in text, f"{SCENARIO.name} changed: update this test's variant"
        text = text.replace(old, new)
    scenario = tmp_path / "silent-blackhole-long.yaml"
    scenario.write_text(text)
    path = tmp_path / "calibration.json"
    path.write_text(
        json.dumps({"budget_hops_per_s": 1e12, "measured_at": time.time(), "machine": machine()})
    )
    return scenario, {"TESTBED_CALIBRATION": str(path)}


# (command, the line after which the fabric to interrupt is announced, phase, signal)
CASES = [
    ("run", None, "start-up", signal.SIGTERM),
    ("run", None, "start-up", signal.SIGKILL),
    ("run", None, "workload", signal.SIGINT),
    ("run", None, "workload", signal.SIGHUP),
    ("run", None, "workload", signal.SIGKILL),
    ("rerun", "auto: rerunning", "start-up", signal.SIGHUP),
    ("rerun", "auto: rerunning", "workload", signal.SIGTERM),
    ("rerun", "auto: rerunning", "workload", signal.SIGKILL),
    ("compare", "[single-path] fabric", "workload", signal.SIGTERM),
    ("repeat", "== repetition 2 of 2", "start-up", signal.SIGINT),
]


@pytest.mark.parametrize(
    "command,after,phase,sig", CASES, ids=[f"{c}-{p}-{s.name}" for c, _, p, s in CASES]
)
def test_interrupted_run_leaves_nothing(tmp_path, command, after, phase, sig):
    # A given time dilation: no auto rerun comes between the moments these cases wait for.
    fixed = ["--quick", "--time-dilation", "1000"]
    args = ["run", str(SCENARIO), *fixed]
    env = None
    if command == "rerun":
        scenario, env = forced_rerun(tmp_path)
        args = ["run", str(scenario)]
    elif command == "compare":
        args = ["compare", str(SCENARIO), *fixed, "--transports", "mrc,single-path"]
    elif command == "repeat":
        args += ["--repeat", "2"]
    run = Run(args, tmp_path / "out", env)
    try:
        run.wait_moment(after, phase)
        rc = run.interrupt(sig)
    finally:
        if run.proc.poll() is None:
            os.killpg(run.proc.pid, signal.SIGKILL)
            run.proc.wait()
    assert rc == (-sig if sig == signal.SIGKILL else 128 + sig), run.output
    run.assert_nothing_left()


# A run from the Python API: no command line installs signal handlers or makes its fabrics
# owned, so a SIGTERM (Python's default: die at once, no `finally`) or a SIGKILL leaves the
# fabric to its supervisor, which must take it down as it does a command's. (A unit test that
# ran `run_reps_grid` under `timeout` left four fabrics up for two hours, 2026-12-07.)
API_RUN = (
    "import sys, testbed; "
    "testbed.run(sys.argv[1], quick_run=True, time_dilation=1000, out=sys.argv[2])"
)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_python_api_run_killed_mid_workload_leaves_nothing(tmp_path, sig):
    out = tmp_path / "out"
    run = Run([], out, argv=[sys.executable, "-c", API_RUN, str(SCENARIO), str(out)])
    try:
        run.wait_moment(None, "workload")
        rc = run.interrupt(sig)
    finally:
        if run.proc.poll() is None:
            os.killpg(run.proc.pid, signal.SIGKILL)
            run.proc.wait()
    assert rc == -sig, run.output  # default dispositions: the process died of the signal
    run.assert_nothing_left()

"""`testbed soak` on a real fabric: the quick soak passes, a switch killed with SIGKILL is a
logged failure the soak rides out, an endpoint killed with SIGKILL ends it with one line and
nothing left behind (docs/soak.md)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.fabric.cleanup import leftovers, pid_exists
from tests.conftest import ROOT, tb

pytestmark = pytest.mark.netns


def _root_links() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if ":" in line}


def _netns() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def _start(out: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "testbed.cli", "soak", "--out", str(out), *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _processes(out: Path, proc: subprocess.Popen, timeout: float = 60) -> dict:
    """processes.json, once the soak wrote it (its fabric and endpoints are up)."""
    path = out / "processes.json"
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the soak did not come up"
        time.sleep(0.2)
    time.sleep(0.2)
    return json.loads(path.read_text())


def test_quick_soak_loses_nothing_and_reports_every_check(tmp_path):
    out = tmp_path / "soak"
    r = tb("soak", "--quick", "--out", str(out), check=False, timeout=150)
    assert r.returncode == 0, r.stdout + r.stderr
    s = json.loads((out / "summary.json").read_text())
    tot = s["accounting"]["total"]
    assert tot["sent_messages"] > 100 and tot["delivered_messages"] == tot["sent_messages"]
    assert tot["lost_bytes"] == 0 and tot["duplicates"] == 0
    assert tot["crc_failures"] == 0 and tot["bad_messages"] == 0
    assert set(s["accounting"]["jobs"]) == {"allreduce", "permutation"}
    assert all(j["sent_messages"] > 0 for j in s["accounting"]["jobs"].values())
    assert s["traffic"]["allreduce"]["steps_finished"] > 5
    assert s["failures"]["passed"] and s["failures"]["planned"] >= 2
    log = [json.loads(line) for line in (out / "failures.jsonl").read_text().splitlines()]
    assert len(log) == s["failures"]["planned"]
    assert all(e["applied_at"] is not None for e in log)
    assert {e["action"] for e in log} & {"link-down", "blackhole", "switch-down", "plane-down"}
    assert s["rss"]["applies"] is False and s["rss"]["per_window_kb"]
    assert len(s["rss"]["per_window_kb"]) == 8 + 4  # every switch and endpoint process
    assert s["emulation"]["stretches"] and "valid" in s["emulation"]
    assert "## Exactly once" in (out / "report.md").read_text()
    assert s["passed"] is True


def test_a_switch_killed_mid_soak_is_a_logged_failure_and_the_soak_goes_on(tmp_path):
    out = tmp_path / "soak"
    proc = _start(out, "--minutes", "0.5", "--seed", "3")
    procs = _processes(out, proc)
    victim = "spine1p1"
    time.sleep(8)
    os.kill(procs["switches"][victim], signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=150)
    assert proc.returncode == 0, stdout + stderr
    assert f"switch process of {victim}" in stdout
    s = json.loads((out / "summary.json").read_text())
    deaths = s["switch_deaths"]
    assert [d["node"] for d in deaths] == [victim]
    assert deaths[0]["how"] == "killed by signal 9"
    assert 5 < deaths[0]["at"] < 25
    assert "black hole" in deaths[0]["seen_by_neighbours"]
    assert s["failures"]["passed"] and s["failures"]["switch_deaths"] == [victim]
    assert s["rss"]["processes"][f"switch {victim}"] == {"skipped": "died during the run"}
    # Scheduled events on the dead switch after its death are logged as not applied, with why.
    log = [json.loads(line) for line in (out / "failures.jsonl").read_text().splitlines()]
    for e in log:
        if e.get("node") == victim and e["source"] == "schedule" and e["at"] > deaths[0]["at"]:
            assert e["applied_at"] is None and e["error"]
    tot = s["accounting"]["total"]
    assert tot["lost_bytes"] == 0 and tot["duplicates"] == 0 and tot["sent_messages"] > 100
    assert leftovers(procs["fabric"]) == []


def test_an_endpoint_killed_mid_soak_ends_it_with_one_line_and_nothing_left(tmp_path):
    links, spaces = _root_links(), _netns()
    out = tmp_path / "soak"
    proc = _start(out, "--minutes", "0.5")
    procs = _processes(out, proc)
    time.sleep(5)
    os.kill(procs["endpoints"]["h3"], signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2, stdout + stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("testbed: endpoint on h3 died (killed by signal 9) at t="), lines
    assert "Traceback" not in stderr
    name = procs["fabric"]
    assert leftovers(name) == []
    pids = [*procs["switches"].values(), *procs["endpoints"].values()]
    assert not [p for p in pids if pid_exists(p)]
    assert not Path(procs["endpoint_dir"]).exists()
    assert not Path(f"/run/testbed/{name}").exists()
    new_links = _root_links() - links
    assert not [x for x in new_links if any(k in x for k in ("spine", "leaf", "-eth"))], new_links
    assert _netns() <= spaces

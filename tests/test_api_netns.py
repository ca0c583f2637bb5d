"""The public Python API on real fabrics: the `with` block builds and removes a fabric, also when
the block raises or the process gets SIGTERM; the example script runs end to end; `run` takes a
dict and returns the summary."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from testbed import Fabric, FabricError, LeafSpine, run
from testbed.fabric import client
from testbed.fabric.cleanup import leftovers, pid_exists
from testbed.fabric.state import run_dir
from tests.conftest import ROOT, unique_name
from tests.test_api import SCENARIO

pytestmark = pytest.mark.netns

SMALL = LeafSpine(spines=1, leaves=2, hosts_per_leaf=1, link_mbps=50)


def test_with_block_builds_drives_and_removes_a_fabric():
    name = unique_name("api")
    with Fabric(SMALL, name=name) as f:
        assert f.is_up and run_dir(name).exists()
        assert f.exec("h1", "ping", "-c1", "-W2", f.host_ip("h2")).returncode == 0
        assert f.exec("h1", "false").returncode == 1  # the exit status is kept
        reply = f.ctl("blackhole", "spine1", "leaf2")
        assert reply["steps"] >= 1
        assert f.exec("h1", "ping", "-c1", "-W1", f.host_ip("h2")).returncode != 0
        f.ctl("heal", "spine1", "leaf2")
        assert f.exec("h1", "ping", "-c1", "-W2", f.host_ip("h2")).returncode == 0
        port = f.description.interface("spine1", "leaf2").name
        counters = f.counters("spine1")
        assert counters["spine1"]["ports"][port]["drops"].get("blackhole", 0) >= 1
        again = Fabric.attach(name)
        assert again.params == f.params and again.state().status in ("up", "degraded")
        with pytest.raises(FabricError, match="no node 'h9'"):
            f.exec("h9", "true")
    assert not f.is_up
    assert leftovers(name) == []
    assert not run_dir(name).exists()


def test_an_exception_inside_the_block_removes_the_fabric_and_propagates():
    name = unique_name("api")
    with pytest.raises(ZeroDivisionError):
        with Fabric(SMALL, name=name) as f:
            pids = [p.pid for p in f.state().processes]
            assert pids
            1 / 0  # noqa: B018
    assert leftovers(name) == []
    assert not run_dir(name).exists()
    assert not any(pid_exists(p) for p in pids)
    with pytest.raises(client.ClientError):
        Fabric.attach(name)


def test_sigterm_inside_the_block_removes_the_fabric():
    name = unique_name("api")
    script = textwrap.dedent(f"""
        import time
        from testbed import Fabric, LeafSpine
        with Fabric(LeafSpine(spines=1, leaves=2, hosts_per_leaf=1), name={name!r}):
            print("up", flush=True)
            time.sleep(120)
    """)
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, cwd=ROOT,
    )  # fmt: skip
    try:
        assert proc.stdout.readline().strip() == "up", proc.stderr.read()
        assert run_dir(name).exists()
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0
    deadline = time.monotonic() + 10
    while leftovers(name) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert leftovers(name) == []
    assert not run_dir(name).exists()


def test_the_api_example_runs_end_to_end_and_leaves_nothing():
    before = set(os.listdir(run_dir("x").parent)) if run_dir("x").parent.exists() else set()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "api_quickstart.py"), "--fabric-only"],
        capture_output=True, text=True, timeout=180, cwd="/",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "h1 -> h3 (10.1.2.1): exit 0" in proc.stdout
    assert "blackhole spine1-leaf2" in proc.stdout
    assert "'blackhole':" in proc.stdout  # spine1 counted the packets it swallowed
    name = proc.stdout.split("'")[1]
    assert leftovers(name) == []
    after = set(os.listdir(run_dir("x").parent))
    assert name not in after
    assert after <= before, f"the example left run folders behind: {after - before}"


def test_run_takes_a_dict_and_returns_the_summary(tmp_path):
    scenario = SCENARIO | {"name": "api-run", "expect": {"delivered_all": True}}
    summary = run(scenario, out=tmp_path / "out")
    assert summary["scenario"] == "api-run"
    assert summary["passed"] is True
    mrc = summary["transports"]["mrc"]
    assert mrc["delivered_bytes"] == 1_000_000
    assert 0 < mrc["goodput_mbps"] < 20
    on_disk = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert on_disk["transports"]["mrc"]["delivered_bytes"] == 1_000_000
    (flow,) = on_disk["transports"]["mrc"]["flows"]
    assert (flow["src"], flow["dst"], flow["bytes"]) == ("h1", "h2", 1_000_000)
    assert flow["fct_ms"] > 0 and 0 < flow["goodput_mbps"] < 20
    assert on_disk["provenance"]["scenario"]["name"] == "api-run"


def test_run_json_prints_the_summary_alone_on_stdout(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "run", "silent-blackhole", "--quick", "--json",
         "--out", str(tmp_path / "r")],
        capture_output=True, text=True, timeout=180, cwd=ROOT,
    )  # fmt: skip
    summary = json.loads(proc.stdout)  # nothing but the JSON document
    # A run the validity verdict calls invalid exits 3 (EXIT_INVALID), not 0.
    assert proc.returncode == (0 if summary["valid"] else 3), proc.stderr[-2000:]
    assert summary["valid"] == summary["emulation"]["valid"]
    assert summary["passed"] is True and summary["out_dir"] == str(tmp_path / "r")
    assert summary["transports"]["mrc"]["flows"]
    assert "[mrc] fabric" in proc.stderr  # progress went to stderr

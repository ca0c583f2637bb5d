"""`--executor slurm` on a real Slurm: a one-node cluster on this machine started by the
project's own script (scripts/slurm_local.sh), a 2 x 2 sweep with 2 seeds of a tiny scenario
submitted as one job array, one task killed mid-run and redone by --resume (and only it), no
two runs overlapping in time, and the aggregate in the tree of the same sweep run locally; and
one array spread over two slurmd on this machine, each in its own network and UTS namespace
(~20 s).

About 2.5 minutes: 17 runs of a two-host fabric, each a fresh fabric (~5 s each on a busy
2-core machine; measured 2 min 20 s), and Slurm's ~3 s between array tasks. Needs root (the runs build namespaces) and Debian's munge and Slurm packages."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.analysis.validity import is_valid
from tests.conftest import ROOT, tb

pytestmark = [
    pytest.mark.netns,
    # One try: a rerun would be another 17 runs, and the kill is not a flake to retry.
    pytest.mark.flaky(reruns=0),
]

SCRIPT = ROOT / "scripts" / "slurm_local.sh"
TINY = """\
name: slurm-tiny
description: The smallest run there is, for the Slurm executor's test.
topology: {spines: 1, leaves: 2, hosts_per_leaf: 1, link_mbps: 100, delay_us: 20, queue_kb: 64}
transport: mrc
workload: {kind: bulk, src: h1, dst: h2, bytes: 200KB}
duration_s: 0.2
emulation: {time_dilation: 4}
seed: 1
expect: {delivered_all: true}
"""
SWEEP = ["--sweep", "workload.bytes=100KB,200KB", "--sweep", "topology.delay_us=10,20"]
KILLED = 2  # the manifest line whose task dies mid-run


@pytest.fixture(scope="module")
def slurm():
    """The local Slurm, started if it is not up (and then stopped after)."""
    missing = [c for c in ("slurmctld", "slurmd", "sbatch", "munged") if not shutil.which(c)]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (apt-get install munge slurmctld slurmd "
                    "slurm-client; scripts/setup.sh does it)")  # fmt: skip
    status = subprocess.run(["bash", str(SCRIPT), "status"], capture_output=True, text=True)
    was_up = "slurmctld: running" in status.stdout
    subprocess.run(["bash", str(SCRIPT), "start"], check=True, timeout=120)
    yield
    if not was_up:
        subprocess.run(["bash", str(SCRIPT), "stop"], check=False, timeout=60)


def states(out: Path) -> dict[int, dict]:
    found = {}
    for p in (out / "slurm" / "state").glob("*.json"):
        try:
            found[int(p.stem)] = json.loads(p.read_text())
        except ValueError:
            continue
    return found


def files(root: Path) -> set[str]:
    """The aggregate's tree: everything but each run's own contents, Slurm's records and the
    goodput band (drawn only where a run kept up: see band_where_valid)."""
    out = set()
    for p in root.rglob("*"):
        rel = p.relative_to(root)
        if rel.parts[0] == "slurm" or any(x.startswith("rep-") for x in rel.parts[:-1]):
            continue
        if rel.name.startswith("goodput_band."):
            continue
        out.add(str(rel))
    return out


def band_where_valid(root: Path) -> None:
    """A point's goodput band is drawn from its valid runs only, so on this shared machine
    whether it exists depends on which runs kept up, not on the executor: it must exist
    exactly where some run's mrc kept up."""
    for point in sorted(root.glob("points/*")):
        reps = [json.loads(s.read_text()) for s in point.glob("rep-*/summary.json")]
        kept_up = any(is_valid(r["transports"]["mrc"].get("emulation")) for r in reps)
        assert reps and (point / "goodput_band.png").exists() == kept_up, (point, kept_up)


def test_a_sweep_on_slurm_resumes_the_killed_run_and_aggregates_like_local(slurm, tmp_path):
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(TINY)
    out = tmp_path / "on-slurm"
    args = [sys.executable, "-m", "testbed.cli", "run", str(scenario), "--quick", "--repeat",
            "2", *SWEEP, "--allow-invalid", "--executor", "slurm", "--partition", "testbed",
            "--out", str(out)]  # fmt: skip
    parent = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)  # fmt: skip
    # Kill line KILLED's task once its run is under way, as a node dying would.
    deadline = time.monotonic() + 240
    killed_pid = None
    while time.monotonic() < deadline and parent.poll() is None:
        st = states(out).get(KILLED)
        if st and st.get("status") == "running" and st.get("pid"):
            time.sleep(2.0)  # mid-run: the fabric is being built or running
            killed_pid = st["pid"]
            os.kill(killed_pid, signal.SIGKILL)
            break
        time.sleep(0.2)
    assert killed_pid is not None, "line's task never ran"
    stdout, stderr = parent.communicate(timeout=300)
    assert parent.returncode == 2, stderr[-3000:]
    assert "1 of 8 runs did not finish (line 2 " in stderr and "--resume" in stderr, stderr
    first = states(out)
    assert sorted(i for i, s in first.items() if s["status"] == "finished") == [0, 1, 3, 4, 5, 6, 7]
    partial = list(out.rglob("PARTIAL"))
    assert len(partial) == 1, partial  # line 2: point 2 (bytes 100KB, delay 20), seed 1
    assert partial[0].parent.name == "rep-01" and partial[0].parent.parent.name.startswith("02-")

    proc = tb(*args[3:], "--resume", "--json", check=False, timeout=240)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    subs = [json.loads(x) for x in (out / "slurm/submissions.jsonl").read_text().splitlines()]
    assert [s["tasks"] for s in subs] == [list(range(8)), [KILLED]]  # only the killed run again
    after = states(out)
    assert all(s["status"] == "finished" for s in after.values()) and len(after) == 8
    for i in first:
        if i != KILLED:
            assert after[i]["started"] == first[i]["started"]  # untouched by the resume
    assert not list(out.rglob("PARTIAL"))

    # Every task finished, each on the node to itself: no two runs overlapped in time.
    spans = sorted((s["started"], s["ended"], s["node"]) for s in after.values())
    for (_, e0, _), (s1, _, _) in zip(spans, spans[1:], strict=False):
        assert e0 <= s1, f"runs overlapped: {spans}"
    leaves = list(out.glob("points/*/rep-*/summary.json"))
    assert len(leaves) == 8
    for leaf in leaves:
        s = json.loads(leaf.read_text())
        assert s["transports"]["mrc"]["delivered_bytes"] > 0
        assert s["provenance"]["node"] and s["task"]["node"] == after[s["task"]["line"]]["node"]
        assert {"cpu_model", "cpu_count", "kernel", "version", "datapath", "calibration"} <= set(
            s["provenance"]
        )

    local = tmp_path / "local"
    loc = tb(*args[3:-6], "--out", str(local), "--json", check=False, timeout=400)
    assert loc.returncode in (0, 1), loc.stderr[-3000:]
    got, want = json.loads(proc.stdout), json.loads(loc.stdout)
    assert got.keys() == want.keys() and got["sweep"] == want["sweep"]
    for a, b in zip(got["points"], want["points"], strict=True):
        assert (a["index"], a["dir"], a["values"]) == (b["index"], b["dir"], b["values"])
        assert a["transports"].keys() == b["transports"].keys()
        assert a["transports"]["mrc"].keys() == b["transports"]["mrc"].keys()
        assert a["transports"]["mrc"]["runs"] == b["transports"]["mrc"]["runs"] == 2
    assert files(out) == files(local)
    band_where_valid(out)
    band_where_valid(local)


@pytest.fixture
def slurm_pair():
    """Two more slurmd on this machine, each in its own network and UTS namespace."""
    missing = [c for c in ("slurmctld", "slurmd", "sbatch", "munged") if not shutil.which(c)]
    if missing:
        pytest.skip(f"needs {', '.join(missing)}")
    status = subprocess.run(["bash", str(SCRIPT), "status"], capture_output=True, text=True)
    slurm_was_up = "slurmctld: running" in status.stdout
    pair_was_up = "slurmd-tbnode1: running" in status.stdout
    subprocess.run(["bash", str(SCRIPT), "start", "--two-nodes"], check=True, timeout=180)
    yield
    if not slurm_was_up:
        subprocess.run(["bash", str(SCRIPT), "stop"], check=False, timeout=60)
    elif not pair_was_up:  # back to the one node that was up (the module's fixture's)
        subprocess.run(["bash", str(SCRIPT), "start"], check=False, timeout=180)


def test_one_array_spreads_over_two_namespaced_nodes(slurm_pair, tmp_path):
    """Orchestration, not timing: both "nodes" share this machine's two cores."""
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(TINY)
    config = tmp_path / "slurm.yaml"
    # The nodes are namespaces of this machine: the same filesystem, which is not visible
    # from here by its type (ext4), so the config says it.
    config.write_text("partition: pair\nshared: true\n")
    out = tmp_path / "pair"
    proc = tb(
        "run", str(scenario), "--quick", "--repeat", "4", "--allow-invalid", "--executor",
        "slurm", "--slurm-config", str(config), "--out", str(out), "--json",
        check=False, timeout=300,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    got = json.loads(proc.stdout)
    assert got["repetitions"]["n"] == 4 and got["transports"]["mrc"]["runs"] == 4
    nodes = []
    for rep in range(1, 5):
        leaf = json.loads((out / f"rep-0{rep}" / "summary.json").read_text())
        assert leaf["provenance"]["node"] == leaf["task"]["node"]  # the UTS namespace's name
        assert leaf["transports"]["mrc"]["delivered_bytes"] > 0
        nodes.append(leaf["task"]["node"])
    assert set(nodes) == {"tbnode1", "tbnode2"}, nodes

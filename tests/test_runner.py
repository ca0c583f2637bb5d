"""The runner's pure parts: workload hand-over, metrics records to a TransportRun, arguments, and
that a bad scenario fails before anything is created (no root needed for that)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from testbed.experiment.runner import transports_arg
from testbed.fabric.state import RUN_ROOT
from testbed.harness.endpoint_driver import endpoint_run, endpoint_workload
from testbed.scenario import flows, validate
from tests.conftest import ROOT

BASE = {
    "name": "t",
    "description": "d",
    "topology": {"spines": 2, "leaves": 2, "hosts_per_leaf": 2, "link_mbps": 20},
    "duration_s": 5,
}


def test_endpoint_workload_is_the_scenario_matrix():
    sc = validate({**BASE, "workload": {"kind": "permutation", "bytes": "1MB"}})
    w = endpoint_workload(sc)
    assert w["kind"] == "flows"
    assert [tuple(f) for f in w["flows"]] == [(f.src, f.dst, f.bytes) for f in flows(sc)]
    ar = validate({**BASE, "workload": {"kind": "allreduce", "bytes": "64KiB", "steps": 3}})
    assert endpoint_workload(ar) == {
        "kind": "allreduce",
        "hosts": ["h1", "h2", "h3", "h4"],
        "bytes": 65536,
        "steps": 3,
    }


def _bin(t: float, ms: list[int]) -> dict:
    return {"type": "bin", "job": 1, "t": t, "dt": 0.01, "ms": ms, "placed": sum(ms)}


def test_endpoint_run_from_records():
    t0 = 100.0
    records = {
        "h1": [
            {"type": "msg", "job": 1, "side": "tx", "posted": 100.0, "acked": 100.05,
             "bytes": 3000, "peer": "h3", "t": 100.05},
            {"type": "counters", "job": 1, "peer": "h3", "qp": 1, "t": 100.02,
             "retransmits": {"nack": 1}, "counters": {}},
            {"type": "counters", "job": 1, "peer": "h3", "qp": 1, "t": 100.05,
             "retransmits": {"nack": 2, "loss": 1}, "counters": {}},
            {"type": "evtx", "t": 100.0, "dt": 0.01, "bytes": {"10.1.2.1:49152": 1400,
                                                               "10.1.2.1:49153": 600}},
            {"type": "msg", "job": 2, "side": "tx", "posted": 100.0, "acked": 101.0,
             "bytes": 9, "peer": "h3", "t": 101.0},
        ],
        "h3": [_bin(100.0, [1000, 0, 0, 0, 0, 0, 0, 0, 0, 2000])],
    }  # fmt: skip
    statuses = {
        "h1": {"done": False, "unacked": [[100.04, 500]]},
        "h3": {"done": True, "unacked": [[100.06, 24]]},  # done: a trailing token, not data
    }
    paths = {49152: "via spine1", 49153: "via spine2"}
    run = endpoint_run("mrc", records, statuses, t0, 0.1, lambda h, a, ev: paths[ev])
    assert run.deliveries == [(0.0, 1000), (pytest.approx(0.009), 2000)]
    assert [(m.bytes, m.done_s is None) for m in run.messages] == [(3000, False), (500, True)]
    assert run.retransmits == {"nack": 2, "loss": 1}  # the last counters record, not the sum
    assert run.ev_bytes["via spine1"][0] == 1400 and run.ev_bytes["via spine2"][0] == 600


def test_endpoint_run_marks_the_step_in_progress_as_unfinished():
    records = {
        "h1": [
            {"type": "step", "job": 1, "t": 1.2, "start": 1.0, "end": 1.2, "step": 0, "ms": 200},
        ]
    }
    statuses = {"h1": {"done": False, "rank": 0, "global_steps": [{}], "steps_finished": 1,
                       "steps": 3, "unacked": []}}  # fmt: skip
    run = endpoint_run("mrc", records, statuses, 1.0, 5.0)
    assert run.steps == [(0.0, pytest.approx(0.2)), (pytest.approx(0.2), None)]


def test_transports_arg():
    assert transports_arg("mrc, tcp,mrc") == ["mrc", "tcp"]
    with pytest.raises(ValueError, match="--transports: unknown transport 'tpc'"):
        transports_arg("mrc,tpc")


@pytest.mark.parametrize(
    "edit, message",
    [
        (("workload: {kind: bulk", "workload: {knd: bulk"), "workload"),
        (("link: [spine1, leaf2]}", "link: [spine1, spine2]}"), "not adjacent"),
        (("at: 4.0", "at: 40.0"), "events[1].at"),
        (("src: h2", "src: h9"), "h9"),
    ],
)
def test_bad_scenario_fails_fast_creating_nothing(tmp_path, edit, message):
    text = (ROOT / "scenarios" / "silent-blackhole.yaml").read_text()
    assert edit[0] in text
    path = tmp_path / "bad.yaml"
    path.write_text(text.replace(*edit))
    before = set(RUN_ROOT.iterdir()) if RUN_ROOT.exists() else set()
    t = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "run", str(path)],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    elapsed = time.monotonic() - t
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert (set(RUN_ROOT.iterdir()) if RUN_ROOT.exists() else set()) == before
    assert elapsed < 2.0  # the interpreter's start-up included; validation itself takes ms


def test_a_kernel_baseline_without_its_tool_fails_before_anything_is_built(monkeypatch):
    from testbed.experiment import runner

    monkeypatch.setattr(runner.shutil, "which", lambda tool: None if tool == "mptcpize" else "/x")
    runner.check_runnable(["mrc", "tcp"])  # iperf3 is there: fine
    with pytest.raises(runner.RunError, match="'mptcp' needs mptcpize"):
        runner.check_runnable(["mrc", "mptcp"])

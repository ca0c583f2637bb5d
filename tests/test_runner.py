"""The runner's pure parts: workload hand-over, metrics records to a TransportRun, arguments, and
that a bad scenario fails before anything is created (no root needed for that)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from testbed.experiment.runner import transports_arg
from testbed.fabric.state import RUN_ROOT
from testbed.harness.endpoint_driver import (
    endpoint_run,
    endpoint_workload,
    expected_flows,
    flow_records,
)
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
        (("at: 0.007", "at: 0.07"), "events[1].at"),
        (("src: h2", "src: h9"), "h9"),
    ],
)
def test_bad_scenario_fails_fast_creating_nothing(tmp_path, edit, message):
    text = (ROOT / "scenarios" / "silent-blackhole.yaml").read_text()
    assert edit[0] in text
    path = tmp_path / "bad.yaml"
    path.write_text(text.replace(*edit))
    before = set(RUN_ROOT.iterdir()) if RUN_ROOT.exists() else set()
    proc = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "run", str(path)],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    # One line per mistake (the not-adjacent edit breaks both events), each naming the file.
    assert lines and message in lines[0], proc.stderr
    assert all(ln.startswith(f"testbed: {path}:") for ln in lines), proc.stderr
    # Failed before anything was built: no fabric's run folder appeared. (Not timed: a wall
    # clock on two shared cores says more about the load than about the code.)
    assert not (set(RUN_ROOT.iterdir()) if RUN_ROOT.exists() else set()) - before


def test_a_kernel_baseline_without_its_tool_fails_before_anything_is_built(monkeypatch):
    from testbed.experiment import runner

    monkeypatch.setattr(runner.shutil, "which", lambda tool: None if tool == "mptcpize" else "/x")
    runner.check_runnable(["mrc", "tcp"])  # iperf3 is there: fine
    with pytest.raises(runner.RunError, match="'mptcp' needs mptcpize"):
        runner.check_runnable(["mrc", "mptcp"])


def test_flow_records_from_the_senders_records():
    """Per flow: bytes acknowledged, first post, last acknowledgement, retransmits of its own
    connection; an unfinished flow has no completion and starts at its first unacked post."""
    t0 = 10.0
    records = {
        "h1": [
            {"type": "msg", "job": 1, "side": "tx", "posted": 10.0, "acked": 10.2,
             "bytes": 600, "peer": "h3", "t": 10.2},
            {"type": "msg", "job": 1, "side": "tx", "posted": 10.1, "acked": 10.5,
             "bytes": 400, "peer": "h3", "t": 10.5},
            {"type": "counters", "job": 1, "peer": "h3", "qp": 7, "t": 10.1,
             "retransmits": {"nack": 1}, "counters": {"messages_queued": 2}},
            {"type": "counters", "job": 1, "peer": "h3", "qp": 7, "t": 10.5,
             "retransmits": {"nack": 3}, "counters": {"messages_queued": 2}},
            {"type": "msg", "job": 1, "side": "rx", "bytes": 5, "peer": "h2", "t": 10.3},
        ],
        "h2": [],
        # h4's bins: what it placed of h2's flow, byte by byte (two bins).
        "h4": [{"type": "bin", "job": 1, "t": 10.0, "dt": 0.01, "ms": [1], "by_peer": {"h2": 300}},
               {"type": "bin", "job": 1, "t": 10.01, "dt": 0.01, "ms": [1],
                "by_peer": {"h2": 250}}],
    }  # fmt: skip
    statuses = {"h1": {"done": True}, "h2": {"done": False, "unacked": [[10.05, 700]]}}
    expected = [("h1", "h3", 1000), ("h2", "h4", 700)]
    f1, f2 = flow_records(records, statuses, t0, expected)
    assert (f1.src, f1.dst, f1.bytes, f1.acked_bytes) == ("h1", "h3", 1000, 1000)
    assert f1.start_s == pytest.approx(0.0) and f1.done_s == pytest.approx(0.5)
    assert f1.retransmits == {"nack": 3}
    assert (f2.src, f2.dst, f2.acked_bytes, f2.done_s) == ("h2", "h4", 0, None)
    assert f2.placed_bytes == 550 and f1.placed_bytes is None
    assert f2.start_s == pytest.approx(0.05)
    # A flow short of its bytes is unfinished even with some acknowledged.
    (short,) = flow_records(records, statuses, t0, [("h1", "h3", 2000)])
    assert short.done_s is None and short.acked_bytes == 1000


def test_allreduce_flows_are_the_ring_hops_seen():
    records = {
        "h1": [{"type": "msg", "job": 1, "side": "tx", "posted": 0.1, "acked": 0.3,
                "bytes": 50, "peer": "h2", "t": 0.3},
               # h1's side of the h4 -> h1 hop only acknowledges: not a flow of h1's.
               {"type": "counters", "job": 1, "peer": "h4", "qp": 9, "t": 0.3,
                "retransmits": {}, "counters": {"ack_tx": 3}}],
        "h2": [{"type": "msg", "job": 1, "side": "tx", "posted": 0.2, "acked": 0.4,
                "bytes": 50, "peer": "h1", "t": 0.4}],
    }  # fmt: skip
    flows = flow_records(records, {"h1": {"done": True}, "h2": {"done": False}}, 0.0, None)
    assert [(f.src, f.dst, f.bytes, f.done_s) for f in flows] == [
        ("h1", "h2", 50, pytest.approx(0.3)),
        ("h2", "h1", 50, None),
    ]


def test_expected_flows_follow_the_scenario():
    incast = validate(
        BASE | {"workload": {"kind": "incast", "dst": "h1", "srcs": ["h2", "h3"], "bytes": "1MB"}}
    )
    assert expected_flows(incast) == [("h2", "h1", 1_000_000), ("h3", "h1", 1_000_000)]
    ring = validate(BASE | {"workload": {"kind": "allreduce", "bytes": "1MB", "steps": 2}})
    assert expected_flows(ring) is None  # the hops carry what the steps make them carry

"""A trace workload on a real fabric: iterations as steps, what held them back, the frames.

Four hosts at 10 Gbps under dilation run a tensor+data-parallel trace for three iterations;
the run must be valid, and then every rank's iterations, collectives and the summary's
attribution must be there and agree with each other.
"""

from __future__ import annotations

import json

import pytest

import testbed.results as results
from tests.conftest import tb, verdict_implied

pytestmark = pytest.mark.netns

TRACE = """HYBRID_TRANSFORMER model_parallel_NPU_group: 2 all_gpus: 4
2
attn  -1  20000 ALLREDUCE 65536  20000 ALLREDUCE 65536  20000 ALLREDUCE 262144  1000
mlp   -1  30000 NONE      0      30000 NONE      0      30000 ALLREDUCE 524288  1000
"""

SCENARIO = """name: trace-netns
description: a small trace on four hosts
topology: {spines: 2, leaves: 2, hosts_per_leaf: 2, link_mbps: 10000, delay_us: 1, queue_kb: 12}
transport: mrc
workload: {kind: trace, file: small.txt, time_unit: ns, iterations: 3, stragglers: {h4: 1.5}}
duration_s: 0.05
emulation: {time_dilation: auto}
seed: 1
expect: {delivered_all: true}
"""


def test_a_trace_runs_its_iterations_and_says_what_held_them_back(tmp_path):
    (tmp_path / "small.txt").write_text(TRACE)
    (tmp_path / "sc.yaml").write_text(SCENARIO)
    out = tmp_path / "out"
    proc = tb("run", str(tmp_path / "sc.yaml"), "--out", str(out), check=False, timeout=600)
    summary = json.loads((out / "summary.json").read_text())
    mrc = summary["transports"]["mrc"]
    emu = mrc["emulation"]
    assert verdict_implied(emu) == emu["valid"]
    if not emu["valid"]:
        pytest.fail(f"INVALID after {emu['reruns']} auto reruns: {emu['invalid_reasons']}")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-1000:]
    assert "iterations held by" in proc.stdout
    trace = mrc["trace"]
    assert trace["ranks"] == 4 and [it["iteration"] for it in trace["iterations"]] == [0, 1, 2]
    assert all(it["ranks_finished"] == 4 for it in trace["iterations"])
    # Every iteration is a step; the steps' times are the iterations'.
    assert mrc["step_time_ms"]["p100"] == pytest.approx(
        max(it["ms"] for it in trace["iterations"]), abs=0.01
    )
    # Per iteration, 2 tensor-parallel all-reduces on each rank and 2 data-parallel ones.
    res = results.load(out)
    c = res.collectives
    assert len(c) == 3 * 4 * 4 and set(c["kind"]) == {"collective"}
    assert set(trace["collectives"]) == set(c["name"])
    # The straggler's compute (1.5x) shows on its own ranks' nodes: h4 starts its first
    # collective 1.5x later than h1 (the forward compute before it is 20 us).
    first = c[(c.iteration == 0) & (c.name == "attn.fwd.allreduce")].set_index("host")["start_s"]
    assert first["h4"] == pytest.approx(1.5 * first["h1"], rel=0.05)

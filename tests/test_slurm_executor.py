"""`--executor slurm` without Slurm or a fabric: the manifest and its hashes, which lines a
resume submits, partial folders, the checks made before anything is submitted (with fake
sbatch/sinfo/squeue on the PATH), the refusal to pool runs of different calibrations, and a
whole sweep through the executor whose tasks run in-process on fake runs, aggregated into the
same tree as the local executor's. The real Slurm is exercised in tests/test_slurm_netns.py."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.analysis.report import GOODPUT_CSV_COLUMNS
from testbed.cli import slurm_task
from testbed.experiment import executor, repetitions
from testbed.experiment.errors import RunError
from testbed.experiment.executor import Cluster, check_pooling, run_with_executor
from testbed.experiment.manifest import (
    FINISHED,
    PARTIAL,
    array_spec,
    build_manifest,
    line_status,
    pending,
    read_experiment,
    scenario_hash,
    write_experiment,
    write_state,
)
from testbed.experiment.runner import Outcome, Progress
from testbed.experiment.slurm import SlurmError, SlurmOptions, preflight, read_config
from testbed.scenario import validate
from tests.test_repetitions import BASE, entry

ROOT = Path(__file__).resolve().parents[1]
SWEEP = {"workload.bytes": [100_000, 200_000], "topology.delay_us": [10, 20]}
QUIET = Progress(stream=open(os.devnull, "w"))  # noqa: SIM115 (lives as long as the tests)


def scenario(**extra):
    return validate(dict(BASE, seed=1, expect={"min_goodput_fraction": 0.5}, **extra))


# --------------------------------------------------------------------------- the manifest


def test_one_line_per_point_seed_and_transport_in_the_local_layout():
    sc = scenario()
    exp = build_manifest(sc, ["mrc", "tcp"], judged=["mrc"], seeds=[1, 2], sweep=SWEEP)
    assert len(exp.lines) == 4 * 2 * 2 and exp.kind == "sweep"
    assert [x.index for x in exp.lines] == list(range(16))
    first = exp.lines[0]
    assert first.dir == "points/01-bytes=100000,delay_us=10/rep-01/by-transport/mrc"
    assert first.group == "points/01-bytes=100000,delay_us=10/rep-01"
    assert first.judged and not exp.lines[1].judged and exp.lines[1].transport == "tcp"
    assert first.annotate == {
        "repetition": {"index": 1, "of": 2, "seed": 1},
        "sweep_point": {"workload.bytes": 100_000, "topology.delay_us": 10},
    }
    # The scenario each line carries is resolved: the point's values and the seed are set.
    assert first.scenario["workload"]["bytes"] == 100_000 and first.scenario["seed"] == 1
    assert validate(first.scenario).topology.delay_us == 10
    one = build_manifest(sc, ["mrc"], seeds=[1])
    assert [(x.dir, x.annotate) for x in one.lines] == [(".", {})]
    reps = build_manifest(sc, ["mrc"], seeds=[3, 4, 5])
    assert [x.dir for x in reps.lines] == ["rep-01", "rep-02", "rep-03"] and reps.kind == "repeat"


def test_the_hash_is_of_the_resolved_scenario_content():
    sc = scenario()
    a = build_manifest(sc, ["mrc"], seeds=[1, 2])
    b = build_manifest(sc, ["mrc"], seeds=[1, 2])
    assert [x.hash for x in a.lines] == [x.hash for x in b.lines]
    assert a.lines[0].hash != a.lines[1].hash  # another seed, another scenario
    assert scenario_hash({"a": 1, "b": [1, 2]}) == scenario_hash({"b": [1, 2], "a": 1})
    quick = build_manifest(sc, ["mrc"], seeds=[1, 2], quick_run=True)
    assert quick.lines[0].hash != a.lines[0].hash  # --quick changes what runs
    assert quick.lines[0].scenario["duration_s"] < a.lines[0].scenario["duration_s"]


def test_array_spec_collapses_runs_of_ids():
    assert array_spec([0, 1, 2, 3]) == "0-3"
    assert array_spec([5, 0, 2, 3, 7, 8]) == "0,2-3,5,7-8"
    assert array_spec([4]) == "4"


# --------------------------------------------------------------------------- resume selection


def finish(out: Path, line, transport: str = "mrc") -> None:
    folder = out / line.dir
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(json.dumps({"transports": {transport: {}}}))
    write_state(out, line, {"status": FINISHED})


def test_resume_selects_exactly_the_lines_without_a_finished_result(tmp_path):
    exp = build_manifest(scenario(), ["mrc"], seeds=[1, 2, 3, 4, 5])
    write_experiment(tmp_path, exp)
    l0, l1, l2, l3, l4 = exp.lines
    finish(tmp_path, l0)
    finish(tmp_path, l1)
    (tmp_path / l1.dir / PARTIAL).write_text("{}")  # finished state, but the mark is left
    finish(tmp_path, l2)
    (tmp_path / l2.dir / "summary.json").write_text("{half")  # a half-written summary
    (tmp_path / l3.dir).mkdir()  # a node died mid-run: mark and "running" state
    (tmp_path / l3.dir / PARTIAL).write_text("{}")
    write_state(tmp_path, l3, {"status": "running"})
    assert [line_status(tmp_path, x) for x in exp.lines] == [
        FINISHED, "partial", "partial", "partial", "missing",
    ]  # fmt: skip
    assert [x.index for x in pending(tmp_path, exp.lines)] == [1, 2, 3, 4]
    # A finished state of another scenario (the file changed since) is no result.
    stale = json.loads((tmp_path / "slurm/state/00000.json").read_text())
    stale["hash"] = "0" * 64
    (tmp_path / "slurm/state/00000.json").write_text(json.dumps(stale))
    assert line_status(tmp_path, l0) == "partial"


def test_resume_refuses_an_experiment_that_changed(tmp_path):
    sc = scenario()
    exp = build_manifest(sc, ["mrc"], seeds=[1, 2])
    write_experiment(tmp_path, exp)
    assert read_experiment(tmp_path).lines == exp.lines
    changed = build_manifest(scenario(duration_s=9), ["mrc"], seeds=[1, 2])
    with pytest.raises(RunError, match="--resume: the experiment is not the one submitted"):
        executor.select_lines(tmp_path, changed, resume=True)
    with pytest.raises(RunError, match="holds an experiment already; add --resume"):
        executor.select_lines(tmp_path, exp, resume=False)
    with pytest.raises(RunError, match="no experiment to resume"):
        executor.select_lines(tmp_path / "new", exp, resume=True)


# --------------------------------------------------------------------------- pooling


def with_calibration(budget: float | None, **machine) -> dict:
    cal = None
    if budget is not None:
        m = {"cpu": "Xeon", "cores": 2, "python": "3.11.2", "emulator": 4, "datapath": "c"}
        cal = {"budget_hops_per_s": budget, "measured_at": 0, "machine": {**m, **machine}}
    return {"provenance": {"node": "n", "calibration": cal}}


def test_pooling_is_refused_across_different_calibrations_unless_allowed():
    check_pooling([with_calibration(1e5), with_calibration(1.05e5)])  # within 10 %: one sample
    check_pooling([with_calibration(None), with_calibration(None)])
    cases = [
        ([with_calibration(1e5), with_calibration(1e5, emulator=3)], "emulator version 4 vs 3"),
        ([with_calibration(1e5), with_calibration(1e5, cpu="EPYC")], "CPU model"),
        ([with_calibration(1e5), with_calibration(1e5, datapath="python")], "data path"),
        ([with_calibration(1e5), with_calibration(2e5)], "budget 100,000 vs 200,000"),
        ([with_calibration(1e5), with_calibration(None)], "one calibrated, one on the fallback"),
    ]
    for runs, why in cases:
        with pytest.raises(RunError, match=why) as err:
            check_pooling(runs)
        assert "--allow-mixed-calibration" in str(err.value)
        check_pooling(runs, allow_mixed=True)


# --------------------------------------------------------------------------- bad input


def fake_slurm(tmp_path: Path, partitions: str = "testbed* vm") -> Path:
    """sbatch, squeue, sinfo that answer like Slurm; sbatch records that it was called."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    scripts = {
        "sinfo": f"#!/bin/sh\nprintf '%s\\n' {' '.join(repr(p) for p in partitions.splitlines())}\n",
        "sbatch": f'#!/bin/sh\necho "$@" > {tmp_path}/sbatch-called\necho 42\n',
        "squeue": "#!/bin/sh\nexit 0\n",
    }
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def tb(*args: str, path: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": path}
    return subprocess.run(
        [sys.executable, "-m", "testbed.cli", *args],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env=env,
    )  # fmt: skip


TINY = {
    "name": "slurm-tiny",
    "topology": {"spines": 1, "leaves": 2, "hosts_per_leaf": 1, "link_mbps": 100},
    "transport": "mrc",
    "workload": {"kind": "bulk", "src": "h1", "dst": "h2", "bytes": "200KB"},
    "duration_s": 0.2,
    "emulation": {"time_dilation": 4},
    "expect": {"delivered_all": True},
}


def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(json.dumps(TINY))
    return path


def test_no_slurm_on_the_path_is_one_clear_error(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    out = tmp_path / "out"
    proc = tb("run", str(tiny(tmp_path)), "--executor", "slurm", "--out", str(out), path=str(empty))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "sbatch is not on the PATH" in lines[0], proc.stderr
    assert not (out / "slurm").exists()


def test_an_unknown_partition_is_refused_before_submitting(tmp_path):
    bin_dir = fake_slurm(tmp_path, "testbed* vm\ngpu node[1-2]")
    proc = tb(
        "run", str(tiny(tmp_path)), "--executor", "slurm", "--partition", "nope",
        "--out", str(tmp_path / "out"), path=f"{bin_dir}:{os.environ['PATH']}",
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "testbed: --partition: Slurm has no partition 'nope' (it has gpu, testbed)"
    ]
    assert not (tmp_path / "sbatch-called").exists()


def test_a_results_folder_the_nodes_cannot_see_is_refused(tmp_path):
    bin_dir = fake_slurm(tmp_path, "batch* node1,node2")
    proc = tb(
        "run", str(tiny(tmp_path)), "--executor", "slurm", "--out", str(tmp_path / "out"),
        path=f"{bin_dir}:{os.environ['PATH']}",
    )  # fmt: skip
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "filesystem of this machine, which the nodes of partition 'batch'" in line
    assert not (tmp_path / "sbatch-called").exists()
    # The config's word overrides what cannot be seen from here (an exotic shared mount).
    config = tmp_path / "slurm.yaml"
    config.write_text("shared: true\npartition: batch\n")
    opts = SlurmOptions.from_config(config)
    os.environ["PATH"], old = f"{bin_dir}:{os.environ['PATH']}", os.environ["PATH"]
    try:
        assert preflight(tmp_path / "out", opts) == ["node1", "node2"]
    finally:
        os.environ["PATH"] = old


def test_slurm_options_only_with_the_slurm_executor(tmp_path):
    proc = tb("run", str(tiny(tmp_path)), "--partition", "x", path=os.environ["PATH"])
    assert proc.returncode == 2
    assert proc.stderr.strip() == "testbed: --partition: only with --executor slurm"


def test_the_config_file_is_checked(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("partiton: x\n")
    with pytest.raises(SlurmError, match="unknown key 'partiton'"):
        read_config(bad)
    good = tmp_path / "good.yaml"
    good.write_text("partition: batch\noptions: [--time=30]\n")
    opts = SlurmOptions.from_config(good, None, ["--qos=low"])
    assert opts.partition == "batch" and opts.options == ["--time=30", "--qos=low"]
    assert SlurmOptions.from_config(good, "other").partition == "other"  # the flag wins


# --------------------------------------------------------------------------- a whole sweep


def fake_run_scenario(sc, transports, out, *, judged=None, annotate=None, **kw) -> Outcome:
    """A run that builds nothing: summary.json and goodput.csv as the runner writes them."""
    (t,) = transports
    goodput = sc.workload.bytes / 2000 + sc.seed
    summary = {
        "scenario": sc.name, "seed": sc.seed,
        "transports": {t: {**entry(goodput=goodput), "delivered_bytes": 1000}},
        "emulation": {"valid": True, "time_dilation": 1, "invalid_reasons": []},
        "provenance": {"node": "vm", "calibration": None, "scenario": sc.model_dump(mode="json")},
        **(annotate or {}),
    }  # fmt: skip
    for check in summary["transports"][t]["expectations"]["checks"]:
        check.setdefault("passed", True)  # as check_expectations writes every check
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary))
    with (out / "goodput.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(GOODPUT_CSV_COLUMNS)
        for i in range(20):
            w.writerow([f"{0.01 * i:.9g}", t, "all", "", "", f"{goodput:.3f}"])
    return Outcome(summary, {}, out, {}, list(judged if judged is not None else transports))


def _no_drawing(monkeypatch) -> None:
    """The sweep's plots as empty files: the test compares which files each executor writes,
    not the pictures (tests/test_repetitions.py draws them), and drawing was most of its time."""

    def placeholder(*args, **_kw) -> Path:  # the path is the last positional argument
        path = Path(args[-1])
        path.write_bytes(b"")
        return path

    for name in ("plot_goodput_band", "plot_metric_intervals", "plot_sweep"):
        monkeypatch.setattr(repetitions, name, placeholder)


def test_a_sweep_through_the_executor_aggregates_like_the_local_one(tmp_path, monkeypatch):
    sc = scenario()
    _no_drawing(monkeypatch)
    monkeypatch.setattr(slurm_task, "run_scenario", fake_run_scenario)
    monkeypatch.setattr(executor, "preflight", lambda out, opts: ["vm"])
    monkeypatch.setattr(executor, "wait", lambda job, **kw: None)
    submitted: list[list[int]] = []
    killed = {3}

    def submit(out, name, indices, opts):
        submitted.append(list(indices))
        for i in indices:
            if i in killed:  # the node dies mid-run: the mark and a "running" state stay
                line = read_experiment(out).lines[i]
                (out / line.dir).mkdir(parents=True, exist_ok=True)
                (out / line.dir / PARTIAL).write_text("{}")
                (out / line.dir / "half.csv").write_text("x")
                write_state(out, line, {"status": "running"})
                continue
            assert slurm_task.run_line(out, i) == 0
        return str(len(submitted))

    monkeypatch.setattr(executor, "submit", submit)
    cluster = Cluster(SlurmOptions(partition="testbed"))
    slurm_out = tmp_path / "slurm"
    run = dict(repeat=2, sweep=SWEEP, progress=QUIET)
    with pytest.raises(RunError, match=r"1 of 8 runs did not finish \(line 3 point 2 seed 2"):
        run_with_executor(sc, ["mrc"], slurm_out, cluster=cluster, **run)
    killed.clear()
    cluster.resume = True
    got = run_with_executor(sc, ["mrc"], slurm_out, cluster=cluster, **run)
    assert submitted == [list(range(8)), [3]]  # the resume redid that run, and only it
    assert not (slurm_out / "points/02-bytes=100000,delay_us=20/rep-02/half.csv").exists()

    monkeypatch.setattr(repetitions, "run_scenario", fake_run_scenario_any)
    local_out = tmp_path / "local"
    want = run_with_executor(sc, ["mrc"], local_out, **run)

    def tree(root: Path) -> set[str]:
        return {
            str(p.relative_to(root))
            for p in root.rglob("*")
            if "slurm" not in p.relative_to(root).parts
        }

    assert tree(slurm_out) == tree(local_out)
    a, b = got.summary, want.summary
    assert a.keys() == b.keys() and a["sweep"] == b["sweep"]
    for pa, pb in zip(a["points"], b["points"], strict=True):
        assert pa["dir"] == pb["dir"] and pa["values"] == pb["values"]
        assert pa["transports"] == pb["transports"]  # the same runs: the same medians
    leaf = json.loads(
        (slurm_out / "points/02-bytes=100000,delay_us=20/rep-02/summary.json").read_text()
    )
    assert leaf["task"]["line"] == 3 and leaf["task"]["started"] <= leaf["task"]["ended"]


def fake_run_scenario_any(sc, transports, out, *, judged=None, annotate=None, **kw) -> Outcome:
    """The local executor's run of every transport at once, from the same fake runs."""
    from types import SimpleNamespace

    (t,) = transports
    o = fake_run_scenario(sc, [t], out, judged=judged, annotate=annotate)
    g = o.summary["transports"][t]["goodput_mbps"]
    o.metrics = {t: SimpleNamespace(bin_times=[0.01 * i for i in range(20)], goodput_bins=[g] * 20)}
    return o


def test_a_compare_runs_one_line_per_transport_and_merges_them(tmp_path, monkeypatch):
    sc = scenario()
    monkeypatch.setattr(slurm_task, "run_scenario", fake_run_scenario)
    monkeypatch.setattr(executor, "preflight", lambda out, opts: ["vm"])
    monkeypatch.setattr(executor, "wait", lambda job, **kw: None)

    def submit(out, name, indices, opts):
        for i in indices:
            assert slurm_task.run_line(out, i) == 0
        return "7"

    monkeypatch.setattr(executor, "submit", submit)
    cluster = Cluster(SlurmOptions())
    one = run_with_executor(
        sc, ["mrc", "tcp"], tmp_path / "one", cluster=cluster, judged=["mrc"], progress=QUIET
    )
    assert isinstance(one, Outcome) and set(one.summary["transports"]) == {"mrc", "tcp"}
    assert one.summary["by_transport"] == {"mrc": "by-transport/mrc", "tcp": "by-transport/tcp"}
    assert one.judged == ["mrc"] and one.passed and one.valid
    from testbed.analysis.report import print_comparison

    with open(os.devnull, "w") as sink:
        print_comparison(one.summary, one.metrics, file=sink)  # what `testbed run` prints
    assert json.loads((tmp_path / "one/summary.json").read_text())["transports"].keys() == {
        "mrc", "tcp",
    }  # fmt: skip
    reps = run_with_executor(
        sc, ["mrc", "tcp"], tmp_path / "reps", cluster=cluster, judged=["mrc"], repeat=3,
        progress=QUIET,
    )  # fmt: skip
    assert isinstance(reps, repetitions.RepeatedOutcome)
    block = reps.summary["transports"]
    assert set(block) == {"mrc", "tcp"} and block["mrc"]["runs"] == 3
    assert [r["dir"] for r in reps.summary["repetitions"]["runs"]] == ["rep-01", "rep-02", "rep-03"]
    assert (tmp_path / "reps/rep-02/by-transport/tcp/summary.json").is_file()


def test_a_new_experiment_needs_a_folder_of_its_own(tmp_path):
    exp = build_manifest(scenario(), ["mrc"], seeds=[1])
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(RunError, match="is not empty; a Slurm experiment needs a new folder"):
        executor.select_lines(tmp_path, exp, resume=False)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_resume_waits_for_a_job_of_the_experiment_still_running(tmp_path, monkeypatch):
    exp = build_manifest(scenario(), ["mrc"], seeds=[1, 2])
    write_experiment(tmp_path, exp)
    (tmp_path / "slurm/submissions.jsonl").write_text(json.dumps({"job": "41", "tasks": [0, 1]}))
    monkeypatch.setattr(executor, "preflight", lambda out, opts: ["vm"])
    monkeypatch.setattr(executor, "active", lambda job: job == "41")
    cluster = Cluster(SlurmOptions(), resume=True)
    with pytest.raises(RunError, match=r"job 41 of this experiment is still queued or running"):
        run_with_executor(scenario(), ["mrc"], tmp_path, cluster=cluster, repeat=2, progress=QUIET)


def test_the_batch_script_runs_one_line_with_the_configured_interpreter(tmp_path):
    from testbed.experiment.slurm import batch_script

    text = batch_script("sudo -n /opt/mrc-testbed/.venv/bin/python", tmp_path / "out dir")
    assert "exec sudo -n /opt/mrc-testbed/.venv/bin/python -m testbed.cli.slurm_task" in text
    assert f"'{tmp_path / 'out dir'}' \"$SLURM_ARRAY_TASK_ID\"" in text

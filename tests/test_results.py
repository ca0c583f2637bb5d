"""testbed.results: a results tree (a sweep point holding a repeat folder of two reps, and a
plain run point) loads as tidy frames with the identity and sweep columns and fixed dtypes;
missing optional files give empty frames; a folder that is not a results folder is one line."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pandas as pd
import pytest

import testbed.results as r
from testbed.analysis.metrics import AppliedEvent, Emulation, build_summary, measure
from testbed.analysis.report import (
    FLOWS_CSV_COLUMNS,
    GOODPUT_CSV_COLUMNS,
    STEPS_CSV_COLUMNS,
    write_summary,
    write_timeseries_csv,
)
from testbed.harness.records import FlowRecord, Message, TransportRun
from testbed.results.schema import FRAMES, ID_COLUMNS
from testbed.scenario import validate
from tests.conftest import tb

SCENARIO = {
    "name": "tidy",
    "topology": {"spines": 2, "leaves": 2, "hosts_per_leaf": 2, "link_mbps": 20},
    "workload": {"kind": "allreduce", "bytes": "100KB", "steps": 3},
    "duration_s": 2,
    "seed": 7,
    "events": [{"at": 0.5, "action": "link-down", "link": ["spine1", "leaf2"]}],
}
GO = 1000.0  # the endpoints' CLOCK_MONOTONIC at the workload's start


def _transport_run(name: str, finished_steps: int) -> TransportRun:
    steps = [(0.3 * k, 0.3 * (k + 1)) for k in range(finished_steps)]
    steps += [(0.3 * finished_steps, None)] * (3 - finished_steps)
    return TransportRun(
        name,
        [(0.001 * k, 500) for k in range(1, 1500)],
        [Message(0.0, 1_200_000, 1.5 if finished_steps == 3 else None)],
        end_s=2.0,
        retransmits={"nack": 3},
        steps=steps,
        flows=[
            FlowRecord("h1", "h2", 600_000, 600_000, 0.0, 1.5, {"nack": 3}),
            FlowRecord("h2", "h1", 600_000, 300_000, 0.01, None, {}),
        ],
        flow_deliveries={("h1", "h2"): [(0.001 * k, 300) for k in range(1, 1500)]},
    )


def write_leaf(folder: Path, *, seed: int, rep: dict | None, point: dict | None) -> None:
    """A complete leaf run folder as the runner writes it: summary, CSVs, raw records."""
    sc = validate({**SCENARIO, "seed": seed})
    applied = [AppliedEvent(sc.events[0], 0.501)]
    metrics = {
        "mrc": measure(_transport_run("mrc", 3), sc, applied),
        "single-path": measure(_transport_run("single-path", 1), sc, applied),
    }
    summary = build_summary(sc, events=applied, transports=metrics, emulation=Emulation())
    for t in metrics:
        summary["transports"][t]["emulation"] = {"valid": t == "mrc", "time_dilation": 2.0}
    if rep is not None:
        summary["repetition"] = rep
    if point is not None:
        summary["sweep_point"] = point
    write_summary(folder, summary)
    write_timeseries_csv(folder, metrics)
    eps = folder / "raw" / "mrc" / "endpoints"
    eps.mkdir(parents=True)
    records = [
        {"type": "job", "t": GO, "job": 1, "event": "go"},
        {"type": "ev", "t": GO + 0.52, "job": 1, "peer": "h2", "ev": 49160, "old": "good",
         "new": "failed", "reason": "loss"},
        {"type": "ev", "t": GO + 0.61, "job": 1, "peer": "h2", "ev": 49160, "old": "failed",
         "new": "good", "reason": "probe_ack"},
    ]  # fmt: skip
    (eps / "h1.jsonl").write_text("".join(json.dumps(x) + "\n" for x in records) + '{"cut')
    (folder / "raw" / "mrc" / "switch_counters.json").write_text(json.dumps({
        "leaf1": {"switch": "leaf1", "up": True, "uptime_s": 2.5, "kernel_drops": 0,
                  "drops": {"loss": 2},
                  "ports": {"leaf1-eth2": {"rx_packets": 10, "tx_bytes": 900, "trims": 1,
                                           "drops": {"blackhole": 4},
                                           "state": {"up": True, "loss_pct": 0.0}}}},
    }))  # fmt: skip
    (folder / "raw" / "single-path").mkdir(parents=True)  # a run with no raw records


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    root = tmp_path / "sweep"
    root.mkdir()
    (root / "sweep.json").write_text("{}")
    rep_dir = root / "points" / "1-mbps-20"
    rep_dir.mkdir(parents=True)
    (rep_dir / "summary.json").write_text(json.dumps({"scenario": "tidy", "transports": {}}))
    for i, seed in ((1, 7), (2, 8)):
        leaf = rep_dir / f"rep-{i:02d}"
        leaf.mkdir()
        write_leaf(leaf, seed=seed, rep={"index": i, "of": 2, "seed": seed},
                   point={"topology.link_mbps": 20})  # fmt: skip
    leaf = root / "points" / "2-mbps-40"
    leaf.mkdir(parents=True)
    write_leaf(leaf, seed=7, rep=None, point={"topology.link_mbps": 40})
    return root


def _check_columns(res: r.Results, extra: tuple[str, ...]) -> None:
    for name, own in FRAMES.items():
        df = res[name]
        assert list(df.columns) == [*ID_COLUMNS, *extra, *own], name
        for col, dtype in {**ID_COLUMNS, **own}.items():
            assert df[col].dtype == pd.api.types.pandas_dtype(dtype), (name, col, df[col].dtype)


def test_a_sweep_of_a_repeat_folder_and_a_run_loads_long_form(sweep):
    res = r.load(sweep)
    assert res.sweep_keys == ("topology.link_mbps",)
    _check_columns(res, ("topology.link_mbps",))
    assert res.goodput["topology.link_mbps"].dtype == "Int64"
    runs = res.runs
    assert len(runs) == 6  # three leaves x two transports; the aggregate summary is no leaf
    leaves = ["points/1-mbps-20/rep-01", "points/1-mbps-20/rep-02", "points/2-mbps-40"]
    assert sorted(set(runs["run"])) == leaves
    by_run = runs.drop_duplicates("run").set_index("run")
    assert by_run["rep"].iloc[:2].tolist() == [1, 2] and pd.isna(by_run["rep"].iloc[2])
    assert by_run.loc["points/1-mbps-20/rep-02", "seed"] == 8
    assert by_run.loc["points/2-mbps-40", "topology.link_mbps"] == 40
    mrc = runs[runs.transport == "mrc"]
    assert mrc["valid"].all() and not runs[runs.transport == "single-path"]["valid"].any()
    assert (runs["time_dilation"] == 2.0).all() and (runs["retransmits"] == 3).all()
    assert runs[runs.transport == "single-path"]["step_p100_ms"].isna().all()

    g = res.goodput
    assert set(g["flow"]) == {"all", "h1->h2"} and set(g["transport"]) == {"mrc", "single-path"}
    total = g[(g.flow == "all") & (g.run == leaves[0]) & (g.transport == "mrc")]
    assert total["src"].isna().all() and total["time_s"].is_monotonic_increasing
    flow = g[(g.flow == "h1->h2") & (g.run == leaves[0]) & (g.transport == "mrc")]
    assert (flow["src"] == "h1").all() and flow["goodput_mbps"].median() == pytest.approx(2.4)

    s = res.steps
    sp = s[(s.run == leaves[2]) & (s.transport == "single-path")]
    assert sp["finished"].tolist() == [True, False, False]
    assert sp["step_ms"].iloc[0] == pytest.approx(300.0) and sp["step_ms"].iloc[1:].isna().all()

    f = res.flows[(res.flows.run == leaves[0]) & (res.flows.transport == "mrc")]
    assert f["finished"].tolist() == [True, False]
    assert f["fct_ms"].iloc[0] == pytest.approx(1500.0) and pd.isna(f["fct_ms"].iloc[1])
    assert f["end_s"].iloc[0] == pytest.approx(1.5) and pd.isna(f["end_s"].iloc[1])
    assert f["acked_bytes"].tolist() == [600_000, 300_000]

    ev = res.ev_events[res.ev_events.run == leaves[1]]
    assert ev["time_s"].tolist() == pytest.approx([0.52, 0.61])  # from the job's go
    assert ev["state"].tolist() == ["failed", "good"] and (ev["connection"] == "h1->h2").all()
    assert set(res.ev_events["transport"]) == {"mrc"}

    c = res.switch_counters[res.switch_counters.run == leaves[2]]
    got = {(p if isinstance(p, str) else None, k): v for p, k, v in
           zip(c["port"], c["counter"], c["value"], strict=True)}  # fmt: skip
    assert got[("leaf1-eth2", "drops.blackhole")] == 4 and got[(None, "drops.loss")] == 2
    assert got[("leaf1-eth2", "rx_packets")] == 10
    assert not any("state" in k or k == "uptime_s" or k == "up" for _, k in got)


def test_one_run_folder_alone_and_the_results_mapping(sweep):
    res = r.load(sweep / "points" / "2-mbps-40")
    assert set(res.runs["run"]) == {"."} and res.runs["rep"].isna().all()
    assert set(res.runs["seed"]) == {7} and res.sweep_keys == ("topology.link_mbps",)
    assert list(res) == list(FRAMES) and res["flows"] is res.flows
    with pytest.raises(KeyError, match="not a frame"):
        res["nope"]


def test_csv_headers_are_the_frames_columns(sweep):
    leaf = sweep / "points" / "2-mbps-40"
    for name, header in (("goodput", GOODPUT_CSV_COLUMNS), ("step_times", STEPS_CSV_COLUMNS),
                         ("flows", FLOWS_CSV_COLUMNS)):  # fmt: skip
        rows = list(csv.reader((leaf / f"{name}.csv").open()))
        assert tuple(rows[0]) == header
        frame = FRAMES["steps" if name == "step_times" else name]
        assert set(header) - {"transport"} == set(frame), name
        for row in rows[1:]:  # no words in numeric columns: a number or nothing
            for col, cell in zip(header, row, strict=True):
                if frame.get(col) in ("float64", "Int64") and cell:
                    float(cell)


def test_missing_optional_data_gives_empty_typed_frames(tmp_path):
    run = tmp_path / "run"
    (run / "raw").mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"scenario": "x", "seed": 3,
                                                  "transports": {"tcp": {}}}))  # fmt: skip
    res = r.load(run)
    _check_columns(res, ())
    for name in ("goodput", "steps", "flows", "ev_events", "switch_counters"):
        assert res[name].empty, name
    assert res.runs["transport"].tolist() == ["tcp"] and res.runs["valid"].isna().all()


def test_an_older_wide_goodput_csv_and_a_word_in_step_ms_are_read(tmp_path):
    (tmp_path / "raw").mkdir()
    (tmp_path / "summary.json").write_text(json.dumps({"seed": 1, "transports": {"mrc": {}}}))
    (tmp_path / "goodput.csv").write_text("time_s,mrc_mbps,tcp_mbps\n0,1.5,2\n0.01,3,\n")
    (tmp_path / "step_times.csv").write_text(
        "transport,step,step_ms\nmrc,0,12.5\nmrc,1,unfinished\n"
    )
    res = r.load(tmp_path)
    assert res.goodput[["transport", "goodput_mbps"]].values.tolist() == [
        ["mrc", 1.5], ["mrc", 3.0], ["tcp", 2.0],
    ]  # fmt: skip
    assert res.steps["finished"].tolist() == [True, False]
    assert res.steps["step_ms"].isna().tolist() == [False, True]


def test_not_a_results_folder_is_one_line_naming_it(tmp_path):
    with pytest.raises(r.ResultsError, match=rf"^{tmp_path}: no summary.json in this folder"):
        r.load(tmp_path)
    with pytest.raises(r.ResultsError, match="no such results folder"):
        r.load(tmp_path / "missing")
    (tmp_path / "summary.json").write_text("{}")
    with pytest.raises(r.ResultsError, match="summary.json: transports: missing"):
        r.load(tmp_path)


def test_parquet_keeps_the_columns_and_dtypes(sweep):
    res = r.load(sweep)
    paths = r.write_parquet(sweep, res)
    assert [p.name for p in paths] == [f"{n}.parquet" for n in FRAMES]
    for name, path in zip(FRAMES, paths, strict=True):
        back = pd.read_parquet(path)
        assert list(back.columns) == list(res[name].columns)
        pd.testing.assert_frame_equal(back, res[name], check_dtype=True)


def test_docs_results_md_documents_every_column():
    text = (Path(__file__).resolve().parents[1] / "docs" / "results.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    documented = {
        name for line in rows for name in re.findall(r"`([a-z_0-9.]+)`", line.split("|")[1])
    }
    for name, own in FRAMES.items():
        assert f"## {name}" in text, name
        missing = (set(own) | set(ID_COLUMNS)) - documented
        assert not missing, (name, missing)
    for header in (GOODPUT_CSV_COLUMNS, STEPS_CSV_COLUMNS, FLOWS_CSV_COLUMNS):
        assert ", ".join(header) in " ".join(text.split()), header


def test_format_is_csv_or_parquet_on_the_command_line():
    proc = tb("run", "gray-failure", "--format", "xml", check=False, timeout=60)
    assert proc.returncode == 2 and "--format: invalid choice: 'xml'" in proc.stderr


def test_per_flow_samples_split_each_bin_by_peer_at_the_milliseconds_of_the_total():
    from testbed.harness.endpoint_driver import flow_samples

    recs = [
        {"type": "bin", "job": 1, "t": 10.0, "dt": 0.01, "placed": 4000,
         "ms": [0, 1000, 0, 3000, 0, 0, 0, 0, 0, 0], "by_peer": {"h1": 3000, "h2": 1000}},
        {"type": "bin", "job": 2, "t": 10.0, "dt": 0.01, "placed": 10,
         "ms": [10] + [0] * 9, "by_peer": {"h1": 10}},  # another job: not this run's
    ]  # fmt: skip
    got = flow_samples(recs, 1)
    assert got["h1"] == [(pytest.approx(10.001), 750.0), (pytest.approx(10.003), 2250.0)]
    assert sum(n for _, n in got["h2"]) == 1000 and set(got) == {"h1", "h2"}

"""Sweeps without a fabric: key paths, the grid, every point validated before anything runs,
and the sweep folder (points, sweep.json, sweep.md, the plot) from fake runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from testbed.experiment import repetitions
from testbed.experiment.runner import Progress
from testbed.scenario import ScenarioError, load_scenario, validate
from testbed.scenario.sweep import (
    SweepError,
    grid,
    parse_path,
    parse_sweep_arg,
    set_path,
    sweep_points,
)
from tests.test_repetitions import BASE, fake_outcome

GRAY = {
    **BASE,
    "transport": ["mrc", "tcp"],
    "events": [{"at": 0.2, "action": "loss", "link": ["leaf1", "spine1"], "percent": 1}],
}


def test_paths_walk_mappings_and_lists():
    assert parse_path("events[0].percent") == ["events", 0, "percent"]
    assert parse_path("topology.link_mbps") == ["topology", "link_mbps"]
    assert parse_path("a[1][2].b") == ["a", 1, 2, "b"]
    with pytest.raises(SweepError, match="not a key"):
        parse_path("events.[0]")


def test_set_path_sets_existing_and_default_keys_and_refuses_what_is_not_there():
    data = json.loads(json.dumps(GRAY))
    set_path(data, "events[0].percent", 5)
    set_path(data, "topology.queue_kb", 64)  # left to its default in the file
    assert data["events"][0]["percent"] == 5 and data["topology"]["queue_kb"] == 64
    with pytest.raises(SweepError, match=r"events\[3\]: there is no such item"):
        set_path(data, "events[3].percent", 1)
    with pytest.raises(SweepError, match="no such key"):
        set_path(data, "topolgy.link_mbps", 1)


def test_transport_shorthand_sets_every_endpoint_transport_and_spares_the_kernel():
    data = json.loads(json.dumps(GRAY))
    set_path(data, "transport.evs", 16)
    assert data["transport"] == [{"name": "mrc", "evs": 16}, "tcp"]
    only_kernel = {**GRAY, "transport": ["tcp"]}
    with pytest.raises(SweepError, match="no endpoint transport"):
        set_path(dict(only_kernel), "transport.evs", 4)


def test_the_grid_varies_the_first_key_slowest():
    assert grid({"a": [1, 2], "b": ["x", "y"]}) == [
        {"a": 1, "b": "x"},
        {"a": 1, "b": "y"},
        {"a": 2, "b": "x"},
        {"a": 2, "b": "y"},
    ]


def test_points_are_whole_scenarios_without_the_sweep():
    sc = validate({**GRAY, "sweep": {"events[0].percent": [0, 1, 2, 5]}})
    points = sweep_points(sc)
    assert [p.scenario.events[0].percent for p in points] == [0, 1, 2, 5]
    assert all(p.scenario.sweep is None for p in points)
    assert [p.slug for p in points][:2] == ["01-percent=0", "02-percent=1"]
    assert sweep_points(sc, {"topology.link_mbps": [50]})[0].scenario.topology.link_mbps == 50


def test_a_bad_point_fails_the_whole_sweep_naming_key_and_value():
    with pytest.raises(ScenarioError) as err:
        validate({**GRAY, "sweep": {"events[0].percent": [1, 150]}})
    assert err.value.path == "sweep.events[0].percent"
    assert "150" in err.value.reason and "less than or equal to 100" in err.value.reason
    with pytest.raises(ScenarioError, match="sweep.events.0..percnt.*did you mean 'percent'"):
        sweep_points(validate(GRAY), parse_sweep_arg("events[0].percnt=1"))
    with pytest.raises(ScenarioError, match="sweep.topology.spines"):
        validate({**GRAY, "sweep": {"topology.spines": [0]}})


def test_sweep_errors_carry_the_files_line(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**GRAY, "sweep": {"events[0].percent": [1, 101]}}))
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    line = str(err.value).splitlines()[0]
    assert line.startswith(f"{path}:") and "sweep.events[0].percent" in line


def test_the_command_line_form():
    assert parse_sweep_arg("events[0].percent=0,1,2.5") == {"events[0].percent": [0, 1, 2.5]}
    assert parse_sweep_arg("transport.lb=wrr,reps") == {"transport.lb": ["wrr", "reps"]}
    with pytest.raises(SweepError, match="KEY=V1,V2"):
        parse_sweep_arg("events[0].percent")


def test_the_sweep_folder(tmp_path, monkeypatch):
    sc = validate({**GRAY, "sweep": {"events[0].percent": [0, 2, 5]}})
    calls = []

    def run_scenario(point, transports, out, **kw):
        calls.append((point.events[0].percent, out.relative_to(tmp_path), kw["annotate"]))
        g = 90 - 10 * point.events[0].percent
        return fake_outcome(out, {"mrc": g, "tcp": g / 2}, valid=point.events[0].percent != 5)

    monkeypatch.setattr(repetitions, "run_scenario", run_scenario)
    o = repetitions.run_experiment(
        sc, ["mrc", "tcp"], tmp_path, progress=Progress(stream=open("/dev/null", "w"))
    )
    assert [c[0] for c in calls] == [0, 2, 5]
    assert calls[1][1] == Path("points/02-percent=2")
    assert calls[1][2] == {"sweep_point": {"events[0].percent": 2}}
    data = json.loads((tmp_path / "sweep.json").read_text())
    assert data["sweep"] == {"events[0].percent": [0, 2, 5]}
    mrc = [p["transports"]["mrc"]["metrics"].get("goodput_mbps") for p in data["points"]]
    assert [m["median"] for m in mrc[:2]] == [90, 70]
    assert mrc[2] is None  # an invalid run is not a result: left out, and counted
    assert data["points"][2]["transports"]["mrc"]["invalid_runs"] == 1
    assert [p["valid"] for p in data["points"]] == [True, True, False]
    assert not o.valid and data["emulation"]["invalid_reasons"] == ["point 3 (points/03-percent=5)"]
    assert (tmp_path / "sweep.png").stat().st_size > 5000
    md = (tmp_path / "sweep.md").read_text()
    assert "| 2 | tcp | 35 (n=1)" in md and "INVALID points" in md
    assert "| 5 | mrc | — |" in md and "0 of 1" in md


def test_sweep_with_repetitions_nests_rep_folders(tmp_path, monkeypatch):
    sc = validate({**GRAY, "seeds": [3, 4]})
    outs = []

    def run_scenario(point, transports, out, **kw):
        outs.append((str(out.relative_to(tmp_path)), point.seed, sorted(kw["annotate"])))
        return fake_outcome(out, {"mrc": 80 + point.seed})

    monkeypatch.setattr(repetitions, "run_scenario", run_scenario)
    o = repetitions.run_experiment(
        sc,
        ["mrc"],
        tmp_path,
        sweep={"topology.link_mbps": [20, 40]},
        progress=Progress(stream=open("/dev/null", "w")),
    )
    assert outs[0] == ("points/01-link_mbps=20/rep-01", 3, ["repetition", "sweep_point"])
    assert outs[3] == ("points/02-link_mbps=40/rep-02", 4, ["repetition", "sweep_point"])
    point = json.loads((tmp_path / "points/01-link_mbps=20/summary.json").read_text())
    assert point["sweep_point"] == {"topology.link_mbps": 20}
    assert point["transports"]["mrc"]["metrics"]["goodput_mbps"]["median"] == 83.5
    assert o.valid and o.passed

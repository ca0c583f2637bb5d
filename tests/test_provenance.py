"""Every summary says where it came from; the scenario copy is the scenario as it ran."""

from __future__ import annotations

import json
import re

from testbed.experiment.api import load
from testbed.experiment.provenance import provenance
from testbed.scenario import quick, validate


def test_provenance_names_code_machine_and_command():
    sc = load("silent-blackhole")
    p = provenance(sc, ["testbed", "run", "silent-blackhole"])
    assert set(p) == {
        "version", "commit", "python", "python_executable", "kernel", "cpu_model",
        "cpu_count", "time_dilation", "seeds", "command", "scenario", "node", "datapath",
        "install_path", "calibration",
    }  # fmt: skip
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", p["version"])
    assert p["commit"] is None or re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", p["commit"])
    assert p["cpu_count"] >= 1 and p["python"].count(".") == 2 and p["kernel"]
    assert p["time_dilation"] == 1 and p["seeds"] == [sc.seed]
    assert p["command"] == ["testbed", "run", "silent-blackhole"]
    json.dumps(p, allow_nan=False)


def test_the_scenario_copy_is_what_ran_and_validates_again():
    sc = quick(load("silent-blackhole"))
    copy = provenance(sc)["scenario"]
    again = validate(copy)
    assert again == sc  # --quick's shortened timeline, not the file's
    assert copy["duration_s"] == sc.duration_s < load("silent-blackhole").duration_s

"""`testbed schema`: the JSON Schema of the scenario format accepts every shipped and lab
scenario file and refuses the shape mistakes the validator refuses."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed.scenario import scenario_json_schema
from tests.conftest import ROOT

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is a test extra")

FILES = sorted(ROOT.glob("scenarios/*.yaml")) + sorted(ROOT.glob("labs/*/*.yaml"))
SCENARIO_FILES = [p for p in FILES if p.name != "lab.yaml"]


@pytest.fixture(scope="module")
def validator():
    schema = scenario_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("path", SCENARIO_FILES, ids=lambda p: str(Path(p).relative_to(ROOT)))
def test_every_shipped_scenario_file_is_valid_against_the_schema(validator, path):
    data = yaml.safe_load(path.read_text())
    errors = [e.message for e in validator.iter_errors(data)]
    assert errors == [], f"{path}: {errors}"


def test_shape_mistakes_are_refused(validator):
    good = yaml.safe_load((ROOT / "scenarios" / "silent-blackhole.yaml").read_text())
    for mutate in (
        lambda d: d.update(acton="x"),  # unknown top-level key
        lambda d: d["events"][0].update(acton="heal"),  # unknown event key
        lambda d: d["workload"].update(kind="teleport"),
        lambda d: d.update(transport="carrier-pigeon"),
        lambda d: d.pop("duration_s"),
    ):
        bad = copy.deepcopy(good)
        mutate(bad)
        assert list(validator.iter_errors(bad)), f"accepted: {json.dumps(bad)[:200]}"
    assert SCENARIO_FILES, "no scenario files found"


def test_the_command_prints_it():
    proc = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "schema"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == scenario_json_schema()

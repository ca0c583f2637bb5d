"""The public Python API without a fabric: names resolve, bad input fails before anything is
built, and `validate` takes the same forms `run` does."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest

import testbed
from testbed import Fabric, LeafSpine, ScenarioError, validate
from testbed.fabric.state import RUN_ROOT
from topologies import TopologyError, TopologyParams

SCENARIO = {
    "name": "api-tiny",
    "description": "A bulk transfer across one leaf pair.",
    "topology": {"spines": 1, "leaves": 2, "hosts_per_leaf": 1, "link_mbps": 20},
    "transport": "mrc",
    "workload": {"kind": "bulk", "src": "h1", "dst": "h2", "bytes": "1MB"},
    "duration_s": 4,
}


def test_public_names_resolve_lazily():
    proc = subprocess.run(
        [sys.executable, "-c",
         "import sys, testbed; assert 'testbed.experiment.runner' not in sys.modules; "
         "testbed.run; assert 'testbed.experiment.runner' in sys.modules; print(sorted(testbed.__all__))"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    for name in ("Fabric", "LeafSpine", "run", "validate"):
        assert name in proc.stdout
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        testbed.nope  # noqa: B018


def test_leafspine_is_the_topology_parameters():
    assert LeafSpine is TopologyParams
    p = LeafSpine(spines=2, leaves=2, hosts_per_leaf=2, link_mbps=100)
    assert (p.spines, p.link_mbps) == (2, 100)


def test_bad_parameters_fail_before_anything_is_built():
    before = set(RUN_ROOT.iterdir()) if RUN_ROOT.exists() else set()
    with pytest.raises(TopologyError, match="spines"):
        Fabric(LeafSpine(spines=0, leaves=2, hosts_per_leaf=2))
    with pytest.raises(Exception, match="--name"):
        Fabric(LeafSpine(), name="Bad Name!")
    after = set(RUN_ROOT.iterdir()) if RUN_ROOT.exists() else set()
    assert after == before


def test_a_new_fabric_gets_a_fresh_name_and_a_description():
    a, b = Fabric(LeafSpine(spines=2, leaves=3, hosts_per_leaf=2)), Fabric()
    assert a.name != b.name
    assert a.hosts() == ["h1", "h2", "h3", "h4", "h5", "h6"]
    assert a.host_ip("h3") == "10.1.2.1"
    assert "down" in repr(a)


def test_validate_takes_a_dict_a_name_or_a_path(tmp_path):
    sc = validate(SCENARIO)
    assert sc.name == "api-tiny" and sc.transports == ["mrc"]
    assert validate("silent-blackhole").name == "silent-blackhole"
    bad = copy.deepcopy(SCENARIO)
    bad["workload"]["dst"] = "h9"
    with pytest.raises(ScenarioError, match=r"workload\.dst"):
        validate(bad)
    with pytest.raises(ScenarioError, match="no scenario file or shipped scenario named"):
        validate(str(tmp_path / "missing.yaml"))

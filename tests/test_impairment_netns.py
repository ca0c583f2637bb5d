"""A short scenario with an `impair` event on a live fabric: the impairments act on the wire
and every one is counted where it should be (docs/fabric.md, "Impairments")."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.conftest import tb
from topologies import leaf_spine

pytestmark = pytest.mark.netns

SCENARIO = {
    "name": "impair-netns",
    "topology": {"spines": 1, "leaves": 2, "hosts_per_leaf": 1, "link_mbps": 20, "delay_us": 20},
    "transport": "mrc",
    "workload": {"kind": "bulk", "src": "h1", "dst": "h2", "bytes": "2MB"},
    "duration_s": 6,
    "seed": 2,
    "emulation": {"time_dilation": 1},
    "events": [
        {
            "at": 0.0,
            "action": "impair",
            "link": ["leaf1", "spine1"],
            "direction": ["leaf1", "spine1"],
            "gilbert_elliott": {"p": 2, "r": 30},
            "jitter_us": 30,
            "reorder_percent": 2,
            "reorder_delay_us": 200,
            "corrupt_percent": 2,
            "duplicate_percent": 2,
        }
    ],
    "expect": {"delivered_all": True},
}


def test_impair_event_acts_on_the_wire_and_is_counted(tmp_path) -> None:
    path = tmp_path / "impair-netns.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    out = tmp_path / "out"
    proc = tb("run", str(path), "--out", str(out), "--allow-invalid", check=False, timeout=240)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["transports"]["mrc"]["delivered_bytes"] == 2_000_000, proc.stdout + proc.stderr
    (event,) = summary["events"]
    assert event["action"] == "impair" and event["applied_at"] is not None
    counters = json.loads(next(out.glob("raw/mrc/switch_counters.json")).read_text())
    fab = leaf_spine(spines=1, leaves=2, hosts_per_leaf=1)
    tx = counters["leaf1"]["ports"][fab.interface("leaf1", "spine1").name]
    rx = counters["spine1"]["ports"][fab.interface("spine1", "leaf1").name]
    assert tx["state"]["impair"]["gilbert_elliott"]["p"] == 2
    imp = tx["impairments"]
    assert tx["drops"]["burst_loss"] > 0
    assert imp["duplicated"] > 0 and imp["reordered"] > 0 and imp["jittered"] > 0
    assert imp["corrupted"] > 0
    # Every corrupted frame reached spine1 and was dropped there as a bad frame, none forwarded.
    assert rx["drops"].get("rx_bad_frame", 0) == imp["corrupted"]
    # The other direction is untouched.
    back = counters["spine1"]["ports"][fab.interface("spine1", "leaf1").name]
    assert back["impairments"] == {} and back["state"]["impair"] is None

"""The state file: written and read back; a file written by another version still loads."""

from __future__ import annotations

import json

from testbed.fabric.state import FabricState, ProcessRecord


def test_round_trip(tmp_path):
    st = FabricState(name="x1", status="up", params={"spines": 2}, seed=7)
    st.processes.append(ProcessRecord("switch", "leaf1", 123, 456))
    st.save(tmp_path)
    back = FabricState.load(tmp_path)
    assert back == st


def test_unknown_keys_are_ignored_so_clean_can_still_read_it(tmp_path):
    d = {
        "name": "x2",
        "status": "up",
        "seed": 3,
        "from_the_future": {"a": 1},
        "processes": [{"role": "switch", "node": "s", "pid": 1, "start_ticks": 2, "cpu": 9}],
    }
    (tmp_path / "state.json").write_text(json.dumps(d))
    st = FabricState.load(tmp_path)
    assert (st.name, st.seed) == ("x2", 3)
    assert st.processes == [ProcessRecord("switch", "s", 1, 2)]


def test_an_older_file_without_seed_defaults_to_seed_1(tmp_path):
    (tmp_path / "state.json").write_text(json.dumps({"name": "x3"}))
    assert FabricState.load(tmp_path).seed == 1

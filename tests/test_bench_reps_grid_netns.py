"""`testbed bench reps-grid --quick --json` on a real dilated 32-host, 800 Gbps fabric.

The quick grid is one cell (REPS on the 1:1 permutation, leaf1-spine1 dead from 10 to 110 µs;
~2 minutes). What it must show whatever the machine's speed: the cell's verdict agrees with its
recorded figures, the black hole dropped packets and nothing else did, the receivers saw the
spraying's reordering, and the EVs over the dead link were retired while it was dead. On a
valid run, REPS also lost no byte and finished every flow. The FCTs themselves are the bench's
to report (docs/fidelity.md, "Published results"), not a test's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.bench.reps_grid import format_reps_grid_table
from tests.conftest import tb, verdict_implied

pytestmark = pytest.mark.netns


@pytest.fixture(scope="module")
def bench(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("reps-grid")
    proc = tb("bench", "reps-grid", "--quick", "--json", "--out", str(out), timeout=900)
    return json.loads(proc.stdout)


def test_the_quick_cell_and_its_figures(bench) -> None:
    (cell,) = bench["cells"]
    assert (cell["fabric"], cell["traffic"], cell["mode"], cell["row"]) == (
        "1to1", "permutation", "link-failed-100us", "reps",
    )  # fmt: skip
    assert cell["htsim_mode"] == "fail_one_cable_after_10us_for_100us"
    summary = json.loads((Path(cell["run"]["out_dir"]) / "summary.json").read_text())
    emu = summary["transports"]["reps"]["emulation"]
    assert cell["run"]["valid"] == verdict_implied(emu)
    assert cell["flows"] == 32
    drops = dict(cell["drops"])
    dead = drops.pop("blackhole", 0)
    assert dead > sum(drops.values())  # the dead link, not the queues, lost the packets
    assert cell["data_rx"] > 32 * 1000  # 4 MiB flows of ~4 kB packets
    assert cell["ooo_ratio"] is not None and cell["ooo_max_psns"] > 0  # 256 EVs reorder
    assert cell["avoided_us"] is not None and cell["evs_retired"] > 0  # retired while dead
    # The endpoints record each retired EV's last send: the figure is that, not the bound.
    assert cell["avoided_from"] == "last_send" and cell["avoided_us"] <= cell["retired_us"]
    print(format_reps_grid_table(bench))
    if cell["run"]["valid"]:
        assert cell["lost_bytes"] == 0 and cell["unfinished"] == 0
        assert cell["median_us"] is not None and cell["median_us"] >= 42.0  # 4 MiB at 800 Gbps

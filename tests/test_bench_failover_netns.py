"""`testbed bench failover --quick --json` on a real fabric: the shape and what must hold.

MRC loses nothing and stalls for milliseconds; single-path on an EV through the dead link
delivers nothing until the heal; the ratios say so in the same run. The figures themselves
(how many milliseconds) are the bench's to report, not a timed test's to assert.
"""

from __future__ import annotations

import json

import pytest

from testbed.bench.failover_bench import BLACKHOLE_AT_S, HEAL_AT_S, TRANSPORTS
from testbed.fabric.cleanup import leftovers
from tests.conftest import tb

pytestmark = pytest.mark.netns


@pytest.fixture(scope="module")
def bench() -> dict:
    proc = tb("bench", "failover", "--quick", "--json", timeout=600)
    return json.loads(proc.stdout)


def test_shape(bench) -> None:
    assert bench["bench"] == "failover" and bench["link_mbps"] == 100
    assert set(bench["transports"]) == set(TRANSPORTS)
    for s in bench["transports"].values():
        assert {"failover_ms", "sliding_failover_ms", "max_stall_ms", "lost_bytes", "runs"} <= set(
            s
        )
        assert len(s["runs"]) == bench["meta"]["reps"] == 1
    assert set(bench["ratio"]) == {
        "spray_no_failover_vs_mrc_max_stall",
        "spray_no_failover_vs_mrc_sliding_failover",
        "single_path_vs_mrc_max_stall",
        "single_path_vs_mrc_sliding_failover",
    }


def test_mrc_loses_nothing_and_single_path_waits_for_the_heal(bench) -> None:
    mrc, sp = bench["transports"]["mrc"], bench["transports"]["single-path"]
    assert (
        mrc["all_done"] and sp["all_done"] and bench["transports"]["spray-no-failover"]["all_done"]
    )
    assert mrc["lost_bytes"] == 0 and sp["lost_bytes"] == 0
    assert mrc["runs"][0]["failover_status"] == "recovered"
    outage_ms = (HEAL_AT_S - BLACKHOLE_AT_S) * 1e3
    assert sp["max_stall_ms"] >= outage_ms - 100, "single-path cannot get past the dead link"
    assert mrc["max_stall_ms"] < outage_ms / 4, "MRC routes around it within milliseconds"
    assert bench["ratio"]["single_path_vs_mrc_max_stall"] >= 4


def test_nothing_of_the_run_is_left(bench) -> None:
    assert leftovers(bench["meta"]["fabric"]) == []

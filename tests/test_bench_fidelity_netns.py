"""`testbed bench fidelity --quick --json` on real dilated fabrics: the shape, and what must hold.

The quick bench (one seed, 1 MB flows, the spraying and hashed rows, a 4 -> 1 incast; ~50 s) is
what CI runs of the fidelity bench. What it must show whatever the machine's speed: every row
beside htsim's figure with the difference computed from the two, every run with a validity
verdict and its results, no row above the header-overhead ceiling (a goodput over what the wire
can carry is an accounting error), generated EVs on the source-routed fabric spreading over the
paths within the ±5 % of issue 19 on the median leaf while hashed EVs do not, and an incast in
which every sender finished.
The utilisation figures themselves are the bench's to report (docs/fidelity.md), not a test's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.bench.fidelity_table import format_fidelity_table
from tests.conftest import tb, verdict_implied

pytestmark = pytest.mark.netns


@pytest.fixture(scope="module")
def bench(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("fidelity")
    proc = tb("bench", "fidelity", "--quick", "--json", "--out", str(out), timeout=900)
    return json.loads(proc.stdout)


def _runs(bench: dict) -> list[dict]:
    return [run for row in bench["permutation"] for run in row["runs"]] + bench["incast"]["runs"]


def test_shape(bench) -> None:
    assert bench["bench"] == "fidelity" and bench["meta"]["quick"] is True
    assert bench["seeds"] == [1]
    # The two rows test_generated_evs_cover_the_paths_evenly_and_hashed_ones_do_not compares,
    # named here, not read back from the constant the bench itself uses.
    assert [r["row"] for r in bench["permutation"]] == ["mrc", "mrc-16ev"]
    assert bench["slow_link"] is None  # not in the quick bench
    assert "mean" in bench["permutation"][0]["htsim"]
    print(format_fidelity_table(bench))  # the table renders from the JSON


def test_every_difference_is_measured_minus_htsim(bench) -> None:
    for row in bench["permutation"]:
        m, h, d = row["measured"], row["htsim"], row["diff_points"]
        assert d["mean"] == pytest.approx(m["mean"] - h["mean"], abs=0.11), row["row"]
        assert d["min"] == pytest.approx(m["min"] - h["min"], abs=0.11), row["row"]
    inc = bench["incast"]
    assert inc["diff_points"]["ideal_over_last_pct"] == pytest.approx(
        inc["measured"]["ideal_over_last_pct"] - inc["htsim"]["ideal_over_last_pct"], abs=0.11
    )


def test_every_run_has_a_verdict_and_its_results(bench) -> None:
    for run in _runs(bench):
        assert isinstance(run["valid"], bool)
        assert run["valid"] == (not run["invalid_reasons"])
        assert run["time_dilation"] > 1  # datacenter links on this machine need dilation
        assert run["virtual_s"] > 0 and run["real_s"] > 0
        summary = json.loads((Path(run["out_dir"]) / "summary.json").read_text())
        (entry,) = summary["transports"].values()
        # The verdict is the one its own figures imply (not a copy of itself), and the bench
        # reports it as recorded.
        assert verdict_implied(entry["emulation"]) == entry["emulation"]["valid"] == run["valid"]
        if not run["valid"]:
            print(f"INVALID (the machine's, not the network's): {run['invalid_reasons']}")


def test_no_row_beats_the_wire(bench) -> None:
    for row in bench["permutation"]:
        assert row["measured"]["mean"] <= row["ceiling_pct"] + 0.5, row["row"]
        assert row["per_fct"]["mean"] <= row["ceiling_pct"] + 0.5, row["row"]


def test_generated_evs_cover_the_paths_evenly_and_hashed_ones_do_not(bench) -> None:
    """Every leaf within ±5 % (issue 19) in a run that trimmed nothing. A trim makes wrr move
    weight off the trimming path by design, and a 1 MB run at full load can leave that leaf at
    ~20 % for the rest of the run (a CI run at 21:37 on 2026-12-05: leaf1 -> spine1 after 35
    trims, every other leaf within 2 %); since ECN stopped moving generated EVs' weight, 0 of
    21 runs trimmed. A run that did trim is held to the bound that still holds: the median
    leaf within ±5 % (testbed.analysis.path_share.median_deviation_pct)."""
    rows = {r["row"]: r for r in bench["permutation"]}
    generated, hashed = rows["mrc"], rows["mrc-16ev"]
    for run in generated["runs"]:
        summary = json.loads((Path(run["out_dir"]) / "summary.json").read_text())
        (entry,) = summary["transports"].values()
        share = entry["path_share"]
        assert share["median_deviation_pct"] <= 5.0, share
        if entry["trims"] == 0:
            assert share["max_deviation_pct"] <= 5.0, share
        else:
            print(f"generated EVs trimmed {entry['trims']} times: worst leaf {share}")
    assert hashed["path_share_median_dev_pct"] > generated["path_share_median_dev_pct"]
    assert Path(bench["path_share_plot"]).is_file()


def test_the_incast_finishes(bench) -> None:
    inc = bench["incast"]["measured"]
    assert inc["all_done"]
    assert 0 < inc["ideal_over_last_pct"] <= 100
    assert inc["trims"] > 0, "4 senders into one 10 Gbps port must fill its 12 kB queue"

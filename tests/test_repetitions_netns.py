"""Repetitions and a sweep on the real fabric: the results tree, seeds on fresh fabrics, the
aggregate and sweep summaries, and nothing left behind."""

from __future__ import annotations

import json
import re

import pytest

from testbed.fabric.state import RUN_ROOT
from tests.conftest import tb

pytestmark = pytest.mark.netns


def fabrics() -> set[str]:
    return {p.name for p in RUN_ROOT.iterdir()} if RUN_ROOT.exists() else set()


def test_a_repeated_sweep_writes_its_tree(tmp_path):
    out = tmp_path / "sweep"
    proc = tb(
        # A fixed N: under auto an invalid run is rerun at 2N on a fresh fabric, and the
        # count of fabrics below would depend on the machine's load.
        "run", "gray-failure", "--quick", "--transport", "mrc", "--time-dilation", "2000",
        "--repeat", "2", "--sweep", "events[0].percent=0,2", "--out", str(out),
        "--allow-invalid", "--json",
        check=False, timeout=300,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    printed = json.loads(proc.stdout)
    assert printed["sweep"] == {"events[0].percent": [0, 2]}
    assert printed["out_dir"] == str(out)
    seeds = set()
    for k, pct in ((1, 0), (2, 2)):
        point = out / "points" / f"0{k}-percent={pct}"
        agg = json.loads((point / "summary.json").read_text())
        assert agg["sweep_point"] == {"events[0].percent": pct}
        assert agg["repetitions"]["n"] == 2
        mrc = agg["transports"]["mrc"]
        assert mrc["runs"] == 2 and mrc["valid_runs"] + mrc["invalid_runs"] == 2
        for rep in (1, 2):
            leaf = json.loads((point / f"rep-0{rep}" / "summary.json").read_text())
            assert leaf["repetition"]["index"] == rep and leaf["sweep_point"] == agg["sweep_point"]
            assert leaf["provenance"]["scenario"]["events"][0]["percent"] == pct
            assert leaf["transports"]["mrc"]["delivered_bytes"] > 0
            assert (point / f"rep-0{rep}" / "raw" / "mrc").is_dir()
            seeds.add((pct, leaf["seed"]))
        if mrc["valid_runs"]:
            g = mrc["metrics"]["goodput_mbps"]
            assert g["ci_low"] <= g["median"] <= g["ci_high"] and g["n"] == mrc["valid_runs"]
    assert {s for _, s in seeds} == {5, 6}  # gray-failure's seed and the next, at each point
    assert (out / "sweep.png").is_file() and (out / "sweep.md").is_file()
    built = set(re.findall(r"fabric (\w+): ", proc.stderr))
    assert len(built) == 4 and not built & fabrics()  # four fresh fabrics, all torn down

"""testbed.results on a real run (issue 20: "`testbed.results.load` in a test that builds the
frames from a real run and checks columns and dtypes"): `testbed run bursty-loss --quick` for
mrc and the tcp baseline with `--format parquet`, then every frame's columns and dtypes, the
identity columns against summary.json, and the parquet files equal to what `load` builds."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

import testbed.results as r
from endpoint.ev_path import EVState
from testbed.results.schema import FRAMES, ID_COLUMNS
from tests.conftest import tb

pytestmark = pytest.mark.netns


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    if shutil.which("iperf3") is None:
        pytest.skip("iperf3 is not installed (the tcp baseline)")
    out = tmp_path_factory.mktemp("tidy") / "run"
    # --allow-invalid: the frames' shape is checked here, not the machine's timing.
    proc = tb("run", "bursty-loss", "--quick", "--transport", "mrc,tcp", "--format", "parquet",
              "--out", str(out), "--allow-invalid", check=False, timeout=240)  # fmt: skip
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    assert f"data:    {out / 'runs.parquet'}" in proc.stdout
    return out


def test_a_real_run_loads_as_typed_long_frames(run_dir):
    summary = json.loads((run_dir / "summary.json").read_text())
    res = r.load(run_dir)
    for name, own in FRAMES.items():
        df = res[name]
        assert list(df.columns) == [*ID_COLUMNS, *own], name
        for col, dtype in {**ID_COLUMNS, **own}.items():
            assert df[col].dtype == pd.api.types.pandas_dtype(dtype), (name, col, df[col].dtype)
        if name not in ("steps", "collectives"):  # a bulk transfer: no steps, no trace
            assert not df.empty, name
        assert set(df["run"]) <= {"."} and set(df["seed"]) <= {summary["seed"]}, name
        assert df["rep"].isna().all(), name
        assert set(df["transport"]) <= set(summary["transports"]), name
    assert res.steps.empty and res.collectives.empty

    runs = res.runs.set_index("transport")
    assert sorted(runs.index) == ["mrc", "tcp"]
    for t, entry in summary["transports"].items():
        assert runs.loc[t, "goodput_mbps"] == entry["goodput_mbps"]
        assert runs.loc[t, "valid"] == entry["emulation"]["valid"]
        assert runs.loc[t, "delivered_bytes"] == entry["delivered_bytes"]

    g = res.goodput
    for t in ("mrc", "tcp"):
        total = g[(g.transport == t) & (g.flow == "all")]
        flow = g[(g.transport == t) & (g.flow == "h1->h3")]
        assert len(total) > 10 and len(flow) == len(total)
        # The flow is the whole workload: its series carries the transport's bytes.
        assert flow["goodput_mbps"].sum() == pytest.approx(total["goodput_mbps"].sum(), rel=0.02)

    f = res.flows.set_index("transport")
    for t, entry in summary["transports"].items():
        (want,) = entry["flows"]
        assert f.loc[t, "fct_ms"] == want["fct_ms"] and bool(f.loc[t, "finished"])
        assert f.loc[t, "end_s"] > f.loc[t, "start_s"] >= 0

    ev = res.ev_events
    assert set(ev["transport"]) == {"mrc"}  # only the endpoints have EVs
    assert (ev["time_s"] >= 0).all() and set(ev["state"]) <= {s.value for s in EVState}
    retired = (ev["state"] == "failed").sum()
    assert retired == summary["transports"]["mrc"]["ev_retirements"]

    c = res.switch_counters
    tx = c[(c.transport == "mrc") & (c.counter == "tx_bytes")]
    assert tx["port"].notna().all() and tx["value"].sum() > 5_000_000


def test_the_parquet_files_are_the_frames(run_dir):
    res = r.load(run_dir)
    for name in FRAMES:
        back = pd.read_parquet(run_dir / f"{name}.parquet")
        pd.testing.assert_frame_equal(back, res[name])

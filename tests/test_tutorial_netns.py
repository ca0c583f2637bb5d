"""docs/tutorial.md's commands, in --quick form, produce what the tutorial shows.

The netns tests run the tutorial's experiment (`testbed compare allreduce-under-failure`, two
transports instead of three, --quick) and its one-line change (`max_stall_ms: 0.0001`) and check
the shape of what comes out: the terminal's table rows and result lines, the files of the results
folder, report.md's sections, summary.json's keys, the failed expectation and its exit status.
They assert no figure: a run is one draw. The pure tests check that the lines the tutorial quotes
(the demo's step headers, the scenario's `expect` line) are still what the code has.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import ROOT, tb

TUTORIAL = ROOT / "docs" / "tutorial.md"
SCENARIO = ROOT / "scenarios" / "allreduce-under-failure.yaml"
EXPECT_LINE = "expect: {delivered_all: true, max_stall_ms: 0.2, max_p100_over_p50: 1.5}"
STRICT = ("max_stall_ms: 0.2", "max_stall_ms: 0.0001")
TABLE_ROWS = (
    "goodput (Mbps)",
    "per-flow goodput mean / min (Mbps)",
    "delivered",
    "max stall (ms)",
    "failover (ms)",
    "step P50 / P99 / P100 (ms)",
    "step P100/P50",
    "retransmits",
    "trims",
    "expectations",
)
REPORT_SECTIONS = (
    "# allreduce-under-failure",
    "## Side by side",
    "## Expectations",
    "## Timeline as applied",
    "## Emulation health",
    "## Plots",
)


def test_tutorial_quotes_the_demo_and_the_scenario():
    text = TUTORIAL.read_text(encoding="utf-8")
    demo = (ROOT / "scripts" / "demo.sh").read_text(encoding="utf-8")
    headers = re.findall(r"^=== (.+)$", text, re.M)
    assert headers, "the tutorial shows the demo's step headers"
    for header in headers:
        assert f'step "{header}"' in demo, header
    assert EXPECT_LINE in SCENARIO.read_text(encoding="utf-8").splitlines()
    assert EXPECT_LINE in text
    assert f"Change `{STRICT[0]}` to `{STRICT[1]}`" in text
    for row in TABLE_ROWS:
        assert row in text, row


@pytest.mark.netns
def test_first_experiment_produces_what_the_tutorial_shows(tmp_path):
    assert "allreduce-under-failure" in tb("list").stdout
    out = tmp_path / "compare"
    proc = tb(
        "compare", "allreduce-under-failure", "--transports", "mrc,single-path",
        "--quick", "--out", str(out), check=False, timeout=900,
    )  # fmt: skip
    said = proc.stdout + proc.stderr
    # 0: valid and mrc's expectations met; 3: the machine could not keep up (said so).
    assert proc.returncode in (0, 3), said
    for row in TABLE_ROWS:
        assert re.search(rf"^{re.escape(row)}\s", proc.stdout, re.M), (row, said)
    for line in (f"results: {out}", f"  report:  {out / 'report.md'}",
                 f"  html:    {out / 'report.html'}", f"  summary: {out / 'summary.json'}"):  # fmt: skip
        assert line in proc.stdout, (line, said)
    assert f"plot:    {out / 'goodput.png'}  (Goodput over time)" in proc.stdout, said
    assert f"plot:    {out / 'step_cdf.png'}  (Step-time CDF)" in proc.stdout, said
    if proc.returncode == 0:
        assert "expectations met (mrc)" in proc.stdout, said
    else:
        assert "INVALID RUN" in proc.stdout, said

    for name in ("summary.json", "report.md", "report.html", "goodput.csv", "flows.csv",
                 "step_times.csv", "goodput.png", "step_cdf.png"):  # fmt: skip
        assert (out / name).is_file(), name

    report = (out / "report.md").read_text(encoding="utf-8")
    for section in REPORT_SECTIONS:
        assert re.search(rf"^{re.escape(section)}$", report, re.M), section
    verdict = "> Valid run:" if proc.returncode == 0 else "INVALID"
    assert verdict in report

    summary = json.loads((out / "summary.json").read_text())
    assert summary["scenario"] == "allreduce-under-failure"
    assert set(summary["transports"]) == {"mrc", "single-path"}
    assert summary["emulation"]["valid"] is (proc.returncode == 0)
    assert [e["action"] for e in summary["events"]] == ["blackhole", "heal"]
    for entry in summary["transports"].values():
        assert set(entry["step_time_ms"]) == {"p50", "p99", "p100"}
        assert entry["max_stall_ms"] is not None
        names = [c["name"] for c in entry["expectations"]["checks"]]
        assert names == ["delivered_all", "max_stall_ms", "max_p100_over_p50"], names


@pytest.mark.netns
def test_one_line_change_fails_its_expectation(tmp_path):
    text = SCENARIO.read_text(encoding="utf-8")
    assert text.count(STRICT[0]) == 1
    mine = tmp_path / "my-allreduce.yaml"
    mine.write_text(text.replace(*STRICT), encoding="utf-8")
    out = tmp_path / "my-allreduce"
    proc = tb("run", str(mine), "--quick", "--out", str(out), check=False, timeout=600)
    said = proc.stdout + proc.stderr
    # 1: valid, expectations not met (what the tutorial shows); 3: invalid, said so as well.
    assert proc.returncode in (1, 3), said
    assert re.search(
        r"^expectations NOT met: mrc: max_stall_ms = \S+ \(limit 0\.0001\)", proc.stdout, re.M
    ), said
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["transports"]) == {"mrc"}
    check = summary["transports"]["mrc"]["expectations"]["checks"][1]
    assert check["name"] == "max_stall_ms" and check["passed"] is False

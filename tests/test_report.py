"""report.md, CSVs and the terminal table: side by side, honest about missing numbers."""

import csv
import io
import json

import pytest

from testbed.analysis.metrics import (
    AppliedEvent,
    Emulation,
    Message,
    TransportRun,
    build_summary,
    measure,
)
from testbed.analysis.report import (
    KERNEL_DROPS_BANNER,
    comparison_rows,
    format_comparison_plain,
    print_comparison,
    render_report,
    write_report,
    write_summary,
    write_timeseries_csv,
)
from testbed.harness.records import FlowRecord
from testbed.scenario import validate

SCENARIO = {
    "name": "allreduce-under-failure",
    "description": "Ring all-reduce steps while a spine-leaf link black-holes.",
    "topology": {"spines": 2, "leaves": 2, "hosts_per_leaf": 2, "link_mbps": 20},
    "workload": {"kind": "allreduce", "bytes": "100KB", "steps": 4},
    "duration_s": 6,
    "events": [
        {
            "at": 1.0,
            "action": "blackhole",
            "link": ["spine1", "leaf2"],
            "direction": ["leaf2", "spine1"],
        },
        {"at": 3.0, "action": "heal", "link": ["spine1", "leaf2"]},
    ],
    "expect": {"delivered_all": True, "max_failover_ms": 100, "max_p100_over_p50": 1.5},
}


def runs(sc):
    total = 4 * 4 * 150_000
    mrc = TransportRun(
        "mrc",
        [(0.001 * k, total // 3000) for k in range(1, 3001)],
        [Message(0.0, total, 3.0)],
        end_s=6.0,
        retransmits={"nack": 5, "timeout": 1},
        trims=12,
        steps=[(0.0, 0.7), (0.7, 1.5), (1.5, 2.2), (2.2, 3.0)],
        flows=[
            FlowRecord("h1", "h2", 600_000, 600_000, 0.0, 3.0, {"nack": 5}),
            FlowRecord("h2", "h3", 600_000, 600_000, 0.0, 2.0, {}),
        ],
    )
    sp = TransportRun(
        "single-path",
        [(0.001 * k, 100) for k in range(1, 1000)],
        [Message(0.0, total, None)],
        end_s=6.0,
        steps=[(0.0, 0.7), (0.7, None)],
    )
    return {r.transport: r for r in (mrc, sp)}


@pytest.fixture
def result():
    sc = validate(SCENARIO)
    applied = [AppliedEvent(sc.events[0], 1.0012), AppliedEvent(sc.events[1], None)]
    metrics = {n: measure(r, sc, applied) for n, r in runs(sc).items()}
    return sc, metrics, applied


def summary_of(sc, metrics, applied, drops=0):
    return build_summary(
        sc,
        events=applied,
        transports=metrics,
        emulation=Emulation(0.42, 130, drops),
        started="2026-05-01T10:00:00+00:00",
    )


def test_side_by_side_rows(result):
    sc, metrics, applied = result
    names, rows = comparison_rows(summary_of(sc, metrics, applied), metrics)
    assert names == ["mrc", "single-path"]
    table = dict(rows)
    assert list(table) == [
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
    ]
    assert table["step P50 / P99 / P100 (ms)"][1] == "700 / never / never"
    assert table["step P100/P50"][1] == "never"
    assert table["failover (ms)"][1] == "never"
    assert table["retransmits"][0] == "6 (nack 5, timeout 1)"
    assert table["trims"] == ["12", "0"]
    # 600 kB in 3 s and in 2 s: 1.6 and 2.4 Mbps; single-path reported no flows.
    assert table["per-flow goodput mean / min (Mbps)"] == ["2.0 / 1.6 (2 flows)", "—"]
    assert table["delivered"][0] == "all" and "missing" in table["delivered"][1]
    assert table["expectations"][0].startswith("pass")
    assert table["expectations"][1].startswith("FAIL")


def test_report_has_table_timeline_health_and_plots(result, tmp_path):
    sc, metrics, applied = result
    (tmp_path / "goodput.png").write_bytes(b"png")
    s = summary_of(sc, metrics, applied)
    path = write_report(
        tmp_path,
        s,
        scenario=sc,
        metrics=metrics,
        plots={"Goodput over time": tmp_path / "goodput.png"},
    )
    text = path.read_text()
    assert text.startswith("# allreduce-under-failure\n")
    assert "|  | mrc | single-path |" in text
    assert "blackhole spine1–leaf2 (leaf2→spine1 only)" in text
    assert "| 1 | 1.0012 | 1.2 |" in text  # applied 1.2 ms late
    assert "not applied" in text
    assert "## Emulation health" in text and "42%" in text
    assert "![Goodput over time](goodput.png)" in text
    assert KERNEL_DROPS_BANNER not in text
    assert "**FAIL**" in text  # single-path misses its expectations


def test_report_links_svg_and_pdf_plots(result, tmp_path):
    """--plot-format: an SVG is shown like a PNG; a PDF, which Markdown cannot show, is linked."""
    sc, metrics, applied = result
    text = write_report(
        tmp_path,
        summary_of(sc, metrics, applied),
        scenario=sc,
        metrics=metrics,
        plots={"Goodput over time": tmp_path / "goodput.svg",
               "Switch ports (mrc): queues, trims and drops": tmp_path / "ports_mrc.pdf"},
    ).read_text()  # fmt: skip
    assert "![Goodput over time](goodput.svg)" in text
    assert "[Switch ports (mrc): queues, trims and drops (PDF)](ports_mrc.pdf)" in text
    assert "![Switch ports (mrc)" not in text


def test_kernel_drops_make_the_report_loud(result):
    sc, metrics, applied = result
    text = render_report(summary_of(sc, metrics, applied, drops=37), scenario=sc)
    banner = next(line for line in text.splitlines() if KERNEL_DROPS_BANNER in line)
    assert banner.startswith("> **") and "37 packets" in banner
    assert text.index(KERNEL_DROPS_BANNER) < text.index("## Side by side"), "before any number"
    assert KERNEL_DROPS_BANNER in format_comparison_plain(
        summary_of(sc, metrics, applied, drops=37)
    )


def test_report_from_summary_alone(result):
    """An old results folder has summary.json only: the report still renders."""
    sc, metrics, applied = result
    text = render_report(summary_of(sc, metrics, applied))
    assert "| failover (ms) |" in text and "not measured" in text


def test_plain_and_rich_tables(result):
    sc, metrics, applied = result
    s = summary_of(sc, metrics, applied)
    plain = format_comparison_plain(s, metrics)
    lines = plain.splitlines()
    assert lines[0].split() == ["mrc", "single-path"]
    assert set(lines[1]) == {"-", " "}
    buf = io.StringIO()
    print_comparison(s, metrics, file=buf)  # not a tty: plain
    assert buf.getvalue() == plain + "\n"
    buf = io.StringIO()
    print_comparison(s, metrics, file=buf, rich_output=True)
    out = buf.getvalue()
    assert "mrc" in out and "single-path" in out and "never" in out


def test_csvs(result, tmp_path):
    sc, metrics, applied = result
    paths = write_timeseries_csv(tmp_path, metrics)
    assert [p.name for p in paths] == ["goodput.csv", "step_times.csv", "flows.csv"]
    rows = list(csv.reader(paths[0].open()))
    assert rows[0] == ["time_s", "transport", "flow", "src", "dst", "goodput_mbps"]
    assert len(rows) == 1 + 2 * 600  # long form: one row per bin per transport
    assert rows[1][:5] == ["0", "mrc", "all", "", ""] and rows[601][:3] == [
        "0",
        "single-path",
        "all",
    ]
    steps = list(csv.reader(paths[1].open()))
    assert steps[0] == ["transport", "step", "step_ms", "finished"]
    assert ["single-path", "0", "700.000", "1"] in steps
    assert ["single-path", "1", "", "0"] in steps  # no word in the numeric column
    flows = list(csv.reader(paths[2].open()))
    assert flows[0][:3] == ["transport", "src", "dst"]
    assert flows[1] == ["mrc", "h1", "h2", "600000", "600000", "0", "3", "1.6", "3000", "1", "5"]


def test_summary_json_round_trips_strictly(result, tmp_path):
    sc, metrics, applied = result
    s = summary_of(sc, metrics, applied)
    path = write_summary(tmp_path, s)
    assert json.loads(path.read_text()) == s
    with pytest.raises(ValueError):
        write_summary(tmp_path, {**s, "seed": float("nan")})


def test_the_verdict_opens_the_report_and_skipped_transports_are_named(result):
    sc, metrics, applied = result
    s = summary_of(sc, metrics, applied)
    s["emulation"] |= {"valid": False, "invalid_reasons": ["mrc: CPU saturated (99% of all cores)"],
                       "time_dilation": 20.0}  # fmt: skip
    s["transports"]["mrc"]["emulation"] = {
        "valid": False, "time_dilation": 20.0, "switch_late_us_p99": 900.0,
        "endpoint_late_us_p99": 10.0, "real_s": 3.0,
        "limits": {"switch_late_us": 606.0, "endpoint_late_us": 1323.0},
    }  # fmt: skip
    s["skipped"] = {"tcp": "kernel transport: runs in real time only"}
    text = render_report(s, scenario=sc)
    first = text.index("> **INVALID RUN** (time dilation 20): mrc: CPU saturated")
    assert first < text.index("## Side by side"), "before any number"
    assert "- **tcp not run**: kernel transport: runs in real time only." in text
    assert "| mrc | **INVALID** | 20 | 900 / 606 | 10 / 1.32e+03 | 3 |" in text
    s["emulation"] |= {"valid": True, "invalid_reasons": [], "real_s": 3.0, "virtual_s": 0.15}
    assert "> Valid run: the emulator kept up at time dilation 20" in render_report(s)

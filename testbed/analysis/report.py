"""What a person reads after a run: report.md, the CSV data behind it, and the terminal table.

Everything is rendered from `summary.json` (so an old results folder can be re-reported), plus,
when the runner has them, the richer `TransportMetrics` -- they say *why* a number is missing
(a failover that never recovered versus a failure that hit no traffic). Transports are columns,
metrics are rows: the side-by-side comparison is the point of `testbed compare`.
"""

from __future__ import annotations

import csv
import json
import os
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table

from contracts.sizes import format_size
from testbed.analysis.metrics import BIN_S, TransportMetrics
from testbed.scenario import FAILURE_ACTIONS, Scenario

KERNEL_DROPS_BANNER = "WARNING: EMULATION OVERLOADED"


def _num(value: float | None, fmt: str = ".1f", none: str = "—") -> str:
    return none if value is None else format(value, fmt)


def _ms(value: float) -> str:
    """Milliseconds as read at any time scale: whole ms on a slow fabric, 3 significant
    digits below 10 ms (a 10 Gbps fabric's stalls are tens of microseconds)."""
    return f"{value:.0f}" if value >= 10 or value == 0 else f"{value:.3g}"


def _failover_cell(
    entry: Mapping[str, Any], metrics: TransportMetrics | None, had_failure: bool
) -> str:
    if entry.get("failover_ms") is not None:
        return _ms(entry["failover_ms"])
    if metrics is not None:
        return {
            "not-recovered": "never",
            "not-exercised": "not exercised",
            "no-failure": "—",
        }.get(metrics.failover.status, "—")
    return "not measured" if had_failure else "—"


def _step_cell(value: float | None, pct: Mapping[str, Any]) -> str:
    if value is None:
        return "never" if pct.get("p50") is not None else "—"
    return _ms(value)  # a 10 Gbps fabric's steps are fractions of a millisecond


def comparison_rows(
    summary: Mapping[str, Any], metrics: Mapping[str, TransportMetrics] | None = None
) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """(transport names, [(row label, one cell per transport)]) for every table we print."""
    metrics = metrics or {}
    names = list(summary["transports"])
    had_failure = any(e["action"] in FAILURE_ACTIONS for e in summary.get("events", []))
    rows: dict[str, list[str]] = {}
    for name in names:
        e = summary["transports"][name]
        m = metrics.get(name)
        pct = e.get("step_time_ms") or {}
        bottleneck = e.get("bottleneck_mbps") or 0
        frac = f" ({e['goodput_mbps'] / bottleneck:.0%})" if bottleneck else ""
        delivered = e["delivered_bytes"]
        lost = e.get("lost_bytes", 0)
        checks = e["expectations"]["checks"]
        failed = [c["name"] for c in checks if not c["passed"]]
        if not checks:
            verdict = "none set"
        elif failed:
            verdict = f"FAIL ({len(checks) - len(failed)}/{len(checks)}): {', '.join(failed)}"
        else:
            verdict = f"pass ({len(checks)}/{len(checks)})"
        p50, p100 = pct.get("p50"), pct.get("p100")
        if p50 and p100:
            ratio = f"{p100 / p50:.2f}"
        else:
            ratio = "never" if p50 is not None else "—"
        retx = e.get("retransmits") or {}
        retx_cell = str(sum(retx.values()))
        if retx:
            retx_cell += " (" + ", ".join(f"{k} {v}" for k, v in sorted(retx.items())) + ")"
        rates = [f["goodput_mbps"] for f in e.get("flows") or []]
        flow_cell = (
            f"{statistics.fmean(rates):.1f} / {min(rates):.1f} ({len(rates)} flows)"
            if rates
            else "—"
        )
        cells = {
            "goodput (Mbps)": f"{e['goodput_mbps']:.1f}{frac}",
            "per-flow goodput mean / min (Mbps)": flow_cell,
            "delivered": (
                "all" if lost == 0 else f"{format_size(delivered)}, {format_size(lost)} missing"
            )
            + (f"; {e['qp_errors']} QP(s) failed (retries spent)" if e.get("qp_errors") else ""),
            "max stall (ms)": "—" if e.get("max_stall_ms") is None else _ms(e["max_stall_ms"]),
            "failover (ms)": _failover_cell(e, m, had_failure),
            "step P50 / P99 / P100 (ms)": " / ".join(
                _step_cell(pct.get(k), pct) for k in ("p50", "p99", "p100")
            ),
            "step P100/P50": ratio,
            "retransmits": retx_cell,
            "trims": str(e.get("trims", 0)),
            "expectations": verdict,
        }
        if any(x.get("trace") for x in summary["transports"].values()):
            cells["iterations held by"] = _held_by_cell(e.get("trace"))
        for label, cell in cells.items():
            rows.setdefault(label, []).append(cell)
    return names, list(rows.items())


def _held_by_cell(trace: Mapping[str, Any] | None) -> str:
    """What held a trace's iterations back, counted (summary.json's `trace.iterations`), and
    the slowest iteration's collective (and link) or straggler:
    "compute 6, network 2; slowest: mlp1.wg.allreduce (link leaf2-spine1)"."""
    if not trace or not trace.get("iterations"):
        return "—"
    its = trace["iterations"]
    counts: dict[str, int] = {}
    for it in its:
        counts[it["held_by"]] = counts.get(it["held_by"], 0) + 1
    worst = max(its, key=lambda it: it["ms"])
    why = {
        "network": f"{worst.get('link_collective') or worst.get('waited_for')}"
        + (f" (link {worst['link']})" if worst.get("link") else ""),
        "straggler": f"rank {worst.get('straggler_rank')} late",
        "compute": "compute",
    }[worst["held_by"]]
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + f"; slowest: {why}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    def esc(cell: str) -> str:
        return str(cell).replace("|", "\\|")

    lines = ["| " + " | ".join(esc(h) for h in header) + " |"]
    lines.append("|" + "|".join("---" for _ in header) + "|")
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _event_text(e: Mapping[str, Any]) -> str:
    """``loss leaf1–spine1 1.5% (leaf1→spine1 only)`` from a summary.json event."""
    parts = [str(e["action"])]
    if "link" in e:
        parts.append("–".join(e["link"]))
    if "node" in e:
        parts.append(str(e["node"]))
    if "plane" in e:
        parts.append(f"plane {e['plane']}")
    for key, unit in (
        ("percent", "%"),
        ("mbps", " Mbps"),
        ("period_ms", " ms period"),
        ("count", " cycles"),
    ):
        if key in e:
            parts.append(f"{e[key]:g}{unit}")
    if "direction" in e:
        parts.append(f"({'→'.join(e['direction'])} only)")
    return " ".join(parts)


def _measured(x: float | None, spec: str) -> str:
    """A verdict input as the report shows it: an input not measured says so."""
    return "not measured" if x is None else format(x, spec)


def _limit(emu: Mapping[str, Any], key: str) -> str:
    value = emu.get("limits", {}).get(key)
    return "—" if value is None else f"{value:.3g}"


def validity_notes(summary: Mapping[str, Any]) -> list[tuple[str, str]]:
    """What opens a run's report, as (kind, Markdown text): a kernel-drops warning ("drops")
    if any, then the validity verdict ("valid", "invalid" or "none")."""
    emu = summary.get("emulation", {})
    drops = emu.get("kernel_drops", 0)
    notes = []
    if drops:
        notes.append(
            (
                "drops",
                f"**{KERNEL_DROPS_BANNER}: the kernel dropped {drops} packets** that switch or "
                "endpoint processes did not read in time. Losses, stalls and failover times below "
                "may be the machine's, not the protocol's: lower `link_mbps` or the workload and "
                "run again before drawing conclusions.",
            )
        )
    if emu.get("valid") is False:
        notes.append(
            (
                "invalid",
                f"**INVALID RUN** (time dilation {emu.get('time_dilation', 1):g}): "
                + "; ".join(emu.get("invalid_reasons", []))
                + ". The emulator did not keep up with the fabric: the numbers below are the "
                "machine's, not the network's (docs/fidelity.md).",
            )
        )
    elif emu.get("valid") is True:
        notes.append(
            (
                "valid",
                f"Valid run: the emulator kept up at time dilation "
                f"{emu.get('time_dilation', 1):g} ({emu.get('real_s', 0):g} s of wall time for "
                f"{emu.get('virtual_s', 0):g} s of virtual time); every time below is virtual.",
            )
        )
    else:
        notes.append(
            (
                "none",
                "**NO VERDICT**: this summary carries no validity verdict, so its numbers count "
                "as an invalid run's (docs/fidelity.md).",
            )
        )
    return notes


def render_report(
    summary: Mapping[str, Any],
    *,
    scenario: Scenario | None = None,
    metrics: Mapping[str, TransportMetrics] | None = None,
    plots: Mapping[str, str | Path] | None = None,
    out_dir: str | Path | None = None,
) -> str:
    """The text of report.md. `plots` maps a caption to a plot's path (PNG, SVG or PDF; made
    relative to out_dir)."""
    out: list[str] = [f"# {summary['scenario']}", ""]
    if scenario is not None and scenario.description.strip():
        out += [scenario.description.strip(), ""]
    for _, note in validity_notes(summary):
        out += [f"> {note}", ""]
    topo = summary.get("topology", {})
    facts = [
        f"- started {summary.get('started', '?')}, seed {summary.get('seed')}",
        "- topology: " + ", ".join(f"{k} {v}" for k, v in topo.items() if k in _TOPOLOGY_FACTS),
    ]
    if scenario is not None:
        w = scenario.workload.model_dump()
        kind = w.pop("kind")
        wl = ", ".join(
            f"{k} {format_size(v) if k == 'bytes' else v}" for k, v in w.items() if v is not None
        )
        facts.append(f"- workload: {kind} ({wl}); duration {scenario.duration_s:g} s")
    out += facts + [""]

    names, rows = comparison_rows(summary, metrics)
    out += ["## Side by side", "", markdown_table(["", *names], [[lab, *c] for lab, c in rows]), ""]
    for t, why in summary.get("skipped", {}).items():
        out += [f"- **{t} not run**: {why}."]
    if summary.get("skipped"):
        out += [""]
    out += [
        "goodput: delivered bytes over the active period (first post to last completion), in "
        "parentheses as a share of the ideal-multipath bottleneck; max stall: longest time with "
        "data outstanding and nothing delivered; failover: from the failure until goodput is "
        "back at 90% of its pre-failure level (see docs/scenario-format.md).",
        "",
    ]

    out += ["## Expectations", ""]
    checks = expectation_rows(summary)
    if checks:
        out += [markdown_table(EXPECTATION_HEADER, checks), ""]
    else:
        out += ["The scenario sets no expectations.", ""]

    out += ["## Timeline as applied", ""]
    events = timeline_rows(summary)
    if events:
        out += [markdown_table(TIMELINE_HEADER, events), ""]
    else:
        out += ["No events: the fabric stayed healthy.", ""]

    out += ["## Emulation health", ""]
    verdicts = health_rows(summary)
    if verdicts:
        out += [markdown_table(HEALTH_HEADER, verdicts), ""]
    out += [
        markdown_table(LOAD_HEADER, [load_row(summary)]),
        "",
        "Kernel drops are packets lost because the emulator was CPU-bound, not because the "
        "emulated network dropped them; a trustworthy run has none.",
        "",
    ]

    captures = {
        t: e["capture"] for t, e in summary.get("transports", {}).items() if e.get("capture")
    }
    if captures:
        out += ["## Packet captures", ""]
        cap_rows = [
            [t, f"`{f['file']}`", str(f["written"]), str(f["not_written"])]
            for t, c in captures.items()
            for f in c["files"]
        ]
        out += [markdown_table(["transport", "file", "frames", "not written"], cap_rows), ""]
        first = next(iter(captures.values()))
        out += [
            f"Written by the switches, stamped with virtual time (the run's t = 0 is "
            f"{first['t0_virtual_s']:.9f} s on the pcap clock); {first['snaplen']} bytes kept "
            f"of each frame, direction {first['direction']}. Frames past a file's cap "
            f"({first['max_mb']:g} MB) are counted, not written. Decode MRC headers with "
            "`tshark -X lua_script:endpoint/mrc.lua -r FILE` (docs/wire-format.md).",
            "",
        ]

    if plots:
        out += ["## Plots", ""]
        for caption, path in plots.items():
            rel = os.path.relpath(path, out_dir) if out_dir is not None else str(path)
            link = Path(rel).as_posix()
            # A PDF is no image to a Markdown viewer: it gets a link; PNG and SVG are shown.
            shown = (
                f"[{caption} (PDF)]({link})" if link.endswith(".pdf") else f"![{caption}]({link})"
            )
            out += [f"### {caption}", "", shown, ""]
    return "\n".join(out).rstrip() + "\n"


EXPECTATION_HEADER = ["transport", "check", "limit", "value", ""]
TIMELINE_HEADER = ["at (s)", "applied at (s)", "late (ms)", "event"]
HEALTH_HEADER = [
    "transport",
    "verdict",
    "time dilation",
    "switch late P99 / limit (µs)",
    "endpoint timer late P99 / limit (µs)",
    "wall time (s)",
]
LOAD_HEADER = [
    "CPU use (all cores)",
    "of it other processes + steal",
    "timer jitter P99 (µs)",
    "kernel drops",
]
"""The headers of report.md's tables below the side-by-side one (report.html shows the same);
their rows mark what needs attention in Markdown bold (`**FAIL**`)."""


def expectation_rows(summary: Mapping[str, Any]) -> list[list[str]]:
    """One row per expectation check per transport (EXPECTATION_HEADER)."""
    rows = []
    for name, entry in summary["transports"].items():
        for c in entry["expectations"]["checks"]:
            value = "—" if c["value"] is None else c["value"]
            rows.append(
                [
                    name,
                    c["name"],
                    str(c["limit"]),
                    str(value),
                    "pass" if c["passed"] else "**FAIL**",
                ]
            )
    return rows


def timeline_rows(summary: Mapping[str, Any]) -> list[list[str]]:
    """The events as applied (TIMELINE_HEADER): when asked for, when done, how late."""
    rows = []
    for e in summary.get("events", []):
        applied = e.get("applied_at")
        late = "—" if applied is None else f"{(applied - e['at']) * 1000:.1f}"
        rows.append(
            [
                f"{e['at']:g}",
                "not applied" if applied is None else f"{applied:.4f}",
                late,
                _event_text(e),
            ]
        )
    return rows


def health_rows(summary: Mapping[str, Any]) -> list[list[str]]:
    """Each judged transport's validity verdict and its inputs (HEALTH_HEADER)."""
    return [
        [
            t,
            "valid" if e["emulation"].get("valid") else "**INVALID**",
            f"{e['emulation'].get('time_dilation', 1):g}",
            f"{_measured(e['emulation'].get('switch_late_us_p99'), '.3g')} / "
            f"{_limit(e['emulation'], 'switch_late_us')}",
            f"{_measured(e['emulation'].get('endpoint_late_us_p99'), '.3g')} / "
            f"{_limit(e['emulation'], 'endpoint_late_us')}",
            f"{e['emulation'].get('real_s', 0):g}",
        ]
        for t, e in summary.get("transports", {}).items()
        if "valid" in e.get("emulation", {})
    ]


def load_row(summary: Mapping[str, Any]) -> list[str]:
    """The machine's load during the run (LOAD_HEADER)."""
    emu = summary.get("emulation", {})
    drops = emu.get("kernel_drops", 0)
    # The busiest transport's run: what the rest of the machine took (machine_load).
    elsewhere = [
        (t["emulation"]["foreign_cpu"], t["emulation"].get("steal_cpu") or 0.0)
        for t in summary.get("transports", {}).values()
        if isinstance(t.get("emulation"), Mapping) and t["emulation"].get("foreign_cpu") is not None
    ]
    foreign, steal = max(elsewhere, key=sum) if elsewhere else (None, None)
    return [
        f"{emu.get('cpu_util', 0):.0%}",
        "not measured" if foreign is None else f"{foreign:.0%} + {steal:.0%}",
        f"{_measured(emu.get('timer_jitter_us_p99'), '.0f')}",
        f"**{drops}**" if drops else "0",
    ]


_TOPOLOGY_FACTS = (
    "spines",
    "leaves",
    "hosts_per_leaf",
    "planes",
    "link_mbps",
    "delay_us",
    "queue_kb",
    "trimming",
    "trim_bytes",
    "mtu",
)


def write_report(
    out_dir: str | Path,
    summary: Mapping[str, Any],
    *,
    scenario: Scenario | None = None,
    metrics: Mapping[str, TransportMetrics] | None = None,
    plots: Mapping[str, str | Path] | None = None,
) -> Path:
    """Write out_dir/report.md and return its path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "report.md"
    path.write_text(
        render_report(summary, scenario=scenario, metrics=metrics, plots=plots, out_dir=out_dir),
        encoding="utf-8",
    )
    return path


def write_summary(out_dir: str | Path, summary: Mapping[str, Any]) -> Path:
    """out_dir/summary.json as strict JSON (a NaN or infinity is a bug, not a value to write)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "summary.json"
    path.write_text(json.dumps(summary, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    return path


GOODPUT_CSV_COLUMNS = ("time_s", "transport", "flow", "src", "dst", "goodput_mbps")
STEPS_CSV_COLUMNS = ("transport", "step", "step_ms", "finished")
FLOWS_CSV_COLUMNS = (
    "transport", "src", "dst", "bytes", "acked_bytes", "start_s", "end_s", "goodput_mbps",
    "fct_ms", "finished", "retransmits",
)  # fmt: skip
"""The CSV headers (docs/results.md documents every column; `testbed.results` reads them)."""


def _cell(value: float | None, fmt: str = ".9g") -> str:
    """A number, or nothing: numeric columns never hold words (a flag column says why)."""
    return "" if value is None else format(value, fmt)


def write_timeseries_csv(
    out_dir: str | Path, metrics: Mapping[str, TransportMetrics]
) -> list[Path]:
    """goodput.csv, step_times.csv and flows.csv, in long form (one row per observation), for
    re-plotting, for pandas (`testbed.results.load`) and for comparing per-flow figures with a
    simulator. Numeric columns hold numbers or nothing, never words: a step or flow that never
    finished has an empty `step_ms` / `fct_ms` / `end_s` and `finished` 0.

    goodput.csv: one row per bin per transport (`flow` "all": what the metrics are computed
    from) and, when the harness saw them, per bin per flow (`flow` "h1->h3", `src`, `dst`)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    path = out_dir / "goodput.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(GOODPUT_CSV_COLUMNS)
        for n, m in metrics.items():
            times = m.bin_times or [k * BIN_S for k in range(len(m.goodput_bins))]
            series = [("all", "", "", m.goodput_bins)]
            for flow, bins in m.flow_bins.items():
                src, _, dst = flow.partition("->")
                series.append((flow, src, dst, bins))
            for flow, src, dst, bins in series:
                for t, v in zip(times, bins, strict=False):
                    w.writerow([f"{t:.9g}", n, flow, src, dst, f"{v:.3f}"])
    written.append(path)
    if any(m.step_ms or m.steps_unfinished for m in metrics.values()):
        path = out_dir / "step_times.csv"
        with path.open("w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(STEPS_CSV_COLUMNS)
            for n, m in metrics.items():
                for i, v in enumerate(m.step_ms):
                    w.writerow([n, i, f"{v:.3f}", 1])
                for j in range(m.steps_unfinished):  # no number for a step that never ended
                    w.writerow([n, len(m.step_ms) + j, "", 0])
        written.append(path)
    if any(m.flows for m in metrics.values()):
        path = out_dir / "flows.csv"
        with path.open("w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(FLOWS_CSV_COLUMNS)
            for n, m in metrics.items():
                for f in m.flows:
                    fct = f["fct_ms"]
                    w.writerow([n, f["src"], f["dst"], f["bytes"], _cell(f.get("acked_bytes")),
                                _cell(f.get("start_s")), _cell(f.get("end_s")),
                                _cell(f["goodput_mbps"]), _cell(fct), int(fct is not None),
                                sum(f["retransmits"].values())])  # fmt: skip
        written.append(path)
    return written


def format_comparison_plain(
    summary: Mapping[str, Any], metrics: Mapping[str, TransportMetrics] | None = None
) -> str:
    """The side-by-side table as aligned plain text (CI logs, pipes)."""
    names, rows = comparison_rows(summary, metrics)
    header = ["", *names]
    body = [[label, *cells] for label, cells in rows]
    widths = [max(len(str(r[i])) for r in [header, *body]) for i in range(len(header))]
    lines = [
        "  ".join(str(c).ljust(widths[i]) for i, c in enumerate(r)).rstrip()
        for r in [header, *body]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    drops = summary.get("emulation", {}).get("kernel_drops", 0)
    if drops:
        lines.append(
            f"{KERNEL_DROPS_BANNER}: {drops} kernel drops; numbers may reflect the machine"
        )
    return "\n".join(lines)


def print_comparison(
    summary: Mapping[str, Any],
    metrics: Mapping[str, TransportMetrics] | None = None,
    *,
    file: TextIO | None = None,
    rich_output: bool | None = None,
) -> None:
    """Print the side-by-side table: a rich table on a terminal, plain text otherwise."""
    file = file or sys.stdout
    if rich_output is None:
        rich_output = file.isatty()
    if not rich_output:
        print(format_comparison_plain(summary, metrics), file=file)
        return

    names, rows = comparison_rows(summary, metrics)
    table = Table(title=f"{summary['scenario']}", title_justify="left")
    table.add_column("")
    for n in names:
        table.add_column(n, justify="right")
    for label, cells in rows:
        styled = [f"[bold red]{c}[/]" if c.startswith("FAIL") or c == "never" else c for c in cells]
        table.add_row(label, *styled)
    console = Console(file=file)
    console.print(table)
    drops = summary.get("emulation", {}).get("kernel_drops", 0)
    if drops:
        console.print(
            f"[bold white on red] {KERNEL_DROPS_BANNER}: the kernel dropped {drops} packets; "
            "numbers may reflect the machine, not the protocol [/]"
        )

"""A lab check's outcome: each check's result, the report with its exit code, and their text
forms (the terminal's, ``results.md`` in the lab's results folder, `testbed lab list`'s).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from testbed.labs.definition import LABS_DIR, Lab, LabError

# Exit codes of `testbed lab check`.
EXIT_PASSED = 0
EXIT_FAILED = 1
EXIT_INCOMPLETE = 3  # every unit check passed, but the scenario part needs root and was skipped
NEEDS_ROOT = "it needs root (network namespaces): run it with sudo, or pass --unit-only"


@dataclass
class CheckResult:
    stage: str  # "unit" | "scenario"
    name: str
    status: str  # "PASS" | "FAIL" | "SKIP"
    detail: str = ""  # why it failed (one line), or what was measured
    hint: str | None = None


@dataclass
class LabReport:
    lab: Lab
    code_dir: Path
    results_dir: Path
    results: list[CheckResult] = field(default_factory=list)
    scenario_skipped: str | None = None  # why the scenario part did not run
    results_folders: list[Path] = field(default_factory=list)

    @property
    def failed(self) -> list[CheckResult]:
        return [r for r in self.results if r.status == "FAIL"]

    @property
    def exit_code(self) -> int:
        if self.failed:
            return EXIT_FAILED
        if self.scenario_skipped == NEEDS_ROOT:
            return EXIT_INCOMPLETE
        return EXIT_PASSED


def cwd_relative(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def format_report(report: LabReport) -> str:
    lines = []
    width = max((len(r.name) for r in report.results), default=10)
    width = min(width, 72)
    for r in report.results:
        shown = r.detail and (r.status != "PASS" or r.stage == "scenario")
        detail = f"  {r.detail}" if shown else ""
        lines.append(f"  {r.status:4}  {r.stage:8}  {r.name:<{width}}{detail}".rstrip())
        if r.status == "FAIL":
            lines.append(
                f"        hint: {r.hint or 'read the failing assertion: testbed lab check N -v'}"
            )
    if report.scenario_skipped and report.lab.scenarios:
        names = ", ".join(s.path.stem for s in report.lab.scenarios)
        lines.append(f"  SKIP  scenario  {names}: skipped because {report.scenario_skipped}")
    passed = sum(r.status == "PASS" for r in report.results)
    total = sum(r.status != "SKIP" for r in report.results)
    verdict = {EXIT_PASSED: "PASSED", EXIT_FAILED: "FAILED", EXIT_INCOMPLETE: "INCOMPLETE"}[
        report.exit_code
    ]
    lines.append(f"Lab {report.lab.number}: {verdict} ({passed} of {total} checks passed)")
    if report.exit_code == EXIT_INCOMPLETE:
        lines.append("  the unit checks passed; the scenario part still has to run (as root)")
    for folder in report.results_folders:
        lines.append(f"  results: {cwd_relative(folder)}/report.md")
    if report.results_folders:
        lines.append(f"  table:   {cwd_relative(report.results_dir / report.lab.results_table)}")
    return "\n".join(lines)


def write_results_table(report: LabReport) -> Path:
    """``results.md`` in the lab's results folder: what each run measured, and every check."""
    lab = report.lab
    report.results_dir.mkdir(parents=True, exist_ok=True)
    rows = ["| scenario | transport | goodput (Mbps) | max stall (ms) | failover (ms) | trims "
            "| retransmits | passed |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    plots = []
    for folder in report.results_folders:
        summary = json.loads((folder / "summary.json").read_text())
        for t, e in summary.get("transports", {}).items():
            rtx = e.get("retransmits") or {}
            rtx_text = ", ".join(f"{k} {v}" for k, v in sorted(rtx.items())) or "0"
            rows.append(
                f"| {folder.name} | {t} | {_fmt(e.get('goodput_mbps'))} "
                f"| {_fmt(e.get('max_stall_ms'))} | {_fmt(e.get('failover_ms'))} "
                f"| {e.get('trims', 0)} | {rtx_text} "
                f"| {'yes' if e.get('expectations', {}).get('passed') else 'NO'} |"
            )
        plots += [f"- [{p.name}]({folder.name}/{p.name})" for p in sorted(folder.glob("*.png"))]
    checks = [f"- {r.status} {r.stage}: {r.name}" + (f" -- {r.detail}" if r.detail else "")
              for r in report.results]  # fmt: skip
    text = "\n".join(
        [
            f"# Lab {lab.number}: {lab.title} -- results",
            "",
            f"Code under test: `{cwd_relative(report.code_dir)}`.",
            "",
            *rows,
            "",
            "## Plots",
            "",
            *(plots or ["(none)"]),
            "",
            "## Checks",
            "",
            *checks,
            "",
        ]
    )
    path = report.results_dir / lab.results_table
    path.write_text(text)
    return path


def _fmt(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


def format_list(labs: list[Lab | LabError]) -> str:
    lines = []
    for lab in labs:
        if isinstance(lab, LabError):
            lines.append(f"  ?  (broken) {lab}")
            continue
        files = ", ".join(lab.student_files) or "no code to write"
        scen = ", ".join(s.path.stem for s in lab.scenarios) or "-"
        lines.append(f"{lab.number:>3}  {lab.title}")
        lines.append(f"     {cwd_relative(lab.dir)}/  you write: {files}; scenarios: {scen}")
    return "\n".join(lines) if lines else f"no labs under {LABS_DIR}"

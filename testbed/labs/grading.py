"""Teaching labs (`labs/`): find them, grade a student's code, plug it into real runs.

A lab is a folder ``labs/lab<N>-<slug>/`` with a README, a ``lab.yaml`` (see
`definition.load_lab` for the keys), pytest checks in ``checks/`` that need no root, optional
student files and optional scenario files; its solutions are in ``labs/solutions/lab<N>/``
under the same file names.

`check_lab` grades in two stages, the second only if the first passed:

1. the checks run in a pytest subprocess with ``TESTBED_LAB_CODE`` naming the folder that holds
   the code under test (the lab folder, or the solutions folder); a check gets the student's
   module with `load_student`;
2. each of the lab's scenarios runs (``testbed run --quick``) on a fabric of its own, with the
   student's files plugged into the switch and endpoint processes through the environment
   (``plug_in``: e.g. ``TESTBED_TRIM_DECISION=<code>/trim_decision.py``), its expectations
   and the lab's ``require`` lines judged on summary.json; the results folders (summary.json,
   report.md, plots) and a table of everything (``results.md``) go to ``labs/<lab>/results/``
   (see `definition.default_results_dir`: ``./results/lab<N>/`` for the labs of an installed
   wheel).

The labs are found through importlib.resources (contracts.project.shipped): the checkout's
``labs/``, or the copy an installed wheel carries in site-packages.

Every check is reported PASS/FAIL (or SKIP) with, for a failure, the lab's hint for it.

Reading lab.yaml and finding the labs is `testbed.labs.definition`; the report, its exit code
and its text forms are `testbed.labs.report`; this module grades.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from contracts.plugins import load_plugin
from testbed.analysis.validity import is_valid
from testbed.labs.definition import REPO, REQUIRE_RE, Lab, LabError, LabScenario
from testbed.labs.report import (
    NEEDS_ROOT,
    CheckResult,
    LabReport,
    cwd_relative,
    write_results_table,
)
from testbed.scenario import load_scenario

LAB_CODE_ENV = "TESTBED_LAB_CODE"

UNIT_TIMEOUT_S = 300.0
SCENARIO_TIMEOUT_S = 300.0
SCENARIO_ATTEMPTS = 3  # a failed scenario is run again while the emulator measurably fell behind
# A run whose timers were this late (p99), or whose kernel dropped packets, measured the
# machine rather than the student's code: if it also failed a check, it runs again (up to
# SCENARIO_ATTEMPTS runs in all).
UNHEALTHY_JITTER_US = 5000.0

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    ">": lambda a, b: a > b,
    "<": lambda a, b: a < b,
}


# ----- the student's code ----------------------------------------------------------------------

_fresh = itertools.count()


def load_student(name: str) -> ModuleType:
    """The student's module ``$TESTBED_LAB_CODE/<name>.py``, executed afresh on every call."""
    code = os.environ.get(LAB_CODE_ENV)
    if not code:
        raise LabError(f"{LAB_CODE_ENV} is not set: run the checks with `testbed lab check N`")
    path = Path(code) / (name if name.endswith(".py") else f"{name}.py")
    if not path.is_file():
        raise LabError(f"{LAB_CODE_ENV}={code}: no file {path.name}")
    mod_name = f"lab_student_{path.stem}_{next(_fresh)}"
    # registered: dataclasses and pickling look the module up by name
    return load_plugin(path, mod_name, register=True)


# ----- grading ---------------------------------------------------------------------------------


def _one_line(text: str, limit: int = 160) -> str:
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    line = lines[0] if lines else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def code_dir_for(lab: Lab, solution: bool = False, code: Path | None = None) -> Path:
    """Where the code under test is: `code`, the solutions folder, or the lab folder."""
    d = code.resolve() if code is not None else lab.solution_dir if solution else lab.dir
    missing = [f for f in lab.student_files if not (d / f).is_file()]
    if missing:
        raise LabError(f"lab {lab.number}: {d} has no {', '.join(missing)}")
    return d


def run_unit_checks(
    lab: Lab, code_dir: Path, verbose: bool = False, out: Callable[[str], None] = print
) -> list[CheckResult]:
    """pytest on the lab's checks/ with the code under test named by ``TESTBED_LAB_CODE``."""
    checks = lab.dir / "checks"
    if not checks.is_dir():
        return []
    env = os.environ | {
        LAB_CODE_ENV: str(code_dir),
        "PYTHONPATH": str(REPO)
        + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else ""),
        "PYTHONDONTWRITEBYTECODE": "1",  # no __pycache__ in the student's folder
    }
    with tempfile.TemporaryDirectory(prefix="tb-lab-") as tmp:
        xml = Path(tmp) / "junit.xml"
        cmd = [
            sys.executable, "-m", "pytest", str(checks), "-q", "-p", "no:cacheprovider",
            "--import-mode=importlib", f"--junitxml={xml}", "-o", "junit_family=xunit1",
        ]  # fmt: skip
        try:
            proc = subprocess.run(
                cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=UNIT_TIMEOUT_S
            )
        except subprocess.TimeoutExpired:
            return [
                CheckResult(
                    "unit", "checks", "FAIL", f"timed out after {UNIT_TIMEOUT_S:g}s",
                    "an endless loop? run `testbed lab check N -v` to see which test hangs",
                )
            ]  # fmt: skip
        if verbose:
            out(proc.stdout.rstrip())
            if proc.stderr.strip():
                out(proc.stderr.rstrip())
        if not xml.is_file():
            return [CheckResult("unit", "checks", "FAIL", _one_line(proc.stderr or proc.stdout))]
        results = _group_cases(_parse_junit(xml))
    if not results:
        tail = _one_line(
            (proc.stdout or "").strip().splitlines()[-1] if proc.stdout.strip() else ""
        )
        results = [CheckResult("unit", "checks", "FAIL", tail or "no checks ran")]
    for r in results:
        if r.status == "FAIL":
            r.hint = lab.hint_for(r.name)
    return results


def _parse_junit(xml: Path) -> list[CheckResult]:
    results = []
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = case.get("name", "?")
        status, detail = "PASS", ""
        for tag in ("failure", "error"):
            el = case.find(tag)
            if el is not None:
                status = "FAIL"
                detail = _one_line(el.get("message") or el.text or tag)
                if tag == "error":  # setup/collection: the exception is the last "E  " line
                    raised = [
                        ln[1:].strip() for ln in (el.text or "").splitlines() if ln[:1] == "E"
                    ]
                    detail = _one_line(raised[-1]) if raised else detail
        skipped = case.find("skipped")
        if status == "PASS" and skipped is not None:
            status, detail = "SKIP", _one_line(skipped.get("message") or "")
        if not case.get("classname") and name.startswith(("labs.", "labs/")):
            name = "collecting the checks"  # an import error in a check file
        results.append(CheckResult("unit", name, status, detail))
    return results


def _group_cases(cases: list[CheckResult]) -> list[CheckResult]:
    """One result per test function: its parametrized cases folded, the first failure shown."""
    groups: dict[str, list[CheckResult]] = {}
    for c in cases:
        groups.setdefault(c.name.split("[", 1)[0], []).append(c)
    out = []
    for base, members in groups.items():
        if len(members) == 1:
            out.append(CheckResult(members[0].stage, base, members[0].status, members[0].detail))
            continue
        failed = [m for m in members if m.status == "FAIL"]
        if failed:
            first = failed[0]
            case = first.name[len(base) :]
            detail = f"{len(failed)} of {len(members)} cases failed, e.g. {case}: {first.detail}"
            out.append(CheckResult("unit", base, "FAIL", detail))
        elif all(m.status == "SKIP" for m in members):
            out.append(CheckResult("unit", base, "SKIP", members[0].detail))
        else:
            out.append(CheckResult("unit", base, "PASS", f"{len(members)} cases"))
    return out


def _summary_value(entry: dict, dotted: str) -> float:
    """A number from a transport's summary entry; a missing key counts as 0 (no RTOs...)."""
    value: object = entry
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return 0.0
        value = value[part]
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, dict):  # e.g. "retransmits": their total
        return float(sum(v for v in value.values() if isinstance(v, int | float)))
    return 0.0


def endpoint_counters(folder: Path, transport: str) -> dict[str, float]:
    """The endpoints' final per-connection counters of one run, summed over connections.

    From the JSON-lines metrics the runner keeps (``raw/<transport>/endpoints/*.jsonl``): the
    last ``counters`` record of each connection, its ``counters`` plus its numeric top-level
    fields (``evs_failed``, ``cwnd``...).
    """
    last: dict[tuple, dict] = {}
    for path in sorted((folder / "raw" / transport / "endpoints").glob("*.jsonl")):
        for line in path.read_text(errors="replace").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and rec.get("type") == "counters":
                last[(path.stem, rec.get("peer"), rec.get("qp"))] = rec
    total: dict[str, float] = {}
    for rec in last.values():
        fields = dict(rec.get("counters") or {})
        fields.update({k: v for k, v in rec.items() if k not in ("t", "job", "qp", "counters")})
        for k, v in fields.items():
            if isinstance(v, int | float) and not isinstance(v, bool):
                total[k] = total.get(k, 0) + v
    return total


def judge_summary(
    sc: LabScenario,
    name: str,
    summary: dict,
    transports: list[str],
    folder: Path | None = None,
) -> list[CheckResult]:
    """The scenario's own expectations and the lab's ``require`` lines, per transport.

    A ``require`` key is a dotted path into the transport's summary.json entry, or
    ``endpoint.<counter>`` for the endpoints' own counters (`endpoint_counters`).
    """
    results = []
    for t in transports:
        entry = summary.get("transports", {}).get(t)
        if entry is None:
            results.append(CheckResult("scenario", f"{name} [{t}]", "FAIL", "no result for it"))
            continue
        for c in entry.get("expectations", {}).get("checks", []):
            ok = bool(c.get("passed"))
            results.append(
                CheckResult(
                    "scenario", f"{name} [{t}] {c['name']}", "PASS" if ok else "FAIL",
                    f"{c.get('value')} (limit {c.get('limit')})",
                )
            )  # fmt: skip
        for key, bound in sc.require.items():
            m = REQUIRE_RE.match(bound)
            assert m is not None  # checked by load_lab
            if key.startswith("endpoint."):
                counters = endpoint_counters(folder, t) if folder is not None else {}
                value = float(counters.get(key.split(".", 1)[1], 0))
            else:
                value = _summary_value(entry, key)
            ok = _OPS[m.group(1)](value, float(m.group(2)))
            results.append(
                CheckResult(
                    "scenario", f"{name} [{t}] {key}", "PASS" if ok else "FAIL",
                    f"{value:g} (required {bound.strip()})",
                )
            )  # fmt: skip
    return results


def run_scenarios(
    lab: Lab, code_dir: Path, results_dir: Path, out: Callable[[str], None] = print
) -> tuple[list[CheckResult], list[Path]]:
    """Each lab scenario, short, on its own fabric, with the student's files plugged in."""

    results: list[CheckResult] = []
    folders: list[Path] = []
    env = os.environ | {var: str(code_dir / f) for var, f in lab.plug_in.items()}
    env["PYTHONPATH"] = str(REPO)
    for sc in lab.scenarios:
        scenario = load_scenario(sc.path)
        transports = list(sc.transports or scenario.transports)
        dest = results_dir / scenario.name
        cmd = [sys.executable, "-m", "testbed.cli", "run", str(sc.path),
               "--transport", ",".join(transports), "--out", str(dest)]  # fmt: skip
        if sc.quick:
            cmd.append("--quick")
        plugged = " ".join(f"{v}={code_dir / f}" for v, f in lab.plug_in.items())
        out(f"  running {scenario.name} ({', '.join(transports)}{', quick' if sc.quick else ''})"
            + (f" with {plugged}" if plugged else ""))  # fmt: skip
        for attempt in range(1, SCENARIO_ATTEMPTS + 1):
            checks, summary = _run_one(cmd, dest, sc, scenario.name, transports, env)
            unhealthy = _unhealthy(summary)
            failed = any(c.status == "FAIL" for c in checks)
            if attempt < SCENARIO_ATTEMPTS and unhealthy and failed:
                out(f"  {scenario.name}: the emulator fell behind ({unhealthy}): running it again")
                continue
            break
        if unhealthy:
            out(f"  {scenario.name}: warning: the emulator fell behind ({unhealthy})")
        if summary is not None:
            folders.append(dest)
        results += checks
    for r in results:
        if r.status == "FAIL":
            r.hint = lab.hint_for(r.name)
    return results, folders


def _run_one(
    cmd: list[str], dest: Path, sc: LabScenario, name: str, transports: list[str], env: dict
) -> tuple[list[CheckResult], dict | None]:
    """One `testbed run` into a fresh `dest`; its checks, and its summary (None if it has none)."""
    if dest.exists():
        shutil.rmtree(dest)
    try:
        proc = subprocess.run(
            cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=SCENARIO_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        return [
            CheckResult("scenario", name, "FAIL", f"timed out after {SCENARIO_TIMEOUT_S:g}s")
        ], None
    summary_path = dest / "summary.json"
    if not summary_path.is_file():
        why = _one_line("\n".join(reversed((proc.stderr or proc.stdout).splitlines())))
        return [CheckResult("scenario", name, "FAIL", why or f"exit {proc.returncode}")], None
    summary = json.loads(summary_path.read_text())
    return judge_summary(sc, name, summary, transports, dest), summary


def _unhealthy(summary: dict | None) -> str:
    """Why a run's emulation cannot be trusted, or "": its verdict first (a run with no
    verdict is not trusted either: testbed.analysis.validity.is_valid), then the figures."""
    emu = (summary or {}).get("emulation") or {}
    why = []
    if not is_valid(emu):
        why.append("invalid run: " + ("; ".join(emu.get("invalid_reasons", [])) or "no verdict"))
    if (emu.get("kernel_drops") or 0) > 0:
        why.append(f"{emu['kernel_drops']} kernel drops")
    if (emu.get("timer_jitter_us_p99") or 0) > UNHEALTHY_JITTER_US:
        why.append(f"timers {emu['timer_jitter_us_p99'] / 1000:.0f} ms late (p99)")
    return ", ".join(why)


def check_lab(
    lab: Lab,
    *,
    solution: bool = False,
    code: Path | None = None,
    unit_only: bool = False,
    verbose: bool = False,
    results_dir: Path | None = None,
    out: Callable[[str], None] = print,
) -> LabReport:
    """Grade the code in `code` (default: the lab folder; `solution`: labs/solutions/labN)."""
    code_dir = code_dir_for(lab, solution, code)
    report = LabReport(lab, code_dir, (results_dir or lab.results_dir).resolve())
    out(f"Lab {lab.number}: {lab.title}")
    out(f"  code under test: {cwd_relative(code_dir)}")
    report.results += run_unit_checks(lab, code_dir, verbose=verbose, out=out)
    if not lab.scenarios:
        return report
    if report.failed:
        report.scenario_skipped = "the unit checks failed"
    elif unit_only:
        report.scenario_skipped = "--unit-only"
    elif os.geteuid() != 0:
        report.scenario_skipped = NEEDS_ROOT
    else:
        results, folders = run_scenarios(lab, code_dir, report.results_dir, out=out)
        report.results += results
        report.results_folders = folders
        write_results_table(report)
    return report

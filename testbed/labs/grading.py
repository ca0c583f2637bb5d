"""Teaching labs (`labs/`): find them, grade a student's code, plug it into real runs.

A lab is a folder ``labs/lab<N>-<slug>/`` with a README, a ``lab.yaml`` (see `load_lab` for
the keys), pytest checks in ``checks/`` that need no root, optional student files and optional
scenario files; its solutions are in ``labs/solutions/lab<N>/`` under the same file names.

`check_lab` grades in two stages, the second only if the first passed:

1. the checks run in a pytest subprocess with ``TESTBED_LAB_CODE`` naming the folder that holds
   the code under test (the lab folder, or the solutions folder); a check gets the student's
   module with `load_student`;
2. each of the lab's scenarios runs (``testbed run --quick``) on a fabric of its own, with the
   student's files plugged into the switch and endpoint processes through the environment
   (``plug_in``: e.g. ``TESTBED_TRIM_DECISION=<code>/trim_decision.py``), its expectations
   and the lab's ``require`` lines judged on summary.json; the results folders (summary.json,
   report.md, plots) and a table of everything (``results.md``) go to ``labs/<lab>/results/``
   (see `default_results_dir`: ``./results/lab<N>/`` for the labs of an installed wheel).

The labs are found through importlib.resources (contracts.project.shipped): the checkout's
``labs/``, or the copy an installed wheel carries in site-packages.

Every check is reported PASS/FAIL (or SKIP) with, for a failure, the lab's hint for it.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import yaml

from contracts.plugins import load_plugin
from contracts.project import checkout, shipped
from testbed.analysis.validity import is_valid
from testbed.scenario import TRANSPORTS, ScenarioError, load_scenario
from testbed.scenario.catalog import SCENARIO_DIR

# The folder holding the project's packages (the checkout, or site-packages when installed):
# child processes get it on PYTHONPATH, and lab.yaml's "scenarios/..." paths are relative to it.
REPO = Path(__file__).resolve().parents[2]
LABS_DIR = shipped("labs")
SOLUTIONS_DIR = LABS_DIR / "solutions"
LAB_CODE_ENV = "TESTBED_LAB_CODE"
KNOWN_PLUG_INS = ("TESTBED_TRIM_DECISION", "TESTBED_EV_POLICY")

UNIT_TIMEOUT_S = 300.0
SCENARIO_TIMEOUT_S = 300.0
SCENARIO_ATTEMPTS = 3  # a failed scenario is run again while the emulator measurably fell behind
# A run whose timers were this late (p99), or whose kernel dropped packets, measured the
# machine rather than the student's code: if it also failed a check, it runs again (up to
# SCENARIO_ATTEMPTS runs in all).
UNHEALTHY_JITTER_US = 5000.0

# Exit codes of `testbed lab check`.
EXIT_PASSED = 0
EXIT_FAILED = 1
EXIT_INCOMPLETE = 3  # every unit check passed, but the scenario part needs root and was skipped
NEEDS_ROOT = "it needs root (network namespaces): run it with sudo, or pass --unit-only"

_LAB_DIR_RE = re.compile(r"^lab(\d+)-[a-z0-9][a-z0-9-]*$")
_REQUIRE_RE = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*(-?[0-9.]+(?:e-?\d+)?)\s*$")
_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    ">": lambda a, b: a > b,
    "<": lambda a, b: a < b,
}


class LabError(ValueError):
    """A lab cannot be found or its lab.yaml is invalid; `str()` names the file and key."""


# ----- lab.yaml --------------------------------------------------------------------------------


@dataclass(frozen=True)
class LabScenario:
    file: str  # as written in lab.yaml
    path: Path
    transports: tuple[str, ...] | None  # None: the scenario's own list
    quick: bool = True
    require: dict[str, str] = field(default_factory=dict)  # "trims" -> ">= 1"


@dataclass(frozen=True)
class Lab:
    number: int
    title: str
    dir: Path
    student_files: tuple[str, ...]
    scenarios: tuple[LabScenario, ...]
    hints: dict[str, str]
    plug_in: dict[str, str]  # environment variable -> student file
    results_dir: Path
    results_table: str = "results.md"

    @property
    def solution_dir(self) -> Path:
        return SOLUTIONS_DIR / f"lab{self.number}"

    def hint_for(self, check_name: str) -> str | None:
        """The hint whose key is the longest substring of `check_name`."""
        keys = sorted((k for k in self.hints if k in check_name), key=len, reverse=True)
        return self.hints[keys[0]] if keys else None


def _fail(path: Path, key: str, why: str) -> LabError:
    return LabError(f"{path}: {key}: {why}" if key else f"{path}: {why}")


def default_results_dir(lab_dir: Path, number: int, name: str = "results") -> Path:
    """Where a lab's results go unless ``--out`` says: ``<lab folder>/<name>``, except for the
    labs an installed wheel carries, whose folder is inside site-packages, no place for a
    student's runs: there ``./results/lab<N>/`` in the current directory."""
    installed = checkout() is None and lab_dir.resolve().is_relative_to(LABS_DIR.resolve())
    return Path.cwd() / "results" / f"lab{number}" if installed else lab_dir / name


def load_lab(lab_dir: Path) -> Lab:
    """Read and check ``lab_dir/lab.yaml``.

    Keys: ``number`` (int, as in the folder name), ``title``, ``student_files`` (file names in
    the lab folder), ``scenarios`` (each ``{file, transports, quick, require}``: ``file``
    relative to the lab folder or the repository, or a shipped scenario's name; ``require``
    maps a dotted key of the transport's summary.json entry to ``">= 1"``-style bounds),
    ``hints`` (substring of a check's name -> one-line hint), optional ``plug_in`` (environment
    variable -> student file, set for every process of a scenario run) and ``results``
    (a folder name, or ``{dir, table}``; other keys are free-form notes).
    """
    path = lab_dir / "lab.yaml"
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise _fail(path, "", f"cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise _fail(path, "", f"not YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise _fail(path, "", "must be a mapping")
    allowed = {"number", "title", "student_files", "scenarios", "hints", "plug_in", "results"}
    for key in data:
        if key not in allowed:
            raise _fail(path, str(key), f"unknown key (known: {', '.join(sorted(allowed))})")
    number = data.get("number")
    if not isinstance(number, int) or isinstance(number, bool):
        raise _fail(path, "number", "must be an integer")
    m = _LAB_DIR_RE.match(lab_dir.name)
    if not m or int(m.group(1)) != number:
        raise _fail(path, "number", f"{number} does not match the folder name {lab_dir.name!r}")
    title = data.get("title")
    if not isinstance(title, str) or not title.strip():
        raise _fail(path, "title", "must be a non-empty string")

    student_files = data.get("student_files") or []
    if not isinstance(student_files, list) or not all(isinstance(f, str) for f in student_files):
        raise _fail(path, "student_files", "must be a list of file names")
    for i, name in enumerate(student_files):
        if "/" in name or not (lab_dir / name).is_file():
            raise _fail(path, f"student_files[{i}]", f"no file {name!r} in {lab_dir}")

    scenarios = []
    raw = data.get("scenarios") or []
    if not isinstance(raw, list):
        raise _fail(path, "scenarios", "must be a list")
    for i, entry in enumerate(raw):
        scenarios.append(_lab_scenario(path, f"scenarios[{i}]", lab_dir, entry))

    hints = data.get("hints") or {}
    if not isinstance(hints, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in hints.items()
    ):
        raise _fail(path, "hints", "must map a check-name substring to a one-line hint")

    plug_in = data.get("plug_in") or {}
    if not isinstance(plug_in, dict):
        raise _fail(path, "plug_in", "must map an environment variable to a student file")
    for var, name in plug_in.items():
        if var not in KNOWN_PLUG_INS:
            raise _fail(path, f"plug_in.{var}", f"unknown (known: {', '.join(KNOWN_PLUG_INS)})")
        if name not in student_files:
            raise _fail(path, f"plug_in.{var}", f"{name!r} is not one of student_files")

    results = data.get("results")
    results_dir, table = "results", "results.md"
    if isinstance(results, str):
        results_dir = results
    elif isinstance(results, dict):
        results_dir = str(results.get("dir", results_dir))
        table = str(results.get("table", table))
    elif results is not None:
        raise _fail(path, "results", "must be a folder name or a mapping {dir, table}")
    if Path(results_dir).is_absolute() or ".." in Path(results_dir).parts:
        raise _fail(path, "results", "the results folder must be inside the lab folder")
    return Lab(
        number=number,
        title=title.strip(),
        dir=lab_dir,
        student_files=tuple(student_files),
        scenarios=tuple(scenarios),
        hints=dict(hints),
        plug_in=dict(plug_in),
        results_dir=default_results_dir(lab_dir, number, results_dir),
        results_table=table,
    )


def _lab_scenario(path: Path, key: str, lab_dir: Path, entry: object) -> LabScenario:

    if not isinstance(entry, dict):
        raise _fail(path, key, "must be a mapping {file, transports, quick, require}")
    for k in entry:
        if k not in ("file", "transports", "quick", "require"):
            raise _fail(path, f"{key}.{k}", "unknown key (known: file, transports, quick, require)")
    file = entry.get("file")
    if not isinstance(file, str):
        raise _fail(path, f"{key}.file", "must be a path")
    candidates = [lab_dir / file, REPO / file, SCENARIO_DIR / f"{file}.yaml"]
    found = next((c for c in candidates if c.is_file()), None)
    if found is None:
        raise _fail(path, f"{key}.file", f"no scenario {file!r} (in the lab folder or the repo)")
    try:
        load_scenario(found)
    except ScenarioError as exc:
        raise _fail(path, f"{key}.file", str(exc)) from None
    transports = entry.get("transports")
    if transports is not None:
        if isinstance(transports, str):
            transports = [transports]
        if not isinstance(transports, list) or not transports:
            raise _fail(path, f"{key}.transports", "must be a non-empty list")
        for t in transports:
            if t not in TRANSPORTS:
                raise _fail(path, f"{key}.transports", f"unknown transport {t!r}")
        transports = tuple(transports)
    quick = entry.get("quick", True)
    if not isinstance(quick, bool):
        raise _fail(path, f"{key}.quick", "must be true or false")
    require = entry.get("require") or {}
    if not isinstance(require, dict):
        raise _fail(path, f"{key}.require", "must map a summary key to a bound like '>= 1'")
    for k, bound in require.items():
        if not isinstance(bound, str) or not _REQUIRE_RE.match(bound):
            raise _fail(path, f"{key}.require.{k}", f"{bound!r} is not like '>= 1' or '== 0'")
    return LabScenario(file, found, transports, quick, {str(k): v for k, v in require.items()})


def lab_dirs(root: Path | None = None) -> list[Path]:
    """Every ``lab<N>-<slug>`` folder under `root` (default ``labs/``), by number."""
    root = root or LABS_DIR
    found = [(m, d) for d in root.glob("lab*") if d.is_dir() and (m := _LAB_DIR_RE.match(d.name))]
    return [d for m, d in sorted(found, key=lambda md: (int(md[0].group(1)), md[1].name))]


def list_labs(root: Path | None = None) -> list[Lab | LabError]:
    """Every lab, by number; a broken lab.yaml is listed as its error, not hiding the others."""
    out: list[Lab | LabError] = []
    for d in lab_dirs(root):
        try:
            out.append(load_lab(d))
        except LabError as exc:
            out.append(exc)
    return out


def find_lab(number: int, root: Path | None = None) -> Lab:
    root = root or LABS_DIR
    dirs = [d for d in root.glob(f"lab{number}-*") if d.is_dir() and _LAB_DIR_RE.match(d.name)]
    if not dirs:
        known = ", ".join(
            str(int(m.group(1)))
            for d in sorted(root.glob("lab*"))
            if (m := _LAB_DIR_RE.match(d.name))
        )
        raise LabError(f"no lab {number} under {root} (labs: {known or 'none'})")
    if len(dirs) > 1:
        raise LabError(f"lab {number}: several folders: {', '.join(d.name for d in dirs)}")
    return load_lab(dirs[0])


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
            m = _REQUIRE_RE.match(bound)
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
    out(f"  code under test: {_rel(code_dir)}")
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


def _rel(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


# ----- output ----------------------------------------------------------------------------------


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
        lines.append(f"  results: {_rel(folder)}/report.md")
    if report.results_folders:
        lines.append(f"  table:   {_rel(report.results_dir / report.lab.results_table)}")
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
            f"Code under test: `{_rel(report.code_dir)}`.",
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
        lines.append(f"     {_rel(lab.dir)}/  you write: {files}; scenarios: {scen}")
    return "\n".join(lines) if lines else f"no labs under {LABS_DIR}"

"""A lab's definition: its ``lab.yaml`` read and checked into a `Lab`, and the labs found
under ``labs/`` (the checkout's, or the copy an installed wheel carries).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from contracts.project import checkout, shipped
from testbed.scenario import TRANSPORTS, ScenarioError, load_scenario
from testbed.scenario.catalog import SCENARIO_DIR

# The folder holding the project's packages (the checkout, or site-packages when installed):
# child processes get it on PYTHONPATH, and lab.yaml's "scenarios/..." paths are relative to it.
REPO = Path(__file__).resolve().parents[2]
LABS_DIR = shipped("labs")
SOLUTIONS_DIR = LABS_DIR / "solutions"
KNOWN_PLUG_INS = ("TESTBED_TRIM_DECISION", "TESTBED_EV_POLICY")

_LAB_DIR_RE = re.compile(r"^lab(\d+)-[a-z0-9][a-z0-9-]*$")
REQUIRE_RE = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*(-?[0-9.]+(?:e-?\d+)?)\s*$")


class LabError(ValueError):
    """A lab cannot be found or its lab.yaml is invalid; `str()` names the file and key."""


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
        if not isinstance(bound, str) or not REQUIRE_RE.match(bound):
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

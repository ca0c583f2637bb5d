"""The shipped scenarios (`scenarios/*.yaml`), for `testbed list` and for running one by name.

A broken shipped file must not hide the others from `testbed list`, so each entry carries its
validation error instead of raising; `find_scenario` lets `testbed run link-failure` work
without a path. The folder is found through importlib.resources (contracts.project.shipped),
so an installed wheel lists its own copy from any directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from contracts.project import shipped
from testbed.scenario.validation import ScenarioError, load_scenario

SCENARIO_DIR = shipped("scenarios")  # the checkout's scenarios/, or the installed package's


@dataclass(frozen=True)
class CatalogEntry:
    name: str
    path: Path
    description: str  # first line of the scenario's description ("" if it does not load)
    error: str | None = None  # the ScenarioError message when the file is invalid


def list_scenarios(directory: str | Path | None = None) -> list[CatalogEntry]:
    """Every *.yaml in `directory` (default: the shipped ones), sorted by name, validated."""
    root = Path(directory) if directory is not None else SCENARIO_DIR
    entries = []
    for path in sorted(root.glob("*.yaml")):
        try:
            sc = load_scenario(path)
        except ScenarioError as exc:
            entries.append(CatalogEntry(path.stem, path, "", str(exc)))
            continue
        first_line = next(iter(sc.description.strip().splitlines()), "")
        entries.append(CatalogEntry(sc.name, path, first_line))
    return entries


def find_scenario(name_or_path: str, directory: str | Path | None = None) -> Path:
    """A path as given if it exists, else the shipped scenario of that name; ScenarioError else."""
    candidate = Path(name_or_path)
    if candidate.is_file():
        return candidate
    root = Path(directory) if directory is not None else SCENARIO_DIR
    for path in (root / f"{name_or_path}.yaml", root / name_or_path):
        if path.is_file():
            return path
    known = ", ".join(p.stem for p in sorted(root.glob("*.yaml")))
    raise ScenarioError(
        "", f"no scenario file or shipped scenario named {name_or_path!r} (shipped: {known})"
    )


def format_catalog(entries: list[CatalogEntry]) -> str:
    """The `testbed list` text: one aligned line per scenario, errors flagged."""
    width = max((len(e.name) for e in entries), default=0)
    lines = []
    for e in entries:
        text = e.description if e.error is None else f"INVALID: {e.error}"
        lines.append(f"{e.name.ljust(width)}  {text}")
    return "\n".join(lines)

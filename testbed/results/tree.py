"""Where the leaf runs of a results folder are, and who each one is (run, seed, rep, sweep point).

A results folder is a single run folder, a repeat folder (`rep-01/`, `rep-02/`, ... beside an
aggregate summary) or a sweep folder (`points/<k>-<slug>/`, each a run or a repeat folder). A
*leaf* is a folder whose summary.json has `raw/` beside it -- or, for a folder whose raw data
were deleted, a summary.json with no other summary.json below it -- so one walk finds the runs of
all three shapes (docs/results.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class ResultsError(ValueError):
    """A folder that is not a results folder, or a file in it that cannot be read."""


@dataclass(frozen=True)
class Leaf:
    """One leaf run folder and its identity, as the frames' identity columns carry it."""

    path: Path
    run: str  # relative to the loaded folder, "." for the folder itself
    summary: dict[str, Any]
    seed: int | None
    rep: int | None
    sweep_point: dict[str, Any] = field(default_factory=dict)


def find_leaves(root: str | Path) -> list[Leaf]:
    """Every leaf run folder under `root` (itself included), in path order."""
    root = Path(root)
    if not root.is_dir():
        raise ResultsError(f"{root}: no such results folder")
    summaries = sorted(
        p for p in root.rglob("summary.json") if "raw" not in p.relative_to(root).parts[:-1]
    )
    if not summaries:
        raise ResultsError(
            f"{root}: no summary.json in this folder or below it (not a results folder)"
        )
    folders = [p.parent for p in summaries]
    leaves = []
    for folder in folders:
        below = any(f != folder and folder in f.parents for f in folders)
        if (folder / "raw").is_dir() or not below:
            leaves.append(_leaf(root, folder))
    return leaves


def _leaf(root: Path, folder: Path) -> Leaf:
    path = folder / "summary.json"
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ResultsError(f"{path}: unreadable summary ({exc})") from None
    if not isinstance(summary, dict) or not isinstance(summary.get("transports"), dict):
        raise ResultsError(f"{path}: transports: missing (not a run's summary.json)")
    rep = summary.get("repetition") or {}
    seed = rep.get("seed", summary.get("seed"))
    rel = folder.relative_to(root).as_posix()
    return Leaf(
        path=folder,
        run=rel if rel else ".",
        summary=summary,
        seed=None if seed is None else int(seed),
        rep=None if rep.get("index") is None else int(rep["index"]),
        sweep_point=dict(summary.get("sweep_point") or {}),
    )

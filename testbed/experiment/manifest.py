"""An experiment expanded into its runs: one manifest line per sweep point x seed x transport.

A cluster runs an experiment as a job array whose task N runs line N of the manifest and
nothing else, so a line carries everything its run needs: the scenario resolved (the sweep
point's values set, `--quick` applied, the seed fixed), the transport, whether it is judged,
the tags a local run would add to its summary (repetition, sweep point), and the folder it
writes, which is where the same run of a local repeat or sweep writes (`rep-02/`,
`points/03-percent=2/rep-01/`), so the aggregate reads one layout whatever ran it. A run of
several transports puts each in `<folder>/by-transport/<transport>/`.

Each line has a content hash of its resolved scenario: `--resume` rebuilds the manifest and
refuses to mix runs of a scenario that has since changed, and a result counts as finished only
if it names the same hash. A line's state is a small JSON file under `slurm/state/`, and a run
in progress keeps a `PARTIAL` file in its folder until it has finished: a node that dies
mid-run leaves that mark, and resume clears the folder and runs the line again, so no
half-written result is ever read. Pure: files only, no Slurm, no root.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from testbed.experiment.errors import RunError
from testbed.scenario import Scenario, quick
from testbed.scenario.sweep import sweep_points

SLURM_DIR = "slurm"  # beside the results: manifest, state, logs, the batch script
MANIFEST = "manifest.jsonl"
EXPERIMENT = "experiment.json"
PARTIAL = "PARTIAL"
FINISHED, RUNNING, FAILED = "finished", "running", "failed"


def scenario_hash(scenario: Mapping[str, Any]) -> str:
    """sha256 of the scenario's canonical JSON (sorted keys, no spaces): equal content, equal
    hash, whatever the order the file wrote it in."""
    text = json.dumps(scenario, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class ManifestLine:
    """One run: a resolved scenario, one transport, and the folder it writes."""

    index: int  # its array task id (0-based, the line's number in manifest.jsonl)
    dir: str  # relative to the results folder; "." for a single run of one transport
    transport: str
    judged: bool
    seed: int
    scenario: dict[str, Any]  # resolved: sweep values set, --quick applied, seed fixed
    hash: str
    point: dict[str, Any] | None = None  # {"index", "values", "slug"} in a sweep
    repetition: dict[str, int] | None = None  # {"index", "of", "seed"} when repeated
    group: str = "."  # the folder the run's transports share (dir without by-transport/T)

    @property
    def annotate(self) -> dict[str, Any]:
        """The blocks a local run adds to this run's summary.json (repetitions.py)."""
        tag: dict[str, Any] = {}
        if self.repetition is not None:
            tag["repetition"] = dict(self.repetition)
        if self.point is not None:
            tag["sweep_point"] = dict(self.point["values"])
        return tag

    def label(self) -> str:
        parts = [f"line {self.index}"]
        if self.point is not None:
            parts.append(f"point {self.point['index']}")
        parts += [f"seed {self.seed}", self.transport]
        return " ".join(parts) + f" ({self.dir})"


@dataclass(frozen=True)
class Experiment:
    """What every line shares: how to run and how to aggregate them."""

    name: str
    transports: list[str]
    judged: list[str]
    seeds: list[int]
    repeat: int | None
    sweep: dict[str, list[Any]] | None
    quick: bool
    time_dilation: float | str | None
    plot_format: str
    scenario: dict[str, Any]  # as written (before sweep and --quick): the aggregate's
    lines: list[ManifestLine] = field(default_factory=list)

    @property
    def kind(self) -> str:
        if self.sweep:
            return "sweep"
        return "repeat" if len(self.seeds) > 1 else "single"


def build_manifest(
    sc: Scenario,
    transports: Sequence[str],
    *,
    judged: Sequence[str] | None = None,
    seeds: Sequence[int],
    repeat: int | None = None,
    sweep: Mapping[str, Sequence[Any]] | None = None,
    quick_run: bool = False,
    time_dilation: float | str | None = None,
    plot_format: str = "png",
) -> Experiment:
    """Every run of the experiment, in the order a local run makes them (point, seed,
    transport). Each point is validated here, before anything is submitted."""
    judged_set = set(judged if judged is not None else transports)
    points = sweep_points(sc, sweep) if (sweep or sc.sweep) else []
    lines: list[ManifestLine] = []
    cells: list[tuple[str, dict[str, Any] | None, Scenario]] = []
    if points:
        for p in points:
            point = {"index": p.index, "values": dict(p.values), "slug": p.slug}
            cells.append(
                (f"points/{p.slug}", point, quick(p.scenario) if quick_run else p.scenario)
            )
    else:
        cells.append((".", None, quick(sc) if quick_run else sc))
    for base, point, point_sc in cells:
        for i, seed in enumerate(seeds, start=1):
            group = base if len(seeds) == 1 else _join(base, f"rep-{i:02d}")
            rep = None if len(seeds) == 1 else {"index": i, "of": len(seeds), "seed": seed}
            resolved = point_sc.model_copy(update={"seed": seed, "seeds": None, "sweep": None})
            data = resolved.model_dump(mode="json", exclude_none=True)
            digest = scenario_hash(data)
            for t in transports:
                where = group if len(transports) == 1 else _join(group, f"by-transport/{t}")
                lines.append(
                    ManifestLine(
                        index=len(lines),
                        dir=where,
                        transport=t,
                        judged=t in judged_set,
                        seed=seed,
                        scenario=data,
                        hash=digest,
                        point=point,
                        repetition=rep,
                        group=group,
                    )  # fmt: skip
                )
    return Experiment(
        name=sc.name,
        transports=list(transports),
        judged=[t for t in transports if t in judged_set],
        seeds=list(seeds),
        repeat=repeat,
        sweep={k: list(v) for k, v in sweep.items()} if sweep else None,
        quick=quick_run,
        time_dilation=time_dilation,
        plot_format=plot_format,
        scenario=sc.model_dump(mode="json", exclude_none=True),
        lines=lines,
    )


def _join(base: str, sub: str) -> str:
    return sub if base == "." else f"{base}/{sub}"


# ----- on disk ----------------------------------------------------------------------------------


def write_experiment(out_dir: Path, exp: Experiment) -> Path:
    """slurm/experiment.json (what the lines share) and slurm/manifest.jsonl (a line a run)."""
    where = out_dir / SLURM_DIR
    where.mkdir(parents=True, exist_ok=True)
    head = asdict(exp)
    del head["lines"]
    (where / EXPERIMENT).write_text(json.dumps(head, indent=1) + "\n", encoding="utf-8")
    with (where / MANIFEST).open("w", encoding="utf-8") as fh:
        for line in exp.lines:
            fh.write(json.dumps(asdict(line), sort_keys=True, allow_nan=False) + "\n")
    return where / MANIFEST


def read_experiment(out_dir: Path) -> Experiment:
    where = out_dir / SLURM_DIR
    try:
        head = json.loads((where / EXPERIMENT).read_text(encoding="utf-8"))
        text = (where / MANIFEST).read_text(encoding="utf-8")
    except (OSError, ValueError) as exc:
        raise RunError(f"--resume: {where} holds no readable manifest ({exc})") from None
    lines = [ManifestLine(**json.loads(x)) for x in text.splitlines() if x.strip()]
    return Experiment(**head, lines=lines)


def check_resumable(stored: Experiment, fresh: Experiment) -> None:
    """A resume runs the experiment that was submitted: the same lines, the same hashes."""
    if [(x.dir, x.transport, x.hash) for x in stored.lines] != [
        (x.dir, x.transport, x.hash) for x in fresh.lines
    ]:
        changed = [
            a.label()
            for a, b in zip(stored.lines, fresh.lines, strict=False)
            if (a.dir, a.transport, a.hash) != (b.dir, b.transport, b.hash)
        ]
        what = f"{changed[0]} differs" if changed else "its number of runs differs"
        raise RunError(
            f"--resume: the experiment is not the one submitted to this folder ({what}); "
            "resume with the same scenario and options, or use a new --out"
        )


def state_path(out_dir: Path, line: ManifestLine) -> Path:
    return out_dir / SLURM_DIR / "state" / f"{line.index:05d}.json"


def read_state(out_dir: Path, line: ManifestLine) -> dict[str, Any] | None:
    try:
        data = json.loads(state_path(out_dir, line).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_state(out_dir: Path, line: ManifestLine, state: Mapping[str, Any]) -> None:
    path = state_path(out_dir, line)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{line.index}")
    tmp.write_text(json.dumps({**state, "hash": line.hash}, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)  # atomic: a reader sees the old state or the new, never half


def line_status(out_dir: Path, line: ManifestLine) -> str:
    """finished: its state says so for this very scenario, its folder has no PARTIAL mark and
    its summary.json reads; partial: a run started and did not finish (a mark or a state is
    left); missing: never started."""
    folder = out_dir / line.dir
    state = read_state(out_dir, line)
    marked = (folder / PARTIAL).exists()
    if state is not None and state.get("status") == FINISHED and not marked:
        if state.get("hash") == line.hash and _summary_ok(folder, line.transport):
            return FINISHED
        return "partial"
    return "partial" if marked or state is not None else "missing"


def _summary_ok(folder: Path, transport: str) -> bool:
    try:
        summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return transport in summary.get("transports", {})


def pending(out_dir: Path, lines: Sequence[ManifestLine]) -> list[ManifestLine]:
    """The lines with no valid finished result: what a resume submits again."""
    return [x for x in lines if line_status(out_dir, x) != FINISHED]


def clear_run(out_dir: Path, line: ManifestLine) -> None:
    """Remove what an unfinished run of `line` left (its folder, its state), so that the run
    that replaces it starts clean. A line whose folder is the results folder itself keeps the
    slurm/ folder (the manifest and the other lines' states)."""
    folder = out_dir / line.dir
    if folder.resolve() == out_dir.resolve():
        for entry in folder.iterdir() if folder.is_dir() else ():
            if entry.name == SLURM_DIR:
                continue
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    else:
        shutil.rmtree(folder, ignore_errors=True)
    state_path(out_dir, line).unlink(missing_ok=True)


def array_spec(indices: Sequence[int]) -> str:
    """Slurm's --array list for task ids: runs collapsed (0-3,5,7-8)."""
    if not indices:
        raise ValueError("no task ids")
    ids = sorted(set(indices))
    parts, start, prev = [], ids[0], ids[0]
    for i in [*ids[1:], None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    return ",".join(parts)

"""A results folder as pandas DataFrames in long form: one row per observation, every frame with
the same identity columns, so a single run, a repeat folder and a sweep load alike and concat,
filter and group without reshaping.

    import testbed.results as r
    res = r.load("results/gray-failure-20260101-120000")
    res.goodput[res.goodput.flow == "all"].groupby("transport").goodput_mbps.median()

`load` walks the folder for leaf runs (`tree.find_leaves`), builds each frame from the leaves'
files (`frames`) and gives every column the dtype `schema.FRAMES` fixes; docs/results.md
documents each file and column. `write_parquet` writes the frames beside the CSVs
(``testbed run --format parquet``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from testbed.results import frames as _frames
from testbed.results.schema import FRAME_NAMES, FRAMES, ID_COLUMNS
from testbed.results.tree import Leaf, ResultsError, find_leaves


@dataclass(frozen=True)
class Results(Mapping[str, pd.DataFrame]):
    """The tidy frames of a results folder, as attributes and as a mapping (``res["flows"]``).

    `sweep_keys`: the sweep's dotted keys, one column each in every frame (empty unless the
    folder is, or is inside, a sweep)."""

    root: Path
    goodput: pd.DataFrame
    steps: pd.DataFrame
    flows: pd.DataFrame
    ev_events: pd.DataFrame
    collectives: pd.DataFrame
    switch_counters: pd.DataFrame
    runs: pd.DataFrame
    sweep_keys: tuple[str, ...] = field(default=())

    def __getitem__(self, name: str) -> pd.DataFrame:
        if name not in FRAME_NAMES:
            raise KeyError(f"{name!r}: not a frame (one of {', '.join(FRAME_NAMES)})")
        return getattr(self, name)

    def __iter__(self) -> Iterator[str]:
        return iter(FRAME_NAMES)

    def __len__(self) -> int:
        return len(FRAME_NAMES)


def load(folder: str | Path) -> Results:
    """Every result under `folder` (a run, repeat or sweep folder) as tidy frames.

    Raises ResultsError (one line naming the folder or file) when there is no summary.json in
    or below `folder`, or a file cannot be read; missing optional files give empty frames."""
    root = Path(folder)
    leaves = find_leaves(root)
    keys = list(dict.fromkeys(k for leaf in leaves for k in leaf.sweep_point))
    columns = {k: _sweep_column(k) for k in keys}
    built: dict[str, pd.DataFrame] = {}
    for name in FRAME_NAMES:
        parts = []
        for leaf in leaves:
            df = _frames.BUILDERS[name](leaf)
            if df is not None and not df.empty:
                parts.append(_identify(df, leaf, columns))
        built[name] = _typed(parts, FRAMES[name], columns, leaves)
    return Results(root=root, sweep_keys=tuple(columns.values()), **built)


def write_parquet(folder: str | Path, results: Results | None = None) -> list[Path]:
    """`<frame>.parquet` for every frame of `folder`, written in `folder` itself."""
    folder = Path(folder)
    results = results if results is not None else load(folder)
    paths = []
    for name in FRAME_NAMES:
        path = folder / f"{name}.parquet"
        results[name].to_parquet(path, index=False)
        paths.append(path)
    return paths


def _sweep_column(key: str) -> str:
    """A sweep key's column: the dotted key, unless it would shadow a frame's own column."""
    taken = set(ID_COLUMNS) | {c for cols in FRAMES.values() for c in cols}
    return f"sweep.{key}" if key in taken else key


def _identify(df: pd.DataFrame, leaf: Leaf, columns: Mapping[str, str]) -> pd.DataFrame:
    df = df.copy()
    df["run"] = leaf.run
    df["seed"] = leaf.seed
    df["rep"] = leaf.rep
    for key, col in columns.items():
        df[col] = [leaf.sweep_point.get(key)] * len(df)
    return df


def _typed(
    parts: list[pd.DataFrame],
    own: Mapping[str, str],
    sweep: Mapping[str, str],
    leaves: list[Leaf],
) -> pd.DataFrame:
    """One frame of the identity, sweep and own columns, in that order, with their dtypes."""
    order = [*ID_COLUMNS, *sweep.values(), *own]
    dtypes = {**ID_COLUMNS, **own}
    for key, col in sweep.items():
        dtypes[col] = _sweep_dtype([leaf.sweep_point.get(key) for leaf in leaves])
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=dtypes[c]) for c in order})
    df = pd.concat(parts, ignore_index=True)
    out = {}
    for c in order:
        col = df[c] if c in df.columns else pd.Series([None] * len(df), dtype=object)
        if dtypes[c] == "string":
            col = col.map(_text, na_action="ignore")
        out[c] = col.astype(dtypes[c])
    return pd.DataFrame(out)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def _sweep_dtype(values: list[Any]) -> str:
    """A sweep column's dtype from its values: Int64, float64, boolean, else string."""
    known = [v for v in values if v is not None]
    if known and all(isinstance(v, bool) for v in known):
        return "boolean"
    if known and all(isinstance(v, int) and not isinstance(v, bool) for v in known):
        return "Int64"
    if known and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in known):
        return "float64"
    return "string"


__all__ = ["Results", "ResultsError", "load", "write_parquet"]

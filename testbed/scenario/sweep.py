"""A sweep: one scenario run at every combination of the values some of its keys take.

A claim such as "MRC holds its goodput up to 2 % loss where TCP does not" is a curve, not a
point. A sweep names keys of the scenario by their dotted path (``topology.link_mbps``,
``events[0].percent``, ``transport.evs``) and the values each takes; every combination (the
grid) is a complete scenario of its own, validated like a file before anything is built, so a
value that makes no sense fails the whole sweep at once, naming the key and the value.

A path walks mappings by key and lists by ``[index]``. One shorthand: ``transport.KEY`` sets
KEY on every endpoint transport of the list (a bare name becomes ``{name: NAME, KEY: value}``)
and leaves the kernel's transports (tcp, mptcp) alone, which have no such keys.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from testbed.scenario.key_paths import SweepError, grid, parse_path, set_path
from testbed.scenario.schema import Scenario
from testbed.scenario.validation import sweep_scenarios

__all__ = ["SweepError", "SweepPoint", "grid", "parse_path", "parse_sweep_arg", "set_path",
           "sweep_points"]  # fmt: skip


@dataclass(frozen=True)
class SweepPoint:
    """One combination of the swept values and the scenario it makes."""

    index: int  # 1-based, in grid order (the first key varies slowest)
    values: dict[str, Any]
    scenario: Scenario

    @property
    def slug(self) -> str:
        """A folder name for the point: its index and values (filesystem-safe)."""
        parts = [f"{_short(k)}={_fmt(v)}" for k, v in self.values.items()]
        text = re.sub(r"[^A-Za-z0-9_.=,+-]", "_", ",".join(parts))
        return f"{self.index:02d}-{text}"[:120]


def _short(key: str) -> str:
    return key.rsplit(".", 1)[-1]


def _fmt(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def sweep_points(
    sc: Scenario, sweep: Mapping[str, Sequence[Any]] | None = None
) -> list[SweepPoint]:
    """The scenario of every point of `sweep` (default: the scenario's own `sweep`).

    Each point is `sc` without its sweep, with the point's values set, validated completely;
    a key naming nothing, or a value the scenario refuses, raises a ScenarioError naming
    ``sweep.KEY`` and the value."""
    sweep = sc.sweep if sweep is None else sweep
    if not sweep:
        return []
    return [
        SweepPoint(i, values, point)
        for i, (values, point) in enumerate(sweep_scenarios(sc, sweep), start=1)
    ]


def parse_sweep_arg(text: str) -> dict[str, list[Any]]:
    """``--sweep KEY=V1,V2,...`` -> {KEY: [values]}; numbers become numbers (YAML rules)."""
    import yaml

    key, sep, values = text.partition("=")
    if not sep or not key.strip() or not values.strip():
        raise SweepError(text, "write --sweep KEY=V1,V2,... (e.g. events[0].percent=0,1,2,5)")
    return {key.strip(): [yaml.safe_load(v.strip()) for v in values.split(",")]}

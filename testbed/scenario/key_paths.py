"""Dotted key paths into a scenario mapping (``events[0].percent``): read by sweeps.

Pure and free of validation, so the scenario validator can build a sweep's points without a
cycle between the two (testbed.scenario.sweep runs them; this only writes values).
"""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Mapping, Sequence
from typing import Any

from testbed.scenario.transports import KERNEL_TRANSPORTS

_SEGMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)((?:\[\d+\])*)")


class SweepError(ValueError):
    """A sweep key that names nothing in the scenario, or a value the scenario refuses."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"sweep.{key}: {reason}")
        self.key = key
        self.reason = reason


def parse_path(key: str) -> list[str | int]:
    """``events[0].percent`` -> ['events', 0, 'percent']; a malformed path is a SweepError."""
    steps: list[str | int] = []
    for part in key.split("."):
        m = _SEGMENT.fullmatch(part)
        if not m:
            raise SweepError(key, f"{part!r} is not a key or key[index]")
        steps.append(m.group(1))
        steps.extend(int(i) for i in re.findall(r"\[(\d+)\]", m.group(2)))
    return steps


def set_path(data: dict[str, Any], key: str, value: Any) -> None:
    """Set `key` (a dotted path) in the scenario mapping `data`, in place."""
    steps = parse_path(key)
    if steps[0] == "transport" and len(steps) == 2 and isinstance(steps[1], str):
        _set_on_transports(data, key, steps[1], value)
        return
    node: Any = data
    for i, step in enumerate(steps[:-1]):
        node = _child(node, step, key, steps[: i + 1])
    last = steps[-1]
    if isinstance(last, int):
        if not isinstance(node, list) or last >= len(node):
            raise SweepError(key, f"[{last}]: there is no such item")
        node[last] = value
    elif isinstance(node, dict):
        node[last] = value  # a key the file left to its default is set here; validation judges
    else:
        raise SweepError(key, f"{last!r}: {_where(steps[:-1])} is not a mapping")


def _child(node: Any, step: str | int, key: str, walked: Sequence[str | int]) -> Any:
    if isinstance(step, int):
        if not isinstance(node, list) or step >= len(node):
            raise SweepError(key, f"{_where(walked)}: there is no such item")
        return node[step]
    if not isinstance(node, dict) or step not in node:
        raise SweepError(key, f"{_where(walked)}: the scenario has no such key")
    return node[step]


def _where(steps: Sequence[str | int]) -> str:
    out = ""
    for s in steps:
        out += f"[{s}]" if isinstance(s, int) else (f".{s}" if out else s)
    return out or "the scenario"


def _set_on_transports(data: dict[str, Any], key: str, field: str, value: Any) -> None:
    entries = data.get("transport", ["mrc"])
    entries = [entries] if isinstance(entries, (str, dict)) else list(entries)
    touched = 0
    for i, t in enumerate(entries):
        name = t if isinstance(t, str) else t.get("name")
        if name in KERNEL_TRANSPORTS:
            continue
        entries[i] = {"name": t, field: value} if isinstance(t, str) else {**t, field: value}
        touched += 1
    if not touched:
        raise SweepError(key, "no endpoint transport to set it on (tcp and mptcp have no keys)")
    data["transport"] = entries


def grid(sweep: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of the swept values, the first key varying slowest."""
    keys = list(sweep)
    return [
        dict(zip(keys, combo, strict=True))
        for combo in itertools.product(*(sweep[k] for k in keys))
    ]


def point_data(base: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the scenario mapping `base` with every (path, value) of `values` set."""
    data = copy.deepcopy(dict(base))
    for key, value in values.items():
        set_path(data, key, value)
    return data

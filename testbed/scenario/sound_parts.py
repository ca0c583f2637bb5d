"""What of a scenario is sound when its shape is not, so that its checks of meaning need not wait.

A file with a bad size unit in its workload and a negative `link_mbps` has two independent
mistakes: the topology's range must be reported in the same pass as the unit, not after it is
fixed. So the parts whose shape is right are validated on their own (the wrong ones stood in
for, and named as unsound so that no check reads a stand-in), and a workload or an event whose
only mistakes are in keys no check of meaning reads (`bytes`, `percent`) is still checked for
the names it gives.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from testbed.scenario.random_failures import RandomFailureSpec
from testbed.scenario.schema import EVENT_MODELS, WORKLOAD_MODELS_BY_KIND, Event, Scenario, Workload

# Valid values for the required keys, standing in for a wrong one: never read (`unsound`).
_STAND_INS: dict[str, Any] = {
    "name": "stand-in",
    "topology": {"spines": 1, "leaves": 1, "hosts_per_leaf": 2},
    "workload": {"kind": "alltoall", "bytes": 1},
    "duration_s": 1.0,
}
_LISTS = ("events", "random_failures")  # whose items are sound or not one by one

WORKLOAD_NAME_KEYS = frozenset({"kind", "src", "dst", "srcs", "hosts", "stragglers"})
"""The workload's keys that its host-name check reads."""
EVENT_CHECKED_KEYS = frozenset(
    {"action", "at", "link", "direction", "node", "plane", "period_ms", "count"}
)
"""An event's keys that its checks of time and of names read."""


@dataclass
class SoundParts:
    """A scenario as far as its shape is sound, for the checks of meaning.

    `sc` is the scenario with stand-ins for the top-level keys named in `unsound` (their shape
    is wrong); `workload` and `events` are what the name checks may read: the validated ones,
    or ones built from what was written when only keys those checks do not read are wrong
    (`events` as (index in the file, event)); `random` likewise, validated ones only."""

    sc: Scenario
    unsound: set[str] = field(default_factory=set)
    workload: Workload | None = None
    events: list[tuple[int, Event]] = field(default_factory=list)
    random: list[tuple[int, RandomFailureSpec]] = field(default_factory=list)

    @classmethod
    def whole(cls, sc: Scenario) -> SoundParts:
        events, random = list(enumerate(sc.events)), list(enumerate(sc.random_failures))
        return cls(sc, set(), sc.workload, events, random)


def sound_parts(data: Mapping[str, Any], bad: Iterable[tuple]) -> SoundParts | None:
    """The sound parts of `data`, given the key paths of its shape mistakes (discriminator
    tags stripped: ``("events", 0, "percent")``); None if they are not sound together."""
    unsound: set[str] = set()
    bad_keys: dict[tuple, set[str]] = {}  # per workload or list item: its wrong keys ("": all)
    for loc in bad:
        if not loc:  # the model's own check (`seed` against `seeds`)
            unsound |= {"seed", "seeds"}
            continue
        top = str(loc[0])
        unsound.add(top)
        if top in _LISTS:
            item = loc[:2] if len(loc) > 1 and isinstance(loc[1], int) else loc[:1]
            bad_keys.setdefault(item, set()).add(str(loc[2]) if len(loc) > 2 else "")
        else:
            bad_keys.setdefault(loc[:1], set()).add(str(loc[1]) if len(loc) > 1 else "")
    reduced = {k: v for k, v in data.items() if k not in unsound}
    reduced |= {k: v for k, v in _STAND_INS.items() if k in unsound}
    kept: dict[str, list[int]] = {}
    for key in _LISTS:
        items = data.get(key)
        if key in unsound and (key,) not in bad_keys and isinstance(items, list):
            kept[key] = [i for i in range(len(items)) if (key, i) not in bad_keys]
            reduced[key] = [items[i] for i in kept[key]]
    try:
        sc = Scenario.model_validate(reduced)
    except ValidationError:
        return None  # sound alone, not together: the shape's mistakes are reported alone
    events = list(zip(kept.get("events", range(len(sc.events))), sc.events, strict=True))
    if "events" in kept:
        for item, wrong in bad_keys.items():
            if item[0] != "events" or len(item) != 2:
                continue
            raw = data["events"][item[1]]
            ev = _as_written(EVENT_MODELS, "action", raw, wrong, EVENT_CHECKED_KEYS)
            if ev is not None:
                events.append((item[1], ev))  # type: ignore[arg-type]
        events.sort(key=lambda pair: pair[0])
    workload = sc.workload
    if "workload" in unsound:
        wrong = bad_keys.get(("workload",), {""})
        workload = _as_written(  # type: ignore[assignment]
            WORKLOAD_MODELS_BY_KIND, "kind", data.get("workload"), wrong, WORKLOAD_NAME_KEYS
        )
    rkept = kept.get("random_failures", range(len(sc.random_failures)))
    return SoundParts(
        sc, unsound, workload, events, list(zip(rkept, sc.random_failures, strict=True))
    )


def _as_written(
    models: Mapping[str, type[BaseModel]],
    tag: str,
    raw: Any,
    wrong: set[str],
    checked: frozenset[str],
) -> BaseModel | None:
    """The model `raw`'s tag selects, built from `raw` without validation, when none of the
    keys a check of meaning reads is `wrong` (so those keys hold what validation would);
    else None."""
    name = raw.get(tag) if isinstance(raw, dict) else None
    model = models.get(name) if isinstance(name, str) else None
    if model is None or "" in wrong or wrong & checked:
        return None
    return model.model_construct(**{k: v for k, v in raw.items() if k in model.model_fields})

"""Random failures: a failure process per link, switch or plane, drawn up front from the seed.

Why up front: the draws become ordinary scheduled events (`link-down` at 3.127 s, `link-up` at
3.412 s, ...) merged into the scenario's timeline, so every random failure is applied by the
same code as a scripted one, appears in the run's applied-events log and summary, and is seen
by the failover metrics; and a run can be replayed exactly from its seed.

Each element (a link, a switch, a plane) alternates up and down: up for a time with mean
`mtbf_s`, then down for a time with mean `mttr_s` -- exponential (a memoryless failure process,
the usual reliability model) or `fixed` (exactly those times, after a random phase so that the
elements of one spec do not all fail together). Each element draws from its own RNG, seeded
from (scenario seed, spec index, element), so adding a link to a spec leaves the other links'
schedules as they were.

`failure_events(fabric, specs, seed, duration_s)` is pure (no root, no fabric built): a soak
or a notebook can reuse it to generate the same events.
"""

from __future__ import annotations

import random
import zlib
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from contracts.schema import StrictModel
from topologies import Fabric

LINK_SETS = ("all", "spine-leaf", "host-leaf")
SWITCH_SETS = ("all", "spines", "leaves")
RECOVERY = {
    "link-down": "link-up",
    "blackhole": "heal",
    "switch-down": "switch-up",
    "plane-down": "plane-up",
}
LINK_FAILURES = ("link-down", "blackhole")

_Name = Annotated[str, Field(min_length=1)]
_Pair = Annotated[list[_Name], Field(min_length=2, max_length=2)]


class RandomFailureSpec(StrictModel):
    """One entry of `random_failures:`; exactly one of `links`, `switches`, `planes`."""

    links: Literal[LINK_SETS] | list[_Pair] | None = None  # type: ignore[valid-type]
    switches: Literal[SWITCH_SETS] | list[_Name] | None = None  # type: ignore[valid-type]
    planes: Literal["all"] | list[Annotated[int, Field(ge=1)]] | None = None
    mtbf_s: float = Field(gt=0, allow_inf_nan=False)  # mean time between failures (up time)
    mttr_s: float = Field(gt=0, allow_inf_nan=False)  # mean time to repair (down time)
    # link-down | blackhole for links; switch-down, plane-down (the defaults) otherwise.
    action: Literal["link-down", "blackhole", "switch-down", "plane-down"] | None = None
    distribution: Literal["exponential", "fixed"] = "exponential"
    from_s: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    until_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)  # no new failure after

    @model_validator(mode="after")
    def _one_target_and_its_action(self) -> RandomFailureSpec:
        given = [k for k in ("links", "switches", "planes") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of links, switches, planes"
                + (f" (got {', '.join(given)})" if given else "")
            )
        kind = given[0]
        allowed = LINK_FAILURES if kind == "links" else (self.failure,)
        if self.failure not in allowed:
            raise ValueError(
                f"action: {self.action} does not fail {kind}; use {' or '.join(allowed)}"
            )
        if self.until_s is not None and self.until_s <= self.from_s:
            raise ValueError(f"until_s: {self.until_s:g} is not after from_s {self.from_s:g}")
        return self

    @property
    def kind(self) -> str:
        if self.links is not None:
            return "links"
        return "switches" if self.switches is not None else "planes"

    @property
    def failure(self) -> str:
        """The failure action: `action`, or the default for the kind of target."""
        default = {"links": "link-down", "switches": "switch-down", "planes": "plane-down"}
        return self.action or default[self.kind]


def targets(fabric: Fabric, spec: RandomFailureSpec) -> list[Any]:
    """The elements `spec` fails: [a, b] links, switch names or plane numbers, in the
    fabric's order (names are checked by the scenario's validation, not here)."""
    if spec.links is not None:
        if not isinstance(spec.links, str):
            return [list(pair) for pair in spec.links]
        kinds = {n: node.kind for n, node in fabric.nodes.items()}
        out = []
        for lk in fabric.links:
            ends = {kinds[lk.a], kinds[lk.b]}
            if spec.links == "all" or (
                ends == ({"spine", "leaf"} if spec.links == "spine-leaf" else {"host", "leaf"})
            ):
                out.append([lk.a, lk.b])
        return out
    if spec.switches is not None:
        if not isinstance(spec.switches, str):
            return list(spec.switches)
        want = {"all": ("leaf", "spine"), "spines": ("spine",), "leaves": ("leaf",)}
        return [n for n in fabric.switches() if fabric.nodes[n].kind in want[spec.switches]]
    if spec.planes == "all":
        return list(range(1, fabric.params.planes + 1))
    return list(spec.planes or [])


def _event(at: float, action: str, kind: str, target: Any) -> dict[str, Any]:
    key = {"links": "link", "switches": "node", "planes": "plane"}[kind]
    return {"at": round(at, 6), "action": action, key: target}


def failure_events(
    fabric: Fabric, specs: list[RandomFailureSpec], seed: int, duration_s: float
) -> list[dict[str, Any]]:
    """Every failure and repair the specs draw before `duration_s`, as event mappings of the
    scenario format (`{"at": 2.31, "action": "link-down", "link": ["leaf1", "spine2"]}`),
    sorted by time. A failure starts in [from_s, until_s or the end); its repair follows
    after the drawn down time, unless that is past the end (it then stays failed)."""
    events: list[dict[str, Any]] = []
    for i, spec in enumerate(specs):
        until = duration_s if spec.until_s is None else min(spec.until_s, duration_s)
        fail = spec.failure
        for target in targets(fabric, spec):
            label = "-".join(map(str, target)) if isinstance(target, list) else str(target)
            rng = random.Random(zlib.crc32(f"{seed}:random_failures[{i}]:{label}".encode()))
            t = spec.from_s
            first = True
            while True:
                if spec.distribution == "exponential":
                    up = rng.expovariate(1.0 / spec.mtbf_s)
                    down = rng.expovariate(1.0 / spec.mttr_s)
                else:
                    up = rng.uniform(0.0, spec.mtbf_s) if first else spec.mtbf_s
                    down = spec.mttr_s
                first = False
                t += up
                if t >= until:
                    break
                events.append(_event(t, fail, spec.kind, target))
                t += down
                if round(t, 6) >= duration_s:
                    break
                events.append(_event(t, RECOVERY[fail], spec.kind, target))
    events.sort(key=lambda e: e["at"])
    return events

"""Random failures for `testbed soak`: a seeded schedule of scenario events (pure).

A soak must be hit by failures nobody hand-placed, and the same seed must give the same run.
This is the soak's own small generator: failures arrive as a Poisson process (exponential
gaps of mean `mtbf_s`), each lasts an exponential time of mean `mttr_s`, and each is one of
link-down, blackhole, switch-down or plane-down on a target drawn uniformly. Its output is a
plain list of the scenario format's events (`testbed.scenario.events`), so the generator the
scenario format is getting (MTBF/MTTR per link, issue 20 item 8) can replace it by producing
the same list; nothing downstream knows where the events came from.

**One failure at a time**, repaired before the next starts (at least `min_gap_s` apart), and
on targets whose loss leaves every host pair connected: spine-leaf links, spines, and -- with
two planes or more -- leaves and whole planes (a host keeps its NIC on the other plane). Why:
the soak's claim is "nothing lost, nothing duplicated", and two overlapping failures on a
2-spine fabric can partition it, turning a transport test into a wait for the repair. A
`kill -9` of a switch process (the soak's other failure) is on top of this schedule and may
partition; the soak reports it.

Every failure is repaired no later than `end_s`, so the soak's drain starts on a whole fabric.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from pydantic import TypeAdapter

from testbed.scenario.events import Event
from topologies import Fabric

_EVENT = TypeAdapter(Event)

KINDS = ("link-down", "blackhole", "switch-down", "plane-down")
REPAIR = {"link-down": "link-up", "blackhole": "heal", "switch-down": "switch-up",
          "plane-down": "plane-up"}  # fmt: skip
MIN_FAILURE_S = 0.2  # shorter than this is a glitch, not a failure the transport must ride out


class ScheduleError(ValueError):
    """Rates that cannot make a schedule; the message names the field."""


@dataclass(frozen=True)
class FailureRates:
    """How often failures come and how long they last (virtual seconds), and how the kind is
    drawn (relative weights; a kind the fabric cannot take, e.g. plane-down on one plane, is
    left out)."""

    mtbf_s: float = 15.0
    mttr_s: float = 3.0
    min_gap_s: float = 1.0
    weights: dict[str, float] = field(
        default_factory=lambda: {
            "link-down": 3.0,
            "blackhole": 2.0,
            "switch-down": 2.0,
            "plane-down": 1.0,
        }  # fmt: skip
    )

    def check(self) -> None:
        for name in ("mtbf_s", "mttr_s"):
            if not getattr(self, name) > 0:
                raise ScheduleError(f"{name}: must be more than 0, got {getattr(self, name)!r}")
        if self.min_gap_s < 0:
            raise ScheduleError(f"min_gap_s: must be 0 or more, got {self.min_gap_s!r}")
        for kind, w in self.weights.items():
            if kind not in KINDS:
                raise ScheduleError(f"weights.{kind}: unknown kind (one of {', '.join(KINDS)})")
            if w < 0:
                raise ScheduleError(f"weights.{kind}: must be 0 or more, got {w!r}")


def targets(fab: Fabric) -> dict[str, list]:
    """What each kind of failure may hit on `fab` without disconnecting a host pair."""
    planes = fab.params.planes
    spines = [n for n, node in fab.nodes.items() if node.kind == "spine"]
    leaves = [n for n, node in fab.nodes.items() if node.kind == "leaf"]
    links = [
        [lk.a, lk.b]
        for lk in fab.links
        if fab.nodes[lk.a].kind != "host" and fab.nodes[lk.b].kind != "host"
    ]
    out: dict[str, list] = {"link-down": links, "blackhole": links}
    # One spine down leaves the others when there are two or more per plane; a leaf down cuts
    # its hosts off its plane only, so only where they have another.
    out["switch-down"] = (spines if fab.params.spines > 1 else []) + (leaves if planes > 1 else [])
    if fab.params.spines < 2:
        out["link-down"] = out["blackhole"] = []
    out["plane-down"] = list(range(1, planes + 1)) if planes > 1 else []
    return out


def _event(kind: str, at: float, target) -> Event:
    spec: dict = {"at": round(at, 3), "action": kind}
    if kind in ("link-down", "link-up", "blackhole", "heal"):
        spec["link"] = list(target)
    elif kind in ("switch-down", "switch-up"):
        spec["node"] = target
    else:
        spec["plane"] = target
    return _EVENT.validate_python(spec)


def random_schedule(
    fab: Fabric,
    start_s: float,
    end_s: float,
    seed: int,
    rates: FailureRates | None = None,
) -> list[Event]:
    """Failure and repair events between `start_s` and `end_s` (virtual seconds from the
    workload's start), in time order, the same for the same arguments."""
    rates = rates or FailureRates()
    rates.check()
    if end_s < start_s:
        raise ScheduleError(f"end_s: {end_s!r} is before start_s {start_s!r}")
    rng = random.Random(f"soak-failures:{seed}")
    pool = targets(fab)
    kinds = [k for k in KINDS if pool[k] and rates.weights.get(k, 0) > 0]
    if not kinds:
        return []
    weights = [rates.weights[k] for k in kinds]
    events: list[Event] = []
    t = start_s
    while True:
        t += max(rates.min_gap_s, rng.expovariate(1.0 / rates.mtbf_s))
        if t + MIN_FAILURE_S > end_s:
            return events
        kind = rng.choices(kinds, weights)[0]
        target = rng.choice(pool[kind])
        repair = min(end_s, t + max(MIN_FAILURE_S, rng.expovariate(1.0 / rates.mttr_s)))
        events.append(_event(kind, t, target))
        events.append(_event(REPAIR[kind], repair, target))
        t = repair


def describe_schedule(events: list[Event]) -> str:
    """One line: how many failures of each kind (for the progress output and the report)."""
    counts: dict[str, int] = {}
    for e in events:
        if e.action in KINDS:
            counts[e.action] = counts.get(e.action, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no failures"

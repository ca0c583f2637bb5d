"""The timeline's events of a scenario file: one pydantic model per action, by its `action` tag.

Link events (down, up, blackhole, loss, degrade, flap, heal, impair), switch and plane events;
each knows whether it is a failure, describes itself in one line and gives the keyword
arguments of `testbed.fabric.failures.plan`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, Field, model_validator

from contracts.schema import StrictModel

FAILURE_ACTIONS = frozenset(
    {"link-down", "blackhole", "loss", "degrade", "flap", "switch-down", "plane-down"}
)
RECOVERY_ACTIONS = frozenset({"link-up", "heal", "switch-up", "plane-up"})

NodeName = Annotated[str, Field(min_length=1)]
Pair = Annotated[list[NodeName], Field(min_length=2, max_length=2)]


class _EventBase(StrictModel):
    at: float = Field(ge=0, allow_inf_nan=False)

    @property
    def is_failure(self) -> bool:
        return self.action in FAILURE_ACTIONS  # type: ignore[attr-defined]

    def describe(self) -> str:
        """One line for timelines and plot labels, e.g. ``loss 1.5% leaf1->spine1``."""
        return self.action  # type: ignore[attr-defined]

    def plan_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of `testbed.fabric.failures.plan(fabric, **kwargs)` for this event."""
        kwargs = self.model_dump(exclude={"at"}, exclude_none=True)
        for key in ("link", "direction"):
            if key in kwargs:
                kwargs[key] = tuple(kwargs[key])
        return kwargs


class LinkEvent(_EventBase):
    link: Pair
    direction: Pair | None = None

    def _where(self) -> str:
        if self.direction is not None:
            return f"{self.direction[0]}->{self.direction[1]}"
        return f"{self.link[0]}-{self.link[1]}"

    def describe(self) -> str:
        return f"{self.action} {self._where()}"  # type: ignore[attr-defined]


class LinkDown(LinkEvent):
    """Carrier loss: both ends see it, adjacent switches prune the port from ECMP at once."""

    action: Literal["link-down"]


class LinkUp(LinkEvent):
    action: Literal["link-up"]


class Blackhole(LinkEvent):
    """The link stays up (nobody is told) and drops everything: a silent failure."""

    action: Literal["blackhole"]


class Loss(LinkEvent):
    """Gray failure: each packet is dropped with probability `percent` / 100."""

    action: Literal["loss"]
    # 0 is allowed: no loss at all, the baseline point of a sweep over `percent`.
    percent: float = Field(ge=0, le=100, allow_inf_nan=False)

    def describe(self) -> str:
        return f"loss {self.percent:g}% {self._where()}"


class Degrade(LinkEvent):
    """The link keeps working at `mbps` instead of its nominal rate."""

    action: Literal["degrade"]
    mbps: float = Field(gt=0, allow_inf_nan=False)

    def describe(self) -> str:
        return f"degrade {self.mbps:g} Mbps {self._where()}"


class Flap(LinkEvent):
    """`count` cycles of `period_ms`: down for the first half of each cycle, up for the second."""

    action: Literal["flap"]
    period_ms: float = Field(ge=2, allow_inf_nan=False)  # the switches' timers resolve ~1 ms
    count: int = Field(ge=1)

    @property
    def end_s(self) -> float:
        return self.at + self.period_ms * self.count / 1000.0

    def describe(self) -> str:
        return f"flap {self.count}x{self.period_ms:g}ms {self._where()}"


class Heal(LinkEvent):
    """Back to nominal from any impairment (down, blackhole, loss, degrade, flap)."""

    action: Literal["heal"]


class GilbertElliottSpec(StrictModel):
    """Bursty loss (percentages per frame, as netem's `loss gemodel p r 1-h 1-k`): Good -> Bad
    with `p`, Bad -> Good with `r`; a frame is lost with `loss_good` or `loss_bad` in each
    state. The defaults (0, 100) are the Gilbert model: loss rate p/(p+r), bursts of 1/r."""

    p: float = Field(ge=0, le=100, allow_inf_nan=False)
    r: float = Field(default=100.0, ge=0, le=100, allow_inf_nan=False)
    loss_good: float = Field(default=0.0, ge=0, le=100, allow_inf_nan=False)
    loss_bad: float = Field(default=100.0, ge=0, le=100, allow_inf_nan=False)

    @model_validator(mode="after")
    def _leaves_bad(self) -> GilbertElliottSpec:
        if self.p > 0 and self.r == 0:
            raise ValueError("r: 0 with p > 0 never leaves the Bad state")
        return self


IMPAIR_KEYS = (
    "gilbert_elliott", "jitter_us", "jitter_distribution", "jitter_reorder", "reorder_percent",
    "reorder_delay_us", "corrupt_percent", "duplicate_percent", "drop_every",
)  # fmt: skip


class Impair(LinkEvent):
    """Stochastic impairments of a link direction, seeded from the scenario's seed and the
    direction (switch/impairment.py): each event replaces the direction's impairments, `heal`
    clears them. Times are virtual microseconds. Counts as a failure (for `max_failover_ms`)
    when it loses or damages frames -- Gilbert-Elliott loss or corruption -- not for jitter,
    reordering or duplication alone, which a transport need not fail over from."""

    action: Literal["impair"]
    gilbert_elliott: GilbertElliottSpec | None = None
    jitter_us: float = Field(default=0.0, ge=0, le=10_000_000, allow_inf_nan=False)
    jitter_distribution: Literal["uniform", "normal"] = "uniform"
    jitter_reorder: bool = False  # netem's jitter reorders; by default this one keeps the order
    reorder_percent: float = Field(default=0.0, ge=0, le=100, allow_inf_nan=False)
    reorder_delay_us: float = Field(default=0.0, ge=0, le=10_000_000, allow_inf_nan=False)
    corrupt_percent: float = Field(default=0.0, ge=0, le=100, allow_inf_nan=False)
    duplicate_percent: float = Field(default=0.0, ge=0, le=100, allow_inf_nan=False)
    # Every n-th frame on the wire is dropped (REPS's "drops every 10th packet"); 0: off.
    drop_every: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _something_and_consistent(self) -> Impair:
        if self.reorder_percent > 0 and self.reorder_delay_us <= 0:
            raise ValueError("reorder_delay_us: must be > 0 when reorder_percent is set")
        if not any(
            (self.gilbert_elliott, self.jitter_us, self.reorder_percent, self.corrupt_percent,
             self.duplicate_percent, self.drop_every)
        ):  # fmt: skip
            raise ValueError(
                "impair: names no impairment (gilbert_elliott, jitter_us, reorder_percent, "
                "corrupt_percent, duplicate_percent or drop_every)"
            )
        return self

    @property
    def is_failure(self) -> bool:
        ge = self.gilbert_elliott
        lossy = ge is not None and (ge.loss_good > 0 or (ge.p > 0 and ge.loss_bad > 0))
        return lossy or self.corrupt_percent > 0 or self.drop_every > 0

    def impairments(self) -> dict[str, Any]:
        """The switch's `impair` request without its seed (the planner adds it)."""
        return self.model_dump(include=set(IMPAIR_KEYS), exclude_none=True)

    def plan_kwargs(self) -> dict[str, Any]:
        kwargs = super().plan_kwargs()
        for key in IMPAIR_KEYS:
            kwargs.pop(key, None)
        kwargs["impair"] = self.impairments()
        return kwargs

    def describe(self) -> str:
        parts = []
        if self.gilbert_elliott is not None:
            g = self.gilbert_elliott
            parts.append(f"GE p={g.p:g}% r={g.r:g}%")
        if self.jitter_us:
            parts.append(f"jitter {self.jitter_us:g}us")
        if self.reorder_percent:
            parts.append(f"reorder {self.reorder_percent:g}%")
        if self.corrupt_percent:
            parts.append(f"corrupt {self.corrupt_percent:g}%")
        if self.duplicate_percent:
            parts.append(f"dup {self.duplicate_percent:g}%")
        if self.drop_every:
            parts.append(f"drop every {self.drop_every}th")
        return f"impair {', '.join(parts)} {self._where()}"


class SwitchEvent(_EventBase):
    node: NodeName

    def describe(self) -> str:
        return f"{self.action} {self.node}"  # type: ignore[attr-defined]


class SwitchDown(SwitchEvent):
    action: Literal["switch-down"]


class SwitchUp(SwitchEvent):
    action: Literal["switch-up"]


class PlaneEvent(_EventBase):
    plane: int = Field(ge=1)

    def describe(self) -> str:
        return f"{self.action} {self.plane}"  # type: ignore[attr-defined]


class PlaneDown(PlaneEvent):
    """Every switch of one plane goes down: hosts keep their NICs on the other planes."""

    action: Literal["plane-down"]


class PlaneUp(PlaneEvent):
    action: Literal["plane-up"]


Event = Annotated[
    LinkDown
    | LinkUp
    | Blackhole
    | Loss
    | Degrade
    | Flap
    | Heal
    | Impair
    | SwitchDown
    | SwitchUp
    | PlaneDown
    | PlaneUp,
    Field(discriminator="action"),
]
LINK_EVENTS = (LinkDown, LinkUp, Blackhole, Loss, Degrade, Flap, Heal, Impair)


def models_by_tag(models: Iterable[type[BaseModel]], tag: str) -> dict[str, type[BaseModel]]:
    return {get_args(m.model_fields[tag].annotation)[0]: m for m in models}


EVENT_MODELS = models_by_tag((*LINK_EVENTS, SwitchDown, SwitchUp, PlaneDown, PlaneUp), "action")
ACTIONS: tuple[str, ...] = tuple(EVENT_MODELS)

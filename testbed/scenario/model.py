"""Scenario files: schema, validation and the pure facts a run derives from them.

A scenario (DESIGN.md, "Scenario file (YAML)") is checked completely before anything is built:
first its shape (pydantic models, unknown keys forbidden), then its meaning against the fabric it
describes (host and switch names, link adjacency, event times inside the run). Both kinds of
mistake surface as one `ScenarioError` whose message starts with the key path, e.g.
``events[2].link: spine1 and spine2 are not adjacent``, so a typo costs the user a second, not a
torn-down fabric. Validation computes the topology with the pure `topologies` module only: it
needs no root, creates nothing and takes milliseconds.

Also here, because they are facts about the scenario and not about any run: the traffic matrix a
workload asks for (`flows`), the ideal-multipath capacity that `min_goodput_fraction` is measured
against (`capacity_mbps`), warnings about scenarios that would not exercise what they claim to
(`lint`), and the `--quick` transform (`quick`).
"""

from __future__ import annotations

import difflib
import math
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
)

from contracts.sizes import SizeError, parse_size
from topologies import Fabric, TopologyError, TopologyParams, leaf_spine

TRANSPORTS: tuple[str, ...] = ("mrc", "single-path", "spray-no-failover", "tcp", "mptcp")
FAILURE_ACTIONS = frozenset(
    {"link-down", "blackhole", "loss", "degrade", "flap", "switch-down", "plane-down"}
)
RECOVERY_ACTIONS = frozenset({"link-up", "heal", "switch-up", "plane-up"})

QUICK_FACTOR = 0.25
"""`--quick` shortens the timeline to a quarter; see `quick()` for what is scaled and why."""

EMULATION_BUDGET_MBPS = 80.0
"""Aggregate ideal goodput above which `lint` warns that two cores may not keep up.

Measured with `testbed run --quick` on this 2-core machine (docs/scenario-format.md, "Emulator
capacity"): four cross-leaf flows at 25 Mbps (100 Mbps in aggregate) reached 36-66% of the
ideal with the CPU 93% busy, at 10 Mbps (40 in aggregate) 66-79%; a four-rank all-reduce at
80 Mbps in aggregate 57-62%. No run had kernel drops: the machine runs out of CPU time (and
the endpoints' timers get late) before its sockets overflow.
"""


class ScenarioError(ValueError):
    """A scenario is invalid. `str()` is one line: ``[file: ]key.path: reason``."""

    def __init__(self, path: str, reason: str, source: str | None = None) -> None:
        self.path = path
        self.reason = reason
        self.source = source
        head = f"{source}: " if source else ""
        super().__init__(f"{head}{path}: {reason}" if path else f"{head}{reason}")


def _size(value: object) -> int:
    try:
        nbytes = parse_size(value)
    except SizeError as exc:
        raise ValueError(str(exc)) from None
    if nbytes <= 0:
        raise ValueError("must be more than 0 bytes")
    return nbytes


Size = Annotated[int, BeforeValidator(_size)]
NodeName = Annotated[str, Field(min_length=1)]
Pair = Annotated[list[NodeName], Field(min_length=2, max_length=2)]


class _Model(BaseModel):
    # strict: YAML already gives typed values, so "2" for an integer or 1 for `true` is a mistake
    # worth reporting rather than coercing.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class TopologySpec(_Model):
    """`topology:`; defaults are those of `topologies.TopologyParams`."""

    spines: int
    leaves: int
    hosts_per_leaf: int
    planes: int = 1
    link_mbps: float = TopologyParams.link_mbps
    delay_us: float = TopologyParams.delay_us
    queue_kb: float = TopologyParams.queue_kb
    trim_bytes: int = TopologyParams.trim_bytes
    trimming: bool = TopologyParams.trimming
    ecn_kb: float | None = None
    oversubscription: float | None = None

    def params(self) -> TopologyParams:
        return TopologyParams(**self.model_dump())


class BulkWorkload(_Model):
    """One transfer of `bytes` from `src` to `dst`."""

    kind: Literal["bulk"]
    src: NodeName
    dst: NodeName
    bytes: Size


class PermutationWorkload(_Model):
    """Every host sends `bytes` to one other host and receives from one (see `flows`)."""

    kind: Literal["permutation"]
    bytes: Size


class IncastWorkload(_Model):
    """Each of `srcs` (a list, or ``all`` = every other host) sends `bytes` to `dst` at once."""

    kind: Literal["incast"]
    dst: NodeName
    srcs: list[NodeName] | Literal["all"]
    bytes: Size


class AlltoallWorkload(_Model):
    """Every host sends `bytes` to every other host at once."""

    kind: Literal["alltoall"]
    bytes: Size


class AllreduceWorkload(_Model):
    """`steps` back-to-back ring all-reduces of a `bytes` buffer held by each of `hosts`."""

    kind: Literal["allreduce"]
    hosts: list[NodeName] | Literal["all"] = "all"
    bytes: Size
    steps: int = Field(ge=1, le=100_000)


Workload = Annotated[
    BulkWorkload | PermutationWorkload | IncastWorkload | AlltoallWorkload | AllreduceWorkload,
    Field(discriminator="kind"),
]


class _EventBase(_Model):
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


class _LinkEvent(_EventBase):
    link: Pair
    direction: Pair | None = None

    def _where(self) -> str:
        if self.direction is not None:
            return f"{self.direction[0]}->{self.direction[1]}"
        return f"{self.link[0]}-{self.link[1]}"

    def describe(self) -> str:
        return f"{self.action} {self._where()}"  # type: ignore[attr-defined]


class LinkDown(_LinkEvent):
    """Carrier loss: both ends see it, adjacent switches prune the port from ECMP at once."""

    action: Literal["link-down"]


class LinkUp(_LinkEvent):
    action: Literal["link-up"]


class Blackhole(_LinkEvent):
    """The link stays up (nobody is told) and drops everything: a silent failure."""

    action: Literal["blackhole"]


class Loss(_LinkEvent):
    """Gray failure: each packet is dropped with probability `percent` / 100."""

    action: Literal["loss"]
    percent: float = Field(gt=0, le=100, allow_inf_nan=False)

    def describe(self) -> str:
        return f"loss {self.percent:g}% {self._where()}"


class Degrade(_LinkEvent):
    """The link keeps working at `mbps` instead of its nominal rate."""

    action: Literal["degrade"]
    mbps: float = Field(gt=0, allow_inf_nan=False)

    def describe(self) -> str:
        return f"degrade {self.mbps:g} Mbps {self._where()}"


class Flap(_LinkEvent):
    """`count` cycles of `period_ms`: down for the first half of each cycle, up for the second."""

    action: Literal["flap"]
    period_ms: float = Field(ge=2, allow_inf_nan=False)  # the switches' timers resolve ~1 ms
    count: int = Field(ge=1)

    @property
    def end_s(self) -> float:
        return self.at + self.period_ms * self.count / 1000.0

    def describe(self) -> str:
        return f"flap {self.count}x{self.period_ms:g}ms {self._where()}"


class Heal(_LinkEvent):
    """Back to nominal from any impairment (down, blackhole, loss, degrade, flap)."""

    action: Literal["heal"]


class _SwitchEvent(_EventBase):
    node: NodeName

    def describe(self) -> str:
        return f"{self.action} {self.node}"  # type: ignore[attr-defined]


class SwitchDown(_SwitchEvent):
    action: Literal["switch-down"]


class SwitchUp(_SwitchEvent):
    action: Literal["switch-up"]


class _PlaneEvent(_EventBase):
    plane: int = Field(ge=1)

    def describe(self) -> str:
        return f"{self.action} {self.plane}"  # type: ignore[attr-defined]


class PlaneDown(_PlaneEvent):
    """Every switch of one plane goes down: hosts keep their NICs on the other planes."""

    action: Literal["plane-down"]


class PlaneUp(_PlaneEvent):
    action: Literal["plane-up"]


Event = Annotated[
    LinkDown
    | LinkUp
    | Blackhole
    | Loss
    | Degrade
    | Flap
    | Heal
    | SwitchDown
    | SwitchUp
    | PlaneDown
    | PlaneUp,
    Field(discriminator="action"),
]
LINK_EVENTS = (LinkDown, LinkUp, Blackhole, Loss, Degrade, Flap, Heal)


def _by_tag(models: Iterable[type[BaseModel]], tag: str) -> dict[str, type[BaseModel]]:
    return {get_args(m.model_fields[tag].annotation)[0]: m for m in models}


_EVENT_MODELS = _by_tag((*LINK_EVENTS, SwitchDown, SwitchUp, PlaneDown, PlaneUp), "action")
_WORKLOAD_MODELS = _by_tag(
    (BulkWorkload, PermutationWorkload, IncastWorkload, AlltoallWorkload, AllreduceWorkload),
    "kind",
)
ACTIONS: tuple[str, ...] = tuple(_EVENT_MODELS)
WORKLOAD_KINDS: tuple[str, ...] = tuple(_WORKLOAD_MODELS)


class Expect(_Model):
    """What the run must show; an absent key is not checked."""

    delivered_all: bool | None = None
    max_stall_ms: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    min_goodput_fraction: float | None = Field(default=None, gt=0, le=1)
    max_failover_ms: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    max_p100_over_p50: float | None = Field(default=None, ge=1, allow_inf_nan=False)


class Scenario(_Model):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$", max_length=64)
    description: str = Field(min_length=1)
    topology: TopologySpec
    transport: list[Literal[TRANSPORTS]] = Field(default=["mrc"], min_length=1)  # type: ignore[valid-type]
    workload: Workload
    duration_s: float = Field(gt=0, le=3600, allow_inf_nan=False)
    seed: int = 1
    events: list[Event] = []
    expect: Expect = Expect()

    _fabric: Fabric | None = PrivateAttr(default=None)

    @field_validator("transport", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        # `transport: mrc` and `transport: [mrc, tcp]` both mean a list of transports to run.
        return [value] if isinstance(value, str) else value

    @property
    def transports(self) -> list[str]:
        return list(self.transport)

    def fabric(self) -> Fabric:
        """The pure fabric description (computed once)."""
        if self._fabric is None:
            self._fabric = leaf_spine(self.topology.params())
        return self._fabric

    def timeline(self) -> list[Event]:
        """Events in the order they are applied (stable for equal times, as written)."""
        return sorted(self.events, key=lambda e: e.at)

    def hosts(self) -> list[str]:
        return self.fabric().hosts()


# --------------------------------------------------------------------------- validation


def load_scenario(path: str | Path) -> Scenario:
    """Read and fully validate a scenario file; raise one ScenarioError naming file and key."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError("", f"cannot read: {exc.strerror or exc}", str(path)) from None
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "yaml"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ScenarioError(where, problem, str(path)) from None
    try:
        return validate(data)
    except ScenarioError as exc:
        raise ScenarioError(exc.path, exc.reason, str(path)) from None


def validate(data: Any) -> Scenario:
    """Validate a parsed scenario (a dict); raise one ScenarioError naming the key path."""
    if not isinstance(data, dict):
        raise ScenarioError("", f"a scenario must be a mapping of keys, got {type(data).__name__}")
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise _first_error(exc, data) from None
    _check_meaning(scenario)
    return scenario


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys, which PyYAML would silently overwrite."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict:
    seen: set = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)

_KNOWN_KEYS: dict[tuple, list[str]] = {
    (): list(Scenario.model_fields),
    ("topology",): list(TopologySpec.model_fields),
    ("expect",): list(Expect.model_fields),
}


def _format_loc(loc: Sequence[str | int]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _strip_tags(loc: tuple) -> tuple:
    """Drop the discriminator tag pydantic inserts: ('events', 0, 'loss', 'percent')."""
    if len(loc) >= 2 and loc[0] == "workload" and loc[1] in WORKLOAD_KINDS:
        return loc[:1] + loc[2:]
    if len(loc) >= 3 and loc[0] == "events" and isinstance(loc[1], int) and loc[2] in ACTIONS:
        return loc[:2] + loc[3:]
    return loc


def _first_error(exc: ValidationError, data: dict) -> ScenarioError:
    errors = exc.errors(include_url=False)
    # A misspelt key usually also makes a required one "missing"; the misspelling is the cause.
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    kind, loc, value = err["type"], _strip_tags(tuple(err["loc"])), err.get("input")
    path = _format_loc(loc)
    if kind == "extra_forbidden":
        return ScenarioError(path, "unknown key" + _did_you_mean(loc, data))
    if kind == "missing":
        return ScenarioError(path, "required")
    if kind == "union_tag_invalid":
        field = "kind" if loc[0] == "workload" else "action"
        allowed = WORKLOAD_KINDS if field == "kind" else ACTIONS
        return ScenarioError(
            f"{path}.{field}",
            f"unknown {field} {_tag_value(value, field)!r} (one of {', '.join(allowed)})",
        )
    if kind == "union_tag_not_found":
        field = "kind" if loc[0] == "workload" else "action"
        return ScenarioError(f"{path}.{field}", "required")
    if kind == "literal_error" and loc[:1] == ("transport",):
        where = "transport" if isinstance(data.get("transport"), str) else path
        return ScenarioError(where, f"unknown transport {value!r} (one of {', '.join(TRANSPORTS)})")
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    else:
        msg = f"{msg[:1].lower()}{msg[1:]}, got {value!r}"
    return ScenarioError(path, msg)


def _tag_value(value: Any, field: str) -> Any:
    return value.get(field) if isinstance(value, dict) else value


def _did_you_mean(loc: tuple, data: dict) -> str:
    parent, key = loc[:-1], loc[-1]
    known = _KNOWN_KEYS.get(parent)
    if known is None:
        node: Any = data
        for part in parent:
            node = node[part]
        known = _fields_of(parent, node)
    close = difflib.get_close_matches(str(key), known, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _fields_of(parent: tuple, node: Any) -> list[str]:
    """Keys of the workload or event model that `node`'s tag selects (for "did you mean")."""
    tag_field, models = (
        ("kind", _WORKLOAD_MODELS) if parent[:1] == ("workload",) else ("action", _EVENT_MODELS)
    )
    model = models.get(node.get(tag_field)) if isinstance(node, dict) else None
    return list(model.model_fields) if model is not None else []


def _check_meaning(sc: Scenario) -> None:
    """Everything the schema cannot know: names, adjacency, times, and sensible expectations."""
    try:
        fabric = sc.fabric()
    except TopologyError as exc:
        key, _, reason = str(exc).partition(": ")
        raise ScenarioError(f"topology.{key}", reason) from None
    hosts = set(fabric.hosts())

    def host(path: str, name: str) -> None:
        if name not in hosts:
            raise ScenarioError(path, f"no host named {name}")

    w = sc.workload
    if isinstance(w, BulkWorkload):
        host("workload.src", w.src)
        host("workload.dst", w.dst)
        if w.src == w.dst:
            raise ScenarioError("workload.dst", f"same host as workload.src ({w.src})")
    elif isinstance(w, IncastWorkload):
        host("workload.dst", w.dst)
        if w.srcs != "all":
            _check_host_list("workload.srcs", w.srcs, host, minimum=1)
            if w.dst in w.srcs:
                raise ScenarioError("workload.srcs", f"contains the destination {w.dst}")
        elif len(hosts) < 2:
            raise ScenarioError("workload.srcs", "the fabric has no host besides the destination")
    elif isinstance(w, AllreduceWorkload):
        if w.hosts != "all":
            _check_host_list("workload.hosts", w.hosts, host, minimum=2)
    if len(hosts) < 2:
        raise ScenarioError("topology.hosts_per_leaf", "a workload needs at least two hosts")

    for i, event in enumerate(sc.events):
        _check_event(f"events[{i}]", event, sc, fabric)

    if sc.expect.max_p100_over_p50 is not None and not isinstance(w, AllreduceWorkload):
        raise ScenarioError(
            "expect.max_p100_over_p50", f"needs step times; the {w.kind} workload has no steps"
        )
    if sc.expect.max_failover_ms is not None and not any(e.is_failure for e in sc.events):
        raise ScenarioError("expect.max_failover_ms", "the timeline has no failure event")


def _check_host_list(path: str, names: list[str], host: Any, minimum: int) -> None:
    for j, name in enumerate(names):
        host(f"{path}[{j}]", name)
        if name in names[:j]:
            raise ScenarioError(f"{path}[{j}]", f"{name} is listed twice")
    if len(names) < minimum:
        raise ScenarioError(path, f"needs at least {minimum} hosts, got {len(names)}")


def _check_event(path: str, event: Event, sc: Scenario, fabric: Fabric) -> None:
    if event.at >= sc.duration_s:
        when = "at" if event.at == sc.duration_s else "after"
        raise ScenarioError(
            f"{path}.at", f"{event.at!r} is {when} the end (duration_s {sc.duration_s:g})"
        )
    if isinstance(event, _LinkEvent):
        a, b = event.link
        for name in (a, b):
            if name not in fabric.nodes:
                raise ScenarioError(f"{path}.link", f"no node named {name}{_plane_hint(name, sc)}")
        if a == b:
            raise ScenarioError(f"{path}.link", f"both ends are {a}")
        try:
            fabric.link_between(a, b)
        except TopologyError:
            raise ScenarioError(f"{path}.link", f"{a} and {b} are not adjacent") from None
        if event.direction is not None and sorted(event.direction) != sorted(event.link):
            raise ScenarioError(
                f"{path}.direction",
                f"[{', '.join(event.direction)}] is not a direction of link [{a}, {b}]",
            )
        if isinstance(event, Flap) and event.end_s > sc.duration_s:
            raise ScenarioError(
                f"{path}.count",
                f"the flap runs until {event.end_s:g} s, after the end (duration_s {sc.duration_s:g})",
            )
    elif isinstance(event, _SwitchEvent):
        node = fabric.nodes.get(event.node)
        if node is None:
            hint = _plane_hint(event.node, sc)
            raise ScenarioError(f"{path}.node", f"no switch named {event.node}{hint}")
        if node.kind == "host":
            raise ScenarioError(f"{path}.node", f"{event.node} is a host, not a switch")
    elif isinstance(event, _PlaneEvent):
        planes = sc.topology.planes
        if event.plane > planes:
            raise ScenarioError(
                f"{path}.plane", f"no plane {event.plane} (topology.planes {planes})"
            )


def _plane_hint(name: str, sc: Scenario) -> str:
    planes = sc.topology.planes
    if planes > 1 and re.fullmatch(r"(leaf|spine)\d+", name):
        return f" (with {planes} planes switch names end in p1..p{planes}, e.g. {name}p1)"
    return ""


# --------------------------------------------------------------------------- derived facts


@dataclass(frozen=True)
class Flow:
    """One transfer the workload asks for (for allreduce: one ring hop of one step)."""

    src: str
    dst: str
    bytes: int


def workload_hosts(sc: Scenario) -> list[str]:
    """The hosts that take part, in fabric order."""
    hosts = sc.hosts()
    w = sc.workload
    if isinstance(w, BulkWorkload):
        return [h for h in hosts if h in (w.src, w.dst)]
    if isinstance(w, IncastWorkload):
        srcs = [h for h in hosts if h != w.dst] if w.srcs == "all" else w.srcs
        return [h for h in hosts if h in srcs or h == w.dst]
    if isinstance(w, AllreduceWorkload) and w.hosts != "all":
        return list(w.hosts)
    return hosts


def flows(sc: Scenario) -> list[Flow]:
    """The traffic matrix, one definition for the runner, the endpoints and the metrics.

    permutation: with two or more leaves every flow crosses the spine layer (the case where ECMP
    collisions matter): leaves are put in a seeded random cyclic order and each leaf's hosts send,
    in a seeded random matching, to the hosts of the next leaf. With one leaf it is a seeded
    random cyclic permutation. Either way each host sends once and receives once.
    allreduce: a ring in `hosts` order; each host sends 2(N-1)/N x bytes per step to the next
    (reduce-scatter then all-gather), which is what one step's flows carry.
    """
    w = sc.workload
    hosts = workload_hosts(sc)
    if isinstance(w, BulkWorkload):
        return [Flow(w.src, w.dst, w.bytes)]
    if isinstance(w, IncastWorkload):
        return [Flow(h, w.dst, w.bytes) for h in hosts if h != w.dst]
    if isinstance(w, AlltoallWorkload):
        return [Flow(a, b, w.bytes) for a in hosts for b in hosts if a != b]
    if isinstance(w, AllreduceWorkload):
        n = len(hosts)
        per_hop = math.ceil(2 * (n - 1) * w.bytes / n)
        return [Flow(hosts[i], hosts[(i + 1) % n], per_hop) for i in range(n)]
    assert isinstance(w, PermutationWorkload)
    rng = random.Random(sc.seed)
    fabric = sc.fabric()
    by_leaf: dict[str, list[str]] = {}
    for h in hosts:
        by_leaf.setdefault(fabric.interfaces[h][0].peer_node, []).append(h)
    groups = list(by_leaf.values())
    pairs: list[tuple[str, str]] = []
    if len(groups) >= 2:
        rng.shuffle(groups)
        for j, senders in enumerate(groups):
            receivers = list(groups[(j + 1) % len(groups)])
            rng.shuffle(receivers)
            pairs += zip(senders, receivers, strict=True)
    else:
        order = list(hosts)
        for i in range(len(order) - 1, 0, -1):  # Sattolo: a uniformly random single cycle
            k = rng.randrange(i)
            order[i], order[k] = order[k], order[i]
        pairs = [(order[i], order[(i + 1) % len(order)]) for i in range(len(order))]
    pairs.sort(key=lambda p: hosts.index(p[0]))
    return [Flow(a, b, w.bytes) for a, b in pairs]


def total_bytes(sc: Scenario) -> int:
    """Application bytes the whole workload must deliver."""
    steps = sc.workload.steps if isinstance(sc.workload, AllreduceWorkload) else 1
    return steps * sum(f.bytes for f in flows(sc))


class _LinkState:
    """Directed link capacities of the fabric after a prefix of the timeline."""

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        self.nominal: dict[tuple[str, str], float] = {}
        for link in fabric.links:
            mbps = link.mbps if link.mbps > 0 else math.inf
            self.nominal[(link.a, link.b)] = self.nominal[(link.b, link.a)] = mbps
        self.link: dict[tuple[str, str], float] = dict(self.nominal)
        self.down_switches: set[str] = set()
        self.down_planes: set[int] = set()

    def apply(self, event: Event) -> None:
        if isinstance(event, _LinkEvent):
            a, b = event.link
            dirs = [tuple(event.direction)] if event.direction else [(a, b), (b, a)]
            for d in dirs:
                nominal = self.nominal[d]  # type: ignore[index]
                if isinstance(event, (LinkDown, Blackhole, Flap)):
                    # A flapping link is worth nothing to a transport that must not stall on it.
                    value = 0.0
                elif isinstance(event, Loss):
                    value = nominal * (1 - event.percent / 100)
                elif isinstance(event, Degrade):
                    value = min(nominal, event.mbps)
                else:  # link-up, heal
                    value = nominal
                self.link[d] = value  # type: ignore[index]
        elif isinstance(event, SwitchDown):
            self.down_switches.add(event.node)
        elif isinstance(event, SwitchUp):
            self.down_switches.discard(event.node)
        elif isinstance(event, PlaneDown):
            self.down_planes.add(event.plane)
        elif isinstance(event, PlaneUp):
            self.down_planes.discard(event.plane)

    def cap(self, a: str, b: str) -> float:
        for node in (a, b):
            info = self.fabric.nodes[node]
            if node in self.down_switches or (info.plane in self.down_planes):
                return 0.0
        return self.link[(a, b)]


def _uniform_rate(state: _LinkState, pairs: Sequence[tuple[str, str]]) -> float:
    """Largest rate every flow can get at once with ideal multipath over every plane and spine.

    A fluid estimate, not a simulation: each flow uses its source NICs, its destination NICs and,
    across leaves, the spine paths between its two leaves (summed over planes and spines, each
    path worth its weaker hop) and the uplinks/downlinks of both leaves. The rate is the tightest
    resource's capacity divided by the flows sharing it.
    """
    fabric = state.fabric
    P = fabric.params.planes
    leaf_of = {h: fabric.nodes[fabric.interfaces[h][0].peer_node].index for h in fabric.hosts()}
    uses: dict[tuple, int] = {}
    for src, dst in pairs:
        keys = [("tx", src), ("rx", dst)]
        if leaf_of[src] != leaf_of[dst]:
            l1, l2 = leaf_of[src], leaf_of[dst]
            keys += [("pair", l1, l2), ("up", l1), ("down", l2)]
        for key in keys:
            uses[key] = uses.get(key, 0) + 1
    S = fabric.params.spines

    def leaf(i: int, p: int) -> str:
        return f"leaf{i}" if P == 1 else f"leaf{i}p{p}"

    def spine(i: int, p: int) -> str:
        return f"spine{i}" if P == 1 else f"spine{i}p{p}"

    def capacity(key: tuple) -> float:
        planes = range(1, P + 1)
        if key[0] == "tx":
            return sum(state.cap(key[1], leaf(leaf_of[key[1]], p)) for p in planes)
        if key[0] == "rx":
            return sum(state.cap(leaf(leaf_of[key[1]], p), key[1]) for p in planes)
        if key[0] == "up":
            return sum(
                state.cap(leaf(key[1], p), spine(s, p)) for p in planes for s in range(1, S + 1)
            )
        if key[0] == "down":
            return sum(
                state.cap(spine(s, p), leaf(key[1], p)) for p in planes for s in range(1, S + 1)
            )
        _, l1, l2 = key
        return sum(
            min(state.cap(leaf(l1, p), spine(s, p)), state.cap(spine(s, p), leaf(l2, p)))
            for p in planes
            for s in range(1, S + 1)
        )

    return min((capacity(k) / n for k, n in uses.items()), default=math.inf)


def capacity_mbps(sc: Scenario, after: Iterable[Event] = ()) -> float:
    """Ideal aggregate goodput of the workload's flows (Mbps of frames, headers included).

    With `after` empty this is the healthy fabric, the `bottleneck_mbps` that
    `min_goodput_fraction` divides by. With a prefix of the timeline it is what the damaged
    fabric can still carry, which caps the failover target (a plane-down halves what two planes
    could carry; no transport can "recover" what is gone).
    """
    state = _LinkState(sc.fabric())
    for event in after:
        state.apply(event)
    fl = flows(sc)
    return _uniform_rate(state, [(f.src, f.dst) for f in fl]) * len(fl)


def ideal_completion_s(sc: Scenario) -> float:
    """Seconds the workload needs on the healthy fabric at line rate (no headers, no failures)."""
    fl = flows(sc)
    state = _LinkState(sc.fabric())
    rate = _uniform_rate(state, [(f.src, f.dst) for f in fl])
    steps = sc.workload.steps if isinstance(sc.workload, AllreduceWorkload) else 1
    return steps * max(f.bytes for f in fl) * 8 / (rate * 1e6)


def lint(sc: Scenario) -> list[str]:
    """Warnings about a valid scenario that would not show what it claims to.

    A failure that lands after the workload has ideally finished tests nothing; a workload that
    cannot finish even ideally makes `delivered_all` meaningless; an aggregate rate beyond what the
    emulator carries measures the machine, not the protocol.
    """
    out: list[str] = []
    done = ideal_completion_s(sc)
    for i, event in enumerate(sc.events):
        if event.is_failure and event.at >= done:
            out.append(
                f"events[{i}].at: {event.at:g} s is after the workload ideally finishes "
                f"({done:.2f} s), so the failure hits nothing"
            )
        if isinstance(event, PlaneDown) and sc.topology.planes == 1:
            out.append(f"events[{i}].plane: plane-down of the only plane cuts every host off")
    if done / 0.7 > sc.duration_s:
        out.append(
            f"duration_s: {sc.duration_s:g} s leaves little room; the workload ideally takes "
            f"{done:.2f} s (at 70% efficiency {done / 0.7:.2f} s)"
        )
    agg = capacity_mbps(sc)
    if agg > EMULATION_BUDGET_MBPS:
        out.append(
            f"topology.link_mbps: the workload can reach {agg:g} Mbps in aggregate, more than the "
            f"{EMULATION_BUDGET_MBPS:g} Mbps the emulator is budgeted to carry without kernel drops"
        )
    return out


def quick(sc: Scenario, factor: float = QUICK_FACTOR) -> Scenario:
    """The `--quick` form: the same experiment on a timeline `factor` times as long.

    Scaled by `factor`: duration_s, every event time, the bytes of bulk/permutation/incast/
    alltoall (so each transfer still spans the same events at the same rates), the number of
    allreduce steps and of flap cycles (rounded up, at least 1). Kept: every rate, queue, per-step
    size and flap period, and every expectation -- stall and failover limits are physical
    timer and detection times, which must not shrink with the timeline.
    """
    if not 0 < factor <= 1:
        raise ValueError(f"factor must be in (0, 1], got {factor}")
    data = sc.model_dump(mode="python", exclude_none=True)
    data["duration_s"] = sc.duration_s * factor
    w = data["workload"]
    if w["kind"] == "allreduce":
        w["steps"] = max(1, math.ceil(w["steps"] * factor))
    else:
        w["bytes"] = max(1, round(w["bytes"] * factor))
    for e in data["events"]:
        e["at"] = round(e["at"] * factor, 6)
        if e["action"] == "flap":
            e["count"] = max(1, math.ceil(e["count"] * factor))
    return validate(data)

"""The scenario file's shape: pydantic models of every key, with the defaults a file may omit.

A scenario (docs/design.md, "Scenario file (YAML)") names a topology, the transports to compare, one
workload (whose kinds are `contracts.workloads`, shared with the endpoints' job requests), a
timeline of failure events and what the run must show. These models check types and ranges
only; what the values mean against the fabric is `testbed.scenario.validation`'s job.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    field_validator,
    model_validator,
)

from contracts.clock import MAX_DILATION, check_dilation
from contracts.defaults import ECMP_HASHES, FORWARDINGS
from contracts.framing import MAX_MTU, MIN_MTU
from contracts.schema import StrictModel
from contracts.workloads import (
    WORKLOAD_MODELS,
    AllreduceWorkload,
    AlltoallWorkload,
    BulkWorkload,
    IncastWorkload,
    PermutationWorkload,
    Workload,
)
from testbed.scenario.random_failures import RandomFailureSpec, failure_events
from topologies import Fabric, TopologyParams, leaf_spine

__all__ = [
    "ACTIONS",
    "EVENT_MODELS",
    "FAILURE_ACTIONS",
    "LINK_EVENTS",
    "RECOVERY_ACTIONS",
    "ENDPOINT_TRANSPORT_NAMES",
    "TRANSPORTS",
    "CaptureSpec",
    "CcSpec",
    "TransportSpec",
    "WORKLOAD_KINDS",
    "WORKLOAD_MODELS_BY_KIND",
    "AllreduceWorkload",
    "AlltoallWorkload",
    "Blackhole",
    "BulkWorkload",
    "Degrade",
    "Event",
    "Expect",
    "Flap",
    "Heal",
    "Impair",
    "RandomFailureSpec",
    "IncastWorkload",
    "LinkDown",
    "LinkEvent",
    "LinkUp",
    "Loss",
    "PermutationWorkload",
    "PlaneDown",
    "PlaneEvent",
    "PlaneUp",
    "STATISTICS",
    "Scenario",
    "SwitchDown",
    "SwitchEvent",
    "SwitchUp",
    "TopologySpec",
    "Workload",
]

TRANSPORTS: tuple[str, ...] = ("mrc", "single-path", "spray-no-failover", "roce", "tcp", "mptcp")
KERNEL_TRANSPORTS = frozenset({"tcp", "mptcp"})
"""Transports on the kernel's clocks: they run in real time only (time dilation 1)."""
FAILURE_ACTIONS = frozenset(
    {"link-down", "blackhole", "loss", "degrade", "flap", "switch-down", "plane-down"}
)
RECOVERY_ACTIONS = frozenset({"link-up", "heal", "switch-up", "plane-up"})

NodeName = Annotated[str, Field(min_length=1)]
Pair = Annotated[list[NodeName], Field(min_length=2, max_length=2)]


class TopologySpec(StrictModel):
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
    ecmp_hash: Literal[ECMP_HASHES] = TopologyParams.ecmp_hash  # type: ignore[valid-type]
    forwarding: Literal[FORWARDINGS] = TopologyParams.forwarding  # type: ignore[valid-type]
    # Bounds here as well as in TopologyParams.validate, so the JSON Schema carries them.
    mtu: int = Field(default=TopologyParams.mtu, ge=MIN_MTU, le=MAX_MTU)

    def params(self) -> TopologyParams:
        return TopologyParams(**self.model_dump())


class EmulationSpec(StrictModel):
    """`emulation:` how the machine runs the scenario, not what is emulated.

    `time_dilation`: real seconds per virtual second of every clock of the fabric
    (contracts.clock), a number >= 1 or `auto` (the smallest the machine's calibrated budget
    predicts valid, raised and rerun when a run comes out invalid). `switch_processes`: one
    switch process per switch node or one for all (testbed.fabric.switch_layout); `auto` is
    shared under time dilation, per-node in real time."""

    time_dilation: float | Literal["auto"] = "auto"
    max_reruns: int = Field(default=2, ge=0, le=5)  # auto: reruns at a higher N when invalid
    switch_processes: Literal["auto", "per-node", "shared"] = "auto"

    @field_validator("time_dilation", mode="before")
    @classmethod
    def _dilation(cls, value: Any) -> Any:
        if value == "auto":
            return value
        try:
            return check_dilation(value)
        except ValueError:
            raise ValueError(
                f"expected 'auto' or a number between 1 and {MAX_DILATION:.0f}, got {value!r}"
            ) from None


class ControllerSpec(StrictModel):
    """`controller:` a fabric controller that reads every endpoint's EV events, localises a
    failed link from the paths of the EVs that failed and denies it on every endpoint
    (testbed/harness/ev_controller.py). `min_votes`: connections that must have failed across
    a link; `confirm_us`: virtual microseconds an EV must stay FAILED to count (a congested
    one is re-admitted sooner); `poll_ms`: real milliseconds between reads of the events;
    `hold_ms`: virtual milliseconds a deny stays before it is lifted (none: to the end).
    `confirm`: `wait` (an EV still FAILED `confirm_us` later counts) or `probe` (the
    controller probes the failed EVs -- MRC's controller EV probes -- and counts those silent
    for `probe_timeout_us`); `rtt_map`: probe every EV of a sample of connections at the end
    and report per-path RTTs (`controller.rtt_us` in summary.json)."""

    enabled: bool = False
    min_votes: int = Field(default=2, ge=1, le=10_000)
    confirm_us: float = Field(default=50.0, ge=0, le=1e6, allow_inf_nan=False)
    poll_ms: float = Field(default=2.0, gt=0, le=10_000, allow_inf_nan=False)
    hold_ms: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    confirm: Literal["wait", "probe"] = "wait"
    probe_timeout_us: float = Field(default=50.0, gt=0, le=1e6, allow_inf_nan=False)
    rtt_map: bool = True


class CaptureSpec(StrictModel):
    """`capture:` pcap files the switches write during each transport's run, stamped with
    virtual time (switch/capture.py), into raw/<transport>/pcap/<switch>-<port>.pcap.
    `ports`: `SWITCH:PORT`, `SWITCH` (all its ports) or `hosts` (every leaf port facing a host);
    none: no capture. `snaplen`: bytes kept of each frame (128 holds every MRC header);
    `direction`: what a port sends, receives or both; `max_mb`: a file's cap, past which
    frames are counted, not written."""

    ports: list[str] = Field(default=[], max_length=4096)
    direction: Literal["tx", "rx", "both"] = "both"
    snaplen: int = Field(default=128, ge=14, le=65535)
    max_mb: float = Field(default=100.0, gt=0, le=100_000, allow_inf_nan=False)

    @property
    def enabled(self) -> bool:
        return bool(self.ports)


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
    "reorder_delay_us", "corrupt_percent", "duplicate_percent",
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

    @model_validator(mode="after")
    def _something_and_consistent(self) -> Impair:
        if self.reorder_percent > 0 and self.reorder_delay_us <= 0:
            raise ValueError("reorder_delay_us: must be > 0 when reorder_percent is set")
        if not any(
            (self.gilbert_elliott, self.jitter_us, self.reorder_percent, self.corrupt_percent,
             self.duplicate_percent)
        ):  # fmt: skip
            raise ValueError(
                "impair: names no impairment (gilbert_elliott, jitter_us, reorder_percent, "
                "corrupt_percent or duplicate_percent)"
            )
        return self

    @property
    def is_failure(self) -> bool:
        ge = self.gilbert_elliott
        lossy = ge is not None and (ge.loss_good > 0 or (ge.p > 0 and ge.loss_bad > 0))
        return lossy or self.corrupt_percent > 0

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


def _by_tag(models: Iterable[type[BaseModel]], tag: str) -> dict[str, type[BaseModel]]:
    return {get_args(m.model_fields[tag].annotation)[0]: m for m in models}


EVENT_MODELS = _by_tag((*LINK_EVENTS, SwitchDown, SwitchUp, PlaneDown, PlaneUp), "action")
WORKLOAD_MODELS_BY_KIND = _by_tag(WORKLOAD_MODELS, "kind")
ACTIONS: tuple[str, ...] = tuple(EVENT_MODELS)
WORKLOAD_KINDS: tuple[str, ...] = tuple(WORKLOAD_MODELS_BY_KIND)


STATISTICS: tuple[str, ...] = ("median", "worst")
"""How repeated runs are judged: on the median over the valid repetitions, or on the worst."""


class Expect(StrictModel):
    """What the run must show; an absent key is not checked.

    `statistic` says what a repeated run (`seeds`, `--repeat`) is judged on: one run's value
    varies from seed to seed (failover 0-19 ms over 12 runs here), so a claim is made about the
    median of the valid repetitions, or, for a stricter claim, about the worst of them."""

    statistic: Literal[STATISTICS] = "median"  # type: ignore[valid-type]
    delivered_all: bool | None = None
    max_stall_ms: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    min_goodput_fraction: float | None = Field(default=None, gt=0, le=1)
    max_failover_ms: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    max_p100_over_p50: float | None = Field(default=None, ge=1, allow_inf_nan=False)


ENDPOINT_TRANSPORT_NAMES: tuple[str, ...] = ("mrc", "single-path", "spray-no-failover", "roce")


class CcSpec(StrictModel):
    """NSCC's parameters (endpoint.nscc; UET 1.0 Table 3-82 defaults), named as MRC's controller
    API names them; times in virtual µs. Omitted ones keep the defaults (docs/transport.md)."""

    base_rtt_us: float | None = Field(default=None, gt=0, le=1e7, allow_inf_nan=False)
    target_delay_us: float | None = Field(default=None, gt=0, le=1e7, allow_inf_nan=False)
    target_rtts: float | None = Field(default=None, gt=0, le=100, allow_inf_nan=False)
    max_window: float | None = Field(default=None, gt=0, le=1000, allow_inf_nan=False)
    gamma: float | None = Field(default=None, ge=0, le=1, allow_inf_nan=False)
    max_md_jump: float | None = Field(default=None, gt=0, le=1, allow_inf_nan=False)
    fi: float | None = Field(default=None, ge=0, le=1e6, allow_inf_nan=False)
    fi_scale: float | None = Field(default=None, ge=0, le=1e6, allow_inf_nan=False)
    eta: float | None = Field(default=None, ge=0, le=1e6, allow_inf_nan=False)
    alpha: float | None = Field(default=None, ge=0, le=1e6, allow_inf_nan=False)
    qa_gate: int | None = Field(default=None, ge=0, le=31)
    qa_threshold: float | None = Field(default=None, ge=0, le=1e6, allow_inf_nan=False)
    disable_qa: bool | None = None
    adjust_bytes_threshold: int | None = Field(default=None, ge=1, le=1_000_000)
    adjust_period_threshold: float | None = Field(default=None, gt=0, le=1e6, allow_inf_nan=False)

    def transport_config(self) -> dict[str, Any]:
        """These as endpoint.config.TransportConfig fields (seconds where it counts seconds)."""
        out: dict[str, Any] = {}
        for key, value in self.model_dump(exclude_none=True).items():
            if key == "base_rtt_us":
                out["base_rtt"] = value * 1e-6
            elif key == "target_delay_us":
                out["target_qdelay"] = value * 1e-6
            else:
                out[key] = value
        return out


MRC_QP_KEYS = ("ack_timeout", "retry_linear_cnt", "retry_exp_cnt")
"""TransportSpec's keys for MRC's QP attributes (endpoint.config.TransportConfig)."""


class TransportSpec(StrictModel):
    """One configuration of an endpoint transport, run and reported under its own label:
    `{name: mrc, label: mrc-16ev, evs: 16}`. A bare name means its defaults."""

    name: Literal[ENDPOINT_TRANSPORT_NAMES]  # type: ignore[valid-type]
    label: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9_-]*$", max_length=32)
    evs: int | None = Field(default=None, ge=1, le=256)
    ev_profile: Literal["auto", "explicit", "generated"] | None = None
    # ev_profile explicit: the EVs (UDP source ports) themselves, as MRC's EXPLICIT profile.
    explicit_evs: list[Annotated[int, Field(ge=1, le=65535)]] | None = Field(
        default=None, min_length=1, max_length=256
    )
    # How packets spread over the EVs (endpoint.config.LB_POLICIES): wrr, oblivious, reps.
    lb: Literal["wrr", "oblivious", "reps"] | None = None
    # Does an ECN echo lower its EV's weight, not only a trim? Unset: yes, unless the EVs are
    # generated (endpoint.config.TransportConfig.ev_weight_on_ecn says why).
    ev_weight_on_ecn: bool | None = None
    # roce: the RC local ACK timeout exponent (4.096 µs x 2^t) and retry count.
    rc_timeout: int | None = Field(default=None, ge=0, le=31)
    rc_retry_cnt: int | None = Field(default=None, ge=0, le=7)
    # mrc, spray-no-failover: MRC's QP attributes (mrc_qp_attr): the local ACK timeout
    # exponent (1.024 µs x 2^t of virtual time) and the linear / exponential retry limits
    # (exp 25: for ever). Unset: the RTO from measured round trips, retries for ever.
    ack_timeout: int | None = Field(default=None, ge=0, le=24)
    retry_linear_cnt: int | None = Field(default=None, ge=0, le=7)
    retry_exp_cnt: int | None = Field(default=None, ge=0, le=25)
    cc: CcSpec | None = None

    @model_validator(mode="after")
    def _explicit_needs_its_list(self) -> TransportSpec:
        if (self.ev_profile == "explicit") != (self.explicit_evs is not None):
            raise ValueError("explicit_evs: given exactly when ev_profile is explicit")
        if self.explicit_evs is not None and len(set(self.explicit_evs)) != len(self.explicit_evs):
            raise ValueError("explicit_evs: each EV once")
        for key in ("rc_timeout", "rc_retry_cnt"):
            if getattr(self, key) is not None and self.name != "roce":
                raise ValueError(f"{key}: only for name roce (the RC timeout of RoCE NICs)")
        for key in MRC_QP_KEYS:
            if getattr(self, key) is not None and self.name not in ("mrc", "spray-no-failover"):
                raise ValueError(
                    f"{key}: only for name mrc or spray-no-failover (MRC's QP attributes; "
                    "roce has rc_timeout and rc_retry_cnt)"
                )
        return self

    @property
    def key(self) -> str:
        """What runs, results and reports call it: the label, else the name."""
        return self.label or self.name

    def transport_config(self) -> dict[str, Any]:
        """TransportConfig overrides of the endpoints' jobs."""
        out: dict[str, Any] = {}
        if self.ev_profile is not None:
            out["ev_profile"] = self.ev_profile
        if self.explicit_evs is not None:
            out["explicit_evs"] = list(self.explicit_evs)
        if self.lb is not None:
            out["lb"] = self.lb
        if self.ev_weight_on_ecn is not None:
            out["ev_weight_on_ecn"] = self.ev_weight_on_ecn
        for key in ("rc_timeout", "rc_retry_cnt", *MRC_QP_KEYS):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.cc is not None:
            out.update(self.cc.transport_config())
        return out


TransportEntry = Annotated[
    Annotated[Literal[TRANSPORTS], Tag("bare")]  # type: ignore[valid-type]
    | Annotated[TransportSpec, Tag("spec")],
    Discriminator(lambda v: "bare" if isinstance(v, str) else "spec"),
]
"""A transport by name, or one configuration of it (a mapping): never tried as both, so a
mistake is reported once, against what was written."""


class Scenario(StrictModel):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$", max_length=64)
    description: str = ""  # optional: what happens and why it matters
    topology: TopologySpec
    # Names, or configurations of an endpoint transport under their own labels (TransportSpec).
    transport: list[TransportEntry] = Field(default=["mrc"], min_length=1)
    workload: Workload
    duration_s: float = Field(gt=0, le=3600, allow_inf_nan=False)
    seed: int = 1
    # Repetitions: the run once per seed, on fresh fabrics (testbed.experiment.repetitions).
    seeds: list[int] | None = Field(default=None, min_length=1, max_length=1000)
    # A sweep: dotted key path -> the values it takes (testbed.scenario.sweep).
    sweep: dict[str, Annotated[list[Any], Field(min_length=1, max_length=100)]] | None = Field(
        default=None, min_length=1, max_length=3
    )
    emulation: EmulationSpec = EmulationSpec()
    controller: ControllerSpec = ControllerSpec()
    capture: CaptureSpec = CaptureSpec()
    events: list[Event] = []
    # Failure processes drawn from the seed into events of the timeline (random_failures.py).
    random_failures: list[RandomFailureSpec] = []
    expect: Expect = Expect()

    _fabric: Fabric | None = PrivateAttr(default=None)

    @field_validator(
        "transport",
        mode="before",
        json_schema_input_type=Literal[TRANSPORTS]  # type: ignore[valid-type]
        | TransportSpec
        | list[Literal[TRANSPORTS] | TransportSpec],  # type: ignore[valid-type]
    )
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        # `transport: mrc`, `transport: [mrc, tcp]` and `transport: {name: mrc, evs: 16}` all
        # mean a list of transports to run.
        return [value] if isinstance(value, (str, dict)) else value

    @field_validator("transport")
    @classmethod
    def _distinct_keys(cls, value: list) -> list:
        keys = [t if isinstance(t, str) else t.key for t in value]
        for i, t in enumerate(value):
            if isinstance(t, TransportSpec) and t.label in TRANSPORTS and t.label != t.name:
                raise ValueError(f"[{i}].label: {t.label!r} is the name of another transport")
        dup = sorted({k for k in keys if keys.count(k) > 1})
        if dup:
            raise ValueError(f"{dup[0]!r} is listed twice: give each configuration a label")
        return value

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, value: list[int] | None) -> list[int] | None:
        if value is not None:
            dup = sorted({s for s in value if value.count(s) > 1})
            if dup:
                raise ValueError(f"seed {dup[0]} is listed twice: a repetition needs its own seed")
        return value

    @model_validator(mode="before")
    @classmethod
    def _seed_or_seeds(cls, data: Any) -> Any:
        # With `seeds`, `seed` is the first repetition's (so a dumped scenario validates again).
        if isinstance(data, dict) and isinstance(data.get("seeds"), list) and data["seeds"]:
            first = data["seeds"][0]
            if "seed" in data and data["seed"] != first:
                raise ValueError("seeds: give `seed` (one run) or `seeds` (one run each), not both")
            data = {**data, "seed": first}
        return data

    @property
    def run_seeds(self) -> list[int]:
        """The seeds this scenario runs with: its `seeds`, else its one `seed`."""
        return list(self.seeds) if self.seeds else [self.seed]

    @property
    def transports(self) -> list[str]:
        """What each run is called: a transport's name, or its configuration's label."""
        return [t if isinstance(t, str) else t.key for t in self.transport]

    def transport_spec(self, key: str) -> TransportSpec | None:
        """The configuration run as `key` (None: a bare name, its defaults)."""
        return next((t for t in self.transport if not isinstance(t, str) and t.key == key), None)

    def transport_name(self, key: str) -> str:
        """The transport that runs as `key` (its label's, or itself)."""
        spec = self.transport_spec(key)
        return spec.name if spec is not None else key

    def fabric(self) -> Fabric:
        """The pure fabric description (computed once)."""
        if self._fabric is None:
            self._fabric = leaf_spine(self.topology.params())
        return self._fabric

    def random_events(self) -> list[Event]:
        """The events `random_failures` draws from the seed (the same on every call)."""
        drawn = failure_events(self.fabric(), self.random_failures, self.seed, self.duration_s)
        return [EVENT_MODELS[d["action"]].model_validate(d) for d in drawn]  # type: ignore[misc]

    def timeline(self) -> list[Event]:
        """Events in the order they are applied (stable for equal times: the written ones
        first, as written, then the drawn ones)."""
        return sorted([*self.events, *self.random_events()], key=lambda e: e.at)

    def hosts(self) -> list[str]:
        return self.fabric().hosts()


def scenario_json_schema() -> dict[str, Any]:
    """The scenario format as a JSON Schema (draft 2020-12), for editors and CI linters.

    Generated from the same models that validate a file, so it cannot drift from them; it
    checks the shape only: names against the fabric, event times and the other meaning checks
    are `validate`'s, which every `testbed` command that loads the file runs."""
    schema = Scenario.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "mrc-testbed scenario"
    return schema

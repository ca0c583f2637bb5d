"""The scenario file's shape: pydantic models of every key, with the defaults a file may omit.

A scenario (docs/design.md, "Scenario file (YAML)") names a topology, the transports to compare, one
workload (whose kinds are `contracts.workloads`, shared with the endpoints' job requests), a
timeline of failure events and what the run must show. These models check types and ranges
only; what the values mean against the fabric is `testbed.scenario.validation`'s job.
The timeline's events are `testbed.scenario.events`, the transports'
configurations `testbed.scenario.transports`; this module re-exports both.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator

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
    TraceWorkload,
    Workload,
)
from testbed.scenario.events import (
    ACTIONS,
    EVENT_MODELS,
    FAILURE_ACTIONS,
    LINK_EVENTS,
    RECOVERY_ACTIONS,
    Blackhole,
    Degrade,
    Event,
    Flap,
    Heal,
    Impair,
    LinkDown,
    LinkEvent,
    LinkUp,
    Loss,
    PlaneDown,
    PlaneEvent,
    PlaneUp,
    SwitchDown,
    SwitchEvent,
    SwitchUp,
    models_by_tag,
)
from testbed.scenario.random_failures import RandomFailureSpec, failure_events
from testbed.scenario.transports import (
    ENDPOINT_TRANSPORT_NAMES,
    TRANSPORTS,
    CcSpec,
    TransportEntry,
    TransportSpec,
)
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
    "TraceWorkload",
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


WORKLOAD_MODELS_BY_KIND = models_by_tag(WORKLOAD_MODELS, "kind")
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

"""Workload kinds: one schema for the scenario file and for the endpoints' job requests.

A scenario's ``workload:`` and the workload of a job the runner (or a test, or a bench) asks an
endpoint process to run are the same thing at two levels, so they are the same models here:
the scenario kinds (`BulkWorkload` ... `AllreduceWorkload`), and for a job each of them
extended (`BulkJob` ...) by what only an endpoint needs -- how flows are cut into messages
(``message_bytes``, ``window_messages``), an explicit ``pairs`` list for a permutation, the
``flows`` kind (any matrix: the runner sends every flow workload as one, since the scenario's
permutation is drawn against the fabric's leaves) -- and by the defaults a hand-written request
may rely on (``srcs: all``, ``steps: 1``, zero-byte flows). The checks against a host list
(`check_hosts`) and the expansion into flows (`flows_of`) are defined once here too, so the
scenario validator and the endpoint agree on what a workload means.

Sizes are whole bytes as `contracts.sizes` reads them (``20MB``, ``64KiB``, ``4096``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, ClassVar, Literal

from pydantic import BeforeValidator, Field, Strict, TypeAdapter, ValidationError

from contracts.schema import StrictModel, format_loc, reason_of
from contracts.sizes import SizeError, parse_size

MAX_STEPS = 100_000
DEFAULT_MESSAGE_BYTES = 1 << 20
DEFAULT_WINDOW_MESSAGES = 4
MAX_MESSAGE_BYTES = 64 << 20
MAX_WINDOW_MESSAGES = 1024


class WorkloadSpecError(ValueError):
    """A workload that cannot run. `str()` is ``key.path: reason``."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}" if path else reason)


def _bytes(value: object) -> int:
    try:
        return parse_size(value)
    except SizeError as exc:
        raise ValueError(str(exc)) from None


def _positive_bytes(value: object) -> int:
    nbytes = _bytes(value)
    if nbytes <= 0:
        raise ValueError("must be more than 0 bytes")
    return nbytes


# In the JSON Schema (`testbed schema`) a size is what a file may write: a number of bytes or a
# string such as "20MB" or "64KiB"; the validator turns either into whole bytes.
_SIZE_INPUT = int | str
Bytes = Annotated[int, BeforeValidator(_bytes, json_schema_input_type=_SIZE_INPUT)]
"""A size in whole bytes, zero allowed (an endpoint job may send an empty message)."""
PositiveBytes = Annotated[int, BeforeValidator(_positive_bytes, json_schema_input_type=_SIZE_INPUT)]
"""A size in whole bytes, more than zero (what a scenario may ask for)."""
HostName = Annotated[str, Field(min_length=1)]
Hosts = list[HostName] | Literal["all"]
# JSON has no tuples: a [src, dst] pair is a list, so these two accept lists (and only those
# fixed shapes) although the models are strict.
_Pair = Annotated[tuple[HostName, HostName], Strict(False)]
_FlowItem = Annotated[tuple[HostName, HostName, Bytes], Strict(False)]


# ----- what a scenario may ask for --------------------------------------------------------------


class BulkWorkload(StrictModel):
    """One transfer of `bytes` from `src` to `dst`."""

    kind: Literal["bulk"]
    src: HostName
    dst: HostName
    bytes: PositiveBytes


class PermutationWorkload(StrictModel):
    """Every host sends `bytes` to one other host and receives from one."""

    kind: Literal["permutation"]
    bytes: PositiveBytes


class IncastWorkload(StrictModel):
    """Each of `srcs` (a list, or ``all`` = every other host) sends `bytes` to `dst` at once."""

    kind: Literal["incast"]
    dst: HostName
    srcs: Hosts
    bytes: PositiveBytes


class AlltoallWorkload(StrictModel):
    """Every host sends `bytes` to every other host at once."""

    kind: Literal["alltoall"]
    bytes: PositiveBytes


class AllreduceWorkload(StrictModel):
    """`steps` back-to-back ring all-reduces of a `bytes` buffer held by each of `hosts`."""

    min_ranks: ClassVar[int] = 2  # a scenario's ring must be a ring

    kind: Literal["allreduce"]
    hosts: Hosts = "all"
    bytes: PositiveBytes
    steps: int = Field(ge=1, le=MAX_STEPS)


class TraceWorkload(StrictModel):
    """A training iteration read from a trace `file` (docs/workloads.md), replayed
    `iterations` times by `hosts` in order (rank i is the i-th host)."""

    min_ranks: ClassVar[int] = 1

    kind: Literal["trace"]
    # astra-text: the file; chakra: the files' prefix (`<file>.<rank>.et`).
    file: Annotated[str, Field(min_length=1)]
    format: Literal["astra-text", "chakra"] = "astra-text"
    # What an astra-text file's compute times count (the format does not say: ASTRA-sim reads
    # cycles, AICB writes nanoseconds); `cycles` needs `cycle_ghz`. Chakra's are microseconds.
    time_unit: Literal["ns", "us", "ms", "cycles"] | None = None
    cycle_ghz: float | None = Field(None, gt=0, allow_inf_nan=False)
    iterations: int = Field(1, ge=1, le=MAX_STEPS)
    hosts: Hosts = "all"
    # The algorithm of each collective kind (contracts.trace.ALGORITHMS; unset: the first).
    algorithms: dict[Literal["allreduce", "allgather", "reducescatter", "alltoall"], str] = Field(
        default_factory=dict
    )
    # A slow GPU: every compute node of these hosts takes this many times its traced time.
    stragglers: dict[HostName, Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(
        default_factory=dict
    )
    # Compute noise: each compute node's time times (1 + compute_jitter x a standard normal
    # draw), never below zero; drawn from the run's seed, per host, iteration and node.
    compute_jitter: float = Field(0.0, ge=0, le=1, allow_inf_nan=False)


WORKLOAD_MODELS = (
    BulkWorkload,
    PermutationWorkload,
    IncastWorkload,
    AlltoallWorkload,
    AllreduceWorkload,
    TraceWorkload,
)
Workload = Annotated[
    BulkWorkload
    | PermutationWorkload
    | IncastWorkload
    | AlltoallWorkload
    | AllreduceWorkload
    | TraceWorkload,
    Field(discriminator="kind"),
]


# ----- what an endpoint job may be asked --------------------------------------------------------


class _Messages(StrictModel):
    """How an endpoint cuts a flow into messages: `message_bytes` each, `window_messages` posted
    ahead per connection."""

    message_bytes: Annotated[
        int,
        BeforeValidator(_bytes, json_schema_input_type=_SIZE_INPUT),
        Field(ge=1, le=MAX_MESSAGE_BYTES),
    ] = DEFAULT_MESSAGE_BYTES
    window_messages: int = Field(DEFAULT_WINDOW_MESSAGES, ge=1, le=MAX_WINDOW_MESSAGES)


class BulkJob(BulkWorkload, _Messages):
    bytes: Bytes


class PermutationJob(PermutationWorkload, _Messages):
    """Without `pairs`, hosts in config order send to the host half the list further on."""

    bytes: Bytes
    pairs: list[_Pair] | None = None


class IncastJob(IncastWorkload, _Messages):
    srcs: Hosts = "all"
    bytes: Bytes


class AlltoallJob(AlltoallWorkload, _Messages):
    bytes: Bytes


class FlowsJob(_Messages):
    """Any traffic matrix: ``flows: [[src, dst, bytes], ...]``, all at once."""

    kind: Literal["flows"]
    flows: Annotated[list[_FlowItem], Field(min_length=1)]


class AllreduceJob(AllreduceWorkload, _Messages):
    min_ranks: ClassVar[int] = 1  # a one-rank ring runs (and finishes at once)

    bytes: Bytes
    steps: int = Field(1, ge=1, le=MAX_STEPS)


class TraceJob(StrictModel):
    """One iteration's graph (`contracts.trace.graph_to_dict`), run `iterations` times by the
    hosts `ranks` (rank i is ranks[i]); the runner reads and checks the trace file and sends
    the graph itself, so every endpoint runs what was validated."""

    kind: Literal["trace"]
    ranks: Annotated[list[HostName], Field(min_length=1)]
    iterations: int = Field(1, ge=1, le=MAX_STEPS)
    graph: dict
    stragglers: dict[HostName, Annotated[float, Field(gt=0, allow_inf_nan=False)]] = Field(
        default_factory=dict
    )
    compute_jitter: float = Field(0.0, ge=0, le=1, allow_inf_nan=False)
    seed: int = 0


JOB_MODELS = (BulkJob, PermutationJob, IncastJob, AlltoallJob, FlowsJob, AllreduceJob, TraceJob)
JobWorkload = Annotated[
    BulkJob | PermutationJob | IncastJob | AlltoallJob | FlowsJob | AllreduceJob | TraceJob,
    Field(discriminator="kind"),
]
JOB_KINDS: tuple[str, ...] = (
    "bulk",
    "permutation",
    "incast",
    "alltoall",
    "flows",
    "allreduce",
    "trace",
)
_JOB = TypeAdapter(JobWorkload)


def parse_job(spec: object, hosts: Sequence[str], path: str = "workload") -> JobWorkload:
    """An endpoint job's workload, validated against the job's `hosts`; raises
    WorkloadSpecError naming the key path (the first problem only)."""
    try:
        workload = _JOB.validate_python(spec)
    except ValidationError as exc:
        raise _first_error(exc, path) from None
    check_hosts(workload, hosts, path)
    return workload


def _first_error(exc: ValidationError, path: str) -> WorkloadSpecError:
    errors = exc.errors(include_url=False)
    err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = tuple(err["loc"])
    if loc and loc[0] in JOB_KINDS:  # the discriminator's tag, not a key of the spec
        loc = loc[1:]
    where = format_loc(loc, path)
    kind = err["type"]
    if kind == "extra_forbidden":
        return WorkloadSpecError(where, "unknown key")
    if kind == "missing":
        return WorkloadSpecError(where, "required")
    if kind == "union_tag_invalid":
        tag = err["input"].get("kind") if isinstance(err["input"], dict) else err["input"]
        return WorkloadSpecError(
            f"{where}.kind", f"unknown kind {tag!r} (one of {', '.join(JOB_KINDS)})"
        )
    if kind == "union_tag_not_found":
        return WorkloadSpecError(f"{where}.kind", "required")
    return WorkloadSpecError(where, reason_of(err))


# ----- meaning against a host list --------------------------------------------------------------


def check_hosts(workload: StrictModel, hosts: Sequence[str], path: str = "workload") -> None:
    """Raise WorkloadSpecError if `workload` names a host not in `hosts`, lists one twice, or
    sends from a host to itself: what no schema can know without the fabric's hosts."""
    known = set(hosts)

    def host(where: str, name: str) -> None:
        if name not in known:
            raise WorkloadSpecError(where, f"no host named {name}")

    w = workload
    if isinstance(w, BulkWorkload):
        host(f"{path}.src", w.src)
        host(f"{path}.dst", w.dst)
        if w.src == w.dst:
            raise WorkloadSpecError(f"{path}.dst", f"same host as {path}.src ({w.src})")
    elif isinstance(w, IncastWorkload):
        host(f"{path}.dst", w.dst)
        if w.srcs != "all":
            _check_host_list(f"{path}.srcs", w.srcs, host, minimum=1)
            if w.dst in w.srcs:
                raise WorkloadSpecError(f"{path}.srcs", f"contains the destination {w.dst}")
    elif isinstance(w, AllreduceWorkload | TraceWorkload):
        if w.hosts != "all":
            _check_host_list(f"{path}.hosts", w.hosts, host, minimum=w.min_ranks)
        if isinstance(w, TraceWorkload):
            ranks = set(workload_hosts(w, hosts))
            for name in w.stragglers:
                host(f"{path}.stragglers.{name}", name)
                if name not in ranks:
                    raise WorkloadSpecError(f"{path}.stragglers.{name}", "not one of the ranks")
    elif isinstance(w, PermutationJob):
        if w.pairs is None and len(hosts) < 2:
            raise WorkloadSpecError(path, "a permutation needs two hosts")
        for i, (src, dst) in enumerate(w.pairs or ()):
            _check_pair(f"{path}.pairs[{i}]", src, dst, host)
    elif isinstance(w, FlowsJob):
        for i, (src, dst, _) in enumerate(w.flows):
            _check_pair(f"{path}.flows[{i}]", src, dst, host)
    elif isinstance(w, TraceJob):
        _check_host_list(f"{path}.ranks", w.ranks, host, minimum=1)
        for name in w.stragglers:
            if name not in w.ranks:
                raise WorkloadSpecError(f"{path}.stragglers.{name}", "not one of the ranks")


def _check_host_list(where: str, names: list[str], host, minimum: int) -> None:
    for j, name in enumerate(names):
        host(f"{where}[{j}]", name)
        if name in names[:j]:
            raise WorkloadSpecError(f"{where}[{j}]", f"{name} is listed twice")
    if len(names) < minimum:
        raise WorkloadSpecError(where, f"needs at least {minimum} hosts, got {len(names)}")


def _check_pair(where: str, src: str, dst: str, host) -> None:
    host(f"{where}[0]", src)
    host(f"{where}[1]", dst)
    if src == dst:
        raise WorkloadSpecError(f"{where}[1]", f"same host as {where}[0] ({src})")


# ----- the traffic a workload asks for ----------------------------------------------------------


@dataclass(frozen=True)
class Flow:
    """One transfer the workload asks for (for allreduce: one ring hop of one step)."""

    src: str
    dst: str
    bytes: int


def ring(workload: AllreduceWorkload, hosts: Sequence[str]) -> list[str]:
    """The all-reduce ring: `workload.hosts` in their order, or every host in `hosts` order."""
    return list(hosts) if workload.hosts == "all" else list(workload.hosts)


def allreduce_per_hop(ranks: int, nbytes: int) -> int:
    """Bytes each rank sends to the next per step: reduce-scatter then all-gather move
    2(N-1)/N of the buffer over every hop of the ring (rounded up)."""
    return math.ceil(2 * (ranks - 1) * nbytes / ranks) if ranks > 1 else 0


def workload_hosts(workload: StrictModel, hosts: Sequence[str]) -> list[str]:
    """The hosts that take part, in `hosts` order (an all-reduce ring: in ring order)."""
    w = workload
    if isinstance(w, BulkWorkload):
        return [h for h in hosts if h in (w.src, w.dst)]
    if isinstance(w, IncastWorkload):
        srcs = [h for h in hosts if h != w.dst] if w.srcs == "all" else w.srcs
        return [h for h in hosts if h in srcs or h == w.dst]
    if isinstance(w, AllreduceWorkload):
        return ring(w, hosts)
    if isinstance(w, TraceWorkload):
        return list(hosts) if w.hosts == "all" else list(w.hosts)
    if isinstance(w, TraceJob):
        return list(w.ranks)
    return list(hosts)


def flows_of(workload: StrictModel, hosts: Sequence[str]) -> list[Flow]:
    """The flows of a checked workload among `hosts`.

    allreduce: one step's ring hops (`allreduce_per_hop` bytes each). permutation: its `pairs`,
    else each host in `hosts` order sends to the host half the list further on (the scenario
    draws its own against the fabric's leaves: `testbed.scenario.flows`).
    """
    w = workload
    if isinstance(w, BulkWorkload):
        return [Flow(w.src, w.dst, w.bytes)]
    if isinstance(w, IncastWorkload):
        return [Flow(h, w.dst, w.bytes) for h in workload_hosts(w, hosts) if h != w.dst]
    if isinstance(w, AlltoallWorkload):
        return [Flow(a, b, w.bytes) for a in hosts for b in hosts if a != b]
    if isinstance(w, FlowsJob):
        return [Flow(src, dst, n) for src, dst, n in w.flows]
    if isinstance(w, AllreduceWorkload):
        r = ring(w, hosts)
        n = len(r)
        per_hop = allreduce_per_hop(n, w.bytes)
        return [Flow(r[i], r[(i + 1) % n], per_hop) for i in range(n)]
    if isinstance(w, TraceWorkload | TraceJob):
        # Its traffic is in the trace's graph: testbed.scenario.trace_workload.trace_flows.
        raise TypeError("a trace workload's flows come from its graph (trace_flows)")
    assert isinstance(w, PermutationWorkload)
    pairs = getattr(w, "pairs", None)
    if pairs is not None:
        return [Flow(src, dst, w.bytes) for src, dst in pairs]
    shift = max(1, len(hosts) // 2)
    return [Flow(h, hosts[(i + shift) % len(hosts)], w.bytes) for i, h in enumerate(hosts)]

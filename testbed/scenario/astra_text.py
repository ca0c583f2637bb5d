"""The layer-per-line text workload of ASTRA-sim and its forks (SimAI/AICB), read into a trace.

Written here from the format's public description (ASTRA-sim's workload README and the
comments of its parser), not from its code. The file:

    HYBRID_TRANSFORMER model_parallel_NPU_group: 4 ep: 1 pp: 1 all_gpus: 16
    2
    attn  -1  1000 ALLREDUCE 1048576  1000 ALLREDUCE 1048576  1000 ALLREDUCE 8388608  10
    mlp   -1  2000 NONE      0        2000 NONE      0        2000 ALLREDUCE 33554432 10

Line 1 is the parallelism policy and `key: value` pairs; line 2 the number of layers; then a
layer per line: name, a reserved dependency field, then for the forward pass, the input
gradient and the weight gradient each a compute time, a collective type and its size in bytes,
and last the time of the weight update once the weight-gradient collective is done. Fields
beyond the twelfth (the customised and inference policies' extras) are not read.

Which ranks a collective spans follows the policy, as in ASTRA-sim: `DATA` runs only the
weight-gradient collectives, over every rank; `MODEL` only the forward and input-gradient ones,
over every rank; the `HYBRID_TRANSFORMER` policies run the forward and input-gradient ones in
the model-parallel (tensor-parallel) group of `model_parallel_NPU_group` consecutive ranks and
the weight-gradient ones in the data-parallel group (ranks with the same position in their
tensor-parallel group). A type suffixed `_EP` runs in the expert-parallel group (`ep:`
consecutive data-parallel replicas), `_DP_EP` across those groups. Pipeline parallelism
(`pp:` > 1) and activation checkpointing are not modelled: a file that asks for them fails.

The iteration on every rank, with the GPU's compute in one stream and collectives beside it:
forward layer by layer (compute, then its collective, which the next layer waits for); then
backward from the last layer (input-gradient compute and collective, both waited for; weight-
gradient compute, whose collective runs while the backward goes on, then the update). The
iteration ends when all of it has finished.
"""

from __future__ import annotations

from pathlib import Path

from contracts.trace import COLLECTIVE, COMPUTE, Node, TraceError, TraceGraph, validate

POLICIES = ("DATA", "MODEL", "HYBRID_TRANSFORMER", "HYBRID_TRANSFORMER_FWD_IN_BCKWD")
TYPES = {
    "ALLREDUCE": "allreduce",
    "ALLGATHER": "allgather",
    "REDUCESCATTER": "reducescatter",
    "ALLTOALL": "alltoall",
}
TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "cycles": None}
PHASES = ("fwd", "ig", "wg")
FIELDS = 12


def read_astra_text(
    path: str | Path,
    ranks: int,
    time_unit: str,
    cycle_ghz: float | None = None,
    algorithms: dict[str, str] | None = None,
) -> TraceGraph:
    """The file at `path` as one iteration on `ranks` ranks; TraceError (one line, naming the
    file and line) if it cannot run. `time_unit` says what the compute times count (the format
    does not: ASTRA-sim reads cycles, AICB writes nanoseconds); `cycles` needs `cycle_ghz`."""
    path = Path(path)
    if time_unit not in TIME_UNITS:
        raise TraceError(f"time_unit: one of {', '.join(TIME_UNITS)}, got {time_unit!r}")
    if time_unit == "cycles":
        if not isinstance(cycle_ghz, int | float) or not cycle_ghz > 0:
            raise TraceError(f"cycle_ghz: a clock in GHz > 0 to read cycles, got {cycle_ghz!r}")
        scale = 1e-9 / cycle_ghz
    else:
        scale = TIME_UNITS[time_unit]
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror or exc}") from None
    src = str(path)
    policy, header = _header(src, lines)
    layers = _layers(src, lines)
    groups, group_of = _groups(src, policy, header, ranks)
    nodes = tuple(
        _rank_nodes(src, r, layers, policy, group_of, scale, algorithms or {}) for r in range(ranks)
    )
    meta = {"format": "astra-text", "policy": policy, **header, "layers": len(layers)}
    used = {n.group for rank_nodes in nodes for n in rank_nodes if n.group}
    groups = {name: members for name, members in groups.items() if name in used}
    return validate(TraceGraph(src, ranks, groups, nodes, meta))


def _header(src: str, lines: list[str]) -> tuple[str, dict[str, int]]:
    if not lines or not lines[0].split():
        raise TraceError(f"{src}: line 1: expected the parallelism policy, found nothing")
    tokens = lines[0].split()
    policy = tokens[0]
    if policy not in POLICIES:
        raise TraceError(f"{src}: line 1: policy: one of {', '.join(POLICIES)}, got {policy!r}")
    header: dict[str, int] = {}
    i = 1
    while i < len(tokens):
        key = tokens[i]
        if not key.endswith(":") or i + 1 >= len(tokens):
            raise TraceError(f"{src}: line 1: expected 'key: value' pairs, got {key!r}")
        try:
            header[key[:-1]] = int(tokens[i + 1])
        except ValueError:
            raise TraceError(
                f"{src}: line 1: {key[:-1]}: expected an integer, got {tokens[i + 1]!r}"
            ) from None
        i += 2
    if header.get("pp", 1) != 1:
        raise TraceError(
            f"{src}: line 1: pp: pipeline parallelism is not modelled, got {header['pp']}"
        )
    if header.get("checkpoints", 0):
        raise TraceError(f"{src}: line 1: checkpoints: activation recompute is not modelled")
    return policy, header


def _layers(src: str, lines: list[str]) -> list[tuple[int, list[str]]]:
    if len(lines) < 2:
        raise TraceError(f"{src}: line 2: expected the number of layers, found nothing")
    try:
        count = int(lines[1].strip())
    except ValueError:
        raise TraceError(
            f"{src}: line 2: expected the number of layers, got {lines[1].strip()!r}"
        ) from None
    rows = [(i + 3, line.split()) for i, line in enumerate(lines[2:]) if line.strip()]
    if len(rows) != count:
        raise TraceError(f"{src}: line 2: {count} layers declared, {len(rows)} found")
    for lineno, fields in rows:
        if len(fields) < FIELDS:
            raise TraceError(
                f"{src}: line {lineno} ({fields[0]}): expected {FIELDS} fields, got {len(fields)}"
            )
    return rows


def _groups(
    src: str, policy: str, header: dict[str, int], ranks: int
) -> tuple[dict[str, tuple[int, ...]], dict[tuple[str, int], str]]:
    """Every group the policy uses and, per (kind, rank), the name of the rank's group of that
    kind: `all`, `tp` (forward/input gradient), `dp` (weight gradient), `ep`, `dpep`."""
    if "all_gpus" in header and header["all_gpus"] != ranks:
        raise TraceError(
            f"{src}: line 1: all_gpus: {header['all_gpus']} in the file, "
            f"the workload runs on {ranks} hosts"
        )
    tp = header.get("model_parallel_NPU_group", 1) if policy.startswith("HYBRID") else 1
    if tp < 1 or ranks % tp:
        raise TraceError(
            f"{src}: line 1: model_parallel_NPU_group: must divide the {ranks} ranks, got {tp}"
        )
    dp = ranks // tp
    ep = header.get("ep", 1)
    if ep < 1 or dp % ep:
        raise TraceError(f"{src}: line 1: ep: must divide the {dp} data-parallel ranks, got {ep}")
    groups: dict[str, tuple[int, ...]] = {"all": tuple(range(ranks))}
    of: dict[tuple[str, int], str] = {}
    for r in range(ranks):
        t, d = r % tp, r // tp  # tensor-parallel ranks are consecutive (Megatron's layout)
        names = {
            "all": "all",
            "tp": f"tp{d}",
            "dp": f"dp{t}",
            "ep": f"ep{t}.{d // ep}",
            "dpep": f"dpep{t}.{d % ep}",
        }
        members = {
            "tp": tuple(d * tp + i for i in range(tp)),
            "dp": tuple(i * tp + t for i in range(dp)),
            "ep": tuple((d // ep * ep + i) * tp + t for i in range(ep)),
            "dpep": tuple((j * ep + d % ep) * tp + t for j in range(dp // ep)),
        }
        for kind, name in names.items():
            of[(kind, r)] = name
            if kind != "all":
                groups[name] = members[kind]
    return groups, of


def _group_kind(src: str, lineno: int, layer: str, policy: str, phase: str, ctype: str) -> str:
    suffix = ctype.split("_", 1)[1] if "_" in ctype else ""
    if suffix == "EP":
        return "ep"
    if suffix == "DP_EP":
        return "dpep"
    if suffix:
        raise TraceError(
            f"{src}: line {lineno} ({layer}): {phase} type: unknown group in {ctype!r}"
        )
    if policy == "DATA":
        if phase != "wg":
            raise TraceError(
                f"{src}: line {lineno} ({layer}): {phase} type: DATA runs only weight-gradient "
                f"collectives, got {ctype}"
            )
        return "all"
    if policy == "MODEL":
        if phase == "wg":
            raise TraceError(
                f"{src}: line {lineno} ({layer}): wg type: MODEL runs no weight-gradient "
                f"collectives, got {ctype}"
            )
        return "all"
    return "dp" if phase == "wg" else "tp"


def _rank_nodes(
    src: str,
    rank: int,
    layers: list[tuple[int, list[str]]],
    policy: str,
    group_of: dict[tuple[str, int], str],
    scale: float,
    algorithms: dict[str, str],
) -> tuple[Node, ...]:
    nodes: list[Node] = []

    def add(**kw) -> int:
        nodes.append(Node(id=len(nodes), **kw))
        return len(nodes) - 1

    def compute(name: str, t: float, after: int | None) -> int | None:
        if t <= 0:
            return after
        return add(name=name, kind=COMPUTE, deps=_deps(after), duration_s=t)

    def collective(i: int, lineno: int, name: str, phase: str, ctype: str, size: int, after):
        if ctype == "NONE" or size == 0:
            return None
        base = ctype.split("_", 1)[0]
        if base not in TYPES:
            raise TraceError(
                f"{src}: line {lineno} ({name}): {phase} type: one of NONE, "
                f"{', '.join(TYPES)} (optionally _EP or _DP_EP), got {ctype!r}"
            )
        group = group_of[(_group_kind(src, lineno, name, policy, phase, ctype), rank)]
        kind = TYPES[base]
        return add(
            name=f"{name}.{phase}.{kind}",
            kind=COLLECTIVE,
            deps=_deps(after),
            collective=kind,
            algorithm=algorithms.get(kind, ""),
            group=group,
            comm=f"L{i}.{phase}.{group}",
            nbytes=size,
        )

    parsed = [(lineno, f[0], _numbers(src, lineno, f, scale)) for lineno, f in layers]
    prev: int | None = None
    for i, (lineno, name, (times, types, sizes, _)) in enumerate(parsed):
        prev = compute(f"{name}.fwd", times[0], prev)
        c = collective(i, lineno, name, "fwd", types[0], sizes[0], prev)
        prev = c if c is not None else prev
    for i in range(len(parsed) - 1, -1, -1):
        lineno, name, (times, types, sizes, update) = parsed[i]
        prev = compute(f"{name}.ig", times[1], prev)
        c = collective(i, lineno, name, "ig", types[1], sizes[1], prev)
        prev = c if c is not None else prev
        prev = compute(f"{name}.wg", times[2], prev)
        c = collective(i, lineno, name, "wg", types[2], sizes[2], prev)
        if c is not None:  # runs beside the rest of the backward pass; the update waits for it
            compute(f"{name}.update", update, c)
    return tuple(nodes)


def _deps(after: int | None) -> tuple[int, ...]:
    return () if after is None else (after,)


def _numbers(src: str, lineno: int, f: list[str], scale: float):
    """(compute times in virtual s, collective types, sizes in bytes, update time) of a row."""
    name = f[0]
    labels = ("fwd compute", "fwd size", "ig compute", "ig size", "wg compute", "wg size", "update")
    at = (2, 4, 5, 7, 8, 10, 11)
    vals = []
    for label, k in zip(labels, at, strict=True):
        try:
            v = int(f[k])
        except ValueError:
            raise TraceError(
                f"{src}: line {lineno} ({name}): {label}: expected a whole number, got {f[k]!r}"
            ) from None
        if v < 0:
            raise TraceError(f"{src}: line {lineno} ({name}): {label}: must be >= 0, got {v}")
        vals.append(v)
    times = (vals[0] * scale, vals[2] * scale, vals[4] * scale)
    return times, (f[3], f[6], f[9]), (vals[1], vals[3], vals[5]), vals[6] * scale

"""What a harness hands to the analysis for one transport: plain records, no computation.

The endpoint harness (from the endpoints' metrics files) and the kernel baselines (from iperf3
and the hosts' counters) both reduce a run to these, so the analysis (testbed.analysis.metrics)
has one input whatever carried the bytes. The raw endpoint records of a finished run are read
here too (`endpoint_records`): the results frames and the benches read them, and reading them
must not cost an import of pandas.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def path_name(node: str) -> str:
    """How per-EV traffic names its path (its spine, or the leaf within one leaf): the key of
    `TransportRun.ev_bytes`, and of the plots' path colours."""
    return f"via {node}"


@dataclass(frozen=True)
class Message:
    """A unit of application data: posted at `start_s`, complete at `done_s` (None = never)."""

    start_s: float
    bytes: int
    done_s: float | None


@dataclass(frozen=True)
class Failure:
    """One EV that went FAILED: on `host`'s connection to `peer` (an endpoint's `ev` record)."""

    host: str
    peer: str
    ev: int
    t: float  # virtual: the endpoint's clock, or seconds from the workload's start in a run
    # When the connection last sent data on the EV before retiring it, on the same clock:
    # -inf when it never did, None when unknown (a record from before endpoints wrote it).
    last_tx: float | None = None


def failure_of(host: str, r: Mapping, t0: float) -> Failure:
    """An `ev` record of a retirement on `host` as a Failure timed from `t0`; its `last_tx` is
    -inf when the record says the EV never carried data, None when the record predates it."""
    last_tx = None
    if "last_tx" in r:
        last_tx = -math.inf if r["last_tx"] is None else r["last_tx"] - t0
    return Failure(host, r["peer"], r["ev"], r["t"] - t0, last_tx)


@dataclass(frozen=True)
class FlowRecord:
    """One flow of the traffic matrix (one ring hop of an all-reduce): `src` to `dst`.

    `bytes`: what the workload asked it to carry; `acked_bytes`: what the sender saw
    acknowledged; `start_s`: its first message's post (None if it never posted);
    `done_s`: when its last byte was acknowledged (None: unfinished when the run stopped);
    `retransmits`: by reason, this flow's connection only; `placed_bytes`: what the receiver
    placed (its own count, byte by byte; None where nobody counted), which for an unfinished
    flow says more than `acked_bytes`: a sender sees a message acknowledged only whole.
    """

    src: str
    dst: str
    bytes: int
    acked_bytes: int
    start_s: float | None
    done_s: float | None
    retransmits: Mapping[str, int] = field(default_factory=dict)
    placed_bytes: int | None = None


@dataclass
class TransportRun:
    """What the runner collected for one transport (the input of `measure`).

    deliveries: (time, bytes newly delivered) samples, in any order, at any granularity.
    messages: every message the workload posted (flows; for allreduce one per hop per step).
    steps: (start, end or None) of each all-reduce step that started.
    end_s: when measurement stopped.
    retransmits: counts by reason, e.g. {"nack": 12, "timeout": 1, "probe": 3}.
    trims: trimmed packets counted by the switches while this transport ran.
    ev_bytes: optional per-EV (or per-path) sent bytes in `BIN_S` bins, for plots only.
    flows: one record per flow, for per-flow goodput and completion times.
    flow_deliveries: optional (time, bytes delivered) samples per flow (src, dst), for the
    per-flow goodput series of goodput.csv and `testbed.results` (the metrics use `deliveries`).
    """

    transport: str
    deliveries: Sequence[tuple[float, int]]
    messages: Sequence[Message]
    end_s: float
    retransmits: Mapping[str, int] = field(default_factory=dict)
    trims: int = 0
    steps: Sequence[tuple[float, float | None]] = ()
    ev_bytes: Mapping[str, Sequence[float]] = field(default_factory=dict)
    flows: Sequence[FlowRecord] = ()
    flow_deliveries: Mapping[tuple[str, str], Sequence[tuple[float, float]]] = field(
        default_factory=dict
    )
    ev_retirements: int = 0  # EVs that went FAILED, over every connection (endpoint transports)
    ev_failures: Sequence[Failure] = ()  # each of them, by time (from the workload's start)
    qp_errors: int = 0  # QPs that spent their retries and failed (roce; mrc with a retry limit)
    # A trace workload's ranks' records (trace_iter, trace_node), times from the workload's start.
    trace_iters: Sequence[dict] = ()
    trace_nodes: Sequence[dict] = ()


def jsonl_records(path: Path) -> Iterator[dict[str, Any]]:
    """The records of one endpoint's metrics file; a line cut short by a kill is skipped."""
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                yield record


def endpoint_records(raw: Path) -> tuple[dict[str, list[dict[str, Any]]], float | None]:
    """Every endpoint's records by host, and the workload's t0 (the earliest `go`)."""
    files = sorted((raw / "endpoints").glob("*.jsonl"))
    records = {f.stem: list(jsonl_records(f)) for f in files}
    gos = [
        r["t"]
        for recs in records.values()
        for r in recs
        if r.get("type") == "job" and r.get("event") == "go"
    ]
    return records, min(gos) if gos else _go_from_status(raw)


def _go_from_status(raw: Path) -> float | None:
    """The workload's t0 from job_status.json (the earliest host's go), if the records lack it."""
    try:
        status = json.loads((raw / "job_status.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    gos = [s["go_at"] for s in status.values() if isinstance(s, dict) and s.get("go_at")]
    return min(gos) if gos else None

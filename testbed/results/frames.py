"""One leaf run folder's files turned into the rows of each tidy frame (before typing).

Each builder returns a DataFrame with a `transport` column plus the frame's own columns
(`schema.FRAMES`); the loader adds the identity and sweep columns and the dtypes. A file that a
run does not have (no all-reduce: no step_times.csv; a kernel baseline: no endpoint records)
gives no rows, never an exception. The sources, per frame:

- goodput: goodput.csv (long form; an older wide file, one ``<transport>_mbps`` column per
  transport, is read as the transports' totals);
- steps: step_times.csv; flows and runs: summary.json;
- ev_events: the ``ev`` records of raw/<transport>/endpoints/<host>.jsonl, timed from the job's
  ``go`` (the workload's t0, as every other time of the run); collectives: their
  ``trace_node`` records (a trace workload's), timed alike;
- switch_counters: raw/<transport>/switch_counters.json (what `testbed counters` showed at the
  end of the run).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd

from testbed.harness.records import endpoint_records
from testbed.results.tree import Leaf, ResultsError


def _csv(path: Path) -> pd.DataFrame | None:
    if not path.is_file():
        return None
    try:
        return pd.read_csv(path, dtype={"transport": "string", "flow": "string",
                                        "src": "string", "dst": "string"})  # fmt: skip
    except (OSError, ValueError) as exc:
        raise ResultsError(f"{path}: unreadable CSV ({exc})") from None


def goodput(leaf: Leaf) -> pd.DataFrame | None:
    df = _csv(leaf.path / "goodput.csv")
    if df is None or df.empty:
        return None
    if "transport" not in df.columns:  # the wide form of older runs: time_s, <t>_mbps, ...
        wide = [c for c in df.columns if c.endswith("_mbps")]
        df = df.melt(id_vars=["time_s"], value_vars=wide, var_name="transport",
                     value_name="goodput_mbps").dropna(subset=["goodput_mbps"])  # fmt: skip
        df["transport"] = df["transport"].str.removesuffix("_mbps")
        df["flow"] = "all"
    return df


def steps(leaf: Leaf) -> pd.DataFrame | None:
    df = _csv(leaf.path / "step_times.csv")
    if df is None or df.empty:
        return None
    # Older runs wrote the word "unfinished" in step_ms: a number or NaN, and the flag says why.
    df["step_ms"] = pd.to_numeric(df["step_ms"], errors="coerce")
    if "finished" not in df.columns:
        df["finished"] = df["step_ms"].notna()
    df["finished"] = df["finished"].astype(bool)
    return df


def flows(leaf: Leaf) -> pd.DataFrame | None:
    rows = []
    for transport, entry in leaf.summary["transports"].items():
        for f in entry.get("flows") or []:
            rows.append(
                {
                    "transport": transport,
                    "src": f.get("src"),
                    "dst": f.get("dst"),
                    "bytes": f.get("bytes"),
                    "acked_bytes": f.get("acked_bytes"),
                    "start_s": f.get("start_s"),
                    "end_s": f.get("end_s"),
                    "fct_ms": f.get("fct_ms"),
                    "goodput_mbps": f.get("goodput_mbps"),
                    "finished": f.get("fct_ms") is not None,
                    "retransmits": sum((f.get("retransmits") or {}).values()),
                }
            )
    return pd.DataFrame(rows) if rows else None


def _transport_dirs(leaf: Leaf) -> Iterator[tuple[str, Path]]:
    for transport in leaf.summary["transports"]:
        raw = leaf.path / "raw" / transport
        if raw.is_dir():
            yield transport, raw


def ev_events(leaf: Leaf) -> pd.DataFrame | None:
    rows = []
    for transport, raw in _transport_dirs(leaf):
        records, t0 = endpoint_records(raw)
        for host, recs in records.items():
            for r in recs:
                if r.get("type") != "ev":
                    continue
                peer = r.get("peer")
                rows.append(
                    {
                        "transport": transport,
                        "time_s": r["t"] - t0 if t0 is not None else math.nan,
                        "host": host,
                        "peer": peer,
                        "connection": f"{host}->{peer}",
                        "ev": r.get("ev"),
                        "old": r.get("old"),
                        "state": r.get("new"),
                        "reason": r.get("reason"),
                    }
                )
    return pd.DataFrame(rows) if rows else None


def collectives(leaf: Leaf) -> pd.DataFrame | None:
    """A trace workload's collectives and point-to-point nodes: one row per node per rank per
    iteration (the ``trace_node`` records), timed from the job's go."""
    rows = []
    for transport, raw in _transport_dirs(leaf):
        records, t0 = endpoint_records(raw)
        for host, recs in records.items():
            for r in recs:
                if r.get("type") != "trace_node":
                    continue
                start = r["start"] - t0 if t0 is not None else math.nan
                end = r["end"] - t0 if t0 is not None else math.nan
                rows.append(
                    {
                        "transport": transport,
                        "iteration": r.get("iteration"),
                        "rank": r.get("rank"),
                        "host": host,
                        "name": r.get("name"),
                        "kind": r.get("kind"),
                        "start_s": start,
                        "end_s": end,
                        "ms": (r["end"] - r["start"]) * 1e3,
                        "bytes": r.get("bytes"),
                    }
                )
    return pd.DataFrame(rows) if rows else None


def _counts(prefix: str, values: dict[str, Any]) -> Iterator[tuple[str, int]]:
    """(counter, value) of every integer in a counters object, nested ones dotted
    (``drops.loss``); flags, rates and the port's state are configuration, not counters."""
    for key, value in values.items():
        if key == "state":
            continue
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from _counts(f"{name}.", value)
        elif isinstance(value, int) and not isinstance(value, bool):
            yield name, value


def switch_counters(leaf: Leaf) -> pd.DataFrame | None:
    rows = []
    for transport, raw in _transport_dirs(leaf):
        path = raw / "switch_counters.json"
        if not path.is_file():
            continue
        try:
            switches = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ResultsError(f"{path}: unreadable switch counters ({exc})") from None
        for name, sw in switches.items():
            ports = sw.get("ports") or {}
            own = {k: v for k, v in sw.items() if k != "ports"}
            for counter, value in _counts("", own):
                rows.append({"transport": transport, "switch": name, "port": None,
                             "counter": counter, "value": value})  # fmt: skip
            for port, pc in ports.items():
                for counter, value in _counts("", pc):
                    rows.append({"transport": transport, "switch": name, "port": port,
                                 "counter": counter, "value": value})  # fmt: skip
    return pd.DataFrame(rows) if rows else None


def runs(leaf: Leaf) -> pd.DataFrame | None:
    s = leaf.summary
    rows = []
    for transport, e in s["transports"].items():
        emu = e.get("emulation") or {}
        pct = e.get("step_time_ms") or {}
        rows.append(
            {
                "transport": transport,
                "scenario": s.get("scenario"),
                "started": s.get("started"),
                "valid": emu.get("valid", (s.get("emulation") or {}).get("valid")),
                "time_dilation": emu.get(
                    "time_dilation", (s.get("emulation") or {}).get("time_dilation")
                ),
                "delivered_bytes": e.get("delivered_bytes"),
                "lost_bytes": e.get("lost_bytes"),
                "goodput_mbps": e.get("goodput_mbps"),
                "bottleneck_mbps": e.get("bottleneck_mbps"),
                "max_stall_ms": e.get("max_stall_ms"),
                "failover_ms": e.get("failover_ms"),
                "step_p50_ms": pct.get("p50"),
                "step_p99_ms": pct.get("p99"),
                "step_p100_ms": pct.get("p100"),
                "retransmits": sum((e.get("retransmits") or {}).values()),
                "trims": e.get("trims"),
                "ev_retirements": e.get("ev_retirements"),
                "qp_errors": e.get("qp_errors"),
                "expectations_passed": (e.get("expectations") or {}).get("passed"),
                "kernel_drops": emu.get("kernel_drops"),
                "real_s": emu.get("real_s"),
                "virtual_s": emu.get("virtual_s"),
                "note": e.get("note"),
            }
        )
    return pd.DataFrame(rows) if rows else None


BUILDERS = {
    "goodput": goodput,
    "steps": steps,
    "flows": flows,
    "ev_events": ev_events,
    "collectives": collectives,
    "switch_counters": switch_counters,
    "runs": runs,
}

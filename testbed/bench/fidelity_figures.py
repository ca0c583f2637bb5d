"""The figures of `testbed bench fidelity`: per-flow utilisation and its ceiling, htsim's
measures from a run's flows and goodput bins (its goodput.csv), and each run's verdict record.
"""

from __future__ import annotations

import csv
import statistics
from pathlib import Path
from typing import Any

from contracts.framing import FRAME_OVERHEAD, max_frame_bytes, mrc_payload
from endpoint.codec import ACK_LEN
from endpoint.config import TransportConfig
from testbed.analysis.metrics import flow_name
from testbed.analysis.validity import is_valid


def permutation_ceiling_pct(mtu: int, ack_every: int | None = None) -> float:
    """The most MRC payload a host's link carries in a permutation, where each host's uplink
    carries its own flow's data *and* the ACKs of the flow it receives: payload / (data frame +
    an ACK frame per `ack_every` data packets: the receiver's coalescing, endpoint.config's
    default unless given; in-order data is what a steady permutation mostly is). htsim's NDP
    counts the same way with an ACK per packet (1500 / (1500 + 64 + 64 + 64) = 88.6 %)."""
    every = TransportConfig().ack_every if ack_every is None else ack_every
    ack_frame = ACK_LEN + FRAME_OVERHEAD
    return 100.0 * mrc_payload(mtu) / (max_frame_bytes(mtu) + ack_frame / every)


def slow_link_figures(
    flows: list[dict],
    hosts_on_slow_leaf: set[str],
    link_mbps: float,
    util: list[float] | None = None,
) -> dict:
    """Mean per-flow utilisation of the flows that start or end on the slow link's leaf (the
    affected ones: htsim's 8) and of the others; `util`: each flow's utilisation (in `flows`'
    order), else its goodput over its own completion time."""
    util = flow_utilisation_pct(flows, link_mbps) if util is None else util
    hit = [f["src"] in hosts_on_slow_leaf or f["dst"] in hosts_on_slow_leaf for f in flows]
    ua = [u for u, h in zip(util, hit, strict=True) if h]
    ur = [u for u, h in zip(util, hit, strict=True) if not h]
    return {
        "affected_flows": len(ua),
        "affected_mean": round(statistics.fmean(ua), 1) if ua else None,
        "affected_min": round(min(ua), 1) if ua else None,
        "others_mean": round(statistics.fmean(ur), 1) if ur else None,
        "others_min": round(min(ur), 1) if ur else None,
    }


def read_flow_series(goodput_csv: Path, transport: str) -> dict[str, list[tuple[float, float]]]:
    """Each flow's goodput bins, (bin start in virtual s, Mbps), from a run's goodput.csv."""
    out: dict[str, list[tuple[float, float]]] = {}
    with open(goodput_csv, newline="") as f:
        for r in csv.DictReader(f):
            if r["transport"] == transport and r["flow"] != "all":
                out.setdefault(r["flow"], []).append(
                    (float(r["time_s"]), float(r["goodput_mbps"] or 0.0))
                )
    return out


def steady_window(flows: list[dict], bin_s: float, end_s: float) -> tuple[float, float] | None:
    """The stretch of a run in which every flow was running, as htsim's long flows all run
    through its measurement window: from one bin after the last flow's first post (start-up
    left out) to the first flow's completion (or the run's end). None if no whole bin fits."""
    starts = [f["start_s"] for f in flows if f.get("start_s") is not None]
    if not starts or len(starts) < len(flows):
        return None
    ends = [f["end_s"] for f in flows if f.get("end_s") is not None]
    lo, hi = max(starts) + bin_s, min(ends, default=end_s)
    return (lo, hi) if hi - lo >= bin_s else None


def steady_utilisation_pct(
    series: dict[str, list[tuple[float, float]]], flows: list[dict], link_mbps: float
) -> tuple[list[float], tuple[float, float]] | None:
    """Each flow's mean goodput over the whole bins inside `steady_window`, as a percentage of
    the link rate, and the window; None if the run had no such stretch.

    Why: a finite flow's bytes over its completion time also count the time after others
    finished and left it their capacity, which htsim's measure (per-flow goodput over 5-29 ms
    of 30 ms flows, every flow running throughout) does not: on one hashed path, where flows
    collide, the two differ by ~4 points (docs/fidelity.md)."""
    times = sorted({t for s in series.values() for t, _ in s})
    if len(times) < 2:
        return None
    bin_s = times[1] - times[0]
    window = steady_window(flows, bin_s, times[-1] + bin_s)
    if window is None:
        return None
    lo, hi = window
    eps = bin_s * 1e-6
    out = []
    for f in flows:
        bins = [
            mbps
            for t, mbps in series.get(flow_name(f["src"], f["dst"]), [])
            if t >= lo - eps and t + bin_s <= hi + eps
        ]
        out.append(100.0 * statistics.fmean(bins) / link_mbps if bins else 0.0)
    return out, window


def flow_utilisation_pct(flows: list[dict], link_mbps: float) -> list[float]:
    """Each flow's payload goodput as a percentage of the link rate (a flow with no goodput
    reads 0: it is a flow that got nothing, not a flow that does not exist)."""
    return [100.0 * (f.get("goodput_mbps") or 0.0) / link_mbps for f in flows]


def permutation_figures(per_seed: list[list[float]]) -> dict[str, float | None]:
    """htsim's two numbers from per-seed per-flow utilisations: the mean over the seeds of each
    seed's mean, and the lowest flow of any seed (htsim: "lowest flow in the worst seed")."""
    seeds = [u for u in per_seed if u]
    if not seeds:
        return {"mean": None, "min": None}
    return {
        "mean": round(statistics.fmean(statistics.fmean(u) for u in seeds), 1),
        "min": round(min(min(u) for u in seeds), 1),
    }


def diff_points(measured: float | None, reference: float | None) -> float | None:
    """Measured minus reference, in percentage points (None if either is missing)."""
    if measured is None or reference is None:
        return None
    return round(measured - reference, 1)


def incast_figures(entry: dict, senders: int, nbytes: int, link_mbps: float) -> dict[str, Any]:
    """From a summary.json transport entry of an incast: the last flow's completion (µs, from
    its own first post: the flows start together), the ideal (every payload byte at the link
    rate), ideal / last, the RTO count and every retransmit by reason."""
    flows = entry.get("flows", [])
    fcts = [f.get("fct_ms") for f in flows]
    done = len(flows) == senders and all(v is not None for v in fcts)
    last_us = max(v for v in fcts if v is not None) * 1e3 if any(fcts) else None
    ideal_us = senders * nbytes * 8 / (link_mbps * 1e6) * 1e6
    retx = dict(entry.get("retransmits", {}))
    return {
        "all_done": done,
        "last_us": None if last_us is None else round(last_us, 1),
        "ideal_us": round(ideal_us, 1),
        "ideal_over_last_pct": round(100 * ideal_us / last_us, 1) if last_us else None,
        "rto": int(retx.get("rto", 0)),
        "retransmits": retx,
        "retransmits_total": sum(retx.values()),
        "trims": entry.get("trims"),
        "spread_pct": _spread_pct([v for v in fcts if v is not None]),
    }


def _spread_pct(fcts: list[float]) -> float | None:
    """How far apart the flows finished: (last - first) / last."""
    return round(100 * (max(fcts) - min(fcts)) / max(fcts), 1) if fcts and max(fcts) > 0 else None


def run_record(entry: dict, wall_s: float, out_dir: Path) -> dict[str, Any]:
    """What the table prints of one run beside its figures: verdict, N, wall time."""
    emu = entry.get("emulation", {})
    return {
        "valid": is_valid(emu),
        "invalid_reasons": list(emu.get("invalid_reasons", [])),
        "time_dilation": emu.get("time_dilation"),
        "reruns": emu.get("reruns", 0),
        "real_s": emu.get("real_s"),
        "virtual_s": emu.get("virtual_s"),
        "wall_s": round(wall_s, 1),
        "out_dir": str(out_dir),
    }


def validity_cell(runs: list[dict]) -> str:
    """`valid` if every run was, else `INVALID (k/n)`: a row's figure is worth what its worst
    run is worth."""
    bad = sum(not r["valid"] for r in runs)
    return "valid" if runs and not bad else f"INVALID ({bad}/{len(runs)})"

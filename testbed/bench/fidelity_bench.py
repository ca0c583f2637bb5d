"""`testbed bench fidelity`: the emulated fabric against htsim's figures on the same fabric.

htsim (Broadcom/csg-htsim) is a packet-level simulator: what it reports for a leaf-spine is what
the fabric allows, with no machine in the way. This bench runs the same fabric -- 4 spines x 4
leaves x 4 hosts, 10 Gbps links, 1 µs per link, 12 kB queues (htsim's 8 packets) -- through
the public run API (`testbed.experiment.runner.run_scenario`, what `testbed run` calls) at a
time dilation, and puts each figure beside htsim's (docs/fidelity.md; the reference figures
are copied into HTSIM below from the shared reference page):

- permutation (every host sends one flow to a host on another leaf and receives one),
  per-flow utilisation = a flow's payload goodput / link rate while every flow ran (htsim's
  measure; bytes over each flow's completion time beside it), mean over the seeds and the
  lowest flow of any seed, for `mrc` as its paper pairs it -- generated EVs on a
  source-routed fabric, which cover every path once per round: htsim's "NDP, per-packet
  spraying" --, `mrc` over 16 EVs hashed by an ECMP fabric ("NDP, ECMP-hashed over 16 EVs"),
  `single-path` ("NDP, one path") and, one seed, `mrc` at MTU 9000 ("NDP spraying, MTU
  9000"), each beside its ceiling: payload over data + ACK frame on a host's link;
- an 8 -> 1 incast of 1 MB each with trimming, receiver on another leaf (source-routed): the last flow's
  completion against the ideal (the payload at the link rate), and the RTO count
  (`--quick`: 4 -> 1, which htsim reports too).

Every run is judged by the runner (testbed.analysis.validity); its verdict, time dilation and
wall time are printed beside its numbers, and a figure from an invalid run is marked so.
Flows here are a couple of virtual milliseconds long (htsim's are 30 ms): a run takes tens of
real seconds at the dilations these fabrics need on two cores.
"""

from __future__ import annotations

import csv
import os
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from contracts.framing import DEFAULT_MTU, FRAME_OVERHEAD, max_frame_bytes, mrc_payload
from endpoint.codec import ACK_LEN
from endpoint.config import TransportConfig
from testbed.analysis.metrics import flow_name
from testbed.analysis.plots import plot_path_share
from testbed.analysis.validity import is_valid
from testbed.bench.endpoint_bench import BenchError, bench_meta
from testbed.experiment.api import load
from testbed.experiment.runner import Progress, run_scenario

LINK_MBPS = 10_000.0
FABRIC = {"spines": 4, "leaves": 4, "hosts_per_leaf": 4}
LINKS = {"link_mbps": LINK_MBPS, "delay_us": 1, "queue_kb": 12}
SEEDS = (1, 2, 3)
PERMUTATION_BYTES = 2_000_000  # 1.6 ms of payload at 10 Gbps
QUICK_PERMUTATION_BYTES = 1_000_000
# Virtual seconds a permutation may last: a flow unfinished by then reads its goodput over its
# own active time (a one-path flow sharing a link 4 ways needs 6.4 ms for 2 MB), like htsim's
# steady-state window, and the run's wall time stays bounded (4 ms x N=10000 = 40 s).
PERMUTATION_DURATION_S = 0.004
INCAST_SENDERS = 8
QUICK_INCAST_SENDERS = 4  # htsim has a 4-sender row too: half the wall time
INCAST_BYTES = 1_000_000
INCAST_DURATION_S = 0.02  # virtual: ideal 6.4 ms, room for a timeout or two
EMULATION = {"time_dilation": "auto", "max_reruns": 0}
"""A bench reports each run's verdict rather than hunting for a valid N: under `auto` the runner
would rerun an invalid run at RERUN_FACTOR x N (testbed.experiment.dilation: 2 x N), i.e. twice
the wall time (pass --time-dilation N instead)."""
INCAST_DST = "h1"

# What the rows are called, and which of htsim's rows each is compared with
# (/work/shared/reference/htsim-leafspine.md, 4x4x4, mean over 3 seeds / lowest flow).
PERMUTATION_ROWS = ("mrc", "mrc-16ev", "mrc-1ev", "single-path", "mrc-9000")
HTSIM = {
    "mrc": {"what": "NDP, per-packet spraying over all paths", "mean": 87.7, "min": 87.0},
    "mrc-16ev": {"what": "NDP, ECMP-hashed over 16 EVs", "mean": 76.7, "min": 67.3},
    "mrc-1ev": {"what": "NDP, one path", "mean": 53.5, "min": 11.5},
    "single-path": {"what": "NDP, one path", "mean": 53.5, "min": 11.5},
    "mrc-9000": {"what": "NDP spraying, MTU 9000 (one seed)", "mean": 98.1, "min": 97.9},
    "slow-link": {
        "what": "NDP spraying, leaf1-spine1 at 10 % speed (one seed)",
        "affected_mean": 58.2,
        "others_mean": 88.0,
        "affected_share_pct": 69.0,
    },
    "incast-8": {
        "what": "NDP with trimming, 8 x 1 MB",
        "last_us": 6764.0,
        "ideal_us": 6400.0,
        "ideal_over_last_pct": 94.6,
        "retransmits": 108,
        "timeouts": 0,
    },
    "incast-4": {
        "what": "NDP with trimming, 4 x 1 MB",
        "last_us": 3382.0,
        "ideal_us": 3200.0,
        "ideal_over_last_pct": 94.6,
        "retransmits": 46,
        "timeouts": 0,
    },
}
SOURCE_ROUTED = {"forwarding": "source-routed"}
ROWS: dict[str, dict[str, Any]] = {
    # MRC as its paper pairs it: generated EVs on a source-routed fabric, every path of a leaf
    # once per round of EVs -- what htsim's per-packet spraying over all paths does.
    "mrc": {"transport": "mrc", "topology": SOURCE_ROUTED},
    # MRC's AUTO profile on a hashing fabric, restricted to 16 EVs as htsim's hashed row.
    "mrc-16ev": {"transport": {"name": "mrc", "label": "mrc-16ev", "evs": 16}, "topology": {}},
    # MRC's endpoint (trimming, NACKs, NSCC) on one hashed path per connection: what htsim's
    # "NDP, one path" is -- a transport that recovers from trims at once, with one path.
    "mrc-1ev": {"transport": {"name": "mrc", "label": "mrc-1ev", "evs": 1}, "topology": {}},
    # The RoCE-like baseline on one hashed path: go-back-N, and an RC timeout for a loss no
    # NACK reports, which htsim's NDP row has no counterpart of.
    "single-path": {"transport": "single-path", "topology": {}},
    # 9000 B frames and queues of 8 of them (htsim's 8-packet queues); one seed, as htsim's row.
    "mrc-9000": {
        "transport": {"name": "mrc", "label": "mrc-9000"},
        "topology": {**SOURCE_ROUTED, "mtu": 9000, "queue_kb": 72},
        "seeds": 1,
    },
}
"""Each permutation row: its transport (a name or a scenario configuration), the topology keys
it changes, and how many of the seeds it runs (all if not said)."""
INCAST_TOPOLOGY = SOURCE_ROUTED


SLOW_LINK = ("leaf1", "spine1")
SLOW_LINK_MBPS = 1000.0  # 10 % of the fabric's 10 Gbps
SLOW_LINK_ROWS: dict[str, dict[str, Any]] = {
    # One leaf-spine link at 10 % speed under each load-balancing policy of MRC (TransportConfig
    # .lb), on the source-routed fabric with generated EVs, one seed as htsim's row.
    "mrc-wrr": {"name": "mrc", "label": "mrc-wrr", "lb": "wrr"},
    "mrc-oblivious": {"name": "mrc", "label": "mrc-oblivious", "lb": "oblivious"},
    "mrc-reps": {"name": "mrc", "label": "mrc-reps", "lb": "reps"},
    # REPS on a fabric that marks ECN only when a queue cannot take one more full frame.
    "mrc-reps-late-ecn": {"name": "mrc", "label": "mrc-reps-late-ecn", "lb": "reps"},
}
"""htsim's row sprays blindly (its NDP): `mrc-oblivious` is its counterpart."""
LATE_ECN_KB = round(LINKS["queue_kb"] - max_frame_bytes(DEFAULT_MTU) / 1000, 3)
"""An ECN threshold of the queue less one full frame (10.486 of 12 kB): a mark then says the
queue is about to trim. REPS takes a marked EV out of its recycling; at the default threshold,
half the queue, every path of a fully loaded permutation marks on a burst of four frames, so
REPS drops its good EVs too and explores onto the slow spine (docs/fidelity.md, "REPS and the
ECN threshold")."""
SLOW_LINK_TOPOLOGY: dict[str, dict[str, Any]] = {"mrc-reps-late-ecn": {"ecn_kb": LATE_ECN_KB}}
"""The slow-link rows that change the fabric as well as the transport."""


def row_key(row: str) -> str:
    """What the runner calls the row's transport (its label, or its name)."""
    t = ROWS[row]["transport"]
    return t if isinstance(t, str) else t.get("label", t["name"])


def permutation_ceiling_pct(mtu: int, ack_every: int | None = None) -> float:
    """The most MRC payload a host's link carries in a permutation, where each host's uplink
    carries its own flow's data *and* the ACKs of the flow it receives: payload / (data frame +
    an ACK frame per `ack_every` data packets: the receiver's coalescing, endpoint.config's
    default unless given; in-order data is what a steady permutation mostly is). htsim's NDP
    counts the same way with an ACK per packet (1500 / (1500 + 64 + 64 + 64) = 88.6 %)."""
    every = TransportConfig().ack_every if ack_every is None else ack_every
    ack_frame = ACK_LEN + FRAME_OVERHEAD
    return 100.0 * mrc_payload(mtu) / (max_frame_bytes(mtu) + ack_frame / every)


# ----- pure: scenarios, figures, differences ----------------------------------------------------


def permutation_scenario(
    seed: int, nbytes: int, fabric: dict | None = None, row: str = "mrc"
) -> dict:
    spec = ROWS[row]
    return {
        "name": f"fidelity-permutation-s{seed}",
        "description": "bench fidelity: permutation, per-flow utilisation against htsim",
        "topology": {**(fabric or FABRIC), **LINKS, **spec["topology"]},
        "transport": [spec["transport"]],
        "workload": {"kind": "permutation", "bytes": nbytes},
        "duration_s": PERMUTATION_DURATION_S,
        "seed": seed,
        "emulation": dict(EMULATION),
    }


def slow_link_scenario(seed: int, nbytes: int, row: str) -> dict:
    """The permutation with leaf1-spine1 (both directions) at 10 % speed from the start."""
    sc = permutation_scenario(seed, nbytes, row="mrc")
    sc["name"] = f"fidelity-slow-link-s{seed}"
    sc["description"] = "bench fidelity: one slow leaf-spine link, per-flow utilisation"
    sc["transport"] = [SLOW_LINK_ROWS[row]]
    sc["topology"].update(SLOW_LINK_TOPOLOGY.get(row, {}))
    sc["events"] = [{"at": 0, "action": "degrade", "link": list(SLOW_LINK), "mbps": SLOW_LINK_MBPS}]
    return sc


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


def incast_senders(fabric: dict, n: int = INCAST_SENDERS, dst: str = INCAST_DST) -> list[str]:
    """`n` senders on leaves other than `dst`'s (h1's: leaf 1), in host order."""
    per_leaf = fabric["hosts_per_leaf"]
    hosts = [f"h{i}" for i in range(per_leaf + 1, fabric["leaves"] * per_leaf + 1)]
    if len(hosts) < n:
        raise BenchError(f"bench fidelity: the fabric has {len(hosts)} hosts off leaf 1, not {n}")
    return hosts[:n]


def incast_scenario(fabric: dict | None = None, n: int = INCAST_SENDERS) -> dict:
    fabric = fabric or FABRIC
    return {
        "name": "fidelity-incast",
        "description": "bench fidelity: incast with trimming against htsim",
        "topology": {**fabric, **LINKS, **INCAST_TOPOLOGY, "trimming": True},
        "transport": ["mrc"],
        "workload": {
            "kind": "incast",
            "dst": INCAST_DST,
            "srcs": incast_senders(fabric, n),
            "bytes": INCAST_BYTES,
        },
        "duration_s": INCAST_DURATION_S,
        "seed": 1,
        "emulation": dict(EMULATION),
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


# ----- the runs ---------------------------------------------------------------------------------


def _run_one(scenario: dict, transport: str, out_dir: Path, dilation) -> tuple[dict, dict]:
    """One transport's run through the public runner: (its summary.json entry, run record)."""
    sc = load(scenario)
    t0 = time.monotonic()
    outcome = run_scenario(
        sc,
        [transport],
        out_dir,
        progress=Progress(stream=sys.stderr, live=False),
        time_dilation=dilation,
    )
    wall = time.monotonic() - t0
    entry = outcome.summary["transports"][transport]
    rec = run_record(entry, wall, out_dir)
    print(
        f"  {scenario['name']} {transport}: "
        f"{'valid' if rec['valid'] else 'INVALID'} at N={rec['time_dilation']:g}, "
        f"wall {rec['wall_s']:.1f} s",
        file=sys.stderr,
        flush=True,
    )
    return entry, rec


def default_results_dir() -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return Path("results") / f"bench-fidelity-{stamp}"


SECTIONS = ("permutation", "slow-link", "incast")


def run_fidelity_bench(
    quick: bool = False,
    time_dilation: float | str = "auto",
    out: Path | None = None,
    only: str | None = None,
) -> dict:
    """The whole fidelity bench (or the section `only` names); returns the docs/design.md
    "Benchmark output"-shaped object.

    quick (CI): one seed, 1 MB flows and a 4 -> 1 incast, on the same 4x4x4 fabric, no slow
    link."""
    if only is not None and only not in SECTIONS:
        raise BenchError(f"--only: one of {', '.join(SECTIONS)}, got {only!r}")
    sections = (only,) if only else tuple(x for x in SECTIONS if not (quick and x == "slow-link"))
    if os.geteuid() != 0:
        raise BenchError("bench fidelity needs root (it creates network namespaces): use sudo")
    started = time.time()
    out = out or default_results_dir()
    seeds = SEEDS[:1] if quick else SEEDS
    nbytes = QUICK_PERMUTATION_BYTES if quick else PERMUTATION_BYTES
    rows = [r for r in PERMUTATION_ROWS if not (quick and r == "mrc-9000")]
    if "permutation" not in sections:
        rows = []
    per_seed: dict[str, list[list[float]]] = {r: [] for r in rows}  # steady (htsim's measure)
    per_seed_fct: dict[str, list[list[float]]] = {r: [] for r in rows}  # bytes / completion
    first_shares: dict[str, dict] = {}  # row -> its first seed's path shares, for the plot
    runs: dict[str, list[dict]] = {r: [] for r in (*rows, "incast")}
    for k, seed in enumerate(seeds):
        for row in rows:
            if k >= ROWS[row].get("seeds", len(seeds)):
                continue
            sc = permutation_scenario(seed, nbytes, row=row)
            key = row_key(row)
            run_dir = out / f"permutation-s{seed}-{row}"
            entry, rec = _run_one(sc, key, run_dir, time_dilation)
            flows = entry.get("flows", [])
            util = flow_utilisation_pct(flows, LINK_MBPS)
            rec["flow_util_pct"] = [round(u, 1) for u in util]
            steady = _steady(run_dir, key, flows)
            rec["steady_window_s"] = None if steady is None else [round(x, 6) for x in steady[1]]
            rec["flow_steady_pct"] = None if steady is None else [round(u, 1) for u in steady[0]]
            share = entry.get("path_share") or {}
            rec["path_share_max_dev_pct"] = share.get("max_deviation_pct")
            rec["path_share_median_dev_pct"] = share.get("median_deviation_pct")
            if k == 0 and share.get("max_deviation_pct") is not None:
                first_shares[row] = share
            # No stretch with every flow running (a flow never posted): its completion figure.
            per_seed[row].append(util if steady is None else steady[0])
            per_seed_fct[row].append(util)
            runs[row].append(rec)
    permutation = []
    for row in rows:
        ref = HTSIM[row]
        fig = permutation_figures(per_seed[row])
        mtu = ROWS[row]["topology"].get("mtu", DEFAULT_MTU)
        permutation.append(
            {
                "row": row,
                "htsim": ref,
                "measured": fig,
                "per_fct": permutation_figures(per_seed_fct[row]),
                "diff_points": {k: diff_points(fig[k], ref[k]) for k in ("mean", "min")},
                "ceiling_pct": round(permutation_ceiling_pct(mtu), 1),
                # The worst path's departure from an equal share, worst over the seeds
                # (testbed.analysis.path_share): how evenly the row used the fabric.
                "path_share_max_dev_pct": _worst(
                    r.get("path_share_max_dev_pct") for r in runs[row]
                ),
                # The median leaf's worst path, worst over the seeds: whether the EV set
                # covers the paths, apart from the balancer's reaction to a trimmed path.
                "path_share_median_dev_pct": _worst(
                    r.get("path_share_median_dev_pct") for r in runs[row]
                ),
                "fabric": {**FABRIC, **LINKS, **ROWS[row]["topology"]},
                "validity": validity_cell(runs[row]),
                "runs": runs[row],
            }
        )
    path_share_plot = None
    if first_shares:
        path_share_plot = str(
            plot_path_share(
                first_shares,
                out / "path_share.png",
                title=f"fidelity permutation, seed {seeds[0]}",
            )
        )
    slow_link = (
        _run_slow_link(seeds[0], nbytes, out, time_dilation) if "slow-link" in sections else None
    )
    incast = _run_incast(quick, out, time_dilation) if "incast" in sections else None
    return {
        "bench": "fidelity",
        "fabric": {**FABRIC, **LINKS},
        "link_mbps": LINK_MBPS,
        "seeds": list(seeds),
        "permutation_bytes": nbytes,
        "permutation": permutation,
        "path_share_plot": path_share_plot,
        "slow_link": slow_link,
        "incast": incast,
        "results_dir": str(out),
        "meta": bench_meta(
            len(seeds),
            started,
            "each run through testbed.experiment.runner.run_scenario; utilisation = per-flow "
            "payload goodput / link rate while every flow ran (per_fct: over each flow's "
            "completion time); htsim's figures from htsim-leafspine.md (NDP/EQDS, "
            "30 ms flows: expect the shape, not the digits)",
            quick=quick,
            time_dilation=time_dilation,
        ),
    }


def _steady(run_dir: Path, transport: str, flows: list[dict]):
    """steady_utilisation_pct of a run, from its goodput.csv (None if it wrote none)."""
    path = run_dir / "goodput.csv"
    if not path.is_file():
        return None
    return steady_utilisation_pct(read_flow_series(path, transport), flows, LINK_MBPS)


def _worst(values) -> float | None:
    vals = [v for v in values if v is not None]
    return max(vals) if vals else None


def _run_slow_link(seed: int, nbytes: int, out: Path, time_dilation) -> dict:
    """Each load-balancing policy once with leaf1-spine1 at 10 % speed."""
    leaf_hosts = {f"h{i}" for i in range(1, FABRIC["hosts_per_leaf"] + 1)}  # leaf1's
    rows = []
    for row in SLOW_LINK_ROWS:
        sc = slow_link_scenario(seed, nbytes, row)
        run_dir = out / f"slow-link-s{seed}-{row}"
        entry, rec = _run_one(sc, row, run_dir, time_dilation)
        flows = entry.get("flows", [])
        steady = _steady(run_dir, row, flows)
        fig = slow_link_figures(flows, leaf_hosts, LINK_MBPS, None if steady is None else steady[0])
        rec["steady_window_s"] = None if steady is None else [round(x, 6) for x in steady[1]]
        rows.append(
            {
                "row": row,
                "ecn_kb": SLOW_LINK_TOPOLOGY.get(row, {}).get("ecn_kb"),
                "measured": fig,
                "per_fct": slow_link_figures(flows, leaf_hosts, LINK_MBPS),
                "validity": validity_cell([rec]),
                "runs": [rec],
            }
        )
    return {
        "link": list(SLOW_LINK),
        "link_mbps": SLOW_LINK_MBPS,
        "seed": seed,
        "htsim": HTSIM["slow-link"],
        "rows": rows,
    }


def _run_incast(quick: bool, out: Path, time_dilation) -> dict:
    senders = QUICK_INCAST_SENDERS if quick else INCAST_SENDERS
    inc_sc = incast_scenario(n=senders)
    entry, rec = _run_one(inc_sc, "mrc", out / f"incast{senders}-mrc", time_dilation)
    fig = incast_figures(entry, senders, INCAST_BYTES, LINK_MBPS)
    ref = HTSIM[f"incast-{senders}"]
    return {
        "senders": senders,
        "bytes_each": INCAST_BYTES,
        "htsim": ref,
        "measured": fig,
        "diff_points": {
            "ideal_over_last_pct": diff_points(
                fig["ideal_over_last_pct"], ref["ideal_over_last_pct"]
            )
        },
        "validity": validity_cell([rec]),
        "runs": [rec],
    }


# ----- the table --------------------------------------------------------------------------------


def _f(v, fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def _signed(v) -> str:
    return "-" if v is None else f"{v:+.1f}"


def _runs_cell(runs: list[dict]) -> str:
    ns = sorted({r["time_dilation"] for r in runs if r["time_dilation"] is not None})
    wall = sum(r["wall_s"] for r in runs)
    return f"N={','.join(f'{n:g}' for n in ns)}  wall {wall:.0f} s ({len(runs)} run(s))"


def _pct(dev: float | None) -> str:
    return "-" if dev is None else f"{dev:.0f}" if dev >= 1 else f"{dev:.1f}"


def _paths(median: float | None, worst: float | None) -> str:
    """The paths cell: the median leaf's and the worst leaf's departure, '±median/worst%'."""
    return "-" if worst is None else f"±{_pct(median)}/{_pct(worst)}%"


def _permutation_lines(rows: list[dict]) -> list[str]:
    lines = [
        "",
        "permutation, per-flow utilisation % (mean over seeds / lowest flow); steady = while",
        "every flow ran (htsim's measure), per FCT = bytes over each flow's completion time;",
        "ceiling: MRC's payload over data + ACK frame on a host's link (htsim's NDP: 88.6 at",
        "1500, 97.9 at 9000)",
        f"  {'row':12} {'steady':>13} {'htsim':>13} {'diff points':>13} {'per FCT':>13} "
        f"{'ceiling':>7} {'paths':>10}  {'validity':14} runs",
    ]
    for r in rows:
        ref = r["htsim"]
        href = f"{ref['mean']:.1f} / {ref['min']:.1f}"
        m, dp = r["measured"], r["diff_points"]
        fct = r.get("per_fct") or {"mean": None, "min": None}
        lines.append(
            f"  {r['row']:12} {_f(m['mean']):>6} / {_f(m['min']):<4} {href:>13} "
            f"{_signed(dp['mean']):>6} / {_signed(dp['min']):<5} "
            f"{_f(fct['mean']):>6} / {_f(fct['min']):<4} {r['ceiling_pct']:>7.1f} "
            f"{_paths(r.get('path_share_median_dev_pct'), r.get('path_share_max_dev_pct')):>10}  "
            f"{r['validity']:14} {_runs_cell(r['runs'])}"
        )
    return lines + [
        "  rows: mrc = generated EVs on a source-routed fabric; mrc-16ev = 16 EVs hashed (ECMP);",
        "  mrc-1ev = mrc on one hashed EV (recovers from trims as NDP does);",
        "  single-path = the RoCE-like baseline on one hashed path (go-back-N, RC timeout);",
        "  mrc-9000 = mrc at MTU 9000, 72 kB queues (8 frames);",
        "  paths = a leaf's uplinks' or downlinks' worst departure from an equal share of its",
        "  bytes: the median leaf / the worst leaf (worst seed); wrr moves weight off a path",
        "  that trims, so the worst leaf can stray where a burst collided",
    ]


def format_fidelity_table(d: dict) -> str:
    """The human-readable form of a run_fidelity_bench() result."""
    fab = d["fabric"]
    lines = [
        f"fidelity bench: {fab['spines']} spines x {fab['leaves']} leaves x "
        f"{fab['hosts_per_leaf']} hosts, {fab['link_mbps'] / 1000:g} Gbps, {fab['delay_us']} µs "
        f"links, {fab['queue_kb']} kB queues; seeds {d['seeds']}; "
        f"{d['permutation_bytes'] / 1e6:g} MB per flow"
        + (" (quick)" if d["meta"]["quick"] else ""),
    ]
    if d["permutation"]:
        lines += _permutation_lines(d["permutation"])
    sl = d.get("slow_link")
    if sl:
        ref = sl["htsim"]
        lines += [
            "",
            f"slow link: {sl['link'][0]}-{sl['link'][1]} at {sl['link_mbps'] / 1000:g} Gbps (10 %), "
            f"permutation, seed {sl['seed']}; per-flow utilisation % while every flow ran, "
            "mean / lowest",
            f"  {'row':18} {'ECN kB':>6} {'affected':>13} {'others':>13} {'per FCT':>13}  validity",
        ]
        for r in sl["rows"]:
            m = r["measured"]
            fct = r.get("per_fct") or {"affected_mean": None, "others_mean": None}
            ecn = r.get("ecn_kb")
            lines.append(
                f"  {r['row']:18} {'half' if ecn is None else f'{ecn:g}':>6} "
                f"{_f(m['affected_mean']):>6} / {_f(m['affected_min']):<4} "
                f"{_f(m['others_mean']):>6} / {_f(m['others_min']):<4} "
                f"{_f(fct['affected_mean']):>6} / {_f(fct['others_mean']):<4}  {r['validity']}  "
                f"{_runs_cell(r['runs'])}"
            )
        lines += [
            f"  {'htsim':18} {'':>6} {ref['affected_mean']:>6.1f}        {ref['others_mean']:>6.1f}"
            f"         ({ref['what']}; the affected flows' share of what remains: "
            f"~{ref['affected_share_pct']:g})",
            "  affected = the flows that start or end on the slow link's leaf; per FCT:",
            "  affected / others, each flow's bytes over its own completion time; ECN kB: the",
            "  switches' marking threshold (half: the default, half the queue)",
        ]
    inc = d.get("incast")
    if inc:
        m, ref = inc["measured"], inc["htsim"]
        lines += [
            "",
            f"incast {inc['senders']} -> 1, {inc['bytes_each'] / 1e6:g} MB each, trimming",
            f"  {'':12} {'last done µs':>12} {'ideal µs':>9} {'ideal/last %':>12} {'RTOs':>5} "
            f"{'retransmits':>11}",
            f"  {'measured':12} {_f(m['last_us']):>12} {_f(m['ideal_us']):>9} "
            f"{_f(m['ideal_over_last_pct']):>12} {m['rto']:>5} {m['retransmits_total']:>11}"
            f"  {inc['validity']}  {_runs_cell(inc['runs'])}"
            + ("" if m["all_done"] else "  NOT ALL FLOWS DONE"),
            f"  {'htsim':12} {ref['last_us']:>12.1f} {ref['ideal_us']:>9.1f} "
            f"{ref['ideal_over_last_pct']:>12.1f} {ref['timeouts']:>5} {ref['retransmits']:>11}",
            f"  {'diff points':12} {'':>12} {'':>9} "
            f"{_signed(inc['diff_points']['ideal_over_last_pct']):>12}",
        ]
    if d.get("path_share_plot"):
        lines += ["", f"path shares (first seed): {d['path_share_plot']}"]
    lines += ["", f"results: {d['results_dir']}   ({d['meta']['seconds']:.0f} s in all)"]
    invalid = (
        [(r["row"], run) for r in d["permutation"] for run in r.get("runs", [])]
        + [(r["row"], run) for r in (sl or {}).get("rows", []) for run in r["runs"]]
        + [("incast", run) for run in (inc or {}).get("runs", [])]
    )
    invalid = [(row, run) for row, run in invalid if not run["valid"]]
    for row, run in invalid:
        lines.append(
            f"  INVALID {row} at N={run['time_dilation']:g}: " + "; ".join(run["invalid_reasons"])
        )
    return "\n".join(lines)

"""`testbed bench fidelity`: the emulated fabric against htsim's figures on the same fabric.

htsim (Broadcom/csg-htsim) is a packet-level simulator: what it reports for a leaf-spine is what
the fabric allows, with no machine in the way. This bench runs the same fabric -- 4 spines x 4
leaves x 4 hosts, 10 Gbps links, 1 µs per link, 12 kB queues (htsim's 8 packets) -- through
the public run API (`testbed.experiment.runner.run_scenario`, what `testbed run` calls) at a
time dilation, and puts each figure beside htsim's (docs/fidelity.md; the reference figures
are copied into `fidelity_scenarios.HTSIM` from the shared reference page):

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

The rows, scenarios and htsim's figures are `testbed.bench.fidelity_scenarios`; the figures
taken from a run, `fidelity_figures`; the table, `fidelity_table`. This module runs the bench.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from contracts.framing import DEFAULT_MTU
from testbed.analysis.plots import plot_path_share
from testbed.bench.endpoint_bench import BenchError, bench_meta
from testbed.bench.fidelity_figures import (
    diff_points,
    flow_utilisation_pct,
    incast_figures,
    permutation_ceiling_pct,
    permutation_figures,
    read_flow_series,
    run_record,
    slow_link_figures,
    steady_utilisation_pct,
    validity_cell,
)
from testbed.bench.fidelity_scenarios import (
    FABRIC,
    HTSIM,
    INCAST_BYTES,
    INCAST_SENDERS,
    LINK_MBPS,
    LINKS,
    PERMUTATION_BYTES,
    PERMUTATION_ROWS,
    QUICK_INCAST_SENDERS,
    QUICK_PERMUTATION_BYTES,
    QUICK_PERMUTATION_ROWS,
    ROWS,
    SEEDS,
    SLOW_LINK,
    SLOW_LINK_MBPS,
    SLOW_LINK_ROWS,
    SLOW_LINK_TOPOLOGY,
    incast_scenario,
    permutation_scenario,
    row_key,
    slow_link_scenario,
)
from testbed.experiment.api import load
from testbed.experiment.runner import Progress, run_scenario


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

    quick (CI): one seed, 1 MB flows, the spraying and hashed rows (QUICK_PERMUTATION_ROWS)
    and a 4 -> 1 incast, on the same 4x4x4 fabric, no slow link."""
    if only is not None and only not in SECTIONS:
        raise BenchError(f"--only: one of {', '.join(SECTIONS)}, got {only!r}")
    sections = (only,) if only else tuple(x for x in SECTIONS if not (quick and x == "slow-link"))
    if os.geteuid() != 0:
        raise BenchError("bench fidelity needs root (it creates network namespaces): use sudo")
    started = time.time()
    out = out or default_results_dir()
    seeds = SEEDS[:1] if quick else SEEDS
    nbytes = QUICK_PERMUTATION_BYTES if quick else PERMUTATION_BYTES
    rows = list(QUICK_PERMUTATION_ROWS if quick else PERMUTATION_ROWS)
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

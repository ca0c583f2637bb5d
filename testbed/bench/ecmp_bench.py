"""`testbed bench ecmp`: how single-path flows of a permutation collide, against balls into bins.

Pure computation, no fabric and no root: for a few fabric shapes, the leaves' uplink loads of a
permutation's single-path flows (one per host, each with the source port its connection draws)
over many seeds, with the switches' own hash (`testbed.analysis.ecmp`), under both ECMP models,
next to the exact expectation for n balls into m bins -- the baseline of the same run. The
`crc` rows show why the `mixed` model exists: the linear CRC with fixed ports spreads a
power-of-two fabric perfectly, which no real fabric does. Then what the mixing costs per hash
(testbed.bench.hash_cost), `crc` timed against `mixed` in the same run.
"""

from __future__ import annotations

import time

from contracts.defaults import ECMP_HASHES
from testbed.analysis.ecmp import Bins, balls_into_bins, collisions, total_variation
from testbed.bench.hash_cost import hash_cost
from testbed.scenario import flows, validate

SHAPES = ((2, 2, 2), (3, 2, 3), (3, 3, 3), (4, 4, 4), (8, 8, 8))  # spines, leaves, hosts/leaf
SEEDS = 200
QUICK_SEEDS = 50


def permutation_pairs(spines: int, leaves: int, hosts_per_leaf: int, ecmp_hash: str):
    """(fabric, the permutation of seed 1 as (src, dst) pairs): the scenario runner's own."""
    sc = validate(
        {
            "name": "ecmp-bench",
            "topology": {"spines": spines, "leaves": leaves, "hosts_per_leaf": hosts_per_leaf,
                         "ecmp_hash": ecmp_hash},
            "workload": {"kind": "permutation", "bytes": "1MB"},
            "duration_s": 1,
        }
    )  # fmt: skip
    return sc.fabric(), [(f.src, f.dst) for f in flows(sc)]


def _row(b: Bins, expected: Bins) -> dict:
    return {
        "empty_fraction": round(b.empty_fraction, 4),
        "mean_max": round(b.mean_max, 4),
        "tv_vs_bins": round(total_variation(b.load_pmf, expected.load_pmf), 4),
        "utilisation": None if b.utilisation is None else round(b.utilisation, 4),
        "samples": b.samples,
    }


def run_ecmp_bench(quick: bool = False, seeds: int | None = None) -> dict:
    """Every shape under every ECMP model, over `seeds` seeds (SEEDS; QUICK_SEEDS with quick),
    then the hash's cost."""
    n_seeds = seeds or (QUICK_SEEDS if quick else SEEDS)
    t0 = time.perf_counter()
    results = []
    for spines, leaves, hosts in SHAPES:
        row: dict = {"spines": spines, "leaves": leaves, "hosts_per_leaf": hosts}
        for model in ECMP_HASHES:
            fab, pairs = permutation_pairs(spines, leaves, hosts, model)
            got = collisions(fab, pairs, range(1, n_seeds + 1))
            expected = balls_into_bins(got.balls, got.bins)
            row.update(flows_per_leaf=got.balls, uplinks=got.bins)
            row["expected"] = {
                "empty_fraction": round(expected.empty_fraction, 4),
                "mean_max": round(expected.mean_max, 4),
            }
            row[model] = _row(got, expected)
        results.append(row)
    cost = hash_cost(rounds=5 if quick else 15)
    return {
        "bench": "ecmp",
        "seeds": n_seeds,
        "results": results,
        "hash_cost": cost,
        "seconds": round(time.perf_counter() - t0, 2),
    }


def format_ecmp_table(d: dict) -> str:
    """The human-readable form of a run_ecmp_bench() result."""
    lines = [
        f"ecmp bench: single-path flows of a permutation (seed 1) over {d['seeds']} hash seeds;",
        "per leaf, n flows thrown onto m uplinks, against n balls into m bins",
        "",
        f"  {'S x L x H':10} {'n/m':>5}  {'model':9} {'empty uplinks':>13} {'busiest':>8} "
        f"{'TV vs bins':>10} {'max-min fluid':>13}",
    ]
    for r in d["results"]:
        shape = f"{r['spines']}x{r['leaves']}x{r['hosts_per_leaf']}"
        nm = f"{r['flows_per_leaf']}/{r['uplinks']}"
        e = r["expected"]
        lines.append(
            f"  {shape:10} {nm:>5}  {'expected':9} {e['empty_fraction'] * 100:12.1f}% "
            f"{e['mean_max']:8.2f}"
        )
        for model in ECMP_HASHES:
            m = r[model]
            lines.append(
                f"  {'':10} {'':>5}  {model:9} {m['empty_fraction'] * 100:12.1f}% "
                f"{m['mean_max']:8.2f} {m['tv_vs_bins']:10.3f} {m['utilisation'] * 100:12.1f}%"
            )
    lines += [
        "",
        "  empty uplinks: share of a leaf's uplinks no flow took; busiest: flows on a leaf's",
        "  busiest uplink (mean); TV: total variation distance of the per-uplink load from",
        "  Binomial(n, 1/m); max-min fluid: the flows' max-min fair throughput over every flow",
        "  at NIC rate (an upper bound for one path per flow).",
        "",
        "hash cost, ns per frame (crc = the hash before the finaliser; median of paired rounds):",
        f"  {'where':32} {'crc':>7} {'mixed':>7} {'mixed/crc':>9}",
    ]
    for case, c in d.get("hash_cost", {}).items():
        lines.append(f"  {case:32} {c['crc_ns']:7.0f} {c['mixed_ns']:7.0f} {c['ratio']:9.2f}")
    lines += [
        "  (a steady flow on the ring path does not hash: its decision is cached per flow)",
        f"  {d['seconds']} s.",
    ]
    return "\n".join(lines)

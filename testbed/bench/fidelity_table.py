"""The human-readable table of a `testbed bench fidelity` result: each row beside htsim's."""

from __future__ import annotations


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

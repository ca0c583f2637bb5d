"""`testbed bench capacity`: how many packet-hops per real second this machine carries validly,
and the time dilation N a fabric of hosts x link rate needs.

Method, per fabric (2x2x2, 4x4x4 and a 32-host 4 spines x 8 leaves x 4 hosts; `--quick`: 2x2x2
only), each run through the public runner (`testbed.experiment.runner.run_scenario`) with a
permutation at 10 Gbps, 1 µs links:

- carried packet-hops per real second = the switches' tx_packets over every port
  (raw/<transport>/switch_counters.json) / the workload's real seconds (summary `emulation`);
- the verdict of the run (testbed.analysis.validity);
- the search for the smallest valid N (`next_dilation`): start at auto's prediction, halve
  while valid, double while invalid, until a valid N and an invalid N/2 bracket it (or N = 1
  is valid, or the steps run out). Reported: that N, the hops/s it carried, the wall time;
- the same-run baseline: today's real-time path, the same fabric at N = 1, its verdict and
  hops/s;
- switch CPU per packet-hop in the dilated fabric (every switch's cpu_s over the fabric's
  tx_packets: this includes the switches' idle polling over the fabric's whole life, so it is
  an upper bound), beside the switch bench's CPU per forwarded packet (`bench switch --quick`,
  full run only).

`testbed calibrate` (testbed.bench.calibrate) runs the same search on 2x2x2 for the budget
`time_dilation: auto` uses, counted as auto counts demand.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from contracts import datapath
from contracts.clock import MAX_DILATION
from contracts.framing import mrc_payload
from testbed.analysis.validity import is_valid
from testbed.bench.endpoint_bench import BenchError, bench_meta
from testbed.experiment.api import load
from testbed.experiment.calibration import load_budget
from testbed.experiment.dilation import demand_hops_per_s, plan
from testbed.experiment.runner import Progress, run_scenario

LINK_MBPS = 10_000.0
LINKS = {"link_mbps": LINK_MBPS, "delay_us": 1, "queue_kb": 12}
FABRICS = {
    "2x2x2": {"spines": 2, "leaves": 2, "hosts_per_leaf": 2},
    "4x4x4": {"spines": 4, "leaves": 4, "hosts_per_leaf": 4},
    "4x8x4": {"spines": 4, "leaves": 8, "hosts_per_leaf": 4},
}
QUICK_FABRICS = ("2x2x2",)
PERMUTATION_BYTES = 1_000_000  # ~0.9 ms virtual per flow when the fabric keeps up
DURATION_S = 0.003  # virtual: bounds an invalid run's wall time (3 ms x N)
MAX_STEPS = 4  # runs per fabric in the search, the N = 1 baseline not counted
QUICK_MAX_STEPS = 3
TRANSPORT = "mrc"


# ----- pure: the search and the figures ---------------------------------------------------------


def next_dilation(tried: dict[float, bool], start: float, max_steps: int) -> float | None:
    """The next N to try, or None when the search is over.

    `tried` maps every N run so far to its verdict (True = valid). Halve while valid, double
    while invalid; over when the smallest valid N has an invalid N/2 (or is 1), when doubling
    would pass MAX_DILATION, or after `max_steps` runs."""
    if not tried:
        return max(1.0, min(start, MAX_DILATION))
    if len(tried) >= max_steps:
        return None
    best = smallest_valid(tried)
    if best is None:
        n = max(tried) * 2
        return n if n <= MAX_DILATION else None
    if best <= 1:
        return None
    n = max(1.0, best / 2)
    if n in tried:  # tried and invalid: bracketed within a factor of 2
        return None
    if any(not ok and m < best and m >= n for m, ok in tried.items()):
        return None
    return n


def smallest_valid(tried: dict[float, bool]) -> float | None:
    valid = [n for n, ok in tried.items() if ok]
    return min(valid) if valid else None


def fabric_hops(counters: dict) -> int:
    """Frames every switch port sent: packet-hops (switch_counters.json)."""
    return sum(
        p.get("tx_packets", 0)
        for sw in counters.values()
        if isinstance(sw, dict)
        for p in sw.get("ports", {}).values()
    )


def hops_per_real_s(counters: dict, real_s: float) -> float | None:
    return fabric_hops(counters) / real_s if real_s and real_s > 0 else None


def switch_cpu_s(counters: dict, field: str = "cpu_s", since_go: bool = False) -> float:
    """The CPU seconds of the fabric's switch processes: each process once, however many
    switches it serves (a shared process's switches all report its figure, with its pid).
    `field`: `cpu_s` (all), or its kernel share `cpu_sys_s` (0 from switches that predate it).
    `since_go`: only what they spent from the workload's start on (the runner records each
    switch's figure then, `cpu_s_at_go`): without start-up, the running fabric's cost.
    """
    by_process: dict[object, float] = {}
    before = field + "_at_go" if since_go else None
    for name, sw in counters.items():
        if isinstance(sw, dict):
            spent = sw.get(field, 0.0)
            if before is not None:
                spent -= sw.get(before, 0.0)
            by_process[sw.get("pid", name)] = spent
    return sum(by_process.values())


def switch_cpu_us_per_hop(counters: dict) -> float | None:
    """The switch processes' CPU seconds over the fabric's packet-hops, in µs: from the
    workload's start on (`cpu_s_at_go`), so idle polling during the run counts and start-up
    does not; counters without that figure give the whole life's, an upper bound."""
    hops = fabric_hops(counters)
    return round(switch_cpu_s(counters, since_go=True) / hops * 1e6, 2) if hops else None


def switch_kernel_us_per_hop(counters: dict) -> float | None:
    """The kernel's share of `switch_cpu_us_per_hop` (the processes' system time): ring reads,
    veth sends and, inside a send to a host, the host's receive path and its endpoint's
    wake-up -- the floor under any speed-up of the switch's own code."""
    hops = fabric_hops(counters)
    return round(switch_cpu_s(counters, "cpu_sys_s", True) / hops * 1e6, 2) if hops else None


def endpoint_cpu_s(stats: dict | None) -> float | None:
    """The endpoint processes' CPU seconds from go to the end (endpoint_stats.json: each
    host's `cpu_s` at the end less at go); None if any host's figure is missing. Hosts served
    by one process (endpoint.shared) all report that process's CPU: each pid counts once."""
    if not stats or not stats.get("end"):
        return None
    by_process: dict[object, float] = {}
    for host, end in stats["end"].items():
        go = (stats.get("at_go") or {}).get(host)
        if not isinstance(end, dict) or not isinstance(go, dict):
            return None
        by_process[end.get("pid", host)] = end["cpu_s"] - go["cpu_s"]
    return sum(by_process.values())


def cpu_breakdown(
    counters: dict, ep_stats: dict | None, delivered_bytes: int, mtu: int
) -> dict[str, float | None]:
    """Where the CPU of a delivered data packet goes, in µs: the switch processes (and their
    kernel share), the endpoint processes, and the sum, over the delivered bytes in full data
    packets of `mtu` (a permutation's messages are MTU-sized but for their last packet, so
    this is within a packet per flow of the count); and the same per packet-hop."""
    packets = delivered_bytes / mrc_payload(mtu) if delivered_bytes else 0
    hops = fabric_hops(counters)
    sw = switch_cpu_s(counters, since_go=True)
    sw_sys = switch_cpu_s(counters, "cpu_sys_s", True)
    ep = endpoint_cpu_s(ep_stats)

    def per(x: float | None, n: float) -> float | None:
        return round(x / n * 1e6, 2) if x is not None and n else None

    total = sw + ep if ep is not None else None
    return {
        "data_packets": round(packets),
        "switch_us_per_data_packet": per(sw, packets),
        "switch_kernel_us_per_data_packet": per(sw_sys, packets),
        "endpoint_us_per_data_packet": per(ep, packets),
        "total_us_per_data_packet": per(total, packets),
        "total_us_per_hop": per(total, hops),
        "hops_per_data_packet": round(hops / packets, 2) if packets else None,
    }


def needed_dilation(demand_hops_per_s: float, budget_hops_per_s: float) -> float | None:
    """The N at which `demand` (virtual) fits in `budget` (real), not rounded."""
    if budget_hops_per_s <= 0:
        return None
    return max(1.0, demand_hops_per_s / budget_hops_per_s)


def scenario(fabric: str, seed: int = 1) -> dict:
    return {
        "name": f"capacity-{fabric}",
        "description": "bench capacity: permutation at line rate, hops per real second",
        "topology": {**FABRICS[fabric], **LINKS},
        "transport": [TRANSPORT],
        "workload": {"kind": "permutation", "bytes": PERMUTATION_BYTES},
        "duration_s": DURATION_S,
        "seed": seed,
        "emulation": {"time_dilation": "auto", "max_reruns": 0},
    }


# ----- the runs ---------------------------------------------------------------------------------


def one_run(fabric: str, n: float, out_dir: Path) -> dict[str, Any]:
    """The permutation on `fabric` at time dilation `n`: verdict, hops/s, CPU per hop."""
    sc = load(scenario(fabric))
    t0 = time.monotonic()
    outcome = run_scenario(
        sc, [TRANSPORT], out_dir, progress=Progress(stream=sys.stderr, live=False), time_dilation=n
    )
    wall = time.monotonic() - t0
    entry = outcome.summary["transports"][TRANSPORT]
    emu = entry["emulation"]
    counters = json.loads((out_dir / "raw" / TRANSPORT / "switch_counters.json").read_text())
    hops = fabric_hops(counters)
    ep_file = out_dir / "raw" / TRANSPORT / "endpoint_stats.json"
    ep_stats = json.loads(ep_file.read_text()) if ep_file.exists() else None
    flows = entry.get("flows", [])
    rec = {
        "time_dilation": n,
        "valid": is_valid(emu),
        "invalid_reasons": list(emu["invalid_reasons"]),
        "real_s": emu["real_s"],
        "virtual_s": emu["virtual_s"],
        "wall_s": round(wall, 1),
        "packet_hops": hops,
        "hops_per_real_s": _round(hops_per_real_s(counters, emu["real_s"])),
        "switch_cpu_us_per_hop": switch_cpu_us_per_hop(counters),
        "switch_kernel_us_per_hop": switch_kernel_us_per_hop(counters),
        "cpu_util": emu.get("cpu_util"),
        "datapath": outcome.summary["emulation"].get("datapath"),
        "rss_peak_mb": emu.get("rss_peak_mb"),
        "cpu": cpu_breakdown(counters, ep_stats, entry.get("delivered_bytes", 0), sc.topology.mtu),
        "flows_done": sum(f.get("fct_ms") is not None for f in flows),
        "flows": len(flows),
        "goodput_fraction": _round(
            sum(f.get("goodput_mbps") or 0 for f in flows) / (len(flows) * LINK_MBPS), 3
        )
        if flows
        else None,
        "out_dir": str(out_dir),
    }
    print(
        f"  capacity {fabric} N={n:g}: {'valid' if rec['valid'] else 'INVALID'}, "
        f"{rec['hops_per_real_s']} hops/s, wall {rec['wall_s']} s",
        file=sys.stderr,
        flush=True,
    )
    return rec


def _round(x: float | None, nd: int = 0) -> float | None:
    return None if x is None else round(x, nd)


def search_fabric(fabric: str, out: Path, max_steps: int, start: float | None = None) -> dict:
    """The smallest valid N of `fabric` (see `next_dilation`), and the N = 1 baseline."""
    sc = load(scenario(fabric))
    predicted = plan(sc, "auto", load_budget()).time_dilation
    runs: list[dict] = []
    tried: dict[float, bool] = {}
    n = next_dilation(tried, start or predicted, max_steps)
    while n is not None:
        rec = one_run(fabric, n, out / f"{fabric}-N{n:g}")
        runs.append(rec)
        tried[n] = rec["valid"]
        n = next_dilation(tried, start or predicted, max_steps)
    best_n = smallest_valid(tried)
    best = next((r for r in runs if r["time_dilation"] == best_n), None)
    baseline = next((r for r in runs if r["time_dilation"] == 1), None) or one_run(
        fabric, 1.0, out / f"{fabric}-N1"
    )
    demand = demand_hops_per_s(sc)
    hosts = FABRICS[fabric]["leaves"] * FABRICS[fabric]["hosts_per_leaf"]
    return {
        "fabric": fabric,
        "hosts": hosts,
        "aggregate_gbps": hosts * LINK_MBPS / 1000,
        "demand_hops_per_virtual_s": round(demand),
        "auto_predicted_n": predicted,
        "smallest_valid_n": best_n,
        "bracketed": best_n is not None and (best_n <= 1 or best_n / 2 in tried),
        "hops_per_real_s": best["hops_per_real_s"] if best else None,
        "switch_cpu_us_per_hop": best["switch_cpu_us_per_hop"] if best else None,
        "switch_kernel_us_per_hop": best.get("switch_kernel_us_per_hop") if best else None,
        "wall_s": round(sum(r["wall_s"] for r in runs), 1),
        "baseline_n1": baseline,
        "runs": runs,
    }


def _switch_bench_cost() -> dict:
    """The switch bench's CPU per forwarded packet (`bench switch --quick`), 1400 B frames."""
    from testbed.bench import switch_bench

    try:
        res = switch_bench.run_switch_bench(quick=True)
    except switch_bench.BenchError as exc:
        return {"cpu_us_per_packet": None, "note": f"switch bench did not run: {exc}"}
    by_size = {r["frame_bytes"]: r for r in res["results"]}
    r = by_size.get(1400) or res["results"][0]
    return {
        "frame_bytes": r["frame_bytes"],
        "cpu_us_per_packet": r["cpu_us_per_packet"].get("switch"),
        "note": "testbed bench switch --quick, run in this bench",
    }


def _datapaths(quick: bool) -> tuple[str, ...]:
    """The data paths a run measures: the one asked for ($TESTBED_DATAPATH, i.e. --datapath);
    else a full run measures both where the compiled one is built (Python first: the baseline
    of the same run), a quick run only the default."""
    asked = datapath.requested()
    if asked is not None:
        return (asked,)
    default = datapath.check(None)
    if quick or default != datapath.C:
        return (default,)
    return (datapath.PYTHON, datapath.C)


def datapath_ratios(results: list[dict]) -> list[dict]:
    """Per fabric measured on both data paths: the compiled path's valid hops per real
    second and smallest valid N against the Python path's of the same run."""
    by = {(r["fabric"], r.get("datapath")): r for r in results}
    out = []
    for fabric in dict.fromkeys(r["fabric"] for r in results):
        py, c = by.get((fabric, datapath.PYTHON)), by.get((fabric, datapath.C))
        if py is None or c is None:
            continue
        hops = (
            round(c["hops_per_real_s"] / py["hops_per_real_s"], 2)
            if c["hops_per_real_s"] and py["hops_per_real_s"]
            else None
        )
        n = (
            round(py["smallest_valid_n"] / c["smallest_valid_n"], 2)
            if c["smallest_valid_n"] and py["smallest_valid_n"]
            else None
        )
        out.append({"fabric": fabric, "hops_per_real_s_c_vs_python": hops, "n_python_vs_c": n})
    return out


def default_results_dir() -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return Path("results") / f"bench-capacity-{stamp}"


def run_capacity_bench(
    quick: bool = False,
    time_dilation: float | str = "auto",
    out: Path | None = None,
    switch_baseline: bool | None = None,
    datapaths: tuple[str, ...] | None = None,
    only: str | None = None,
) -> dict:
    """The whole capacity bench; returns the docs/design.md "Benchmark output"-shaped object.

    `time_dilation`: where each search starts (auto: the runner's prediction)."""
    if os.geteuid() != 0:
        raise BenchError("bench capacity needs root (it creates network namespaces): use sudo")
    started = time.time()
    out = out or default_results_dir()
    start = None if time_dilation == "auto" else float(time_dilation)
    if only is not None and only not in FABRICS:
        raise BenchError(f"--only: one of {', '.join(FABRICS)}, got {only!r}")
    fabrics = (only,) if only else QUICK_FABRICS if quick else tuple(FABRICS)
    steps = QUICK_MAX_STEPS if quick else MAX_STEPS
    paths = datapaths if datapaths is not None else _datapaths(quick)
    results = []
    for f in fabrics:
        for path in paths:
            with datapath.forced(path):
                sub = out if len(paths) == 1 else out / path
                results.append({"datapath": path, **search_fabric(f, sub, steps, start)})
    want_switch = (not quick) if switch_baseline is None else switch_baseline
    switch_cost = (
        _switch_bench_cost()
        if want_switch
        else {"cpu_us_per_packet": None, "note": "not measured (--quick): see bench switch"}
    )
    budget = results[0]["hops_per_real_s"]
    return {
        "bench": "capacity",
        "link_mbps": LINK_MBPS,
        "datapaths": list(paths),
        "fabrics": results,
        "ratios": datapath_ratios(results),
        "budget_hops_per_real_s": budget,
        "budget_from": results[0]["fabric"],
        "switch_bench": switch_cost,
        "results_dir": str(out),
        "meta": bench_meta(
            1,
            started,
            "permutation of 1 MB flows at 10 Gbps per run; hops = switch tx_packets over "
            "every port; N search halves while valid and doubles while invalid",
            quick=quick,
            max_steps=steps,
        ),
    }


# ----- the table --------------------------------------------------------------------------------


def _c(v, fmt: str = "{:,.0f}") -> str:
    return "-" if v is None else fmt.format(v)


def format_capacity_table(d: dict) -> str:
    """The human-readable form of a run_capacity_bench() result."""
    lines = [
        f"capacity bench: permutation of {PERMUTATION_BYTES / 1e6:g} MB flows, "
        f"{d['link_mbps'] / 1000:g} Gbps links, {d['meta']['cpus']} cores, load "
        f"{d['meta']['load_avg'][0]:.1f}" + (" (quick: 2x2x2 only)" if d["meta"]["quick"] else ""),
        "",
        f"  {'fabric':7} {'path':6} {'hosts':>5} {'Gbps':>5} {'auto N':>7} {'smallest valid N':>17} "
        f"{'hops/real s':>12} {'sw CPU us/hop':>14} {'of it kernel':>12} {'wall s':>7}   "
        "N=1 baseline",
    ]
    for f in d["fabrics"]:
        b = f["baseline_n1"]
        n = f["smallest_valid_n"]
        ncell = "none valid" if n is None else f"{n:g}" + ("" if f["bracketed"] else " (upper)")
        lines.append(
            f"  {f['fabric']:7} {f.get('datapath') or '-':6} {f['hosts']:>5} {f['aggregate_gbps']:>5g} "
            f"{f['auto_predicted_n']:>7g} {ncell:>17} {_c(f['hops_per_real_s']):>12} "
            f"{_c(f['switch_cpu_us_per_hop'], '{:.1f}'):>14} "
            f"{_c(f.get('switch_kernel_us_per_hop'), '{:.1f}'):>12} {f['wall_s']:>7.0f}   "
            f"{'valid' if b['valid'] else 'INVALID'}, {_c(b['hops_per_real_s'])} hops/s"
        )
    lines.append("")
    for r in d.get("ratios", []):
        lines.append(
            f"  {r['fabric']}: c / python valid hops per real s "
            f"{_c(r['hops_per_real_s_c_vs_python'], '{:.2f}x')}, smallest valid N python / c "
            f"{_c(r['n_python_vs_c'], '{:.2f}x')}"
        )
    lines.append("")
    lines.append(
        "  every run (N, verdict, hops/real s, goodput fraction, wall s; CPU us per delivered "
        "data packet: switches [kernel], endpoints, all):"
    )
    for f in d["fabrics"]:
        for r in [*f["runs"], *([] if f["baseline_n1"] in f["runs"] else [f["baseline_n1"]])]:
            why = "" if r["valid"] else "  (" + "; ".join(r["invalid_reasons"]) + ")"
            cpu = r.get("cpu") or {}
            lines.append(
                f"    {f['fabric']:7} {f.get('datapath') or '-':6} N={r['time_dilation']:<7g} "
                f"{'valid' if r['valid'] else 'INVALID':8} {_c(r['hops_per_real_s']):>10} "
                f"{_c(r['goodput_fraction'], '{:.2f}'):>5} {r['wall_s']:>6.1f}  "
                f"{_c(cpu.get('switch_us_per_data_packet'))} "
                f"[{_c(cpu.get('switch_kernel_us_per_data_packet'))}], "
                f"{_c(cpu.get('endpoint_us_per_data_packet'))}, "
                f"{_c(cpu.get('total_us_per_data_packet'))}{why}"
            )
    sw = d["switch_bench"]
    lines += [
        "",
        f"  budget (valid hops per real s, {d['budget_from']}): {_c(d['budget_hops_per_real_s'])}",
        f"  switch bench CPU per packet: {_c(sw.get('cpu_us_per_packet'), '{:.2f} us')} "
        f"({sw['note']})",
        f"  results: {d['results_dir']}   ({d['meta']['seconds']:.0f} s in all)",
    ]
    return "\n".join(lines)

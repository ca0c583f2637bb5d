"""`testbed bench switch`: the software switch against same-run baselines, on real namespaces.

Three namespaces of this run only (named `tbb<pid>-gen`, `-dut`, `-sink`), two veth pairs with
every offload off:

    gen: g0 ──── d0 :dut: d1 ──── s0 :sink

A small C load generator (loadgen.c, compiled at bench time into a cache directory) floods g0
from core 0; each device under test (DUT) forwards d0 -> d1 on core 1, in turn:

- `switch`          the full switch: routing, shaping at a line rate that never binds (100 Gbps,
                    so every frame goes through the queue and the shaper), trimming enabled;
- `switch_unshaped` the same switch with rate 0 (its unshaped fast path) -- an extra row;
- `repeater`        a bare Python AF_PACKET loop: recv_into + send, no parsing; the
                    per-packet-syscall baseline a Python design must beat;
- `scapy_naive`     a naive scapy forwarder: parse, ttl -= 1, MACs, checksum, rebuild, send;
- `kernel_bridge`   a Linux bridge joining d0 and d1 (the kernel's own forwarding path).

Forwarded packets are counted where they arrive, on s0 (its rx counters), over a steady window
after a warm-up; each measurement is repeated (interleaved, DUT order rotated) and the median
kept, because a 2-core shared machine is noisy. Then the shaper's accuracy (10/100/200 Mbps,
offered 1.5x) and the queueing delay of timestamped probes against backlog/rate.

This module repeats the measurements, keeps the medians and formats the table; the pieces it
runs are modules of their own: the bed (namespaces, load generator, CPU readings:
testbed.bench.switch_bed), the devices under test (testbed.bench.switch_duts) and one
measurement each of rate, shaper and queueing delay (testbed.bench.switch_measures).

Run as `python -m testbed.bench.switch_bench repeater|scapy_naive ...` this module serves the
Python baselines (testbed.bench.baseline_forwarders; the bench starts them that way inside the
DUT namespace).
"""

from __future__ import annotations

import os
import shutil
import signal
import statistics
import sys
import threading
import time

from testbed.bench.baseline_forwarders import main
from testbed.bench.switch_bed import Bed, BenchError, build_loadgen
from testbed.bench.switch_duts import make_dut
from testbed.bench.switch_measures import (
    measure_forwarding,
    measure_queue_delay,
    measure_shaper,
    timing,
)

DUTS = ("switch", "switch_unshaped", "repeater", "scapy_naive", "kernel_bridge")
BASELINES = ("repeater", "scapy_naive", "kernel_bridge")
FRAME_SIZES = (1400, 64)
SHAPER_RATES = (10, 100, 200)
QUEUE_DELAY_RATES = (10, 50)
CONTENDED = 0.10  # a run whose DUT waited for a CPU longer than this share is measured again
MAX_TRIES = 3

__all__ = ["BenchError", "build_loadgen", "format_table", "main", "run_switch_bench"]


# ----- the bench ------------------------------------------------------------------------------


def _median_or_none(values) -> float | None:
    v = [x for x in values if x is not None]
    return round(statistics.median(v), 3) if v else None


def _median_run(runs: list[dict], key: str, runs_key: str) -> dict:
    """The run whose `key` is the median (a real, self-consistent run), plus every run's value."""
    ordered = sorted(runs, key=lambda r: r[key])
    return ordered[(len(ordered) - 1) // 2] | {runs_key: [r[key] for r in runs]}


def _ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b else 0.0


class Retries:
    """Measure again when another process kept the DUT off its core (a shared machine).

    A run in which the DUT waited for a CPU more than CONTENDED of the window measures the
    neighbour, not the DUT: it is repeated (up to MAX_TRIES, within a budget for the whole
    bench) and the least disturbed attempt is kept. Every kept run still reports its own
    dut_wait_share, so what remains of the disturbance is visible.
    """

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.used = 0

    def __call__(self, measure) -> dict:
        best = None
        for attempt in range(1, MAX_TRIES + 1):
            r = measure()
            r["attempts"] = attempt
            if best is None or r["dut_wait_share"] < best["dut_wait_share"]:
                best = r
            if r["dut_wait_share"] <= CONTENDED or attempt == MAX_TRIES or self.used >= self.budget:
                break
            self.used += 1
        return best


def run_switch_bench(duration_s: float = 2.0, quick: bool = False) -> dict:
    """Run the whole switch bench; returns the docs/design.md "Benchmark output" object."""
    if os.geteuid() != 0:
        raise BenchError(
            "bench switch needs root (it creates network namespaces): run it with sudo"
        )
    for tool in ("ip", "ethtool", "taskset"):
        if shutil.which(tool) is None:
            raise BenchError(f"bench switch needs {tool!r} on PATH")
    t = timing(duration_s, quick)
    loadgen = build_loadgen()
    bed = Bed(loadgen)
    restore = None
    if threading.current_thread() is threading.main_thread():
        restore = signal.signal(signal.SIGTERM, _raise_interrupt)
    started = time.time()
    load_before = os.getloadavg()
    affinity = os.sched_getaffinity(0)
    try:
        # This process and every tool it runs (ip, ethtool, control requests) stay off the
        # DUT's core: the DUT has core dut_cpu to itself, as far as this bench is concerned.
        os.sched_setaffinity(0, {bed.gen_cpu})
        bed.create()
        retry = Retries(t.retry_budget)
        runs: dict[int, dict[str, list[dict]]] = {f: {d: [] for d in DUTS} for f in FRAME_SIZES}
        for rep in range(t.reps):
            for frame_bytes in FRAME_SIZES:
                order = DUTS[rep % len(DUTS) :] + DUTS[: rep % len(DUTS)]
                for name in order:
                    runs[frame_bytes][name].append(
                        retry(
                            lambda n=name, f=frame_bytes: measure_forwarding(bed, make_dut(n), f, t)
                        )
                    )
        shaper_runs: dict[float, list[dict]] = {m: [] for m in SHAPER_RATES}
        delay_runs: dict[float, list[dict]] = {m: [] for m in QUEUE_DELAY_RATES}
        for _rep in range(t.reps):
            for mbps in SHAPER_RATES:
                shaper_runs[mbps].append(retry(lambda m=mbps: measure_shaper(bed, m, t)))
            for mbps in QUEUE_DELAY_RATES:
                delay_runs[mbps].append(retry(lambda m=mbps: measure_queue_delay(bed, m, t)))
    finally:
        try:
            bed.destroy()
        finally:
            os.sched_setaffinity(0, affinity)
            if restore is not None:
                signal.signal(signal.SIGTERM, restore)
    results = []
    for frame_bytes in FRAME_SIZES:
        pps = {d: round(statistics.median(r["pps"] for r in runs[frame_bytes][d])) for d in DUTS}
        detail = {}
        for d in DUTS:
            rs = runs[frame_bytes][d]
            detail[d] = {
                "runs_pps": [round(r["pps"]) for r in rs],
                "mbps": round(statistics.median(r["mbps"] for r in rs), 1),
                "offered_pps": round(statistics.median(r["offered_pps"] for r in rs)),
                "gen_sent": [r["gen_sent"] for r in rs],
                "wire_drops": [r["wire_drops"] for r in rs],
                "dut_drops": [r["dut_drops"] for r in rs],
                "cpu_us_per_packet": _median_or_none(r["cpu_us_per_packet"] for r in rs),
                "dut_cpu_share": round(statistics.median(r["dut_cpu_share"] for r in rs), 2),
                "dut_wait_share": round(statistics.median(r["dut_wait_share"] for r in rs), 2),
                "gen_cpu_share": round(statistics.median(r["gen_cpu_share"] for r in rs), 2),
                "attempts": [r["attempts"] for r in rs],
                # Forwarding all that was offered: the figure is a lower bound set by the generator.
                "generator_bound": statistics.median(r["pps"] / r["offered_pps"] for r in rs)
                > 0.95,
            }
            if "trims" in rs[0]:
                detail[d]["trims"] = [r.get("trims") for r in rs]
                # Share of the forwarded packets that were trimmed headers (not full frames).
                detail[d]["trimmed_share"] = round(
                    statistics.median(r["trims"] / max(1, r["tx_packets"]) for r in rs), 4
                )
            if "vector_frames" in rs[0]:
                # How much the vector path (switch/vector.py) carried, and its mean burst.
                detail[d]["vector_share"] = round(
                    statistics.median(r["vector_frames"] / max(1, r["tx_packets"]) for r in rs), 3
                )
                detail[d]["vector_mean_burst"] = round(
                    statistics.median(r["vector_frames"] / max(1, r["vector_bursts"]) for r in rs),
                    1,
                )
        results.append(
            {
                "frame_bytes": frame_bytes,
                "pps": pps,
                "ratio": {f"switch_vs_{b}": _ratio(pps["switch"], pps[b]) for b in BASELINES},
                "ratio_extra": {
                    "switch_unshaped_vs_repeater": _ratio(pps["switch_unshaped"], pps["repeater"]),
                    "switch_vs_switch_unshaped": _ratio(pps["switch"], pps["switch_unshaped"]),
                },
                "cpu_us_per_packet": {d: detail[d]["cpu_us_per_packet"] for d in DUTS},
                "detail": detail,
            }
        )
    rss = {
        d: round(max(r["rss_mb"] for f in FRAME_SIZES for r in runs[f][d]), 1)
        for d in ("switch", "switch_unshaped", "repeater", "scapy_naive")
    }
    shaper = [_median_run(shaper_runs[m], "measured_mbps", "runs_mbps") for m in SHAPER_RATES]
    queue_delay = [
        _median_run(delay_runs[m], "measured_ms_median", "runs_ms") for m in QUEUE_DELAY_RATES
    ]
    return {
        "bench": "switch",
        "results": results,
        "shaper": shaper,
        "queue_delay": queue_delay,
        "rss_mb": rss,
        "meta": {
            "quick": quick,
            "reps": t.reps,
            "warmup_s": t.warmup_s,
            "window_s": t.window_s,
            "cpus": bed.cpus,
            "generator_cpu": bed.gen_cpu,
            "dut_cpu": bed.dut_cpu,
            "kernel": os.uname().release,
            "python": sys.version.split()[0],
            "loadavg_before": [round(x, 2) for x in load_before],
            "contended_share": CONTENDED,
            "remeasured": retry.used,
            "elapsed_s": round(time.time() - started, 1),
        },
    }


def _raise_interrupt(_sig, _frm) -> None:
    raise KeyboardInterrupt


def format_table(result: dict) -> str:
    """The human-readable form of a run_switch_bench() result."""
    lines = []
    meta = result.get("meta", {})
    lines.append(
        f"switch bench: {meta.get('cpus', '?')} cores, median of {meta.get('reps', '?')} "
        f"interleaved run(s), {meta.get('window_s', '?')} s windows"
    )
    for r in result["results"]:
        lines.append("")
        lines.append(f"{r['frame_bytes']} B frames")
        lines.append(
            f"  {'DUT':<16} {'kpps':>8} {'Mbps':>8}  {'switch/x':>8}  {'CPU us/pkt':>10}  note"
        )
        sw = r["pps"]["switch"]
        for dut, pps in r["pps"].items():
            d = r.get("detail", {}).get(dut, {})
            mbps = d.get("mbps", pps * r["frame_bytes"] * 8 / 1e6)
            rel = f"{sw / pps:8.2f}" if pps else "       -"
            cpu = d.get("cpu_us_per_packet")
            cpu_s = f"{cpu:10.2f}" if cpu is not None else f"{'-':>10}"
            note = "generator-bound (lower bound)" if d.get("generator_bound") else ""
            if d.get("vector_share"):
                note += f" {d['vector_share']:.0%} by vector, ~{d['vector_mean_burst']:.0f} a burst"
            if d.get("trimmed_share", 0) > 0.01:
                note += f" {d['trimmed_share']:.0%} trimmed"
            if d.get("dut_wait_share", 0) > 0.05:
                note += f" waited for CPU {d['dut_wait_share']:.0%}"
            lines.append(f"  {dut:<16} {pps / 1000:8.1f} {mbps:8.1f}  {rel}  {cpu_s}  {note}")
        lines.append("  " + ", ".join(f"{k} {v:.2f}x" for k, v in r["ratio"].items()))
    if result.get("shaper"):
        lines.append("")
        lines.append("shaper (1400 B, offered 1.5x)")
        for s in result["shaper"]:
            lines.append(
                f"  {s['mbps']:>6g} Mbps -> {s['measured_mbps']:9.3f} Mbps  ({s['error_pct']:+.2f}%)"
                f"  switch waited for CPU {s.get('dut_wait_share', 0):.0%}"
            )
    if result.get("queue_delay"):
        lines.append("")
        lines.append("queueing delay (saturated port, 64 kB queue)")
        for q in result["queue_delay"]:
            lines.append(
                f"  {q['mbps']:>6g} Mbps: backlog {q['backlog_bytes']} B -> expected "
                f"{q['expected_ms']:.2f} ms, measured median {q['measured_ms_median']:.2f} ms, "
                f"p99 {q['measured_ms_p99']:.2f} ms"
            )
            if q.get("drain_mbps") and q["drain_mbps"] < 0.98 * q["mbps"]:
                lines.append(
                    f"          drained at {q['drain_mbps']:.2f} Mbps (switch lost CPU time): "
                    f"expected {q['expected_at_drain_ms']:.2f} ms at that rate"
                )
    lines.append("")
    lines.append(
        "RSS: " + ", ".join(f"{k} {v:.1f} MB" for k, v in result.get("rss_mb", {}).items())
    )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

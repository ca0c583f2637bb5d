"""`testbed bench failover`: a silent black hole mid-transfer, MRC against its baselines.

One fabric (2 spines, 2 leaves, 2 hosts per leaf, 100 Mbps: fabric A of
tests/test_endpoint_fabric_netns.py), one bulk transfer h1 -> h3 per run; `BLACKHOLE_AT_S`
into it both directions of spine1-leaf2 start dropping everything with the link up (a silent
black hole: no carrier loss, no routing change), and `HEAL_AT_S` they heal. The same run is
made for `mrc`, for `spray-no-failover` (the same spraying, no EV retirement) and for
`single-path` on an EV that hashes through the dead link, in turn, `reps` times.

Reported per transport (medians over the runs, and every run): failover as the scenario
engine defines it (goodput back to >= 90 % of the pre-failure median, held for 50 ms) on its
clock-aligned 10 ms bins, *and* the same definition with the window sliding in 1 ms steps from
the failure on (`sliding_failover_ms`): a 10 ms target needs a finer step than a 10 ms bin
whose edge falls anywhere in the first 10 ms after the failure. Also the longest delivery
gap, bytes lost, retransmits by reason, how long the control call took (the failure time is
when the switches confirmed it), and kernel-side drops, so a run the machine could not keep
up with is visible. The baseline of the same run: the ratio of each
transport's stall and failover to MRC's (MRC's sliding failover counted as at least the 1 ms
step, since 0 means it recovered in the very first window).
"""

from __future__ import annotations

import bisect
import os
import statistics
import time

from contracts.ports import ROCEV2_UDP_PORT
from testbed.analysis import metrics as tm
from testbed.bench.endpoint_bench import (
    BenchError,
    bench_meta,
    ctl,
    endpoints_on,
    kernel_drops,
    transfer_metrics,
)
from testbed.fabric.paths import source_ports_via
from testbed.fabric.session import Fabric
from testbed.harness.endpoints import run_job
from topologies import TopologyParams

LINK_MBPS = 100
BLACKHOLE = ("spine1", "leaf2")
BLACKHOLE_AT_S = 0.8
HEAL_AT_S = 1.6
STEP_S = 0.001  # the endpoints' delivery samples are 1 ms apart
TRANSPORTS = ("mrc", "spray-no-failover", "single-path")


def sliding_failover_ms(
    deliveries: list[tuple[float, int]],
    t_fail: float,
    end_s: float,
    step_s: float = STEP_S,
) -> float | None:
    """Milliseconds from `t_fail` to the first start, in `step_s` steps, of a SUSTAIN_S window
    whose goodput reaches RECOVERY_FRACTION of the healthy level: testbed.analysis.metrics.failover's
    definition (healthy = median 10 ms bin of the PRE_WINDOW_S before the failure; inside the
    window every 10 ms piece capped at that level, so one burst of held-back bytes is not a
    recovery) with the window sliding instead of sitting on the clock's 10 ms bins. None if
    no window before `end_s` recovers or there is no healthy level to recover to."""

    times = [t for t, _ in deliveries]
    cum = [0]
    for _, n in deliveries:
        cum.append(cum[-1] + n)

    def nbytes(a: float, b: float) -> int:  # delivered in [a, b)
        return cum[bisect.bisect_left(times, b)] - cum[bisect.bisect_left(times, a)]

    bin_s = tm.BIN_S
    pre = [
        nbytes(t_fail - (k + 1) * bin_s, t_fail - k * bin_s) * 8 / bin_s / 1e6
        for k in range(round(tm.PRE_WINDOW_S / bin_s))
        if t_fail - (k + 1) * bin_s >= 0
    ]
    if len(pre) < 3 or statistics.median(pre) <= 0:
        return None
    healthy = statistics.median(pre)
    pieces = round(tm.SUSTAIN_S / bin_s)
    target = tm.RECOVERY_FRACTION * healthy
    start = t_fail
    while start + tm.SUSTAIN_S <= end_s + 1e-9:
        got = [
            min(healthy, nbytes(start + i * bin_s, start + (i + 1) * bin_s) * 8 / bin_s / 1e6)
            for i in range(pieces)
        ]
        if sum(got) / pieces >= target:
            return round((start - t_fail) * 1e3, 1)
        start += step_s
    return None


def _median(values: list) -> float | None:
    vals = [v for v in values if v is not None]
    return round(statistics.median(vals), 1) if vals else None


def one_run(name: str, fab, eps, job: int, mode: str, nbytes: int) -> dict:
    """One bulk transfer of `mode` with the black hole in the middle of it."""

    req: dict = {
        "workload": {"kind": "bulk", "src": "h1", "dst": "h3", "bytes": nbytes},
        "mode": mode,
    }
    if mode == "single-path":  # its one EV must cross the dead link, else nothing is tested
        req |= {
            "evs": 1,
            "ev_base": source_ports_via(fab, "h1", "h3", BLACKHOLE[0], ROCEV2_UDP_PORT)[0],
        }
    k0 = kernel_drops(name)
    res = run_job(
        eps,
        job,
        req,
        timeline=[
            (BLACKHOLE_AT_S, lambda: ctl(name, "blackhole", *BLACKHOLE)),
            (HEAL_AT_S, lambda: ctl(name, "heal", *BLACKHOLE)),
        ],
        timeout=120.0,
    )
    (fail_before, fail_after), (heal_before, _) = res["applied"]
    st = res["status"]["h3"]
    coarse = transfer_metrics(
        eps, job, res["t0"], (fail_after,), bottleneck=LINK_MBPS, failure_ends=(heal_before,)
    )
    deliveries = coarse["deliveries"]
    end_s = deliveries[-1][0] if deliveries else 0.0
    return {
        "failover_ms": _round(coarse["failover_ms"]),
        "failover_status": coarse["failover_status"],
        "sliding_failover_ms": sliding_failover_ms(deliveries, fail_after - res["t0"], end_s),
        "max_stall_ms": _round(coarse["max_stall_ms"]),
        "lost_bytes": nbytes - st.get("received_bytes", 0),
        "done": bool(st.get("done")),
        "goodput_mbps": _round(coarse["goodput_mbps"]),
        "retransmits": coarse["retransmits"],
        "ctl_call_ms": round((fail_after - fail_before) * 1e3, 1),
        "kernel_drops": kernel_drops(name) - k0,
    }


def ratios_to_mrc(summary: dict) -> dict:
    """Each baseline's stall and sliding failover over MRC's, from the per-transport medians.

    MRC's figure counts as at least the 1 ms step: 0 ms means it recovered in the very first
    window, and a ratio to 0 would say nothing."""
    mrc = summary["mrc"]
    ratio = {}
    for mode in TRANSPORTS[1:]:
        key = mode.replace("-", "_")
        for what in ("max_stall_ms", "sliding_failover_ms"):
            a, b = summary[mode][what], mrc[what]
            if b is not None:
                b = max(b, STEP_S * 1e3)
            ratio[f"{key}_vs_mrc_{what[:-3]}"] = round(a / b, 1) if a and b else None
    return ratio


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 1)


def run_failover_bench(quick: bool = False) -> dict:
    """The whole failover bench; returns the docs/design.md "Benchmark output"-shaped object."""

    if os.geteuid() != 0:
        raise BenchError("bench failover needs root (it creates network namespaces): use sudo")
    reps = 1 if quick else 3
    nbytes = 20_000_000  # ~2-3 s at what this machine carries: the heal falls inside it
    params = TopologyParams(spines=2, leaves=2, hosts_per_leaf=2, link_mbps=LINK_MBPS)
    started = time.time()
    fabric = Fabric(params, name=f"fb{os.getpid() % 100000}").up(owned=True)
    name, fab = fabric.name, fabric.description
    runs: dict[str, list[dict]] = {t: [] for t in TRANSPORTS}
    with endpoints_on(fabric, ["h1", "h3"], LINK_MBPS) as eps:
        job = 0
        for _ in range(reps):
            for mode in TRANSPORTS:
                job += 1
                runs[mode].append(one_run(name, fab, eps, job, mode, nbytes))
    summary = {}
    for mode, rs in runs.items():
        summary[mode] = {
            key: _median([r[key] for r in rs])
            for key in ("failover_ms", "sliding_failover_ms", "max_stall_ms", "goodput_mbps")
        } | {
            "lost_bytes": max(r["lost_bytes"] for r in rs),
            "all_done": all(r["done"] for r in rs),
            "kernel_drops": sum(r["kernel_drops"] for r in rs),
            "runs": rs,
        }
    ratio = ratios_to_mrc(summary)
    return {
        "bench": "failover",
        "link_mbps": LINK_MBPS,
        "failure": {
            "action": "blackhole",
            "link": list(BLACKHOLE),
            "at_s": BLACKHOLE_AT_S,
            "heal_at_s": HEAL_AT_S,
        },
        "bulk_bytes": nbytes,
        "transports": summary,
        "ratio": ratio,
        "meta": bench_meta(
            reps,
            started,
            "medians; failover from the switches' confirmation of the black hole",
            fabric=name,
        ),
    }


def format_failover_table(d: dict) -> str:
    """The human-readable form of a run_failover_bench() result."""
    f = d["failure"]
    lines = [
        f"failover bench: {f['action']} {'-'.join(f['link'])} at {f['at_s']} s, heal at "
        f"{f['heal_at_s']} s, bulk {d['bulk_bytes'] / 1e6:g} MB at {d['link_mbps']} Mbps, "
        f"median of {d['meta']['reps']} run(s)",
        "",
        f"  {'transport':18} {'failover ms':>11} {'(sliding)':>11} {'max stall ms':>12} "
        f"{'lost B':>7} {'Mbps':>6} {'kdrops':>6}",
    ]
    for mode, s in d["transports"].items():
        lines.append(
            f"  {mode:18} {_cell(s['failover_ms']):>11} {_cell(s['sliding_failover_ms']):>11} "
            f"{_cell(s['max_stall_ms']):>12} {s['lost_bytes']:>7} {_cell(s['goodput_mbps']):>6} "
            f"{s['kernel_drops']:>6}"
        )
    lines.append("")
    lines.append(
        "  " + ", ".join(f"{k} {v:g}x" if v else f"{k} n/a (a zero)" for k, v in d["ratio"].items())
    )
    return "\n".join(lines)


def _cell(v) -> str:
    return "-" if v is None else f"{v:g}"

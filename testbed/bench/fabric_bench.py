"""`testbed bench fabric`: what the whole emulated fabric carries, per switch-process layout.

Why: the switch bench measures one switch alone on its own core; a fabric runs several switches
and the endpoints on the same 2 cores, where the cost that matters is per packet-hop,
including the process wakeups between hops. This bench measures the same fabric under both
layouts of testbed.fabric.switch_layout -- `per-node` (one process per switch node) and `shared`
(one process for all) -- in one run, interleaved, so that the machine's mood of the moment
falls on both alike.

Fabric A of tests/test_endpoint_fabric_netns.py (2 spines, 2 leaves, 2 hosts per leaf,
100 Mbps): h1 -> h3 crosses leaf1, a spine and leaf2. Both fabrics are up for the whole run
(an idle fabric's processes sleep). Per repetition and layout, in turn:

- `udp`: a bare UDP blaster (one flow, so one path) to a sink: what the emulator delivers;
- `iperf3`: kernel TCP (iperf3 -J), the issue's line-rate check;
- `mrc`: an MRC bulk transfer between endpoint processes paced at the link rate.

For every run: goodput; the switch processes' CPU (user + system, /proc/PID/stat) per
forwarded packet-hop (the fabric's tx_packets over every switch port); kernel-side drops (so
a run the emulator could not keep up with is visible); for mrc the retransmits by reason.
Reported: medians, every run, ratios against the link rate and the ideal payload rate, and
`shared` / `per-node` in the same run.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import time

from contracts.framing import FRAME_OVERHEAD
from testbed.bench.endpoint_bench import (
    BASE_PORT,
    BLAST_PAYLOAD,
    BenchError,
    _fabric_udp_baseline,
    _proc_cpu,
    bench_meta,
    ideal_goodput_mbps,
    kernel_drops,
    switch_counters,
    transfer_metrics,
)
from testbed.fabric import client
from testbed.fabric.lifecycle import FabricError
from testbed.fabric.session import Fabric
from testbed.fabric.switch_layout import LAYOUTS, PER_NODE, SHARED
from testbed.harness.endpoints import FabricEndpoints, run_job
from topologies import TopologyParams, leaf_spine

LINK_MBPS = 100
SRC, DST = "h1", "h3"
WORKLOADS = ("udp", "iperf3", "mrc")
TCP_PAYLOAD_SHARE = 1448 / 1514  # TCP payload per full frame (timestamps on), as iperf3 counts


def _pids(name: str) -> dict:

    st = client.state(name)
    return {
        "nodes": {n: v["pid"] for n, v in st.nodes.items()},
        "switches": sorted({p.pid for p in st.processes if p.role == "switch"}),
    }


def _hops(name: str) -> int:
    """Frames every switch port of the fabric has sent, so far: packet-hops forwarded."""
    return sum(
        p["tx_packets"] for sw in switch_counters(name).values() for p in sw["ports"].values()
    )


def _in(pids: dict, node: str) -> list[str]:
    return ["mnexec", "-a", str(pids["nodes"][node])]


IPERF3_ATTEMPTS = 3  # whole tests (server and client) before the bench gives up


def iperf3_received_mbps(doc: dict) -> float | None:
    """The receiver-side goodput of one iperf3 -J document, or None if the test did not run.

    Why None and not a KeyError: iperf3 3.12 now and then exits 0 with a JSON document that
    has an "error" and no `end.sum_received` (the control connection lost its race with a
    one-off server); that is a failed attempt to retry, not a result and not a crash."""
    if doc.get("error"):
        return None
    bps = doc.get("end", {}).get("sum_received", {}).get("bits_per_second")
    return bps / 1e6 if isinstance(bps, (int, float)) else None


def _iperf3_once(pids: dict, dst_ip: str, seconds: float, port: int) -> tuple[float | None, str]:
    """One iperf3 test against a fresh one-off server: (Mbps or None, why it failed)."""
    server = subprocess.Popen(
        [*_in(pids, DST), "iperf3", "-s", "-1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(50):  # the server may not listen yet: retry the connect
            proc = subprocess.run(
                [*_in(pids, SRC), "iperf3", "-c", dst_ip, "-p", str(port), "-t", f"{seconds:g}", "-J"],
                capture_output=True, text=True, timeout=seconds + 30,
            )  # fmt: skip
            try:
                doc = json.loads(proc.stdout) if proc.stdout.strip() else {}
            except json.JSONDecodeError:
                doc = {}
            why = str(doc.get("error") or proc.stderr.strip() or "no end.sum_received")[-200:]
            if proc.returncode == 0:
                return iperf3_received_mbps(doc), why
            time.sleep(0.05)
        return None, why
    finally:
        if server.poll() is None:
            server.kill()
        server.wait()


def _iperf3(pids: dict, dst_ip: str, seconds: float, port: int) -> float:
    """Kernel TCP goodput h1 -> h3, retrying a test iperf3 itself reports as not run."""
    for _ in range(IPERF3_ATTEMPTS):
        mbps, why = _iperf3_once(pids, dst_ip, seconds, port)
        if mbps is not None:
            return mbps
    raise BenchError(f"bench: iperf3 {SRC} -> {DST} failed {IPERF3_ATTEMPTS} times; last: {why!r}")


def one_run(name: str, fab, eps, workload: str, job: int, scale: dict) -> dict:
    """One measurement of `workload` on fabric `name`, with the switches' CPU per hop."""
    pids = _pids(name)
    dst_ip = fab.host_ip(DST)
    cpu0 = sum(_proc_cpu(p) for p in pids["switches"])
    hops0, k0 = _hops(name), kernel_drops(name)
    extra: dict = {}
    if workload == "udp":
        mbps = _fabric_udp_baseline(name, fab, scale["udp_s"], SRC, DST, BASE_PORT + 3)
    elif workload == "iperf3":
        mbps = _iperf3(pids, dst_ip, scale["tcp_s"], 5401 + job)
    else:
        req = {"workload": {"kind": "bulk", "src": SRC, "dst": DST, "bytes": scale["mrc_bytes"]}}
        res = run_job(eps, job, req)
        if not res["status"][DST]["done"]:
            raise BenchError(f"bench: the mrc bulk on {name} did not finish")
        m = transfer_metrics(eps, job, res["t0"])
        mbps = m["goodput_mbps"]
        extra = {
            "retransmits": m["retransmits"],
            "ev_retired": m["counters"].get("ev_retired", 0),
        }
    cpu = sum(_proc_cpu(p) for p in pids["switches"]) - cpu0
    hops = _hops(name) - hops0
    return {
        "goodput_mbps": round(mbps, 2),
        "switch_cpu_s": round(cpu, 3),
        "packet_hops": hops,
        "switch_cpu_us_per_hop": round(cpu / hops * 1e6, 2) if hops else None,
        "kernel_drops": kernel_drops(name) - k0,
        **extra,
    }


def _median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 2) if values else None


def run_fabric_bench(quick: bool = False) -> dict:
    """The whole fabric bench; returns the docs/design.md "Benchmark output"-shaped object."""

    if os.geteuid() != 0:
        raise BenchError("bench fabric needs root (it creates network namespaces): use sudo")
    reps = 1 if quick else 3
    scale = (
        {"udp_s": 1.0, "tcp_s": 2.0, "mrc_bytes": 8_000_000}
        if quick
        else {"udp_s": 2.0, "tcp_s": 4.0, "mrc_bytes": 20_000_000}
    )
    started = time.time()
    fab = leaf_spine(spines=2, leaves=2, hosts_per_leaf=2, link_mbps=LINK_MBPS)
    tag = os.getpid() % 100000
    names = {layout: f"fb{tag}{layout[0]}" for layout in LAYOUTS}
    params = TopologyParams(spines=2, leaves=2, hosts_per_leaf=2, link_mbps=LINK_MBPS)
    fabrics: dict[str, Fabric] = {}
    eps: dict = {}
    runs: dict = {(lay, w): [] for lay in LAYOUTS for w in WORKLOADS}
    try:
        for layout, name in names.items():
            fabrics[layout] = Fabric(params, name=name, switch_processes=layout).up(owned=True)
            eps[layout] = FabricEndpoints(name, fab, [SRC, DST], pace_mbps=LINK_MBPS)
        job = 0
        for rep in range(reps):
            order = list(LAYOUTS) if rep % 2 == 0 else list(reversed(LAYOUTS))
            for workload in WORKLOADS:
                for layout in order:
                    job += 1
                    runs[(layout, workload)].append(
                        one_run(names[layout], fab, eps[layout], workload, job, scale)
                    )
    finally:
        for e in eps.values():
            e.stop()
            e.cleanup()
        for fabric in fabrics.values():
            with contextlib.suppress(FabricError):
                fabric.down()
    ideal = {
        "udp": LINK_MBPS * BLAST_PAYLOAD / (BLAST_PAYLOAD + FRAME_OVERHEAD),
        "iperf3": LINK_MBPS * TCP_PAYLOAD_SHARE,
        "mrc": ideal_goodput_mbps(LINK_MBPS),
    }
    results = []
    for (layout, workload), rs in runs.items():
        g = _median([r["goodput_mbps"] for r in rs])
        results.append(
            {
                "layout": layout,
                "workload": workload,
                "goodput_mbps": g,
                "vs_link": round(g / LINK_MBPS, 3),
                "vs_ideal": round(g / ideal[workload], 3),
                "switch_cpu_us_per_hop": _median([r["switch_cpu_us_per_hop"] for r in rs]),
                "kernel_drops": sum(r["kernel_drops"] for r in rs),
                "runs": rs,
            }
        )
    by = {(r["layout"], r["workload"]): r for r in results}
    ratio = {}
    for w in WORKLOADS:
        a, b = by[(SHARED, w)], by[(PER_NODE, w)]
        ratio[f"{w}_goodput_shared_vs_per_node"] = (
            round(a["goodput_mbps"] / b["goodput_mbps"], 3) if b["goodput_mbps"] else None
        )
        if a["switch_cpu_us_per_hop"] and b["switch_cpu_us_per_hop"]:
            ratio[f"{w}_cpu_per_hop_shared_vs_per_node"] = round(
                a["switch_cpu_us_per_hop"] / b["switch_cpu_us_per_hop"], 3
            )
    return {
        "bench": "fabric",
        "link_mbps": LINK_MBPS,
        "ideal_mbps": {k: round(v, 2) for k, v in ideal.items()},
        "results": results,
        "ratio": ratio,
        "meta": bench_meta(
            reps,
            started,
            "2 spines x 2 leaves x 2 hosts, h1 -> h3 through 3 switches; both layouts up at "
            "once, runs interleaved; medians; kernel_drops > 0 means the emulator fell behind",
            quick=quick,
            scale=scale,
            fabrics=names,
        ),
    }


def format_fabric_table(d: dict) -> str:
    """The human-readable form of a run_fabric_bench() result."""
    lines = [
        f"fabric bench: {d['link_mbps']:g} Mbps links, h1 -> h3 through 3 switches, "
        f"median of {d['meta']['reps']} run(s), {d['meta']['cpus']} cores",
        "",
        f"  {'workload':<8} {'layout':<9} {'Mbps':>7} {'vs link':>8} {'vs ideal':>9} "
        f"{'switch CPU us/hop':>18} {'kernel drops':>13}",
    ]
    for r in d["results"]:
        cpu = r["switch_cpu_us_per_hop"]
        lines.append(
            f"  {r['workload']:<8} {r['layout']:<9} {r['goodput_mbps']:7.1f} {r['vs_link']:8.3f} "
            f"{r['vs_ideal']:9.3f} {'-' if cpu is None else f'{cpu:.1f}':>18} "
            f"{r['kernel_drops']:>13}"
        )
    lines.append("")
    lines.append("  " + ", ".join(f"{k} {v}" for k, v in d["ratio"].items()))
    return "\n".join(lines)

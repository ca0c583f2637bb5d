"""`testbed bench hop`: what the switch's own Python costs per packet-hop, on a fake clock.

Why this bench: in a running dilated fabric a packet-hop costs the switch process ~17 µs of
CPU (the fidelity permutation at N = 3000, docs/fidelity.md), against ~2.3 µs per packet in
`testbed bench switch`, and issue 18 asks for at most 3x. The running fabric mixes three
things: the switch's Python, the kernel's share (veth sends to hosts, which run the host's
receive path and wake its endpoint, and the switch's own sleeps), and what sharing two cores
with the endpoint processes does to both (cold caches). This bench takes the kernel and the
other processes away. The switches of a fabric, built from the configs a fabric gives them and
wired in memory as in a shared switch process (switch/local_links.py), forward a permutation
at line rate in one process on a fake virtual clock, through `switch.core.ForwardingCore`;
what leaves on host ports is counted and dropped. What is left is the Python path a packet-hop takes in a loaded fabric -- the port
queue, the heap of departures, the in-memory wire, `Switch.receive_batch` -- with hot caches:
a floor under the in-fabric figure that no tuning of the running fabric can go below.
The same workload runs through both data paths of the core, Python and C (switch/_core.c,
when built), in the same run: rows carry `datapath`, and `python_vs_c` is how many times
cheaper a packet-hop is in C. The hosts' offers are drawn before the clock starts, so only
the core's work is timed.

The loop wakes on a fixed virtual period chosen so that there are `wakeups_per_hop` wake-ups
per packet-hop (0.13: what the running fabric does at N = 3000; docs/fidelity.md), and, as the
same run's baseline, five times further apart: how much of the cost is per wake-up rather than
per hop. (Frames offered between two wake-ups arrive together at the second, so the batched
row's bursts are coarser and trim more: it bounds what batching alone could save.) No root, no namespaces, no kernel: pure computation (like `bench ecmp`).

The traffic is open-loop (no congestion control): every host offers `load` x its line rate,
sprayed at random over 64 EVs, so queues fill, mark and trim as in a loaded fabric. Every frame a host
offered must come out at a host port (whole, or trimmed to a header): the bench checks that
and says so, since a forwarding path that lost frames would look cheap.
"""

from __future__ import annotations

import hashlib
import random
import time
from dataclasses import dataclass

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from contracts.defaults import ROCE_PORT
from contracts.dscp import TRIMMABLE_DSCP
from switch.config import switch_config
from switch.core import ForwardingCore, c_available, c_unavailable_reason
from testbed.scenario import flows, validate
from topologies import leaf_spine

FABRIC = {"spines": 4, "leaves": 4, "hosts_per_leaf": 4}  # the fidelity bench's fabric
LINKS = {"link_mbps": 10_000, "delay_us": 1, "queue_kb": 12, "forwarding": "source-routed"}
DILATION = 3000  # sets the switches' early windows as in the running fabric it is compared to
FRAME_BYTES = 1514  # a full 1500 B MTU frame
EVS = 64  # UDP source ports (EVs) each host sprays over
FABRIC_WAKEUPS_PER_HOP = 0.13
"""Wake-ups per packet-hop of the shared switch process in the fidelity permutation at
N = 3000 (docs/fidelity.md, "Switch CPU per packet-hop"); the bench's first row uses it."""
BATCH_FACTOR = 5  # the baseline row: wake-ups this many times further apart
VIRTUAL_S = 0.010
QUICK_VIRTUAL_S = 0.002


@dataclass
class HopRun:
    """One run's figures (`cpu_us_per_hop` is process CPU over packet-hops)."""

    wakeups_per_hop: float
    hops: int
    offered: int
    at_hosts: int
    trims: int
    drops: int
    cpu_s: float
    datapath: str = "python"
    digest: str = ""  # of every frame the hosts received, in order (both paths: the same)

    @property
    def cpu_us_per_hop(self) -> float:
        return self.cpu_s / self.hops * 1e6 if self.hops else 0.0

    @property
    def conserved(self) -> bool:
        """Every offered frame came out at a host (whole or as a header), none dropped."""
        return self.at_hosts == self.offered and self.drops == 0

    def to_dict(self) -> dict:
        return {
            "datapath": self.datapath,
            "wakeups_per_hop": round(self.wakeups_per_hop, 4),
            "packet_hops": self.hops,
            "offered": self.offered,
            "at_hosts": self.at_hosts,
            "trims": self.trims,
            "drops": self.drops,
            "cpu_s": round(self.cpu_s, 3),
            "cpu_us_per_hop": round(self.cpu_us_per_hop, 2),
            "conserved": self.conserved,
        }


def _permutation(fabric_keys: dict, seed: int) -> list[tuple[str, str]]:
    """The scenario runner's own permutation of `seed`, as (src, dst) host names."""
    sc = validate(
        {
            "name": "hop-bench",
            "topology": dict(fabric_keys),
            "workload": {"kind": "permutation", "bytes": "1MB"},
            "duration_s": 1,
            "seed": seed,
        }
    )
    return [(f.src, f.dst) for f in flows(sc)]


def _frame(src_ip: str, dst_ip: str, sport: int) -> bytes:
    """A full-size, trimmable, ECN-capable MRC data frame (what the endpoints send)."""
    payload = FRAME_BYTES - 14 - 20 - 8
    return bytes(
        Ether(dst="02:7b:00:00:00:02", src="02:7b:00:00:00:01")
        / IP(src=src_ip, dst=dst_ip, tos=TRIMMABLE_DSCP << 2 | 2)
        / UDP(sport=sport, dport=ROCE_PORT)
        / (b"\0" * payload)
    )


def _schedule(
    keys: dict, fab, core: ForwardingCore, period: float, virtual_s: float, load: float, seed: int
) -> tuple[list[list[tuple[int, int, list[bytes]]]], int]:
    """Per wake-up, the bursts the hosts offer by then: (switch, port, frames); and how many
    frames in all. Drawn before the clock starts, so that the figure is the switches' alone."""
    index = {sw.name: i for i, sw in enumerate(core.switches)}
    senders = []
    for src, dst in _permutation(keys, seed):
        leaf = fab.interfaces[src][0].peer_node
        sw = core.switches[index[leaf]]
        port = sw.port_by_name[fab.interface(leaf, src).name]
        templates = [
            _frame(fab.host_ip(src), fab.host_ip(dst), 49152 + k * 97 % 16384) for k in range(EVS)
        ]
        senders.append((index[leaf], port.index, templates))
    gap = FRAME_BYTES * 8 / (keys["link_mbps"] * 1e6) / load  # virtual s between a host's frames
    rng = random.Random(seed)
    next_at = [rng.random() * gap for _ in senders]
    # Each host's own EV draws (oblivious spraying): the same in every run of a seed.
    picks = [random.Random(f"{seed}:{i}") for i in range(len(senders))]
    wakeups = []
    offered = 0
    now = 0.0
    while now < virtual_s + period:
        now += period
        # Every frame due by now, but none from `virtual_s` on: however far apart the
        # wake-ups, each run offers the same frames.
        until = min(now, virtual_s)
        bursts = []
        for i, (sw, port, templates) in enumerate(senders):
            t = next_at[i]
            batch = []
            while t <= until and t < virtual_s:
                batch.append(templates[picks[i].randrange(EVS)])
                t += gap
            next_at[i] = t
            if batch:
                bursts.append((sw, port, batch))
                offered += len(batch)
        wakeups.append(bursts)
    return wakeups, offered


def run_hops(
    wakeups_per_hop: float,
    virtual_s: float,
    fabric: dict | None = None,
    load: float = 1.0,
    seed: int = 1,
    datapath: str = "python",
    digest: bool = False,
) -> HopRun:
    """Forward the permutation of `seed` at `load` x line rate for `virtual_s` (virtual), the
    loop waking `wakeups_per_hop` times per packet-hop; then let the queues drain. `datapath`:
    switch.core's, "python" or "c"; `digest`: hash what the hosts receive (costs CPU)."""
    keys = {**FABRIC, **LINKS, **(fabric or {})}
    fab = leaf_spine(**keys)
    configs = [
        switch_config(fab, n, seed=seed, time_dilation=DILATION)
        for n, node in fab.nodes.items()
        if node.kind != "host"
    ]
    core = ForwardingCore(configs, datapath=datapath)  # wired in memory, one order of service
    gap = FRAME_BYTES * 8 / (keys["link_mbps"] * 1e6) / load
    hosts = len(_permutation(keys, seed))
    hops_per_s = hosts * 3 / gap  # host -> leaf -> spine -> leaf -> host: 3 switch sends
    period = 1.0 / (wakeups_per_hop * hops_per_s)
    schedule, offered = _schedule(keys, fab, core, period, virtual_s, load, seed)
    receive = core.receive
    service = core.service
    take = core.take_egress if digest else core.discard_egress
    h = hashlib.sha256()
    at_hosts = 0
    wakeups = 0
    now = 0.0
    cpu0 = time.process_time()
    for bursts in schedule:
        now += period
        wakeups += 1
        for sw, port, batch in bursts:
            receive(sw, port, batch, now)
        service(now)
        out = take()
        if digest:
            at_hosts += len(out)
            for sw, port, frame in out:
                h.update(b"%d %d %.9f " % (sw, port, now) + frame)
        else:
            at_hosts += out
    while True:  # drain: every queue empties
        now += period
        wakeups += 1
        due = service(now)
        out = take()
        at_hosts += len(out) if digest else out
        if digest:
            for sw, port, frame in out:
                h.update(b"%d %d %.9f " % (sw, port, now) + frame)
        if due is None:
            break
    cpu = time.process_time() - cpu0
    counters = core.counters()
    ports = [p for sw in counters for p in sw["ports"].values()]
    hops = sum(p["tx_packets"] for p in ports)
    return HopRun(
        wakeups_per_hop=wakeups / hops if hops else 0.0,
        hops=hops,
        offered=offered,
        at_hosts=at_hosts,
        trims=sum(p["trims"] for p in ports),
        # A port counts its queue's drops too (Port.offer); a switch its routing drops.
        drops=sum(sum(p["drops"].values()) for p in ports)
        + sum(sum(sw["drops"].values()) for sw in counters),
        cpu_s=cpu,
        datapath=datapath,
        digest=h.hexdigest() if digest else "",
    )


def run_hop_bench(
    quick: bool = False, repeats: int | None = None, datapaths: tuple[str, ...] | None = None
) -> dict:
    """The fabric's wake-up rate and the baseline (BATCH_FACTOR x fewer), interleaved, through
    each data path of switch.core (the C one when it is built); the best of `repeats` runs each
    (the machine is shared: the least disturbed run is the cost)."""
    virtual_s = QUICK_VIRTUAL_S if quick else VIRTUAL_S
    repeats = repeats or (1 if quick else 3)
    if datapaths is None:
        datapaths = ("python", "c") if c_available() else ("python",)
    runs: dict[tuple[str, str], list[HopRun]] = {}
    for _ in range(repeats):
        for dp in datapaths:
            for name, wph in (
                ("fabric", FABRIC_WAKEUPS_PER_HOP),
                ("batched", FABRIC_WAKEUPS_PER_HOP / BATCH_FACTOR),
            ):
                runs.setdefault((dp, name), []).append(run_hops(wph, virtual_s, datapath=dp))
    best = {k: min(v, key=lambda r: r.cpu_us_per_hop) for k, v in runs.items()}
    f, b = best[("python", "fabric")], best[("python", "batched")]

    def ratio(x: float, y: float) -> float | None:
        return round(x / y, 3) if y else None

    return {
        "bench": "hop",
        "fabric": {**FABRIC, **LINKS, "time_dilation": DILATION},
        "virtual_s": virtual_s,
        "repeats": repeats,
        "datapaths": list(datapaths),
        "c_unavailable": c_unavailable_reason(),
        # The Python path's rows keep their keys; `rows_by_datapath` has every path's.
        "rows": {name: best[("python", name)].to_dict() for name in ("fabric", "batched")},
        "rows_by_datapath": {
            dp: {name: best[(dp, name)].to_dict() for name in ("fabric", "batched")}
            for dp in datapaths
        },
        "all_us_per_hop": {
            f"{dp}/{name}": [round(r.cpu_us_per_hop, 2) for r in v]
            for (dp, name), v in runs.items()
        },
        "fabric_vs_batched": ratio(f.cpu_us_per_hop, b.cpu_us_per_hop),
        # How many times cheaper the C core forwards a packet-hop than the Python one.
        "python_vs_c": {
            name: ratio(best[("python", name)].cpu_us_per_hop, best[("c", name)].cpu_us_per_hop)
            for name in ("fabric", "batched")
        }
        if "c" in datapaths
        else None,
        "conserved": all(r.conserved for v in runs.values() for r in v),
    }


def format_hop_table(d: dict) -> str:
    fab = d["fabric"]
    lines = [
        f"switch forwarding per packet-hop, fake clock, no kernel: {fab['spines']}x{fab['leaves']}x"
        f"{fab['hosts_per_leaf']} at {fab['link_mbps'] / 1000:g} Gbps, {fab['queue_kb']:g} kB "
        f"queues, {fab['forwarding']}, permutation at line rate, {d['virtual_s'] * 1e3:g} ms "
        f"virtual; best of {d['repeats']}",
        f"  {'datapath':<8} {'wake-ups':<10} {'per hop':>8} {'hops':>9} {'trims':>7} {'CPU s':>7} "
        f"{'µs/hop':>8}  all runs",
    ]
    for dp, rows in d["rows_by_datapath"].items():
        for name, r in rows.items():
            lines.append(
                f"  {dp:<8} {name:<10} {r['wakeups_per_hop']:>8.3f} {r['packet_hops']:>9} "
                f"{r['trims']:>7} {r['cpu_s']:>7.2f} {r['cpu_us_per_hop']:>8.2f}  "
                + ", ".join(f"{x:.2f}" for x in d["all_us_per_hop"][f"{dp}/{name}"])
            )
    lines.append(f"  python fabric / batched: {d['fabric_vs_batched']}x")
    if d["python_vs_c"]:
        lines.append(
            "  python / c: " + ", ".join(f"{name} {x}x" for name, x in d["python_vs_c"].items())
        )
    else:
        lines.append(f"  c: not measured ({d['c_unavailable']})")
    lines.append(
        "  every offered frame reached a host: "
        + ("yes" if d["conserved"] else "NO (the figures are not a forwarding cost)")
    )
    return "\n".join(lines)

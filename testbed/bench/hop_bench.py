"""`testbed bench hop`: what the switch's own Python costs per packet-hop, on a fake clock.

Why this bench: in a running dilated fabric a packet-hop costs the switch process ~17 µs of
CPU (the fidelity permutation at N = 3000, docs/fidelity.md), against ~2.3 µs per packet in
`testbed bench switch`, and issue 18 asks for at most 3x. The running fabric mixes three
things: the switch's Python, the kernel's share (veth sends to hosts, which run the host's
receive path and wake its endpoint, and the switch's own sleeps), and what sharing two cores
with the endpoint processes does to both (cold caches). This bench takes the kernel and the
other processes away. The switches of a fabric, built from the configs a fabric gives them and
wired in memory as in a shared switch process (switch/local_links.py), forward a permutation
at line rate in one process on a fake virtual clock; every host port is a sink that counts
frames. What is left is the Python path a packet-hop takes in a loaded fabric -- the port
queue, the heap of departures, the in-memory wire, `Switch.receive_batch` -- with hot caches:
a floor under the in-fabric figure that no tuning of the running fabric can go below.

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

import random
import time
from dataclasses import dataclass

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from contracts.defaults import ROCE_PORT
from contracts.dscp import TRIMMABLE_DSCP
from switch import local_links
from switch.config import switch_config
from switch.dataplane import Switch
from switch.egress_timers import ActivePorts
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

    @property
    def cpu_us_per_hop(self) -> float:
        return self.cpu_s / self.hops * 1e6 if self.hops else 0.0

    @property
    def conserved(self) -> bool:
        """Every offered frame came out at a host (whole or as a header), none dropped."""
        return self.at_hosts == self.offered and self.drops == 0

    def to_dict(self) -> dict:
        return {
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


class _Sink:
    """A host port's wire: counts what the switch sends (a veth end, minus the kernel)."""

    __slots__ = ("frames",)

    def __init__(self) -> None:
        self.frames = 0

    def send(self, frame) -> bool:
        self.frames += 1
        return True


class _Clock:
    __slots__ = ("t",)

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


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


def run_hops(
    wakeups_per_hop: float,
    virtual_s: float,
    fabric: dict | None = None,
    load: float = 1.0,
    seed: int = 1,
) -> HopRun:
    """Forward the permutation of `seed` at `load` x line rate for `virtual_s` (virtual), the
    loop waking `wakeups_per_hop` times per packet-hop; then let the queues drain."""
    keys = {**FABRIC, **LINKS, **(fabric or {})}
    fab = leaf_spine(**keys)
    clock = _Clock()
    sinks: dict[str, _Sink] = {}

    def open_port(name: str) -> _Sink:
        sinks[name] = _Sink()
        return sinks[name]

    switches = {
        n: Switch(switch_config(fab, n, seed=seed, time_dilation=DILATION), open_port=open_port)
        for n, node in fab.nodes.items()
        if node.kind != "host"
    }
    delivered = local_links.link(list(switches.values()), clock)
    active = ActivePorts()  # one set for every switch, as switch/loop.py shares it
    seq = 0
    for sw in switches.values():
        sw.active = active
        for p in sw.ports:
            p.active = active
            p.seq = seq
            seq += 1
    senders = []
    for src, dst in _permutation(keys, seed):
        leaf = fab.interfaces[src][0].peer_node
        sw = switches[leaf]
        port = sw.port_by_name[fab.interface(leaf, src).name]
        templates = [
            _frame(fab.host_ip(src), fab.host_ip(dst), 49152 + k * 97 % 16384) for k in range(EVS)
        ]
        senders.append((sw, port, templates))
    gap = FRAME_BYTES * 8 / (keys["link_mbps"] * 1e6) / load  # virtual s between a host's frames
    hops_per_s = len(senders) * 3 / gap  # host -> leaf -> spine -> leaf -> host: 3 switch sends
    period = 1.0 / (wakeups_per_hop * hops_per_s)
    rng = random.Random(seed)
    next_at = [rng.random() * gap for _ in senders]
    sent = [0] * len(senders)  # frames each host has offered
    # Each host's own EV draws (oblivious spraying): the same in every run of a seed.
    picks = [random.Random(f"{seed}:{i}") for i in range(len(senders))]
    wakeups = 0
    cpu0 = time.process_time()
    while True:
        clock.t += period
        now = clock.t
        wakeups += 1
        if now < virtual_s + period:
            # Every frame due by now, but none from `virtual_s` on: however far apart the
            # wake-ups, each run offers the same frames.
            until = min(now, virtual_s)
            for i, (sw, port, templates) in enumerate(senders):
                t = next_at[i]
                if t > until:
                    continue
                batch = []
                while t <= until and t < virtual_s:
                    batch.append(bytearray(templates[picks[i].randrange(EVS)]))
                    sent[i] += 1
                    t += gap
                next_at[i] = t
                if batch:
                    sw.receive_batch(port, batch, now)
        before = delivered[0]
        due = active.serve(now)
        while delivered[0] != before:  # switch/loop.py: again while a wire delivered
            before = delivered[0]
            due = active.serve(now)
        if now >= virtual_s + period and due is None:
            break
    cpu = time.process_time() - cpu0
    ports = [p for sw in switches.values() for p in sw.ports]
    hops = sum(p.counters.tx_packets for p in ports)
    return HopRun(
        wakeups_per_hop=wakeups / hops if hops else 0.0,
        hops=hops,
        offered=sum(sent),
        at_hosts=sum(s.frames for s in sinks.values()),
        trims=sum(p.queue.trims for p in ports),
        # A port counts its queue's drops too (Port.offer); a switch its routing drops.
        drops=sum(sum(p.counters.drops.values()) for p in ports)
        + sum(sum(sw.drops.values()) for sw in switches.values()),
        cpu_s=cpu,
    )


def run_hop_bench(quick: bool = False, repeats: int | None = None) -> dict:
    """The fabric's wake-up rate and the baseline (BATCH_FACTOR x fewer), interleaved; the
    best of `repeats` runs each (the machine is shared: the least disturbed run is the
    cost)."""
    virtual_s = QUICK_VIRTUAL_S if quick else VIRTUAL_S
    repeats = repeats or (1 if quick else 3)
    rows: dict[str, list[HopRun]] = {"fabric": [], "batched": []}
    for _ in range(repeats):
        rows["fabric"].append(run_hops(FABRIC_WAKEUPS_PER_HOP, virtual_s))
        rows["batched"].append(run_hops(FABRIC_WAKEUPS_PER_HOP / BATCH_FACTOR, virtual_s))
    best = {k: min(v, key=lambda r: r.cpu_us_per_hop) for k, v in rows.items()}
    f, b = best["fabric"], best["batched"]
    return {
        "bench": "hop",
        "fabric": {**FABRIC, **LINKS, "time_dilation": DILATION},
        "virtual_s": virtual_s,
        "repeats": repeats,
        "rows": {k: r.to_dict() for k, r in best.items()},
        "all_us_per_hop": {k: [round(r.cpu_us_per_hop, 2) for r in v] for k, v in rows.items()},
        "fabric_vs_batched": round(f.cpu_us_per_hop / b.cpu_us_per_hop, 3)
        if b.cpu_us_per_hop
        else None,
        "conserved": all(r.conserved for v in rows.values() for r in v),
    }


def format_hop_table(d: dict) -> str:
    fab = d["fabric"]
    lines = [
        f"switch Python per packet-hop, fake clock, no kernel: {fab['spines']}x{fab['leaves']}x"
        f"{fab['hosts_per_leaf']} at {fab['link_mbps'] / 1000:g} Gbps, {fab['queue_kb']:g} kB "
        f"queues, {fab['forwarding']}, permutation at line rate, {d['virtual_s'] * 1e3:g} ms "
        f"virtual; best of {d['repeats']}",
        f"  {'wake-ups':<10} {'per hop':>8} {'hops':>9} {'trims':>7} {'CPU s':>7} {'µs/hop':>8}"
        "  all runs",
    ]
    for name, r in d["rows"].items():
        lines.append(
            f"  {name:<10} {r['wakeups_per_hop']:>8.3f} {r['packet_hops']:>9} {r['trims']:>7} "
            f"{r['cpu_s']:>7.2f} {r['cpu_us_per_hop']:>8.2f}  "
            + ", ".join(f"{x:.2f}" for x in d["all_us_per_hop"][name])
        )
    lines.append(
        f"  fabric / batched: {d['fabric_vs_batched']}x; every offered frame reached a host: "
        + ("yes" if d["conserved"] else "NO (the figures are not a forwarding cost)")
    )
    return "\n".join(lines)

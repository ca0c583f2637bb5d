"""Inputs for, and output parsing of, the REPS authors' htsim fork (spcl/HTSIM, elias_dev).

Our own glue, no simulator code: it writes the fork's `.topo` and connection-matrix files for the
scaled 32-host fabrics, names the failure modes of the fork's failure generator, and turns one
run's stdout (plus its `sim/output/packet_seq/` files) into FCTs and counters. `run_grid.py` drives
it; `tests/test_reps_htsim_glue.py` checks it without the simulator.

Naming: htsim node i is testbed host h(i+1); leaf switch `Switch_LowerPod_k` / queue `LSk` is
leaf(k+1) and holds nodes 4k..4k+3, i.e. h(4k+1)..h(4k+4); `Switch_UpperPod_j` / `USj` is spine(j+1).
"""

from __future__ import annotations

import math
import random
import re
import statistics
from collections.abc import Iterable, Sequence

HOSTS = 32
SPINES = 4
LEAVES = 8
HOSTS_PER_LEAF = HOSTS // LEAVES
HOST_GBPS = 800
HOP_LATENCY_NS = 1000
FLOW_BYTES = 1 << 22  # 4 MiB
MTU = 4096

# fabric name -> leaf-spine link speed (Gbps); hosts are always 800 Gbps
FABRICS = {"ls_1to1": 800, "ls_8to1": 100}

# The failure modes of plotting/evaluation_failures/all_plot_4MB.py that exist as
# sim/failures_input/<mode>.txt at the fork's commit, with what the fork does for each.
FAILURE_MODES: dict[str, str] = {
    "none": "no -failures_input (baseline)",
    "fail_one_switch_after_10us_for_100us": "one switch drops everything from 10 us for 100 us",
    "fail_one_switch": "one switch drops everything from t=0",
    "one_switch_drops_every_10th_packet": "one switch drops every 10th packet from t=0",
    "fail_one_cable_after_10us_for_100us": "one cable (one direction) down from 10 us for 100 us",
    "fail_one_cable": "one cable (one direction) down from t=0",
    "one_cable_drops_every_10th_packet": "Only-US-CS-Cable: ON -> only core cables; a 2-tier fabric has none",
    "degrade_one_switch": "one switch: every port at 1/10 rate, and 10 % of its packets dropped",
    "degrade_one_cable": (
        "one cable (one direction) drops 33 % (p=.9), 66 % (p=.09) or all (p=.01) of packets;"
        " its delay is set to 10 packet times"
    ),
    "ber_switch_one_percent": "switches corrupt (drop) up to 1 % of packets",
    "ber_cable_one_percent": "cables corrupt (drop) up to 1 % of packets, one per 10 ns",
    "10_percent_failed_switches": "switches fail, one per 10 us, until >10 % are down",
    "10_percent_failed_cables": "cables fail until >10 % are down",
    "10_percent_degraded_switches": "switches degrade until >10 % are degraded",
    "10_percent_degraded_cables": "cables degrade until >10 % are degraded",
    "fail_new_switch_every_100us_for_50us": "a new switch fails every 100 us for 50 us",
    "fail_new_cable_every_100us_for_50us": "a new cable fails every 100 us for 50 us",
    "fail_one_switch_and_cable_after_10us_for_100us": "one switch and one cable, 10 us + 100 us",
    "fail_one_switch_one_cable": "one switch and one cable down from t=0",
}

# -strat values of main_uec_entry_modern.cpp; "ecmp" is its single-path-per-flow floor
BALANCERS = ("reps", "reps_circular", "spraying", "ecmp")


def host_name(node: int) -> str:
    return f"h{node + 1}"


def leaf_of(node: int) -> int:
    return node // HOSTS_PER_LEAF


def topo_text(leaf_spine_gbps: int) -> str:
    """The fork's FatTreeTopology::load format: one pod of 8 leaves x 4 hosts under 4 spines."""
    oversub = (HOSTS_PER_LEAF * HOST_GBPS) // (SPINES * leaf_spine_gbps)
    if oversub * SPINES * leaf_spine_gbps != HOSTS_PER_LEAF * HOST_GBPS:
        raise ValueError(f"{leaf_spine_gbps} Gbps uplinks give no integer oversubscription")
    return (
        f"# 2-tier leaf-spine, {HOSTS} hosts: {SPINES} spines x {LEAVES} leaves x "
        f"{HOSTS_PER_LEAF} hosts, hosts {HOST_GBPS}G, leaf-spine {leaf_spine_gbps}G ({oversub}:1)\n"
        f"Nodes {HOSTS}\nTiers 2\nPodsize {HOSTS}\n\n"
        f"Tier 0\nOversubscribed {oversub}\nDownlink_speed_Gbps {HOST_GBPS}\n"
        f"Radix_Down {HOSTS_PER_LEAF}\nRadix_Up {SPINES}\n"
        f"Downlink_Latency_ns {HOP_LATENCY_NS}\nSwitch_Latency_ns 0\n\n"
        f"Tier 1\nDownlink_speed_Gbps {leaf_spine_gbps}\nRadix_Down {LEAVES}\n"
        f"Downlink_Latency_ns {HOP_LATENCY_NS}\nSwitch_Latency_ns 0\nBundle 1\n"
    )


def permutation(seed: int) -> list[tuple[int, int]]:
    """A permutation of the hosts (seeded) in which every flow leaves its leaf."""
    rng = random.Random(seed)
    dst = list(range(HOSTS))
    for _ in range(100_000):
        rng.shuffle(dst)
        if all(leaf_of(s) != leaf_of(d) for s, d in enumerate(dst)):
            return list(enumerate(dst))
    raise RuntimeError("no leaf-leaving permutation found")  # pragma: no cover


def incast(seed: int, senders: int = 8, receiver: int = 0) -> list[tuple[int, int]]:
    """`senders` hosts on leaves other than the receiver's, all sending to `receiver`."""
    rng = random.Random(seed)
    others = [h for h in range(HOSTS) if leaf_of(h) != leaf_of(receiver)]
    return [(s, receiver) for s in sorted(rng.sample(others, senders))]


def traffic(name: str, seed: int) -> list[tuple[int, int]]:
    if name == "perm":
        return permutation(seed)
    if name == "incast8":
        return incast(seed)
    raise ValueError(name)


def cm_text(flows: Sequence[tuple[int, int]], size: int = FLOW_BYTES) -> str:
    """The fork's connection-matrix format (ConnectionMatrix::load)."""
    lines = [f"Nodes {HOSTS}", f"Connections {len(flows)}"]
    lines += [f"{s}->{d} id {i} start 0 size {size}" for i, (s, d) in enumerate(flows, 1)]
    return "\n".join(lines) + "\n"


_ELEMENT_PATTERNS = (
    (re.compile(r"^Switch_LowerPod_(\d+)$"), lambda m: f"leaf{int(m[1]) + 1}"),
    (re.compile(r"^Switch_UpperPod_(\d+)$"), lambda m: f"spine{int(m[1]) + 1}"),
    (re.compile(r"^Pipe-LS(\d+)->US(\d+)"), lambda m: f"leaf{int(m[1]) + 1}->spine{int(m[2]) + 1}"),
    (re.compile(r"^Pipe-US(\d+)->LS(\d+)"), lambda m: f"spine{int(m[1]) + 1}->leaf{int(m[2]) + 1}"),
    (re.compile(r"^Pipe-SRC(\d+)->LS(\d+)"), lambda m: f"h{int(m[1]) + 1}->leaf{int(m[2]) + 1}"),
    (re.compile(r"^Pipe-LS(\d+)->DST(\d+)"), lambda m: f"leaf{int(m[1]) + 1}->h{int(m[2]) + 1}"),
)


def pipe_by_id(pipe_id: int) -> str:
    """The link behind `pipe_<id>`: the failure generator prints a pipe's id-based nodename. Pipe
    ids count every Pipe made: first one CallbackPipe inside each of the 12 switches (ids 0-11,
    which the generator skips by name), then FatTreeTopology::init_network's pipes in a fixed
    order: per leaf, per host: leaf->host then host->leaf; then per leaf, per spine: spine->leaf
    then leaf->spine. The runs agree: no id below 12 or above 139 ever appears, and the ids the
    generator refuses as critical include every host uplink (odd ids 13-75)."""
    index = pipe_id - (LEAVES + SPINES)
    if index < 0:
        raise ValueError(f"pipe_{pipe_id} is a switch's internal pipe")
    host_pipes = HOSTS * 2
    if index < host_pipes:
        host, up = divmod(index, 2)
        leaf = leaf_of(host)
        return f"h{host + 1}->leaf{leaf + 1}" if up else f"leaf{leaf + 1}->h{host + 1}"
    pair, up = divmod(index - host_pipes, 2)
    leaf, spine = divmod(pair, SPINES)
    if leaf >= LEAVES:
        raise ValueError(f"pipe_{pipe_id} is not a fabric link")
    return f"leaf{leaf + 1}->spine{spine + 1}" if up else f"spine{spine + 1}->leaf{leaf + 1}"


def testbed_element(name: str) -> str:
    """An htsim switch or pipe name in testbed terms; unknown names come back unchanged."""
    m = re.match(r"^pipe_(\d+)\(", name.strip())
    if m:
        return pipe_by_id(int(m[1]))
    for pattern, render in _ELEMENT_PATTERNS:
        m = pattern.match(name.strip())
        if m:
            return render(m)
    return name.strip()


_FCT = re.compile(
    r"Flow Completion time is ([\d.]+) - Flow Finishing Time \d+ - Flow Start Time \d+"
    r" - Size Finished Flow (\d+) - From (\d+) - To (\d+)"
)
_EVENTS = (
    ("fail_switch", re.compile(r"^Failed a new Switch name: (\S+) at (\d+) for ([\d.]+) seconds")),
    ("fail_cable", re.compile(r"^Failed a new Cable name: (\S+) at (\d+) for ([\d.]+) seconds")),
    ("periodic_switch", re.compile(r"^Periodically failed a new Switch name: (\S+) at (\d+)")),
    ("periodic_cable", re.compile(r"^Periodically failed a new Cable name: (\S+) at (\d+)")),
    ("degrade_switch", re.compile(r"^New Switch degraded at:(\d+)Switch_name: (\S+)")),
    ("degrade_cable", re.compile(r"^Degraded a new Cable name: (\S+)")),
)


def parse_stdout(text: str) -> dict:
    """FCTs, counters and failure events from one run of htsim_uec_entry_modern."""
    flows = []
    nacks = 0
    dropped = None
    connections = None
    events: list[dict] = []
    recovered = 0
    for line in text.splitlines():
        m = _FCT.search(line)
        if m:
            flows.append(
                {
                    "src": host_name(int(m[3])),
                    "dst": host_name(int(m[4])),
                    "fct_us": float(m[1]),
                    "bytes": int(m[2]),
                }
            )
            continue
        m = re.search(r"Total NACKs: (\d+)", line)
        if m:
            nacks += int(m[1])
            continue
        m = re.search(r"Total number of dropped packets: (\d+)", line)
        if m:
            dropped = int(m[1])
            continue
        m = re.search(r"Connections: (\d+)", line)
        if m and connections is None:
            connections = int(m[1])
            continue
        if line.startswith("Recovered from Fail"):
            recovered += 1
            continue
        for kind, pattern in _EVENTS:
            m = pattern.match(line)
            if not m:
                continue
            if kind == "degrade_switch":
                name, at_ps = m[2], int(m[1])
            else:
                name = m[1]
                at_ps = int(m[2]) if m.re.groups >= 2 else None
            event = {"kind": kind, "htsim_name": name, "element": testbed_element(name)}
            if at_ps is not None:
                event["at_us"] = at_ps / 1e6
            if m.re.groups >= 3 and kind.startswith("fail_"):
                event["for_us"] = float(m[3]) * 1e6
            events.append(event)
            break
    return {
        "flows": flows,
        "connections": connections,
        "nacks": nacks,
        "dropped_packets": dropped,
        "failure_events": events,
        "recoveries": recovered,
    }


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def fct_summary(fcts: Sequence[float]) -> dict:
    if not fcts:
        return {"median_us": None, "p99_us": None, "max_us": None}
    return {
        "median_us": statistics.median(fcts),
        "p99_us": percentile(fcts, 99),
        "max_us": max(fcts),
    }


def out_of_order(seq: Iterable[int]) -> dict:
    """The authors' reordering metrics for one receiver's arrival sequence (packet indices,
    retransmissions included): arrivals below the highest index seen so far, that count over all
    arrivals, and the largest |arrival position - index| among them."""
    count = 0
    total = 0
    cur_max = 0
    distance = 0
    for position, val in enumerate(seq):
        total += 1
        if val < cur_max:
            count += 1
            distance = max(distance, abs(position - val))
        cur_max = max(cur_max, val)
    return {
        "ooo": count,
        "arrivals": total,
        "ratio": count / total if total else 0.0,
        "max_distance": distance,
    }

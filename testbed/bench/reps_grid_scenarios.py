"""What `testbed bench reps-grid` runs: the REPS paper's failure grid, scaled to 32 hosts.

The REPS paper (Bonato et al., "REPS: Recycled Entropy Packet Spraying", arXiv 2407.21625)
evaluates load balancers under failures with its authors' htsim fork (spcl/HTSIM,
plotting/evaluation_failures/all_plot_4MB.py): 128 hosts, 800 Gbps links, 1 µs per hop, 4 KiB
MTU, 4 MiB flows in a permutation and an incast, 256 entropies per connection, and one failure
mode per run. Here the speed is free (time dilation) and the host count is not: the fabrics are
32 hosts (4 spines x 8 leaves x 4 hosts), non-blocking and 8:1 oversubscribed (leaf-spine links
at 100 Gbps), everything else as in their scripts.

Failures are silent unless the mode says otherwise: a failed link or switch drops what it is
given (`blackhole`) and nobody is told, as in the paper, where only the endpoints' load balancer
can steer around it. The failed elements are fixed (named below), so the same element fails in
every run and in the authors' simulator (tools/reps_htsim).
"""

from __future__ import annotations

import random
from typing import Any

MIB4 = 4 * 1024 * 1024  # the paper's 4 MiB flows
SPINES, LEAVES, HOSTS_PER_LEAF = 4, 8, 4
LINK_MBPS = 800_000.0
FABRICS: dict[str, dict[str, Any]] = {
    "1to1": {},
    "8to1": {"oversubscription": 8.0},  # leaf-spine links at 800 x 4 / (4 x 8) = 100 Gbps
}
LINKS = {
    "spines": SPINES,
    "leaves": LEAVES,
    "hosts_per_leaf": HOSTS_PER_LEAF,
    "link_mbps": LINK_MBPS,
    "delay_us": 1,  # the paper's 1 µs per hop (htsim -hop_latency 1000 ns)
    "mtu": 4096,  # the paper's 4 KiB MTU
    # htsim -q 294 (kB of a composite queue) at 800 Gbps: 2.9 µs of queue per port.
    "queue_kb": 294,
}
EVS = 256  # htsim -number_entropies 256
SEED = 1
# Virtual seconds a run may last. The ideal permutation flow takes 42 µs (4 MiB at 800 Gbps);
# the paper's runs end at 5 ms, which would cost ~20 real minutes per run here at the dilation
# 800 Gbps needs: a flow still unfinished at 2 ms is reported unfinished (an FCT above 2 ms).
DURATION_S = 0.002
EMULATION = {"time_dilation": "auto", "max_reruns": 0}

TRAFFIC = ("permutation", "incast")
INCAST_DST = "h1"
# Eight senders to one receiver, none on the receiver's leaf: the first host of leaves 2-8,
# and the second host of leaf 2.
INCAST_SRCS = ["h5", "h6", "h9", "h13", "h17", "h21", "h25", "h29"]

ROWS: dict[str, Any] = {
    "reps": {"name": "mrc", "label": "reps", "lb": "reps", "evs": EVS},
    "oblivious": {"name": "mrc", "label": "oblivious", "lb": "oblivious", "evs": EVS},
    "wrr": {"name": "mrc", "label": "wrr", "lb": "wrr", "evs": EVS},
    "single-path": "single-path",
    "roce": "roce",
}
"""The load balancers: REPS, oblivious spraying (the paper's "spraying"), MRC's weighted
round-robin, and the one-path floors."""

# The failed elements: one leaf-spine link and one spine, fixed for every run.
LINK = ["leaf1", "spine1"]
SWITCH = "spine1"
SECOND_LINK = ["leaf2", "spine2"]  # a link of another spine, for the combinations
SECOND_SWITCH = "spine2"
DEGRADED_FRACTION = 0.25  # a degraded link runs at a quarter of its speed
AT_S, FOR_S = 10e-6, 100e-6  # "failed for 100 µs from 10 µs"
FLAP_EVERY_S, FLAP_FOR_S = 100e-6, 50e-6  # "a new link failed every 100 µs for 50 µs"
TEN_PERCENT = 0.10


def spine_links(spine: str) -> list[list[str]]:
    return [[f"leaf{k}", spine] for k in range(1, LEAVES + 1)]


def all_links() -> list[list[str]]:
    return [link for s in range(1, SPINES + 1) for link in spine_links(f"spine{s}")]


def ten_percent_links(seed: int = SEED) -> list[list[str]]:
    """10 % of the leaf-spine links (3 of 32), drawn once from the seed."""
    links = all_links()
    n = max(1, round(TEN_PERCENT * len(links)))
    return random.Random(f"reps-grid-10pct:{seed}").sample(links, n)


def _uplink_mbps(fabric: str) -> float:
    over = FABRICS[fabric].get("oversubscription")
    return LINK_MBPS if over is None else LINK_MBPS * HOSTS_PER_LEAF / (SPINES * over)


def _blackhole(links: list[list[str]], at: float = 0.0, until: float | None = None) -> list:
    ev: list[dict] = [{"at": at, "action": "blackhole", "link": list(x)} for x in links]
    if until is not None:
        ev += [{"at": until, "action": "heal", "link": list(x)} for x in links]
    return ev


def _degrade(links: list[list[str]], mbps: float) -> list:
    return [{"at": 0.0, "action": "degrade", "link": list(x), "mbps": mbps} for x in links]


def _switch_egress(switch: str, **impair: Any) -> list:
    """An impairment of everything a switch sends (its egress ports towards the leaves)."""
    return [
        {"at": 0.0, "action": "impair", "link": list(x), "direction": [switch, x[0]], **impair}
        for x in spine_links(switch)
    ]


def _flaps(seed: int = SEED) -> list:
    """A new leaf-spine link blackholed every 100 µs for 50 µs, through the run, in a seeded
    order that uses every link before repeating one."""
    links = all_links()
    random.Random(f"reps-grid-flaps:{seed}").shuffle(links)
    ev: list[dict] = []
    k, t = 0, AT_S
    while t < DURATION_S:
        link = links[k % len(links)]
        ev += _blackhole([link], at=round(t, 9), until=round(t + FLAP_FOR_S, 9))
        k, t = k + 1, t + FLAP_EVERY_S
    return ev


def mode_events(mode: str, fabric: str) -> list[dict]:
    """The scenario events of failure mode `mode` on `fabric` (the uplink rate sets what
    "degraded" means)."""
    slow = _uplink_mbps(fabric) * DEGRADED_FRACTION
    spine = spine_links(SWITCH)
    events = {
        "none": lambda: [],
        "link-failed": lambda: _blackhole([LINK]),
        "link-failed-100us": lambda: _blackhole([LINK], AT_S, AT_S + FOR_S),
        "switch-failed": lambda: _blackhole(spine),
        "switch-failed-100us": lambda: _blackhole(spine, AT_S, AT_S + FOR_S),
        "link-drops-every-10th": lambda: [
            {"at": 0.0, "action": "impair", "link": list(LINK), "drop_every": 10}
        ],
        "switch-drops-every-10th": lambda: _switch_egress(SWITCH, drop_every=10),
        "link-degraded": lambda: _degrade([LINK], slow),
        "switch-degraded": lambda: _degrade(spine, slow),
        "link-ber-1pct": lambda: [
            {"at": 0.0, "action": "impair", "link": list(LINK), "corrupt_percent": 1.0}
        ],
        "switch-ber-1pct": lambda: _switch_egress(SWITCH, corrupt_percent=1.0),
        "10pct-links-failed": lambda: _blackhole(ten_percent_links()),
        "10pct-links-degraded": lambda: _degrade(ten_percent_links(), slow),
        "link-flaps": _flaps,
        "switch-and-link-failed": lambda: _blackhole([*spine, SECOND_LINK]),
        "failed-and-degraded": lambda: [
            *_blackhole([*spine, SECOND_LINK]),
            *_degrade([*spine_links(SECOND_SWITCH), ["leaf3", "spine3"]], slow),
        ],
    }
    if mode not in events:
        raise ValueError(f"mode: one of {', '.join(MODES)}, got {mode!r}")
    return events[mode]()


MODES = (
    "none", "link-failed", "link-failed-100us", "switch-failed", "switch-failed-100us",
    "link-drops-every-10th", "switch-drops-every-10th", "link-degraded", "switch-degraded",
    "link-ber-1pct", "switch-ber-1pct", "10pct-links-failed", "10pct-links-degraded",
    "link-flaps", "switch-and-link-failed", "failed-and-degraded",
)  # fmt: skip
"""The paper's failure modes (its failures_input files), in its order, with "none" first."""

HTSIM_MODE = {
    "link-failed": "fail_one_cable",
    "link-failed-100us": "fail_one_cable_after_10us_for_100us",
    "switch-failed": "fail_one_switch",
    "switch-failed-100us": "fail_one_switch_after_10us_for_100us",
    "link-drops-every-10th": "one_cable_drops_every_10th_packet",
    "switch-drops-every-10th": "one_switch_drops_every_10th_packet",
    "link-degraded": "degrade_one_cable",
    "switch-degraded": "degrade_one_switch",
    "link-ber-1pct": "ber_cable_one_percent",
    "switch-ber-1pct": "ber_switch_one_percent",
    "10pct-links-failed": "10_percent_failed_cables",
    "10pct-links-degraded": "10_percent_degraded_cables",
    "link-flaps": "fail_new_cable_every_100us_for_50us",
    "switch-and-link-failed": "fail_one_switch_one_cable",
    "failed-and-degraded": "fail_one_switch_and_cable_degrade_one_switch_and_cable",
}
"""Each mode's failures_input file in the authors' scripts."""

QUICK = {
    "fabrics": ("1to1",),
    "traffic": ("permutation",),
    "modes": ("link-failed-100us",),
    "rows": ("reps",),
}
"""`--quick` (CI): one failure mode, REPS alone, on the 1:1 permutation: two minutes of the
machine, which proves the grid's path end to end; the claims need the full grid."""


def failed_links(mode: str, fabric: str) -> list[tuple[str, str]]:
    """The leaf-spine links a mode damages (sorted pairs), for the time-to-avoid measure."""
    out = set()
    for e in mode_events(mode, fabric):
        if e["action"] != "heal":
            out.add(tuple(sorted(e["link"])))
    return sorted(out)  # type: ignore[arg-type]


def failure_window(mode: str, fabric: str) -> tuple[float, float | None] | None:
    """(start, end or None for good) of a mode's first failure; None without one."""
    ev = mode_events(mode, fabric)
    starts = [e["at"] for e in ev if e["action"] != "heal"]
    if not starts:
        return None
    ends = [e["at"] for e in ev if e["action"] == "heal"]
    first = min(starts)
    later = [t for t in ends if t > first]
    return first, (min(later) if later else None)


def row_key(row: str) -> str:
    t = ROWS[row]
    return t if isinstance(t, str) else t["label"]


def scenario(fabric: str, traffic: str, mode: str, row: str, seed: int = SEED) -> dict:
    """One cell of the grid as a scenario mapping (what `testbed run` reads from YAML)."""
    if fabric not in FABRICS:
        raise ValueError(f"fabric: one of {', '.join(FABRICS)}, got {fabric!r}")
    if traffic not in TRAFFIC:
        raise ValueError(f"traffic: one of {', '.join(TRAFFIC)}, got {traffic!r}")
    if row not in ROWS:
        raise ValueError(f"row: one of {', '.join(ROWS)}, got {row!r}")
    workload: dict[str, Any] = (
        {"kind": "permutation", "bytes": MIB4}
        if traffic == "permutation"
        else {"kind": "incast", "dst": INCAST_DST, "srcs": list(INCAST_SRCS), "bytes": MIB4}
    )
    return {
        "name": f"reps-grid-{fabric}-{traffic}-{mode}",
        "description": (
            f"REPS failure grid (arXiv 2407.21625, scaled to 32 hosts): {traffic} of 4 MiB "
            f"flows, {fabric} fabric, failure mode {mode}"
        ),
        "topology": {**LINKS, **FABRICS[fabric]},
        "transport": [ROWS[row]],
        "workload": workload,
        "events": mode_events(mode, fabric),
        "duration_s": DURATION_S,
        "seed": seed,
        "emulation": dict(EMULATION),
    }

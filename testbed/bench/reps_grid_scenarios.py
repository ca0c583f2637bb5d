"""What `testbed bench reps-grid` runs: the REPS paper's failure grid, scaled to 32 hosts.

The REPS paper (Bonato et al., "REPS: Recycled Entropy Packet Spraying", arXiv 2407.21625)
evaluates load balancers under failures with its authors' htsim fork (spcl/HTSIM,
plotting/evaluation_failures/all_plot_4MB.py): 128 hosts, 800 Gbps links, 1 µs per hop, 4 KiB
MTU, 4 MiB flows in a permutation and an incast, 256 entropies per connection, and one failure
mode per run. Here the speed is free (time dilation) and the host count is not: the fabrics are
32 hosts (4 spines x 8 leaves x 4 hosts), non-blocking and 8:1 oversubscribed (leaf-spine links
at 100 Gbps), everything else as in their scripts.

Failures are what the authors' simulator makes of them (its sim/failuregenerator.cpp): a failed
cable (one direction of a link) or switch drops everything, silently -- nobody is told, and only
the endpoints' load balancers can steer around it; a degraded one drops a share of packets at
random (10 % at a switch, 33 % on a cable), not a slowed one. The failed elements are the ones
the simulator picked in its runs (named below), so the same element fails in both
(tools/reps_htsim).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from endpoint.config import MRC_RETRY_LINEAR_MAX

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
    # The simulator's queues: its command line says `-q 294`, but its main then sets every
    # queue to the BDP of a 6-hop round trip, 1,224,000 B ("Using BDP of 1224000 - Queue is
    # 1224000" in each run's output). The grid of 2026-12-06 19:44-20:34 ran at 294 kB, before
    # this was seen (docs/measurements/2026-12-06-reps-grid.md).
    "queue_kb": 1224,
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
# Eight senders to one receiver, none on the receiver's leaf: the simulator's (its incast8_s919
# connection matrix, tools/reps_htsim), four leaves sending one, two, two and three flows. Until
# 2026-12-08 the grid spread its eight over seven leaves (h5, h6, h9, h13, h17, h21, h25, h29):
# a failed sender uplink then touched other flows than in the simulator, and a cell's
# failures (the simulator's picks, on its senders' leaves) left three sender leaves untouched
# (docs/measurements/2026-12-08-the-simulators-cables.md).
INCAST_SRCS = ["h12", "h13", "h14", "h21", "h22", "h26", "h27", "h28"]

FIXED_ACK_TIMEOUT = 6
"""MRC's local ACK timeout exponent for the `*-fixed-rto` rows: 1.024 µs x 2^6 = 65.5 µs."""

ROWS: dict[str, Any] = {
    "reps": {"name": "mrc", "label": "reps", "lb": "reps", "evs": EVS},
    "oblivious": {"name": "mrc", "label": "oblivious", "lb": "oblivious", "evs": EVS},
    "wrr": {"name": "mrc", "label": "wrr", "lb": "wrr", "evs": EVS},
    "single-path": "single-path",
    "roce": "roce",
    # The two balancers without MRC's copies of a last-resort resend (3 by default), as the
    # authors' simulator resends: the copies cost the receiver's side capacity in the 8:1
    # incast (docs/fidelity.md, Published results). Run on request (`--rows`), not by default.
    "reps-1copy": {"name": "mrc", "label": "reps-1copy", "lb": "reps", "evs": EVS,
                   "tail_copies": 1},
    "oblivious-1copy": {"name": "mrc", "label": "oblivious-1copy", "lb": "oblivious",
                        "evs": EVS, "tail_copies": 1},
    # The simulator's ECMP is its own transport (selective resends, a NACK per trim) on one
    # hashed path; `single-path` and `roce` are RC's (go-back-N, one NAK per gap, a trimmed
    # packet dropped). MRC's recovery on one EV, without copies, is its like-for-like.
    "ecmp": {"name": "mrc", "label": "ecmp", "lb": "wrr", "evs": 1, "tail_copies": 1},
    # The two balancers with MRC's fixed local ACK timeout (1.024 µs x 2^6 = 65.5 µs) in
    # place of RFC 6298's adaptive RTO, the nearest to the simulator's constant 61.2 µs
    # (5 base RTTs): behind the 8:1 uplinks and a slowed spine the adaptive RTO grows to
    # 0.2-1 ms, and most of the 8:1 permutation's REPS gaps are that wait (docs/fidelity.md).
    # The counterfactual that measures it, run on request.
    "reps-fixed-rto": {"name": "mrc", "label": "reps-fixed-rto", "lb": "reps", "evs": EVS,
                       "ack_timeout": FIXED_ACK_TIMEOUT},
    "oblivious-fixed-rto": {"name": "mrc", "label": "oblivious-fixed-rto", "lb": "oblivious",
                            "evs": EVS, "ack_timeout": FIXED_ACK_TIMEOUT},
    # One copy and a fixed timeout; the timeout still doubles per timeout in a row.
    "reps-1copy-fixed-rto": {"name": "mrc", "label": "reps-1copy-fixed-rto", "lb": "reps",
                             "evs": EVS, "tail_copies": 1, "ack_timeout": FIXED_ACK_TIMEOUT},
    # REPS resending as the simulator does: one copy and a constant timeout. Its timer
    # (sim/uec.cpp) is 5 base RTTs from each packet's last send and never backs off; MRC's
    # first `retry_linear_cnt` timeouts in a row do not double, its maximum is 7.
    "reps-sim-resend": {"name": "mrc", "label": "reps-sim-resend", "lb": "reps", "evs": EVS,
                        "tail_copies": 1, "ack_timeout": FIXED_ACK_TIMEOUT,
                        "retry_linear_cnt": MRC_RETRY_LINEAR_MAX},
}  # fmt: skip
"""The load balancers: REPS, oblivious spraying (the paper's "spraying"), MRC's weighted
round-robin, and the one-path floors."""
DEFAULT_ROWS = ("reps", "oblivious", "wrr", "single-path", "roce")
"""The rows of a grid whose `--rows` is not given (and of a read-back's missing cells)."""

# The failed elements: those the authors' simulator failed in its REPS runs of the same fabric
# and traffic (tools/reps_htsim/results, `failure_events`: its generator fails the first element
# a packet meets that keeps every pair of hosts connected), so the same element fails here. A
# "cable" is one direction of a link, as the simulator's pipes are. The simulator's picks
# depend on the traffic: in the incast the first cable a packet meets is a sender's uplink
# (leaf3 -> spine4), where a receiver's-leaf uplink (the permutation's leaf1 -> spine4) would
# carry only ACKs. Its spraying runs sometimes picked a mirror image (another spine's cable of
# the same leaf, in the same direction); the oblivious row here fails REPS's element, which the
# fabric's symmetry makes the same experiment.
SWITCH = "spine4"  # fail_one_switch, degrade_one_switch, *_drops_every_10th: in every run
SECOND_CABLE = ("spine1", "leaf1")  # fail_one_switch_one_cable: spine4, and spine1 -> leaf1
# The simulator's 10 % of cables (its REPS runs of 10_percent_failed_cables and
# 10_percent_degraded_cables fail the same ones): uplinks, the first cable a packet meets; 13
# in the permutation (five leaves lose two of their four uplinks), 6 in the incast (uplinks of
# its 4 sender leaves; tools/reps_htsim/README.md: how it picks). The grid drew 6 of the
# 64 leaf-spine directions at random until 2026-12-08: under half the permutation's, and in
# the incast a receiver's-leaf downlink (spine1 -> leaf1), which at 8:1 cut the receiver's four
# 100 Gbps links to three, a bound of 895 µs where the simulator's is 671
# (docs/measurements/2026-12-08-the-simulators-cables.md).
PERM_TEN_PCT_CABLES = (
    ("leaf1", "spine4"), ("leaf2", "spine1"), ("leaf3", "spine1"), ("leaf4", "spine2"),
    ("leaf5", "spine3"), ("leaf6", "spine2"), ("leaf7", "spine2"), ("leaf8", "spine2"),
    ("leaf1", "spine1"), ("leaf2", "spine2"), ("leaf3", "spine3"), ("leaf5", "spine1"),
    ("leaf6", "spine1"),
)  # fmt: skip
INCAST_TEN_PCT_CABLES = (
    ("leaf3", "spine4"), ("leaf4", "spine1"), ("leaf6", "spine3"), ("leaf7", "spine3"),
    ("leaf4", "spine3"), ("leaf6", "spine1"),
)  # fmt: skip
# The simulator's flapping cables, one every 100 µs, each the first cable a packet met then: in
# the incast these include the receiver's-leaf downlinks, which carry all of its data. It draws
# only while its flows run (one flap in the 1:1 permutation's ~100 µs); the testbed's run goes
# on with a seeded order of every cable (_flaps).
PERM_1TO1_FLAPS = (("leaf1", "spine4"),)
PERM_8TO1_FLAPS = (
    ("leaf1", "spine4"), ("spine4", "leaf4"), ("spine4", "leaf2"), ("leaf6", "spine2"),
    ("spine4", "leaf6"),
)  # fmt: skip
INCAST_1TO1_FLAPS = (
    ("leaf3", "spine4"), ("spine3", "leaf1"), ("leaf1", "spine1"), ("leaf1", "spine1"),
)  # fmt: skip
INCAST_8TO1_FLAPS = (
    ("leaf3", "spine4"), ("leaf1", "spine1"), ("leaf4", "spine4"), ("spine4", "leaf1"),
    ("spine3", "leaf1"), ("leaf3", "spine1"), ("spine1", "leaf1"), ("spine1", "leaf1"),
    ("leaf7", "spine4"),
)  # fmt: skip
PICKS: dict[tuple[str, str], dict[str, Any]] = {
    ("1to1", "permutation"): {
        "ten_pct_cables": PERM_TEN_PCT_CABLES,  # 10_percent_failed_cables, 10_percent_degraded_cables
        "cable_flaps": PERM_1TO1_FLAPS,  # fail_new_cable_every_100us_for_50us, in its order
        "cable": ("leaf1", "spine4"),  # fail_one_cable, degrade_one_cable
        "cable_100us": ("spine2", "leaf2"),  # fail_one_cable_after_10us_for_100us
        "switch_100us": "spine2",  # fail_one_switch_after_10us_for_100us
        "pair_100us": ("spine2", ("spine2", "leaf2")),  # fail_one_switch_and_cable_after_...
        "ten_pct_switches_degraded": ("spine4", "spine2"),  # 10_percent_degraded_switches (2 of 12)
        "ten_pct_switches_failed": ("spine4", "spine1"),  # 10_percent_failed_switches
    },
    ("8to1", "permutation"): {
        "ten_pct_cables": PERM_TEN_PCT_CABLES,  # 10_percent_failed_cables, 10_percent_degraded_cables
        "cable_flaps": PERM_8TO1_FLAPS,  # fail_new_cable_every_100us_for_50us, in its order
        "cable": ("leaf1", "spine4"),
        "cable_100us": ("spine3", "leaf6"),
        "switch_100us": "spine3",
        "pair_100us": ("spine3", ("spine3", "leaf5")),
        "ten_pct_switches_degraded": ("spine4", "spine2"),
        "ten_pct_switches_failed": ("spine4", "spine2"),
    },
    ("1to1", "incast"): {
        "ten_pct_cables": INCAST_TEN_PCT_CABLES,  # 10_percent_failed_cables, 10_percent_degraded_cables
        "cable_flaps": INCAST_1TO1_FLAPS,  # fail_new_cable_every_100us_for_50us, in its order
        "cable": ("leaf3", "spine4"),
        "cable_100us": ("leaf4", "spine4"),
        "switch_100us": "spine3",
        "pair_100us": ("spine3", ("leaf4", "spine4")),
        "ten_pct_switches_degraded": ("spine4",),  # the simulator drew one of 12 here
        "ten_pct_switches_failed": ("spine4",),
    },
    ("8to1", "incast"): {
        "ten_pct_cables": INCAST_TEN_PCT_CABLES,  # 10_percent_failed_cables, 10_percent_degraded_cables
        "cable_flaps": INCAST_8TO1_FLAPS,  # fail_new_cable_every_100us_for_50us, in its order
        "cable": ("leaf3", "spine4"),
        "cable_100us": ("leaf4", "spine3"),
        "switch_100us": "spine4",
        "pair_100us": ("spine4", ("leaf4", "spine3")),
        "ten_pct_switches_degraded": ("spine4",),
        "ten_pct_switches_failed": ("spine4",),
    },
}
# The simulator's "degraded" (sim/failuregenerator.cpp): a degraded switch divides every port's
# rate by 10 (`switch_degradation_percent` 0.1 x 100) and drops 10 % of the packets it forwards;
# a degraded cable is not slowed: it drops 33 % (90 % of degraded cables; 9 % drop 66 %, 1 %
# everything: the common case is used), and its delay becomes 10 packet times (0.4 µs, under
# the 1 µs hop: not modelled). Until 2026-12-07 the grid's degraded switch only dropped
# (docs/measurements/2026-12-07-go-back-n-and-8to1-modes.md).
SWITCH_DEGRADED_LOSS_PCT = 10.0
SWITCH_DEGRADED_RATE_DIVISOR = 10.0
CABLE_DEGRADED_LOSS_PCT = 33.0
BER_PCT = 1.0  # "1 % of packets get corrupted", each crossing one spine and one uplink
AT_S, FOR_S = 10e-6, 100e-6  # "failed for 100 µs from 10 µs"
FLAP_EVERY_S, FLAP_FOR_S = 100e-6, 50e-6  # "a new cable fails every 100 µs for 50 µs"


def spine_links(spine: str) -> list[list[str]]:
    return [[f"leaf{k}", spine] for k in range(1, LEAVES + 1)]


def all_links() -> list[list[str]]:
    return [link for s in range(1, SPINES + 1) for link in spine_links(f"spine{s}")]


def uplinks() -> list[tuple[str, str]]:
    return [(leaf, spine) for leaf, spine in all_links()]


def all_cables() -> list[tuple[str, str]]:
    """Both directions of every leaf-spine link: the simulator's pipes."""
    return uplinks() + [(spine, leaf) for leaf, spine in uplinks()]


def _cable(c: tuple[str, str], action: str, at: float = 0.0, **kw: Any) -> dict:
    """One direction of a leaf-spine link (`link` names the link, `direction` the cable)."""
    return {"at": at, "action": action, "link": sorted(c), "direction": list(c), **kw}


def _dead(cables: list[tuple[str, str]], at: float = 0.0, until: float | None = None) -> list:
    """Cables that drop everything, silently (nobody is told); healed at `until`."""
    ev = [_cable(c, "blackhole", at) for c in cables]
    if until is not None:
        ev += [_cable(c, "heal", until) for c in cables]
    return ev


def egress(switch: str) -> list[tuple[str, str]]:
    """Everything a spine forwards leaves on these cables: a switch failure or impairment acts
    on its egress (a dead switch forwards nothing; what reaches it is lost there)."""
    return [(switch, leaf) for leaf, _ in spine_links(switch)]


def _rolling(groups: list[list[tuple[str, str]]]) -> list:
    """A new group of cables dead every 100 µs for 50 µs through the run, in `groups`' order
    (round and round)."""
    ev: list[dict] = []
    k, t = 0, AT_S
    while t < DURATION_S:
        ev += _dead(groups[k % len(groups)], at=round(t, 9), until=round(t + FLAP_FOR_S, 9))
        k, t = k + 1, t + FLAP_EVERY_S
    return ev


def _flaps(k: dict[str, Any], seed: int = SEED) -> list:
    """A new cable at a time: the simulator's REPS run's cables of this cell in its order, then
    the other cables in a seeded order (the simulator stopped drawing when its flows ended)."""
    theirs = set(k["cable_flaps"])
    cables = [c for c in all_cables() if c not in theirs]
    random.Random(f"reps-grid-flaps:{seed}").shuffle(cables)
    return _rolling([[c] for c in (*k["cable_flaps"], *cables)])


def _switch_flaps() -> list:
    """A new spine at a time, spine4 (the simulator's) first."""
    others = [f"spine{k}" for k in range(1, SPINES + 1) if f"spine{k}" != SWITCH]
    return _rolling([egress(sw) for sw in (SWITCH, *others)])


def _lossy(cables: list[tuple[str, str]], pct: float) -> list:
    return [_cable(c, "loss", percent=pct) for c in cables]


def _slowed_lossy(cables: list[tuple[str, str]], mbps: float) -> list:
    """A degraded switch's egress: each cable at 1/10 of its rate, dropping 10 %."""
    rate = mbps / SWITCH_DEGRADED_RATE_DIVISOR
    return [_cable(c, "degrade", mbps=rate) for c in cables] + _lossy(
        cables, SWITCH_DEGRADED_LOSS_PCT
    )


def spine_link_mbps(fabric: str) -> float:
    """A leaf-spine link's rate: the hosts' under the leaf, shared by the spines, over the
    fabric's oversubscription (1:1: 800 Gbps; 8:1: 100 Gbps)."""
    over = FABRICS[fabric].get("oversubscription", 1.0)
    return LINK_MBPS * HOSTS_PER_LEAF / SPINES / over


def _impaired(cables: list[tuple[str, str]], **impair: Any) -> list:
    return [_cable(c, "impair", **impair) for c in cables]


def spine_egress() -> list[tuple[str, str]]:
    return [c for s in range(1, SPINES + 1) for c in egress(f"spine{s}")]


def _spines_egress(spines: tuple[str, ...]) -> list[tuple[str, str]]:
    return [c for sw in spines for c in egress(sw)]


def _pair_100us(k: dict[str, Any]) -> list:
    switch, cable = k["pair_100us"]
    return _dead([*egress(switch), cable], AT_S, AT_S + FOR_S)


MODE_EVENTS: dict[str, Callable[[dict[str, Any]], list]] = {
    "none": lambda k: [],
    "link-failed": lambda k: _dead([k["cable"]]),
    "link-failed-100us": lambda k: _dead([k["cable_100us"]], AT_S, AT_S + FOR_S),
    "switch-failed": lambda k: _dead(egress(SWITCH)),
    "switch-failed-100us": lambda k: _dead(egress(k["switch_100us"]), AT_S, AT_S + FOR_S),
    "link-drops-every-10th": lambda k: _impaired([k["cable"]], drop_every=10),
    "switch-drops-every-10th": lambda k: _impaired(egress(SWITCH), drop_every=10),
    "link-degraded": lambda k: _lossy([k["cable"]], CABLE_DEGRADED_LOSS_PCT),
    "switch-degraded": lambda k: _slowed_lossy(egress(SWITCH), k["spine_mbps"]),
    # 1 % of packets corrupted: every cross-leaf packet crosses one uplink and one spine.
    "link-ber-1pct": lambda k: _impaired(uplinks(), corrupt_percent=BER_PCT),
    "switch-ber-1pct": lambda k: _impaired(spine_egress(), corrupt_percent=BER_PCT),
    "10pct-switches-failed": lambda k: _dead(_spines_egress(k["ten_pct_switches_failed"])),
    "10pct-links-failed": lambda k: _dead(list(k["ten_pct_cables"])),
    "10pct-switches-degraded": lambda k: _slowed_lossy(
        _spines_egress(k["ten_pct_switches_degraded"]), k["spine_mbps"]
    ),
    "10pct-links-degraded": lambda k: _lossy(list(k["ten_pct_cables"]), CABLE_DEGRADED_LOSS_PCT),
    "switch-flaps": lambda k: _switch_flaps(),
    "link-flaps": _flaps,
    "switch-and-link-failed-100us": _pair_100us,
    "switch-and-link-failed": lambda k: _dead([*egress(SWITCH), SECOND_CABLE]),
}
"""Each mode's scenario events, given the failed elements of one cell (an entry of PICKS)."""


def mode_events(mode: str, fabric: str = "1to1", traffic: str = "permutation") -> list[dict]:
    """The scenario events of failure mode `mode` on `fabric` under `traffic`: the elements
    the authors' simulator failed in that cell (PICKS)."""
    if mode not in MODE_EVENTS:
        raise ValueError(f"mode: one of {', '.join(MODES)}, got {mode!r}")
    if (fabric, traffic) not in PICKS:
        raise ValueError(f"fabric, traffic: one of {sorted(PICKS)}, got {(fabric, traffic)!r}")
    return MODE_EVENTS[mode]({**PICKS[(fabric, traffic)], "spine_mbps": spine_link_mbps(fabric)})


MODES = tuple(MODE_EVENTS)
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
    "10pct-switches-failed": "10_percent_failed_switches",
    "10pct-links-failed": "10_percent_failed_cables",
    "10pct-switches-degraded": "10_percent_degraded_switches",
    "10pct-links-degraded": "10_percent_degraded_cables",
    "switch-flaps": "fail_new_switch_every_100us_for_50us",
    "link-flaps": "fail_new_cable_every_100us_for_50us",
    "switch-and-link-failed-100us": "fail_one_switch_and_cable_after_10us_for_100us",
    "switch-and-link-failed": "fail_one_switch_one_cable",
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


def failed_links(
    mode: str, fabric: str = "1to1", traffic: str = "permutation"
) -> list[tuple[str, str]]:
    """The leaf-spine links a mode damages (sorted pairs), for the time-to-avoid measure."""
    out = set()
    for e in mode_events(mode, fabric, traffic):
        if e["action"] != "heal":
            out.add(tuple(sorted(e["link"])))
    return sorted(out)  # type: ignore[arg-type]


def failure_window(
    mode: str, fabric: str = "1to1", traffic: str = "permutation"
) -> tuple[float, float | None] | None:
    """(start, end or None for good) of a mode's first failure; None without one."""
    ev = mode_events(mode, fabric, traffic)
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
        "events": mode_events(mode, fabric, traffic),
        "duration_s": DURATION_S,
        "seed": seed,
        "emulation": dict(EMULATION),
    }

"""What `testbed bench fidelity` runs: the fabric, the rows and their scenarios, and htsim's
reference figures each row is compared with.
"""

from __future__ import annotations

from typing import Any

from contracts.framing import DEFAULT_MTU, max_frame_bytes
from testbed.bench.endpoint_bench import BenchError

LINK_MBPS = 10_000.0
FABRIC = {"spines": 4, "leaves": 4, "hosts_per_leaf": 4}
LINKS = {"link_mbps": LINK_MBPS, "delay_us": 1, "queue_kb": 12}
SEEDS = (1, 2, 3)
PERMUTATION_BYTES = 2_000_000  # 1.6 ms of payload at 10 Gbps
QUICK_PERMUTATION_BYTES = 1_000_000
# Virtual seconds a permutation may last: a flow unfinished by then reads its goodput over its
# own active time (a one-path flow sharing a link 4 ways needs 6.4 ms for 2 MB), like htsim's
# steady-state window, and the run's wall time stays bounded (4 ms x N=10000 = 40 s).
PERMUTATION_DURATION_S = 0.004
INCAST_SENDERS = 8
QUICK_INCAST_SENDERS = 4  # htsim has a 4-sender row too: half the wall time
INCAST_BYTES = 1_000_000
INCAST_DURATION_S = 0.02  # virtual: ideal 6.4 ms, room for a timeout or two
EMULATION = {"time_dilation": "auto", "max_reruns": 0}
"""A bench reports each run's verdict rather than hunting for a valid N: under `auto` the runner
would rerun an invalid run at RERUN_FACTOR x N (testbed.experiment.dilation: 2 x N), i.e. twice
the wall time (pass --time-dilation N instead)."""
INCAST_DST = "h1"

# What the rows are called, and which of htsim's rows each is compared with
# (/work/shared/reference/htsim-leafspine.md, 4x4x4, mean over 3 seeds / lowest flow).
PERMUTATION_ROWS = ("mrc", "mrc-16ev", "mrc-1ev", "single-path", "mrc-9000")
QUICK_PERMUTATION_ROWS = ("mrc", "mrc-16ev")
"""`--quick` (CI) keeps the two rows its checks compare -- generated EVs spread evenly over the
paths, hashed ones do not -- and leaves the one-path rows, whose htsim figure is the same
NDP-on-one-path, to the whole bench: the two left out took ~55 s of CI's namespace tests
(the quick bench's fixture: 101.7 s with them, 47.1 s without, 2026-12-07 rehearsals)."""
HTSIM = {
    "mrc": {"what": "NDP, per-packet spraying over all paths", "mean": 87.7, "min": 87.0},
    "mrc-16ev": {"what": "NDP, ECMP-hashed over 16 EVs", "mean": 76.7, "min": 67.3},
    "mrc-1ev": {"what": "NDP, one path", "mean": 53.5, "min": 11.5},
    "single-path": {"what": "NDP, one path", "mean": 53.5, "min": 11.5},
    "mrc-9000": {"what": "NDP spraying, MTU 9000 (one seed)", "mean": 98.1, "min": 97.9},
    "slow-link": {
        "what": "NDP spraying, leaf1-spine1 at 10 % speed (one seed)",
        "affected_mean": 58.2,
        "others_mean": 88.0,
        "affected_share_pct": 69.0,
    },
    "incast-8": {
        "what": "NDP with trimming, 8 x 1 MB",
        "last_us": 6764.0,
        "ideal_us": 6400.0,
        "ideal_over_last_pct": 94.6,
        "retransmits": 108,
        "timeouts": 0,
    },
    "incast-4": {
        "what": "NDP with trimming, 4 x 1 MB",
        "last_us": 3382.0,
        "ideal_us": 3200.0,
        "ideal_over_last_pct": 94.6,
        "retransmits": 46,
        "timeouts": 0,
    },
}
SOURCE_ROUTED = {"forwarding": "source-routed"}
ROWS: dict[str, dict[str, Any]] = {
    # MRC as its paper pairs it: generated EVs on a source-routed fabric, every path of a leaf
    # once per round of EVs -- what htsim's per-packet spraying over all paths does.
    "mrc": {"transport": "mrc", "topology": SOURCE_ROUTED},
    # MRC's AUTO profile on a hashing fabric, restricted to 16 EVs as htsim's hashed row.
    "mrc-16ev": {"transport": {"name": "mrc", "label": "mrc-16ev", "evs": 16}, "topology": {}},
    # MRC's endpoint (trimming, NACKs, NSCC) on one hashed path per connection: what htsim's
    # "NDP, one path" is -- a transport that recovers from trims at once, with one path.
    "mrc-1ev": {"transport": {"name": "mrc", "label": "mrc-1ev", "evs": 1}, "topology": {}},
    # The RoCE-like baseline on one hashed path: go-back-N, and an RC timeout for a loss no
    # NACK reports, which htsim's NDP row has no counterpart of.
    "single-path": {"transport": "single-path", "topology": {}},
    # 9000 B frames and queues of 8 of them (htsim's 8-packet queues); one seed, as htsim's row.
    "mrc-9000": {
        "transport": {"name": "mrc", "label": "mrc-9000"},
        "topology": {**SOURCE_ROUTED, "mtu": 9000, "queue_kb": 72},
        "seeds": 1,
    },
}
"""Each permutation row: its transport (a name or a scenario configuration), the topology keys
it changes, and how many of the seeds it runs (all if not said)."""
INCAST_TOPOLOGY = SOURCE_ROUTED


SLOW_LINK = ("leaf1", "spine1")
SLOW_LINK_MBPS = 1000.0  # 10 % of the fabric's 10 Gbps
SLOW_LINK_ROWS: dict[str, dict[str, Any]] = {
    # One leaf-spine link at 10 % speed under each load-balancing policy of MRC (TransportConfig
    # .lb), on the source-routed fabric with generated EVs, one seed as htsim's row.
    "mrc-wrr": {"name": "mrc", "label": "mrc-wrr", "lb": "wrr"},
    "mrc-oblivious": {"name": "mrc", "label": "mrc-oblivious", "lb": "oblivious"},
    "mrc-reps": {"name": "mrc", "label": "mrc-reps", "lb": "reps"},
    # REPS on a fabric that marks ECN only when a queue cannot take one more full frame.
    "mrc-reps-late-ecn": {"name": "mrc", "label": "mrc-reps-late-ecn", "lb": "reps"},
}
"""htsim's row sprays blindly (its NDP): `mrc-oblivious` is its counterpart."""
LATE_ECN_KB = round(LINKS["queue_kb"] - max_frame_bytes(DEFAULT_MTU) / 1000, 3)
"""An ECN threshold of the queue less one full frame (10.486 of 12 kB): a mark then says the
queue is about to trim. REPS takes a marked EV out of its recycling; at the default threshold,
half the queue, every path of a fully loaded permutation marks on a burst of four frames, so
REPS drops its good EVs too and explores onto the slow spine (docs/fidelity.md, "REPS and the
ECN threshold")."""
SLOW_LINK_TOPOLOGY: dict[str, dict[str, Any]] = {"mrc-reps-late-ecn": {"ecn_kb": LATE_ECN_KB}}
"""The slow-link rows that change the fabric as well as the transport."""


def row_key(row: str) -> str:
    """What the runner calls the row's transport (its label, or its name)."""
    t = ROWS[row]["transport"]
    return t if isinstance(t, str) else t.get("label", t["name"])


def permutation_scenario(
    seed: int, nbytes: int, fabric: dict | None = None, row: str = "mrc"
) -> dict:
    spec = ROWS[row]
    return {
        "name": f"fidelity-permutation-s{seed}",
        "description": "bench fidelity: permutation, per-flow utilisation against htsim",
        "topology": {**(fabric or FABRIC), **LINKS, **spec["topology"]},
        "transport": [spec["transport"]],
        "workload": {"kind": "permutation", "bytes": nbytes},
        "duration_s": PERMUTATION_DURATION_S,
        "seed": seed,
        "emulation": dict(EMULATION),
    }


def slow_link_scenario(seed: int, nbytes: int, row: str) -> dict:
    """The permutation with leaf1-spine1 (both directions) at 10 % speed from the start."""
    sc = permutation_scenario(seed, nbytes, row="mrc")
    sc["name"] = f"fidelity-slow-link-s{seed}"
    sc["description"] = "bench fidelity: one slow leaf-spine link, per-flow utilisation"
    sc["transport"] = [SLOW_LINK_ROWS[row]]
    sc["topology"].update(SLOW_LINK_TOPOLOGY.get(row, {}))
    sc["events"] = [{"at": 0, "action": "degrade", "link": list(SLOW_LINK), "mbps": SLOW_LINK_MBPS}]
    return sc


def incast_senders(fabric: dict, n: int = INCAST_SENDERS, dst: str = INCAST_DST) -> list[str]:
    """`n` senders on leaves other than `dst`'s (h1's: leaf 1), in host order."""
    per_leaf = fabric["hosts_per_leaf"]
    hosts = [f"h{i}" for i in range(per_leaf + 1, fabric["leaves"] * per_leaf + 1)]
    if len(hosts) < n:
        raise BenchError(f"bench fidelity: the fabric has {len(hosts)} hosts off leaf 1, not {n}")
    return hosts[:n]


def incast_scenario(fabric: dict | None = None, n: int = INCAST_SENDERS) -> dict:
    fabric = fabric or FABRIC
    return {
        "name": "fidelity-incast",
        "description": "bench fidelity: incast with trimming against htsim",
        "topology": {**fabric, **LINKS, **INCAST_TOPOLOGY, "trimming": True},
        "transport": ["mrc"],
        "workload": {
            "kind": "incast",
            "dst": INCAST_DST,
            "srcs": incast_senders(fabric, n),
            "bytes": INCAST_BYTES,
        },
        "duration_s": INCAST_DURATION_S,
        "seed": 1,
        "emulation": dict(EMULATION),
    }

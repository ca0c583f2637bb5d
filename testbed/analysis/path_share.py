"""How evenly a run spread its bytes over the fabric's paths, from the switches' port counters.

Why from the switches: the endpoints know their EVs, not their paths (on an ECMP fabric only
the switches' hash knows where an EV goes). A leaf's uplinks are the first hop of every path
that leaves it, a spine's port towards a leaf the last hop of every path that enters it; so a
leaf's uplink shares say how its senders' traffic spread, a leaf's downlink shares (one per
spine) how the traffic towards it did. Equal shares -- 1/spines each -- are what spraying over
every path once per round gives (MRC's generated EVs on a source-routed fabric), and hashed EVs
collide (docs/fabric.md, "Source routing").

Pure: the counters are `testbed counters`' (raw/<transport>/switch_counters.json).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from topologies import Fabric

MIN_BYTES = 100_000
"""A leaf whose links carried less than this in a direction is left out: its shares would
measure a handful of packets (ACKs of a flow that barely touched it), not a spread."""


def _shares(tx: Mapping[str, int]) -> dict[str, float] | None:
    total = sum(tx.values())
    if total < MIN_BYTES:
        return None
    return {k: v / total for k, v in tx.items()}


def path_shares(fab: Fabric, counters: Mapping[str, Any]) -> dict[str, dict[str, dict[str, float]]]:
    """{"uplinks": {leaf: {spine: share of the leaf's uplink bytes}}, "downlinks": {leaf:
    {spine: share of the bytes the spines sent to the leaf}}}; leaves with less than MIN_BYTES
    in a direction are left out of it."""
    up: dict[str, dict[str, float]] = {}
    down: dict[str, dict[str, float]] = {}
    for leaf in (n for n in fab.switches() if fab.nodes[n].kind == "leaf"):
        tx_up: dict[str, int] = {}
        tx_down: dict[str, int] = {}
        for intf in fab.interfaces[leaf]:
            spine = intf.peer_node
            if fab.nodes[spine].kind != "spine":
                continue
            mine = counters.get(leaf, {}).get("ports", {}).get(intf.name, {})
            theirs = counters.get(spine, {}).get("ports", {}).get(intf.peer_name, {})
            tx_up[spine] = int(mine.get("tx_bytes", 0))
            tx_down[spine] = int(theirs.get("tx_bytes", 0))
        if (s := _shares(tx_up)) is not None:
            up[leaf] = s
        if (s := _shares(tx_down)) is not None:
            down[leaf] = s
    return {"uplinks": up, "downlinks": down}


Shares = Mapping[str, Mapping[str, Mapping[str, float]]]


def _leaf_deviations_pct(shares: Shares) -> list[float]:
    """Per leaf and direction, its worst path's departure from an equal share of the leaf's
    bytes, in percent of that equal share (0: even; 5: a path carried 1.05x or 0.95x it)."""
    return [
        max(abs(share * len(per_spine) - 1.0) * 100.0 for share in per_spine.values())
        for direction in shares.values()
        for per_spine in direction.values()
        if per_spine
    ]


def max_deviation_pct(shares: Shares) -> float | None:
    """The largest departure of any path's share from an equal share, in percent of that equal
    share (0: perfectly even; +5: a path carried 1.05x its equal share); None without data."""
    devs = _leaf_deviations_pct(shares)
    return round(max(devs), 1) if devs else None


def median_deviation_pct(shares: Shares) -> float | None:
    """The median over the leaves (each direction of each leaf one entry) of that leaf's worst
    path's departure from an equal share, in percent; None without data.

    Why beside the worst: MRC's default load balancer (`wrr`) moves weight off an EV whose
    packets are trimmed (on hashed EVs, ECN-marked too), by design. At full load a burst that
    collides on one uplink moves that leaf's (and its peer leaf's) shares off equal for the
    rest of a short run (a 1 MB quick-bench run once read 19 % on leaf1 after 35 trims on its
    uplink to spine1, every other leaf within 2 %). The worst leaf then says how the balancer
    reacted; the median says whether the EV set covers the paths evenly, which is what a
    hashed EV set cannot do on any leaf."""
    devs = _leaf_deviations_pct(shares)
    return round(statistics.median(devs), 1) if devs else None


def summary_entry(fab: Fabric, counters: Mapping[str, Any]) -> dict[str, Any]:
    """What summary.json says of a run's spread: the shares (rounded), the worst deviation and
    the median leaf's."""
    shares = path_shares(fab, counters)
    return {
        "max_deviation_pct": max_deviation_pct(shares),
        "median_deviation_pct": median_deviation_pct(shares),
        **{
            d: {leaf: {s: round(v, 4) for s, v in per.items()} for leaf, per in by_leaf.items()}
            for d, by_leaf in shares.items()
        },
    }

"""What a trace workload's run says: iteration times, who held each iteration back, and each
collective's time.

The endpoints record, per rank, each iteration (`trace_iter`) and each collective or
point-to-point node (`trace_node`), on the one clock all namespaces share. An iteration of the
job runs from its first rank's start to its last rank's end; the rank that ended last held it
back. Each rank records its iteration's critical path (the chain of nodes each of which
waited for the one before it), split into compute and communication, and the communication
node that cost it most: a slow network shows as communication on the path, a slow rank (a
straggler) as compute on its own path while the others wait in collectives for it. A
collective instance's time is from its first member's start to its last member's end: a
failure that delays one transfer of it shows there, whichever rank it hit.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

STRAGGLER_FACTOR = 1.1
"""A rank whose critical path holds this much more compute than its peers' median is a
straggler (a slow GPU), not the network's doing."""


def _ms(s: float) -> float:
    return round(s * 1e3, 4)


def _pcts(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p100": None}
    return {"p50": _ms(statistics.median(values)), "p100": _ms(max(values))}


def trace_summary(iters: Sequence[dict], nodes: Sequence[dict]) -> dict[str, Any]:
    """summary.json's `trace` object from the ranks' records (times in seconds from the
    workload's start): per iteration, per collective (by node name) and per rank."""
    by_it: dict[int, list[dict]] = {}
    for r in iters:
        by_it.setdefault(r["iteration"], []).append(r)
    # Each collective instance (name, iteration) across its members: when the first and the
    # last member reached it, which one was last, when the last member finished.
    inst: dict[tuple[str, int], dict] = {}
    mine: dict[tuple[str, int, int], dict] = {}
    for n in nodes:
        if n["kind"] != "collective":
            continue
        key = (n["name"], n["iteration"])
        mine[(*key, n["rank"])] = n
        i = inst.setdefault(
            key, {"first": n["start"], "last": n["start"], "who": n["rank"], "end": n["end"]}
        )
        i["first"] = min(i["first"], n["start"])
        if n["start"] > i["last"]:
            i["last"], i["who"] = n["start"], n["rank"]
        i["end"] = max(i["end"], n["end"])
    iterations = [_iteration(k, by_it[k], inst, mine) for k in sorted(by_it)]
    per_name: dict[str, list[float]] = {}
    for (name, _), i in inst.items():
        per_name.setdefault(name, []).append(i["end"] - i["first"])
    per_rank: dict[int, list[float]] = {}
    for r in iters:
        per_rank.setdefault(r["rank"], []).append(r["end"] - r["start"])
    return {
        "ranks": len({r["rank"] for r in iters}),
        "iterations": iterations,
        "collectives": {
            name: {"count": len(v), **_pcts(v)} for name, v in sorted(per_name.items())
        },
        "rank_iteration_ms": {str(r): _pcts(v) for r, v in sorted(per_rank.items())},
    }


def _iteration(k: int, recs: list[dict], inst: dict, mine: dict) -> dict[str, Any]:
    """Iteration k: its time, and on the slowest rank's critical path how long was compute,
    waiting in a collective for a member that came late, and the network (a collective's time
    once its last member had arrived). The largest of the three says what held it back."""
    last = max(recs, key=lambda r: r["end"])
    wait = net = 0.0
    worst_net, waited_for = 0.0, None
    worst_wait, straggler = 0.0, None
    for name in last.get("critical_path", ()):
        n = mine.get((name, k, last["rank"]))
        if n is None:
            continue  # a compute node (or a point-to-point one): counted by the rank itself
        i = inst[(name, k)]
        w = max(0.0, i["last"] - n["start"])
        t = n["end"] - max(n["start"], i["last"])
        wait += w
        net += t
        if t > worst_net:
            worst_net, waited_for = t, name
        if w > worst_wait:
            worst_wait, straggler = w, i["who"]
    compute = last.get("critical_compute_s", 0.0)
    held_by = max(
        (("network", net), ("straggler", wait), ("compute", compute)), key=lambda x: x[1]
    )[0]
    others = [r.get("critical_compute_s", 0.0) for r in recs if r is not last]
    if held_by == "compute" and others and compute > STRAGGLER_FACTOR * statistics.median(others):
        # The slowest rank computed longer than its peers did: it is the straggler itself.
        held_by, straggler = "straggler", last["rank"]
    return {
        "iteration": k,
        "ms": _ms(last["end"] - min(r["start"] for r in recs)),
        "ranks_finished": len(recs),
        "slowest_rank": last["rank"],
        "held_by": held_by,
        "waited_for": waited_for,
        "straggler_rank": straggler if held_by == "straggler" else None,
        "critical_ms": {"compute": _ms(compute), "waiting": _ms(wait), "network": _ms(net)},
    }

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

import bisect
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from testbed.harness.records import Failure

STRAGGLER_FACTOR = 1.1
"""A rank that computed this much more in an iteration than the median of its peers is a
straggler (a slow GPU) in it. The rule is across ranks on purpose: a rank that reached a
collective late because the network had delayed it earlier computed no more than its peers, and
is not one."""

Link = tuple[str, str]
LinksOf = Callable[[Failure], set[Link]]


def _ms(s: float) -> float:
    return round(s * 1e3, 4)


def _pcts(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p100": None}
    return {"p50": _ms(statistics.median(values)), "p100": _ms(max(values))}


def trace_summary(
    iters: Sequence[dict],
    nodes: Sequence[dict],
    failures: Sequence[Failure] = (),
    links_of: LinksOf | None = None,
) -> dict[str, Any]:
    """summary.json's `trace` object from the ranks' records (times in seconds from the
    workload's start): per iteration, per collective (by node name) and per rank. With the
    run's EV failures (times from the workload's start too) and `links_of` (the links a failed
    EV's round trip crosses), an iteration during which EVs failed names the link they share
    and the collective they hit."""
    by_it: dict[int, list[dict]] = {}
    for r in iters:
        by_it.setdefault(r["iteration"], []).append(r)
    # Each collective instance (name, iteration) across its members: when the first and the
    # last member reached it, which one was last, when the last member finished, which hosts.
    inst: dict[tuple[str, int], dict] = {}
    mine: dict[tuple[str, int, int], dict] = {}
    for n in nodes:
        if n["kind"] != "collective":
            continue
        key = (n["name"], n["iteration"])
        mine[(*key, n["rank"])] = n
        i = inst.setdefault(
            key,
            {"first": n["start"], "last": n["start"], "who": n["rank"], "end": n["end"],
             "hosts": set()},
        )  # fmt: skip
        i["first"] = min(i["first"], n["start"])
        if n["start"] > i["last"]:
            i["last"], i["who"] = n["start"], n["rank"]
        i["end"] = max(i["end"], n["end"])
        if n.get("host"):
            i["hosts"].add(n["host"])
    blame = _LinkBlame(failures, links_of) if failures and links_of else None
    iterations = [_iteration(k, by_it[k], inst, mine, blame) for k in sorted(by_it)]
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


def slow_ranks(recs: Sequence[dict]) -> list[int]:
    """The ranks that computed more than STRAGGLER_FACTOR x the median of the others in one
    iteration (`compute_s`: all their compute; older records: the critical path's)."""
    done = {r["rank"]: r.get("compute_s", r.get("critical_compute_s", 0.0)) for r in recs}
    slow = []
    for rank, c in done.items():
        others = [v for k, v in done.items() if k != rank]
        if others and c > STRAGGLER_FACTOR * statistics.median(others):
            slow.append(rank)
    return sorted(slow)


def _iteration(
    k: int, recs: list[dict], inst: dict, mine: dict, blame: _LinkBlame | None
) -> dict[str, Any]:
    """Iteration k: its time, and on the slowest rank's critical path how long was compute,
    waiting in a collective for a member that came late, and the network (a collective's time
    once its last member had arrived). The largest of the three says what held it back; a late
    member is a straggler only if it computed more than its peers, else the network had
    delayed it (and the collective that cost *it* most is the one named)."""
    last = max(recs, key=lambda r: r["end"])
    by_rank = {r["rank"]: r for r in recs}
    wait = net = 0.0
    worst_net, waited_for = 0.0, None
    worst_wait, late = 0.0, None
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
            worst_wait, late = w, i["who"]
    compute = last.get("critical_compute_s", 0.0)
    held_by = max(
        (("network", net), ("straggler", wait), ("compute", compute)), key=lambda x: x[1]
    )[0]
    slow = slow_ranks(recs)
    straggler = None
    if held_by == "straggler":
        if late in slow:
            straggler = late
        else:  # the member came late, but computed no more than its peers: the network's doing
            held_by = "network"
            waited_for = by_rank[late].get("waited_for") if late in by_rank else waited_for
    elif held_by == "compute" and last["rank"] in slow:
        # The slowest rank computed longer than its peers did: it is the straggler itself.
        held_by, straggler = "straggler", last["rank"]
    start = min(r["start"] for r in recs)
    hit = None
    if blame is not None:
        hit = blame.hit(start, last["end"], {n: i for (n, j), i in inst.items() if j == k})
    return {
        "iteration": k,
        "ms": _ms(last["end"] - start),
        "ranks_finished": len(recs),
        "slowest_rank": last["rank"],
        "held_by": held_by,
        "waited_for": waited_for,
        "straggler_rank": straggler,
        "slow_ranks": slow,
        # What the iteration's EV failures say (None: no failure, or no one link to blame):
        # the link, the evidence, and the collective most of them hit.
        "link": None if hit is None else hit["link"],
        "link_evidence": None if hit is None else hit["evidence"],
        "link_collective": None if hit is None else hit["collective"],
        "critical_ms": {"compute": _ms(compute), "waiting": _ms(wait), "network": _ms(net)},
    }


class _LinkBlame:
    """Which link an iteration lost its packets on, and in which collective: each EV that failed
    while it ran names a round trip (`links_of`); the link the most connections' failed round
    trips share (then the most EVs) is the one, if no other link ties it. The same evidence and
    the same paths as the fabric controller's (testbed.harness.ev_controller), read after the
    run. The collective is the instance, of those whose members include both ends of a failed
    connection and that ran when it failed, that most of the link's failures fell in."""

    def __init__(self, failures: Sequence[Failure], links_of: LinksOf) -> None:
        self.failures = sorted(failures, key=lambda f: f.t)
        self.times = [f.t for f in self.failures]
        self.links_of = links_of
        self._paths: dict[tuple[str, str, int], set[Link]] = {}

    def _links(self, f: Failure) -> set[Link]:
        key = (f.host, f.peer, f.ev)
        if key not in self._paths:
            self._paths[key] = self.links_of(f)
        return self._paths[key]

    def hit(self, first: float, end: float, instances: dict[str, dict]) -> dict | None:
        lo = bisect.bisect_left(self.times, first)
        hi = bisect.bisect_right(self.times, end)
        window = self.failures[lo:hi]
        conns: dict[Link, set[tuple[str, str]]] = {}
        evs: dict[Link, int] = {}
        for f in window:
            for lk in self._links(f):
                conns.setdefault(lk, set()).add((f.host, f.peer))
                evs[lk] = evs.get(lk, 0) + 1
        ranked = sorted(conns, key=lambda lk: (-len(conns[lk]), -evs[lk], lk))
        if not ranked:
            return None
        score = [(len(conns[lk]), evs[lk]) for lk in ranked[:2]]
        if len(score) == 2 and score[0] == score[1]:
            return None  # two links equally suspect: the evidence does not say which
        best = ranked[0]
        in_collective: dict[str, int] = {}
        for f in window:
            if best not in self._links(f):
                continue
            for name, i in instances.items():
                if f.host in i["hosts"] and f.peer in i["hosts"] and i["first"] <= f.t <= i["end"]:
                    in_collective[name] = in_collective.get(name, 0) + 1
        return {
            "link": "-".join(best),
            "evidence": {"connections": len(conns[best]), "evs": evs[best]},
            "collective": max(in_collective, key=in_collective.__getitem__, default=None),
        }

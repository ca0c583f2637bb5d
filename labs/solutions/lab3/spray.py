"""Lab 3 (solution): spraying and reordering -- one EV vs 64 EVs.

An MRC connection puts each packet on one of its EVs (entropy values: UDP source ports), and
every switch hashes the source port into its ECMP choice, so the EVs of one connection take
different paths. With one EV a connection has one path, and whole connections collide on a
link while others idle; with 64 the load spreads, at the price of packets overtaking each other.
Then:

    testbed lab check 3 --unit-only
    .venv/bin/python labs/lab3-spraying-reordering/report.py   # table and plots from results/

Only the standard library.
"""

from __future__ import annotations

from collections.abc import Callable


def link_loads(
    ev_bytes: dict[tuple[str, str, int], int],
    path_of: Callable[[str, str, int], list[str]],
) -> dict[tuple[str, str], int]:
    """Bytes carried by every directed link.

    `ev_bytes` maps (source host, destination host, EV) to the bytes sent on that EV;
    `path_of(src, dst, ev)` lists the nodes the EV's packets visit, both hosts included (e.g.
    ["h1", "leaf1", "spine2", "leaf2", "h6"]). Each pair of consecutive nodes is one directed
    link, e.g. ("leaf1", "spine2"); a link that nothing crosses is absent.
    """
    loads: dict[tuple[str, str], int] = {}
    for (src, dst, ev), nbytes in ev_bytes.items():
        path = path_of(src, dst, ev)
        for link in zip(path, path[1:], strict=False):
            loads[link] = loads.get(link, 0) + nbytes
    return loads


def imbalance(values: list[float]) -> float:
    """max / mean of the loads of a set of parallel links (e.g. one leaf's uplinks): 1.0 is a
    perfect spread, N is everything on one of N links. No load at all counts as 1.0."""
    total = sum(values)
    if not values or total == 0:
        return 1.0
    return max(values) / (total / len(values))


def bottleneck_time(loads: dict[tuple[str, str], int], link_mbps: float) -> float:
    """Seconds the busiest link needs to carry its bytes at `link_mbps`: no schedule over these
    paths can finish sooner."""
    return max(loads.values(), default=0) * 8 / (link_mbps * 1e6)


def reorder(seqs: list[int]) -> dict[str, int]:
    """How out of order one connection's packets arrived; `seqs` are their sequence numbers
    (0, 1, 2, ... as sent) in arrival order. A repeated number (a resend) counts only at its
    first arrival.

    - late: packets that arrived after a packet with a higher number;
    - max_distance: the largest (highest number seen so far - number) of a late packet;
    - window: the largest (highest number seen so far + 1 - the lowest number still missing):
      how many sequence numbers the receiver must track at once (its SACK bitmap's span).
    """
    seen: set[int] = set()
    highest = -1
    missing = 0  # the lowest number not yet received
    late = max_distance = window = 0
    for s in seqs:
        if s in seen:
            continue
        seen.add(s)
        if s < highest:
            late += 1
            max_distance = max(max_distance, highest - s)
        highest = max(highest, s)
        while missing in seen:
            missing += 1
        window = max(window, highest + 1 - missing)
    return {"late": late, "max_distance": max_distance, "window": window}

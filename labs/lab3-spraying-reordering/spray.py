"""Lab 3: spraying and reordering -- one EV vs 64 EVs.

An MRC connection puts each packet on one of its EVs (entropy values: UDP source ports), and
every switch hashes the source port into its ECMP choice, so the EVs of one connection take
different paths. With one EV a connection has one path, and whole connections collide on a
link while others idle; with 64 the load spreads, at the price of packets overtaking each other.
Fill in the four TODOs, then:

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
    # TODO 1: for every (src, dst, ev) add its bytes to each link of path_of(src, dst, ev).
    raise NotImplementedError("TODO 1: link_loads")


def imbalance(values: list[float]) -> float:
    """max / mean of the loads of a set of parallel links (e.g. one leaf's uplinks): 1.0 is a
    perfect spread, N is everything on one of N links. No load at all counts as 1.0."""
    # TODO 2
    raise NotImplementedError("TODO 2: imbalance")


def bottleneck_time(loads: dict[tuple[str, str], int], link_mbps: float) -> float:
    """Seconds the busiest link needs to carry its bytes at `link_mbps`: no schedule over these
    paths can finish sooner."""
    # TODO 3: the largest load, in bits, over the link rate in bits per second.
    raise NotImplementedError("TODO 3: bottleneck_time")


def reorder(seqs: list[int]) -> dict[str, int]:
    """How out of order one connection's packets arrived; `seqs` are their sequence numbers
    (0, 1, 2, ... as sent) in arrival order. A repeated number (a resend) counts only at its
    first arrival.

    - late: packets that arrived after a packet with a higher number;
    - max_distance: the largest (highest number seen so far - number) of a late packet;
    - window: the largest (highest number seen so far + 1 - the lowest number still missing):
      how many sequence numbers the receiver must track at once (its SACK bitmap's span).
    """
    # TODO 4: walk the arrivals once, keeping the numbers seen, the highest one and the
    # lowest one still missing.
    raise NotImplementedError("TODO 4: reorder")

"""Collective algorithms as NCCL runs them, as per-rank message schedules.

A training trace names a collective (all-reduce 64 MB over the data-parallel group) and this
module says what that means on the wire: which rank sends how many bytes to which, in which
order. The endpoint's trace executor replays the schedule with real messages over the fabric,
so a failure delays exactly the transfers that cross it and the collective's time is measured,
not modelled.

A `Schedule` is a set of independent *lanes* (NCCL's channels; the two trees of a double binary
tree); in each lane every rank has a list of `Round`s. The one rule of execution: a rank posts
round k's sends once every receive of its rounds 0..k-1 in that lane has arrived (the data it
forwards or reduces has to be there); it is done with the lane when all of its receives have
arrived and its sends are delivered. Each send names the chunk it carries and whether the
receiver reduces it into its own copy or takes it as is, so a test can follow every chunk
(tests/test_collectives.py) and prove the result is what the collective promises.

Byte conventions are NCCL's (its "bus bandwidth" note), with S the `nbytes` argument and N
the number of ranks:

| collective | S is | bytes each rank sends |
|---|---|---|
| all-reduce, ring | the buffer | 2 (N-1)/N x S |
| all-reduce, double binary tree | the buffer | per tree (S/2 each): S/2 up unless the root, S/2 to each child |
| all-gather, ring | the gathered output | (N-1)/N x S |
| reduce-scatter, ring | the input | (N-1)/N x S |
| all-to-all | one rank's send buffer | (N-1)/N x S |

Chunks are as even as whole bytes allow (sizes differ by at most one byte). A collective of one
rank sends nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from contracts.trace import ALGORITHMS, COLLECTIVES

REDUCE, COPY = "reduce", "copy"


class CollectiveError(ValueError):
    """A collective that cannot be scheduled; the message names the field."""


@dataclass(frozen=True, slots=True)
class Send:
    """`nbytes` of chunk `chunk` to the rank at index `peer` of the group."""

    peer: int
    nbytes: int
    chunk: int
    op: str  # REDUCE: the receiver adds it into its chunk; COPY: the receiver takes it


@dataclass(frozen=True, slots=True)
class Round:
    sends: tuple[Send, ...]
    recvs: tuple[int, ...]  # the peers a message of this round comes from (one each)


@dataclass(frozen=True, slots=True)
class Schedule:
    kind: str
    algorithm: str
    ranks: int
    nbytes: int
    lanes: tuple[tuple[tuple[Round, ...], ...], ...]  # lanes[l][rank] = that rank's rounds

    def sent_bytes(self, rank: int) -> int:
        return sum(s.nbytes for lane in self.lanes for r in lane[rank] for s in r.sends)

    def received_bytes(self, rank: int) -> int:
        return sum(
            s.nbytes
            for lane in self.lanes
            for rounds in lane
            for r in rounds
            for s in r.sends
            if s.peer == rank
        )


def split(nbytes: int, parts: int) -> list[int]:
    """`nbytes` in `parts` whole-byte chunks differing by at most one byte."""
    q, r = divmod(nbytes, parts)
    return [q + (1 if i < r else 0) for i in range(parts)]


def schedule(kind: str, nbytes: int, ranks: int, algorithm: str | None = None) -> Schedule:
    """The schedule of collective `kind` of `nbytes` over `ranks` ranks (see the module doc)."""
    if kind not in ALGORITHMS:
        raise CollectiveError(f"collective: one of {', '.join(COLLECTIVES)}, got {kind!r}")
    algorithm = algorithm or ALGORITHMS[kind][0]
    if algorithm not in ALGORITHMS[kind]:
        raise CollectiveError(
            f"algorithm: {kind} runs as {' or '.join(ALGORITHMS[kind])}, got {algorithm!r}"
        )
    if not isinstance(ranks, int) or ranks < 1:
        raise CollectiveError(f"ranks: expected an integer >= 1, got {ranks!r}")
    if not isinstance(nbytes, int) or nbytes < 0:
        raise CollectiveError(f"bytes: expected an integer >= 0, got {nbytes!r}")
    if ranks == 1:
        lanes: tuple = (((),),)
    elif kind == "allreduce" and algorithm == "ring":
        lanes = (_ring(nbytes, ranks, reduce_rounds=ranks - 1, gather_rounds=ranks - 1),)
    elif kind == "allreduce":
        lanes = _double_binary_tree(nbytes, ranks)
    elif kind == "allgather":
        lanes = (_ring(nbytes, ranks, reduce_rounds=0, gather_rounds=ranks - 1),)
    elif kind == "reducescatter":
        lanes = (_ring(nbytes, ranks, reduce_rounds=ranks - 1, gather_rounds=0),)
    else:
        lanes = (_all_to_all(nbytes, ranks),)
    return Schedule(kind, algorithm, ranks, nbytes, lanes)


def _ring(nbytes: int, n: int, reduce_rounds: int, gather_rounds: int) -> tuple:
    """The ring over N chunks. Reducing round k: rank r sends chunk (r - k - 1) mod N to r+1,
    which adds it into its own; after N-1 such rounds chunk c has travelled c+1, c+2, ..., c
    and rank r holds chunk r complete (reduce-scatter, NCCL's output placement). Copying round
    j: rank r sends chunk (r - j) mod N, complete, which r+1 takes as is; N-1 such rounds give
    every rank every chunk (all-gather, which alone starts from each rank's own chunk r). Each
    round's chunk is the one the previous round brought, so a rank forwards what just came."""
    sizes = split(nbytes, n)
    lanes = []
    for r in range(n):
        rounds = []
        for k in range(reduce_rounds):
            chunk = (r - k - 1) % n
            rounds.append(Round((Send((r + 1) % n, sizes[chunk], chunk, REDUCE),), ((r - 1) % n,)))
        for j in range(gather_rounds):
            chunk = (r - j) % n
            rounds.append(Round((Send((r + 1) % n, sizes[chunk], chunk, COPY),), ((r - 1) % n,)))
        lanes.append(tuple(rounds))
    return tuple(lanes)


def _all_to_all(nbytes: int, n: int) -> tuple:
    """One round: every rank sends its block for each other rank and receives one from each.
    The block from rank s to rank d is chunk s * N + d, so a test can follow every one."""
    sizes = split(nbytes, n)
    lanes = []
    for r in range(n):
        others = tuple(p for p in range(n) if p != r)
        sends = tuple(Send(p, sizes[p], r * n + p, COPY) for p in others)
        lanes.append((Round(sends, others),))
    return tuple(lanes)


def in_order_tree(order: list[int]) -> list[int]:
    """Parent of each rank (-1 for the root) in the in-order binary tree over the ranks listed
    in `order`. Number the positions v = 1..N: v's height is its count of trailing zero bits
    (odd v are leaves), its parent the nearest v' with one more (v with bit h cleared and bit
    h+1 set, climbing while that is past N), and the root the largest power of two <= N. So
    every interior position is even, which is what lets a second tree use the odd ones."""
    n = len(order)
    parent = [-1] * n
    root = 1 << (n.bit_length() - 1) if n else 0
    for v in range(1, n + 1):
        if v == root:
            continue
        u = v
        while True:
            h = (u & -u).bit_length() - 1
            u = (u ^ (1 << h)) | (1 << (h + 1))
            if u <= n:
                break
        parent[order[v - 1]] = order[u - 1]
    return parent


def double_binary_tree(n: int) -> tuple[list[int], list[int]]:
    """Two trees over ranks 0..N-1 with no rank interior in both (the double binary tree of
    Sanders, Speck and Traeff, which NCCL uses): the in-order tree over the ranks, whose
    interior positions are even, hence odd ranks; and the same tree over the ranks shifted by
    one (position p holds rank p - 1), whose interior ranks are even. Each tree carries half
    the data, so a rank that forwards in one only sends up in the other."""
    return in_order_tree(list(range(n))), in_order_tree([n - 1, *range(n - 1)])


def _interior(parent: list[int]) -> set[int]:
    return {p for p in parent if p >= 0}


def _double_binary_tree(nbytes: int, n: int) -> tuple:
    """All-reduce over two trees, half the buffer each (chunk t = tree t). In each tree a rank
    receives its children's partial sums, adds its own and sends the sum up (round 0, 1); the
    root's sum is the total, which comes back down and each rank passes to its children
    (round 1, 2)."""
    halves = split(nbytes, 2)
    lanes = []
    for t, parent in enumerate(double_binary_tree(n)):
        children: list[list[int]] = [[] for _ in range(n)]
        for r, p in enumerate(parent):
            if p >= 0:
                children[p].append(r)
        h = halves[t]
        lane = []
        for r in range(n):
            up = parent[r]
            kids = tuple(children[r])
            lane.append(
                (
                    Round((), kids),
                    Round(
                        (Send(up, h, t, REDUCE),) if up >= 0 else (),
                        (up,) if up >= 0 else (),
                    ),
                    Round(tuple(Send(c, h, t, COPY) for c in kids), ()),
                )
            )
        lanes.append(tuple(lane))
    return tuple(lanes)

"""Collective schedules: byte counts as NCCL states them, and every chunk followed to the end.

The executor replays these schedules with real messages, so a schedule that forgets a chunk, or
forwards one before it holds it, would make a collective finish with the wrong data yet the
right time. `_run` executes a schedule symbolically under the module's one rule (a rank posts
round k's sends once its earlier rounds' receives have arrived) and tracks, for every rank and
chunk, which ranks' contributions it holds.
"""

from __future__ import annotations

import pytest

from endpoint.collectives import (
    ALGORITHMS,
    COPY,
    REDUCE,
    CollectiveError,
    Schedule,
    double_binary_tree,
    in_order_tree,
    schedule,
    split,
)

CASES = [
    (kind, algo, n)
    for kind, algos in ALGORITHMS.items()
    for algo in algos
    for n in (1, 2, 3, 4, 5, 7, 8, 16)
]


def _initial(s: Schedule) -> list[dict[int, frozenset[int]]]:
    n = s.ranks
    everyone = frozenset(range(n))
    if s.kind in ("allreduce", "reducescatter"):
        chunks = {0, 1} if s.algorithm == "tree" else set(range(n))
        return [dict.fromkeys(chunks, frozenset({r})) for r in range(n)]
    if s.kind == "allgather":
        return [{r: everyone} for r in range(n)]  # rank r's own block, complete
    return [{r * n + d: frozenset({r}) for d in range(n) if d != r} for r in range(n)]


def _run(s: Schedule) -> list[dict[int, frozenset[int]]]:
    """Every rank's chunks after the schedule, and a check that it cannot stall."""
    n = s.ranks
    state = _initial(s)
    for lane in s.lanes:
        posted = [0] * n  # rounds whose sends are out, per rank
        # Messages in flight to each rank, by source, in posting order (one QP per pair).
        inbox: list[dict[int, list]] = [{} for _ in range(n)]
        got = [0] * n  # receives consumed, per rank, in round order
        progress = True
        while progress:
            progress = False
            for r in range(n):
                rounds = lane[r]
                # Consume what arrived, in round order.
                while True:
                    done = sum(len(rd.recvs) for rd in rounds[: _round_of(rounds, got[r])])
                    k = _round_of(rounds, got[r])
                    if k >= len(rounds):
                        break
                    need = rounds[k].recvs[got[r] - done]
                    queue = inbox[r].get(need)
                    if not queue:
                        break
                    chunk, op, value = queue.pop(0)
                    if op == REDUCE:
                        state[r][chunk] = state[r].get(chunk, frozenset()) | value
                    else:
                        assert op == COPY
                        state[r][chunk] = value
                    got[r] += 1
                    progress = True
                # Post every round whose earlier receives are all in.
                while posted[r] < len(rounds):
                    before = sum(len(rd.recvs) for rd in rounds[: posted[r]])
                    if got[r] < before:
                        break
                    for send in rounds[posted[r]].sends:
                        assert send.chunk in state[r], (s.kind, s.algorithm, r, send)
                        inbox[send.peer].setdefault(r, []).append(
                            (send.chunk, send.op, state[r][send.chunk])
                        )
                    posted[r] += 1
                    progress = True
        assert posted == [len(lane[r]) for r in range(n)], "a rank never posted a round"
        assert all(not q for box in inbox for q in box.values()), "a message nobody received"
        assert got == [sum(len(rd.recvs) for rd in lane[r]) for r in range(n)]
    return state


def _round_of(rounds, received: int) -> int:
    """The round whose receive is the `received`-th (0-based) of the rank's lane."""
    total = 0
    for k, rd in enumerate(rounds):
        total += len(rd.recvs)
        if received < total:
            return k
    return len(rounds)


@pytest.mark.parametrize(("kind", "algo", "n"), CASES)
def test_every_rank_ends_with_what_the_collective_promises(kind, algo, n):
    s = schedule(kind, 1_000_003, n, algo)
    state = _run(s)
    everyone = frozenset(range(n))
    for r in range(n):
        if kind == "allreduce":
            assert all(v == everyone for v in state[r].values()), (r, state[r])
        elif kind == "reducescatter":
            assert state[r][r] == everyone  # NCCL's placement: rank r gets block r
        elif kind == "allgather":
            assert set(state[r]) == set(range(n)) and all(v == everyone for v in state[r].values())
        else:  # all-to-all: rank r got block r of every other rank
            assert {c for c in state[r] if c % n == r} == {s_ * n + r for s_ in range(n) if s_ != r}


@pytest.mark.parametrize("n", [2, 3, 4, 8, 16])
def test_byte_counts_are_nccls(n):
    size = 64 << 20
    ring = schedule("allreduce", size, n)
    for r in range(n):
        # 2(N-1)/N x S per rank, to the byte (chunks differ by at most one byte).
        assert abs(ring.sent_bytes(r) - 2 * (n - 1) * size / n) <= 2 * (n - 1)
        assert abs(ring.received_bytes(r) - 2 * (n - 1) * size / n) <= 2 * (n - 1)
    assert sum(ring.sent_bytes(r) for r in range(n)) == 2 * (n - 1) * size
    for kind in ("allgather", "reducescatter", "alltoall"):
        s = schedule(kind, size, n)
        for r in range(n):
            assert abs(s.sent_bytes(r) - (n - 1) * size / n) <= n, (kind, r)
        assert sum(s.sent_bytes(r) for r in range(n)) == (n - 1) * size
    # The trees move what the ring moves in all, 2 (N-1) S: each half (one per tree) goes up
    # N-1 edges and down N-1 edges; no rank sends more than 2 S (interior in one tree, a leaf
    # in the other: S/2 up and S/2 to each of two children, then S/2 up).
    tree = schedule("allreduce", size, n, "tree")
    assert sum(tree.sent_bytes(r) for r in range(n)) == 2 * (n - 1) * size
    assert max(tree.sent_bytes(r) for r in range(n)) <= 2 * size


def test_the_two_trees_share_no_interior_rank():
    for n in range(1, 70):
        first, second = double_binary_tree(n)
        for parent in (first, second):
            assert parent.count(-1) == 1  # one root, every other rank attached
            _assert_tree(parent)
        inner = {p for p in first if p >= 0} & {p for p in second if p >= 0}
        assert not inner, (n, inner)


def _assert_tree(parent: list[int]) -> None:
    """Every rank reaches the root, with at most two children each (a binary tree)."""
    n = len(parent)
    for r in range(n):
        seen, u = set(), r
        while parent[u] >= 0:
            assert u not in seen
            seen.add(u)
            u = parent[u]
    for r in range(n):
        assert parent.count(r) <= 2


def test_the_in_order_tree_is_the_textbook_one_for_seven():
    # Positions 1..7: root 4, then 2 and 6, leaves 1 3 5 7 (ranks are positions - 1).
    assert in_order_tree(list(range(7))) == [1, 3, 1, -1, 5, 3, 5]


def test_split_is_even_to_the_byte():
    assert split(10, 3) == [4, 3, 3] and split(2, 4) == [1, 1, 0, 0] and sum(split(99, 7)) == 99


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("broadcast", 10, 4), "collective: one of allreduce, allgather, reducescatter, alltoall"),
        (("allgather", 10, 4, "tree"), "algorithm: allgather runs as ring, got 'tree'"),
        (("allreduce", 10, 0), "ranks: expected an integer >= 1, got 0"),
        (("allreduce", -1, 4), "bytes: expected an integer >= 0, got -1"),
    ],
)
def test_bad_requests_fail_with_one_line_naming_the_field(args, message):
    with pytest.raises(CollectiveError) as err:
        schedule(*args)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)

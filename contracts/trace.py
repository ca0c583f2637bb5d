"""A training iteration as a per-rank dependency graph: what a trace workload replays.

Both input formats (the ASTRA-sim text workload and Chakra execution traces) are read into this
one graph, which the scenario layer validates before anything is built and the endpoint
processes execute (compute nodes wait in virtual time, collectives run as message schedules of
`endpoint.collectives`, sends and receives as single messages). One graph is one iteration; a
run repeats it, the next iteration starting on a rank when all of that rank's nodes are done --
a training step's optimizer needs every gradient, so real jobs synchronise there too.

A collective is one *instance* shared by the ranks of its group: every member's node for it
carries the same `comm` id, which is how the executors of different ranks agree on which
messages belong together. `validate` refuses what would deadlock or never finish -- a cycle,
an unknown dependency, an instance that some member never posts, a send with no matching
receive -- with one line naming the source, the rank, the node and the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field

COMPUTE, COLLECTIVE, SEND, RECV = "compute", "collective", "send", "recv"
NODE_KINDS = (COMPUTE, COLLECTIVE, SEND, RECV)

ALGORITHMS = {
    "allreduce": ("ring", "tree"),
    "allgather": ("ring",),
    "reducescatter": ("ring",),
    "alltoall": ("direct",),
}
"""The collectives a trace may name and what each can run as, the first the default
(`endpoint.collectives` builds their schedules). `tree` is NCCL's double binary tree; `direct`
the all-to-all in which every rank posts to every other at once."""
COLLECTIVES = tuple(ALGORITHMS)


class TraceError(ValueError):
    """A trace that cannot run; `str()` is one line naming the file, rank, node and field."""


@dataclass(frozen=True, slots=True)
class Node:
    id: int  # unique within its rank
    name: str
    kind: str  # one of NODE_KINDS
    deps: tuple[int, ...] = ()  # ids of this rank's nodes that must finish first
    duration_s: float = 0.0  # compute: virtual seconds
    collective: str = ""  # endpoint.collectives.COLLECTIVES
    algorithm: str = ""  # "" = the collective's default
    group: str = ""  # a key of TraceGraph.groups
    comm: str = ""  # the instance id, the same on every member of the group
    nbytes: int = 0  # collective: NCCL's S; send/recv: the message
    peer: int = -1  # send/recv: the other rank
    tag: int = 0  # send/recv: matches a send with its receive


@dataclass(frozen=True)
class TraceGraph:
    source: str  # the file (or files' prefix) it was read from, for messages
    ranks: int
    groups: dict[str, tuple[int, ...]]  # name -> member ranks, in ring order
    nodes: tuple[tuple[Node, ...], ...]  # nodes[rank]
    meta: dict = field(default_factory=dict)  # what the format's header said

    def collectives(self) -> dict[str, list[tuple[int, Node]]]:
        """Each collective instance's (rank, node) pairs."""
        out: dict[str, list[tuple[int, Node]]] = {}
        for r, nodes in enumerate(self.nodes):
            for n in nodes:
                if n.kind == COLLECTIVE:
                    out.setdefault(n.comm, []).append((r, n))
        return out


def validate(g: TraceGraph) -> TraceGraph:
    """`g` if it can run to the end; TraceError (one line) for the first problem found."""
    if g.ranks < 1 or len(g.nodes) != g.ranks:
        raise TraceError(f"{g.source}: {len(g.nodes)} ranks of nodes for {g.ranks} ranks")
    for name, members in g.groups.items():
        if not members or len(set(members)) != len(members):
            raise TraceError(f"{g.source}: group {name}: members must be distinct, got {members}")
        bad = [m for m in members if not 0 <= m < g.ranks]
        if bad:
            raise TraceError(
                f"{g.source}: group {name}: rank {bad[0]} is not one of 0..{g.ranks - 1}"
            )
    for r, nodes in enumerate(g.nodes):
        ids = {}
        for n in nodes:
            where = f"{g.source}: rank {r} node {n.id} ({n.name})"
            if n.id in ids:
                raise TraceError(f"{where}: id: used twice on this rank")
            ids[n.id] = n
            if n.kind not in NODE_KINDS:
                raise TraceError(f"{where}: kind: one of {', '.join(NODE_KINDS)}, got {n.kind!r}")
            if n.kind == COMPUTE and not n.duration_s >= 0:
                raise TraceError(f"{where}: duration: must be >= 0, got {n.duration_s!r}")
            if n.kind == COLLECTIVE:
                if n.collective not in ALGORITHMS:
                    raise TraceError(
                        f"{where}: collective: one of {', '.join(ALGORITHMS)}, got {n.collective!r}"
                    )
                if n.algorithm and n.algorithm not in ALGORITHMS[n.collective]:
                    raise TraceError(
                        f"{where}: algorithm: {n.collective} runs as "
                        f"{' or '.join(ALGORITHMS[n.collective])}, got {n.algorithm!r}"
                    )
                if n.group not in g.groups:
                    raise TraceError(f"{where}: group: no group named {n.group!r}")
                if r not in g.groups[n.group]:
                    raise TraceError(f"{where}: group: rank {r} is not a member of {n.group}")
            if n.kind in (SEND, RECV) and not (0 <= n.peer < g.ranks and n.peer != r):
                raise TraceError(f"{where}: peer: another rank of 0..{g.ranks - 1}, got {n.peer}")
            if n.nbytes < 0:
                raise TraceError(f"{where}: bytes: must be >= 0, got {n.nbytes}")
        for n in nodes:
            for d in n.deps:
                if d not in ids:
                    raise TraceError(
                        f"{g.source}: rank {r} node {n.id} ({n.name}): deps: no node {d} on this rank"
                    )
        _check_acyclic(g.source, r, nodes)
    _check_collectives(g)
    _check_point_to_point(g)
    return g


def _check_acyclic(source: str, rank: int, nodes: tuple[Node, ...]) -> None:
    """Kahn's algorithm; a node left over sits on a cycle (or behind one)."""
    indeg = {n.id: len(n.deps) for n in nodes}
    users: dict[int, list[int]] = {}
    for n in nodes:
        for d in n.deps:
            users.setdefault(d, []).append(n.id)
    ready = [i for i, k in indeg.items() if k == 0]
    seen = 0
    while ready:
        i = ready.pop()
        seen += 1
        for u in users.get(i, ()):
            indeg[u] -= 1
            if indeg[u] == 0:
                ready.append(u)
    if seen != len(nodes):
        stuck = min(i for i, k in indeg.items() if k > 0)
        name = next(n.name for n in nodes if n.id == stuck)
        raise TraceError(f"{source}: rank {rank} node {stuck} ({name}): deps: a dependency cycle")


def _check_collectives(g: TraceGraph) -> None:
    for comm, posts in g.collectives().items():
        _, first = posts[0]
        members = g.groups[first.group]
        ranks = [r for r, _ in posts]
        if len(set(ranks)) != len(ranks):
            r = next(x for x in ranks if ranks.count(x) > 1)
            raise TraceError(f"{g.source}: collective {comm}: rank {r} posts it twice")
        missing = sorted(set(members) - set(ranks))
        if missing:
            raise TraceError(
                f"{g.source}: collective {comm} ({first.name}) on {first.group}: "
                f"rank {missing[0]} never posts it"
            )
        for r, n in posts:
            for key in ("collective", "algorithm", "group", "nbytes"):
                if getattr(n, key) != getattr(first, key):
                    label = "bytes" if key == "nbytes" else key
                    raise TraceError(
                        f"{g.source}: rank {r} node {n.id} ({n.name}): {label}: "
                        f"{getattr(n, key)!r} where rank {posts[0][0]} has {getattr(first, key)!r}"
                        f" for collective {comm}"
                    )


def _check_point_to_point(g: TraceGraph) -> None:
    """Every send has the receive that matches it (peer, tag and size), and the reverse."""
    sends: dict[tuple[int, int, int], list[Node]] = {}
    recvs: dict[tuple[int, int, int], list[Node]] = {}
    for r, nodes in enumerate(g.nodes):
        for n in nodes:
            if n.kind == SEND:
                sends.setdefault((r, n.peer, n.tag), []).append(n)
            elif n.kind == RECV:
                recvs.setdefault((n.peer, r, n.tag), []).append(n)
    for key, ss in sends.items():
        rs = recvs.get(key, [])
        src, dst, tag = key
        if len(rs) < len(ss):
            n = ss[len(rs)]
            raise TraceError(
                f"{g.source}: rank {src} node {n.id} ({n.name}): peer: rank {dst} never posts "
                f"the receive of this send (tag {tag})"
            )
        for s, rv in zip(ss, rs, strict=False):
            if s.nbytes != rv.nbytes:
                raise TraceError(
                    f"{g.source}: rank {dst} node {rv.id} ({rv.name}): bytes: {rv.nbytes} where "
                    f"the send from rank {src} has {s.nbytes} (tag {tag})"
                )
    for key, rs in recvs.items():
        ss = sends.get(key, [])
        if len(ss) < len(rs):
            src, dst, tag = key
            n = rs[len(ss)]
            raise TraceError(
                f"{g.source}: rank {dst} node {n.id} ({n.name}): peer: rank {src} never posts "
                f"the send this receive waits for (tag {tag})"
            )


_NODE_DEFAULTS = {f: getattr(Node(0, "", COMPUTE), f) for f in Node.__slots__}


def graph_to_dict(g: TraceGraph) -> dict:
    """`g` as JSON-able data (a trace job's `graph`): each node with its non-default fields."""
    return {
        "source": g.source,
        "ranks": g.ranks,
        "groups": {k: list(v) for k, v in g.groups.items()},
        "nodes": [
            [
                {
                    f: (list(v) if f == "deps" else v)
                    for f in Node.__slots__
                    if (v := getattr(n, f)) != _NODE_DEFAULTS[f] or f in ("id", "name", "kind")
                }
                for n in nodes
            ]
            for nodes in g.nodes
        ],
        "meta": g.meta,
    }


def graph_from_dict(d: object) -> TraceGraph:
    """The graph of `graph_to_dict`, validated; TraceError (one line) if it is not one."""
    if not isinstance(d, dict):
        raise TraceError("graph: expected an object")
    source = str(d.get("source", "graph"))
    try:
        groups = {str(k): tuple(int(m) for m in v) for k, v in d["groups"].items()}
        nodes = tuple(
            tuple(Node(**{**n, "deps": tuple(n.get("deps", ()))}) for n in rank_nodes)
            for rank_nodes in d["nodes"]
        )
        g = TraceGraph(source, int(d["ranks"]), groups, nodes, dict(d.get("meta", {})))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise TraceError(f"{source}: graph: not a trace graph ({exc})") from None
    return validate(g)

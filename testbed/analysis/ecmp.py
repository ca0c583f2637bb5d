"""ECMP collisions of single-path flows: what the fabric's hash does to a traffic matrix over many
seeds, next to what balls thrown into bins would do.

A single-path connection (RoCE RC; the `single-path` transport) has one UDP source port, hence
one path: a leaf's hash throws each of its n cross-leaf flows onto one of its m uplinks. With a
hash that mixes and a source port drawn per connection (`ecmp_hash: mixed`) the throws are
independent and uniform -- n balls into m bins -- and a non-blocking fabric loses much of its
capacity to collisions (htsim: one path per flow of a 4x4x4 permutation uses 53.5 % of it,
spraying 87.7 %). With the linear CRC and one fixed port (`crc`), structured addresses land in a
structured way: a 4x4x4 permutation puts exactly one flow on every uplink, for every seed, and
the testbed would show single-path as good as spraying. `collisions` measures the first against
`balls_into_bins`; tests/test_ecmp_collisions.py shows the second is far from it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from contracts.ports import ROCEV2_UDP_PORT
from endpoint.config import Mode, TransportConfig
from endpoint.workloads import qp_number
from testbed.fabric.paths import FabricPaths
from testbed.harness.endpoint_driver import JOB
from topologies import Fabric


@dataclass(frozen=True)
class Bins:
    """Per-leaf uplink loads of single-path flows (or their expectation): n balls, m bins."""

    balls: int
    bins: int
    empty_fraction: float  # share of uplinks that carry no flow
    mean_max: float  # flows on a leaf's busiest uplink (1 is perfect when n == m)
    load_pmf: tuple[float, ...]  # P(an uplink carries k flows), k = 0..n
    max_pmf: tuple[float, ...]  # P(the busiest uplink carries k flows), k = 0..n
    samples: int = 0  # (leaf, seed) pairs measured; 0 for the analytic expectation
    utilisation: float | None = None  # fluid max-min throughput / every flow at NIC rate


def balls_into_bins(n: int, m: int) -> Bins:
    """The exact expectation for n balls thrown independently and uniformly into m bins.

    An uplink's load is Binomial(n, 1/m), so it is empty with probability (1 - 1/m)^n. The
    busiest bin: P(max <= k) is the number of ways to place n labelled balls with at most k in
    each bin, over m^n, counted bin by bin with exact integers (no overflow, no rounding).
    """
    if n < 0 or m < 1:
        raise ValueError(f"balls_into_bins: need n >= 0 and m >= 1, got n={n}, m={m}")
    p = 1 / m
    load = tuple(math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n + 1))
    total = m**n
    at_most = []
    for k in range(n + 1):
        ways = [1] + [0] * n  # ways[r]: r labelled balls in the bins so far, each <= k
        for _ in range(m):
            ways = [
                sum(math.comb(r, j) * ways[r - j] for j in range(min(k, r) + 1))
                for r in range(n + 1)
            ]
        at_most.append(ways[n] / total)
        if ways[n] == total:
            at_most += [1.0] * (n - k)
            break
    max_pmf = tuple(at_most[k] - (at_most[k - 1] if k else 0.0) for k in range(n + 1))
    return Bins(
        balls=n,
        bins=m,
        empty_fraction=(1 - p) ** n,
        mean_max=sum(k * q for k, q in enumerate(max_pmf)),
        load_pmf=load,
        max_pmf=max_pmf,
    )


def single_path_sport(fab: Fabric, seed: int, src: str, dst: str, lane: int = 0) -> int:
    """The UDP source port of the `single-path` connection src -> dst in a run of `seed` (of its
    QP `lane` when a peer has several: `transport.qps`), chosen as the endpoints choose it
    (testbed.harness.endpoint_driver.job_request): drawn per connection under `mixed`, the
    fixed first EV under `crc`."""
    ev_seed = seed if fab.params.ecmp_hash == "mixed" else None
    cfg = TransportConfig(mode=Mode.SINGLE_PATH, ev_seed=ev_seed)
    conn = cfg.for_connection(src, dst, qp_number(JOB, fab.hosts().index(dst) + 1, lane))
    return conn.ev_values()[conn.single_path_ev_index]


def _paths(fab: Fabric, pairs: Sequence[tuple[str, str]], seed: int) -> list[list[str]]:
    walker = FabricPaths(fab, seed)
    return [
        walker.path(s, d, single_path_sport(fab, seed, s, d), ROCEV2_UDP_PORT) for s, d in pairs
    ]


def uplink_loads(fab: Fabric, pairs: Sequence[tuple[str, str]], seed: int) -> dict[str, list[int]]:
    """Per source leaf (with a flow to another leaf): how many of the single-path flows of
    `pairs` take each of its uplinks, in the leaf's port order, with the switches' own hash
    (`predict_path`'s) in a run of `seed`. Single plane."""
    return _loads(fab, _paths(fab, pairs, seed))


def _loads(fab: Fabric, paths: Iterable[Sequence[str]]) -> dict[str, list[int]]:
    loads: dict[str, dict[str, int]] = {}
    for path in paths:
        leaf, spine = path[1], path[2]
        if fab.nodes[spine].kind != "spine":
            continue  # within one leaf: no uplink
        if leaf not in loads:
            ups = [i.peer_node for i in fab.interfaces[leaf]]
            loads[leaf] = {s: 0 for s in ups if fab.nodes[s].kind == "spine"}
        loads[leaf][spine] += 1
    return {leaf: list(by_spine.values()) for leaf, by_spine in loads.items()}


def max_min_utilisation(fab: Fabric, paths: Iterable[Sequence[str]]) -> float:
    """Throughput of flows pinned to `paths` under max-min fairness (a fluid model: every flow
    as fast as its most shared link allows), as a fraction of every flow at its NIC's rate.

    An upper bound for a transport on those paths -- htsim's packet-level one-path figure is
    lower, since queues and congestion control waste some of it.
    """
    rates, nic = _max_min_rates(fab, list(paths))
    return sum(rates) / sum(nic) if rates else 1.0


def _max_min_rates(fab: Fabric, paths: Sequence[Sequence[str]]) -> tuple[list[float], list[float]]:
    """Max-min fair rates of flows pinned to `paths`, and each flow's NIC rate (Mbps).

    Progressive filling: all unfrozen flows speed up together until a link is full; its flows
    freeze.
    """
    cap: dict[tuple[str, str], float] = {}
    for link in fab.links:
        cap[(link.a, link.b)] = cap[(link.b, link.a)] = link.mbps or 1.0
    flows = [list(zip(p[:-1], p[1:], strict=True)) for p in paths]
    rate = [0.0] * len(flows)
    active = set(range(len(flows)))
    left = dict(cap)
    while active:
        users: dict[tuple[str, str], int] = {}
        for f in active:
            for link in flows[f]:
                users[link] = users.get(link, 0) + 1
        step = min(left[link] / n for link, n in users.items())
        for f in active:
            rate[f] += step
        for link, n in users.items():
            left[link] -= step * n
        full = {link for link in users if left[link] <= 1e-9 * cap[link]}
        active = {f for f in active if not full.intersection(flows[f])}
    return rate, [cap[f[0]] for f in flows]


def striped_step_slowdown(
    fab: Fabric, pairs: Sequence[tuple[str, str]], seed: int, qps: int = 1
) -> float:
    """How many times longer than at line rate a synchronous step of `pairs` takes when each
    pair's data is striped over `qps` single-path QPs (`transport.qps`), in the fluid model:
    every QP at its max-min rate on the path its source port hashes to, a QP's slice (1/qps of
    the data) done at that rate, the step as slow as its slowest slice (a ring all-reduce phase
    waits for every hop). 1.0: no collision anywhere. It ignores that a flow speeds up when
    others finish, so it is the collisions' first-order cost, not a packet-level prediction.
    """
    if qps < 1:
        raise ValueError(f"qps: at least 1, got {qps}")
    walker = FabricPaths(fab, seed)
    paths = [
        walker.path(s, d, single_path_sport(fab, seed, s, d, lane), ROCEV2_UDP_PORT)
        for s, d in pairs
        for lane in range(qps)
    ]
    rates, nic = _max_min_rates(fab, paths)
    return max((n / qps) / r for r, n in zip(rates, nic, strict=True))


def _pmf(values: Sequence[int], n: int) -> tuple[float, ...]:
    return tuple(values.count(k) / len(values) for k in range(n + 1))


def collisions(fab: Fabric, pairs: Sequence[tuple[str, str]], seeds: Iterable[int]) -> Bins:
    """The measured counterpart of `balls_into_bins`: per-leaf uplink loads of the single-path
    flows of `pairs` over `seeds`, pooled over every (leaf, seed). Every sending leaf must send
    the same number of cross-leaf flows (a permutation does) so that the pool has one n."""
    per_uplink: list[int] = []
    maxima: list[int] = []
    utilisation: list[float] = []
    n = m = None
    for seed in seeds:
        paths = _paths(fab, pairs, seed)
        utilisation.append(max_min_utilisation(fab, paths))
        for loads in _loads(fab, paths).values():
            if n is None:
                n, m = sum(loads), len(loads)
            elif (sum(loads), len(loads)) != (n, m):
                raise ValueError(
                    "pairs: every leaf must send the same number of cross-leaf flows "
                    f"({n} and {sum(loads)} here)"
                )
            per_uplink += loads
            maxima.append(max(loads))
    if n is None or m is None:
        raise ValueError("pairs: no flow crosses the spines")
    return Bins(
        balls=n,
        bins=m,
        empty_fraction=per_uplink.count(0) / len(per_uplink),
        mean_max=sum(maxima) / len(maxima),
        load_pmf=_pmf(per_uplink, n),
        max_pmf=_pmf(maxima, n),
        samples=len(maxima),
        utilisation=sum(utilisation) / len(utilisation),
    )


def total_variation(p: Sequence[float], q: Sequence[float]) -> float:
    """Half the L1 distance between two distributions over 0..n: 0 equal, 1 disjoint."""
    return sum(abs(a - b) for a, b in zip(p, q, strict=True)) / 2

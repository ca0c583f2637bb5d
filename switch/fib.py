"""Static FIB: longest-prefix match, ECMP groups hashed on the 5-tuple (or, source-routed, chosen
by the EV), local repair.

Routes never change after start (static routing is the point of the fabric). What does change is
which members of an ECMP group are *live*: a port that lost carrier is pruned at once, as switch
ASICs do in hardware, and restored when carrier returns. A destination whose every next hop is
down is black-holed -- there is no control plane to route around it; the endpoints must.
"""

from __future__ import annotations

import ipaddress
import zlib
from dataclasses import dataclass, field

from contracts.defaults import ECMP_HASH, ECMP_HASHES, FORWARDING, FORWARDINGS, ROCE_PORT

_ROUTE_CACHE_MAX = 65536
BUCKETS = 256  # resilient-hash table size per ECMP group (a multiple of 1..8 members' LCM-ish)
BUCKET_MASK = BUCKETS - 1
# murmur3's fmix32 multipliers (Appledore): odd, with well-spread bits, so that every input bit
# reaches the low byte that names a bucket.
MIX_C1 = 0x85EBCA6B
MIX_C2 = 0xC2B2AE35


def mix32(h: int) -> int:
    """murmur3's 32-bit finaliser: a bijection whose every output bit depends on every input bit.

    Why: a CRC is linear over GF(2), so flows whose 5-tuples differ in the same bits keep the
    same difference in their hash, and structured addresses with one source port each spread
    *perfectly* over the uplinks (or all onto one): a 4x4x4 permutation put exactly one flow on
    each spine. Real switch hashes mix their input; after this, collisions follow balls into
    bins. About 0.2 us of CPython per call (docs/performance.md, "ECMP hash cost"); the ring
    path pays it once per flow, as its per-flow cache keeps the decision.
    """
    h ^= h >> 16
    h = h * MIX_C1 & 0xFFFFFFFF
    h ^= h >> 13
    h = h * MIX_C2 & 0xFFFFFFFF
    return h ^ h >> 16


@dataclass
class Route:
    """One FIB entry with its live next hops (port index, next-hop MAC).

    ECMP uses a resilient hash, as switch ASICs can: the flow hash picks one of BUCKETS
    buckets, each bucket names a member. When a member goes down only *its* buckets are handed
    to the survivors, so flows on healthy links keep their path (plain hash-modulo-N would
    reshuffle almost every flow); when it comes back it gets exactly its buckets back.
    """

    prefix: str
    members: tuple[tuple[int, bytes], ...]  # all configured next hops
    live: tuple[tuple[int, bytes], ...]  # members whose port is up
    local: bool = False  # addressed to the switch itself
    table: list[tuple[int, bytes]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rebuild()

    def rebuild(self) -> None:
        """Bucket b belongs to member b % len(members); dead members' buckets go round-robin
        to the live ones."""
        if not self.members:
            self.table = []
            return
        live = set(self.live)
        spare = list(self.live)
        table = []
        k = 0
        for b in range(BUCKETS):
            owner = self.members[b % len(self.members)]
            if owner in live or not spare:
                table.append(owner)
            else:
                table.append(spare[k % len(spare)])
                k += 1
        self.table = table


class Fib:
    """LPM over a handful of prefix lengths, with a per-destination cache.

    The cache maps the 4 destination bytes straight to the Route, so the fast path is one dict
    lookup; ECMP membership changes mutate the Route in place and need no cache flush.
    """

    def __init__(
        self,
        entries: list[tuple[str, list[tuple[int, bytes]]]],
        seed: int = 0,
        ecmp_hash: str = ECMP_HASH,
        forwarding: str = FORWARDING,
        plane_bits: int = 0,
    ) -> None:
        if ecmp_hash not in ECMP_HASHES:
            raise ValueError(f"ecmp_hash: one of {', '.join(ECMP_HASHES)}, got {ecmp_hash!r}")
        if forwarding not in FORWARDINGS:
            raise ValueError(f"forwarding: one of {', '.join(FORWARDINGS)}, got {forwarding!r}")
        self._tables: dict[int, dict[int, Route]] = {}
        self.routes: list[Route] = []
        for prefix, hops in entries:
            net = ipaddress.ip_network(prefix)
            members = tuple(hops)
            route = Route(prefix, members, members, local=not members)
            self._tables.setdefault(net.prefixlen, {})[int(net.network_address)] = route
            self.routes.append(route)
        self._lengths = sorted(self._tables, reverse=True)
        self._masks = {n: (0xFFFFFFFF << (32 - n)) & 0xFFFFFFFF for n in self._lengths}
        self._cache: dict[bytes, Route | None] = {}
        self.seed = seed & 0xFFFFFFFF
        self.mixed = ecmp_hash == "mixed"
        self.source_routed = forwarding == "source-routed"
        self.plane_bits = plane_bits

    def lookup(self, dst: bytes) -> Route | None:
        """Route for 4-byte destination `dst`, or None (no route)."""
        try:
            return self._cache[dst]
        except KeyError:
            pass
        addr = int.from_bytes(dst, "big")
        found = None
        for n in self._lengths:
            found = self._tables[n].get(addr & self._masks[n])
            if found is not None:
                break
        if len(self._cache) >= _ROUTE_CACHE_MAX:
            self._cache.clear()
        self._cache[bytes(dst)] = found
        return found

    def flow_hash(self, frame: bytes | bytearray | memoryview) -> int:
        """Hash of (proto, src, dst, sport, dport): the UDP source port (EV) picks the path.

        CRC32 of the addresses and ports with the initial value seed ^ proto; with `mixed` (the
        default), then `mix32`. A CRC's initial value only XORs a constant into the result, so
        the mixed hash is the finaliser of (plain CRC ^ a per-switch constant): each switch
        mixes differently, and two switches' choices are independent (no polarisation).
        """
        proto = frame[23]
        if (
            self.source_routed
            and proto == 17
            and len(frame) >= 38  # as the inline paths: a shorter UDP frame is hashed instead
            and (frame[36] << 8 | frame[37]) == ROCE_PORT
        ):
            return source_route(frame[34] << 8 | frame[35], self.plane_bits)
        if proto == 6 or proto == 17:
            h = zlib.crc32(frame[26:38], self.seed ^ proto)
        else:
            h = zlib.crc32(frame[26:34], self.seed ^ proto)
        return mix32(h) if self.mixed else h

    def set_port_state(self, port: int, up: bool, ports_up: list[bool]) -> None:
        """Recompute live members of every group after a carrier change on `port`."""
        for route in self.routes:
            if any(p == port for p, _ in route.members):
                route.live = tuple(m for m in route.members if ports_up[m[0]])
                route.rebuild()


def source_route(ev: int, plane_bits: int) -> int:
    """What a source-routed switch selects by, for an MRC packet whose EV (UDP source port) is
    `ev`: the field after the plane bits. Bucket b of a group belongs to member b % members
    (Route.rebuild), so field value k takes member k % members -- on a leaf, the k-th uplink:
    a generated EV *is* its path (endpoint.config.TransportConfig.ev_values), and consecutive
    EVs cover every uplink exactly once per round. Why the field is not masked to the group's
    size: a group of 3 would then leave a quarter of the values to member 0."""
    return ev >> plane_bits


def select_next_hop(route: Route, h: int) -> tuple[int, bytes] | None:
    """The member that flow hash `h` uses (None if every member is down)."""
    if not route.live:
        return None
    return route.table[h & BUCKET_MASK]

"""What the fabric could carry for a scenario's workload: the yardstick of its expectations.

`capacity_mbps` is the ideal-multipath goodput that `min_goodput_fraction` is measured against
(and, after a prefix of the timeline, what a damaged fabric can still carry, which caps the
failover target); `ideal_completion_s` is how long the workload needs at best; `frame_rate_pps`
is what that asks of the emulator, which pays mostly per packet, so it depends on the MTU.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from contracts.framing import max_frame_bytes
from testbed.scenario.schema import (
    Blackhole,
    Degrade,
    Event,
    Flap,
    LinkDown,
    LinkEvent,
    Loss,
    PlaneDown,
    PlaneUp,
    Scenario,
    SwitchDown,
    SwitchUp,
)
from testbed.scenario.traffic import flows, repetitions
from topologies import Fabric


class _LinkState:
    """Directed link capacities of the fabric after a prefix of the timeline."""

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        self.nominal: dict[tuple[str, str], float] = {}
        for link in fabric.links:
            mbps = link.mbps if link.mbps > 0 else math.inf
            self.nominal[(link.a, link.b)] = self.nominal[(link.b, link.a)] = mbps
        self.link: dict[tuple[str, str], float] = dict(self.nominal)
        self.down_switches: set[str] = set()
        self.down_planes: set[int] = set()

    def apply(self, event: Event) -> None:
        if isinstance(event, LinkEvent):
            a, b = event.link
            dirs = [tuple(event.direction)] if event.direction else [(a, b), (b, a)]
            for d in dirs:
                nominal = self.nominal[d]  # type: ignore[index]
                if isinstance(event, (LinkDown, Blackhole, Flap)):
                    # A flapping link is worth nothing to a transport that must not stall on it.
                    value = 0.0
                elif isinstance(event, Loss):
                    value = nominal * (1 - event.percent / 100)
                elif isinstance(event, Degrade):
                    value = min(nominal, event.mbps)
                else:  # link-up, heal
                    value = nominal
                self.link[d] = value  # type: ignore[index]
        elif isinstance(event, SwitchDown):
            self.down_switches.add(event.node)
        elif isinstance(event, SwitchUp):
            self.down_switches.discard(event.node)
        elif isinstance(event, PlaneDown):
            self.down_planes.add(event.plane)
        elif isinstance(event, PlaneUp):
            self.down_planes.discard(event.plane)

    def cap(self, a: str, b: str) -> float:
        for node in (a, b):
            info = self.fabric.nodes[node]
            if node in self.down_switches or (info.plane in self.down_planes):
                return 0.0
        return self.link[(a, b)]


def _uniform_rate(state: _LinkState, pairs: Sequence[tuple[str, str]]) -> float:
    """Largest rate every flow can get at once with ideal multipath over every plane and spine.

    A fluid estimate, not a simulation: each flow uses its source NICs, its destination NICs and,
    across leaves, the spine paths between its two leaves (summed over planes and spines, each
    path worth its weaker hop) and the uplinks/downlinks of both leaves. The rate is the tightest
    resource's capacity divided by the flows sharing it.
    """
    fabric = state.fabric
    P = fabric.params.planes
    leaf_of = {h: fabric.nodes[fabric.interfaces[h][0].peer_node].index for h in fabric.hosts()}
    uses: dict[tuple, int] = {}
    for src, dst in pairs:
        keys = [("tx", src), ("rx", dst)]
        if leaf_of[src] != leaf_of[dst]:
            l1, l2 = leaf_of[src], leaf_of[dst]
            keys += [("pair", l1, l2), ("up", l1), ("down", l2)]
        for key in keys:
            uses[key] = uses.get(key, 0) + 1
    S = fabric.params.spines

    def leaf(i: int, p: int) -> str:
        return f"leaf{i}" if P == 1 else f"leaf{i}p{p}"

    def spine(i: int, p: int) -> str:
        return f"spine{i}" if P == 1 else f"spine{i}p{p}"

    def capacity(key: tuple) -> float:
        planes = range(1, P + 1)
        if key[0] == "tx":
            return sum(state.cap(key[1], leaf(leaf_of[key[1]], p)) for p in planes)
        if key[0] == "rx":
            return sum(state.cap(leaf(leaf_of[key[1]], p), key[1]) for p in planes)
        if key[0] == "up":
            return sum(
                state.cap(leaf(key[1], p), spine(s, p)) for p in planes for s in range(1, S + 1)
            )
        if key[0] == "down":
            return sum(
                state.cap(spine(s, p), leaf(key[1], p)) for p in planes for s in range(1, S + 1)
            )
        _, l1, l2 = key
        return sum(
            min(state.cap(leaf(l1, p), spine(s, p)), state.cap(spine(s, p), leaf(l2, p)))
            for p in planes
            for s in range(1, S + 1)
        )

    return min((capacity(k) / n for k, n in uses.items()), default=math.inf)


def capacity_mbps(sc: Scenario, after: Iterable[Event] = ()) -> float:
    """Ideal aggregate goodput of the workload's flows (Mbps of frames, headers included).

    With `after` empty this is the healthy fabric, the `bottleneck_mbps` that
    `min_goodput_fraction` divides by. With a prefix of the timeline it is what the damaged
    fabric can still carry, which caps the failover target (a plane-down halves what two planes
    could carry; no transport can "recover" what is gone).
    """
    state = _LinkState(sc.fabric())
    for event in after:
        state.apply(event)
    fl = flows(sc)
    return _uniform_rate(state, [(f.src, f.dst) for f in fl]) * len(fl)


def ideal_completion_s(sc: Scenario) -> float:
    """Seconds the workload needs on the healthy fabric at line rate (no headers, no failures)."""
    fl = flows(sc)
    state = _LinkState(sc.fabric())
    rate = _uniform_rate(state, [(f.src, f.dst) for f in fl])
    return repetitions(sc) * max(f.bytes for f in fl) * 8 / (rate * 1e6)


def frame_rate_pps(sc: Scenario) -> float:
    """Full frames per second the workload's flows put through the healthy fabric at their
    ideal aggregate rate, at the scenario's MTU: most of the emulator's work is per packet (the
    same Mbps at MTU 9000 is a sixth of the packets at 1500; see scenario.linting)."""
    return capacity_mbps(sc) * 1e6 / 8 / max_frame_bytes(sc.topology.mtu)

"""Links between two switches of one process, carried in memory instead of through their veth.

Why: in a shared switch process (switch/loop.py) a packet that crosses leaf, spine and leaf
went through the kernel three times -- a tx ring slot, a veth transmit, an AF_PACKET delivery
into the next switch's rx ring, a ring read -- and measured in a dilated fabric that kernel
work and the cold caches around it, not forwarding, were most of the ~30 µs a packet-hop cost
against 2.7 µs in the switch bench (docs/fidelity.md). Between two switches of one process
the kernel adds nothing the emulation needs: everything a link does -- its queue, serialiser,
propagation delay, trimming, ECN, carrier and gray failures -- happens in the sending port
(switch/port.py) before the frame reaches the wire, and the receiving port's own rx
impairments are applied by `Switch.receive_batch` as for a frame read from a ring. So the
wire can be a function call: when the sending port puts a frame on the wire, the peer switch
receives it at that same instant of the loop's virtual clock.

What changes for a user: frames between two switches of a shared process no longer cross the
veth, so a capture on that veth sees nothing (`TESTBED_SWITCH_LOCAL_LINKS=0` turns this off,
and one process per switch never does it). Host links always cross their veth.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from switch.dataplane import Switch
from switch.port import Port

ENV = "TESTBED_SWITCH_LOCAL_LINKS"


def enabled() -> bool:
    """On unless $TESTBED_SWITCH_LOCAL_LINKS is 0 (to measure or capture the veth path)."""
    return os.environ.get(ENV, "1") != "0"


class LocalWire:
    """The wire of one direction of a link whose two ends are switches of this process.

    `send(frame)` is the sending port's transmit: the peer switch receives the frame on its
    port now. `delivered` is shared by every wire of the process: the event loop compares it
    before and after a pass over the egress timers to learn that a delivery scheduled work on
    a port it had already passed (switch/loop.py).
    """

    __slots__ = ("peer", "port", "clock", "delivered")

    def __init__(self, peer: Switch, port: Port, clock: Callable[[], float], delivered: list[int]):
        self.peer = peer
        self.port = port
        self.clock = clock
        self.delivered = delivered

    def send(self, frame: bytes | bytearray | memoryview) -> bool:
        if type(frame) is not bytearray:
            frame = bytearray(frame)  # a view of an rx ring slot: the peer may queue the frame
        self.delivered[0] += 1
        self.peer.receive_batch(self.port, (frame,), self.clock())
        return True


def link(switches: list[Switch], clock: Callable[[], float]) -> list[int]:
    """Wire every port whose peer is a port of another switch in `switches` to it in memory.

    Ports pair by MAC: a port's `peer_mac` is its peer port's `mac` (topologies/ gives every
    interface its own). Returns the delivery counter the wires share (see LocalWire), `[0]`.
    Each wired port loses its tx ring in the inline path (`Switch.tx_rings`), so no frame for
    it is written into the veth's ring any more; its ring stays open (and read) for anything
    the kernel still delivers.
    """
    delivered = [0]
    by_mac: dict[bytes, tuple[Switch, Port]] = {}
    for sw in switches:
        for port in sw.ports:
            if port.mac in by_mac:
                raise ValueError(f"{sw.name} {port.name}: MAC already used by another port")
            by_mac[port.mac] = (sw, port)
    for sw in switches:
        wired = False
        for port in sw.ports:
            peer = by_mac.get(port.peer_mac)
            if peer is None or peer[0] is sw:
                continue
            port.transmit = LocalWire(peer[0], peer[1], clock, delivered).send
            sw.tx_rings[port.index] = None
            wired = True
        if wired:
            sw.refresh()  # the flow caches hold tx rings
    return delivered


def wired_ports(sw: Switch) -> list[str]:
    """Names of `sw`'s ports whose wire is in memory (for the start-up line and counters)."""
    return [
        p.name for p in sw.ports if isinstance(getattr(p.transmit, "__self__", None), LocalWire)
    ]

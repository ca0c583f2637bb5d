"""switch/local_links.py: switches of one process wired in memory forward exactly as through veths.

Two copies of a 2x2x2 fabric's four switches run the same traffic on one virtual clock. In the
first, every frame a switch puts on an inter-switch port's wire is recorded by that port's
fake veth and handed to the peer switch in the same pass, as a veth and the peer's ring read
would; in the second, the switches are wired by `local_links.link`. The hosts must receive the
same bytes at the same virtual times, every port's counters must agree, and no frame may reach
an inter-switch veth of the wired copy. Failures (a black hole, a link down, a switch down)
act on the wired copy as on the other.
"""

from __future__ import annotations

import random

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from switch import local_links
from switch.config import switch_config
from switch.dataplane import Switch
from switch.egress_timers import ActivePorts
from topologies import leaf_spine

# 10 Gbps, 1 µs links, 6 kB queues at time dilation 1000 (so the early window is 0.5 µs, less
# than a frame's serialisation): bursts queue, ECN-mark and trim, and a delivery at the wrong
# instant would show in the hosts' arrival times.
FAB = leaf_spine(spines=2, leaves=2, hosts_per_leaf=2, link_mbps=10_000, delay_us=1, queue_kb=6)
DILATION = 1000
NAMES = ["leaf1", "leaf2", "spine1", "spine2"]


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class WireIO:
    """A fake veth end: records what the switch transmits, with the virtual time."""

    def __init__(self, name: str, clock: Clock) -> None:
        self.name = name
        self.clock = clock
        self.sent: list[tuple[float, bytes]] = []
        self.truncated = self.ring_skips = 0

    def send(self, frame) -> bool:
        self.sent.append((self.clock.t, bytes(frame)))
        return True

    def poll_kernel_drops(self) -> int:
        return 0

    def fileno(self) -> int:
        return -1


class Bed:
    """Four switches on one virtual clock, wired in memory or through recorded veths."""

    def __init__(self, wired: bool) -> None:
        self.clock = Clock()
        self.ios: dict[str, WireIO] = {}

        def open_port(name: str) -> WireIO:
            self.ios[name] = WireIO(name, self.clock)
            return self.ios[name]

        self.switches = {
            n: Switch(switch_config(FAB, n, time_dilation=DILATION), open_port=open_port)
            for n in NAMES
        }
        self.delivered = (
            local_links.link(list(self.switches.values()), self.clock) if wired else None
        )
        self.active = ActivePorts()  # as switch/loop.py shares one among its switches
        seq = 0
        for sw in self.switches.values():
            sw.active = self.active
            for p in sw.ports:
                p.active = self.active
                p.seq = seq
                seq += 1
        # port name -> (peer switch, peer port) for inter-switch ports
        self.peer: dict[str, tuple[Switch, object]] = {}
        for sw in self.switches.values():
            for pc in sw.config.ports:
                if pc.peer_node in self.switches:
                    other = self.switches[pc.peer_node]
                    far = FAB.interface(sw.name, pc.peer_node).peer_name
                    self.peer[pc.name] = (other, other.port_by_name[far])

    def inject(self, leaf: str, port: str, frame: bytes, t: float) -> None:
        self.clock.t = t
        sw = self.switches[leaf]
        sw.receive(sw.port_by_name[port], bytearray(frame), t)
        for name in self.peer:  # an idle, undelayed port sends at once
            self._carry(name)
        self._settle()

    def _settle(self) -> float | None:
        return self._settle_as_loop() if self.delivered else self._settle_through_veths()

    def _settle_as_loop(self) -> float | None:
        """What switch/loop.py does after a burst: serve the busy ports of every switch (one
        shared set), again while an in-memory wire delivered something."""
        before = self.delivered[0]
        nxt = self.active.serve(self.clock.t)
        while self.delivered[0] != before:
            before = self.delivered[0]
            nxt = self.active.serve(self.clock.t)
        return nxt

    def _settle_through_veths(self) -> float | None:
        """Serve every port what is due now until nothing moves; the next due time.

        Through veths, a frame a port puts on an inter-switch wire is handed to the peer switch
        right after that port's turn: the instant of the clock at which it left, as a veth
        delivers inside the sender's send() -- what the in-memory wire claims to do.
        """
        while True:
            moved = False
            nxt = None
            for sw in self.switches.values():
                for port in sw.ports:
                    t = port.service(self.clock.t)
                    if t is not None and (nxt is None or t < nxt):
                        nxt = t
                    moved |= self._carry(port.name)
            if not moved:
                return nxt

    def _carry(self, name: str) -> bool:
        if name not in self.peer:
            return False
        peer_sw, peer_port = self.peer[name]
        io = self.ios[name]
        moved = bool(io.sent)
        while io.sent:
            _t, frame = io.sent.pop(0)
            peer_sw.receive(peer_port, bytearray(frame), self.clock.t)
        return moved

    def run_until(self, t_end: float) -> None:
        while True:
            nxt = self._settle()
            if nxt is None or nxt > t_end:
                return
            self.clock.t = max(nxt, self.clock.t)

    def host_rx(self) -> dict[str, list[tuple[float, bytes]]]:
        return {n: io.sent for n, io in self.ios.items() if n not in self.peer and io.sent}

    def counters(self) -> dict:
        out = {}
        for sw in self.switches.values():
            c = sw.counters()
            out[sw.name] = {
                "drops": c["drops"],
                "ports": {
                    n: {k: p[k] for k in ("rx_packets", "tx_packets", "drops", "trims")}
                    for n, p in c["ports"].items()
                },
            }
        return out


def frame(src: str, dst: str, sport: int, size: int) -> bytes:
    return bytes(
        Ether(dst="02:7b:00:00:00:02", src="02:7b:00:00:00:01")
        / IP(src=src, dst=dst, tos=10 << 2 | 2)
        / UDP(sport=sport, dport=4791)
        / (b"x" * size)
    )


def traffic(seed: int) -> list[tuple[float, str, str, bytes]]:
    """Random frames from every host to the hosts of the other leaf, some in bursts that queue."""
    rng = random.Random(seed)
    hosts = [("leaf1", "leaf1-eth0", "10.1.1.1"), ("leaf1", "leaf1-eth1", "10.1.1.2"),
             ("leaf2", "leaf2-eth0", "10.1.2.1"), ("leaf2", "leaf2-eth1", "10.1.2.2")]  # fmt: skip
    out = []
    t = 0.0
    for _ in range(300):
        t += 0.0 if rng.random() < 0.85 else rng.choice((0.2e-6, 3e-6, 10e-6))
        leaf, port, src = rng.choice(hosts)
        dst = rng.choice([h[2] for h in hosts if h[0] != leaf])
        out.append(
            (t, leaf, port, frame(src, dst, rng.randrange(49152, 65536), rng.randrange(60, 1440)))
        )
    return out


def replay(bed: Bed, frames: list, failures=()) -> None:
    events = sorted([(t, 0, f) for t, *f in frames] + [(t, 1, f) for t, f in failures],
                    key=lambda e: (e[0], e[1]))  # fmt: skip
    for t, kind, what in events:
        bed.run_until(t)
        bed.clock.t = max(bed.clock.t, t)
        if kind == 0:
            leaf, port, data = what
            bed.inject(leaf, port, data, bed.clock.t)
        else:
            what(bed)
    bed.run_until(1.0)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_wired_switches_deliver_what_veths_deliver(seed: int) -> None:
    veth, wired = Bed(wired=False), Bed(wired=True)
    frames = traffic(seed)
    replay(veth, frames)
    replay(wired, frames)
    got = wired.host_rx()
    assert sum(len(v) for v in got.values()) == len(frames)  # trimmed ones as headers
    c = wired.counters()
    assert sum(p["trims"] for sw in c.values() for p in sw["ports"].values()) > 0, "no queueing"
    assert got == veth.host_rx()
    assert wired.counters() == veth.counters()
    assert all(not wired.ios[n].sent for n in wired.peer), "a wired port wrote to its veth"
    assert wired.delivered[0] == sum(
        wired.counters()[sw]["ports"][p]["tx_packets"]
        for sw in ("spine1", "spine2")
        for p in wired.counters()[sw]["ports"]
    ) + sum(
        wired.counters()[leaf]["ports"][p]["tx_packets"]
        for leaf in ("leaf1", "leaf2")
        for p in wired.counters()[leaf]["ports"]
        if p in wired.peer
    )


def _blackhole(bed: Bed) -> None:
    bed.switches["spine1"].port_by_name[FAB.interface("spine1", "leaf2").name].blackhole = True
    bed.switches["spine1"].refresh()


def _link_down(bed: Bed) -> None:
    sw = bed.switches["leaf1"]
    sw.set_port_up(sw.port_by_name[FAB.interface("leaf1", "spine2").name], False)


def _spine_down(bed: Bed) -> None:
    bed.switches["spine2"].set_switch_up(False)


@pytest.mark.parametrize("failure", [_blackhole, _link_down, _spine_down])
def test_failures_act_on_wired_links_as_on_veths(failure) -> None:
    veth, wired = Bed(wired=False), Bed(wired=True)
    frames = traffic(7)
    for bed in (veth, wired):
        replay(bed, frames, failures=[(frames[100][0], failure)])
    assert wired.host_rx() == veth.host_rx()
    c = wired.counters()
    assert c == veth.counters()
    dropped = sum(sum(p["drops"].values()) for sw in c.values() for p in sw["ports"].values())
    dropped += sum(sum(sw["drops"].values()) for sw in c.values())
    delivered = sum(len(v) for v in wired.host_rx().values())
    if failure is not _link_down:  # a link-down at the leaf is repaired locally: nothing lost
        assert dropped > 0
    assert delivered + dropped == len(frames)  # every frame delivered (maybe trimmed) or counted


def test_only_ports_between_switches_of_the_process_are_wired() -> None:
    clock = Clock()
    sws = [
        Switch(switch_config(FAB, n), open_port=lambda name: WireIO(name, clock))
        for n in ("leaf1", "spine1")
    ]
    local_links.link(sws, clock)
    assert local_links.wired_ports(sws[0]) == [FAB.interface("leaf1", "spine1").name]
    assert local_links.wired_ports(sws[1]) == [FAB.interface("spine1", "leaf1").name]
    assert sws[0].tx_rings[sws[0].port_by_name[FAB.interface("leaf1", "spine1").name].index] is None


def test_env_turns_wiring_off(monkeypatch) -> None:
    monkeypatch.setenv(local_links.ENV, "0")
    assert not local_links.enabled()
    monkeypatch.setenv(local_links.ENV, "1")
    assert local_links.enabled()

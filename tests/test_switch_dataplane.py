"""Switch.receive() end to end with fake port I/O: routing, TTL/ICMP, failures, fuzzing, counters.

Configs come from the real topology code (`switch_config(leaf_spine(...), name)`); each port's
I/O object is a recorder, so no root, sockets or namespaces are involved.
"""

from __future__ import annotations

import functools
import json
import random
import struct
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.layers.inet import ICMP, IP, TCP, UDP, IPerror, IPOption_RR, UDPerror
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, Ether
from scapy.utils import checksum

from switch import frames, reference
from switch.config import SwitchConfig, switch_config
from switch.dataplane import Switch
from topologies import leaf_spine


class FakeIO:
    """Stands in for an AF_PACKET ring: records what the switch transmits."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.sent: list[bytes] = []
        self.truncated = 0
        self.ring_skips = 0
        self.kernel_drops = 0
        self.accept = True

    def send(self, frame) -> bool:
        if not self.accept:
            return False
        self.sent.append(bytes(frame))
        return True

    def poll_kernel_drops(self) -> int:
        return self.kernel_drops

    def fileno(self) -> int:
        return -1


@functools.cache
def fabric(**kw):
    return leaf_spine(**kw)


def make_switch(name: str = "leaf1", **topo) -> tuple[Switch, dict[str, FakeIO]]:
    topo = {"spines": 4, "leaves": 3, "hosts_per_leaf": 2, "link_mbps": 0, "delay_us": 0} | topo
    fab = fabric(**topo)
    ios: dict[str, FakeIO] = {}

    def open_port(pname: str) -> FakeIO:
        ios[pname] = FakeIO(pname)
        return ios[pname]

    return Switch(switch_config(fab, name), open_port=open_port), ios


def drain(sw: Switch, now: float = 0.0) -> None:
    """Run every port's shaper to completion on the virtual clock."""
    for port in sw.ports:
        t = now
        while (t := port.service(t)) is not None:
            pass


def sent(ios: dict[str, FakeIO]) -> dict[str, list[bytes]]:
    return {n: io.sent for n, io in ios.items() if io.sent}


def clear(ios: dict[str, FakeIO]) -> None:
    for io in ios.values():
        io.sent.clear()


def mac_of(sw: Switch, port: str) -> str:
    return next(p.mac for p in sw.config.ports if p.name == port)


def peer_mac_of(sw: Switch, port: str) -> str:
    return next(p.peer_mac for p in sw.config.ports if p.name == port)


def peer_of(sw: Switch, port: str) -> str:
    return next(p.peer_node for p in sw.config.ports if p.name == port)


def udp_frame(
    src: str = "10.1.1.1",
    dst: str = "10.1.2.1",
    sport: int = 49152,
    dport: int = 4791,
    ttl: int = 64,
    tos: int = 10 << 2 | 2,
    payload: bytes = b"m" * 100,
    dst_mac: str = "02:7b:00:00:00:02",
) -> bytearray:
    pkt = (
        Ether(dst=dst_mac, src="02:7b:00:00:00:01")
        / IP(src=src, dst=dst, ttl=ttl, tos=tos, id=77)
        / UDP(sport=sport, dport=dport)
        / payload
    )
    return bytearray(bytes(pkt))


def rx(sw: Switch, port: str, frame: bytes | bytearray, now: float = 0.0) -> None:
    sw.receive(sw.port_by_name[port], bytearray(frame), now)


def uplinks(sw: Switch) -> list[str]:
    return [p.name for p in sw.config.ports if p.peer_node.startswith("spine")]


# ----- forwarding ----------------------------------------------------------------------------


@pytest.mark.parametrize("proto", ["udp", "tcp"])
def test_remote_host_leaves_on_uplink_with_ttl_minus_one(proto: str) -> None:
    sw, ios = make_switch("leaf1")
    if proto == "udp":
        frame = udp_frame(ttl=64)
    else:
        frame = bytearray(
            bytes(
                Ether(dst="02:7b:00:00:00:02")
                / IP(src="10.1.1.1", dst="10.1.3.2", ttl=64)
                / TCP(sport=5555, dport=80, flags="S")
            )
        )
    orig = bytes(frame)
    rx(sw, "leaf1-eth0", frame)
    out = sent(ios)
    assert len(out) == 1
    (port, [got]) = out.popitem()
    assert port in uplinks(sw)
    assert peer_of(sw, port).startswith("spine")
    assert got == reference.forward(orig, peer_mac_of(sw, port), mac_of(sw, port))
    pkt = Ether(got)
    assert pkt.dst == peer_mac_of(sw, port) and pkt.src == mac_of(sw, port)
    assert pkt[IP].ttl == 63 and checksum(got[14:34]) == 0
    assert got[14:] == orig[14:22] + bytes([63]) + got[23:25] + orig[25:]
    c = sw.counters()
    assert c["ports"]["leaf1-eth0"]["rx_packets"] == 1
    assert c["ports"][port]["tx_packets"] == 1 and c["drops"] == {}


def test_local_host_and_spine_forwarding() -> None:
    sw, ios = make_switch("leaf1")
    rx(sw, "leaf1-eth2", udp_frame(src="10.1.2.1", dst="10.1.1.2"))
    assert list(sent(ios)) == ["leaf1-eth1"]
    assert Ether(ios["leaf1-eth1"].sent[0]).dst == peer_mac_of(sw, "leaf1-eth1")
    sp, sios = make_switch("spine2")
    for leaf in (1, 2, 3):
        rx(sp, "spine2-eth0", udp_frame(src="10.1.1.1", dst=f"10.1.{leaf}.2"))
        out = sent(sios)
        assert list(out) == [f"spine2-eth{leaf - 1}"]
        assert peer_of(sp, f"spine2-eth{leaf - 1}") == f"leaf{leaf}"
        clear(sios)


def test_multi_plane_switch_forwards_only_its_plane() -> None:
    sw, ios = make_switch("leaf1p2", planes=2)
    rx(sw, "leaf1p2-eth0", udp_frame(src="10.2.1.1", dst="10.2.2.1"))
    [(port, [got])] = sent(ios).items()
    assert peer_of(sw, port).startswith("spine") and peer_of(sw, port).endswith("p2")
    assert Ether(got)[IP].ttl == 63
    clear(ios)
    rx(sw, "leaf1p2-eth0", udp_frame(src="10.2.1.1", dst="10.1.2.1"))  # plane 1 address
    assert sent(ios) == {} and sw.drops == {"no_route": 1}
    rx(sw, "leaf1p2-eth0", udp_frame(src="10.2.1.1", dst="10.2.1.254", ttl=1))
    assert sw.drops == {"no_route": 1, "local": 1}


def test_no_route_dropped_and_counted() -> None:
    sw, ios = make_switch("leaf1")
    for dst in ("10.1.1.7", "10.2.1.1", "192.0.2.1", "10.1.4.1"):
        rx(sw, "leaf1-eth0", udp_frame(dst=dst))
    assert sent(ios) == {} and sw.drops == {"no_route": 4}


def test_shaped_forwarding_delivers_after_serialisation() -> None:
    sw, ios = make_switch("leaf1", link_mbps=100, delay_us=20)
    rx(sw, "leaf1-eth0", udp_frame(), now=1.0)
    assert sent(ios) == {}  # serialising, then in flight
    drain(sw, 1.0)
    assert sum(len(v) for v in sent(ios).values()) == 1


# ----- TTL expiry, ICMP ----------------------------------------------------------------------


@pytest.mark.parametrize("ttl", [0, 1])
def test_ttl_expired_sends_time_exceeded_towards_source(ttl: int) -> None:
    sw, ios = make_switch("leaf1")
    frame = udp_frame(ttl=ttl, sport=33434, dport=33435)
    orig = bytes(frame)
    rx(sw, "leaf1-eth0", frame)
    assert sw.drops == {"ttl_expired": 1} and sw.icmp_sent == 1
    out = sent(ios)
    assert list(out) == ["leaf1-eth0"]  # back out of the ingress side, towards h1
    got = out["leaf1-eth0"][0]
    assert frames.classify(got) is None
    pkt = Ether(got)
    assert pkt.dst == peer_mac_of(sw, "leaf1-eth0") and pkt.src == mac_of(sw, "leaf1-eth0")
    ip = pkt[IP]
    assert (ip.src, ip.dst, ip.proto) == ("10.1.1.254", "10.1.1.1", 1)
    assert ip.len == len(got) - 14 and checksum(got[14:34]) == 0
    icmp = pkt[ICMP]
    assert (icmp.type, icmp.code) == (11, 0) and checksum(bytes(icmp)) == 0
    assert bytes(icmp)[8:] == orig[14:42]
    quoted = pkt[IPerror]
    assert (quoted.src, quoted.dst, quoted.ttl) == ("10.1.1.1", "10.1.2.1", ttl)
    assert quoted[UDPerror].sport == 33434


def test_spine_time_exceeded_goes_back_to_the_source_leaf() -> None:
    sw, ios = make_switch("spine3")
    rx(sw, "spine3-eth1", udp_frame(src="10.1.2.2", dst="10.1.3.1", ttl=1))
    out = sent(ios)
    assert list(out) == ["spine3-eth1"]
    pkt = Ether(out["spine3-eth1"][0])
    assert pkt[IP].src == "10.1.0.3" and pkt[IP].dst == "10.1.2.2" and pkt[ICMP].type == 11
    assert pkt.dst == peer_mac_of(sw, "spine3-eth1")


def test_echo_request_to_router_ip_answered() -> None:
    sw, ios = make_switch("leaf2")
    req = bytes(
        Ether(dst=mac_of(sw, "leaf2-eth1"))
        / IP(src="10.1.2.2", dst="10.1.2.254", ttl=1)
        / ICMP(type=8, id=0x1234, seq=7)
        / b"ping-payload"
    )
    rx(sw, "leaf2-eth1", req)
    out = sent(ios)
    assert list(out) == ["leaf2-eth1"] and sw.local_rx == 1 and sw.drops == {}
    pkt = Ether(out["leaf2-eth1"][0])
    assert (pkt[IP].src, pkt[IP].dst) == ("10.1.2.254", "10.1.2.2")
    assert checksum(bytes(pkt[IP])[:20]) == 0
    icmp = pkt[ICMP]
    assert (icmp.type, icmp.id, icmp.seq) == (0, 0x1234, 7) and checksum(bytes(icmp)) == 0
    assert bytes(icmp.payload) == b"ping-payload"


def test_other_local_traffic_consumed_and_counted() -> None:
    sw, ios = make_switch("leaf1")
    rx(sw, "leaf1-eth0", udp_frame(dst="10.1.1.254"))
    rx(sw, "leaf1-eth0", bytes(Ether() / IP(src="10.1.1.1", dst="10.1.1.254") / ICMP(type=0)))
    assert sent(ios) == {} and sw.drops == {"local": 2} and sw.local_rx == 2


def test_ping_every_spine_router_ip_through_the_leaf() -> None:
    leaf, lios = make_switch("leaf1")
    spines = {s: make_switch(s) for s in ("spine1", "spine2", "spine3", "spine4")}
    failures = []
    for s in range(1, 5):
        clear(lios)
        req = bytes(
            Ether() / IP(src="10.1.1.1", dst=f"10.1.0.{s}") / ICMP(type=8, id=s, seq=1) / b"x"
        )
        rx(leaf, "leaf1-eth0", req)
        [(port, [fwd])] = sent(lios).items()
        spine_name = peer_of(leaf, port)
        spine, sios = spines[spine_name]
        ingress = next(p.name for p in spine.config.ports if p.peer_node == "leaf1")
        clear(sios)
        rx(spine, ingress, fwd)
        replies = [Ether(f) for f in sios.get(ingress, FakeIO("")).sent]
        if not (replies and replies[0][ICMP].type == 0 and replies[0][IP].src == f"10.1.0.{s}"):
            failures.append((f"10.1.0.{s}", spine_name, dict(spine.drops)))
    assert failures == []


def test_no_icmp_error_about_an_icmp_error() -> None:
    sw, ios = make_switch("leaf1")
    inner = IP(src="10.1.1.1", dst="10.1.3.1") / UDP(sport=1, dport=2)
    err = bytes(Ether() / IP(src="10.1.1.1", dst="10.1.2.1", ttl=1) / ICMP(type=3, code=3) / inner)
    rx(sw, "leaf1-eth0", err)
    assert sw.drops == {"ttl_expired": 1}
    assert sent(ios) == {} and sw.icmp_sent == 0


# ----- failures ------------------------------------------------------------------------------


def flows_by_port(sw: Switch, ios: dict[str, FakeIO], n: int = 256, dst: str = "10.1.2.1") -> dict:
    """Send n flows (UDP source port = EV) and return {sport: egress port}."""
    where = {}
    for sport in range(40000, 40000 + n):
        clear(ios)
        rx(sw, "leaf1-eth0", udp_frame(sport=sport, dst=dst))
        out = sent(ios)
        where[sport] = next(iter(out)) if out else None
    clear(ios)
    return where


def test_leaf_uplink_down_is_repaired_locally() -> None:
    sw, ios = make_switch("leaf1")
    before = flows_by_port(sw, ios)
    ups = uplinks(sw)
    assert set(before.values()) == set(ups)
    dead = ups[1]
    sw.set_port_up(sw.port_by_name[dead], False)
    after = flows_by_port(sw, ios)
    assert None not in after.values()  # nothing lost: every flow still forwarded
    assert set(after.values()) == set(ups) - {dead}
    assert sw.drops == {}
    # Deterministic: the same flows go back to where they were when the link returns.
    sw.set_port_up(sw.port_by_name[dead], True)
    assert flows_by_port(sw, ios) == before


def test_leaf_all_uplinks_down_blackholes_remote_traffic() -> None:
    sw, ios = make_switch("leaf1")
    for name in uplinks(sw):
        sw.set_port_up(sw.port_by_name[name], False)
    rx(sw, "leaf1-eth0", udp_frame(dst="10.1.2.1"))
    rx(sw, "leaf1-eth0", udp_frame(dst="10.1.1.2"))  # same-leaf traffic still flows
    assert sw.drops == {"link_down": 1}
    assert list(sent(ios)) == ["leaf1-eth1"]


def test_spine_port_down_blackholes_destination_leaf() -> None:
    sw, ios = make_switch("spine1")
    to_leaf2 = next(p.name for p in sw.config.ports if p.peer_node == "leaf2")
    sw.set_port_up(sw.port_by_name[to_leaf2], False)
    for sport in range(50):
        rx(sw, "spine1-eth0", udp_frame(sport=sport, dst="10.1.2.1"))
    assert sent(ios) == {}
    assert sw.drops == {"link_down": 50}
    rx(sw, "spine1-eth0", udp_frame(dst="10.1.3.1"))  # other leaves unaffected
    assert list(sent(ios)) == ["spine1-eth2"]
    sw.set_port_up(sw.port_by_name[to_leaf2], True)
    clear(ios)
    rx(sw, "spine1-eth0", udp_frame(dst="10.1.2.1"))
    assert list(sent(ios)) == [to_leaf2]


def test_blackhole_keeps_link_up_and_ecmp_unpruned() -> None:
    sw, ios = make_switch("leaf1")
    before = flows_by_port(sw, ios)
    victim = uplinks(sw)[0]
    sw.port_by_name[victim].blackhole = True
    after = flows_by_port(sw, ios)
    hashed_there = [s for s, p in before.items() if p == victim]
    assert hashed_there
    assert all(after[s] is None for s in hashed_there)  # silently dropped, not rerouted
    assert all(after[s] == p for s, p in before.items() if p != victim)
    assert sw.port_by_name[victim].counters.drops == {"blackhole": len(hashed_there)}
    assert sw.drops == {}


def test_rx_direction_controls() -> None:
    sw, ios = make_switch("leaf1")
    port = sw.port_by_name["leaf1-eth0"]
    port.rx_blackhole = True
    rx(sw, "leaf1-eth0", udp_frame())
    port.rx_blackhole = False
    port.rx_up = False
    rx(sw, "leaf1-eth0", udp_frame())
    port.rx_up = True
    port.rx_loss = 1.0
    rx(sw, "leaf1-eth0", udp_frame())
    assert sent(ios) == {}
    assert port.counters.drops == {"rx_blackhole": 1, "link_down": 1, "rx_loss": 1}
    assert port.counters.rx_packets == 3
    # The egress direction of the same port is untouched.
    rx(sw, "leaf1-eth2", udp_frame(src="10.1.2.1", dst="10.1.1.1"))
    assert list(sent(ios)) == ["leaf1-eth0"]


def test_switch_down_drops_everything() -> None:
    sw, ios = make_switch("leaf1", link_mbps=10, delay_us=100)
    for s in range(5):
        rx(sw, "leaf1-eth0", udp_frame(sport=s), now=0.0)
    queued = sum(len(p.queue) + len(p.inflight) for p in sw.ports)
    assert queued == 5
    sw.set_switch_up(False)
    flushed = sum(p.counters.drops.get("switch_down", 0) for p in sw.ports)
    assert flushed == 5
    rx(sw, "leaf1-eth0", udp_frame(), now=0.1)
    rx(sw, "leaf1-eth0", udp_frame(ttl=1), now=0.1)
    rx(sw, "leaf1-eth0", bytes(Ether() / IP(src="10.1.1.1", dst="10.1.1.254") / ICMP()), now=0.1)
    rx(sw, "leaf1-eth0", b"garbage", now=0.1)
    drain(sw, 0.1)
    assert sent(ios) == {} and sw.drops == {"switch_down": 4} and sw.icmp_sent == 0
    sw.set_switch_up(True)
    rx(sw, "leaf1-eth0", udp_frame(), now=1.0)
    drain(sw, 1.0)
    assert sum(len(v) for v in sent(ios).values()) == 1


# ----- trimming through the switch -----------------------------------------------------------


def test_incast_trims_trimmable_and_drops_the_rest() -> None:
    sw, ios = make_switch("leaf2", link_mbps=100, delay_us=20, queue_kb=8, trim_bytes=128)
    host_port = next(p.name for p in sw.config.ports if p.peer_node == "h3")
    ups = uplinks(sw)
    n = 40
    for k in range(n):
        rx(
            sw,
            ups[k % len(ups)],
            udp_frame(src=f"10.1.{1 + k % 2 * 2}.1", dst="10.1.2.1", sport=k, payload=b"d" * 1000),
            now=0.0,
        )
    for k in range(10):  # non-trimmable data into the full queue
        rx(sw, ups[0], udp_frame(dst="10.1.2.1", tos=0, sport=1000 + k, payload=b"d" * 1000))
    drain(sw, 0.0)
    got = ios[host_port].sent
    snap = sw.counters()["ports"][host_port]
    trimmed = [f for f in got if len(f) == 128]
    full = [f for f in got if len(f) == len(udp_frame(payload=b"d" * 1000))]
    assert len(trimmed) + len(full) == len(got) == snap["tx_packets"]
    assert snap["trims"] == len(trimmed) > 0
    assert snap["drops"] == {"queue_full": 10}
    assert len(full) + len(trimmed) == n
    assert snap["tx_bytes"] == sum(map(len, got))
    for f in trimmed:
        pkt = Ether(f)
        assert frames.classify(f) is None and checksum(f[14:34]) == 0
        assert pkt[IP].tos >> 2 == 11 and pkt[IP].tos & 3 == 2
        assert pkt[IP].len == 114 and pkt[UDP].len == 94 and pkt[UDP].chksum == 0
        assert pkt[IP].ttl == 63 and pkt.dst == peer_mac_of(sw, host_port)


def test_trimming_off_drops_trimmable_too() -> None:
    sw, ios = make_switch("leaf2", link_mbps=100, delay_us=20, queue_kb=8, trimming=False)
    host_port = next(p.name for p in sw.config.ports if p.peer_node == "h3")
    for k in range(30):
        rx(sw, "leaf2-eth2", udp_frame(dst="10.1.2.1", sport=k, payload=b"d" * 1000))
    drain(sw)
    snap = sw.counters()["ports"][host_port]
    assert snap["trims"] == 0 and snap["drops"]["queue_full"] > 0
    assert snap["tx_packets"] + snap["drops"]["queue_full"] == 30


# ----- fuzzing and accounting ----------------------------------------------------------------


def accounted(sw: Switch) -> int:
    """Frames the switch received, reconstructed from its counters alone."""
    c = sw.counters()
    ports = c["ports"].values()
    port_drops = sum(sum(p["drops"].values()) for p in ports)
    tx = sum(p["tx_packets"] for p in ports)
    echo_handled = c["local_rx"] - c["drops"].get("local", 0)
    # Switch-originated ICMP packets also end up in tx or in an egress drop: subtract them.
    return sum(c["drops"].values()) + echo_handled + port_drops + tx - c["icmp_sent"]


@functools.cache
def templates() -> list[bytes]:
    m = "02:7b:00:00:00:02"
    ts = []
    for dst in ("10.1.1.2", "10.1.2.1", "10.1.3.2", "10.1.1.254", "10.1.0.1", "10.9.9.9"):
        for tos in (0, 10 << 2 | 2, 46 << 2, 11 << 2):
            ts.append(
                bytes(Ether(dst=m) / IP(src="10.1.1.1", dst=dst, tos=tos) / UDP() / (b"u" * 300))
            )
        ts.append(bytes(Ether(dst=m) / IP(src="10.1.1.1", dst=dst) / TCP() / (b"t" * 900)))
        ts.append(bytes(Ether(dst=m) / IP(src="10.1.2.1", dst=dst) / ICMP(type=8) / b"icmp"))
    ts.append(bytes(Ether() / ARP()))
    ts.append(bytes(Ether() / IPv6() / UDP()))
    ts.append(bytes(Ether() / IP(dst="10.1.2.1", options=[IPOption_RR()]) / UDP()))
    return ts


def mutate(rng: random.Random, t: bytes) -> bytes:
    f = bytearray(t)
    kind = rng.randrange(12)
    if kind == 0:
        return rng.randbytes(rng.randrange(0, 200))
    if kind == 1:
        return bytes(f[: rng.randrange(len(f))])
    if kind == 2:
        f[14] = 0x40 | rng.randrange(5)  # bad IHL
    elif kind == 3:
        f[14] = 0x40 | rng.randrange(6, 16)  # options
    elif kind == 4:
        f[12:14] = rng.choice([b"\x86\xdd", b"\x08\x06", b"\x81\x00", rng.randbytes(2)])
    elif kind == 5:
        f[22] = rng.choice([0, 1])  # TTL expired, checksum fixed below
    elif kind == 6:
        struct.pack_into(
            "!H", f, 16, rng.choice([0, 19, len(f) - 13, 0xFFFF, rng.randrange(20, 60)])
        )
    elif kind == 7:
        for _ in range(rng.randint(1, 4)):
            f[rng.randrange(len(f))] = rng.randrange(256)
    elif kind == 8:
        f[14] = rng.choice([0x65, 0x05, 0xF5])
    elif kind == 9:
        f += rng.randbytes(rng.randrange(1, 40))  # trailing padding
    elif kind == 10:
        f[23] = rng.randrange(256)  # any protocol number
    if rng.random() < 0.7 and len(f) >= 34 and f[12:14] == b"\x08\x00":
        frames.set_ip_checksum(f)
    return bytes(f)


@pytest.mark.parametrize("name", ["leaf1", "spine2"])
def test_fuzz_thousands_of_frames_never_raise_and_are_all_accounted(name: str) -> None:
    rng = random.Random(2024)
    sw, ios = make_switch(name, link_mbps=100, delay_us=20, queue_kb=16)
    # A few impairments so every drop path is exercised.
    sw.ports[-1].loss = 0.3
    sw.ports[-2].blackhole = True
    sw.ports[0].rx_loss = 0.1
    if name == "leaf1":
        sw.set_port_up(sw.port_by_name["leaf1-eth3"], False)
    n = 4000
    now = 0.0
    for k in range(n):
        t = rng.choice(templates())
        f = mutate(rng, t) if rng.random() < 0.8 else t
        port = sw.ports[rng.randrange(len(sw.ports))]
        now += rng.choice([0.0, 0.0, 1e-6, 5e-5])
        sw.receive(port, bytearray(f), now)
        if k % 200 == 0:
            sw.active.serve(now)
    drain(sw, now)
    c = sw.counters()
    assert sum(p["rx_packets"] for p in c["ports"].values()) == n
    assert accounted(sw) == n
    assert all(len(p.queue) == 0 and not p.inflight for p in sw.ports)
    # Several drop reasons really happened (the fuzz is not just testing the happy path).
    reasons = set(c["drops"]) | {r for p in c["ports"].values() for r in p["drops"]}
    assert {
        "truncated",
        "non_ipv4",
        "bad_ihl",
        "ip_options",
        "bad_length",
        "rx_bad_frame",  # a bad header checksum: damaged on the link, counted at the port
    } <= reasons
    assert {"ttl_expired", "no_route", "loss", "blackhole", "rx_loss"} <= reasons
    # Everything that left the switch is a valid IPv4 frame addressed to the port's peer.
    for pname, io in ios.items():
        peer = frames.mac_bytes(peer_mac_of(sw, pname))
        for f in io.sent:
            assert frames.classify(f) is None, Ether(f).summary()
            assert f[0:6] == peer and f[6:12] == frames.mac_bytes(mac_of(sw, pname))
            assert f[22] >= 1
    json.dumps(c)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 5), st.binary(max_size=100)), min_size=1, max_size=20))
def test_fuzz_random_bytes_hypothesis(batch) -> None:
    sw, ios = make_switch("leaf1")
    for port, data in batch:
        sw.receive(sw.ports[port], bytearray(data), 0.0)
    drain(sw)
    assert accounted(sw) == len(batch)


def test_accounting_with_echo_and_ttl_and_trims() -> None:
    sw, ios = make_switch("leaf1", link_mbps=10, delay_us=20, queue_kb=4)
    n = 0
    for k in range(30):
        rx(sw, "leaf1-eth0", udp_frame(sport=k, payload=b"d" * 1000))
        rx(sw, "leaf1-eth0", udp_frame(ttl=1))
        rx(sw, "leaf1-eth0", bytes(Ether() / IP(src="10.1.1.1", dst="10.1.1.254") / ICMP()))
        n += 3
    drain(sw)
    c = sw.counters()
    assert accounted(sw) == n
    assert c["icmp_sent"] == 60 and c["drops"]["ttl_expired"] == 30
    assert sum(p["trims"] for p in c["ports"].values()) > 0


# ----- counters and config -------------------------------------------------------------------


def test_counters_shape() -> None:
    sw, ios = make_switch("leaf1")
    ios["leaf1-eth0"].kernel_drops = 3
    ios["leaf1-eth1"].truncated = 2
    c = sw.counters()
    for key in (
        "switch",
        "up",
        "uptime_s",
        "drops",
        "local_rx",
        "icmp_sent",
        "ports",
        "kernel_drops",
        "timer_late_us_p99",
        "cpu_s",
        "cpu_user_s",
        "cpu_sys_s",
        "pid",
        "rss_peak_mb",
    ):
        assert key in c
    assert c["cpu_user_s"] + c["cpu_sys_s"] == pytest.approx(c["cpu_s"], abs=0.02)
    assert c["switch"] == "leaf1" and c["up"] is True
    assert set(c["ports"]) == {p.name for p in sw.config.ports}
    assert c["kernel_drops"] == 5
    assert c["ports"]["leaf1-eth0"]["kernel_drops"] == 3
    assert c["queue_max_interval_s"] == 0.01
    assert all(pc["queue_max"] == [] and pc["queue_max_lost"] == 0 for pc in c["ports"].values())
    json.loads(json.dumps(c))


def test_counters_read_drains_the_queue_maxima() -> None:
    """A read takes the closed intervals' maxima away; the next read has only the open one."""
    sw, _ = make_switch("leaf1", link_mbps=10)
    port = sw.ports[0]
    port.busy_until = 1.0  # the link is busy: frames queue
    for now in (0.0, 0.001, 0.02):
        port.offer(bytearray(1000), now)
    first = sw.counters()["ports"][port.name]["queue_max"]
    assert first == [[0.0, 2000], [0.02, 3000]]
    assert sw.counters()["ports"][port.name]["queue_max"] == [[0.02, 3000]]


def test_switch_config_round_trips_through_json() -> None:
    fab = fabric(spines=2, leaves=2, hosts_per_leaf=2, planes=2)
    for name in fab.switches():
        cfg = switch_config(fab, name)
        assert SwitchConfig.from_dict(json.loads(cfg.to_json())) == cfg
        assert {p.peer_node for p in cfg.ports} == {i.peer_node for i in fab.interfaces[name]}


def test_ecmp_spreads_through_the_switch() -> None:
    sw, ios = make_switch("leaf1")
    where = flows_by_port(sw, ios, n=256)
    hits = Counter(where.values())
    assert set(hits) == set(uplinks(sw)) and min(hits.values()) >= 32


@pytest.mark.parametrize(
    "ecmp_hash,forwarding",
    [("mixed", "ecmp"), ("crc", "ecmp"), ("mixed", "source-routed")],
)
def test_inline_path_slow_path_fib_and_predict_path_agree_on_every_flow(
    ecmp_hash: str, forwarding: str
) -> None:
    """The hash lives in four places -- the inline loop of receive_batch (its own CRC and call
    of the finaliser), the slow path and Fib.flow_hash, and testbed.fabric.paths.predict_path,
    which labs and results use to name a flow's spine -- and all four must pick the same
    uplink. (The ring path's _decide, a third copy, is held to receive_batch by
    tests/test_switch_fastpath.py, under both hashes.)"""
    from testbed.fabric.paths import predict_path

    topo = {"spines": 4, "leaves": 3, "hosts_per_leaf": 2, "link_mbps": 0, "delay_us": 0}
    fab = fabric(**topo, ecmp_hash=ecmp_hash, forwarding=forwarding)
    inline, ios = make_switch("leaf1", ecmp_hash=ecmp_hash, forwarding=forwarding)
    slow, slow_ios = make_switch("leaf1", ecmp_hash=ecmp_hash, forwarding=forwarding)
    slow.debug_log = object()  # any debug log sends every frame through _receive_slow
    slow.refresh()
    slow._debug = lambda *a: None
    port_of = {h: i.peer_name for h in ("h1", "h2") for i in fab.interfaces[h]}
    remote = [h for h in fab.hosts() if fab.interfaces[h][0].peer_node != "leaf1"]
    rng = random.Random(ecmp_hash + forwarding)
    for dst in remote:  # the first frame to a destination takes the slow path and caches it
        rx(inline, "leaf1-eth0", udp_frame(dst=fab.host_ip(dst)))
    clear(ios)

    def not_inline(*_a) -> None:
        raise AssertionError("a primed destination left the inline path")

    inline._receive_slow = not_inline
    spines = Counter()
    for _ in range(300):
        src, dst = rng.choice(["h1", "h2"]), rng.choice(remote)
        sport, dport = rng.randrange(65536), rng.choice([4791, rng.randrange(65536)])
        proto = rng.choice([17, 17, 6])
        pkt = IP(src=fab.host_ip(src), dst=fab.host_ip(dst), ttl=64)
        pkt /= UDP(sport=sport, dport=dport) if proto == 17 else TCP(sport=sport, dport=dport)
        frame = bytes(Ether(dst=mac_of(inline, port_of[src])) / pkt / b"x")
        spine = predict_path(fab, src, dst, sport, dport, proto=proto, seed=1)[2]
        for sw, io in ((inline, ios), (slow, slow_ios)):
            rx(sw, port_of[src], frame)
            (out,) = sent(io)
            assert peer_of(sw, out) == spine, f"{src}->{dst} {proto} {sport}->{dport}"
            route = sw.fib.lookup(frame[30:34])
            assert route.table[sw.fib.flow_hash(frame) & 0xFF][0] == sw.port_by_name[out].index
            clear(io)
        spines[spine] += 1
    assert len(spines) == 4


@pytest.mark.parametrize("planes", [1, 2, 4])
def test_a_source_routed_leaf_sends_each_generated_ev_up_the_uplink_it_names(planes: int) -> None:
    """Generated EVs (endpoint.config, ev_profile generated) on a source-routed fabric: EV i,
    on plane i % planes, goes up uplink (i // planes) % spines -- every path once per round,
    no hash; other UDP traffic (not RoCEv2's port) is still hashed."""
    from endpoint.config import TransportConfig

    topo = {"spines": 4, "leaves": 3, "hosts_per_leaf": 2, "link_mbps": 0, "delay_us": 0}
    topo |= {"planes": planes, "forwarding": "source-routed"}
    fab = fabric(**topo)
    cfg = TransportConfig(ev_profile="generated", planes=planes, num_evs=64)
    nics = dict(enumerate(sorted(fab.interfaces["h1"], key=lambda x: x.plane)))  # EV plane -> NIC
    switches = {p: make_switch(nics[p].peer_node, **topo) for p in range(planes)}

    def uplink(plane: int, sport: int, dport: int = 4791) -> str:
        sw, ios = switches[plane]
        frame = bytes(
            Ether(dst=mac_of(sw, nics[plane].peer_name))
            / IP(src=nics[plane].ip, dst=fab.host_ip("h5", nics[plane].plane), ttl=64)
            / UDP(sport=sport, dport=dport)
            / b"x"
        )
        rx(sw, nics[plane].peer_name, frame)
        (out,) = sent(ios)
        clear(ios)
        return peer_of(sw, out)

    taken: dict[int, list[str]] = {p: [] for p in range(planes)}
    for i, ev in enumerate(cfg.ev_values()):
        taken[i % planes].append(uplink(i % planes, ev))
    for spines in taken.values():
        assert len(set(spines[:4])) == 4  # all four spines of the plane
        assert spines == spines[:4] * (len(spines) // 4)  # the same order, round after round
    # Not RoCEv2: hashed, so the same sport-by-sport sweep no longer cycles.
    hashed = [uplink(0, sport, dport=5000) for sport in cfg.ev_values()[::planes][:16]]
    assert hashed != hashed[:4] * 4


def test_queue_maxima_interval_follows_the_fabric_time_scale() -> None:
    """10 ms on the reference fabric; on a 10 Gbps fabric with 1 µs links as short as the
    endpoints' bins, so that a run of a few virtual milliseconds draws its queue history."""
    from switch.port import QUEUE_MAX_INTERVAL_S
    from topologies.timing import time_scale

    slow = fabric(spines=2, leaves=2, hosts_per_leaf=1, link_mbps=100, delay_us=20)
    fast = fabric(spines=2, leaves=2, hosts_per_leaf=1, link_mbps=10_000, delay_us=1)
    assert switch_config(slow, "leaf1").queue_max_interval_s == QUEUE_MAX_INTERVAL_S
    cfg = switch_config(fast, "leaf1")
    scale = time_scale(fast.params)
    assert scale < 0.05 and cfg.queue_max_interval_s == pytest.approx(QUEUE_MAX_INTERVAL_S * scale)
    sw, _ = make_switch(spines=2, leaves=2, hosts_per_leaf=1, link_mbps=10_000, delay_us=1)
    assert {p.qmax.interval_s for p in sw.ports} == {cfg.queue_max_interval_s}
    assert SwitchConfig.from_dict(json.loads(cfg.to_json())) == cfg  # survives the JSON file

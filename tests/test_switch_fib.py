"""Fib: longest-prefix match, ECMP by 5-tuple hash, pruning of dead ports (local repair)."""

from __future__ import annotations

import functools
import ipaddress
import socket
import zlib
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.l2 import Ether

from switch import frames
from switch.config import switch_config
from switch.fib import Fib, mix32, select_next_hop
from topologies import leaf_spine

M = [bytes([2, 0, 0, 0, 0, i]) for i in range(8)]

ENTRIES = [
    ("0.0.0.0/0", [(0, M[0])]),
    ("10.0.0.0/8", [(1, M[1])]),
    ("10.1.0.0/16", [(2, M[2]), (3, M[3])]),
    ("10.1.2.0/24", [(4, M[4])]),
    ("10.1.2.3/32", [(5, M[5])]),
    ("10.1.2.254/32", []),
    ("192.168.0.0/23", [(6, M[6])]),
]


def addr(s: str) -> bytes:
    return socket.inet_aton(s)


def test_lpm_picks_most_specific() -> None:
    fib = Fib(ENTRIES)
    cases = {
        "10.1.2.3": "10.1.2.3/32",
        "10.1.2.4": "10.1.2.0/24",
        "10.1.2.254": "10.1.2.254/32",
        "10.1.3.1": "10.1.0.0/16",
        "10.2.0.1": "10.0.0.0/8",
        "11.0.0.1": "0.0.0.0/0",
        "192.168.1.200": "192.168.0.0/23",
        "192.168.2.1": "0.0.0.0/0",
    }
    for dst, prefix in cases.items():
        assert fib.lookup(addr(dst)).prefix == prefix, dst
        assert fib.lookup(addr(dst)).prefix == prefix, dst + " (cached)"
    assert fib.lookup(addr("10.1.2.254")).local
    assert not fib.lookup(addr("10.1.2.3")).local


def test_no_route_is_none() -> None:
    fib = Fib([(p, h) for p, h in ENTRIES if p != "0.0.0.0/0"])
    assert fib.lookup(addr("11.0.0.1")) is None
    assert fib.lookup(addr("11.0.0.1")) is None  # cached miss
    assert Fib([]).lookup(addr("10.0.0.1")) is None


prefixes = st.lists(
    st.tuples(st.integers(0, 0xFFFFFFFF), st.integers(0, 32)).map(
        lambda t: ipaddress.ip_network((t[0], t[1]), strict=False)
    ),
    min_size=1,
    max_size=30,
    unique=True,
)


@settings(max_examples=200, deadline=None)
@given(prefixes, st.lists(st.integers(0, 0xFFFFFFFF), min_size=1, max_size=20))
def test_lpm_matches_brute_force(nets, probes) -> None:
    entries = [(str(n), [(i, M[i % 8])]) for i, n in enumerate(nets)]
    fib = Fib(entries)
    # Probe random addresses and addresses inside each prefix.
    probes = (
        probes + [int(n.network_address) for n in nets] + [int(n.broadcast_address) for n in nets]
    )
    for a in probes:
        ip = ipaddress.ip_address(a)
        matching = [n for n in nets if ip in n]
        got = fib.lookup(a.to_bytes(4, "big"))
        if not matching:
            assert got is None
        else:
            assert got.prefix == str(max(matching, key=lambda n: n.prefixlen))


# ----- ECMP on a real leaf ---------------------------------------------------------------------


@functools.cache
def leaf_fib(spines: int = 4, name: str = "leaf1") -> tuple[list, list[str], int]:
    cfg = switch_config(leaf_spine(spines=spines, leaves=3, hosts_per_leaf=2), name)
    index = {p.name: i for i, p in enumerate(cfg.ports)}
    entries = [
        (e.prefix, [(index[p], frames.mac_bytes(m)) for p, m in e.next_hops]) for e in cfg.fib
    ]
    return entries, [p.name for p in cfg.ports], cfg.seed


def fresh_leaf_fib(spines: int = 4) -> tuple[Fib, list[str]]:
    entries, names, seed = leaf_fib(spines)
    return Fib(entries, seed=seed), names


def udp(sport: int, dport: int = 4791, src: str = "10.1.1.1", dst: str = "10.1.2.1", **ip) -> bytes:
    return bytes(Ether() / IP(src=src, dst=dst, **ip) / UDP(sport=sport, dport=dport) / b"x")


def member_for(fib: Fib, frame: bytes) -> int:
    route = fib.lookup(frame[30:34])
    return select_next_hop(route, fib.flow_hash(frame))[0]


def test_ecmp_source_port_spreads_over_every_uplink() -> None:
    fib, names = fresh_leaf_fib(4)
    route = fib.lookup(addr("10.1.2.1"))
    uplinks = {p for p, _ in route.members}
    assert len(uplinks) == 4
    hits = Counter(member_for(fib, udp(sport)) for sport in range(49152, 49152 + 256))
    assert set(hits) == uplinks
    assert min(hits.values()) >= 32, hits  # not just touched: roughly balanced
    tcp_hits = Counter(
        member_for(
            fib, bytes(Ether() / IP(src="10.1.1.1", dst="10.1.2.1") / TCP(sport=s, dport=80))
        )
        for s in range(1000, 1256)
    )
    assert set(tcp_hits) == uplinks


@settings(max_examples=100, deadline=None)
@given(
    st.integers(0, 0xFFFF),
    st.integers(0, 0xFFFF),
    st.integers(1, 255),
    st.integers(1, 255),
    st.integers(0, 255),
    st.integers(0, 0xFFFF),
    st.binary(max_size=64),
)
def test_same_five_tuple_same_member(sport, dport, ttl1, ttl2, tos, ident, payload) -> None:
    """Only the 5-tuple matters: TTL, ToS, id and payload do not move a flow."""
    fib, _ = fresh_leaf_fib(4)
    a = bytes(
        Ether() / IP(src="10.1.1.1", dst="10.1.3.2", ttl=ttl1) / UDP(sport=sport, dport=dport)
    )
    b = bytes(
        Ether(src="02:00:00:00:00:09")
        / IP(src="10.1.1.1", dst="10.1.3.2", ttl=ttl2, tos=tos, id=ident)
        / UDP(sport=sport, dport=dport)
        / payload
    )
    assert fib.flow_hash(a) == fib.flow_hash(b)
    assert member_for(fib, a) == member_for(fib, b)
    # And a second Fib with the same seed agrees (deterministic across processes).
    fib2, _ = fresh_leaf_fib(4)
    assert fib2.flow_hash(a) == fib.flow_hash(a)


def test_hash_covers_every_tuple_field() -> None:
    fib, _ = fresh_leaf_fib(4)
    base = fib.flow_hash(udp(1000))
    assert fib.flow_hash(udp(1001)) != base
    assert fib.flow_hash(udp(1000, dport=4792)) != base
    assert fib.flow_hash(udp(1000, src="10.1.1.2")) != base
    assert fib.flow_hash(udp(1000, dst="10.1.2.2")) != base
    tcp = bytes(Ether() / IP(src="10.1.1.1", dst="10.1.2.1") / TCP(sport=1000, dport=4791))
    assert fib.flow_hash(tcp) != base  # protocol is part of the tuple
    icmp = bytes(Ether() / IP(src="10.1.1.1", dst="10.1.2.1") / ICMP())
    assert isinstance(fib.flow_hash(icmp), int)


def test_per_switch_seed_differs() -> None:
    fab = leaf_spine(spines=4, leaves=3, hosts_per_leaf=2)
    seeds = {switch_config(fab, n).seed for n in fab.switches()}
    assert len(seeds) == len(fab.switches())
    f1, f2 = Fib([], seed=1), Fib([], seed=2)
    assert f1.flow_hash(udp(5)) != f2.flow_hash(udp(5))


def test_set_port_state_prunes_and_restores() -> None:
    fib, names = fresh_leaf_fib(4)
    route = fib.lookup(addr("10.1.2.1"))
    members = route.members
    down = members[1][0]
    ports_up = [True] * len(names)
    ports_up[down] = False
    fib.set_port_state(down, False, ports_up)
    assert route.members == members
    assert route.live == tuple(m for m in members if m[0] != down)
    # Every route through the dead port lost it (remote-leaf groups and the /32 to that
    # spine's own address, which is left with nothing); routes not using it are untouched.
    for r in fib.routes:
        assert r.live == tuple(m for m in r.members if m[0] != down)
    assert any(r.members and not r.live for r in fib.routes), "the dead spine's /32 has no path"
    # The cached route object sees the change (no cache flush needed).
    assert fib.lookup(addr("10.1.2.1")) is route
    hits = {member_for(fib, udp(s)) for s in range(256)}
    assert hits == {p for p, _ in members} - {down}
    ports_up[down] = True
    fib.set_port_state(down, True, ports_up)
    assert route.live == members


def test_resilient_hash_moves_only_the_flows_of_the_dead_member() -> None:
    fib, names = fresh_leaf_fib(4)
    route = fib.lookup(addr("10.1.2.1"))
    frames = {s: udp(s) for s in range(2000)}  # built once: scapy was most of the time
    before = {s: member_for(fib, f) for s, f in frames.items()}
    down = route.members[2][0]
    ports_up = [True] * len(names)
    ports_up[down] = False
    fib.set_port_state(down, False, ports_up)
    after = {s: member_for(fib, f) for s, f in frames.items()}
    moved = {s for s in before if before[s] != after[s]}
    assert moved == {s for s in before if before[s] == down}
    assert all(after[s] != down for s in after)
    ports_up[down] = True
    fib.set_port_state(down, True, ports_up)
    assert {s: member_for(fib, f) for s, f in frames.items()} == before


def test_all_members_down_leaves_no_live_member() -> None:
    fib, names = fresh_leaf_fib(2)
    route = fib.lookup(addr("10.1.2.1"))
    ports_up = [True] * len(names)
    for p, _ in route.members:
        ports_up[p] = False
        fib.set_port_state(p, False, ports_up)
    assert route.live == ()
    assert select_next_hop(route, 12345) is None
    # Host-facing routes are untouched.
    assert fib.lookup(addr("10.1.1.1")).live


def test_select_next_hop_is_modulo_of_live() -> None:
    fib = Fib([("10.0.0.0/8", [(i, M[i]) for i in range(3)])])
    route = fib.lookup(addr("10.0.0.1"))
    assert [select_next_hop(route, h)[0] for h in range(6)] == [0, 1, 2, 0, 1, 2]


# ----- the hash itself: CRC32, then (ecmp_hash: mixed) murmur3's finaliser -------------------


def fmix32(h: int) -> int:
    """murmur3's fmix32 as its reference code writes it (uint32 arithmetic)."""
    h ^= h >> 16
    h = (h * 0x85EBCA6B) % 2**32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) % 2**32
    h ^= h >> 16
    return h


def test_mix32_is_murmur3_fmix32() -> None:
    # Published fmix32 values (SMHasher's MurmurHash3_x86_32 finaliser).
    assert mix32(0) == 0
    assert mix32(1) == 0x514E28B7
    assert mix32(0xFFFFFFFF) == 0x81F16F39
    for h in range(0, 2**32, 2**32 // 997):
        assert mix32(h) == fmix32(h)


@pytest.mark.parametrize("proto", [17, 6, 1])
def test_flow_hash_is_the_crc_then_the_finaliser(proto: int) -> None:
    frame = bytes(
        Ether() / IP(src="10.1.1.1", dst="10.1.3.2", proto=proto) / (b"\x12\x34\x56\x78" * 4)
    )
    covered = frame[26:38] if proto in (6, 17) else frame[26:34]
    for seed in (0, 1, 0xDEADBEEF):
        crc = zlib.crc32(covered, seed ^ proto)
        assert Fib([], seed=seed, ecmp_hash="crc").flow_hash(frame) == crc
        assert Fib([], seed=seed, ecmp_hash="mixed").flow_hash(frame) == fmix32(crc)
        assert Fib([], seed=seed).flow_hash(frame) == fmix32(crc), "mixed is the default"


def test_an_unknown_hash_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="ecmp_hash: one of mixed, crc, got 'md5'"):
        Fib([], ecmp_hash="md5")


def test_the_crc_alone_spreads_structured_flows_perfectly_and_the_mixed_hash_does_not() -> None:
    """Why the finaliser: 16 flows whose addresses differ in structured bits, one source port
    each, land exactly 4 per uplink under the linear CRC, for every seed -- no real fabric does
    that. Mixed, the counts vary as random throws do."""
    srcs = [f"10.1.1.{i}" for i in range(1, 5)]
    dsts = [f"10.1.2.{i}" for i in range(1, 5)]
    frames_ = [udp(49152, src=s, dst=d) for s in srcs for d in dsts]
    for seed in range(1, 21):
        crc = Counter(Fib([], seed=seed, ecmp_hash="crc").flow_hash(f) & 3 for f in frames_)
        assert sorted(crc.values()) == [4, 4, 4, 4], seed
    uneven = 0
    for seed in range(1, 21):
        mixed = Counter(Fib([], seed=seed).flow_hash(f) & 3 for f in frames_)
        uneven += sorted(mixed.values()) != [4, 4, 4, 4]
    assert uneven >= 18


def test_two_switches_mixed_hashes_are_independent() -> None:
    """No polarisation: under the CRC two seeds only relabel the buckets (the same flows stay
    together); mixed, which flows share a bucket changes from switch to switch."""
    fl = [udp(s) for s in range(49152, 49152 + 64)]

    def together(fib: Fib) -> set[frozenset[int]]:
        groups: dict[int, set[int]] = {}
        for i, f in enumerate(fl):
            groups.setdefault(fib.flow_hash(f) & 3, set()).add(i)
        return {frozenset(g) for g in groups.values()}

    assert together(Fib([], seed=1, ecmp_hash="crc")) == together(Fib([], seed=2, ecmp_hash="crc"))
    assert together(Fib([], seed=1)) != together(Fib([], seed=2))


def test_the_topology_names_the_hash_and_every_switch_config_carries_it() -> None:
    from topologies import TopologyError

    for model in ("mixed", "crc"):
        fab = leaf_spine(spines=2, leaves=2, hosts_per_leaf=1, ecmp_hash=model)
        assert {switch_config(fab, n).ecmp_hash for n in fab.switches()} == {model}
    with pytest.raises(TopologyError, match=r"^ecmp_hash: must be one of mixed, crc, got 'md5'$"):
        leaf_spine(spines=2, leaves=2, hosts_per_leaf=1, ecmp_hash="md5")

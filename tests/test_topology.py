"""topologies.leaf_spine: names, addresses, interfaces, static FIBs and validation (all pure)."""

from __future__ import annotations

import functools
import ipaddress
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topologies import Fabric, TopologyError, TopologyParams, leaf_spine
from topologies.leaf_spine import MAX_IFNAME


@functools.cache
def fab(spines: int = 3, leaves: int = 3, hosts_per_leaf: int = 2, planes: int = 1) -> Fabric:
    return leaf_spine(spines=spines, leaves=leaves, hosts_per_leaf=hosts_per_leaf, planes=planes)


SHAPES = [(1, 1, 1, 1), (2, 2, 2, 1), (3, 3, 2, 1), (4, 3, 2, 1), (2, 3, 4, 2), (3, 2, 1, 4)]


def lpm(f: Fabric, switch: str, ip: str):
    addr = ipaddress.ip_address(ip)
    best = None
    for e in f.fibs[switch]:
        net = ipaddress.ip_network(e.prefix)
        if addr in net and (
            best is None or net.prefixlen > ipaddress.ip_network(best.prefix).prefixlen
        ):
            best = e
    return best


def intf(f: Fabric, node: str, name: str):
    return next(i for i in f.interfaces[node] if i.name == name)


# ----- names and addresses -------------------------------------------------------------------


@pytest.mark.parametrize(("S", "L", "H", "P"), SHAPES)
def test_node_names(S, L, H, P) -> None:
    f = fab(S, L, H, P)
    sfx = [""] if P == 1 else [f"p{k}" for k in range(1, P + 1)]
    assert f.hosts() == [f"h{i}" for i in range(1, L * H + 1)]
    assert set(f.switches()) == {f"leaf{i}{s}" for i in range(1, L + 1) for s in sfx} | {
        f"spine{i}{s}" for i in range(1, S + 1) for s in sfx
    }
    for name, node in f.nodes.items():
        assert node.name == name
        if node.kind == "host":
            assert node.plane is None
        else:
            assert node.plane in range(1, P + 1)
            assert name.endswith("" if P == 1 else f"p{node.plane}")
    for p in range(1, P + 1):
        assert len(f.plane_switches(p)) == S + L


def test_single_plane_has_no_suffix_and_multi_plane_always_does() -> None:
    assert "leaf1" in fab(2, 2, 2, 1).nodes and "leaf1p1" not in fab(2, 2, 2, 1).nodes
    f = fab(2, 3, 4, 2)
    assert {"leaf1p1", "leaf3p2", "spine2p1", "spine2p2"} <= set(f.nodes)
    assert "leaf1" not in f.nodes and "spine1" not in f.nodes


@pytest.mark.parametrize(("S", "L", "H", "P"), SHAPES)
def test_host_addresses_and_gateways(S, L, H, P) -> None:
    f = fab(S, L, H, P)
    for leaf in range(1, L + 1):
        for i in range(1, H + 1):
            host = f"h{(leaf - 1) * H + i}"
            nics = f.interfaces[host]
            assert [n.name for n in nics] == [f"{host}-eth{k}" for k in range(P)]
            for k, nic in enumerate(nics, start=1):
                assert nic.plane == k and nic.ip == f"10.{k}.{leaf}.{i}" and nic.prefixlen == 24
                assert f.host_ip(host, k) == nic.ip
                gw_name = f"leaf{leaf}" + ("" if P == 1 else f"p{k}")
                assert nic.peer_node == gw_name
                assert f.nodes[gw_name].router_ip == f"10.{k}.{leaf}.254"
    for k in range(1, P + 1):
        for s in range(1, S + 1):
            assert f.nodes[f"spine{s}" + ("" if P == 1 else f"p{k}")].router_ip == f"10.{k}.0.{s}"
    ips = [i.ip for v in f.interfaces.values() for i in v if i.ip]
    assert len(ips) == len(set(ips)) == L * H * P


@pytest.mark.parametrize(("S", "L", "H", "P"), SHAPES)
def test_interfaces_links_and_macs(S, L, H, P) -> None:
    f = fab(S, L, H, P)
    all_intfs = [i for v in f.interfaces.values() for i in v]
    assert all(len(i.name) <= MAX_IFNAME for i in all_intfs)
    macs = [i.mac for i in all_intfs]
    assert len(macs) == len(set(macs))
    for m in macs:
        first = int(m.split(":")[0], 16)
        assert first & 2 and not first & 1  # locally administered unicast
    assert len(f.links) == L * H * P + L * S * P
    for link in f.links:
        a, b = intf(f, link.a, link.a_intf), intf(f, link.b, link.b_intf)
        assert (a.peer_node, a.peer_name, b.peer_node, b.peer_name) == (
            link.b,
            link.b_intf,
            link.a,
            link.a_intf,
        )
        assert a.plane == b.plane == link.plane
        assert f.link_between(link.a, link.b) == link == f.link_between(link.b, link.a)
    for node, intfs in f.interfaces.items():
        assert [i.name for i in intfs] == [f"{node}-eth{k}" for k in range(len(intfs))]
        peers = [i.peer_node for i in intfs]
        assert len(peers) == len(set(peers))  # no parallel links
    json.dumps(f.to_dict())


def test_leaf_and_spine_port_layout() -> None:
    f = fab(3, 4, 2, 1)
    leaf = f.interfaces["leaf2"]
    assert [i.peer_node for i in leaf] == ["h3", "h4", "spine1", "spine2", "spine3"]
    assert [i.peer_node for i in f.interfaces["spine3"]] == ["leaf1", "leaf2", "leaf3", "leaf4"]


@pytest.mark.parametrize(
    "kw",
    [
        dict(spines=253, leaves=2, hosts_per_leaf=1),
        dict(spines=2, leaves=253, hosts_per_leaf=1),
        dict(spines=1, leaves=1, hosts_per_leaf=253),
        dict(spines=9, leaves=99, hosts_per_leaf=9, planes=9),
    ],
)
def test_large_valid_fabrics_fit_interface_names(kw) -> None:
    f = leaf_spine(**kw)
    assert max(len(i.name) for v in f.interfaces.values() for i in v) <= MAX_IFNAME


# ----- FIBs ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("S", "L", "H", "P"), SHAPES)
def test_every_next_hop_is_own_port_with_matching_peer_mac(S, L, H, P) -> None:
    f = fab(S, L, H, P)
    for sw in f.switches():
        mine = {i.name: i for i in f.interfaces[sw]}
        prefixes = [e.prefix for e in f.fibs[sw]]
        assert len(prefixes) == len(set(prefixes))
        for e in f.fibs[sw]:
            ipaddress.ip_network(e.prefix)  # well formed, host bits clear
            for hop in e.next_hops:
                assert hop.port in mine, (sw, e)
                i = mine[hop.port]
                assert hop.mac == intf(f, i.peer_node, i.peer_name).mac
            assert len({h.port for h in e.next_hops}) == len(e.next_hops)


@pytest.mark.parametrize(("S", "L", "H", "P"), SHAPES)
def test_leaf_routes(S, L, H, P) -> None:
    f = fab(S, L, H, P)
    for k in range(1, P + 1):
        sfx = "" if P == 1 else f"p{k}"
        spines = {f"spine{s}{sfx}" for s in range(1, S + 1)}
        for leaf in range(1, L + 1):
            name = f"leaf{leaf}{sfx}"
            peer = {i.name: i.peer_node for i in f.interfaces[name]}
            own = lpm(f, name, f"10.{k}.{leaf}.254")
            assert own.prefix == f"10.{k}.{leaf}.254/32" and own.next_hops == ()
            for i in range(1, H + 1):
                e = lpm(f, name, f"10.{k}.{leaf}.{i}")
                assert [peer[h.port] for h in e.next_hops] == [f"h{(leaf - 1) * H + i}"]
            for other in range(1, L + 1):
                if other == leaf:
                    continue
                for ip in (f"10.{k}.{other}.1", f"10.{k}.{other}.254"):
                    e = lpm(f, name, ip)
                    hops = [peer[h.port] for h in e.next_hops]
                    assert sorted(hops) == sorted(spines), (name, ip)  # ECMP over all spines
            # Nothing for other planes: planes are independent.
            if P > 1:
                assert lpm(f, name, f"10.{k % P + 1}.{leaf}.1") is None


@pytest.mark.parametrize(("S", "L", "H", "P"), SHAPES)
def test_spine_routes_one_next_hop_per_leaf(S, L, H, P) -> None:
    f = fab(S, L, H, P)
    for k in range(1, P + 1):
        sfx = "" if P == 1 else f"p{k}"
        for s in range(1, S + 1):
            name = f"spine{s}{sfx}"
            peer = {i.name: i.peer_node for i in f.interfaces[name]}
            own = lpm(f, name, f"10.{k}.0.{s}")
            assert own.prefix == f"10.{k}.0.{s}/32" and own.next_hops == ()
            for leaf in range(1, L + 1):
                for i in list(range(1, H + 1)) + [254]:
                    e = lpm(f, name, f"10.{k}.{leaf}.{i}")
                    assert [peer[h.port] for h in e.next_hops] == [f"leaf{leaf}{sfx}"]
            routed = [e for e in f.fibs[name] if e.next_hops]
            assert len(routed) == L


@pytest.mark.parametrize(("S", "L", "H", "P"), [(2, 2, 2, 1), (4, 3, 2, 1), (3, 2, 1, 2)])
def test_leaf_routes_spine_router_ip_to_that_spine(S, L, H, P) -> None:
    f = fab(S, L, H, P)
    for k in range(1, P + 1):
        sfx = "" if P == 1 else f"p{k}"
        for leaf in range(1, L + 1):
            name = f"leaf{leaf}{sfx}"
            peer = {i.name: i.peer_node for i in f.interfaces[name]}
            for s in range(1, S + 1):
                e = lpm(f, name, f"10.{k}.0.{s}")
                assert e is not None
                assert [peer[h.port] for h in e.next_hops] == [f"spine{s}{sfx}"]


@pytest.mark.parametrize(("S", "L", "H", "P"), SHAPES)
def test_every_host_pair_is_routable_hop_by_hop(S, L, H, P) -> None:
    """Walk the FIBs from each source leaf: every path ends at the destination host, <= 3 hops."""
    f = fab(S, L, H, P)
    for src in f.hosts():
        for dst in f.hosts():
            if src == dst:
                continue
            for k in range(1, P + 1):
                ip = f.host_ip(dst, k)
                start = intf(f, src, f"{src}-eth{k - 1}").peer_node
                frontier, hops = {start}, 0
                while frontier:
                    hops += 1
                    assert hops <= 3
                    nxt = set()
                    for sw in frontier:
                        e = lpm(f, sw, ip)
                        assert e is not None and e.next_hops, (sw, ip)
                        for h in e.next_hops:
                            i = intf(f, sw, h.port)
                            if i.peer_node == dst:
                                continue
                            assert f.nodes[i.peer_node].kind != "host", (sw, ip, i.peer_node)
                            nxt.add(i.peer_node)
                    frontier = nxt


@pytest.mark.parametrize(("S", "L", "H", "P"), SHAPES)
def test_host_routes_and_neighbours(S, L, H, P) -> None:
    f = fab(S, L, H, P)
    for leaf in range(1, L + 1):
        for i in range(1, H + 1):
            host = f"h{(leaf - 1) * H + i}"
            routes = f.host_routes[host]
            assert len(routes) == P
            for k, r in enumerate(routes, start=1):
                assert (r.prefix, r.via, r.dev) == (
                    f"10.{k}.0.0/16",
                    f"10.{k}.{leaf}.254",
                    f"{host}-eth{k - 1}",
                )
            neigh = {(n.ip, n.dev): n.mac for n in f.host_neighbours[host]}
            for k in range(1, P + 1):
                nic = intf(f, host, f"{host}-eth{k - 1}")
                leaf_mac = intf(f, nic.peer_node, nic.peer_name).mac
                expected = {f"10.{k}.{leaf}.{j}" for j in range(1, H + 1) if j != i} | {
                    f"10.{k}.{leaf}.254"
                }
                got = {ip for ip, dev in neigh if dev == nic.name}
                assert got == expected
                assert all(neigh[(ip, nic.name)] == leaf_mac for ip in got)


# ----- validation ----------------------------------------------------------------------------


BAD = [
    (dict(spines=0), "spines"),
    (dict(leaves=0), "leaves"),
    (dict(hosts_per_leaf=0), "hosts_per_leaf"),
    (dict(planes=0), "planes"),
    (dict(spines=-1), "spines"),
    (dict(spines=True), "spines"),
    (dict(leaves=False), "leaves"),
    (dict(planes=True), "planes"),
    (dict(trimming=1), "trimming"),
    (dict(spines=2.0), "spines"),
    (dict(spines="2"), "spines"),
    (dict(leaves=254), "leaves"),
    (dict(planes=17), "planes"),
    (dict(hosts_per_leaf=254), "hosts_per_leaf"),
    (dict(spines=254), "spines"),
    (dict(link_mbps=-1), "link_mbps"),
    (dict(link_mbps=True), "link_mbps"),
    (dict(link_mbps=math.nan), "link_mbps"),
    (dict(link_mbps=math.inf), "link_mbps"),
    (dict(link_mbps="100"), "link_mbps"),
    (dict(delay_us=-5), "delay_us"),
    (dict(queue_kb=-64), "queue_kb"),
    (dict(queue_kb=0), "queue_kb"),
    (dict(queue_kb=False), "queue_kb"),
    (dict(oversubscription=0), "oversubscription"),
    (dict(oversubscription=-2), "oversubscription"),
    (dict(trim_bytes=63), "trim_bytes"),
    (dict(trim_bytes=1501), "trim_bytes"),
    (dict(trim_bytes=128.0), "trim_bytes"),
    (dict(trimmable_dscp=64), "trimmable_dscp"),
    (dict(trimmed_dscp=-1), "trimmed_dscp"),
    (dict(control_dscp=99), "control_dscp"),
    (dict(trimmable_dscp=11, trimmed_dscp=11), "trimmed_dscp"),
    (dict(queue_kb=64, ecn_kb=65), "ecn_kb"),
    (dict(queue_kb=64, ecn_kb=0), "ecn_kb"),
    (dict(queue_kb=64, ecn_kb=-1), "ecn_kb"),
    (dict(spines=200, leaves=200, planes=16), "spines"),
    (dict(spines=200, leaves=200, planes=16), "15"),
    (dict(spines=2, leaves=10, hosts_per_leaf=253, planes=16), "leaf10p16-eth254"),
    (dict(spines=10, leaves=253, hosts_per_leaf=1, planes=16), "leaf253p16-eth10"),
    (dict(spines=9, leaves=101, hosts_per_leaf=1, planes=10), "spine9p10-eth100"),
    (dict(bogus=1), "bogus"),
]


@pytest.mark.parametrize(("kw", "field"), BAD, ids=[str(b[0]) for b in BAD])
def test_invalid_parameters_name_the_parameter(kw, field) -> None:
    with pytest.raises(TopologyError) as exc:
        leaf_spine(**kw)
    msg = str(exc.value)
    assert field in msg and "\n" not in msg


@pytest.mark.parametrize(
    "kw",
    [
        dict(spines=2, leaves=9, hosts_per_leaf=253, planes=16),  # leaf9p16-eth254
        dict(spines=9, leaves=100, hosts_per_leaf=1, planes=10),  # spine9p10-eth99, leaf100p10-eth9
    ],
)
def test_names_of_exactly_15_characters_are_accepted(kw) -> None:
    TopologyParams(**kw).validate()


def test_error_messages_are_one_line_and_name_the_first_bad_parameter() -> None:
    with pytest.raises(TopologyError, match="^spines: must be between 1 and 253, got 0$"):
        leaf_spine(spines=0)
    with pytest.raises(TopologyError, match="interface name 'leaf200p16-eth"):
        leaf_spine(spines=200, leaves=200, planes=16)


def test_params_object_and_kwargs_are_exclusive() -> None:
    with pytest.raises(TypeError):
        leaf_spine(TopologyParams(), spines=3)
    assert leaf_spine(TopologyParams(spines=3)).params.spines == 3


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 6),
    st.integers(1, 6),
    st.integers(1, 5),
    st.integers(1, 3),
)
def test_random_small_fabrics_are_consistent(S, L, H, P) -> None:
    f = leaf_spine(spines=S, leaves=L, hosts_per_leaf=H, planes=P)
    assert len(f.hosts()) == L * H and len(f.switches()) == (S + L) * P
    for sw in f.switches():
        mine = {i.name for i in f.interfaces[sw]}
        for e in f.fibs[sw]:
            assert {h.port for h in e.next_hops} <= mine


def test_ecn_default_and_uplink_rate() -> None:
    assert TopologyParams(queue_kb=64).ecn_threshold_kb == 32
    assert TopologyParams(queue_kb=64, ecn_kb=10).ecn_threshold_kb == 10
    p = TopologyParams(spines=2, hosts_per_leaf=4, link_mbps=100, oversubscription=2.0)
    # host-facing 4 x 100 = 400 Mb/s over uplinks 2 x u with 2:1 => u = 100
    assert p.uplink_mbps == pytest.approx(100.0)
    f = leaf_spine(p)
    up = f.link_between("leaf1", "spine1")
    assert up.mbps == pytest.approx(100.0) and f.link_between("h1", "leaf1").mbps == 100
    assert TopologyParams(link_mbps=0, oversubscription=3).uplink_mbps == 0


# ----- bugs ----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [True, "8"])
def test_ecn_kb_type_checked(value) -> None:
    with pytest.raises(TopologyError, match="ecn_kb"):
        leaf_spine(ecn_kb=value)


def test_uplink_rate_is_monotonic_in_oversubscription() -> None:
    rates = [
        TopologyParams(spines=2, hosts_per_leaf=4, oversubscription=o).uplink_mbps
        for o in (0.5, 0.999, 1.0, 1.001, 2.0)
    ]
    assert rates == sorted(rates, reverse=True)
    # "1 = non-blocking": uplink capacity covers the host-facing capacity.
    p = TopologyParams(spines=2, hosts_per_leaf=4, oversubscription=1.0)
    assert p.spines * p.uplink_mbps >= p.hosts_per_leaf * p.link_mbps

"""The leaf-spine fabric as a Mininet `Topo`, generated from the pure `topologies.leaf_spine()`.

One description, two uses:

- the testbed's builder (testbed/fabric/builder.py) builds it with switch nodes that are bare
  namespaces (`SwitchNamespace`): a `python -m switch` process forwards for them;
- plain Mininet runs it with no testbed process at all; the switches are then Linux routers
  (`LinuxRouter`, after Mininet's examples/linuxrouter.py) holding the same static FIBs as kernel
  routes, an ECMP group as a multipath route hashed on the 5-tuple like our switch:

      sudo env PYTHONPATH=$PWD .venv/bin/mn --custom testbed/fabric/topo.py \\
          --topo leafspine,2,2,2 --controller none --test pingall

  (arguments: spines, leaves, hosts per leaf, then optionally planes and any TopologyParams
  field as key=value, e.g. `leafspine,2,3,2,link_mbps=0`).

Every node is configured from the description through netlink (testbed/fabric/netlink.py):
hosts get their addresses, static routes, permanent neighbour entries and NIC rate; nobody runs
ARP or a routing daemon; every port has its offloads off and the fabric's MTU.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass

from mininet.node import Host, Node
from mininet.topo import Topo

from testbed.fabric.netlink import NamespaceError, NodeNetlink, node_netlink
from topologies import Fabric, leaf_spine

# ----- the topology ---------------------------------------------------------------------------


class LeafSpineTopo(Topo):
    """Nodes, links, interface names and MACs exactly as `topologies.leaf_spine()` says.

    Hosts are Mininet hosts (`host_cls`), switches are Mininet switches (`switch_cls`), so that
    `net.hosts` -- what `pingall` pings -- holds the hosts alone. Every node is given the
    description as its `fabric` parameter: it configures itself from it.
    """

    def build(
        self,
        spines: int = 2,
        leaves: int = 2,
        hosts_per_leaf: int = 2,
        planes: int = 1,
        fabric: Fabric | None = None,
        host_cls=None,
        switch_cls=None,
        time_dilation: float = 1.0,
        **params,
    ) -> None:
        if fabric is None:  # from `mn --topo leafspine,...`: the arguments of leaf_spine()
            fabric = leaf_spine(
                spines=spines, leaves=leaves, hosts_per_leaf=hosts_per_leaf, planes=planes, **params
            )
        self.fabric = fabric
        for name, node in fabric.nodes.items():
            if node.kind == "host":
                self.addHost(
                    name,
                    cls=host_cls or FabricHost,
                    fabric=fabric,
                    ip=None,
                    time_dilation=time_dilation,
                )
            else:
                self.addSwitch(name, cls=switch_cls or LinuxRouter, fabric=fabric, inNamespace=True)
        for link in fabric.links:
            self.addLink(
                link.a,
                link.b,
                port1=_port_number(link.a_intf),
                port2=_port_number(link.b_intf),
                intfName1=link.a_intf,
                intfName2=link.b_intf,
                addr1=_mac(fabric, link.a, link.a_intf),
                addr2=_mac(fabric, link.b, link.b_intf),
            )


def _port_number(ifname: str) -> int:
    return int(ifname.rsplit("-eth", 1)[1])


def _mac(fabric: Fabric, node: str, ifname: str) -> str:
    return next(i.mac for i in fabric.interfaces[node] if i.name == ifname)


topos = {"leafspine": LeafSpineTopo}  # what `mn --custom` reads


# ----- nodes ----------------------------------------------------------------------------------


class FabricHost(Host):
    """A host configured from the description, not by Mininet's ifconfig defaults."""

    def config(self, fabric: Fabric | None = None, time_dilation: float = 1.0, **params):
        # Addresses, MACs and routes come from the description; Mininet's would contradict it.
        params.update(ip=None, mac=None, defaultRoute=None)
        result = super().config(**params)
        configure_host(self.pid, fabric, self.name, time_dilation)
        for intf in fabric.interfaces[self.name]:
            # What Mininet reports (node.IP(), pingall's targets) is what was configured.
            mn_intf = self.intf(intf.name)
            mn_intf.ip, mn_intf.prefixLen = intf.ip, intf.prefixlen
        return result


class SwitchNamespace(Node):
    """A switch node of the testbed: a bare namespace whose ports a `python -m switch` process
    drives. It has no address and forwards nothing itself: the kernel must never answer or
    route for the switch."""

    def start(self, _controllers) -> None:
        with node_netlink(self.pid, self.name) as nl:
            _configure_ports(nl, self.params["fabric"], self.name)
            nl.sysctl("net.ipv4.ip_forward", 0)


class LinuxRouter(Node):
    """A switch node for plain Mininet: the kernel forwards on the description's static FIBs."""

    def start(self, _controllers) -> None:
        configure_router(self.pid, self.params["fabric"], self.name)


# ----- configuration from the description -----------------------------------------------------


def _configure_ports(nl: NodeNetlink, fabric: Fabric, name: str) -> None:
    nl.sysctl("net.ipv6.conf.all.disable_ipv6", 1)
    nl.sysctl("net.ipv6.conf.default.disable_ipv6", 1)
    nl.link_up("lo")
    for intf in fabric.interfaces[name]:
        nl.offloads_off(intf.name)
        nl.set_mtu(intf.name, fabric.params.mtu)  # each end of a veth: hosts' and switches'
        nl.link_up(intf.name)


def configure_host(pid: int, fabric: Fabric, name: str, time_dilation: float = 1.0) -> None:
    """Addresses, NIC rate, static routes and permanent neighbour entries of host `name`.

    The NIC rate is a kernel token bucket, which runs in real time: at time dilation N it is
    set to the link rate / N (contracts.clock)."""
    with node_netlink(pid, name) as nl:
        _configure_ports(nl, fabric, name)
        for intf in fabric.interfaces[name]:
            nl.add_address(intf.name, intf.ip, intf.prefixlen)
            if fabric.params.link_mbps > 0:
                nl.set_rate(intf.name, fabric.params.link_mbps / time_dilation, fabric.params.mtu)
        for r in fabric.host_routes[name]:
            nl.add_route(r.prefix, r.via, r.dev)
        for n in fabric.host_neighbours[name]:
            nl.set_neighbour(n.ip, n.mac, n.dev)
        wanted = {i.ip: i.name for i in fabric.interfaces[name]}
        missing = sorted(set(wanted) - nl.addresses())
        if missing:
            raise NamespaceError(
                errno.EADDRNOTAVAIL, f"{name}: address {missing[0]} missing on {wanted[missing[0]]}"
            )


def configure_router(pid: int, fabric: Fabric, name: str) -> None:
    """Switch `name` as a Linux router: its FIB as kernel routes, its neighbours as permanent
    entries, its address on lo (it answers ping and is the source of its ICMP errors)."""
    node = fabric.nodes[name]
    with node_netlink(pid, name) as nl:
        _configure_ports(nl, fabric, name)
        nl.add_address("lo", node.router_ip, 32)
        nl.sysctl("net.ipv4.ip_forward", 1)
        # ECMP on the 5-tuple, as the switch hashes (so the UDP source port picks the path).
        nl.sysctl("net.ipv4.fib_multipath_hash_policy", 1)
        nl.sysctl("net.ipv4.conf.all.rp_filter", 0)
        for ip, mac, dev in router_neighbours(fabric, name):
            nl.set_neighbour(ip, mac, dev)
        for route in router_routes(fabric, name):
            if len(route.hops) == 1:
                via, dev = route.hops[0]
                nl.add_route(route.prefix, via, dev, onlink=True)
            else:
                nl.add_multipath_route(route.prefix, list(route.hops))


@dataclass(frozen=True)
class KernelRoute:
    prefix: str
    hops: tuple[tuple[str | None, str], ...]  # (gateway or None for on-link, interface)


def _peer_address(fabric: Fabric, name: str, port: str) -> str:
    """The address that stands for the node at the other end of `port`: a host's NIC address,
    a switch's router address. Fabric links carry no IP; these are on-link gateways."""
    intf = next(i for i in fabric.interfaces[name] if i.name == port)
    peer = fabric.nodes[intf.peer_node]
    if peer.kind == "host":
        nic = next(i for i in fabric.interfaces[peer.name] if i.name == intf.peer_name)
        return nic.ip
    return peer.router_ip


def router_neighbours(fabric: Fabric, name: str) -> list[tuple[str, str, str]]:
    """(address, MAC, interface) of every neighbour of switch `name`: no ARP ever runs."""
    out = []
    for intf in fabric.interfaces[name]:
        peer_mac = next(
            i.mac for i in fabric.interfaces[intf.peer_node] if i.name == intf.peer_name
        )
        out.append((_peer_address(fabric, name, intf.name), peer_mac, intf.name))
    return out


def router_routes(fabric: Fabric, name: str) -> list[KernelRoute]:
    """Switch `name`'s FIB from topologies/ as kernel routes (local entries left out: the
    router's own address is on lo). A next hop whose address is the prefix itself (a host
    behind its leaf, a spine's address) is a device route."""
    routes = []
    for entry in fabric.fibs[name]:
        if not entry.next_hops:
            continue
        hops = []
        for hop in entry.next_hops:
            via = _peer_address(fabric, name, hop.port)
            hops.append((None if entry.prefix == f"{via}/32" else via, hop.port))
        routes.append(KernelRoute(entry.prefix, tuple(hops)))
    return routes

"""Pure leaf-spine (optionally multi-plane) fabric description.

Everything the testbed builds -- nodes, links, interface names, MAC and IP addresses, every
switch's static FIB with its ECMP groups, every host's routes and neighbour entries -- is computed
here without root and without importing Mininet, so it can be unit-tested and so that the builder,
the scenario validator and the switch all read one description. Routing is static by design: the
FIBs computed here are installed once and never change; failures are repaired locally by the
switches (ECMP pruning) or by the endpoints, never by recomputing routes.
"""

from __future__ import annotations

import ipaddress
from dataclasses import asdict, dataclass, field

from contracts import defaults
from contracts.dscp import CONTROL_DSCP, TRIMMABLE_DSCP, TRIMMED_DSCP, check_dscps
from contracts.framing import DEFAULT_MTU, check_mtu, max_frame_bytes

MAX_IFNAME = 15  # IFNAMSIZ - 1: the kernel refuses longer interface names
MAX_PLANES = 16
MAX_LEAVES = 253  # leaf index is one octet of 10.{plane}.{leaf}.{host}
MAX_HOSTS_PER_LEAF = 253  # .254 is the leaf gateway
MAX_SPINES = 253  # spine router address is 10.{plane}.0.{spine}


class TopologyError(ValueError):
    """A topology parameter is invalid; the message names the parameter."""


@dataclass(frozen=True)
class TopologyParams:
    """What a user chooses; everything else is derived."""

    spines: int = 2
    leaves: int = 2
    hosts_per_leaf: int = 2
    planes: int = 1
    link_mbps: float = defaults.LINK_MBPS  # 0: "no shaping", the switch forwards at its speed
    delay_us: float = defaults.DELAY_US  # one-way propagation delay per link
    queue_kb: float = defaults.QUEUE_KB  # data queue per egress port, in kB (1000 B)
    trim_bytes: int = defaults.TRIM_BYTES  # frame length after trimming
    trimming: bool = defaults.TRIMMING
    ecn_kb: float | None = None  # CE-mark above this backlog; None = half the queue
    # Host-facing / uplink capacity per leaf. None: every link runs at link_mbps (the default,
    # so a single flow can reach the link rate); a number X sets the uplink rate to
    # link_mbps * hosts_per_leaf / (spines * X), so 1.0 is exactly non-blocking.
    oversubscription: float | None = None
    # IP MTU of every interface, host and switch side (contracts.framing: 1280..9000). The
    # endpoints fill it (their data segment is mtu - 80 B) and the switches' rings hold it.
    mtu: int = DEFAULT_MTU
    # The switches and the endpoints both take these from here (contracts.dscp).
    trimmable_dscp: int = TRIMMABLE_DSCP
    trimmed_dscp: int = TRIMMED_DSCP
    control_dscp: int = CONTROL_DSCP
    # How flows become paths: "mixed" (real fabrics: mixed switch hash, a seeded source port per
    # connection) or "crc" (linear hash, fixed ports: structured spreads); contracts.defaults.
    ecmp_hash: str = defaults.ECMP_HASH
    # How MRC traffic picks among equal next hops: "ecmp" (the flow hash) or "source-routed"
    # (the EV's field for the hop: generated EVs are source routes); contracts.defaults.
    forwarding: str = defaults.FORWARDING

    def validate(self) -> None:
        """Raise TopologyError naming the first bad parameter."""
        problem = check_mtu(self.mtu)
        if problem:
            raise TopologyError(problem)
        ints = {
            "spines": (self.spines, 1, MAX_SPINES),
            "leaves": (self.leaves, 1, MAX_LEAVES),
            "hosts_per_leaf": (self.hosts_per_leaf, 1, MAX_HOSTS_PER_LEAF),
            "planes": (self.planes, 1, MAX_PLANES),
            # A trimmed frame is at most as long as an IP packet may be (1500 by default).
            "trim_bytes": (self.trim_bytes, 64, self.mtu),
            "trimmable_dscp": (self.trimmable_dscp, 0, 63),
            "trimmed_dscp": (self.trimmed_dscp, 0, 63),
            "control_dscp": (self.control_dscp, 0, 63),
        }
        for name, (value, lo, hi) in ints.items():
            if isinstance(value, bool) or not isinstance(value, int):
                raise TopologyError(f"{name}: must be an integer, got {value!r}")
            if not lo <= value <= hi:
                raise TopologyError(f"{name}: must be between {lo} and {hi}, got {value}")
        floats = {
            "link_mbps": (self.link_mbps, 0.0, 800_000.0),  # 800G NICs, under dilation
            "delay_us": (self.delay_us, 0.0, 10_000_000.0),
            "queue_kb": (self.queue_kb, 1.5, 1_000_000.0),
        }
        if self.oversubscription is not None:
            floats["oversubscription"] = (self.oversubscription, 0.01, 1000.0)
        for name, (value, lo, hi) in floats.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TopologyError(f"{name}: must be a number, got {value!r}")
            if not lo <= value <= hi:
                raise TopologyError(f"{name}: must be between {lo:g} and {hi:g}, got {value:g}")
        if self.queue_kb * 1000 < max_frame_bytes(self.mtu):
            # A data queue that cannot hold one full frame would trim or drop every data packet.
            raise TopologyError(
                f"queue_kb: must hold one frame of mtu {self.mtu} "
                f"({max_frame_bytes(self.mtu) / 1000:g} kB), got {self.queue_kb:g}"
            )
        if self.ecn_kb is not None and (
            isinstance(self.ecn_kb, bool) or not isinstance(self.ecn_kb, (int, float))
        ):
            raise TopologyError(f"ecn_kb: must be a number, got {self.ecn_kb!r}")
        if self.ecn_kb is not None and not 0 < self.ecn_kb <= self.queue_kb:
            raise TopologyError(
                f"ecn_kb: must be in (0, queue_kb={self.queue_kb:g}], got {self.ecn_kb}"
            )
        if self.ecmp_hash not in defaults.ECMP_HASHES:
            raise TopologyError(
                f"ecmp_hash: must be one of {', '.join(defaults.ECMP_HASHES)}, "
                f"got {self.ecmp_hash!r}"
            )
        if self.forwarding not in defaults.FORWARDINGS:
            raise TopologyError(
                f"forwarding: must be one of {', '.join(defaults.FORWARDINGS)}, "
                f"got {self.forwarding!r}"
            )
        if not isinstance(self.trimming, bool):
            raise TopologyError(f"trimming: must be true or false, got {self.trimming!r}")
        problem = check_dscps(self.trimmable_dscp, self.trimmed_dscp, self.control_dscp)
        if problem:
            raise TopologyError(problem)
        P = self.planes
        widest = (
            f"{leaf_name(self.leaves, P, P)}-eth{self.hosts_per_leaf + self.spines - 1}",
            f"{spine_name(self.spines, P, P)}-eth{self.leaves - 1}",
            f"{host_name(self.leaves, self.hosts_per_leaf, self.hosts_per_leaf)}-eth{P - 1}",
        )
        for ifname in widest:
            if len(ifname) > MAX_IFNAME:
                raise TopologyError(
                    f"spines/leaves/hosts_per_leaf/planes: interface name {ifname!r} exceeds "
                    f"{MAX_IFNAME} characters"
                )

    @property
    def uplink_mbps(self) -> float:
        """Leaf-spine link rate: equal to link_mbps unless oversubscription is set."""
        if self.link_mbps == 0 or self.oversubscription is None:
            return self.link_mbps
        return self.link_mbps * self.hosts_per_leaf / (self.spines * self.oversubscription)

    @property
    def ecn_threshold_kb(self) -> float:
        return defaults.ecn_threshold_kb(self.queue_kb, self.ecn_kb)


@dataclass(frozen=True)
class Node:
    name: str
    kind: str  # "host" | "leaf" | "spine"
    index: int  # h{index}, leaf{index}, spine{index}
    plane: int | None  # None for hosts (they sit in every plane)
    router_ip: str | None = None  # switches: source of ICMP errors, answers ping


@dataclass(frozen=True)
class Interface:
    node: str
    name: str
    mac: str
    peer_node: str
    peer_name: str
    plane: int
    ip: str | None = None  # hosts only, e.g. "10.1.2.1"
    prefixlen: int = 24


@dataclass(frozen=True)
class Link:
    a: str
    a_intf: str
    b: str
    b_intf: str
    plane: int
    mbps: float
    delay_us: float

    @property
    def ends(self) -> tuple[str, str]:
        return (self.a, self.b)


@dataclass(frozen=True)
class NextHop:
    port: str  # egress interface of this switch
    mac: str  # MAC of the interface at the other end of that port


@dataclass(frozen=True)
class FibEntry:
    prefix: str  # "10.1.2.0/24"
    next_hops: tuple[NextHop, ...]  # more than one = ECMP group; empty = local address


@dataclass(frozen=True)
class HostRoute:
    prefix: str
    via: str
    dev: str


@dataclass(frozen=True)
class Neighbour:
    ip: str
    mac: str
    dev: str


@dataclass
class Fabric:
    """The whole static description; `to_dict()` is what the switch processes and tools read."""

    params: TopologyParams
    nodes: dict[str, Node] = field(default_factory=dict)
    links: list[Link] = field(default_factory=list)
    interfaces: dict[str, list[Interface]] = field(default_factory=dict)
    fibs: dict[str, list[FibEntry]] = field(default_factory=dict)
    host_routes: dict[str, list[HostRoute]] = field(default_factory=dict)
    host_neighbours: dict[str, list[Neighbour]] = field(default_factory=dict)

    def hosts(self) -> list[str]:
        return [n for n, node in self.nodes.items() if node.kind == "host"]

    def switches(self) -> list[str]:
        return [n for n, node in self.nodes.items() if node.kind != "host"]

    def link_between(self, a: str, b: str) -> Link:
        """The link joining two nodes; TopologyError if they are not adjacent."""
        for node in (a, b):
            if node not in self.nodes:
                raise TopologyError(f"link: no node named {node!r}")
        for link in self.links:
            if {link.a, link.b} == {a, b}:
                return link
        raise TopologyError(f"link: {a} and {b} are not adjacent")

    def interface(self, node: str, peer: str) -> Interface:
        """The interface of `node` that faces `peer`."""
        for intf in self.interfaces[node]:
            if intf.peer_node == peer:
                return intf
        raise TopologyError(f"link: {node} and {peer} are not adjacent")

    def host_ip(self, host: str, plane: int = 1) -> str:
        for intf in self.interfaces[host]:
            if intf.plane == plane:
                assert intf.ip is not None
                return intf.ip
        raise TopologyError(f"host {host!r} has no NIC on plane {plane}")

    def plane_switches(self, plane: int) -> list[str]:
        return [n for n, node in self.nodes.items() if node.plane == plane]

    def to_dict(self) -> dict:
        return {
            "params": asdict(self.params),
            "nodes": {n: asdict(v) for n, v in self.nodes.items()},
            "links": [asdict(x) for x in self.links],
            "interfaces": {n: [asdict(i) for i in v] for n, v in self.interfaces.items()},
            "fibs": {n: [asdict(e) for e in v] for n, v in self.fibs.items()},
            "host_routes": {n: [asdict(r) for r in v] for n, v in self.host_routes.items()},
            "host_neighbours": {n: [asdict(r) for r in v] for n, v in self.host_neighbours.items()},
        }


def suffix(plane: int, planes: int) -> str:
    """Plane suffix of switch names: none with one plane, `p{k}` otherwise."""
    return "" if planes == 1 else f"p{plane}"


def spine_name(index: int, plane: int, planes: int = 1) -> str:
    return f"spine{index}{suffix(plane, planes)}"


def leaf_name(index: int, plane: int, planes: int = 1) -> str:
    return f"leaf{index}{suffix(plane, planes)}"


def host_name(leaf: int, i: int, hosts_per_leaf: int) -> str:
    return f"h{(leaf - 1) * hosts_per_leaf + i}"


def _mac(n: int) -> str:
    # Locally administered unicast, unique within a fabric (fabrics never share an L2 segment).
    return f"02:7b:{(n >> 24) & 255:02x}:{(n >> 16) & 255:02x}:{(n >> 8) & 255:02x}:{n & 255:02x}"


def leaf_spine(params: TopologyParams | None = None, **kwargs) -> Fabric:
    """Compute the fabric for `params` (or keyword arguments of TopologyParams)."""
    if params is None:
        try:
            params = TopologyParams(**kwargs)
        except TypeError as exc:
            raise TopologyError(str(exc)) from None
    elif kwargs:
        raise TypeError("pass either params or keyword arguments")
    params.validate()
    fab = Fabric(params=params)
    S, L, H, P = params.spines, params.leaves, params.hosts_per_leaf, params.planes
    mac_counter = iter(range(1, 1 << 30))

    for leaf in range(1, L + 1):
        for i in range(1, H + 1):
            name = host_name(leaf, i, H)
            fab.nodes[name] = Node(name, "host", (leaf - 1) * H + i, None)
    for plane in range(1, P + 1):
        for leaf in range(1, L + 1):
            name = leaf_name(leaf, plane, P)
            fab.nodes[name] = Node(name, "leaf", leaf, plane, router_ip=f"10.{plane}.{leaf}.254")
        for spine in range(1, S + 1):
            name = spine_name(spine, plane, P)
            fab.nodes[name] = Node(name, "spine", spine, plane, router_ip=f"10.{plane}.0.{spine}")
    for name in fab.nodes:
        fab.interfaces[name] = []

    def connect(a: str, b: str, plane: int, mbps: float, a_ip: str | None = None) -> None:
        a_intf = f"{a}-eth{len(fab.interfaces[a])}"
        b_intf = f"{b}-eth{len(fab.interfaces[b])}"
        a_mac, b_mac = _mac(next(mac_counter)), _mac(next(mac_counter))
        fab.interfaces[a].append(Interface(a, a_intf, a_mac, b, b_intf, plane, ip=a_ip))
        fab.interfaces[b].append(Interface(b, b_intf, b_mac, a, a_intf, plane))
        fab.links.append(Link(a, a_intf, b, b_intf, plane, mbps, params.delay_us))

    # Host NICs first so that a host's eth{k-1} is its plane-k NIC.
    for plane in range(1, P + 1):
        for leaf in range(1, L + 1):
            for i in range(1, H + 1):
                host = host_name(leaf, i, H)
                connect(
                    host,
                    leaf_name(leaf, plane, P),
                    plane,
                    params.link_mbps,
                    f"10.{plane}.{leaf}.{i}",
                )
    for plane in range(1, P + 1):
        for leaf in range(1, L + 1):
            for spine in range(1, S + 1):
                connect(
                    leaf_name(leaf, plane, P),
                    spine_name(spine, plane, P),
                    plane,
                    params.uplink_mbps,
                )

    _compute_fibs(fab)
    _compute_host_config(fab)
    return fab


def _compute_fibs(fab: Fabric) -> None:
    p = fab.params
    for name, node in fab.nodes.items():
        if node.kind == "host":
            continue
        plane = node.plane
        entries: list[FibEntry] = [FibEntry(f"{node.router_ip}/32", ())]
        intfs = fab.interfaces[name]
        if node.kind == "leaf":
            uplinks = tuple(
                NextHop(i.name, _peer_mac(fab, i))
                for i in intfs
                if fab.nodes[i.peer_node].kind == "spine"
            )
            for i in intfs:
                if fab.nodes[i.peer_node].kind == "host":
                    host_ip = fab.host_ip(i.peer_node, plane)
                    entries.append(FibEntry(f"{host_ip}/32", (NextHop(i.name, _peer_mac(fab, i)),)))
            for other in range(1, p.leaves + 1):
                if other != node.index:
                    entries.append(FibEntry(f"10.{plane}.{other}.0/24", uplinks))
            # Each spine's own address goes to that spine: only it can answer a ping to it.
            for i in intfs:
                peer = fab.nodes[i.peer_node]
                if peer.kind == "spine":
                    entries.append(
                        FibEntry(f"{peer.router_ip}/32", (NextHop(i.name, _peer_mac(fab, i)),))
                    )
        else:
            for i in intfs:
                leaf = fab.nodes[i.peer_node]
                entries.append(
                    FibEntry(f"10.{plane}.{leaf.index}.0/24", (NextHop(i.name, _peer_mac(fab, i)),))
                )
        fab.fibs[name] = entries


def _peer_mac(fab: Fabric, intf: Interface) -> str:
    for other in fab.interfaces[intf.peer_node]:
        if other.name == intf.peer_name:
            return other.mac
    raise AssertionError(f"dangling interface {intf}")


def _compute_host_config(fab: Fabric) -> None:
    """Static routes and neighbour entries: no ARP and no routing daemon ever run."""
    p = fab.params
    for host in fab.hosts():
        routes, neighbours = [], []
        for intf in fab.interfaces[host]:
            leaf = fab.nodes[intf.peer_node]
            gw = leaf.router_ip
            leaf_mac = _peer_mac(fab, intf)
            routes.append(HostRoute(f"10.{intf.plane}.0.0/16", gw, intf.name))
            # Same-leaf peers are on-link in the /24 but are reached through the leaf, which
            # routes them: point their neighbour entries at the leaf's MAC.
            net = ipaddress.ip_network(f"{intf.ip}/{intf.prefixlen}", strict=False)
            for i in range(1, p.hosts_per_leaf + 1):
                ip = str(net.network_address + i)
                if ip != intf.ip:
                    neighbours.append(Neighbour(ip, leaf_mac, intf.name))
            neighbours.append(Neighbour(gw, leaf_mac, intf.name))
        fab.host_routes[host] = routes
        fab.host_neighbours[host] = neighbours

"""Predict the path of a flow through the static fabric, from the same hash the switches use.

Because routing is static and ECMP hashing deterministic, the path of a 5-tuple is known before
a packet is sent; tests use this to pick flows that cross a given link, Lab 1 to check a
traceroute against the prediction, and testbed.analysis.ecmp to count collisions over seeds.
"""

from __future__ import annotations

import socket
import struct

from switch.config import SwitchConfig, switch_config
from switch.fib import Fib, select_next_hop
from switch.frames import mac_bytes
from topologies import Fabric


def hash_frame(src: str, dst: str, sport: int, dport: int, proto: int) -> bytes:
    """Just enough of a frame for the switches' flow hash (it reads fixed offsets)."""
    ipv4 = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        28,
        0,
        0,
        64,
        proto,
        0,
        socket.inet_aton(src),
        socket.inet_aton(dst),
    )
    return bytes(14) + ipv4 + struct.pack("!HHHH", sport, dport, 8, 0)


class FabricPaths:
    """The switches' FIBs and hash for one fabric and seed, built once per switch, to walk many
    flows: predicting thousands of paths (a port search, collisions over many seeds) spent most
    of its time rebuilding the same switch's config and 256-bucket tables for every flow."""

    def __init__(self, fab: Fabric, seed: int = 1, down_ports: frozenset[str] = frozenset()):
        self.fab = fab
        self.seed = seed
        self.down_ports = down_ports
        self._switches: dict[str, tuple[SwitchConfig, Fib, dict[str, str]]] = {}

    def _switch(self, node: str) -> tuple[SwitchConfig, Fib, dict[str, str]]:
        """(config, FIB with down ports pruned, port name -> neighbour) of switch `node`."""
        if node not in self._switches:
            cfg = switch_config(self.fab, node, seed=self.seed)
            index = {p.name: i for i, p in enumerate(cfg.ports)}
            fib = Fib(
                [(e.prefix, [(index[p], mac_bytes(m)) for p, m in e.next_hops]) for e in cfg.fib],
                seed=cfg.seed,
                ecmp_hash=cfg.ecmp_hash,
                forwarding=cfg.forwarding,
                plane_bits=cfg.plane_bits,
            )
            up = [p.name not in self.down_ports for p in cfg.ports]
            for i, ok in enumerate(up):
                if not ok:
                    fib.set_port_state(i, False, up)
            peers = {i.name: i.peer_node for i in self.fab.interfaces[node]}
            self._switches[node] = (cfg, fib, peers)
        return self._switches[node]

    def path(
        self,
        src_host: str,
        dst_host: str,
        sport: int,
        dport: int,
        plane: int = 1,
        proto: int = 17,
    ) -> list[str]:
        """Nodes visited from `src_host` to `dst_host`, both ends included (see predict_path)."""
        fab = self.fab
        dst = fab.host_ip(dst_host, plane)
        frame = hash_frame(fab.host_ip(src_host, plane), dst, sport, dport, proto)
        dst_bytes = socket.inet_aton(dst)
        node = fab.interfaces[src_host][plane - 1].peer_node
        path = [src_host]
        for _ in range(8):
            path.append(node)
            if fab.nodes[node].kind == "host":
                return path
            cfg, fib, peers = self._switch(node)
            route = fib.lookup(dst_bytes)
            if route is None or not route.live:
                path.append("(dropped)")
                return path
            out, _mac = select_next_hop(route, fib.flow_hash(frame))
            node = peers[cfg.ports[out].name]
        raise RuntimeError(f"no path from {src_host} to {dst_host} within 8 hops")


def predict_path(
    fab: Fabric,
    src_host: str,
    dst_host: str,
    sport: int,
    dport: int,
    plane: int = 1,
    proto: int = 17,
    seed: int = 1,
    down_ports: frozenset[str] = frozenset(),
) -> list[str]:
    """Nodes visited from `src_host` to `dst_host` (both ends included), ignoring failures
    except ports listed in `down_ports` (pruned from ECMP groups, as link-down does). The hash
    is the fabric's own (`fab.params.ecmp_hash`), with the per-switch seeds of `seed`."""
    return FabricPaths(fab, seed, down_ports).path(src_host, dst_host, sport, dport, plane, proto)


def source_ports_via(
    fab: Fabric,
    src_host: str,
    dst_host: str,
    via: str,
    dport: int,
    want: int = 1,
    start: int = 10000,
    plane: int = 1,
    proto: int = 17,
    seed: int = 1,
    down_ports: frozenset[str] = frozenset(),
) -> list[int]:
    """Source ports whose flow from src to dst crosses node `via`."""
    paths = FabricPaths(fab, seed, down_ports)
    found = []
    for sport in range(start, start + 20000):
        if via in paths.path(src_host, dst_host, sport, dport, plane, proto):
            found.append(sport)
            if len(found) == want:
                return found
    raise RuntimeError(f"no source port from {start} sends {src_host}->{dst_host} via {via}")

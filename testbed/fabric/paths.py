"""Predict the path of a flow through the static fabric, from the same hash the switches use.

Because routing is static and ECMP hashing deterministic, the path of a 5-tuple is known before
a packet is sent; tests use this to pick flows that cross a given link, and Lab 1 to check a
traceroute against the prediction.
"""

from __future__ import annotations

import socket
import struct

from switch.config import switch_config
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
    except ports listed in `down_ports` (pruned from ECMP groups, as link-down does)."""
    src, dst = fab.host_ip(src_host, plane), fab.host_ip(dst_host, plane)
    frame = hash_frame(src, dst, sport, dport, proto)
    node = fab.interfaces[src_host][plane - 1].peer_node
    path = [src_host]
    for _ in range(8):
        path.append(node)
        if fab.nodes[node].kind == "host":
            return path
        cfg = switch_config(fab, node, seed=seed)
        index = {p.name: i for i, p in enumerate(cfg.ports)}
        fib = Fib(
            [(e.prefix, [(index[p], mac_bytes(m)) for p, m in e.next_hops]) for e in cfg.fib],
            seed=cfg.seed,
        )
        up = [p.name not in down_ports for p in cfg.ports]
        for i, ok in enumerate(up):
            if not ok:
                fib.set_port_state(i, False, up)
        route = fib.lookup(socket.inet_aton(dst))
        if route is None or not route.live:
            path.append("(dropped)")
            return path
        out, _mac = select_next_hop(route, fib.flow_hash(frame))
        node = next(i.peer_node for i in fab.interfaces[node] if i.name == cfg.ports[out].name)
    raise RuntimeError(f"no path from {src_host} to {dst_host} within 8 hops")


def source_ports_via(
    fab: Fabric,
    src_host: str,
    dst_host: str,
    via: str,
    dport: int,
    want: int = 1,
    start: int = 10000,
    **kw,
) -> list[int]:
    """Source ports whose flow from src to dst crosses node `via`."""
    found = []
    for sport in range(start, start + 20000):
        if via in predict_path(fab, src_host, dst_host, sport, dport, **kw):
            found.append(sport)
            if len(found) == want:
                return found
    raise RuntimeError(f"no source port from {start} sends {src_host}->{dst_host} via {via}")

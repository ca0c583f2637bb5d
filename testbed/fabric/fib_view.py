"""`testbed fib NODE` and `testbed path SRC DST`: what a running fabric's switches will do.

Read-only. Both read the config each switch process was started with (`RUN/<fabric>/switches/
<switch>.json`: its ports, its static FIB, its ECMP hash seed) and ask the switches which ports
are up, so an ECMP group shows the members a link-down pruned. `path` walks a 5-tuple hop by hop
with the switches' own lookup and hash (`switch.fib`), which is what `traceroute` with a fixed
source port then shows. The tables are built by pure functions, tested without root.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

from switch.config import SwitchConfig
from switch.fib import BUCKET_MASK, Fib, select_next_hop
from testbed.fabric import client
from testbed.fabric.paths import hash_frame
from testbed.fabric.state import run_dir

PROTOCOLS = {"udp": 17, "tcp": 6, "icmp": 1}


@dataclass(frozen=True)
class Member:
    port: str
    peer: str
    live: bool


@dataclass(frozen=True)
class FibRow:
    prefix: str
    members: tuple[Member, ...]  # empty: the switch's own address

    @property
    def kind(self) -> str:
        if not self.members:
            return "local"
        return "ecmp" if len(self.members) > 1 else "single"


@dataclass(frozen=True)
class Hop:
    node: str
    prefix: str | None  # the FIB entry that matched; None for the end hosts
    members: int = 0  # configured next hops of that entry
    live: int = 0  # of which up
    bucket: int | None = None  # resilient-hash bucket of the flow, for an ECMP group
    port: str | None = None  # egress port chosen
    note: str = ""


def fib_rows(cfg: SwitchConfig, ports_up: dict[str, bool] | None = None) -> list[FibRow]:
    """The FIB of one switch, sorted by prefix; members whose port is down are marked."""
    peer = {p.name: p.peer_node for p in cfg.ports}
    up = ports_up or {}
    rows = [
        FibRow(e.prefix, tuple(Member(p, peer[p], up.get(p, True)) for p, _ in e.next_hops))
        for e in cfg.fib
    ]
    return sorted(rows, key=lambda r: ipaddress.ip_network(r.prefix))


def format_fib(cfg: SwitchConfig, rows: list[FibRow], live_known: bool = True) -> str:
    lines = [
        f"{cfg.name} ({cfg.router_ip}): {len(rows)} routes, ECMP hash seed {cfg.seed}"
        + ("" if live_known else " (port states unknown: switch not answering)"),
        f"  {'prefix':18} {'kind':6}  next hops (port -> neighbour)",
    ]
    for r in rows:
        if not r.members:
            hops = "this switch (answers ping, sends ICMP errors)"
        else:
            hops = ", ".join(
                f"{m.port} -> {m.peer}{'' if m.live else ' (DOWN, pruned)'}" for m in r.members
            )
        lines.append(f"  {r.prefix:18} {r.kind:6}  {hops}")
    ecmp = [r for r in rows if r.kind == "ecmp"]
    if ecmp:
        mixed = ", mixed (fmix32)," if cfg.ecmp_hash == "mixed" else ""
        lines.append(
            f"  ECMP: {len(ecmp)} groups; a flow's CRC32 of (proto, src, dst, sport, dport)"
            f"{mixed} picks one live member"
        )
        if cfg.forwarding == "source-routed":
            lines.append(
                f"  source-routed: an MRC packet (UDP dport 4791) takes member "
                f"(sport >> {cfg.plane_bits}) % members instead: its EV names the path"
            )
    return "\n".join(lines)


def fib_json(cfg: SwitchConfig, rows: list[FibRow], live_known: bool = True) -> dict:
    """`testbed fib NODE --json`: the table `format_fib` prints, as data."""
    return {
        "switch": cfg.name,
        "router_ip": cfg.router_ip,
        "ecmp_hash": cfg.ecmp_hash,
        "ecmp_seed": cfg.seed,
        "forwarding": cfg.forwarding,
        "plane_bits": cfg.plane_bits,
        "live_known": live_known,  # false: the switch did not answer, every member shown live
        "routes": [
            {
                "prefix": r.prefix,
                "kind": r.kind,
                "next_hops": [{"port": m.port, "peer": m.peer, "live": m.live} for m in r.members],
            }
            for r in rows
        ],
    }


def _fib_of(cfg: SwitchConfig, ports_up: dict[str, bool]) -> Fib:
    index = {p.name: i for i, p in enumerate(cfg.ports)}
    fib = Fib(
        [(e.prefix, [(index[p], b"") for p, _ in e.next_hops]) for e in cfg.fib],
        seed=cfg.seed,
        ecmp_hash=cfg.ecmp_hash,
        forwarding=cfg.forwarding,
        plane_bits=cfg.plane_bits,
    )
    up = [ports_up.get(p.name, True) for p in cfg.ports]
    for i, ok in enumerate(up):
        if not ok:
            fib.set_port_state(i, False, up)
    return fib


def walk(
    configs: dict[str, SwitchConfig],
    ports_up: dict[str, dict[str, bool]],
    first_switch: str,
    src: str,
    dst: str,
    sport: int,
    dport: int,
    proto: int = 17,
) -> list[Hop]:
    """The switches a packet (src, dst, sport, dport, proto) crosses from `first_switch` on, as
    the running switches decide it: longest-prefix match, then the ECMP hash over live members
    (on a source-routed fabric, for an MRC packet, the EV's field)."""
    frame = hash_frame(src, dst, sport, dport, proto)
    hops: list[Hop] = []
    node = first_switch
    for _ in range(16):
        cfg = configs[node]
        fib = _fib_of(cfg, ports_up.get(node, {}))
        route = fib.lookup(socket.inet_aton(dst))
        if route is None:
            hops.append(Hop(node, None, note="no route: dropped"))
            return hops
        n, live = len(route.members), len(route.live)
        if route.local:
            hops.append(Hop(node, route.prefix, note="addressed to this switch"))
            return hops
        if not route.live:
            hops.append(Hop(node, route.prefix, n, 0, note="every next hop down: black-holed"))
            return hops
        h = fib.flow_hash(frame)
        out, _ = select_next_hop(route, h)
        port = cfg.ports[out]
        hops.append(Hop(node, route.prefix, n, live, h & BUCKET_MASK if n > 1 else None, port.name))
        if port.peer_node not in configs:
            hops.append(Hop(port.peer_node, None))
            return hops
        node = port.peer_node
    raise RuntimeError(f"no end to the path of {src} -> {dst} within 16 switches (a FIB loop?)")


def format_path(src_node: str, src: str, dst: str, sport: int, dport: int, proto: int, hops) -> str:
    name = {v: k for k, v in PROTOCOLS.items()}.get(proto, str(proto))
    ports = f":{sport} -> {dst}:{dport}" if proto in (6, 17) else f" -> {dst}"
    lines = [f"{src_node} {src}{ports} {name}"]
    for k, hop in enumerate(hops):
        if hop.prefix is None and not hop.note:
            continue  # the destination host
        if hop.note:
            lines.append(f"  {hop.node:8} {hop.prefix or '-':18} {hop.note}")
            continue
        if hop.bucket is not None:
            how = f"ECMP {hop.live} of {hop.members} live, bucket {hop.bucket:3}"
        else:
            how = "single next hop"
        peer = hops[k + 1].node if k + 1 < len(hops) else "?"
        lines.append(f"  {hop.node:8} {hop.prefix:18} {how:32} -> {hop.port} -> {peer}")
    lines.append("path: " + " ".join([src_node, *(h.node for h in hops)]))
    return "\n".join(lines)


def path_json(
    src_node: str, src: str, dst: str, sport: int, dport: int, proto: int, hops: list[Hop]
) -> dict:
    """`testbed path SRC DST --json`: the walk `format_path` prints, as data. `path` is the
    node sequence (source host first); each hop says how its switch chose the next."""
    name = {v: k for k, v in PROTOCOLS.items()}.get(proto, str(proto))
    return {
        "src": src_node,
        "src_ip": src,
        "dst_ip": dst,
        "sport": sport,
        "dport": dport,
        "proto": name,
        "hops": [
            {
                "node": h.node,
                "prefix": h.prefix,
                "members": h.members,
                "live": h.live,
                "bucket": h.bucket,
                "port": h.port,
                "note": h.note or None,
            }
            for h in hops
        ],
        "path": [src_node, *(h.node for h in hops)],
    }


# ----- reading a running fabric -------------------------------------------------------------------


def load_configs(name: str) -> dict[str, SwitchConfig]:
    directory = run_dir(name) / "switches"
    st = client.state(name)
    return {
        sw: SwitchConfig.load(directory / f"{sw}.json")
        for sw in st.switch_sockets
        if (directory / f"{sw}.json").exists()
    }


def live_ports(name: str, node: str | None = None) -> dict[str, dict[str, bool]] | None:
    """{switch: {port: up}} from the switches; None if the supervisor does not answer."""
    try:
        counters = client.call(name, {"op": "counters", "node": node}, timeout=10)["counters"]
    except client.ClientError:
        return None
    out: dict[str, dict[str, bool]] = {}
    for sw, c in counters.items():
        if "ports" in c:
            switch_up = c.get("up", True)
            out[sw] = {p: bool(pc["state"]["up"]) and switch_up for p, pc in c["ports"].items()}
    return out


def host_address(st, host: str, dst_ip: str | None = None) -> tuple[str, str]:
    """(address, leaf) of `host`'s NIC; with dst_ip, the NIC on the same plane as dst_ip."""
    node = st.nodes.get(host)
    if node is None or node.get("kind") != "host":
        hosts = [n for n, v in st.nodes.items() if v.get("kind") == "host"]
        raise client.ClientError(f"no host named {host!r} (hosts: {', '.join(hosts)})")
    intfs = [i for i in node["interfaces"] if i.get("ip")]
    if dst_ip is not None:
        plane = dst_ip.split(".")[1]
        intfs = [i for i in intfs if i["ip"].split(".")[1] == plane] or intfs
    return intfs[0]["ip"].split("/")[0], intfs[0]["peer"]

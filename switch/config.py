"""What one switch process is told at start: its ports, its static FIB and its queue policy.

Derived purely from the topology description, written as JSON by the fabric builder and read by
`python -m switch`; the switch never reads the topology itself, so it can be run by hand on any
pair of interfaces (the benchmark does exactly that).
"""

from __future__ import annotations

import json
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from contracts.defaults import ECMP_HASH, FORWARDING, TRIM_BYTES, TRIMMING, plane_bits
from contracts.dscp import CONTROL_DSCP, TRIMMABLE_DSCP, TRIMMED_DSCP
from contracts.framing import DEFAULT_MTU
from switch.port import QUEUE_MAX_INTERVAL_S
from topologies import Fabric
from topologies.timing import time_scale


@dataclass
class PortConfig:
    name: str
    mac: str
    peer_mac: str
    peer_node: str
    rate_mbps: float
    delay_us: float
    queue_kb: float
    ecn_kb: float


@dataclass
class FibConfig:
    prefix: str
    next_hops: list[tuple[str, str]]  # (egress port name, next-hop MAC); empty = local


@dataclass
class SwitchConfig:
    name: str
    router_ip: str
    seed: int
    ports: list[PortConfig] = field(default_factory=list)
    fib: list[FibConfig] = field(default_factory=list)
    trim_bytes: int = TRIM_BYTES
    trimming: bool = TRIMMING
    trimmable_dscp: int = TRIMMABLE_DSCP
    trimmed_dscp: int = TRIMMED_DSCP
    control_dscp: int = CONTROL_DSCP
    ecmp_hash: str = ECMP_HASH  # "mixed" or "crc" (switch.fib.Fib.flow_hash)
    forwarding: str = FORWARDING  # "ecmp" or "source-routed" (MRC packets: by their EV)
    plane_bits: int = 0  # low EV bits naming the plane, skipped by a source-routed switch
    # Real seconds per virtual second (contracts.clock): rates, delays and timers above are
    # virtual, the switch serves them N times slower.
    time_dilation: float = 1.0
    mtu: int = DEFAULT_MTU  # of its ports: sizes the ring slots (switch.ring.frame_size_for)
    # The interval of each port's deepest-queue record (virtual s): 10 ms on the reference
    # fabric, scaled with the fabric as the endpoints' bins are (topologies.timing.time_scale):
    # a 2 ms run at 10 Gbps otherwise drew its whole queue history as one point.
    queue_max_interval_s: float = QUEUE_MAX_INTERVAL_S

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_dict(cls, d: dict) -> SwitchConfig:
        d = dict(d)
        d["ports"] = [PortConfig(**p) for p in d.get("ports", [])]
        d["fib"] = [
            FibConfig(e["prefix"], [tuple(h) for h in e["next_hops"]]) for e in d.get("fib", [])
        ]
        return cls(**d)

    @classmethod
    def load(cls, path: str | Path) -> SwitchConfig:
        return cls.from_dict(json.loads(Path(path).read_text()))


def switch_config(
    fabric: Fabric, name: str, seed: int = 1, time_dilation: float = 1.0
) -> SwitchConfig:
    """The config of switch `name`; the ECMP seed differs per switch to avoid hash polarisation
    (with the `mixed` hash; the `crc` one only permutes every flow's bucket alike)."""
    p = fabric.params
    node = fabric.nodes[name]
    links = {(lk.a, lk.a_intf): lk for lk in fabric.links} | {
        (lk.b, lk.b_intf): lk for lk in fabric.links
    }
    ports = []
    for intf in fabric.interfaces[name]:
        link = links[(name, intf.name)]
        # A host has no switch to delay what it sends (and no netem here), so its port on the
        # leaf carries the propagation delay of both directions: every one-way host-to-host
        # delay, and so every round trip, is then exact (docs/fabric.md, "Links").
        to_host = fabric.nodes[intf.peer_node].kind == "host"
        delay_us = link.delay_us * (2 if to_host else 1)
        peer_mac = next(
            i.mac for i in fabric.interfaces[intf.peer_node] if i.name == intf.peer_name
        )
        ports.append(
            PortConfig(
                intf.name,
                intf.mac,
                peer_mac,
                intf.peer_node,
                link.mbps,
                delay_us,
                p.queue_kb,
                p.ecn_threshold_kb,
            )
        )
    fib = [FibConfig(e.prefix, [(h.port, h.mac) for h in e.next_hops]) for e in fabric.fibs[name]]
    return SwitchConfig(
        name=name,
        router_ip=node.router_ip or "0.0.0.0",
        seed=zlib.crc32(f"{seed}:{name}".encode()),
        ports=ports,
        fib=fib,
        trim_bytes=p.trim_bytes,
        trimming=p.trimming,
        trimmable_dscp=p.trimmable_dscp,
        trimmed_dscp=p.trimmed_dscp,
        control_dscp=p.control_dscp,
        ecmp_hash=p.ecmp_hash,
        forwarding=p.forwarding,
        plane_bits=plane_bits(p.planes),
        time_dilation=time_dilation,
        mtu=p.mtu,
        queue_max_interval_s=QUEUE_MAX_INTERVAL_S * time_scale(p),
    )

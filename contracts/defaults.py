"""Default per-port policy of the fabric's switches, and its ECMP models, declared once.

`topologies.TopologyParams` (what a user or scenario leaves unset), `switch.config` and
`switch.queueing` (a switch started by hand), `endpoint.simnet` (the in-process bottleneck the
transport is tuned on) and the benches all start from these numbers; when one of them had its
own copy, a change of default reached some and not the others.
"""

from __future__ import annotations

LINK_MBPS = 100.0
"""Rate of every link (0 would mean unshaped); what two shared cores carry per flow."""
DELAY_US = 20.0
"""One-way propagation delay per link."""
QUEUE_KB = 64.0
"""Data queue per egress port, in kB (1000 B): 5.2 ms of a 100 Mbps link."""
ECN_FRACTION = 0.5
"""With no explicit ECN threshold, CE-mark above this fraction of the data queue."""
TRIM_BYTES = 128
"""Frame length after trimming: Ethernet, IPv4, UDP, BTH, the data extension and a margin."""
TRIMMING = True
"""Trim trimmable data when the data queue is full (False: drop it, like a plain switch)."""
PRIO_QUEUE_HEADERS = 64
"""The priority queue holds at least this many trimmed headers (or the data queue's bytes)."""
ECMP_HASHES = ("mixed", "crc")
"""How flows become paths (docs/fabric.md, "ECMP hash"). `mixed`: as real fabrics -- each
switch mixes its CRC with a finaliser, and each connection of a hashed transport draws its UDP
source port (EV base) from the run's seed, as a RoCE NIC does per QP; collisions then follow
balls into bins. `crc`: the linear CRC alone and fixed source ports: structured, repeatable
spreads (a permutation of structured addresses lands perfectly, or all on one uplink)."""
ECMP_HASH = "mixed"
"""The realistic model; labs that teach the structured one ask for `crc` explicitly."""
FORWARDINGS = ("ecmp", "source-routed")
"""How a switch picks among equal next hops for MRC traffic (RoCEv2, UDP port 4791; docs/fabric.md,
"Source routing"). `ecmp`: by the flow hash. `source-routed`: by the EV itself -- its low bits
name the plane, the next field the uplink to take (a static table, no hash), as MRC's generated
EVs over static SRv6 routes do. Other traffic is hashed either way."""
FORWARDING = "ecmp"
ROCE_PORT = 4791
"""RoCEv2's UDP destination port: what a source-routed switch reads the EV of."""


def plane_bits(planes: int) -> int:
    """Low EV bits that name the plane in a generated EV (0 for one plane)."""
    return (planes - 1).bit_length()


def ecn_threshold_kb(queue_kb: float, ecn_kb: float | None = None) -> float:
    """The CE-marking threshold of a port: `ecn_kb` if set, else `ECN_FRACTION` of the queue."""
    return queue_kb * ECN_FRACTION if ecn_kb is None else ecn_kb


def prio_limit_bytes(queue_bytes: float, trim_bytes: int = TRIM_BYTES) -> int:
    """Bytes of the strict-priority queue (control and trimmed headers) of a port."""
    return int(max(queue_bytes, PRIO_QUEUE_HEADERS * trim_bytes))

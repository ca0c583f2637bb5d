"""The time scale of a fabric: its base RTT, and how it compares with the fabric the transport's
and the analysis's constants were tuned on.

A timer, a probe interval or a measurement window is only meaningful relative to the fabric's
round trip: 15 ms of minimum RTO is modest at 100 Mbps (a full 64 kB queue drains in 5 ms) and
a thousand round trips at 10 Gbps with 1 µs links. Hardware transports configure such
constants per fabric (MRC's controller takes `base_rtt` in its CC profile); here they are
derived from the fabric's base RTT, computed as htsim would count it.
"""

from __future__ import annotations

from contracts.defaults import DELAY_US, LINK_MBPS
from contracts.framing import FRAME_OVERHEAD

FULL_FRAME_BYTES = 1500 + 14  # a full 1500 B MTU frame
ACK_FRAME_BYTES = FRAME_OVERHEAD + 48  # an ACK: headers, BTH and the ACK extension, roughly


def serialisation_s(frame_bytes: float, mbps: float) -> float:
    """Seconds a link of `mbps` needs to send `frame_bytes` (0 for an unshaped link)."""
    return frame_bytes * 8 / (mbps * 1e6) if mbps > 0 else 0.0


def path_links(leaves: int) -> int:
    """Links on the longest host-to-host path: host-leaf-spine-leaf-host, or 2 on one leaf."""
    return 4 if leaves > 1 else 2


def base_rtt_s(
    link_mbps: float,
    delay_us: float,
    leaves: int = 2,
    uplink_mbps: float | None = None,
    frame_bytes: float = FULL_FRAME_BYTES,
) -> float:
    """Round trip of one full data frame and its ACK across the longest path of an idle fabric:
    propagation both ways plus store-and-forward serialisation of the frame on every link and
    of the ACK on the way back (no queueing, no processing time)."""
    links = path_links(leaves)
    up = link_mbps if uplink_mbps is None else uplink_mbps
    rates = [link_mbps, *([up] * (links - 2)), link_mbps]
    data = sum(serialisation_s(frame_bytes, r) for r in rates)
    ack = sum(serialisation_s(ACK_FRAME_BYTES, r) for r in rates)
    return 2 * links * delay_us * 1e-6 + data + ack


REFERENCE_BASE_RTT_S = base_rtt_s(LINK_MBPS, DELAY_US)
"""The default fabric's (100 Mbps, 20 µs links, two tiers): the transport's and the metrics'
time constants were tuned on it (docs/transport.md)."""


def time_scale(params) -> float:
    """The fabric's base RTT over the reference fabric's, at most 1 (`params` is a
    TopologyParams). Time constants tuned on the reference fabric are multiplied by it: a
    faster fabric gets proportionally shorter timers and windows, a slower one keeps them.
    An unshaped fabric (link_mbps 0) runs as fast as the emulator can: it has no time scale
    of its own and keeps the reference constants."""
    if params.link_mbps <= 0:
        return 1.0
    frame = params.mtu + 14
    rtt = base_rtt_s(params.link_mbps, params.delay_us, params.leaves, params.uplink_mbps, frame)
    if rtt <= 0:
        return 1.0
    return min(1.0, rtt / REFERENCE_BASE_RTT_S)

"""The transport's time constants for one fabric at one time dilation.

`endpoint.config.TransportConfig`'s defaults were tuned on the reference fabric (100 Mbps,
20 µs links; docs/transport.md) and `endpoint.process_config.EMULATION_TRANSPORT` raises four
of them above what a process descheduled on two shared cores may wait. Neither fits a 10 Gbps
fabric with 1 µs links, whose base RTT is 50 times shorter. So every job's transport gets:

- each time constant x the fabric's time scale (topologies.timing.time_scale: its base RTT over
  the reference's, at most 1): RTO, probe intervals, reorder allowance, the ACK delay, the
  tail-loss probe's floor, single-path's RC-style timeout;
- NSCC's configured base RTT (`base_rtt`), from which it derives its target delay and, with the
  NIC's rate, its BDP and window (endpoint.nscc), as MRC's controller configures it per fabric:
  the fabric's, plus the emulator's own latency per round trip / N (EMULATION_RTT_S). At
  N = 1 that latency is real (on the reference fabric round trips ran ~0.7 ms above the
  computed 1.44 ms, and a window of 1.5 computed BDPs was one real BDP: a silent black hole
  caught all of it and waited for an RTO); at the N a datacenter fabric needs it vanishes;
- the real-time hazards / N (contracts.clock.hazard) as floors where a late process would
  otherwise fire a timer spuriously: at N = 1000, 50 ms of real descheduling is 50 µs.

- on a fabric faster than the reference, a reorder allowance of at least one full queue's
  drain time at the link rate: sprayed packets overtake each other by up to the queueing
  difference between their paths. Measured on 4x4x4 at 10 Gbps with 12 kB queues (valid runs
  at N = 5000): the scaled 3.9 µs declared 469 packets of a 2 MB permutation lost and retired
  their EVs; at 9.6 µs 12, at 29 µs none, at the same goodput. (On the reference fabric a full
  queue drains in 5.2 ms, and the 2 ms hazard floor plus a quarter of the RTT already cover
  what its runs reorder.)

- NSCC's MaxWnd (`max_window`, in BDPs) small enough that a window's excess over the BDP
  takes at most WINDOW_QUEUE_SHARE of one port's queue, capped at the transport's default
  (1.5): what a window holds beyond the BDP becomes standing queue at the flow's bottleneck
  port, and spraying's bursts need the rest. A queue that cannot hold NSCC's target delay
  (12 kB at 10 Gbps is 9.6 µs, under the 10 µs target on 4x4x4) gives NSCC no delay signal,
  so the window's ceiling is all that bounds that queue. Measured on 4x4x4 at 10 Gbps with
  12 kB queues, the permutation of `bench fidelity` (seeds 2 and 3, N = 5000, every run
  valid): at 1.5 BDPs (excess 0.69 of a queue) 4 runs of 6 trimmed (57-288 trims; 80.7-88.6 %
  per flow), at 1.36 (0.5) 4 of 6 (80-241; 81.5-88.7 %), at 1.25 (0.35) none of 6
  (88.2-88.7 %), at the derived 1.24 one of 4 (50 trims; 88.4-88.7 %). Fabrics whose queues are deep for their BDP (the reference fabric, 9000 B
  frames with 72 kB queues) keep 1.5.

A scenario's own `transport:` overrides (and per-job ones) still win over these.
"""

from __future__ import annotations

from contracts.clock import hazard
from endpoint.config import TransportConfig
from endpoint.process_config import EMULATION_TRANSPORT, HAZARD_KEYS
from topologies import TopologyParams
from topologies.timing import base_rtt_s, time_scale

EMULATION_RTT_S = 1e-3
"""Real seconds a round trip spends in the emulator's processes (three switch hops and two
endpoint loops) beyond the fabric's own: a real-time hazard, / N in virtual time."""

SCALED_KEYS = (
    "rto_initial",
    "rto_min",
    "rto_max",
    "reorder_min",
    "single_path_rto",
    "probe_interval",
    "probe_interval_max",
    "ack_delay",
    "tlp_pto_min",
)
"""TransportConfig fields that are durations tuned on the reference fabric."""

WINDOW_QUEUE_SHARE = 1 / 3
"""The share of one port's queue that a window's excess over the BDP may take (module
docstring): 1 + WINDOW_QUEUE_SHARE x queue / BDP BDPs at most."""


def max_window_for(params: TopologyParams, base_rtt: float) -> float:
    """NSCC's MaxWnd in BDPs on a fabric with `params` and (configured) `base_rtt`: the
    transport's default, or less where the port queues are shallow for the BDP."""
    default = TransportConfig().max_window
    if params.link_mbps <= 0 or params.queue_kb <= 0 or base_rtt <= 0:
        return default
    bdp = params.link_mbps * 1e6 / 8 * base_rtt
    return min(default, 1.0 + WINDOW_QUEUE_SHARE * params.queue_kb * 1000 / bdp)


def transport_timing(params: TopologyParams, dilation: float = 1.0) -> dict[str, float]:
    """TransportConfig overrides (virtual seconds) for a fabric with `params` at `dilation`."""
    scale = time_scale(params)
    defaults = TransportConfig()
    out: dict[str, float] = {k: getattr(defaults, k) * scale for k in SCALED_KEYS}
    for k in HAZARD_KEYS:
        out[k] = max(out[k], hazard(EMULATION_TRANSPORT[k], dilation))
    if scale < 1.0 and params.link_mbps > 0:
        drain = params.queue_kb * 1000 * 8 / (params.link_mbps * 1e6)
        out["reorder_min"] = max(out["reorder_min"], drain)
    if params.link_mbps > 0:
        out["base_rtt"] = base_rtt_s(
            params.link_mbps, params.delay_us, params.leaves, params.uplink_mbps, params.mtu + 14
        ) + hazard(EMULATION_RTT_S, dilation)
        out["max_window"] = max_window_for(params, out["base_rtt"])
    out["rto_initial"] = max(out["rto_initial"], out["rto_min"])
    out["rto_max"] = max(out["rto_max"], out["rto_initial"])
    out["probe_interval_max"] = max(out["probe_interval_max"], out["probe_interval"])
    return out

"""Transport parameters: one frozen object, validated once, shared by every half of a QP.

Times are seconds of whatever clock drives the transport (wall clock in the endpoint process,
the virtual clock in ``endpoint.simnet``). Defaults are scaled to the emulated fabric (100 Mbps
links, tens of microseconds of propagation, a Python switch adding ~10-100 µs per hop), not to
hardware; docs/transport.md explains each one.
"""

from __future__ import annotations

import random
from collections.abc import Hashable
from dataclasses import dataclass, replace
from enum import Enum

from contracts.defaults import LINK_MBPS, plane_bits
from contracts.dscp import (
    CONTROL_DSCP,
    ECN_ECT0,
    TRIMMABLE_DSCP,
    TRIMMED_DSCP,
    check_dscps,
    tos,
)
from contracts.framing import DEFAULT_MTU, MAX_MTU, mrc_payload
from endpoint.psn import MAX_WINDOW

# RoCEv2 (IBTA Annex A17) takes a QP's UDP source port, its entropy, from 0xC000-0xFFFF.
SPORT_MIN = 0xC000
SPORT_END = 0x10000


def connection_ev_base(seed: int, src: Hashable, dst: Hashable, qp: int, num_evs: int) -> int:
    """The first EV (UDP source port) of QP `qp` from `src` to `dst`, drawn as a RoCE NIC draws a
    QP's source port: a pseudo-random value from the RoCEv2 range, here seeded by the run's seed
    and the connection, so that a run repeats its paths and another seed collides elsewhere.

    Why not one fixed base for every connection: with a linear (CRC) switch hash, one port on
    structured addresses spreads flows *perfectly* (or all onto one uplink), which no real fabric
    does; and with any hash, every run of a seed would put the same flows together. Both ends of
    a connection compute the other's base (the reply EVs of "paired" replies are the sender's).
    String seeds of `random.Random` are hashed with SHA-512: the same in every process.
    """
    rng = random.Random(f"ev-base:{seed}:{src}>{dst}:{qp}")
    return rng.randrange(SPORT_MIN, SPORT_END - num_evs + 1)


EV_PROFILES = ("auto", "explicit", "generated")
LB_POLICIES = ("wrr", "oblivious", "reps")
"""How a connection spreads packets over its usable EVs (endpoint.ev): weighted round-robin
(ECN and trims lower an EV's weight), oblivious (a random EV per packet, blind to feedback),
REPS (recycle the EVs whose packets came back without ECN; explore at random otherwise)."""


class Mode(str, Enum):
    """Which recovery/path policy a connection runs (side-by-side baselines share the code)."""

    MRC = "mrc"  # spray, SACK, NACK-on-trim, retire EV on loss, probe, re-admit
    SINGLE_PATH = "single-path"  # one fixed EV, go-back-N, long RC-style timeout
    SPRAY_NO_FAILOVER = "spray-no-failover"  # spray + SACK/NACK, but never retire an EV
    # RoCEv2 RC as NICs run it: one EV, go-back-N, the RC local ACK timeout (4.096 µs x
    # 2^rc_timeout) with rc_retry_cnt retries, DCQCN rate control (endpoint.dcqcn)
    ROCE = "roce"


# An ACK names at most 256 packets (its 8-bit `coalesced` field counts those before the
# trigger) and the time it was held in 32 bits of ns (docs/wire-format.md, MRCSack).
ACK_EVERY_MAX = 256
ACK_DELAY_MAX = 4.0
ACK_REORDER_MAX = 64  # the SACK bitmap's block: a run's members must all be in its first one

RC_TIMEOUT_UNIT_S = 4.096e-6  # IBA: local ACK timeout = 4.096 µs x 2^timeout
MRC_TIMEOUT_UNIT_S = 1.024e-6  # MRC (mrc_qp_attr.timeout): local ACK timeout = 1.024 µs x 2^t
MRC_TIMEOUT_MAX = 24  # 17.18 s
MRC_RETRY_LINEAR_MAX = 7
MRC_RETRY_INFINITE = 25  # retry.exp_cnt 25: retry for ever
MAX_QPS = 16  # QPs per peer: a QP number keeps 4 bits for it (endpoint.workloads.qp_number)


@dataclass(frozen=True)
class TransportConfig:
    mode: Mode = Mode.MRC
    num_evs: int = 64  # EVs per connection, 1..256
    ev_base: int = SPORT_MIN  # EV i is UDP source port ev_base + i
    # None: every connection's EVs start at ev_base. A number: each connection draws its own
    # base from it and the connection (connection_ev_base; `for_connection`), as RoCE NICs do.
    ev_seed: int | None = None
    planes: int = 1  # EV i uses plane i % planes
    # How EV values are made (MRC's EV profiles). "auto": consecutive source ports from
    # ev_base, which the fabric hashes (MRC_EV_PROFILE AUTO). "generated": each EV a source
    # route, the plane in its low bits and the uplink to take above them, for a source-routed
    # fabric (topology.forwarding); ev_base then aligned, no per-connection draw.
    # "explicit": the EVs are `explicit_evs`, as given (MRC_EV_PROFILE_EXPLICIT).
    ev_profile: str = "auto"
    explicit_evs: tuple[int, ...] = ()
    min_active_evs: int = 1  # a deny mask that would leave fewer undenied EVs is refused
    lb: str = "wrr"  # load-balancing policy, one of LB_POLICIES
    reps_buffer: int = 8  # REPS: recycled EVs kept (its circular buffer)
    reps_explore: int = 16  # REPS: random EVs sent after a freeze ends, before recycling again
    single_path_ev_index: int = 0  # which of the EVs single-path mode uses
    # QPs per peer (endpoint.workloads.Job): every message is cut into this many slices, one
    # per QP, as NCCL spreads a connection's data over NCCL_IB_QPS_PER_CONNECTION QPs. Each QP
    # draws its own EV base (its own source port: another ECMP path for roce/single-path).
    qps: int = 1
    # Bytes of message per packet: a full packet fills the MTU (contracts.framing.mrc_payload:
    # 1420 B in 1514 B frames at 1500); the endpoint process sets it from its NICs' MTU.
    max_payload: int = mrc_payload(DEFAULT_MTU)
    window_psns: int = 4096  # receiver PSN window == most PSNs a sender has outstanding

    # Congestion control: NSCC as UET 1.0 specifies it (endpoint.nscc; Table 3-82's defaults,
    # named as MRC's controller API names them). Relative constants resolve per connection
    # from its base RTT and BDP; docs/transport.md, "NSCC".
    base_rtt: float = 0.0  # seconds; 0 = the first measured round trip (the fabric sets it)
    # The NIC's rate, with the base RTT the BDP: the endpoint process sets it from its pacing
    # rate; the default is the reference fabric's link (contracts.defaults.LINK_MBPS).
    line_rate_bps: float = LINK_MBPS * 1e6
    target_qdelay: float | None = None  # seconds; None = target_rtts x base RTT
    target_rtts: float = 0.75  # target queueing delay in base RTTs (the value with trimming)
    max_window: float = 1.5  # MaxWnd, the initial and largest window, in BDPs
    gamma: float = 0.8  # multiplicative decrease gain on (avg delay - target) / avg delay
    max_md_jump: float = 0.5  # the smallest factor one decrease leaves
    fi: float = 5.0  # fair increase, MTUs x scaling_a per window of ACKs
    fi_scale: float = 0.25  # fast increase, bytes per acked byte x scaling_a
    eta: float = 0.15  # additive increase per adjustment period, MTUs x scaling_a
    alpha: float = 4.0  # proportional increase gain, MTUs x scaling_a x scaling_b per target
    qa_gate: int = 3  # QuickAdapt only if acked bytes per period < MaxWnd >> qa_gate
    qa_threshold: float = 0.0  # delay that triggers QuickAdapt, in targets; 0 = trims only
    disable_qa: bool = False
    adjust_bytes_threshold: int = 8  # apply accumulated increases after this many MTUs ...
    adjust_period_threshold: float = 1.0  # ... or this many base RTTs (and add eta)
    # NSCC's floor is one packet; below it the sender paces (endpoint.sender), which keeps a
    # heavy incast on a slow fabric from a trim-NACK-resend loop whose trimmed headers alone
    # fill the link (the endpoint process sets one full packet: docs/transport.md).
    min_cwnd: int = 128
    max_cwnd: int = 4 * 1024 * 1024  # a ceiling on MaxWnd whatever the BDP

    # RTT / timers.
    rto_initial: float = 20e-3
    rto_min: float = 15e-3  # above a full 64 KB queue at 100 Mbps (5.2 ms), with margin
    rto_max: float = 0.5
    reorder_min: float = 200e-6  # RACK-style reorder allowance floor
    reorder_rtt_frac: float = 0.25  # ... or this fraction of the smoothed RTT, if larger
    reorder_rttvar_mult: float = 2.0  # ... or this many RTT mean deviations, if larger still
    # RFC 8985's tail-loss probe fires 2 srtt after the tail left, but not before this: the
    # probe must not outrun a process that waited for a CPU (a time constant: it scales with
    # the fabric, testbed.harness.transport_timing).
    tlp_pto_min: float = 2e-3
    single_path_rto: float = 0.25  # RC-style timeout (NCCL's 4.3 s, scaled to the emulation)
    # roce: the RC local ACK timeout is 4.096 µs x 2^rc_timeout (IBA; the QP's "timeout"
    # attribute, 5 bits), not scaled: it is the NIC's own unit. 10 is 4.2 ms, shorter than
    # deployments use (NCCL's default 20 is 4.3 s) so that a run waits one out in seconds of
    # wall time. After rc_retry_cnt timeouts in a row without progress the QP fails.
    rc_timeout: int = 10
    rc_retry_cnt: int = 7
    # mrc, spray-no-failover: MRC's QP attributes (mrc_qp_attr). `ack_timeout` is its local
    # ACK timeout exponent t, 1.024 µs x 2^t of virtual time; unset, the RTO is RFC 6298's,
    # from the measured round trips, as before. Timeouts in a row without progress are
    # retries: the first `retry_linear_cnt` wait one timeout each, the next `retry_exp_cnt`
    # double it each time (25: for ever), and the timeout after the last fails the QP
    # (`qp_error`): it sends nothing more and its messages never complete. The defaults
    # (0, 25) are this transport's behaviour before it had them: back off at once, never
    # give up.
    ack_timeout: int | None = None
    retry_linear_cnt: int = 0
    retry_exp_cnt: int = MRC_RETRY_INFINITE

    # EV health (endpoint.ev).
    ecn_weight_factor: float = 0.5  # a trimmed (and, below, ECN-marked) EV's weight x this
    # Does an ECN echo lower its EV's weight too, not only a trim? None: yes, unless the EVs
    # are generated. Moving weight off a marked EV corrects an uneven spread, which hashed EVs
    # have (they collide, and a collided path marks more). Generated EVs on a source-routed
    # fabric spread evenly by construction, every path of a loaded fabric marks now and then,
    # and cutting whichever EV a mark came back on broke the round-robin's even spacing over
    # the uplinks: the gaps queued, the queues marked more EVs, and 7 of 24 permutation runs
    # of the fidelity bench ended up trimming, their lowest flow at 56-83 % against 87-90 %
    # (0 of 21 with ECN left to NSCC; docs/fidelity.md, "ECN and the EV weights"). With
    # 16 hashed EVs the same change cost the lowest flow 15-20 points. A trim always cuts.
    ev_weight_on_ecn: bool | None = None
    weight_min: float = 0.125
    weight_recover: float = 0.05  # added to an EV's weight per clean ACK
    tail_copies: int = 3  # copies (distinct EVs) of an RTO / tail-loss-probe resend (mrc)
    ack_miss_limit: int = 2  # own ACKs missing in a row (data covered by later ACKs) -> retire
    probe_interval: float = 1e-3  # first probe this long after a retirement
    probe_interval_max: float = 16e-3  # probes back off (x2) up to this while unanswered
    # mrc: a loss makes every EV prove itself (endpoint.recovery). Off: on the fabric it cost a
    # spine failure its failover and gained a black hole little (docs/transport.md).
    loss_sweep: bool = False

    # Receiver.
    # "paired": a reply (ACK, NACK, PROBE-ACK) to a packet on EV e leaves on EV pair(e), a fixed
    # shuffle within e's plane, so e names a round trip and a dead reverse path retires e like a
    # dead forward one (see reply_pairs for why not e itself); "spray": replies rotate over this
    # side's EVs (each lost ACK covered by the next one's cumulative PSN, but a message's last
    # ACK keeps dying for as long as the failure lasts).
    reply_ev: str = "paired"
    # Delayed ACKs (endpoint.receiver; docs/transport.md, "Delayed ACKs"): one ACK per
    # `ack_every` in-order packets of one CE state, or after `ack_delay`, whichever comes
    # first; anything the sender must hear at once is ACKed at once. 1: an ACK per packet.
    # Why 4: an ACK costs the emulator three switch hops and an endpoint send and receive,
    # nearly half its CPU per delivered packet. Four cut a bulk's ACKs 3.7x at the same goodput
    # in simnet (10 Gbps); eight sent bursts of eight packets into 12 kB queues (-11 %).
    # Why 250 µs: like every time here it is for the reference fabric (100 Mbps, 20 µs links;
    # base RTT 673 µs) and the harness scales it by the fabric's base RTT
    # (testbed.harness.transport_timing): 4.9 µs on 10 Gbps with 1 µs links, the time four
    # full frames take there, so a flow at line rate fills its four and only slower flows (an
    # incast's, a tail) wait, at most ~0.4 base RTT; at 100 Mbps three frames fit. The sender
    # takes the hold out of its RTT samples and adds it to its probe and retransmit timers.
    ack_every: int = 4
    ack_delay: float = 250e-6
    # Reordering threshold (QUIC ACK frequency's): a packet arriving this many PSNs or more
    # beyond the hole at rcv_nxt is ACKed at once, and so is the packet that fills a hole with
    # packets that far beyond it; nearer ones join the run. 1: any out-of-order packet is
    # ACKed at once. At most 64, the SACK bitmap's block (endpoint.receiver, `_coalesce`).
    ack_reorder: int = 1
    max_message_bytes: int = 256 * 1024 * 1024
    max_reassembly_bytes: int = 1024 * 1024 * 1024  # bytes reserved by partial messages
    rtt_samples_kept: int = 4096

    # DSCPs: the fabric's (topologies.TopologyParams), which the runner puts in every endpoint's
    # config; a switch trims, prioritises and re-marks by these values, so both must agree.
    trimmable_dscp: int = TRIMMABLE_DSCP  # data (sent ECT(0): switches may CE-mark it)
    trimmed_dscp: int = TRIMMED_DSCP  # what a switch re-marks a trimmed header with
    control_dscp: int = CONTROL_DSCP  # ACKs, NACKs, probes

    def __post_init__(self) -> None:
        mode = Mode(self.mode)
        object.__setattr__(self, "mode", mode)
        if not 1 <= self.num_evs <= 256:
            raise ValueError(f"num_evs must be 1..256, got {self.num_evs}")
        if not 1 <= self.planes <= self.num_evs:
            raise ValueError(f"planes must be 1..num_evs, got {self.planes}")
        if not 0 <= self.rc_timeout <= 31:
            raise ValueError(f"rc_timeout must be 0..31 (4.096 µs x 2^t), got {self.rc_timeout}")
        if not 0 <= self.rc_retry_cnt <= 7:
            raise ValueError(f"rc_retry_cnt must be 0..7, got {self.rc_retry_cnt}")
        if self.ack_timeout is not None and not 0 <= self.ack_timeout <= MRC_TIMEOUT_MAX:
            raise ValueError(
                f"ack_timeout must be 0..{MRC_TIMEOUT_MAX} (1.024 µs x 2^t), got {self.ack_timeout}"
            )
        if not 0 <= self.retry_linear_cnt <= MRC_RETRY_LINEAR_MAX:
            raise ValueError(
                f"retry_linear_cnt must be 0..{MRC_RETRY_LINEAR_MAX}, got {self.retry_linear_cnt}"
            )
        if not 0 <= self.retry_exp_cnt <= MRC_RETRY_INFINITE:
            raise ValueError(
                f"retry_exp_cnt must be 0..{MRC_RETRY_INFINITE} ({MRC_RETRY_INFINITE}: for ever), "
                f"got {self.retry_exp_cnt}"
            )
        if (
            isinstance(self.qps, bool)
            or not isinstance(self.qps, int)
            or not 1 <= self.qps <= MAX_QPS
        ):
            raise ValueError(f"qps must be 1..{MAX_QPS}, got {self.qps!r}")
        if self.lb not in LB_POLICIES:
            raise ValueError(f"lb: one of {', '.join(LB_POLICIES)}, got {self.lb!r}")
        if not 1 <= self.reps_buffer <= 256:
            raise ValueError(f"reps_buffer must be 1..256, got {self.reps_buffer}")
        if self.ev_profile not in EV_PROFILES:
            raise ValueError(
                f"ev_profile: one of {', '.join(EV_PROFILES)}, got {self.ev_profile!r}"
            )
        if self.ev_profile == "explicit":
            evs = tuple(self.explicit_evs)
            object.__setattr__(self, "explicit_evs", evs)
            bad = [e for e in evs if isinstance(e, bool) or not isinstance(e, int)]
            if not evs or bad or not all(0 < e < 65536 for e in evs):
                raise ValueError("explicit_evs: a list of UDP source ports 1..65535")
            if len(set(evs)) != len(evs):
                raise ValueError("explicit_evs: each EV once")
            if len(evs) != self.num_evs:
                object.__setattr__(self, "num_evs", len(evs))
            if not 1 <= self.num_evs <= 256:
                raise ValueError(f"explicit_evs: 1..256 EVs, got {self.num_evs}")
            if not 1 <= self.planes <= self.num_evs:
                raise ValueError(f"planes must be 1..num_evs, got {self.planes}")
            if not 0 <= self.single_path_ev_index < self.num_evs:
                raise ValueError("single_path_ev_index out of range")
        elif self.explicit_evs:
            raise ValueError("explicit_evs: only with ev_profile explicit")
        if self.ev_profile == "generated":
            align = 1 << (plane_bits(self.planes) + 8)
            if self.ev_base % align:
                raise ValueError(
                    f"ev_base: generated EVs need a base aligned to {align}, got {self.ev_base}"
                )
        if not (0 < self.ev_base and self._top_ev() < 65536):
            raise ValueError("EVs must be valid UDP source ports")
        if self.ev_seed is not None and (
            isinstance(self.ev_seed, bool) or not isinstance(self.ev_seed, int)
        ):
            raise ValueError(f"ev_seed must be an integer or None, got {self.ev_seed!r}")
        if not 0 <= self.single_path_ev_index < self.num_evs:
            raise ValueError("single_path_ev_index out of range")
        if not isinstance(self.min_active_evs, int) or not 1 <= self.min_active_evs <= 256:
            raise ValueError(f"min_active_evs must be 1..256, got {self.min_active_evs!r}")
        if not 1 <= self.max_payload <= mrc_payload(MAX_MTU):
            raise ValueError(f"max_payload must be 1..{mrc_payload(MAX_MTU)}")
        if not 1 <= self.window_psns <= MAX_WINDOW:
            raise ValueError(f"window_psns must be 1..{MAX_WINDOW}")
        if not 0 < self.min_cwnd <= self.max_cwnd:
            raise ValueError("need 0 < min_cwnd <= max_cwnd")
        problem = self._nscc_problem()
        if problem:
            raise ValueError(problem)
        if self.reply_ev not in ("paired", "spray"):
            raise ValueError(f"reply_ev must be paired or spray, got {self.reply_ev!r}")
        if not 1 <= self.tail_copies <= 16:
            raise ValueError("tail_copies must be 1..16")
        if self.ack_miss_limit < 1:
            raise ValueError("ack_miss_limit must be >= 1")
        if isinstance(self.ack_every, bool) or not isinstance(self.ack_every, int):
            raise ValueError(
                f"ack_every must be an integer 1..{ACK_EVERY_MAX}, got {self.ack_every!r}"
            )
        if not 1 <= self.ack_every <= ACK_EVERY_MAX:
            raise ValueError(f"ack_every must be 1..{ACK_EVERY_MAX}, got {self.ack_every}")
        r = self.ack_reorder
        if isinstance(r, bool) or not isinstance(r, int) or not 1 <= r <= ACK_REORDER_MAX:
            raise ValueError(f"ack_reorder must be an integer 1..{ACK_REORDER_MAX}, got {r!r}")
        v = self.ack_delay
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= ACK_DELAY_MAX:
            raise ValueError(f"ack_delay must be seconds in [0, {ACK_DELAY_MAX}], got {v!r}")
        if not 0 < self.weight_min <= 1:
            raise ValueError("weight_min must be in (0, 1]")
        problem = check_dscps(self.trimmable_dscp, self.trimmed_dscp, self.control_dscp)
        if problem:
            raise ValueError(problem)

    def _nscc_problem(self) -> str | None:
        """The first NSCC parameter out of range, as 'name: why' (None if all are fine)."""
        v = self.base_rtt
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 10:
            return f"base_rtt: must be seconds in [0, 10), got {v!r}"
        v = self.line_rate_bps
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1e13:
            return f"line_rate_bps: must be bits per second > 0, got {v!r}"
        if self.target_qdelay is not None and not (
            isinstance(self.target_qdelay, (int, float)) and 0 < self.target_qdelay < 10
        ):
            return f"target_qdelay: must be seconds in (0, 10) or null, got {self.target_qdelay!r}"
        positive = ("target_rtts", "max_window", "adjust_period_threshold")
        non_negative = ("fi", "fi_scale", "eta", "alpha", "qa_threshold")
        for name in positive + non_negative + ("gamma", "max_md_jump"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                return f"{name}: must be a number, got {v!r}"
        for name in positive:
            if not getattr(self, name) > 0:
                return f"{name}: must be > 0, got {getattr(self, name)}"
        for name in non_negative:
            if getattr(self, name) < 0:
                return f"{name}: must be >= 0, got {getattr(self, name)}"
        if not 0 <= self.gamma <= 1:
            return f"gamma: must be in [0, 1], got {self.gamma}"
        if not 0 < self.max_md_jump <= 1:
            return f"max_md_jump: must be in (0, 1], got {self.max_md_jump}"
        if isinstance(self.qa_gate, bool) or not isinstance(self.qa_gate, int):
            return f"qa_gate: must be an integer 0..31, got {self.qa_gate!r}"
        if not 0 <= self.qa_gate <= 31:
            return f"qa_gate: must be 0..31, got {self.qa_gate}"
        if not isinstance(self.adjust_bytes_threshold, int) or self.adjust_bytes_threshold < 1:
            return f"adjust_bytes_threshold: must be an integer >= 1, got {self.adjust_bytes_threshold!r}"
        return None

    @property
    def tos_data(self) -> int:
        """IP TOS byte of data packets: trimmable, ECN-capable."""
        return tos(self.trimmable_dscp, ECN_ECT0)

    @property
    def tos_control(self) -> int:
        """IP TOS byte of control packets (Not-ECT: they use the priority queue, which never
        marks)."""
        return tos(self.control_dscp)

    @property
    def ecn_lowers_weight(self) -> bool:
        """`ev_weight_on_ecn` resolved: unset, ECN lowers an EV's weight unless EVs are generated."""
        if self.ev_weight_on_ecn is not None:
            return self.ev_weight_on_ecn
        return self.ev_profile != "generated"

    def ev_values(self) -> list[int]:
        """The EVs (UDP source ports) of a connection, EV i on plane i % planes. Generated EVs
        carry their route: plane i % planes in the low plane_bits, then path i // planes, so
        that a source-routed switch (switch.fib.source_route) sends EV i up uplink
        (i // planes) % uplinks: consecutive EVs cover every path of a plane once per round."""
        if self.ev_profile == "explicit":
            return list(self.explicit_evs)
        if self.ev_profile == "generated":
            pb, planes = plane_bits(self.planes), self.planes
            return [self.ev_base + ((i // planes) << pb) + i % planes for i in range(self.num_evs)]
        return [self.ev_base + i for i in range(self.num_evs)]

    def _top_ev(self) -> int:
        return self.ev_values()[-1]

    def ev_planes(self) -> dict[int, int]:
        """EV -> plane: EV i is on plane i % planes, whatever the profile (the receiver keeps
        this map of the EVs it replies on, one lookup per reply)."""
        planes = self.planes
        return {ev: i % planes for i, ev in enumerate(self.ev_values())}

    def for_connection(self, src: Hashable, dst: Hashable, qp: int) -> TransportConfig:
        """This config as QP `qp` from `src` to `dst` uses it: with `ev_seed`, its own EV base
        (and no seed left, so that it is resolved once); without, unchanged."""
        if self.ev_seed is None:
            return self
        if self.ev_profile != "auto":  # the EVs are given or are routes: no per-connection draw
            return replace(self, ev_seed=None)
        base = connection_ev_base(self.ev_seed, src, dst, qp, self.num_evs)
        return replace(self, ev_base=base, ev_seed=None)

    def reply_pairs(self) -> dict[int, int]:
        """EV of a packet -> EV of its reply: a fixed shuffle of the EVs of each plane.

        Not the identity: the fabric's hash may be the linear CRC (`ecmp_hash: crc`), and then
        the forward hash of (A, B, e) and the reverse hash of (B, A, e) differ by a constant that
        does not depend on e. Replying on e itself tied every EV of a host pair to the same
        reverse choice: on the 2-spine fabric every round trip of a pair crossed both spines,
        and one dead spine link retired all 64 EVs (seen in silent-blackhole). A shuffle is not linear, so the reverse
        choice is independent of the forward one, as in a real fabric with many paths; keeping
        the plane keeps a round trip on one plane, so a plane failure retires only its own EVs.
        """
        evs = self.ev_values()
        shuffle = random.Random(0x4D5243)  # fixed: both ends, every run, the same pairs
        pairs: dict[int, int] = {}
        for plane in range(self.planes):
            own = evs[plane :: self.planes]
            mixed = own[:]
            shuffle.shuffle(mixed)
            pairs.update(zip(own, mixed, strict=True))
        return pairs

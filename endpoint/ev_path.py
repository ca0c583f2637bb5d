"""The state of one EV as one connection sees it: shared by `endpoint.ev` and the EV policies.

Its own module so that a policy (the built-in `endpoint.ev_policy`, or a Lab 4 student's file)
and `EVSet`, which calls the policy, both import it without importing each other.
`endpoint.ev` imports these names too: student files write ``from endpoint.ev import EVPath,
EVState``.
"""

from __future__ import annotations

from enum import Enum


class EVState(str, Enum):
    """GOOD carries its full share; CONGESTED a smaller one (ECN, trims); FAILED none (a loss:
    MRC's ASSUMED_BAD, probed until it answers); DENIED none and no probes, until a deny mask
    that matches it is lifted (MRC's DENIED: an operator's or a controller's decision)."""

    GOOD = "good"
    CONGESTED = "congested"
    FAILED = "failed"
    DENIED = "denied"


class EVPath:
    """What one connection knows about one EV."""

    __slots__ = (
        "ev",
        "plane",
        "state",
        "weight",
        "credit",
        "failed_at",
        "next_probe_at",
        "probe_backoff",
        "probe_min_seq",
        "retirements",
        "packets_sent",
        "last_sent_at",
        "ack_misses",
        "proven_at",
        "last_ack_rtt",
    )

    def __init__(self, ev: int, plane: int) -> None:
        self.ev = ev
        self.plane = plane
        self.state = EVState.GOOD
        self.weight = 1.0
        self.credit = 0.0
        self.failed_at = 0.0
        self.next_probe_at = float("inf")
        self.probe_backoff = 1.0
        self.probe_min_seq = 0
        self.retirements = 0
        self.packets_sent = 0
        # Send time of the latest data packet on this EV: when a connection retires it, how
        # long ago it last put traffic there (what "moved off a failed link by" measures).
        self.last_sent_at = float("-inf")
        self.ack_misses = 0  # packets in a row acknowledged only by later packets' ACKs
        # Send time of the latest packet or probe on this EV whose own reply came back: the
        # round trip worked then (the sender's loss sweep asks "since when?").
        self.proven_at = float("-inf")
        # The round trip of the latest ACK that came back on this EV (s; inf: none timed). A
        # resend goes on a recently acknowledged EV (EVSet.pick_resend), but not on one whose
        # round trip went through a standing queue: behind a slowed switch the only ACKs still
        # coming back are its own, ~1 ms late.
        self.last_ack_rtt = float("inf")

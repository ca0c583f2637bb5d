"""NSCC-like sender window: ECN and queueing delay together decide, trims count as congestion.

The four cases of UEC's NSCC, per ACK (qdelay = RTT sample - base RTT):

    ECN and qdelay > target   -> multiplicative decrease, scaled by how far past target
    ECN and qdelay <= target  -> no change: a marked but short-delay path is the EV's problem,
                                 handled by lowering that EV's weight (endpoint.ev)
    no ECN, qdelay <= target  -> proportional increase (fast when the queue is empty)
    no ECN, qdelay > target   -> additive increase (one ai_bytes per RTT)

ECN/delay decreases happen at most once per smoothed RTT, so a burst of marks from one queue
build-up is one reaction; trims cost ``trim_md`` of a packet each. Below one packet of window
the sender paces (endpoint.sender). Loss is *not* a congestion signal here (it means path failure, handled by EV
retirement); only a data RTO — every path silent — halves the window.
"""

from __future__ import annotations

from endpoint.config import TransportConfig


class WindowCC:
    """Bytes-in-flight limit for one connection."""

    __slots__ = ("cfg", "cwnd", "_last_decrease", "decreases", "increases")

    def __init__(self, cfg: TransportConfig) -> None:
        self.cfg = cfg
        self.cwnd = float(cfg.init_cwnd)
        self._last_decrease = float("-inf")
        self.decreases = 0
        self.increases = 0

    def on_ack(
        self,
        acked: int,
        rtt: float | None,
        base_rtt: float | None,
        srtt: float,
        ce: bool,
        now: float,
    ) -> None:
        if acked <= 0:
            return
        cfg = self.cfg
        target = cfg.target_qdelay
        qdelay = 0.0 if rtt is None or base_rtt is None else max(0.0, rtt - base_rtt)
        if ce:
            if qdelay > target:
                cut = min(cfg.md_max, cfg.md_gain * (qdelay - target) / qdelay)
                self._decrease(cut, now, srtt)
            return
        if qdelay <= target:
            self.cwnd += cfg.pi_gain * acked * (target - qdelay) / target
        else:
            self.cwnd += cfg.ai_bytes * acked / self.cwnd
        self.increases += 1
        self._clamp()

    def on_trim(self, size: int) -> None:
        # Per trimmed packet, not once per RTT: a trim-NACK-resend loop is much shorter than
        # the RTT of data stuck behind a full queue, so a per-RTT cut would let trimmed headers
        # alone saturate the link (seen in the 8-to-1 incast). A whole window trimmed costs
        # trim_md of the window, as in DCTCP's per-packet accounting.
        self.cwnd -= self.cfg.trim_md * max(size, self.cfg.min_cwnd)
        self.decreases += 1
        self._clamp()

    def on_rto(self) -> None:
        self.cwnd /= 2
        self.decreases += 1
        self._clamp()

    def _decrease(self, cut: float, now: float, srtt: float) -> None:
        if now - self._last_decrease < srtt:
            return
        self._last_decrease = now
        self.cwnd *= 1.0 - cut
        self.decreases += 1
        self._clamp()

    def _clamp(self) -> None:
        self.cwnd = min(float(self.cfg.max_cwnd), max(float(self.cfg.min_cwnd), self.cwnd))

"""RTT estimation (RFC 6298 smoothing) plus the minimum RTT that NSCC uses as its base."""

from __future__ import annotations


class RttEstimator:
    """Smoothed RTT, variance, and base (minimum) RTT from timestamp-echo samples."""

    __slots__ = ("srtt", "rttvar", "min_rtt", "latest", "_init_rto", "_rto_min", "_rto_max")

    def __init__(self, rto_initial: float, rto_min: float, rto_max: float) -> None:
        self.srtt: float | None = None
        self.rttvar = 0.0
        self.min_rtt: float | None = None
        self.latest: float | None = None
        self._init_rto = rto_initial
        self._rto_min = rto_min
        self._rto_max = rto_max

    def sample(self, rtt: float) -> None:
        self.latest = rtt
        if self.min_rtt is None or rtt < self.min_rtt:
            self.min_rtt = rtt
        if self.srtt is None:
            self.srtt = rtt
            self.rttvar = rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt

    def observe_base(self, rtt: float) -> None:
        """A round trip that skipped the data queues (a trim NACK): informs the base RTT only."""
        if self.min_rtt is None or rtt < self.min_rtt:
            self.min_rtt = rtt

    def pacing_rtt(self, default: float) -> float:
        """Best guess of the RTT before any data ACK: smoothed, else base, else ``default``."""
        if self.srtt is not None:
            return self.srtt
        return default if self.min_rtt is None else self.min_rtt

    def rto(self) -> float:
        """Data retransmit timeout, clamped to [rto_min, rto_max]."""
        if self.srtt is None:
            return self._init_rto
        return min(self._rto_max, max(self._rto_min, self.srtt + 4 * self.rttvar))

    def smoothed(self, default: float) -> float:
        return default if self.srtt is None else self.srtt

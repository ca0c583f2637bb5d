"""DCQCN: the rate control of RoCEv2 NICs, for the `roce` baseline (sans-IO, virtual time).

Why: `roce` is the transport MRC replaced -- one path, go-back-N, the RC local ACK timeout --
and RoCE NICs do not run a window: they pace each QP at a rate that ECN cuts and timers raise
(Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015; the
reaction point "RP" algorithm). Here:

* a **CNP** is an ACK whose ECN echo is non-zero, at most one per `cnp_interval` (the
  notification point's 50 µs: a NIC sends one CNP per flow per interval, however many CE
  marks arrive);
* on a CNP: target Rt = Rc, Rc = Rc x (1 - alpha/2), alpha = (1 - g) alpha + g, and the
  increase counters start over;
* every `alpha_period` (K) without a CNP: alpha = (1 - g) alpha;
* every `increase_period` (T) and every `byte_counter` (B) bytes sent, an increase event:
  while both counters are below `fast_recovery_steps` (F), fast recovery Rc = (Rt + Rc) / 2;
  once one of them has passed F, additive increase Rt += `rate_ai` first; once both have,
  hyper increase Rt += i x `rate_hai`; Rc never exceeds the line rate.

Timers are not scheduled: each call catches up on the periods elapsed since the last one (the
sender calls at every ACK and every send), which gives the same rate as timers firing on time
as long as calls come at least once per period -- at line rate they come every packet.

Defaults are the paper's for 40 Gbps, with the increase steps scaled to the line rate
(R_AI 40 Mbps and R_HAI 400 Mbps at 40 Gbps are 0.1 % and 1 % of it).
"""

from __future__ import annotations

from endpoint.config import TransportConfig

G = 1.0 / 256
ALPHA_PERIOD_S = 55e-6  # K
INCREASE_PERIOD_S = 55e-6  # T
BYTE_COUNTER = 10 * 1024 * 1024  # B
FAST_RECOVERY_STEPS = 5  # F
RATE_AI_FRACTION = 0.001  # R_AI / line rate
RATE_HAI_FRACTION = 0.01  # R_HAI / line rate
CNP_INTERVAL_S = 50e-6
MIN_RATE_FRACTION = 0.001  # the lowest rate a cut may reach, as a fraction of the line rate


class Dcqcn:
    """One QP's DCQCN reaction point. `rate_bps` is what the sender paces at; `cwnd` bounds
    what it has outstanding (RC has no window: the PSN window, far above a BDP)."""

    def __init__(self, cfg: TransportConfig) -> None:
        self.line_rate = float(cfg.line_rate_bps)
        self.rate_bps = self.line_rate  # Rc: a QP starts at line rate
        self.target_bps = self.line_rate  # Rt
        self.alpha = 1.0
        self.cwnd = float(cfg.max_cwnd)
        self.rate_ai = RATE_AI_FRACTION * self.line_rate
        self.rate_hai = RATE_HAI_FRACTION * self.line_rate
        self.min_rate = MIN_RATE_FRACTION * self.line_rate
        self._last_cnp = float("-inf")
        self._alpha_at = None  # next alpha decay, virtual s (None: not started)
        self._increase_at = None  # next timer increase event
        self._timer_events = 0  # T
        self._byte_events = 0  # BC
        self._bytes = 0  # towards the next byte-counter event
        self.cnps = 0
        self.increases = 0

    # -- events ----------------------------------------------------------------------------

    def _catch_up(self, now: float) -> None:
        if self._alpha_at is None:
            self._alpha_at = now + ALPHA_PERIOD_S
            self._increase_at = now + INCREASE_PERIOD_S
            return
        while now >= self._alpha_at:
            self.alpha *= 1.0 - G
            self._alpha_at += ALPHA_PERIOD_S
        while now >= self._increase_at:
            self._timer_events += 1
            self._increase()
            self._increase_at += INCREASE_PERIOD_S

    def _increase(self) -> None:
        f = FAST_RECOVERY_STEPS
        t, bc = self._timer_events, self._byte_events
        if max(t, bc) < f:
            pass  # fast recovery: towards the rate before the cut
        elif min(t, bc) < f:
            self.target_bps = min(self.target_bps + self.rate_ai, self.line_rate)
        else:
            i = min(t, bc) - f + 1
            self.target_bps = min(self.target_bps + i * self.rate_hai, self.line_rate)
        self.rate_bps = min((self.target_bps + self.rate_bps) / 2.0, self.line_rate)
        self.increases += 1

    def on_sent(self, size: int, now: float) -> None:
        self._catch_up(now)
        self._bytes += size
        while self._bytes >= BYTE_COUNTER:
            self._bytes -= BYTE_COUNTER
            self._byte_events += 1
            self._increase()

    def on_ack(self, acked: int, rtt: float | None, ce: bool, now: float, inflight: int) -> None:
        self._catch_up(now)
        if ce and now - self._last_cnp >= CNP_INTERVAL_S:
            self._last_cnp = now
            self.cnps += 1
            self.target_bps = self.rate_bps
            self.rate_bps = max(self.rate_bps * (1.0 - self.alpha / 2.0), self.min_rate)
            self.alpha = (1.0 - G) * self.alpha + G
            self._alpha_at = now + ALPHA_PERIOD_S
            self._increase_at = now + INCREASE_PERIOD_S
            self._timer_events = self._byte_events = 0
            self._bytes = 0

    def on_trim(self, size: int, now: float, inflight: int) -> None:
        """RoCE has no trimming: a cut packet fails its ICRC and is a loss, which DCQCN does not
        react to (go-back-N resends it)."""

    def on_rto(self, size: int) -> None:
        """Nor does DCQCN react to a timeout."""

    def snapshot(self) -> dict:
        return {
            "algorithm": "dcqcn",
            "rate_mbps": round(self.rate_bps / 1e6, 3),
            "target_mbps": round(self.target_bps / 1e6, 3),
            "alpha": round(self.alpha, 4),
            "cnps": self.cnps,
            "increases": self.increases,
            "cwnd": int(self.cwnd),
        }

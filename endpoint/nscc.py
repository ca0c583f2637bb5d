"""NSCC as UET 1.0 specifies it (section 3.6.13, parameters of Table 3-82): one window per
connection, moved by every ACK through the four cases of ECN mark x queueing delay.

    no ECN, delay >= target  -> fair increase: fi bytes per window's worth of ACKs, the same
                                for every competing window, so small windows catch up
    no ECN, delay <  target  -> proportional increase, alpha x (target - delay) per acked
                                byte; or fast increase (fi_scale per acked byte) once a
                                whole window came back through empty queues
    ECN,    delay >= target  -> multiplicative decrease by gamma x (avg - target) / avg of the
                                *average* delay, at most once per base RTT, never below
                                max_md_jump
    ECN,    delay <  target  -> no change: the marking queue has not yet delayed anyone, and
                                load balancing (endpoint.ev) moves traffic off it first

Increases accumulate in ``inc_bytes`` and are applied (inc_bytes / cwnd) once
``adjust_bytes_threshold`` bytes were acknowledged or ``adjust_period_threshold`` passed, when
``eta`` is added too. A trim shrinks the window by the trimmed packet and arms QuickAdapt: if
the bytes acknowledged over the last base RTT + target are below MaxWnd >> qa_gate (an incast),
the window is set to them at once and the marks of what is still in flight are ignored.

Every constant is defined by the specification on a reference network (100 Gb/s, 12 µs base RTT:
150 kB of BDP) and scaled to this connection's BDP (scaling_a) and target delay (scaling_b);
the window starts at, and never exceeds, MaxWnd = max_window x BDP. The parameter names are
those of MRC's controller API (``mrc_ctl_cc_nscc_cfg``); docs/transport.md lists them.

Where this differs from the specification (docs/transport.md, "NSCC"):
- the base RTT is max(configured, lowest measured) rather than min: an emulated path can be
  faster than the configured fabric by its approximations (a host NIC's token bucket sends the
  first frame of a burst without serialising it) and slower by the emulator's own latency
  (real time, N = 1). Sized from the first, the window would cap the rate of a valid run;
  from the second, it would size the window for a round trip no packet achieves. Without a
  configured value the lowest measured round trip is the base RTT;
- without a configured base RTT the window opens at MaxWnd for the reference RTT (12 µs) and
  the first measured round trip then sets it;
- the "delay ~= 0" of fast increase is 1 µs at the reference RTT, scaled like every other
  constant (the Ultra Ethernet htsim model uses 1 µs absolute);
- a trim arms QuickAdapt for its own period only, and a period in which the connection
  drained is not judged: a stale trigger and a period that measured a collective's idle wait
  between steps set the window to the few bytes acknowledged, and one step of a ring
  all-reduce took 1.6x the median (docs/transport.md, "Where it differs").
"""

from __future__ import annotations

from endpoint.config import TransportConfig

REFERENCE_BDP = 150_000.0  # bytes: 100 Gb/s x 12 µs (UET 1.0, Table 3-82's base_BDP)
REFERENCE_RTT = 12e-6  # seconds
CLEAR_DELAY_AT_REFERENCE = 1e-6  # "delay ~= 0" for fast increase, at the reference RTT


class Nscc:
    """The bytes-in-flight limit of one connection (``cwnd``), UET 1.0 NSCC."""

    __slots__ = (
        "cfg",
        "cwnd",
        "max_wnd",
        "base_rtt",
        "_configured",
        "_min_rtt",
        "_line_Bps",
        "target",
        "alpha",
        "fi",
        "fi_scale",
        "eta",
        "qa_threshold",
        "adjust_bytes",
        "adjust_period",
        "clear_delay",
        "avg_delay",
        "_last_delay_t",
        "_inc_bytes",
        "_received",
        "_achieved",
        "_fi_count",
        "_increase_mode",
        "_trigger_qa",
        "_qa_end",
        "_qa_idle",
        "_to_ignore",
        "_ignored",
        "_last_adjust",
        "_last_dec",
        "quick_adapts",
        "mds",
        "trims",
        "fast_increases",
    )

    def __init__(self, cfg: TransportConfig) -> None:
        self.cfg = cfg
        self._line_Bps = cfg.line_rate_bps / 8.0
        self._configured = cfg.base_rtt if cfg.base_rtt > 0 else None
        self.base_rtt = self._configured
        self._min_rtt: float | None = None
        self.avg_delay = 0.0
        self._last_delay_t: float | None = None
        self._inc_bytes = 0.0
        self._received = 0
        self._achieved = 0
        self._fi_count = 0
        self._increase_mode = False
        self._trigger_qa = False
        self._qa_end: float | None = None
        self._qa_idle = False  # the current QuickAdapt period saw nothing in flight
        self._to_ignore = 0
        self._ignored = 0
        self._last_adjust: float | None = None
        self._last_dec = float("-inf")
        self.quick_adapts = 0
        self.mds = 0
        self.trims = 0
        self.fast_increases = 0
        self._derive(self.base_rtt or REFERENCE_RTT)
        self.cwnd = self.max_wnd

    # ----- constants (section 3.6.13.3) ----------------------------------------------------------

    def _derive(self, base_rtt: float) -> None:
        cfg = self.cfg
        mtu = cfg.max_payload
        bdp = self._line_Bps * base_rtt
        self.max_wnd = min(float(cfg.max_cwnd), max(float(cfg.min_cwnd), cfg.max_window * bdp))
        target = cfg.target_qdelay if cfg.target_qdelay is not None else cfg.target_rtts * base_rtt
        scaling_a = bdp / REFERENCE_BDP
        scaling_b = target / REFERENCE_RTT
        self.target = target
        self.fi = cfg.fi * mtu * scaling_a
        self.fi_scale = cfg.fi_scale * scaling_a
        self.eta = cfg.eta * mtu * scaling_a
        self.alpha = cfg.alpha * scaling_a * scaling_b * mtu / target
        self.qa_threshold = cfg.qa_threshold * target if cfg.qa_threshold > 0 else float("inf")
        self.adjust_bytes = cfg.adjust_bytes_threshold * mtu
        self.adjust_period = cfg.adjust_period_threshold * base_rtt
        self.clear_delay = CLEAR_DELAY_AT_REFERENCE * base_rtt / REFERENCE_RTT

    def _observe_rtt(self, rtt: float) -> None:
        """UpdateBaseRtt. The base RTT is the configured one unless every round trip measured so
        far was longer (see the module docstring); a new lowest sample lowers it towards the
        configured value, with MaxWnd and every constant. The window itself is never raised
        by it: only the increases of the four cases move it up."""
        low = self._min_rtt
        if low is not None and rtt >= low:
            return
        self._min_rtt = rtt
        base = rtt if self._configured is None else max(self._configured, rtt)
        if base != self.base_rtt:
            opening = self._configured is None and low is None
            self.base_rtt = base
            self._derive(base)
            if opening:  # nothing configured: the window opens at the first measured MaxWnd
                self.cwnd = self.max_wnd
            self._clamp()

    # ----- events --------------------------------------------------------------------------------

    def on_ack(self, acked: int, rtt: float | None, ce: bool, now: float, inflight: int) -> None:
        """An ACK for `acked` newly delivered bytes; `rtt` is its round trip (None: not
        attributable to one send), `ce` its ECN echo, `inflight` what is still outstanding."""
        if acked <= 0:
            return
        self._ignored += acked
        self._received += acked
        self._achieved += acked
        if self._last_adjust is None:
            self._last_adjust = now
        if rtt is None:
            self._qa_idle |= inflight <= 0
            return
        self._observe_rtt(rtt)
        delay = max(0.0, rtt - self.base_rtt)
        self._update_delay(delay, now)
        if self._quick_adapt(False, ce, delay, inflight, now):
            self._qa_idle |= inflight <= 0
            return
        target = self.target
        if not ce:
            if delay >= target:
                self._inc_bytes += self.fi * acked
            else:
                self._fast_increase(acked, delay)
                if not self._increase_mode:
                    self._inc_bytes += self.alpha * acked * (target - delay)
        elif delay >= target:
            self._multiplicative_decrease(now)
        if now - self._last_adjust >= self.adjust_period or self._received > self.adjust_bytes:
            self._fulfill(now)
        self._clamp()
        # Nothing left in flight: the connection drained (a step of a collective ended), so
        # the QuickAdapt period now running measures idleness, not the network (_quick_adapt).
        self._qa_idle |= inflight <= 0

    def on_trim(self, size: int, now: float, inflight: int) -> None:
        """A NACK for a trimmed packet: it met a full queue."""
        if self.base_rtt is not None:
            self._update_delay(self.base_rtt, now)  # stands in for the delay it would have seen
        self._ignored += size
        self._trigger_qa = True
        self.trims += 1
        if not self._quick_adapt(True, True, 0.0, inflight, now):
            self._shrink(size)

    def on_rto(self, size: int) -> None:
        """A retransmission timeout declared `size` bytes lost (every path silent)."""
        self._shrink(size)
        self._ignored += size

    def snapshot(self) -> dict:
        """The window and what moved it, for the endpoint's counters records."""
        return {
            "cwnd": int(self.cwnd),
            "max_wnd": int(self.max_wnd),
            "base_rtt": self.base_rtt,
            "target": self.target,
            "avg_delay": self.avg_delay,
            "multiplicative_decreases": self.mds,
            "quick_adapts": self.quick_adapts,
            "trims": self.trims,
            "fast_increases": self.fast_increases,
        }

    # ----- the pieces ----------------------------------------------------------------------------

    def _update_delay(self, delay: float, now: float) -> None:
        # The average over the last base RTT: each sample weighs the time since the previous one,
        # so the average forgets at the same pace whether ACKs are dense or sparse.
        last = self._last_delay_t
        base = self.base_rtt or REFERENCE_RTT
        weight = 1.0 if last is None else min(1.0, max(0.0, now - last) / base)
        self.avg_delay += weight * (delay - self.avg_delay)
        self._last_delay_t = now

    def _quick_adapt(
        self, loss: bool, marked: bool, delay: float, inflight: int, now: float
    ) -> bool:
        cfg = self.cfg
        handled = False
        if self._ignored < self._to_ignore and marked:
            # The marks of what was in flight when QuickAdapt last set the window describe the
            # queue that window was already sized for.
            handled = True
        elif self._qa_end is None or now >= self._qa_end:
            if (
                not cfg.disable_qa
                and self._qa_end is not None
                and not self._qa_idle
                and (self._trigger_qa or loss or delay > self.qa_threshold)
                and self._achieved < self.max_wnd / (1 << cfg.qa_gate)
            ):
                self.cwnd = float(max(self._achieved, cfg.min_cwnd))
                self._to_ignore = inflight
                self._ignored = 0
                self._trigger_qa = False
                self.quick_adapts += 1
                handled = True
            self._achieved = 0
            self._trigger_qa = False
            self._qa_idle = inflight <= 0
            self._qa_end = now + (self.base_rtt or REFERENCE_RTT) + self.target
        if handled:
            self._inc_bytes = 0.0
            self._received = 0
        return handled

    def _fast_increase(self, acked: int, delay: float) -> None:
        if delay < self.clear_delay:
            self._fi_count += acked
            if self._fi_count > self.cwnd or self._increase_mode:
                self.cwnd = min(self.cwnd + acked * self.fi_scale, self.max_wnd)
                self._increase_mode = True
                self.fast_increases += 1
                return
        else:
            self._fi_count = 0
        self._increase_mode = False

    def _multiplicative_decrease(self, now: float) -> None:
        self._increase_mode = False
        self._fi_count = 0
        avg = self.avg_delay
        base = self.base_rtt or REFERENCE_RTT
        if avg > self.target and now - self._last_dec > base:
            factor = max(1.0 - self.cfg.gamma * (avg - self.target) / avg, self.cfg.max_md_jump)
            self.cwnd *= factor
            self._last_dec = now
            self.mds += 1

    def _fulfill(self, now: float) -> None:
        self.cwnd += self._inc_bytes / max(self.cwnd, 1.0)
        if now - self._last_adjust >= self.adjust_period:
            self._last_adjust = now
            self.cwnd += self.eta
        self._inc_bytes = 0.0
        self._received = 0

    def _shrink(self, size: int) -> None:
        self.cwnd -= size
        self._clamp()

    def _clamp(self) -> None:
        self.cwnd = min(self.max_wnd, max(float(self.cfg.min_cwnd), self.cwnd))

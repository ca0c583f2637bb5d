"""NSCC (endpoint.nscc) as UET 1.0 specifies it: constants scaled from the reference network,
the four cases, QuickAdapt, trims, and the base RTT rule of the emulator."""

from __future__ import annotations

import pytest

from endpoint.config import TransportConfig
from endpoint.nscc import REFERENCE_BDP, REFERENCE_RTT, Nscc

BASE = 13e-6  # the 4x4x4 fabric at 10 Gbps, 1 µs links
RATE = 10e9
MTU = 1420


def cfg(**kw) -> TransportConfig:
    return TransportConfig(base_rtt=BASE, line_rate_bps=RATE, max_payload=MTU, min_cwnd=MTU, **kw)


def test_constants_scale_from_the_reference_network() -> None:
    cc = Nscc(cfg())
    bdp = RATE / 8 * BASE
    a = bdp / REFERENCE_BDP
    target = 0.75 * BASE
    assert cc.max_wnd == pytest.approx(1.5 * bdp)
    assert cc.cwnd == cc.max_wnd  # the window opens at MaxWnd
    assert cc.target == pytest.approx(target)
    assert cc.fi == pytest.approx(5 * MTU * a)
    assert cc.eta == pytest.approx(0.15 * MTU * a)
    assert cc.alpha == pytest.approx(4 * a * (target / REFERENCE_RTT) * MTU / target)
    assert cc.adjust_bytes == 8 * MTU and cc.adjust_period == pytest.approx(BASE)
    # On the reference network itself every constant is the table's.
    ref = Nscc(TransportConfig(base_rtt=REFERENCE_RTT, line_rate_bps=100e9, max_payload=4096))
    assert ref.fi == pytest.approx(5 * 4096) and ref.max_wnd == pytest.approx(1.5 * REFERENCE_BDP)


def _steady(cc: Nscc, rtt: float, ce: bool, acks: int, t0: float = 0.0) -> float:
    t = t0
    for _ in range(acks):
        t += 1.2e-6
        cc.on_ack(MTU, rtt, ce, t, inflight=int(cc.cwnd))
    return t


def test_four_cases() -> None:
    def moved(delay: float, ce: bool) -> float:
        cc = Nscc(cfg())
        cc.on_ack(MTU, BASE, True, 0.0, inflight=0)  # pins the base RTT, moves nothing
        cc.cwnd = cc.max_wnd / 2
        w = cc.cwnd
        _steady(cc, BASE + delay, ce, 40)
        return cc.cwnd - w

    low, high = 0.2 * BASE, 1.5 * BASE
    assert moved(low, ce=False) > 0  # proportional increase below the target
    assert moved(high, ce=False) > 0  # fair increase above it
    eta_only = Nscc(cfg()).eta * (40 * 1.2e-6 / BASE + 1)
    assert 0 <= moved(low, ce=True) <= eta_only  # ECN, short queue: nothing but eta
    assert moved(high, ce=True) < 0  # ECN and a long queue: multiplicative decrease


def test_multiplicative_decrease_uses_the_average_and_is_bounded() -> None:
    cc = Nscc(cfg())
    cc.on_ack(MTU, BASE, True, 0.0, inflight=0)
    t = _steady(cc, BASE + 5 * BASE, False, 30)  # the average delay is now far above target
    w = cc.cwnd
    cc.on_ack(MTU, BASE + 5 * BASE, True, t + 1e-7, inflight=int(w))
    # factor 1 - 0.8 * 4.25/5 < 0.5: max_md_jump holds (plus the fair increases then applied)
    assert cc.mds == 1 and w * 0.5 <= cc.cwnd < w * 0.55
    w = cc.cwnd
    cc.on_ack(MTU, BASE + 5 * BASE, True, t + 2e-7, inflight=int(w))
    assert cc.cwnd >= w and cc.mds == 1  # at most one decrease per base RTT


def test_trims_shrink_and_quick_adapt_sets_the_window_to_what_arrived() -> None:
    cc = Nscc(cfg())
    w = cc.cwnd
    cc.on_trim(MTU, now=1e-6, inflight=int(w))
    assert cc.cwnd == pytest.approx(w - MTU)  # the first period has no measure yet: a plain cut
    # An incast: over the next period only two packets come back, then a trim.
    cc.on_ack(MTU, BASE, False, 5e-6, inflight=int(cc.cwnd))
    cc.on_ack(MTU, BASE, False, 6e-6, inflight=int(cc.cwnd))
    cc.on_trim(MTU, now=1e-6 + 2 * (BASE + cc.target), inflight=10 * MTU)
    assert cc.quick_adapts == 1
    assert cc.cwnd == pytest.approx(2 * MTU)
    # The marks of what was in flight then do not cut it again.
    w = cc.cwnd
    cc.on_ack(MTU, 3 * BASE, True, 1e-4, inflight=9 * MTU)
    assert cc.cwnd == w


def _period(cc: Nscc) -> float:
    return cc.base_rtt + cc.target


def test_a_trim_arms_quick_adapt_for_its_own_period_only() -> None:
    """A trim that met a busy connection (plenty acknowledged in its period) is not an incast;
    it must not stay armed until some later, quieter period sets the window to what little
    that one carried (the P100 outlier of allreduce-under-failure: a trim during a failure,
    a window cut steps later)."""
    cc = Nscc(cfg())
    t = _steady(cc, BASE, False, 2)  # the first period starts
    cc.on_trim(MTU, now=t + 1e-7, inflight=int(cc.cwnd))
    t = _steady(cc, BASE, False, 3 * int(_period(cc) / 1.2e-6), t + 1e-7)  # full periods
    assert cc.quick_adapts == 0
    # Much later, a period in which little came back (a slow start of a step, say) -- no new
    # trim, no loss, no delay: nothing arms QuickAdapt.
    t += 10 * _period(cc)
    cc.on_ack(MTU, BASE, False, t, inflight=int(cc.cwnd))
    cc.on_ack(MTU, BASE, False, t + 1.1 * _period(cc), inflight=int(cc.cwnd))
    assert cc.quick_adapts == 0 and cc.cwnd > cc.max_wnd / 2


def test_a_period_in_which_the_connection_drained_is_not_judged() -> None:
    """Bytes not acknowledged because none were sent say nothing of the network: after a
    step of a collective ends (nothing in flight) and the next begins, the first trim is
    judged against a period that measured the new step, not the idle gap."""
    cc = Nscc(cfg())
    t = _steady(cc, BASE, False, 20)
    cc.on_ack(MTU, BASE, False, t + 1e-6, inflight=0)  # the step's last ACK: drained
    t += 50 * _period(cc)  # the ring waits for the slowest hop
    w = cc.cwnd
    # The next step's burst met a full queue: its trim NACK is the first news of it.
    cc.on_trim(MTU, now=t, inflight=int(cc.cwnd))
    assert cc.quick_adapts == 0 and cc.cwnd == pytest.approx(w - MTU)  # a plain cut
    # A real incast in the new step: a whole period with two packets back, then a trim.
    cc.on_ack(MTU, BASE, False, t + 2e-6, inflight=int(cc.cwnd))
    cc.on_ack(MTU, BASE, False, t + 3e-6, inflight=int(cc.cwnd))
    cc.on_trim(MTU, now=t + 1.5 * _period(cc), inflight=10 * MTU)
    assert cc.quick_adapts == 1 and cc.cwnd == pytest.approx(2 * MTU)


def test_quick_adapt_can_be_disabled() -> None:
    cc = Nscc(cfg(disable_qa=True))
    cc.on_trim(MTU, now=1e-6, inflight=10 * MTU)
    cc.on_trim(MTU, now=1e-3, inflight=10 * MTU)
    assert cc.quick_adapts == 0


def test_base_rtt_is_the_configured_one_unless_every_sample_is_longer() -> None:
    cc = Nscc(cfg())
    cc.on_ack(MTU, 0.7 * BASE, False, 1e-6, inflight=0)  # an emulated path faster than the fabric
    assert cc.base_rtt == BASE
    slow = Nscc(cfg())
    slow.on_ack(MTU, 100 * BASE, False, 1e-6, inflight=0)  # the emulator's own latency (N = 1)
    assert slow.base_rtt == 100 * BASE and slow.max_wnd == pytest.approx(
        1.5 * RATE / 8 * 100 * BASE
    )
    assert slow.cwnd < slow.max_wnd  # the window is not raised by it, only its ceiling
    slow.on_ack(MTU, 50 * BASE, False, 2e-6, inflight=0)
    assert slow.base_rtt == 50 * BASE


def test_without_a_configured_base_rtt_the_first_round_trip_opens_the_window() -> None:
    cc = Nscc(TransportConfig(line_rate_bps=RATE, max_payload=MTU))
    cc.on_ack(MTU, 2 * BASE, False, 1e-6, inflight=0)
    assert cc.base_rtt == 2 * BASE
    assert cc.cwnd == pytest.approx(cc.max_wnd) == pytest.approx(1.5 * RATE / 8 * 2 * BASE)


@pytest.mark.parametrize(
    "bad",
    [
        {"gamma": 1.5},
        {"max_md_jump": 0},
        {"target_rtts": 0},
        {"fi": -1},
        {"qa_gate": 40},
        {"base_rtt": -1e-6},
        {"target_qdelay": 0.0},
        {"adjust_bytes_threshold": 0},
    ],
)
def test_bad_parameters_name_the_field(bad: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        TransportConfig(**bad)

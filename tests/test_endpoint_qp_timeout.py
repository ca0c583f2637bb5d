"""MRC's QP timeout and retry limits (mrc_qp_attr: `timeout`, `retry.linear_cnt`,
`retry.exp_cnt`) on the in-process network: the local ACK timeout in MRC's unit, linear retries
at one timeout, exponential ones doubling, and the QP in error once they are spent."""

from __future__ import annotations

import random

import pytest

from endpoint.config import MRC_TIMEOUT_UNIT_S, Mode, TransportConfig
from endpoint.simnet import PairHarness, SimNet
from tests.test_endpoint_transport import assert_exactly_once, blob

GBPS = 1e9
T8 = MRC_TIMEOUT_UNIT_S * 2**8  # 262 µs


def cfg(**kw) -> TransportConfig:
    # One full packet of minimum window, as the endpoint process sets it: a resend after a
    # timeout leaves at once rather than paced behind a window of 128 bytes.
    return TransportConfig(mode=Mode.MRC, line_rate_bps=GBPS, num_evs=8, min_cwnd=1420, **kw)


def _rto_times(h: PairHarness, net: SimNet, until: float, step: float) -> list[float]:
    """When each RTO fired (to within `step`), run until `until` or the QP failed."""
    times: list[float] = []
    fired = 0
    t = net.now
    while t < until and not h.ca.sender.recovery.qp_error:
        t += step
        net.run(t)
        now = h.ca.stats.counters["rto_fired"]
        times += [t] * (now - fired)
        fired = now
    return times


def test_the_qp_attributes_are_bounded_as_mrc_h_bounds_them():
    assert MRC_TIMEOUT_UNIT_S == 1.024e-6
    for t in (0, 8, 24):
        assert cfg(ack_timeout=t).ack_timeout == t
    with pytest.raises(ValueError, match="ack_timeout must be 0..24"):
        cfg(ack_timeout=25)
    with pytest.raises(ValueError, match="retry_linear_cnt must be 0..7"):
        cfg(retry_linear_cnt=8)
    with pytest.raises(ValueError, match="retry_exp_cnt must be 0..25"):
        cfg(retry_exp_cnt=26)


def test_linear_retries_wait_one_timeout_then_they_double_then_the_qp_fails():
    net = SimNet(seed=1, n_paths=4)
    h = PairHarness(net, cfg(ack_timeout=8, retry_linear_cnt=2, retry_exp_cnt=2))
    net.set_all_paths("a", "b", loss=1.0)  # every path dead for good
    h.send_ab(b"x" * 1_000)
    times = _rto_times(h, net, 1.0, T8 / 64)
    rec = h.ca.sender.recovery
    assert rec.qp_error and h.ca.stats.counters["qp_error"] == 1
    # The first timeout, then 2 linear and 2 exponential retries; the fifth timeout fails it.
    assert len(times) == 5
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert gaps == pytest.approx([T8, T8, 2 * T8, 4 * T8], abs=T8 / 32)
    assert times[0] == pytest.approx(T8, abs=T8 / 32)  # not the RFC 6298 floor (15 ms)
    # The QP went quiet: nothing more is sent, no timer is left.
    assert h.ca.sender.next_timer() is None
    assert h.ca.sender.poll_transmit(net.now, []) == 0


def test_infinite_exponential_retries_never_fail_the_qp_and_it_recovers_after_the_heal():
    net = SimNet(seed=2, n_paths=4)
    h = PairHarness(net, cfg(ack_timeout=6, retry_linear_cnt=7))  # exp_cnt 25: for ever
    net.set_all_paths("a", "b", loss=1.0)
    rng = random.Random(2)
    h.send_ab(blob(rng, 20_000))
    net.run(0.5)  # hundreds of timeouts at 65 µs, were they not backed off
    rec = h.ca.sender.recovery
    assert not rec.qp_error and h.ca.stats.counters["rto_fired"] >= 8
    net.set_all_paths("a", "b", loss=0.0)
    assert h.run(net.now + 5.0), h.ca.snapshot()
    assert_exactly_once(h.sent_ab, h.received_ab)


def test_without_a_qp_timeout_the_rto_is_the_measured_one_and_mrc_never_gives_up():
    net = SimNet(seed=3, n_paths=4)
    c = cfg()
    assert c.ack_timeout is None and c.retry_linear_cnt == 0 and c.retry_exp_cnt == 25
    h = PairHarness(net, c)
    net.set_all_paths("a", "b", loss=1.0)
    h.send_ab(b"y" * 1_000)
    times = _rto_times(h, net, 3.0, 1e-3)
    assert not h.ca.sender.recovery.qp_error and len(times) >= 5
    assert times[0] >= c.rto_min  # RFC 6298 clamps it: no faster than rto_min
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert gaps[-1] >= 8 * gaps[0]  # backed off from the first timeout on

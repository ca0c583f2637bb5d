"""The `roce` baseline: RoCEv2 RC on one path -- go-back-N, the RC local ACK timeout with its
retry count, DCQCN rate control (endpoint/dcqcn.py) -- on the in-process network."""

from __future__ import annotations

import random

import pytest

from endpoint.config import RC_TIMEOUT_UNIT_S, Mode, TransportConfig
from endpoint.dcqcn import ALPHA_PERIOD_S, CNP_INTERVAL_S, INCREASE_PERIOD_S, Dcqcn
from endpoint.simnet import Bottleneck, PairHarness, SimNet
from tests.test_endpoint_transport import assert_exactly_once, blob

GBPS = 1e9


def cfg(**kw) -> TransportConfig:
    return TransportConfig(mode=Mode.ROCE, line_rate_bps=GBPS, **kw)


def test_rc_timeout_is_4096_ns_times_two_to_the_t_and_bounded():
    assert RC_TIMEOUT_UNIT_S == 4.096e-6
    for t in (0, 10, 14, 31):
        assert cfg(rc_timeout=t).rc_timeout == t
    with pytest.raises(ValueError, match="rc_timeout must be 0..31"):
        cfg(rc_timeout=32)
    with pytest.raises(ValueError, match="rc_retry_cnt must be 0..7"):
        cfg(rc_retry_cnt=8)


def test_dcqcn_cuts_on_a_cnp_at_most_once_per_interval_and_recovers():
    cc = Dcqcn(cfg())
    assert cc.rate_bps == GBPS and cc.alpha == 1.0
    cc.on_ack(1000, None, True, 1.0, 0)
    assert cc.rate_bps == pytest.approx(GBPS / 2)  # alpha 1: Rc x (1 - 1/2)
    assert cc.target_bps == GBPS and cc.cnps == 1
    cc.on_ack(1000, None, True, 1.0 + CNP_INTERVAL_S / 2, 0)  # within the interval: no cut
    assert cc.cnps == 1 and cc.rate_bps == pytest.approx(GBPS / 2)
    # Five fast-recovery steps, one per increase period: halfway to the target each time.
    rates = []
    for k in range(1, 6):
        cc.on_ack(1000, None, False, 1.0 + k * INCREASE_PERIOD_S + 1e-9, 0)
        rates.append(cc.rate_bps)
    gaps = [GBPS - r for r in rates]
    assert all(b == pytest.approx(a / 2) for a, b in zip(gaps, gaps[1:], strict=False))
    assert cc.alpha < 1.0  # decayed over the periods without a CNP
    # Then additive and hyper increase: back to line rate, never above it.
    cc.on_ack(1000, None, False, 1.0 + 200 * INCREASE_PERIOD_S, 0)
    assert cc.rate_bps == pytest.approx(GBPS, rel=1e-3) and cc.rate_bps <= GBPS


def test_dcqcn_alpha_decays_with_g_per_period_without_cnps():
    cc = Dcqcn(cfg())
    cc.on_ack(0, None, False, 0.0, 0)  # starts the timers
    cc.on_ack(0, None, False, 10 * ALPHA_PERIOD_S + 1e-9, 0)
    assert cc.alpha == pytest.approx((1 - 1 / 256) ** 10)


def test_roce_delivers_through_loss_and_ecn_with_go_back_n_and_dcqcn():
    net = SimNet(seed=3, n_paths=4)
    h = PairHarness(net, cfg(rc_timeout=8))  # 1.05 ms
    net.set_all_paths("a", "b", loss=0.01)
    net.set_bottleneck("b", Bottleneck(rate_bps=500e6, queue_bytes=30_000, ecn_bytes=10_000))
    rng = random.Random(3)
    for _ in range(40):
        h.send_ab(blob(rng, 50_000))
    assert h.run(30.0), h.ca.snapshot()
    assert_exactly_once(h.sent_ab, h.received_ab)
    snap = h.ca.sender.cc.snapshot()
    assert snap["algorithm"] == "dcqcn" and snap["cnps"] > 0  # the 500 Mbps bottleneck marked
    assert snap["rate_mbps"] < 1000
    assert h.ca.stats.retransmits["gbn"] > 0  # go-back-N resends
    # One path: every data packet left on the connection's one EV.
    assert {p.ev for p in h.ca.sender.evs.paths if p.packets_sent} <= {h.ca.sender.single_ev}


def test_roce_gives_up_after_its_retry_count_as_a_nic_does():
    net = SimNet(seed=1, n_paths=4)
    c = cfg(rc_timeout=8, rc_retry_cnt=3)
    h = PairHarness(net, c)
    net.blackhole_evs("a", "b", {h.ca.sender.single_ev})  # its one path dies for good
    h.send_ab(b"x" * 10_000)
    assert not h.run(1.0)
    rec = h.ca.sender.recovery
    assert rec.qp_error and h.ca.stats.counters["qp_error"] == 1
    assert h.ca.stats.counters["rto_fired"] == 4  # the first timeout and 3 retries
    # The QP went quiet: nothing more is sent, no timer is left.
    assert h.ca.sender.next_timer() is None
    assert h.ca.sender.poll_transmit(net.now, []) == 0

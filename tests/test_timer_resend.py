"""A timer's resend leaves past the congestion window (RFC 6298, 5.4).

The 8:1 incast of the REPS grid with a dead spine (2026-12-07) left one sender silent for the
last 1.2 ms of a 2 ms run: an RTO expired its oldest packet, but the packets sent just before
the timeout were not yet expired, and they filled a window the timeout had just shrunk below
them; the resend waited for the next timeout, doubled each time.
"""

from __future__ import annotations

from endpoint import codec
from endpoint.config import TransportConfig
from endpoint.sender import Sender
from endpoint.transport import Endpoint

MTU_PAYLOAD = 1420


def _sender(**changes: float) -> Sender:
    cfg = TransportConfig(
        num_evs=8,
        base_rtt=100e-6,
        line_rate_bps=1e9,
        rto_min=1e-3,
        rto_initial=1e-3,
        **changes,  # type: ignore[arg-type]
    )
    conn = Endpoint(cfg).connect(0x11, 0x22, "rx")
    conn.send(bytes(40 * MTU_PAYLOAD), 0.0)
    return conn.sender


def _data_psns(out: list) -> list[int]:
    return [codec.decode(payload).psn for _, _, payload, _ in out]


def _stalled_at_rto() -> tuple[Sender, float]:
    """One packet sent at 0, five at 0.9 ms, no ACK: at 1.3 ms the first has timed out, the
    five have not, and they fill a window shrunk to one packet."""
    s = _sender()
    s.poll_transmit(0.0, [], limit=1)
    s.poll_transmit(0.9e-3, [], limit=5)
    s.cc.cwnd = 2 * MTU_PAYLOAD  # the window many timeouts in a row leave
    now = 1.3e-3
    s.on_timer(now)
    assert s.stats.counters["rto_fired"] == 1
    assert s.recovery.inflight_bytes == 5 * MTU_PAYLOAD > s.cc.cwnd
    return s, now


def test_an_rto_resend_leaves_although_the_window_is_full() -> None:
    s, now = _stalled_at_rto()
    out: list = []
    s.poll_transmit(now, out)
    psns = _data_psns(out)
    assert psns and set(psns) == {0}  # the timed-out packet (and its tail copies), nothing new
    assert s.stats.retransmits["rto"] == 1
    again: list = []
    s.poll_transmit(now, again)
    assert again == []  # one resend per timeout: the window still holds everything else


def test_a_resend_without_a_timer_still_waits_for_the_window() -> None:
    s = _sender()
    s.poll_transmit(0.0, [], limit=6)
    s.cc.cwnd = 2 * MTU_PAYLOAD
    first = next(iter(s.recovery.inflight.values()))
    s.recovery.declare_lost(first, "loss", 10e-6)
    out: list = []
    s.poll_transmit(10e-6, out)
    assert out == [] and len(s.recovery.retx) == 1  # a RACK loss is clocked by the window


def test_a_tail_loss_probe_leaves_although_the_window_is_full() -> None:
    s = _sender(tlp_pto_min=100e-6)
    s.poll_transmit(0.0, [], limit=6)
    s.cc.cwnd = 2 * MTU_PAYLOAD
    rec = s.recovery
    s.rtt.srtt, s.rtt.rttvar = 50e-6, 10e-6  # as if sampled: the probe timeout is 2 srtt
    # Past the probe timeout, before the RTO: the tail packet is declared lost and resent.
    now = next(t for t in (k * 10e-6 for k in range(1, 200)) if rec._tlp_time() <= t)
    assert now < rec.rto()
    s.on_timer(now)
    assert s.stats.counters["tlp_fired"] == 1
    out: list = []
    s.poll_transmit(now, out)
    assert set(_data_psns(out)) == {5}  # the tail: PSN 5 of 0..5

"""Ring sizes: the deep defaults the vector path wants, within a switch's memory budget."""

from __future__ import annotations

from switch import ring


def test_rings_keep_the_defaults_until_the_budget_and_then_halve() -> None:
    assert ring.ring_frames_for(2) == (ring.RX_FRAMES, ring.TX_FRAMES)  # the bench's DUT
    assert ring.ring_frames_for(8) == (ring.RX_FRAMES, ring.TX_FRAMES)  # 8 x 3 MB: just fits
    rx, tx = ring.ring_frames_for(12)  # a leaf of 8 hosts and 4 spines
    assert (rx, tx) == (ring.RX_FRAMES // 2, ring.TX_FRAMES // 2)
    for ports in range(1, 300):
        rx, tx = ring.ring_frames_for(ports)
        assert tx >= 64 and rx == 2 * tx
        assert ports * (rx + tx) * ring.FRAME_SIZE <= ring.RING_BUDGET_BYTES or tx == 64

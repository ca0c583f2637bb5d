"""Ring sizes: the deep defaults the vector path wants, within a switch's memory budget, in
slots that hold a whole frame of the fabric's MTU."""

from __future__ import annotations

import json

import pytest

from contracts.framing import DEFAULT_MTU, MAX_MTU, MIN_MTU, max_frame_bytes
from switch import ring
from switch.config import SwitchConfig, switch_config
from topologies import leaf_spine


def test_rings_keep_the_defaults_until_the_budget_and_then_halve() -> None:
    assert ring.ring_frames_for(2) == (ring.RX_FRAMES, ring.TX_FRAMES)  # the bench's DUT
    assert ring.ring_frames_for(8) == (ring.RX_FRAMES, ring.TX_FRAMES)  # 8 x 3 MB: just fits
    rx, tx = ring.ring_frames_for(12)  # a leaf of 8 hosts and 4 spines
    assert (rx, tx) == (ring.RX_FRAMES // 2, ring.TX_FRAMES // 2)
    for ports in range(1, 300):
        for size in (ring.FRAME_SIZE, ring.frame_size_for(MAX_MTU)):
            rx, tx = ring.ring_frames_for(ports, size)
            assert tx >= 64 and rx == 2 * tx
            assert ports * (rx + tx) * size <= ring.RING_BUDGET_BYTES or tx == 64


@pytest.mark.parametrize(
    ("mtu", "slot"),
    [(MIN_MTU, 2048), (DEFAULT_MTU, 2048), (1968, 2048), (1969, 4096), (4096, 8192), (9000, 16384)],
)
def test_a_slot_holds_a_whole_frame_of_the_mtu(mtu: int, slot: int) -> None:
    """The kernel puts an rx frame's Ethernet header 66 bytes into its slot (its IP header at
    RX_HEADROOM = 80) and truncates what does not fit; a tx frame starts at TX_DATA_OFF."""
    size = ring.frame_size_for(mtu)
    assert size == slot
    assert 66 + max_frame_bytes(mtu) <= size and ring.TX_DATA_OFF + max_frame_bytes(mtu) <= size
    block = max(ring.BLOCK_SIZE, size)
    assert block % size == 0 and block % 4096 == 0  # whole slots and pages per block


def test_the_default_mtu_keeps_the_measured_ring_geometry() -> None:
    assert ring.frame_size_for(DEFAULT_MTU) == ring.FRAME_SIZE == 2048
    assert ring.ring_frames_for(4, ring.frame_size_for(DEFAULT_MTU)) == (1024, 512)
    # At 9000 a 4-port switch keeps the same bytes of ring in fewer, larger slots.
    assert ring.ring_frames_for(4, ring.frame_size_for(9000)) == (256, 128)


def test_a_switch_is_told_its_ports_mtu() -> None:
    fab = leaf_spine(spines=1, leaves=2, hosts_per_leaf=1, mtu=9000)
    cfg = switch_config(fab, "leaf1")
    assert cfg.mtu == 9000
    assert SwitchConfig.from_dict(json.loads(cfg.to_json())).mtu == 9000
    assert switch_config(leaf_spine(spines=1, leaves=2, hosts_per_leaf=1), "leaf1").mtu == 1500

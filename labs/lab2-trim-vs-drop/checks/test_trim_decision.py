"""Lab 2 checks: your `decide` (trim_decision.py), alone and inside the switch's TrimmingQueue.

Run them with `testbed lab check 2` (no root needed for this part). Each check's name starts
with the TODO it is about.
"""

from __future__ import annotations

import itertools

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether

from contracts.dscp import CONTROL_DSCP, TRIMMABLE_DSCP, TRIMMED_DSCP
from contracts.ports import ROCEV2_UDP_PORT
from switch import frames
from switch.queueing import (
    DROP,
    DROP_QUEUE_FULL,
    ENQUEUE,
    ENQUEUED,
    PRIORITY,
    TRIM,
    TRIMMED,
    TrimmingQueue,
)
from switch.queueing import (
    decide as reference,
)
from testbed.labs.grading import load_student

TRIMMABLE, CONTROL = TRIMMABLE_DSCP, CONTROL_DSCP  # the defaults a fabric's switches get
LIMIT = 10_000


@pytest.fixture
def decide():
    return load_student("trim_decision").decide


def call(decide, dscp=TRIMMABLE, size=1000, is_udp=True, data_bytes=0, trimming=True):
    return decide(dscp, size, is_udp, data_bytes, LIMIT, trimming, TRIMMABLE, TRIMMED_DSCP, CONTROL)


@pytest.mark.parametrize("dscp", [CONTROL, TRIMMED_DSCP])
@pytest.mark.parametrize("data_bytes", [0, LIMIT])
def test_todo1_control_and_trimmed_headers_take_the_priority_queue(decide, dscp, data_bytes):
    assert call(decide, dscp=dscp, size=128, data_bytes=data_bytes) == PRIORITY


@pytest.mark.parametrize(
    "dscp,is_udp,data_bytes",
    [
        (TRIMMABLE, True, 0),
        (TRIMMABLE, True, LIMIT - 1000),
        (0, True, 5_000),
        (TRIMMABLE, False, 0),
    ],
)
def test_todo2_a_frame_that_fits_is_enqueued(decide, dscp, is_udp, data_bytes):
    assert call(decide, dscp=dscp, is_udp=is_udp, data_bytes=data_bytes) == ENQUEUE


def test_todo3_overflowing_trimmable_udp_is_trimmed(decide):
    assert call(decide, data_bytes=LIMIT - 999) == TRIM  # one byte too many
    assert call(decide, data_bytes=LIMIT) == TRIM


def test_todo4_overflow_is_dropped_when_trimming_is_off(decide):
    assert call(decide, data_bytes=LIMIT, trimming=False) == DROP


def test_todo4_overflow_that_is_not_trimmable_is_dropped(decide):
    assert call(decide, dscp=0, data_bytes=LIMIT) == DROP


def test_todo4_overflow_that_is_not_udp_is_dropped(decide):
    assert call(decide, is_udp=False, data_bytes=LIMIT) == DROP


def test_matches_the_reference_everywhere(decide):
    grid = itertools.product(
        (0, TRIMMABLE, TRIMMED_DSCP, CONTROL, 26),  # dscp
        (64, 128, 1000, 1514),  # size
        (True, False),  # is_udp
        (0, 5_000, LIMIT - 1000, LIMIT - 999, LIMIT),  # data_bytes
        (True, False),  # trimming
    )
    for dscp, size, udp, queued, trimming in grid:
        args = (dscp, size, udp, queued, LIMIT, trimming, TRIMMABLE, TRIMMED_DSCP, CONTROL)
        assert decide(*args) == reference(*args), (
            f"dscp={dscp} size={size} is_udp={udp} data_bytes={queued} trimming={trimming}"
        )


# ----- inside the switch's queue ---------------------------------------------------------------


def frame(size: int, dscp: int = TRIMMABLE, udp: bool = True) -> bytearray:
    l4 = UDP(sport=49152, dport=ROCEV2_UDP_PORT) if udp else TCP(sport=49152, dport=80)
    hdr = Ether() / IP(src="10.1.1.1", dst="10.1.2.1", tos=dscp << 2) / l4
    return bytearray(bytes(hdr / (b"d" * (size - len(bytes(hdr))))))


def test_queue_trims_with_your_decision_and_sends_the_header_first(decide):
    q = TrimmingQueue(4_000, 2_000, 4_000, trim_bytes=128, decide=decide)
    for _ in range(4):
        assert q.enqueue(frame(1000)) == ENQUEUED
    assert q.enqueue(frame(1000)) == TRIMMED  # the queue is full
    assert q.enqueue(frame(100, dscp=CONTROL)) == ENQUEUED
    first = q.dequeue()
    assert len(first) == 128 and frames.dscp(first) == TRIMMED_DSCP  # header overtakes data
    assert frames.dscp(q.dequeue()) == CONTROL
    assert q.trims == 1 and q.drops_queue_full == 0 and len(q.data) == 4


def test_queue_drops_with_your_decision_when_trimming_is_off(decide):
    q = TrimmingQueue(4_000, 2_000, 4_000, trimming=False, decide=decide)
    for _ in range(4):
        assert q.enqueue(frame(1000)) == ENQUEUED
    assert q.enqueue(frame(1000)) == DROP_QUEUE_FULL
    assert q.enqueue(frame(1000, udp=False)) == DROP_QUEUE_FULL
    assert q.trims == 0 and q.drops_queue_full == 2

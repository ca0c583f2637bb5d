"""Port: shaping, propagation delay, catch-up after idle, impairments -- on a virtual clock.

`offer()` and `service()` take the time explicitly, so these tests drive the port with exact
timestamps and record the time at which every frame reaches `transmit` (the wire).
"""

from __future__ import annotations

import functools
import itertools
import math
import random

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from switch.port import (
    CATCH_UP_S,
    DROP_BLACKHOLE,
    DROP_LINK_DOWN,
    DROP_LOSS,
    DROP_TX_ERROR,
    EARLY_S,
    QUEUE_MAX_INTERVAL_S,
    Port,
    QueueMaxima,
    arrival_slack,
    egress_timing,
)
from switch.queueing import TrimmingQueue


@functools.cache
def _frame(size: int, dscp: int) -> bytes:
    hdr = Ether() / IP(src="10.1.1.1", dst="10.1.2.1", tos=dscp << 2) / UDP(sport=9, dport=4791)
    return bytes(hdr / (b"d" * (size - len(bytes(hdr)))))


def mk(size: int = 1000, dscp: int = 0) -> bytearray:
    return bytearray(_frame(size, dscp))


class Wire:
    """Recording transmit with a clock the test sets before each call into the port."""

    def __init__(self, ok: bool = True) -> None:
        self.now = 0.0
        self.sent: list[tuple[float, bytes]] = []
        self.ok = ok

    def __call__(self, frame) -> bool:
        self.sent.append((self.now, bytes(frame)))
        return self.ok

    @property
    def times(self) -> list[float]:
        return [t for t, _ in self.sent]


def make_port(
    rate: float = 100.0, delay_us: float = 0.0, queue_bytes: int = 10_000_000, seed: int = 1, **qkw
) -> tuple[Port, Wire]:
    wire = Wire()
    q = TrimmingQueue(queue_bytes, max(queue_bytes // 10, 8192), queue_bytes, **qkw)
    port = Port(0, "p0", b"\2" * 6, b"\4" * 6, rate, delay_us, q, wire, random.Random(seed))
    return port, wire


def offer(port: Port, wire: Wire, frame: bytearray, now: float) -> None:
    wire.now = now
    port.offer(frame, now)


def run(port: Port, wire: Wire, now: float, until: float = math.inf) -> float:
    """Call service() exactly when the port asks to be called again; returns the last time."""
    t: float | None = now
    while t is not None and t <= until:
        now = t
        wire.now = t
        t = port.service(t)
    return now


def test_back_to_back_spacing_and_long_run_rate() -> None:
    rate = 100.0
    port, wire = make_port(rate)
    rng = random.Random(5)
    sizes = [rng.choice([64, 128, 600, 1000, 1500]) for _ in range(3000)]
    for s in sizes:
        offer(port, wire, mk(s), 0.0)
    run(port, wire, 0.0)
    assert len(wire.sent) == len(sizes)
    assert [len(f) for _, f in wire.sent] == sizes  # FIFO
    t = wire.times
    # Each frame leaves when its own serialisation ends (virtual time: cumulative len*8/rate),
    # or up to EARLY_S before it -- never later, and never earlier than that.
    ends = list(itertools.accumulate(s * 8 / (rate * 1e6) for s in sizes))
    for k in range(len(t)):
        assert ends[k] - EARLY_S - 1e-12 <= t[k] <= ends[k] + 1e-12, k
    assert t == sorted(t)
    measured = sum(sizes[1:]) * 8 / (t[-1] - t[0]) / 1e6
    assert measured == pytest.approx(rate, rel=0.01)


@pytest.mark.parametrize("rate", [10.0, 100.0, 200.0, 1000.0])
def test_long_run_rate_under_timer_jitter(rate: float) -> None:
    """An event loop whose timers fire late (by < CATCH_UP_S) still holds the rate within 1%:
    the frames that waited in the queue catch up. Frames arrive at their own times."""
    port, wire = make_port(rate)
    rng = random.Random(int(rate))
    size = 1400
    n_frames = 4000
    offered = 0
    next_offer = 0.0
    wake = None  # when the late timer fires
    now = 0.0
    while offered < n_frames or wake is not None:
        # Offer faster than the line rate so the port is always backlogged.
        if offered < n_frames and (wake is None or next_offer <= wake):
            now = max(now, next_offer)
            offer(port, wire, mk(size), now)
            offered += 1
            next_offer += size * 8 / (rate * 1e6) * 0.8
            if wake is None and (port.queue.data or port.inflight):
                wake = port.busy_until + rng.uniform(0, CATCH_UP_S * 0.8)
            continue
        now = max(now, wake)
        wire.now = now
        deadline = port.service(now)
        wake = None if deadline is None else deadline + rng.uniform(0, CATCH_UP_S * 0.8)
    assert len(wire.sent) == n_frames
    t = wire.times
    measured = (n_frames - 1) * size * 8 / (t[-1] - t[0]) / 1e6
    assert measured == pytest.approx(rate, rel=0.01)


def test_a_frame_on_an_idle_link_is_not_sent_in_the_past() -> None:
    """A sparse stream on a dilated 10 Gbps, 1 us link: every frame takes its serialisation and
    the link's delay. Starting an arrival back at the previous frame's end (the whole catch-up
    budget, 4 us at N = 500) once sent ACKs 1.2 us apart across the link in 0 us."""
    port, wire = make_port(10_000.0, delay_us=1.0)
    full = 1514 * 8 / 10e9
    port.early, port.catch_up = egress_timing(500.0, full)
    port.slack = arrival_slack(port.catch_up, full, port.early)
    assert port.slack == pytest.approx(full / 2)
    ser = 64 * 8 / 10e9
    for i in range(200):
        t = i * 1.2e-6
        sent = len(wire.sent)
        offer(port, wire, mk(64), t)
        run(port, wire, t, until=t + 1.19e-6)
        assert len(wire.sent) == sent + 1
        assert wire.sent[-1][0] - t >= ser + 1e-6 - port.early - 1e-12


def max_frames_in_window(times: list[float], window: float) -> int:
    best, j = 0, 0
    for i, t in enumerate(times):
        while times[j] < t - window:
            j += 1
        best = max(best, i - j + 1)
    return best


@pytest.mark.parametrize("late_s", [CATCH_UP_S * 0.5, CATCH_UP_S, 0.002, 0.05, 3.0])
def test_no_burst_after_idle_beyond_catch_up(late_s: float) -> None:
    rate, size = 100.0, 1000
    ser = size * 8 / (rate * 1e6)
    port, wire = make_port(rate)
    # Some traffic long ago, then idle.
    for _ in range(3):
        offer(port, wire, mk(size), 0.0)
    run(port, wire, 0.0)
    wire.sent.clear()
    start = 10.0
    for _ in range(200):
        offer(port, wire, mk(size), start)
    # The loop wakes up late: the port may catch up at most CATCH_UP_S of backlog at once.
    wake = start + late_s
    wire.now = wake
    port.service(wake)
    burst = sum(1 for t in wire.times if t == wake)
    assert burst <= math.floor(CATCH_UP_S / ser) + 1
    run(port, wire, wake)
    assert len(wire.sent) == 200
    # Never more than the line rate allows in any window, beyond the catch-up allowance.
    for window in (ser, 10 * ser, 100 * ser):
        assert max_frames_in_window(wire.times, window) <= (window + CATCH_UP_S) / ser + 2


def test_catch_up_within_allowance_keeps_exact_schedule() -> None:
    """Late by less than CATCH_UP_S: frames keep their virtual departure times (no rate loss)."""
    rate, size = 100.0, 1000
    ser = size * 8 / (rate * 1e6)
    port, wire = make_port(rate)
    for _ in range(50):
        offer(port, wire, mk(size), 0.0)
    late = CATCH_UP_S * 0.9
    t = 0.0
    while (nxt := port.service(t)) is not None:
        t = nxt + late
        wire.now = t
    # The last frame's virtual departure equals the ideal back-to-back schedule.
    assert port.busy_until == pytest.approx(50 * ser, rel=1e-9)


def test_blackhole_counted_and_link_stays_up() -> None:
    port, wire = make_port()
    port.blackhole = True
    for _ in range(20):
        offer(port, wire, mk(), 0.0)
    run(port, wire, 0.0)
    assert wire.sent == [] and port.up
    assert port.counters.drops == {DROP_BLACKHOLE: 20}
    assert port.counters.tx_packets == 0


def test_loss_counted_and_roughly_right() -> None:
    port, wire = make_port(seed=42)
    port.loss = 0.25
    n = 4000
    for _ in range(n):
        offer(port, wire, mk(200), 0.0)
    run(port, wire, 0.0)
    lost = port.counters.drops[DROP_LOSS]
    assert lost + len(wire.sent) == n and set(port.counters.drops) == {DROP_LOSS}
    assert abs(lost - n * 0.25) < 5 * math.sqrt(n * 0.25 * 0.75)
    assert port.counters.tx_packets == len(wire.sent)


def test_full_loss() -> None:
    port, wire = make_port()
    port.loss = 1.0
    for _ in range(10):
        offer(port, wire, mk(), 0.0)
    run(port, wire, 0.0)
    assert wire.sent == [] and port.counters.drops == {DROP_LOSS: 10}


def test_down_flushes_queue_and_inflight_and_drops_offers() -> None:
    port, wire = make_port(delay_us=1000.0)
    for _ in range(10):
        offer(port, wire, mk(), 0.0)
    port.service(0.0005)  # some frames serialised, now in flight
    assert port.inflight and port.queue.data
    port.set_down()
    assert port.counters.drops == {DROP_LINK_DOWN: 10}
    assert len(port.queue) == 0 and not port.inflight
    offer(port, wire, mk(), 1.0)
    assert port.counters.drops == {DROP_LINK_DOWN: 11}
    run(port, wire, 1.0)
    assert wire.sent == []


def test_kernel_refusal_is_tx_error_not_tx() -> None:
    port, wire = make_port()
    wire.ok = False
    for _ in range(3):
        offer(port, wire, mk(), 0.0)
    run(port, wire, 0.0)
    assert port.counters.drops == {DROP_TX_ERROR: 3} and port.counters.tx_packets == 0


def test_degrade_changes_spacing_and_heal_restores_nominal() -> None:
    port, wire = make_port(rate=100.0, delay_us=20.0)
    port.set_rate(10.0)
    port.delay_s = 0.005
    port.blackhole = port.rx_blackhole = True
    port.loss = port.rx_loss = 0.5
    port.heal()
    s = port.snapshot()["state"]
    assert s == {
        "up": True,
        "blackhole": False,
        "loss_pct": 0.0,
        "rx_up": True,
        "rx_blackhole": False,
        "rx_loss_pct": 0.0,
        "rate_mbps": 100.0,
        "delay_us": pytest.approx(20.0),
        "impair": None,
    }
    # Degraded: 10 Mbps spacing; healed: 100 Mbps spacing.
    port.set_rate(10.0)
    for _ in range(20):
        offer(port, wire, mk(1250), 0.0)
    run(port, wire, 0.0)
    t = wire.times
    assert all(
        b - a == pytest.approx(0.001, abs=EARLY_S * 1.01) for a, b in zip(t, t[1:], strict=False)
    )
    assert (t[-1] - t[0]) / (len(t) - 1) == pytest.approx(0.001, rel=0.01)
    port.heal()
    wire.sent.clear()
    for _ in range(20):
        offer(port, wire, mk(1250), 10.0)
    run(port, wire, 10.0)
    t = wire.times
    assert all(
        b - a == pytest.approx(0.0001, abs=EARLY_S * 1.01) for a, b in zip(t, t[1:], strict=False)
    )
    assert (t[-1] - t[0]) / (len(t) - 1) == pytest.approx(0.0001, rel=0.02)
    assert t[0] == pytest.approx(10.0 + 0.0001 + 20e-6, abs=EARLY_S)


def test_heal_does_not_restore_carrier() -> None:
    port, _ = make_port()
    port.set_down()
    port.heal()
    assert port.up is False


def test_port_trims_when_its_queue_overflows() -> None:
    port, wire = make_port(rate=10.0, queue_bytes=5000, trim_bytes=128)
    for _ in range(10):
        offer(port, wire, mk(1000, dscp=10), 0.0)
    for _ in range(3):
        offer(port, wire, mk(1000, dscp=0), 0.0)
    run(port, wire, 0.0)
    snap = port.snapshot()
    # The first frame goes straight to the wire, five fill the 5000 B queue, four are trimmed.
    assert snap["trims"] == 4 and snap["drops"] == {"queue_full": 3}
    assert [len(f) for _, f in wire.sent] == [1000] + [128] * 4 + [1000] * 5
    assert snap["tx_packets"] == 10 and snap["tx_bytes"] == 6000 + 4 * 128
    assert snap["max_queue_bytes"] == 5000


def test_snapshot_keys() -> None:
    port, _ = make_port()
    snap = port.snapshot()
    for key in (
        "rx_packets",
        "rx_bytes",
        "tx_packets",
        "tx_bytes",
        "drops",
        "trims",
        "ecn_marks",
        "queue_bytes",
        "prio_queue_bytes",
        "max_queue_bytes",
        "max_prio_queue_bytes",
        "state",
    ):
        assert key in snap


# ----- per-interval queue maxima ----------------------------------------------------------------


def merged(*drains: list[list[float]]) -> dict[float, int]:
    """What a reader of repeated drains keeps: per interval start, the largest value seen."""
    out: dict[float, int] = {}
    for d in drains:
        for t, b in d:
            out[t] = max(out.get(t, 0), b)
    return out


def test_queue_maxima_match_a_brute_force_reference() -> None:
    """Random arrivals and service on a slow port: the drained maxima equal, interval by
    interval, the deepest data queue measured after every offer; drains mid-run lose nothing."""
    rng = random.Random(7)
    port, wire = make_port(rate=20.0, queue_bytes=64_000)
    reference: dict[float, int] = {}
    drains = []
    now = 0.0
    for i in range(3000):
        now += rng.expovariate(1 / 0.00025) if rng.random() < 0.9 else rng.uniform(0.01, 0.05)
        run(port, wire, now, until=now)
        offer(port, wire, mk(rng.choice([200, 1000, 1500])), now)
        depth = port.queue.data_bytes
        if depth:
            start = round((now // QUEUE_MAX_INTERVAL_S) * QUEUE_MAX_INTERVAL_S, 6)
            reference[start] = max(reference.get(start, 0), depth)
        if i % 250 == 0:
            drains.append(port.qmax.drain())
    drains.append(port.qmax.drain())
    got = merged(*drains)
    assert got == reference
    assert max(got.values()) > 50_000  # the queue did fill (near its 64 kB limit)
    assert port.qmax.lost == 0


def test_drain_empties_closed_intervals_and_repeats_the_open_one() -> None:
    m = QueueMaxima(interval_s=0.01)
    for now, depth in ((0.001, 100), (0.004, 900), (0.012, 300), (0.015, 200)):
        if now >= m.until:
            m.roll(now)
        m.peak = max(m.peak, depth)
    assert m.drain() == [[0.0, 900], [0.01, 300]]
    assert m.drain() == [[0.01, 300]]  # closed ones gone; the open one is repeated
    m.roll(0.031)  # an arrival two intervals later closes it
    assert m.drain() == [[0.01, 300]] and m.drain() == []


def test_a_full_ring_drops_the_oldest_and_counts_them() -> None:
    m = QueueMaxima(interval_s=0.01, size=4)
    for k in range(7):
        m.roll(k * 0.01)
        m.peak = 10 + k
    assert [b for _, b in m.drain()] == [12, 13, 14, 15, 16]  # 4 closed, then the open one
    assert m.lost == 2


def test_an_idle_port_sending_at_once_records_no_queue() -> None:
    port, wire = make_port(rate=100.0)
    offer(port, wire, mk(1000), 0.0)  # the link is idle: serialises at once, no queue
    offer(port, wire, mk(1000), 1.0)
    assert port.qmax.drain() == []

"""ActivePorts: serving only the ports that are due changes nothing a wire sees.

The reference is what the loop did before: serve every busy port on every pass, in the order
of `seq`. Both drive identical ports through the same random arrivals and wake-ups; every
frame must reach its wire at the same virtual time in the same order, and the heap must have
called `Port.service` fewer times.
"""

from __future__ import annotations

import random

import pytest

from switch.egress_timers import ActivePorts
from switch.port import Port
from switch.queueing import TrimmingQueue

FRAME = bytes(range(256)) * 5  # 1280 B; the port never parses it


class Wire:
    def __init__(self, clock: list[float], log: list, name: str) -> None:
        self.clock, self.log, self.name = clock, log, name

    def __call__(self, frame) -> bool:
        self.log.append((self.clock[0], self.name, bytes(frame[:4])))
        return True


class Counting(Port):
    """A Port that counts its `service` calls (a subclass: Port has slots)."""

    __slots__ = ()
    calls = [0]

    def service(self, now: float) -> float | None:
        self.calls[0] += 1
        return Port.service(self, now)


class ScanAll:
    """The old pass: every busy port, in `seq` order, dropping the idle ones."""

    def __init__(self) -> None:
        self.active: set[Port] = set()

    def serve(self, now: float) -> float | None:
        deadline = None
        for port in sorted(self.active, key=lambda p: p.seq):
            t = port.service(now)
            if t is None:
                self.active.discard(port)
            elif deadline is None or t < deadline:
                deadline = t
        return deadline


def build(active, rng_seed: int, early: float) -> tuple[list[Port], list, list[float]]:
    clock = [0.0]
    log: list = []
    ports = []
    for i in range(12):
        rate = [0.0, 10_000.0, 40_000.0, 1_000.0][i % 4]
        delay = [0.0, 1.0, 0.5][i % 3]
        q = TrimmingQueue(12_000, 4_000, 6_000, trim_bytes=64)
        p = Counting(i, f"p{i}", b"\2" * 6, b"\4" * 6, rate, delay, q, Wire(clock, log, f"p{i}"),
                     random.Random(rng_seed))  # fmt: skip
        p.early = early
        p.catch_up = 4e-6
        p.slack = 0.5e-6
        p.active = active
        ports.append(p)
    return ports, log, clock


def drive(server, seed: int, early: float) -> tuple[list, int]:
    Counting.calls[0] = 0
    ports, log, clock = build(server.active if isinstance(server, ScanAll) else server, 1, early)
    serve = server.serve
    rng = random.Random(seed)
    now = 0.0
    deadline = None
    for k in range(3000):
        gap = rng.choice([0.0, 0.05e-6, 0.3e-6, 1.2e-6, 5e-6])
        arrival = now + gap
        # Wake for every departure due before the next arrival, as the loop does.
        while deadline is not None and deadline <= arrival:
            now = clock[0] = deadline
            deadline = serve(now)
        now = clock[0] = arrival
        port = ports[rng.randrange(len(ports))]
        frame = bytearray(FRAME[: rng.choice([64, 300, 1280])])
        frame[:4] = k.to_bytes(4, "big")
        port.offer(frame, now)
        deadline = serve(now)
    while deadline is not None:
        now = clock[0] = deadline
        deadline = serve(now)
    assert all(not p.inflight and not p.queue.data and not p.queue.prio for p in ports)
    return log, Counting.calls[0]


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("early", [0.0, 0.15e-6])
def test_the_heap_sends_what_serving_every_busy_port_sends(seed, early):
    old, old_calls = drive(ScanAll(), seed, early)
    new, new_calls = drive(ActivePorts(), seed, early)
    assert len(old) > 2000  # most frames were sent, not all trimmed away
    assert new == old
    assert new_calls < old_calls / 2, (new_calls, old_calls)


def test_a_port_given_earlier_work_is_served_before_its_scheduled_departure():
    """A port whose heap entry is a frame's arrival at the far end (in flight for 10 us) that
    queues a frame due to start serialising sooner must be served then, not at the entry."""
    active = ActivePorts()
    clock = [0.0]
    log: list = []
    q = TrimmingQueue(1_000_000, 100_000, 1_000_000)
    p = Port(0, "p0", b"\2" * 6, b"\4" * 6, 10_000.0, 10.0, q, Wire(clock, log, "p0"),
             random.Random(1))  # fmt: skip
    p.active = active
    p.early, p.catch_up, p.slack = 0.0, 0.1e-6, 0.0  # no catch-up to hide a late service
    frame = FRAME[:1250]  # 1 us at 10 Gbps
    p.offer(bytearray(frame), 0.0)
    assert active.serve(0.0) == pytest.approx(11e-6)  # serialised by 1 us, then 10 us of flight
    clock[0] = 0.5e-6
    p.offer(bytearray(frame), 0.5e-6)  # queued behind the first: starts at 1 us
    deadline = active.serve(0.5e-6)
    assert deadline == pytest.approx(1e-6)
    while deadline is not None:
        clock[0] = deadline
        deadline = active.serve(deadline)
    assert [t for t, _, _ in log] == pytest.approx([11e-6, 12e-6])
    assert not active and not active.heap


def test_the_loop_keeps_the_largest_lateness_among_thousands_of_samples():
    """One stall among thousands of on-time wake-ups: the P99 hides it, the maximum keeps it
    (switch.loop._record_late; the counters report `timer_late_us_max`)."""
    from contracts.stats import LateHistogram
    from switch.loop import _record_late

    class Sw:
        late = LateHistogram()

    sw = Sw()
    _record_late([sw], 250.0)
    for _ in range(8192):
        _record_late([sw], 0.01)
    assert sw.late.n == 8193 and sw.late.max_us == 250.0
    assert sw.late.percentile(99) == pytest.approx(0.01, rel=0.023)


def test_lateness_is_sampled_when_a_due_deadline_is_served_whatever_woke_the_loop():
    """The overloaded case: the loop wakes late and finds frames waiting. The sample is taken
    at the pass over the timers (switch.loop.serve_due), not only after an empty timed wait;
    a deadline not yet due is not a sample."""
    from contracts.stats import LateHistogram
    from switch.loop import serve_due

    class Sw:
        late = LateHistogram()

    sw = Sw()
    served = []

    def service(now):
        served.append(now)
        return now + 1e-3

    assert serve_due([sw], service, now=10.0, deadline=None) == pytest.approx(10.001)
    assert sw.late.n == 0  # nothing was due
    serve_due([sw], service, now=10.0005, deadline=10.001)
    assert sw.late.n == 0  # early: not late
    serve_due([sw], service, now=10.003, deadline=10.001)
    assert sw.late.n == 1 and sw.late.max_us == pytest.approx(2000.0)
    assert served == [10.0, 10.0005, 10.003]

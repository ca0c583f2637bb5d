"""The endpoint loop's timer lateness, the verdict's input: a wake-up after the timer it slept
for is late; a timer the transport arms already overdue is not the loop's lateness.

Why: in the REPS grid's 8:1 incast with a dead spine (2026-12-07), endpoint processes were
judged 1-8 s (real) late while the machine was idle and a probe on each core woke on time.
Their worst wake-ups had asked select() for a negative timeout: the transport had armed a
timer already overdue (an RTO of a packet sent long before), and the loop counted from the
timer's due time, not from when it could know of it."""

from __future__ import annotations

from contracts.stats import LateHistogram
from endpoint.process import EndpointProcess


class _Transport:
    """next_timer() returns whatever the test sets; on_timer() clears it."""

    def __init__(self) -> None:
        self.timer: float | None = None

    def next_timer(self) -> float | None:
        return self.timer

    def on_timer(self, now: float) -> None:
        self.timer = None


class _Tx:
    backlog = 0


class _Control:
    """No caller waiting on a job."""

    def next_wait_deadline(self) -> None:
        return None


def _loop(start: float) -> tuple[EndpointProcess, _Transport]:
    """An EndpointProcess with no sockets: only what `work` reads, and a turn that does no
    I/O (the datagrams, the application and the transmit pass are the loop's other tests')."""
    p = object.__new__(EndpointProcess)
    ep = _Transport()
    p.ep, p.tx, p.loops, p.dilation = ep, _Tx(), 0, 1000.0
    p.control = _Control()
    p.clock = lambda: start
    p.timer_late = LateHistogram()
    p._probes, p._next_bin = [], start + 1.0
    p.rx, p.cfg = [], type("Cfg", (), {"rx_coalesce_us": 0, "rx_batch": 8})()
    p.begin()
    p._drain_rx = lambda batch, limit, now: 0
    p._app = lambda now: None
    p._transmit = lambda now: None
    p._serve_control = lambda readable, writable, rx_set: None
    return p, ep


def test_a_wake_up_after_its_timer_is_late_by_the_difference():
    p, ep = _loop(10.0)
    ep.timer = 10.000_010  # due in 10 µs
    deadline, _ = p.work(10.0)
    assert deadline == ep.timer
    p.woken([], [], 10.000_013)
    p.work(10.000_013)  # woke 3 µs after the timer
    assert p.timer_late.n == 1 and abs(p.timer_late.max_us - 3.0) < 1e-6
    assert p.timer_armed_overdue == 0
    worst = p.timer_late_worst
    assert worst is not None and abs(worst["overslept_us"] - 3.0) < 1e-6


def test_a_timer_armed_overdue_counts_from_the_turn_that_armed_it():
    p, ep = _loop(10.0)
    ep.timer = 9.999_920  # armed 80 µs overdue during the turn at t = 10 s
    deadline, _ = p.work(10.0)
    assert deadline < 10.0  # the loop does not sleep: select gets a timeout of 0
    assert p.timer_armed_overdue == 1 and abs(p.timer_armed_overdue_us_max - 80.0) < 1e-6
    p.woken([], [], 10.000_002)
    p.work(10.000_002)
    # 2 µs: the turn that armed it and the select, not the 82 µs since it was due.
    assert p.timer_late.n == 1 and abs(p.timer_late.max_us - 2.0) < 1e-6, p.timer_late.max_us

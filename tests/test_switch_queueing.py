"""TrimmingQueue: the whole egress policy -- priority classes, byte limits, trimming, ECN."""

from __future__ import annotations

import functools
import random

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether
from scapy.utils import checksum

from switch import frames
from switch.queueing import (
    DROP,
    DROP_PRIO_FULL,
    DROP_QUEUE_FULL,
    ENQUEUE,
    ENQUEUED,
    PRIORITY,
    TRIM,
    TRIM_DECISION_ENV,
    TRIMMED,
    TrimmingQueue,
    decide,
    decision_from_env,
    load_decision,
)

TRIMMABLE, TRIMMED_DSCP, CONTROL = 10, 11, 46


def mk(size: int = 1000, dscp: int = TRIMMABLE, ecn: int = 0, proto: str = "udp") -> bytearray:
    """A valid frame of exactly `size` bytes (a fresh copy each call)."""
    return bytearray(_frame(size, dscp, ecn, proto))


@functools.cache
def _frame(size: int, dscp: int, ecn: int, proto: str) -> bytes:
    l4 = UDP(sport=1234, dport=4791) if proto == "udp" else TCP(sport=1234, dport=80)
    hdr = Ether() / IP(src="10.1.1.1", dst="10.1.2.1", tos=(dscp << 2) | ecn) / l4
    pad = size - len(bytes(hdr))
    assert pad >= 0
    f = bytes(hdr / (b"d" * pad))
    assert len(f) == size
    return f


def queue(**kw) -> TrimmingQueue:
    args = dict(data_limit_bytes=10_000, prio_limit_bytes=2_000, ecn_threshold_bytes=5_000)
    args.update(kw)
    return TrimmingQueue(**args)


def fill(q: TrimmingQueue, n: int, size: int = 1000) -> None:
    for _ in range(n):
        assert q.enqueue(mk(size, dscp=0)) == ENQUEUED


@pytest.mark.parametrize("dscp", [CONTROL, TRIMMED_DSCP])
def test_control_and_trimmed_go_to_priority_queue(dscp: int) -> None:
    q = queue()
    f = mk(200, dscp=dscp)
    assert q.enqueue(f) == ENQUEUED
    assert list(q.prio) == [f] and not q.data
    assert q.prio_bytes == 200 and q.data_bytes == 0
    # Also when the data queue is full: priority traffic is never trimmed or dropped for it.
    fill(q, 10)
    g = mk(200, dscp=dscp)
    assert q.enqueue(g) == ENQUEUED
    assert q.prio[-1] is g and bytes(g) == bytes(mk(200, dscp=dscp))
    assert q.trims == 0 and q.drops_queue_full == 0


def test_data_fills_exactly_up_to_byte_limit() -> None:
    q = queue(data_limit_bytes=10_000)
    for _ in range(10):
        assert q.enqueue(mk(1000, dscp=0)) == ENQUEUED
    assert q.data_bytes == 10_000 == q.max_data_bytes and len(q.data) == 10
    assert q.enqueue(mk(1000, dscp=0)) == DROP_QUEUE_FULL
    assert q.enqueue(mk(60, dscp=0)) == DROP_QUEUE_FULL
    q2 = queue(data_limit_bytes=10_000)
    fill(q2, 9)
    assert q2.enqueue(mk(999, dscp=0)) == ENQUEUED  # 9999 fits
    assert q2.enqueue(mk(60, dscp=0)) == DROP_QUEUE_FULL
    assert q2.data_bytes == 9999


def test_overflow_trims_trimmable_udp_onto_priority_queue() -> None:
    q = queue(trim_bytes=128)
    fill(q, 10)
    orig = mk(1000, dscp=TRIMMABLE, ecn=2)
    expected = frames.trim(bytearray(orig), 128, TRIMMED_DSCP)
    assert q.enqueue(orig) == TRIMMED
    assert q.trims == 1 and q.drops_queue_full == 0
    assert len(q.data) == 10 and q.data_bytes == 10_000
    assert len(q.prio) == 1 and q.prio_bytes == 128
    header = q.prio[0]
    assert header == expected and len(header) == 128
    assert frames.dscp(header) == TRIMMED_DSCP and header[frames.OFF_TOS] & 3 == 2
    assert checksum(bytes(header[14:34])) == 0
    ip = Ether(bytes(header))[IP]
    assert ip.len == 114 and ip[UDP].len == 94 and ip[UDP].chksum == 0
    # The trimmed header overtakes the data that filled the queue.
    assert q.dequeue() is header


@pytest.mark.parametrize(
    ("frame", "why"),
    [
        (mk(1000, dscp=0), "non-trimmable DSCP"),
        (mk(1000, dscp=12), "other DSCP"),
        (mk(1000, dscp=TRIMMABLE, proto="tcp"), "TCP with the trimmable DSCP"),
    ],
)
def test_overflow_tail_drops_non_trimmable(frame: bytearray, why: str) -> None:
    q = queue()
    fill(q, 10)
    assert q.enqueue(frame) == DROP_QUEUE_FULL, why
    assert q.drops_queue_full == 1 and q.trims == 0
    assert not q.prio and q.data_bytes == 10_000


def test_trimming_off_drops_instead() -> None:
    q = queue(trimming=False)
    fill(q, 10)
    assert q.enqueue(mk(1000)) == DROP_QUEUE_FULL
    assert q.drops_queue_full == 1 and q.trims == 0 and not q.prio


def test_priority_queue_overflow_counted() -> None:
    q = queue(prio_limit_bytes=1000)
    for _ in range(5):
        assert q.enqueue(mk(200, dscp=CONTROL)) == ENQUEUED
    assert q.prio_bytes == 1000
    assert q.enqueue(mk(60, dscp=CONTROL)) == DROP_PRIO_FULL
    assert q.enqueue(mk(60, dscp=TRIMMED_DSCP)) == DROP_PRIO_FULL
    assert q.drops_prio_full == 2 and q.prio_bytes == 1000 == q.max_prio_bytes
    # A trim that finds the priority queue full is a priority drop, not a trim.
    fill(q, 10)
    assert q.enqueue(mk(1000)) == DROP_PRIO_FULL
    assert q.drops_prio_full == 3 and q.trims == 0 and q.drops_queue_full == 0


def test_strict_priority_dequeue_order() -> None:
    q = queue(data_limit_bytes=100_000, prio_limit_bytes=100_000)
    data, prio = [], []
    rng = random.Random(3)
    for i in range(50):
        if rng.random() < 0.4:
            f = mk(100 + i, dscp=rng.choice([CONTROL, TRIMMED_DSCP]))
            prio.append(f)
        else:
            f = mk(100 + i, dscp=rng.choice([0, TRIMMABLE]))
            data.append(f)
        q.enqueue(f)
    out = []
    while (f := q.dequeue()) is not None:
        out.append(f)
    assert [id(f) for f in out] == [id(f) for f in prio + data]
    assert q.data_bytes == q.prio_bytes == 0 and len(q) == 0
    # Priority arriving while data waits is served before the remaining data.
    fill(q, 3)
    q.dequeue()
    c = mk(100, dscp=CONTROL)
    q.enqueue(c)
    assert q.dequeue() is c


@pytest.mark.parametrize("ecn", [1, 2])
def test_ecn_marks_only_above_threshold(ecn: int) -> None:
    q = queue(data_limit_bytes=20_000, ecn_threshold_bytes=5_000)
    marked = []
    for k in range(20):
        f = mk(1000, dscp=TRIMMABLE, ecn=ecn)
        backlog = q.data_bytes
        assert q.enqueue(f) == ENQUEUED
        marked.append(f[frames.OFF_TOS] & 3 == 3)
        assert marked[-1] == (backlog > 5_000), k
        assert frames.ip_checksum_ok(f)
    assert q.ecn_marks == sum(marked) == 14


@pytest.mark.parametrize("ecn", [0, 3])
def test_ecn_never_marks_not_ect_and_does_not_count_ce(ecn: int) -> None:
    q = queue(data_limit_bytes=20_000, ecn_threshold_bytes=1_000)
    for _ in range(20):
        f = mk(1000, dscp=TRIMMABLE, ecn=ecn)
        before = bytes(f)
        q.enqueue(f)
        assert bytes(f) == before
    assert q.ecn_marks == 0


def test_priority_traffic_is_not_ecn_marked() -> None:
    q = queue(ecn_threshold_bytes=0)
    fill(q, 5)
    f = mk(200, dscp=CONTROL, ecn=2)
    q.enqueue(f)
    assert f[frames.OFF_TOS] & 3 == 2 and q.ecn_marks == 0


def test_flush() -> None:
    q = queue()
    fill(q, 4)
    q.enqueue(mk(100, dscp=CONTROL))
    assert q.flush() == 5
    assert len(q) == 0 and q.data_bytes == q.prio_bytes == 0 and q.dequeue() is None


# ----- byte accounting under random sequences ------------------------------------------------

SIZES = st.integers(60, 1514)
KINDS = st.sampled_from(["data", "trimmable", "tcp", "control", "trimmed", "ect"])


def make_kind(kind: str, size: int) -> bytearray:
    size = max(size, 60)
    return {
        "data": lambda: mk(size, dscp=0),
        "trimmable": lambda: mk(size, dscp=TRIMMABLE),
        "tcp": lambda: mk(size, dscp=TRIMMABLE, proto="tcp"),
        "control": lambda: mk(size, dscp=CONTROL),
        "trimmed": lambda: mk(size, dscp=TRIMMED_DSCP),
        "ect": lambda: mk(size, dscp=TRIMMABLE, ecn=2),
    }[kind]()


class QueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.q = TrimmingQueue(6_000, 2_000, 3_000, trim_bytes=128)
        self.offered = 0
        self.dequeued = 0
        self.model_data: list[int] = []
        self.model_prio: list[int] = []

    @rule(kind=KINDS, size=SIZES)
    def enqueue(self, kind: str, size: int) -> None:
        q = self.q
        f = make_kind(kind, size)
        n = len(f)
        prio_class = frames.dscp(f) in (CONTROL, TRIMMED_DSCP)
        data_fits = q.data_bytes + n <= q.data_limit
        trimmed_len = min(n, 128)
        prio_fits = q.prio_bytes + (n if prio_class else trimmed_len) <= q.prio_limit
        verdict = q.enqueue(f)
        self.offered += 1
        if prio_class:
            assert verdict == (ENQUEUED if prio_fits else DROP_PRIO_FULL)
            if verdict == ENQUEUED:
                self.model_prio.append(n)
        elif data_fits:
            assert verdict == ENQUEUED
            self.model_data.append(n)
        elif kind in ("trimmable", "ect"):
            assert verdict == (TRIMMED if prio_fits else DROP_PRIO_FULL)
            if verdict == TRIMMED:
                self.model_prio.append(trimmed_len)
        else:
            assert verdict == DROP_QUEUE_FULL

    @rule()
    def dequeue(self) -> None:
        f = self.q.dequeue()
        if f is None:
            assert not self.model_prio and not self.model_data
            return
        self.dequeued += 1
        expected = self.model_prio.pop(0) if self.model_prio else self.model_data.pop(0)
        assert len(f) == expected

    @rule()
    def flush(self) -> None:
        n = self.q.flush()
        assert n == len(self.model_prio) + len(self.model_data)
        self.dequeued += n
        self.model_prio.clear()
        self.model_data.clear()

    @invariant()
    def bytes_add_up(self) -> None:
        q = self.q
        assert q.data_bytes == sum(len(f) for f in q.data) == sum(self.model_data)
        assert q.prio_bytes == sum(len(f) for f in q.prio) == sum(self.model_prio)
        assert 0 <= q.data_bytes <= q.data_limit and 0 <= q.prio_bytes <= q.prio_limit
        assert q.max_data_bytes >= q.data_bytes and q.max_prio_bytes >= q.prio_bytes
        assert q.max_data_bytes <= q.data_limit and q.max_prio_bytes <= q.prio_limit
        # Every offered frame is queued, gone (dequeued/flushed) or counted as dropped.
        drops = q.drops_queue_full + q.drops_prio_full
        assert self.offered == len(q) + self.dequeued + drops


TestQueueMachine = QueueMachine.TestCase
TestQueueMachine.settings = settings(max_examples=60, stateful_step_count=60, deadline=None)


def test_byte_accounting_random_loop() -> None:
    rng = random.Random(11)
    q = TrimmingQueue(20_000, 3_000, 10_000, trim_bytes=128)
    pool = [
        make_kind(k, s)
        for k in ("data", "trimmable", "tcp", "control", "ect")
        for s in (60, 128, 700, 1514)
    ]
    offered = gone = 0
    for _ in range(5000):
        if rng.random() < 0.6:
            q.enqueue(bytearray(rng.choice(pool)))
            offered += 1
        elif q.dequeue() is not None:
            gone += 1
        assert q.data_bytes == sum(map(len, q.data)) and q.prio_bytes == sum(map(len, q.prio))
        assert q.data_bytes <= 20_000 and q.prio_bytes <= 3_000
        assert offered == len(q) + gone + q.drops_queue_full + q.drops_prio_full
    assert q.trims > 0 and q.drops_queue_full > 0 and q.drops_prio_full > 0 and q.ecn_marks > 0


# ----- the pure decision and the inline copy in enqueue ----------------------------------------


def test_decide_is_the_policy() -> None:
    args = dict(data_limit=10_000, trimmable_dscp=10, trimmed_dscp=11, control_dscp=46)
    assert decide(46, 100, True, 10_000, trimming=True, **args) == PRIORITY
    assert decide(11, 100, True, 10_000, trimming=True, **args) == PRIORITY
    assert decide(10, 1000, True, 9_000, trimming=True, **args) == ENQUEUE  # fits exactly
    assert decide(10, 1001, True, 9_000, trimming=True, **args) == TRIM
    assert decide(10, 1001, True, 9_000, trimming=False, **args) == DROP
    assert decide(10, 1001, False, 9_000, trimming=True, **args) == DROP  # not UDP
    assert decide(0, 1001, True, 9_000, trimming=True, **args) == DROP  # not trimmable


@pytest.mark.parametrize("trimming", [True, False])
def test_inline_enqueue_equals_a_queue_that_calls_decide(trimming: bool) -> None:
    """The built-in path's inline copy of `decide` and the plug-in path agree frame by frame."""
    rng = random.Random(5)
    kw = dict(trim_bytes=128, trimming=trimming)
    inline = TrimmingQueue(8_000, 2_000, 4_000, **kw)
    called = TrimmingQueue(8_000, 2_000, 4_000, decide=decide, **kw)
    assert "enqueue" not in vars(inline)  # the built-in binds nothing per instance
    kinds = ("data", "trimmable", "tcp", "control", "trimmed", "ect")
    for _ in range(3000):
        if rng.random() < 0.6:
            f = make_kind(rng.choice(kinds), rng.choice((60, 128, 700, 1514)))
            assert inline.enqueue(bytearray(f)) == called.enqueue(bytearray(f))
        else:
            assert inline.dequeue() == called.dequeue()
    for attr in ("trims", "ecn_marks", "drops_queue_full", "drops_prio_full", "max_data_bytes"):
        assert getattr(inline, attr) == getattr(called, attr), attr
    assert inline.trims > 0 or not trimming


def test_plugged_decision_must_return_a_decision() -> None:
    q = TrimmingQueue(8_000, 2_000, 4_000, decide=lambda *a: "maybe")
    with pytest.raises(ValueError, match="maybe"):
        q.enqueue(mk(100))


def test_load_decision_from_a_file(tmp_path, monkeypatch) -> None:
    path = tmp_path / "mine.py"
    path.write_text("def decide(*args):\n    return 'drop'\n")
    monkeypatch.setenv(TRIM_DECISION_ENV, str(path))
    fn = decision_from_env()
    assert fn(10, 100, True, 0, 10_000, True, 10, 11, 46) == DROP
    monkeypatch.delenv(TRIM_DECISION_ENV)
    assert decision_from_env() is None
    (tmp_path / "empty.py").write_text("x = 1\n")
    with pytest.raises(ImportError, match="decide"):
        load_decision(str(tmp_path / "empty.py"))

"""Stochastic impairments at a port's egress (switch/impairment.py), on a virtual clock.

Every statistic is measured over thousands of frames with a fixed seed and compared with the
model's theory; every frame carries its sequence number in its payload, so what reached the
wire says which frames were lost, duplicated, corrupted or overtaken.
"""

from __future__ import annotations

import json
import math
import random

import pytest

from switch import frames
from switch.control import handle
from switch.impairment import (
    CORRUPTED,
    DROP_BURST_LOSS,
    DROP_EVERY_NTH,
    DUPLICATED,
    JITTERED,
    REORDERED,
    GilbertElliott,
    ImpairedPort,
    ImpairmentSpec,
    impair,
)
from switch.port import Port, egress_timing
from switch.queueing import TrimmingQueue
from tests.test_switch_dataplane import make_switch, udp_frame

SEQ_OFF = 42  # first payload byte after Ether + IPv4 + UDP


class Wire:
    def __init__(self) -> None:
        self.now = 0.0
        self.sent: list[tuple[float, bytes]] = []

    def __call__(self, frame) -> bool:
        self.sent.append((self.now, bytes(frame)))
        return True

    def seqs(self) -> list[int]:
        return [int.from_bytes(f[SEQ_OFF : SEQ_OFF + 4], "big") for _, f in self.sent]


TEMPLATE = udp_frame(payload=b"\0" * 958)  # 1000-byte frames


def frame(seq: int) -> bytearray:
    f = bytearray(TEMPLATE)
    f[SEQ_OFF : SEQ_OFF + 4] = seq.to_bytes(4, "big")
    return f


def make_port(rate: float = 0.0, delay_us: float = 0.0, **spec) -> tuple[Port, Wire]:
    wire = Wire()
    q = TrimmingQueue(50_000_000, 5_000_000, 50_000_000)
    port = Port(0, "p0", b"\2" * 6, b"\4" * 6, rate, delay_us, q, wire, random.Random(1))
    port.active = set()
    if spec:
        impair(port, ImpairmentSpec.from_dict({"seed": 7, **spec}))
    return port, wire


def drive(port: Port, wire: Wire, n: int, gap_s: float = 0.0) -> None:
    """Offer frames 0..n-1, one every `gap_s` virtual seconds, serving the port exactly when
    it asks to be served; then drain it."""
    due: float | None = None
    for seq in range(n):
        t = seq * gap_s
        while due is not None and due <= t:
            wire.now = due
            due = port.service(due)
        wire.now = t
        port.offer(frame(seq), t)
        nxt = port.service(t)
        due = nxt if due is None or (nxt is not None and nxt < due) else due
    while due is not None:
        wire.now = due
        due = port.service(due)


def bursts(lost: list[bool]) -> list[int]:
    out, run = [], 0
    for x in lost:
        if x:
            run += 1
        elif run:
            out.append(run)
            run = 0
    return out + ([run] if run else [])


def test_gilbert_loss_rate_and_burst_length_match_the_model() -> None:
    n = 20_000
    port, wire = make_port(gilbert_elliott={"p": 1.0, "r": 25.0})
    drive(port, wire, n)
    got = set(wire.seqs())
    lost = [s not in got for s in range(n)]
    rate = sum(lost) / n
    theory = GilbertElliott(p=1.0, r=25.0).loss_rate()  # 1/26
    assert theory == pytest.approx(1 / 26)
    assert rate == pytest.approx(theory, rel=0.2)
    mean_burst = sum(bursts(lost)) / len(bursts(lost))
    assert mean_burst == pytest.approx(1 / 0.25, rel=0.2)  # geometric bursts: 1/r
    assert port.counters.drops == {DROP_BURST_LOSS: sum(lost)}
    assert port.counters.tx_packets == n - sum(lost)


def test_gilbert_elliott_with_loss_in_both_states() -> None:
    n = 20_000
    ge = {"p": 5.0, "r": 20.0, "loss_good": 1.0, "loss_bad": 50.0}
    port, wire = make_port(gilbert_elliott=ge)
    drive(port, wire, n)
    rate = port.counters.drops[DROP_BURST_LOSS] / n
    theory = GilbertElliott(**ge).loss_rate()  # 0.2 * 0.5 + 0.8 * 0.01 = 0.108
    assert theory == pytest.approx(0.108)
    assert rate == pytest.approx(theory, rel=0.15)


def test_drop_every_nth_loses_exactly_every_nth_frame_and_heal_stops_it() -> None:
    port, wire = make_port(drop_every=10)
    drive(port, wire, 100)
    assert wire.seqs() == [s for s in range(100) if (s + 1) % 10]  # frames 9, 19, ... lost
    assert port.counters.drops == {DROP_EVERY_NTH: 10}
    assert port.counters.tx_packets == 90
    impair(port, None)
    wire.sent.clear()
    drive(port, wire, 20)
    assert wire.seqs() == list(range(20))


def test_duplication_count_and_copies() -> None:
    n = 20_000
    port, wire = make_port(duplicate_percent=10.0)
    drive(port, wire, n)
    dups = port.counters.impairments[DUPLICATED]
    assert abs(dups - 0.1 * n) < 5 * math.sqrt(n * 0.1 * 0.9)
    seqs = wire.seqs()
    assert len(seqs) == n + dups and sorted(set(seqs)) == list(range(n))
    assert sum(1 for a, b in zip(seqs, seqs[1:], strict=False) if a == b) == dups  # back to back
    assert port.counters.tx_packets == n + dups


def test_corrupted_frames_are_dropped_and_counted_as_bad_frames_by_the_receiver() -> None:
    n = 5_000
    port, wire = make_port(corrupt_percent=5.0)
    drive(port, wire, n)
    corrupted = port.counters.impairments[CORRUPTED]
    assert abs(corrupted - 0.05 * n) < 5 * math.sqrt(n * 0.05 * 0.95)
    bad = [f for _, f in wire.sent if frames.classify(f) is not None]
    assert len(bad) == corrupted and len(wire.sent) == n  # sent, but damaged
    assert all(frames.classify(f) == frames.BAD_CHECKSUM for f in bad)
    # The receiving switch drops every damaged frame as a bad frame on its port, forwards
    # the rest, and never raises.
    sw, ios = make_switch("leaf1")
    spine = next(p for p in sw.ports if sw.config.ports[p.index].peer_node.startswith("spine"))
    for _, f in wire.sent:
        g = bytearray(f)
        g[0:6] = spine.mac
        sw.receive(spine, g, 0.0)
    assert spine.counters.drops == {"rx_bad_frame": corrupted}
    assert sum(len(io.sent) for io in ios.values()) == n - corrupted


def test_a_corrupted_non_ipv4_frame_is_dropped_at_the_sender() -> None:
    port, wire = make_port(corrupt_percent=100.0)
    port.offer(bytearray(b"\xff" * 12 + b"\x86\xdd" + b"\0" * 60), 0.0)
    assert wire.sent == [] and port.counters.drops == {"corrupt_non_ipv4": 1}


def inversions(seqs: list[int]) -> int:
    """Frames that arrive after a frame sent later than them."""
    top, late = -1, 0
    for s in seqs:
        if s < top:
            late += 1
        top = max(top, s)
    return late


def test_reordering_holds_a_share_of_frames_and_later_ones_overtake_them() -> None:
    n = 20_000
    # 1 Gb/s, 1000-byte frames back to back: 8 µs apart; a held frame waits 100 µs more.
    port, wire = make_port(1000.0, 10.0, reorder_percent=5.0, reorder_delay_us=100.0)
    drive(port, wire, n, gap_s=8e-6)
    held = port.counters.impairments[REORDERED]
    assert abs(held - 0.05 * n) < 5 * math.sqrt(n * 0.05 * 0.95)
    seqs = wire.seqs()
    assert sorted(seqs) == list(range(n))
    # Every held frame is overtaken (~12 frames pass it), except where held frames collide.
    assert held * 0.9 <= inversions(seqs) <= held
    assert JITTERED not in port.counters.impairments


@pytest.mark.parametrize("dilation", [1.0, 20.0])
def test_jitter_keeps_order_and_its_mean_in_virtual_time(dilation: float) -> None:
    """Jitter is virtual time: the same extra delay at any dilation (only `early` changes)."""
    n = 4_000
    port, wire = make_port(0.0, 50.0, jitter_us=40.0)
    port.early, port.catch_up = egress_timing(dilation, 8e-6)
    # Far apart (beyond the catch-up window of an idle port): each frame's delay is its own.
    gap = 3e-3
    drive(port, wire, n, gap_s=gap)
    assert wire.seqs() == list(range(n))  # order kept
    extra = [t - (k * gap + 50e-6) for k, (t, _) in enumerate(wire.sent)]
    assert min(extra) >= -port.early - 1e-12  # never earlier than the link's own delay
    assert max(extra) <= 40e-6 + 1e-12
    assert sum(extra) / n == pytest.approx(20e-6, abs=1.5e-6 + port.early)  # uniform [0, 40]
    assert port.counters.impairments[JITTERED] > 0.99 * n


def test_order_keeping_jitter_never_reorders_a_back_to_back_stream_and_netem_jitter_does() -> None:
    n = 5_000
    keep, wire_keep = make_port(1000.0, 5.0, jitter_us=30.0, jitter_distribution="normal")
    drive(keep, wire_keep, n, gap_s=8e-6)
    assert wire_keep.seqs() == list(range(n))
    free, wire_free = make_port(1000.0, 5.0, jitter_us=30.0, jitter_reorder=True)
    drive(free, wire_free, n, gap_s=8e-6)
    assert sorted(wire_free.seqs()) == list(range(n)) and inversions(wire_free.seqs()) > n // 10


def test_the_same_seed_gives_the_same_fates_and_another_seed_others() -> None:
    spec = {
        "gilbert_elliott": {"p": 2.0, "r": 30.0},
        "jitter_us": 20.0,
        "reorder_percent": 3.0,
        "reorder_delay_us": 50.0,
        "corrupt_percent": 2.0,
        "duplicate_percent": 2.0,
    }

    def once(seed: int) -> tuple[list, dict, dict]:
        port, wire = make_port(1000.0, 10.0)
        impair(port, ImpairmentSpec.from_dict({"seed": seed, **spec}))
        drive(port, wire, 3_000, gap_s=8e-6)
        return wire.sent, port.counters.drops, port.counters.impairments

    a, b, c = once(11), once(11), once(12)
    assert a == b
    assert a[0] != c[0]
    assert set(a[2]) == {CORRUPTED, DUPLICATED, REORDERED, JITTERED}


def test_heal_makes_it_a_plain_port_again_and_loses_no_held_frame() -> None:
    port, wire = make_port(1000.0, 10.0, reorder_percent=50.0, reorder_delay_us=500.0)
    assert type(port) is ImpairedPort and not port.direct
    for seq in range(100):
        port.offer(frame(seq), seq * 8e-6)
        port.service(seq * 8e-6)
    assert port.impair.held
    port.heal()
    assert type(port) is Port and port.impair is None
    t = 800e-6
    while t is not None:
        wire.now = t
        t = port.service(t)
    assert sorted(wire.seqs()) == list(range(100))
    assert port.snapshot()["state"]["impair"] is None
    assert port.snapshot()["impairments"][REORDERED] > 20  # counters outlive the impairment


def test_down_and_switch_down_drop_held_frames_counted() -> None:
    port, _ = make_port(1000.0, 10.0, reorder_percent=100.0, reorder_delay_us=500.0)
    for seq in range(10):
        port.offer(frame(seq), 0.0)
        port.service(0.0)
    port.set_down()
    assert port.counters.drops["link_down"] == 10 and not port.impair.held


def test_an_unimpaired_switch_port_stays_direct_and_an_impaired_one_is_not() -> None:
    sw, _ = make_switch("leaf1", link_mbps=0, delay_us=0)
    p = sw.ports[0]
    assert p.direct and type(p) is Port
    reply = handle(
        sw,
        json.dumps({"op": "port", "port": p.name, "impair": {"seed": 1, "jitter_us": 5}}).encode(),
    )
    assert reply["ok"] and reply["port"]["impair"]["jitter_us"] == 5
    sw.refresh()
    assert not p.direct and type(p) is ImpairedPort
    reply = handle(sw, json.dumps({"op": "port", "port": p.name, "heal": True}).encode())
    assert reply["ok"] and p.direct and type(p) is Port


@pytest.mark.parametrize(
    ("impairment", "message"),
    [
        ({"seed": 1, "jitter": 5}, "impair.jitter: unknown key"),
        ({"jitter_us": 5}, "seed: must be an integer"),
        ({"seed": 1, "corrupt_percent": 101}, "corrupt_percent: must be a percentage"),
        ({"seed": 1, "gilbert_elliott": {"r": 5}}, "gilbert_elliott.p: required"),
        ({"seed": 1, "gilbert_elliott": {"p": 5, "r": -1}}, "gilbert_elliott.r: must be"),
        ({"seed": 1, "gilbert_elliott": {"p": 5, "r": 0}}, "gilbert_elliott.r: 0 with p > 0"),
        ({"seed": 1, "gilbert_elliott": {"p": 5, "q": 1}}, "gilbert_elliott.q: unknown key"),
        ({"seed": 1, "reorder_percent": 5}, "reorder_delay_us: must be > 0"),
        ({"seed": 1, "jitter_distribution": "pareto"}, "jitter_distribution: one of"),
        ({"seed": 1, "jitter_reorder": 1}, "jitter_reorder: must be true or false"),
        ({"seed": 1, "drop_every": -1}, "drop_every: must be an integer >= 0"),
        ({"seed": 1, "drop_every": 2.5}, "drop_every: must be an integer >= 0"),
    ],
)
def test_bad_impairment_requests_are_refused_naming_the_key(impairment, message) -> None:
    sw, _ = make_switch("leaf1")
    p = sw.ports[0]
    reply = handle(sw, json.dumps({"op": "port", "port": p.name, "impair": impairment}).encode())
    assert not reply["ok"] and message in reply["error"], reply
    assert p.impair is None  # nothing half-applied

"""Unit properties of the pieces: placement, EV policy, congestion window, RTT."""

from __future__ import annotations

import random
import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from endpoint.config import TransportConfig
from endpoint.ev import EVSet, EVState
from endpoint.reassembly import Reassembly
from endpoint.rtt import RttEstimator
from tests.conftest import record_sends


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=0, max_size=5000), st.integers(1, 700), st.randoms(use_true_random=False))
def test_reassembly_places_any_order_and_refuses_overlap(
    msg: bytes, chunk: int, rnd: random.Random
) -> None:
    pieces = [(o, msg[o : o + chunk]) for o in range(0, len(msg), chunk)] or [(0, b"")]
    rnd.shuffle(pieces)
    r = Reassembly(len(msg), zlib.crc32(msg))
    for i, (off, data) in enumerate(pieces):
        assert r.fits(off, len(data))
        r.place(off, data)
        assert r.complete == (i == len(pieces) - 1)
        # Every range already placed, and any range straddling one, is refused from now on.
        if data:
            assert not r.fits(off, len(data))
            assert not r.fits(max(0, off - 1), 2)
    assert bytes(r.buf) == msg and r.verify()
    assert not r.fits(len(msg), 1)  # beyond the end


def test_reassembly_detects_a_wrong_message_crc() -> None:
    r = Reassembly(3, zlib.crc32(b"abc"))
    r.place(0, b"abd")
    assert r.complete and not r.verify()


def test_ev_pick_sprays_over_all_healthy_evs_and_never_a_failed_one() -> None:
    cfg = TransportConfig(num_evs=16, planes=4)
    evs = EVSet(cfg)
    for p in evs.paths[:5]:
        evs.retire(p.ev, 0.0, 0)
    picks = [evs.pick().ev for _ in range(110)]
    healthy = {p.ev for p in evs.paths[5:]}
    assert set(picks) == healthy  # all healthy EVs used, no failed one
    assert all(a != b for a, b in zip(picks, picks[1:], strict=False))  # consecutive differ
    # Planes alternate: EV i is on plane i % 4.
    assert {evs.by_ev[e].plane for e in picks[:4]} == {0, 1, 2, 3}
    assert evs.pick(exclude=picks[-1]).ev != picks[-1]


def test_congested_ev_carries_less_and_recovers() -> None:
    cfg = TransportConfig(num_evs=4)
    evs = EVSet(cfg)
    hot = evs.paths[0].ev
    for _ in range(3):
        evs.on_congestion(hot, 0.0, "trim")
    assert evs.by_ev[hot].state is EVState.CONGESTED
    picks = [evs.pick().ev for _ in range(400)]
    assert picks.count(hot) < 0.5 * picks.count(evs.paths[1].ev)
    for _ in range(100):
        evs.on_clean_ack(hot, 0.0)
    assert evs.by_ev[hot].state is EVState.GOOD


def test_failed_ev_probes_back_off_and_only_a_fresh_probe_readmits() -> None:
    cfg = TransportConfig(num_evs=4, probe_interval=1e-3, probe_interval_max=4e-3)
    evs = EVSet(cfg)
    ev = evs.paths[2].ev
    assert evs.retire(ev, 0.0, next_probe_seq=10)
    assert not evs.retire(ev, 0.0, next_probe_seq=10)  # already failed
    assert evs.due_probes(0.0009) == []
    sent = []
    t = 0.0
    while t < 0.02:
        t = evs.next_probe_time()
        sent.append(t)
        assert [p.ev for p in evs.due_probes(t)] == [ev]
    gaps = [b - a for a, b in zip(sent, sent[1:], strict=False)]
    assert gaps[0] < gaps[1] and max(gaps) <= 4e-3 + 1e-12
    assert not evs.readmit(ev, 9, t)  # answers a probe from before the failure
    assert evs.readmit(ev, 10, t)
    assert evs.by_ev[ev].state is EVState.GOOD


def test_all_evs_failed_still_picks_something() -> None:
    evs = EVSet(TransportConfig(num_evs=3))
    for p in evs.paths:
        evs.retire(p.ev, 0.0, 0)
    assert {evs.pick().ev for _ in range(6)} == {p.ev for p in evs.paths}
    assert evs.fallback_picks == 6


def test_rtt_estimator_and_rto_clamp() -> None:
    r = RttEstimator(rto_initial=0.02, rto_min=0.01, rto_max=0.1)
    assert r.rto() == 0.02 and r.pacing_rtt(0.5) == 0.5
    r.observe_base(40e-6)
    assert r.min_rtt == 40e-6 and r.srtt is None and r.pacing_rtt(0.5) == 40e-6
    for _ in range(50):
        r.sample(1e-3)
    assert abs(r.srtt - 1e-3) < 1e-6 and r.rto() == 0.01
    r.sample(5.0)
    assert r.rto() == 0.1


def _spine(seed: int, src: str, dst: str, sport: int, spines: int = 2) -> int:
    """The spine a switch's ECMP (crc32 of the 5-tuple's addresses and ports) picks."""
    import ipaddress
    import struct
    import zlib

    key = ipaddress.ip_address(src).packed + ipaddress.ip_address(dst).packed
    return zlib.crc32(key + struct.pack("!HH", sport, 4791), seed ^ 17) % spines


def test_reply_pairs_decouple_the_reverse_path_from_the_forward_one() -> None:
    cfg = TransportConfig()
    a, b, seed_a, seed_b = "10.1.1.2", "10.1.2.2", 0x1234, 0xBEEF
    evs = cfg.ev_values()
    # A CRC is linear: replying on the data's own EV ties every EV of the pair to one answer.
    same = {_spine(seed_a, a, b, e) == _spine(seed_b, b, a, e) for e in evs}
    assert len(same) == 1
    pairs = cfg.reply_pairs()
    assert sorted(pairs) == sorted(pairs.values()) == evs  # a permutation
    agree = sum(_spine(seed_a, a, b, e) == _spine(seed_b, b, a, pairs[e]) for e in evs)
    assert 0.25 * len(evs) <= agree <= 0.75 * len(evs), agree


def test_reply_pairs_keep_each_round_trip_on_one_plane() -> None:
    cfg = TransportConfig(planes=4)
    planes = {e: i % 4 for i, e in enumerate(cfg.ev_values())}
    assert all(planes[e] == planes[r] for e, r in cfg.reply_pairs().items())


def test_connection_ev_bases_are_drawn_per_connection_from_the_roce_range() -> None:
    """As a RoCE NIC picks a source port per QP: in 0xC000-0xFFFF, the whole EV range too,
    repeatable for a seed, different for another seed, direction or QP."""
    from endpoint.config import SPORT_MIN, connection_ev_base

    draws = {}
    for seed in range(50):
        for src, dst in (("h1", "h2"), ("h2", "h1"), ("h1", "h3")):
            for qp in (4097, 4098):
                base = connection_ev_base(seed, src, dst, qp, 64)
                assert SPORT_MIN <= base and base + 64 <= 65536
                assert connection_ev_base(seed, src, dst, qp, 64) == base
                draws[(seed, src, dst, qp)] = base
    assert len(set(draws.values())) > 0.95 * len(draws)  # 600 draws from 16321 values
    assert connection_ev_base(1, "h1", "h2", 1, 1) != connection_ev_base(2, "h1", "h2", 1, 1)


def test_for_connection_resolves_the_seed_once_and_keeps_everything_else() -> None:
    cfg = TransportConfig(num_evs=8, planes=2, ev_seed=3)
    conn = cfg.for_connection("h1", "h2", 4098)
    assert conn.ev_seed is None and conn.num_evs == 8 and conn.planes == 2
    assert conn.ev_base != cfg.ev_base
    assert conn.for_connection("h9", "h8", 1) is conn  # resolved: stays put
    fixed = TransportConfig()
    assert fixed.for_connection("h1", "h2", 4098) is fixed  # no seed: every connection alike


def test_a_bad_ev_seed_is_refused_by_name() -> None:
    for bad in ("1", 1.5, True):
        try:
            TransportConfig(ev_seed=bad)
        except ValueError as exc:
            assert str(exc).startswith("ev_seed must be an integer or None"), exc
        else:
            raise AssertionError(f"ev_seed={bad!r} accepted")


def _two_packets_sent_apart(gap: float):
    """A Sender with PSN 0 sent at t=0 and PSN 1 sent `gap` later, each on its own EV."""
    from endpoint.sender import Sender
    from endpoint.stats import ConnectionStats

    cfg = TransportConfig(reorder_min=1e-3)
    s = Sender(cfg, local_qp=1, remote_qp=2, start_psn=0, stats=ConnectionStats())
    sent: list = []
    for t in (0.0, gap):
        s.send_message(b"x" * 100, t)
        s.poll_transmit(t, sent)
    assert len(sent) == 2 and sent[0][0] != sent[1][0]
    ts = [p.ts_ns for p in sorted(s.unacked.values(), key=lambda p: p.psn)]
    return s, [ev for ev, *_ in sent], ts


def _ack(psn: int, cum: int, ts: int, ev: int, sack_base: int = 0, bits: int = 0):
    from endpoint.codec import AckPacket

    return AckPacket(
        dqpn=1, psn=psn, cum_psn=cum, sack_base=sack_base, sack_bitmap=bits, ev_echo=ev, ts_echo=ts
    )


def test_losses_are_judged_once_per_read_batch_not_per_ack() -> None:
    """PSN 1 overtook PSN 0 by more than the reorder allowance; both ACKs arrive in one read.

    Read one by one, the first ACK (PSN 1 SACKed, PSN 0 not yet) would declare PSN 0 lost and
    retire its EV, and the second would prove it delivered. Judged after the batch, nothing is
    lost; when PSN 0's ACK really comes a turn later, the loss stands and is counted undone.
    """
    now = 0.005
    s, evs, ts = _two_packets_sent_apart(gap=0.003)
    s.on_ack(_ack(1, cum=0, ts=ts[1], ev=evs[1], sack_base=1, bits=1), now)
    s.on_ack(_ack(0, cum=2, ts=ts[0], ev=evs[0]), now)
    out: list = []
    s.poll_transmit(now, out)
    assert out == [] and not s.unacked
    assert s.stats.counters["ev_retired"] == 0 and s.evs.by_ev[evs[0]].state is EVState.GOOD

    s, evs, ts = _two_packets_sent_apart(gap=0.003)
    s.on_ack(_ack(1, cum=0, ts=ts[1], ev=evs[1], sack_base=1, bits=1), now)
    s.on_timer(now)  # the next turn: PSN 0's ACK is not in this batch
    assert s.stats.counters["ev_retired"] == 1 and s.evs.by_ev[evs[0]].state is EVState.FAILED
    s.on_ack(_ack(0, cum=2, ts=ts[0], ev=evs[0]), now + 0.001)
    assert s.stats.counters["undone_loss"] == 1 and not s.unacked


def test_an_rto_declares_every_packet_that_an_ack_should_have_answered() -> None:
    """A paced burst (one packet per 0.4 ms) whose ACKs never come, after one RTT sample.

    The RTO fires at the oldest packet's deadline, when the others are just short of theirs.
    As RFC 8985 marks losses on an RTO, every packet sent over an RTT plus the allowance ago
    is lost too: one RTO, not one per packet with the backoff doubling each time."""
    from endpoint.sender import Sender
    from endpoint.stats import ConnectionStats

    cfg = TransportConfig(reorder_min=1e-3, rto_min=15e-3, base_rtt=10e-3)
    s = Sender(cfg, local_qp=1, remote_qp=2, start_psn=0, stats=ConnectionStats())
    s.send_message(bytes(20 * 1400), 0.0)
    sent: list = []
    for k in range(20):
        assert s.poll_transmit(k * 4e-4, sent, limit=1) == 1  # one at a time, as paced
    first = s.unacked[0]
    s.on_ack(_ack(0, cum=1, ts=first.ts_ns, ev=first.ev), 2e-3)  # srtt 2 ms
    assert len(s.inflight) == 19
    deadline = s.inflight[1].sent_at + s._rto()
    s.on_timer(deadline - 1e-6)
    assert s.stats.counters["rto_fired"] == 0
    s.on_timer(deadline)
    assert s.stats.counters["rto_fired"] == 1
    assert not s.inflight  # all 19, sent 0.4-7.6 ms, are past 2 ms + the allowance
    out: list = []
    s.poll_transmit(deadline, out)
    assert s.stats.retransmits["rto"] >= 1


def test_the_reorder_allowance_grows_with_the_spread_of_the_rtt() -> None:
    """Sprayed paths reorder by the spread of their delays: with RTT samples alternating
    between a short and a long path, two mean deviations outweigh 0.25 srtt and the floor."""
    from endpoint.sender import Sender
    from endpoint.stats import ConnectionStats

    cfg = TransportConfig(reorder_min=1e-3)
    s = Sender(cfg, local_qp=1, remote_qp=2, start_psn=0, stats=ConnectionStats())
    for _ in range(50):
        s.rtt.sample(4e-3)
    assert s._reorder_allowance() == 1e-3  # one path: the floor (0.25 x 4 ms, no deviation)
    for _ in range(50):
        s.rtt.sample(2e-3)
        s.rtt.sample(14e-3)
    spread = s._reorder_allowance()
    assert spread == 2 * s.rtt.rttvar
    assert 8e-3 < spread < 14e-3 and spread > 0.25 * s.rtt.srtt


def test_generated_evs_carry_plane_and_path_and_are_not_drawn_per_connection() -> None:
    cfg = TransportConfig(ev_profile="generated", planes=2, num_evs=8, ev_seed=3)
    evs = cfg.ev_values()
    base = cfg.ev_base
    assert [(ev - base) & 1 for ev in evs] == [0, 1] * 4  # plane in the low bit
    assert [(ev - base) >> 1 for ev in evs] == [0, 0, 1, 1, 2, 2, 3, 3]  # then the path
    assert [cfg.ev_planes()[ev] for ev in evs] == [i % 2 for i in range(8)]
    assert cfg.for_connection("h1", "h2", 7).ev_base == base  # the EV is the route: no draw
    auto = TransportConfig(planes=2, num_evs=8, ev_seed=3)
    assert auto.ev_values() == list(range(auto.ev_base, auto.ev_base + 8))
    assert auto.for_connection("h1", "h2", 7).ev_base != auto.ev_base
    three = TransportConfig(ev_profile="generated", planes=3, num_evs=9)
    assert [three.ev_planes()[ev] for ev in three.ev_values()] == [0, 1, 2] * 3


def test_a_generated_ev_base_must_be_aligned_and_the_profile_known() -> None:
    import pytest

    with pytest.raises(ValueError, match="ev_base"):
        TransportConfig(ev_profile="generated", ev_base=0xC001)
    with pytest.raises(ValueError, match="ev_profile"):
        TransportConfig(ev_profile="explicit-ish")


def test_explicit_evs_are_the_given_ports_and_carry_a_transfer() -> None:
    """MRC's EXPLICIT profile: the application's list, EV i on plane i % planes, and a
    transfer over them on simnet delivers every byte on exactly those source ports."""
    import pytest

    from endpoint.simnet import PairHarness, SimNet

    evs = [50000, 50013, 50026, 50039, 50052, 50065]
    cfg = TransportConfig(ev_profile="explicit", explicit_evs=evs, planes=2)
    assert cfg.num_evs == 6 and cfg.ev_values() == evs
    assert [cfg.ev_planes()[e] for e in evs] == [0, 1] * 3
    assert cfg.for_connection("a", "b", 1).ev_values() == evs  # no per-connection draw
    with pytest.raises(ValueError, match="explicit_evs"):
        TransportConfig(ev_profile="explicit", explicit_evs=[7, 7])
    with pytest.raises(ValueError, match="explicit_evs"):
        TransportConfig(explicit_evs=[7])
    net = SimNet(seed=3)
    h = PairHarness(net, TransportConfig(ev_profile="explicit", explicit_evs=evs))
    sent = record_sends(net)
    rng = random.Random(3)
    data = [rng.randbytes(20_000) for _ in range(5)]
    for d in data:
        h.send_ab(d)
    assert h.run(5.0)
    used = {ev for _, ev in sent}
    assert used <= set(evs) and len(used) == len(evs)


def test_every_ev_transition_says_why() -> None:
    """The EV event stream (issue 19): each change carries what caused it."""
    seen: list = []
    evs = EVSet(TransportConfig(num_evs=4), on_change=lambda *a: seen.append(a))
    ev = evs.paths[0].ev
    evs.on_congestion(ev, 1.0, "trim")
    evs.retire(ev, 2.0, 0, "sweep")
    assert evs.readmit(ev, 5, 3.0)
    evs.on_congestion(ev, 4.0)
    for _ in range(50):
        evs.on_clean_ack(ev, 5.0)
    assert [(s[2].value, s[3].value, s[4]) for s in seen] == [
        ("good", "congested", "trim"),
        ("congested", "failed", "sweep"),
        ("failed", "good", "probe_ack"),
        ("good", "congested", "ecn"),
        ("congested", "good", "clean_acks"),
    ]


def test_a_deny_mask_takes_its_evs_out_until_lifted() -> None:
    """MRC's deny masks: EVs whose bits match mask/value carry nothing and are not probed; the
    rule is refused if it would leave fewer than min_active_evs; lifting it restores them."""
    import pytest

    from endpoint.ev_path import EVState

    cfg = TransportConfig(ev_profile="generated", num_evs=16, min_active_evs=5)
    seen: list = []
    evs = EVSet(cfg, on_change=lambda *a: seen.append(a))
    base = cfg.ev_base
    # Generated EVs on 4 uplinks: "uplink 1" is the field value 1 in bits 0-1 (one plane).
    denied = evs.deny(0x3, 0x1, 1.0)
    assert denied == [base + i for i in range(16) if i % 4 == 1]
    assert all(seen_[3] is EVState.DENIED and seen_[4] == "deny" for seen_ in seen)
    picks = {evs.pick().ev for _ in range(200)}
    assert picks and not picks & set(denied)
    assert evs.healthy_count() == 12
    assert not evs.retire(denied[0], 2.0, 0)  # a denied EV is not retired (nor probed)
    assert evs.deny(0x3, 0x1, 2.0) == []  # the same rule twice: nothing more
    evs.deny(0x3, 0x2, 2.0)
    with pytest.raises(ValueError, match="min_active_evs"):
        evs.deny(0x3, 0x3, 3.0)  # would leave 4 < 5
    assert evs.healthy_count() == 8  # refused: nothing changed
    assert evs.allow(0x3, 0x1, 4.0) == denied
    assert {evs.by_ev[e].state for e in denied} == {EVState.GOOD}
    assert evs.allow(0x3, 0x1, 5.0) == []


def test_a_deny_resends_at_once_what_is_in_flight_on_its_evs() -> None:
    """A deny names a link found dead; the packets already sent over it are gone and nothing
    else would tell the sender before a tail probe or an RTO. The deny op resends them at once,
    on EVs it left, and nothing else; a deny refused on any connection resends nothing."""
    from types import SimpleNamespace

    import pytest

    from endpoint import codec
    from endpoint.process_control import ControlHandlers
    from endpoint.transport import Endpoint

    def sender(qp: int):
        cfg = TransportConfig(
            ev_profile="generated", num_evs=16, min_active_evs=9, base_rtt=1e-3, line_rate_bps=1e9
        )
        ep = Endpoint(cfg)
        conn = ep.connect(qp, qp + 100, "rx")
        conn.send(bytes(8 * 1420), 0.0)
        first = []
        for us in range(100):  # paced out over the first microseconds
            first += [codec.decode(t.payload) for t in ep.poll_transmit(us * 1e-6)]
        return ep, conn, first

    handlers = SimpleNamespace(host="h1")
    ep, conn, first = sender(1)
    assert len(first) == 8
    denied = ControlHandlers._deny_on(handlers, [conn], (0x3, 0x1), 100e-6)
    gone = {p.psn for p in first if p.ev & 0x3 == 0x1}
    assert denied == 4 and gone  # 4 of 16 EVs; some of the 8 packets went on them
    again = [codec.decode(t.payload) for t in ep.poll_transmit(101e-6)]
    assert {p.psn for p in again} == gone
    assert not any(p.ev & 0x3 == 0x1 for p in again)
    assert conn.stats.retransmits["ev_denied"] == len(gone)
    # All or none: the second connection cannot give up 4 more EVs (min_active_evs 9).
    ep2, conn2, _ = sender(2)
    ep3, conn3, _ = sender(3)
    conn3.sender.evs.deny(0x3, 0x2, 0.0)
    with pytest.raises(ValueError, match="min_active_evs"):
        ControlHandlers._deny_on(handlers, [conn2, conn3], (0x3, 0x1), 100e-6)
    assert ep2.poll_transmit(101e-6) == [] and not conn2.stats.retransmits["ev_denied"]


def test_denied_evs_carry_no_packet_of_a_transfer() -> None:
    from endpoint.simnet import PairHarness, SimNet

    cfg = TransportConfig(ev_profile="generated", num_evs=16, base_rtt=2e-3)
    net = SimNet(seed=4)
    h = PairHarness(net, cfg)
    bad = set(h.ca.sender.evs.deny(0x3, 0x0, 0.0))
    used: list[int] = []
    inject = net.inject

    def spy(src, tx):
        if src == "a":
            used.append(tx.ev)
        inject(src, tx)

    net.inject = spy
    rng = random.Random(4)
    for _ in range(4):
        h.send_ab(rng.randbytes(30_000))
    assert h.run(5.0)
    assert len(bad) == 4 and used and not set(used) & bad

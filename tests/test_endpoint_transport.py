"""End-to-end properties of the sans-IO transport on the deterministic in-process network."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from endpoint.config import Mode, TransportConfig
from endpoint.psn import PSN_MOD, psn_diff
from endpoint.simnet import Bottleneck, PairHarness, SimNet
from endpoint.transport import Endpoint
from endpoint.wire import TOS_CONTROL

EV_BASE = 49152
FAST = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)


def blob(rng: random.Random, n: int) -> bytes:
    return rng.randbytes(n)


def assert_exactly_once(sent: dict[int, bytes], received: dict[int, list[bytes]]) -> None:
    assert set(received) == set(sent)
    for msg_id, data in sent.items():
        assert received[msg_id] == [data], f"message {msg_id} not delivered once and intact"


impairment = st.fixed_dictionaries(
    {
        "mode": st.sampled_from(list(Mode)),
        "num_evs": st.sampled_from([1, 2, 8, 64]),
        "seed": st.integers(0, 2**16),
        "psn_start": st.one_of(
            st.integers(PSN_MOD - 300, PSN_MOD - 1), st.integers(0, PSN_MOD - 1)
        ),
        "loss": st.sampled_from([0.0, 0.02, 0.1]),
        "ack_loss": st.sampled_from([0.0, 0.02, 0.1]),
        "jitter": st.sampled_from([0.0, 30e-6, 300e-6]),
        "dup": st.sampled_from([0.0, 0.05]),
        "trim": st.sampled_from([0.0, 0.05]),
        "blackhole_frac": st.sampled_from([0.0, 0.25, 0.5]),
        "ack_blackhole_frac": st.sampled_from([0.0, 0.25]),
        "bottleneck": st.booleans(),
        "sizes": st.lists(
            st.sampled_from([0, 1, 1399, 1400, 1401, 9_000, 40_000, 150_000]),
            min_size=1,
            max_size=8,
        ),
        "reverse": st.booleans(),
    }
)


@FAST
@given(impairment)
def test_every_message_delivered_exactly_once_and_intact(p: dict) -> None:
    """Random loss, reordering, duplication, trimming, black-holed EVs, ACK-path failure and
    PSN wrap: every message arrives exactly once and byte-identical, in every mode."""
    event(f"mode={p['mode'].value}")
    event(f"bytes>=100k: {sum(p['sizes']) >= 100_000}")
    # roce gives up after rc_retry_cnt RC timeouts without progress (the QP fails, as a NIC's):
    # with 0.55 s timeouts it outlasts the 2 s black hole below, as RC does with a long timeout.
    extra = {"rc_timeout": 17} if p["mode"] is Mode.ROCE else {}
    cfg = TransportConfig(mode=p["mode"], num_evs=p["num_evs"], **extra)
    net = SimNet(seed=p["seed"], n_paths=8)
    h = PairHarness(net, cfg, psn_ab=p["psn_start"], psn_ba=(p["psn_start"] + 7) % PSN_MOD)
    net.set_all_paths("a", "b", loss=p["loss"], jitter=p["jitter"], dup=p["dup"], trim=p["trim"])
    net.set_all_paths("b", "a", loss=p["ack_loss"], jitter=p["jitter"], dup=p["dup"])
    evs = cfg.ev_values()
    rng = random.Random(p["seed"])
    # Never black-hole every EV: spraying modes must then cope without a heal.
    n_bh = min(len(evs) - 1, int(len(evs) * p["blackhole_frac"]))
    n_ack_bh = min(len(evs) - 1, int(len(evs) * p["ack_blackhole_frac"]))
    net.blackhole_evs("a", "b", set(rng.sample(evs, n_bh)))
    net.blackhole_evs("b", "a", set(rng.sample(evs, n_ack_bh)))
    if p["bottleneck"]:
        net.set_bottleneck("b", Bottleneck(rate_bps=100e6, queue_bytes=20_000, ecn_bytes=10_000))
    for n in p["sizes"]:
        h.send_ab(blob(rng, n))
    if p["reverse"]:
        h.send_ba(blob(rng, 5000))
    if p["mode"] in (Mode.SINGLE_PATH, Mode.ROCE):
        # One fixed EV cannot route around a black hole: it must wait for the heal.
        h.run(2.0)
        net.blackhole_evs("a", "b", set())
        net.blackhole_evs("b", "a", set())
    assert h.run(120.0), f"not done at t={net.now}: {h.ca.snapshot()}"
    assert_exactly_once(h.sent_ab, h.received_ab)
    assert_exactly_once(h.sent_ba, h.received_ba)
    for conn in (h.ca, h.cb):
        assert conn.stats.drops["message_crc"] == 0


def _bulk(mode: Mode, seed: int = 1, **cfg_kw) -> tuple[SimNet, PairHarness]:
    # A configured base RTT of 2 ms, about what the emulated fabric's processes give at N = 1:
    # NSCC's MaxWnd (1.5 BDP) is then ~26 packets, so a few ms of traffic visit all 64 EVs.
    cfg_kw.setdefault("base_rtt", 2e-3)
    cfg = TransportConfig(mode=mode, **cfg_kw)
    net = SimNet(seed=seed)
    h = PairHarness(net, cfg)
    net.set_bottleneck("b", Bottleneck(rate_bps=100e6))
    rng = random.Random(seed)
    for _ in range(400):
        h.send_ab(blob(rng, 14_000))
    return net, h


@settings(max_examples=5, deadline=None, derandomize=True)
@given(st.integers(0, 1000), st.integers(1, 16))
def test_blackholed_evs_retired_within_one_rtt_and_readmitted_after_heal(
    seed: int, n_bh: int
) -> None:
    net, h = _bulk(Mode.MRC, seed)
    rng = random.Random(seed)
    bad = set(rng.sample(TransportConfig().ev_values(), n_bh))
    first_send: dict[int, float] = {}
    inject = net.inject

    def spy(src, tx):  # first data packet on each black-holed EV after the failure
        if src == "a" and tx.ev in bad and tx.tos != TOS_CONTROL and t_fail <= net.now:
            first_send.setdefault(tx.ev, net.now)
        inject(src, tx)

    net.inject = spy
    t_fail, t_heal = 0.005, 0.030
    net.run(t_fail)
    net.blackhole_evs("a", "b", bad)
    net.run(t_heal)
    conn = h.ca
    srtt = conn.sender.rtt.srtt
    retired = {t.ev: t.at for t in conn.stats.ev_transitions if t.new == "failed"}
    assert set(retired) >= bad
    first = min(retired.values())
    for ev in bad:
        if ev in first_send:
            # Detection needs the loss to be noticed: about one RTT after the packet was sent.
            assert retired[ev] - first_send[ev] <= 1.5 * srtt
        else:
            # Found by the first loss's sweep without losing a packet: one probe round trip.
            assert retired[ev] - first <= 2.5 * srtt
    assert conn.stats.counters["ev_retired"] == len(bad)  # no healthy EV was blamed
    net.blackhole_evs("a", "b", set())
    assert h.run(2.0)
    assert_exactly_once(h.sent_ab, h.received_ab)
    back = {t.ev: t.at for t in conn.stats.ev_transitions if t.old == "failed" and t.new == "good"}
    cfg = TransportConfig()
    for ev in bad:
        # Probes back off to probe_interval_max; one answered probe re-admits.
        assert t_heal < back[ev] <= t_heal + cfg.probe_interval_max + 2 * srtt
    assert set(conn.sender.evs.states().values()) <= {"good", "congested"}


def test_a_retirement_records_when_the_ev_last_carried_data() -> None:
    """The FAILED transition carries the send time of the EV's latest data packet before it
    (what "traffic left the failed link by" is measured from), which precedes the retirement
    by the detection delay."""
    net, h = _bulk(Mode.MRC, 7)
    bad = set(random.Random(7).sample(TransportConfig().ev_values(), 8))
    last_data: dict[int, float] = {}
    retired_seen: set[int] = set()
    inject = net.inject

    def spy(src, tx):
        if src == "a" and tx.tos != TOS_CONTROL and tx.ev not in retired_seen:
            last_data[tx.ev] = net.now
        inject(src, tx)

    net.inject = spy
    net.run(0.005)
    net.blackhole_evs("a", "b", bad)
    conn = h.ca
    checked = 0
    end = 0.030
    while net.now < end:
        net.run(net.now + 0.0002)
        for tr in conn.stats.ev_transitions:
            if tr.new == "failed" and tr.ev not in retired_seen:
                retired_seen.add(tr.ev)
                assert tr.last_tx == last_data.get(tr.ev), tr
                assert tr.last_tx is None or tr.last_tx <= tr.at
                checked += tr.last_tx is not None
    assert retired_seen >= bad and checked >= len(bad) // 2
    good = [t for t in conn.stats.ev_transitions if t.new != "failed"]
    assert all(t.last_tx is None for t in good)


def _max_stall(h: PairHarness, start: float, end: float) -> float:
    times = [start] + sorted(t for t, _ in h.delivery_times if start <= t <= end) + [end]
    return max(b - a for a, b in zip(times, times[1:], strict=False))


def test_single_path_stalls_on_blackholed_path_while_mrc_does_not() -> None:
    """Black-hole the path that single-path's EV hashes onto (and every EV sharing it)."""
    stalls = {}
    for mode in (Mode.SINGLE_PATH, Mode.MRC):
        net, h = _bulk(mode)
        cfg = TransportConfig(mode=mode)
        victim = net.path_index("a", "b", cfg.ev_values()[cfg.single_path_ev_index])
        net.run(0.010)
        net.set_path("a", "b", victim, blackhole=True)
        net.run(0.100)
        net.set_path("a", "b", victim, blackhole=False)
        assert h.run(5.0)
        assert_exactly_once(h.sent_ab, h.received_ab)
        stalls[mode] = _max_stall(h, 0.010, 0.100)
    assert stalls[Mode.SINGLE_PATH] >= 0.085  # nothing delivered until the heal
    assert stalls[Mode.MRC] <= 0.005  # about an RTT of hiccup, then the other paths carry it


def test_ack_path_failure_of_some_evs_loses_nothing() -> None:
    net, h = _bulk(Mode.MRC)
    net.blackhole_evs("b", "a", set(TransportConfig().ev_values()[::2]))
    assert h.run(5.0)
    assert_exactly_once(h.sent_ab, h.received_ab)


def test_full_ack_path_outage_recovers_after_heal() -> None:
    net, h = _bulk(Mode.MRC)
    net.run(0.010)
    net.set_all_paths("b", "a", blackhole=True)
    net.run(0.050)
    assert not h.all_done()
    net.set_all_paths("b", "a", blackhole=False)
    assert h.run(5.0)
    assert_exactly_once(h.sent_ab, h.received_ab)


def _incast(trimming: bool, senders: int = 8) -> tuple[SimNet, list, dict]:
    cfg = TransportConfig(base_rtt=2e-3)  # MaxWnd 37.5 kB x 8: the first RTT overflows 30 kB
    net = SimNet(seed=7)
    dst = net.add_endpoint("dst", Endpoint(cfg))
    rng = random.Random(7)
    conns, sent, got = [], {}, {}
    for i in range(senders):
        ep = net.add_endpoint(f"s{i}", Endpoint(cfg))
        c = ep.connect(100 + i, 200 + i, "dst")
        dst.connect(200 + i, 100 + i, f"s{i}")
        for _ in range(20):
            data = blob(rng, 14_000)
            sent[(200 + i, c.send(data, 0.0))] = data
        conns.append(c)
    net.set_bottleneck(
        "dst", Bottleneck(rate_bps=100e6, queue_bytes=30_000, ecn_bytes=15_000, trimming=trimming)
    )

    def done() -> bool:
        for d in dst.take_deliveries():
            got.setdefault((d.qp, d.msg_id), []).append(d.data)
        return len(got) == len(sent) and all(c.sender.idle for c in conns)

    assert net.run(10.0, stop=done)
    assert got == {k: [v] for k, v in sent.items()}
    return net, conns, got


def test_incast_trimming_gives_nack_driven_resends_and_no_rto() -> None:
    net, conns, _ = _incast(trimming=True)
    assert net.counters["trim_queue"] > 0
    assert net.counters["drop_queue"] == 0
    nack_resends = sum(c.stats.retransmits["nack_trim"] for c in conns)
    assert nack_resends > 0
    assert sum(c.stats.counters["rto_fired"] for c in conns) == 0
    assert sum(c.stats.retransmits["rto"] for c in conns) == 0


def test_incast_without_trimming_needs_loss_recovery_and_is_slower() -> None:
    net_t, conns_t, _ = _incast(trimming=True)
    net_d, conns_d, _ = _incast(trimming=False)
    assert net_d.counters["drop_queue"] > 0 and net_d.counters["trim_queue"] == 0
    assert sum(c.stats.retransmits["nack_trim"] for c in conns_d) == 0
    assert sum(c.stats.retransmits["loss"] + c.stats.retransmits["rto"] for c in conns_d) > 0
    last = lambda conns: max(m.finished for c in conns for m in c.stats.completions)  # noqa: E731
    assert last(conns_d) > last(conns_t)


@pytest.mark.parametrize("mode", list(Mode), ids=lambda m: m.value)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_everything_at_once_is_still_exactly_once(mode: Mode, seed: int) -> None:
    """Every impairment switched on together, PSNs starting 40 before the wrap, both ways."""
    cfg = TransportConfig(mode=mode)
    net = SimNet(seed=seed, n_paths=16)
    h = PairHarness(net, cfg, psn_ab=PSN_MOD - 40, psn_ba=PSN_MOD - 3)
    net.set_all_paths("a", "b", loss=0.05, jitter=100e-6, dup=0.05, trim=0.05)
    net.set_all_paths("b", "a", loss=0.05, jitter=100e-6, dup=0.05)
    net.set_bottleneck("b", Bottleneck(rate_bps=100e6, queue_bytes=20_000, ecn_bytes=10_000))
    rng = random.Random(seed)
    evs = cfg.ev_values()
    if mode not in (Mode.SINGLE_PATH, Mode.ROCE):  # one EV: a black hole would be for ever
        net.blackhole_evs("a", "b", set(rng.sample(evs, 16)))
        net.blackhole_evs("b", "a", set(rng.sample(evs, 16)))
    for n in (0, 1, 1400, 1401, 60_000, 200_000):
        h.send_ab(blob(rng, n))
        h.send_ba(blob(rng, n // 3))
    assert h.run(300.0), f"not done at t={net.now}: {h.ca.snapshot()}"
    assert_exactly_once(h.sent_ab, h.received_ab)
    assert_exactly_once(h.sent_ba, h.received_ba)
    assert psn_diff(h.ca.sender.next_psn, PSN_MOD - 40) > 40  # the PSN really wrapped


def _data_into_dead_evs(loss_sweep: bool, seed: int) -> tuple[int, PairHarness, set]:
    net, h = _bulk(Mode.MRC, seed, loss_sweep=loss_sweep)
    bad = set(random.Random(seed).sample(TransportConfig().ev_values(), 32))
    lost = 0
    inject = net.inject

    def spy(src, tx):
        nonlocal lost
        if src == "a" and tx.ev in bad and tx.tos != TOS_CONTROL and net.now >= 0.005:
            lost += 1
        inject(src, tx)

    net.inject = spy
    net.run(0.005)
    net.blackhole_evs("a", "b", bad)
    net.run(0.030)
    return lost, h, bad


@pytest.mark.parametrize("seed", [0, 1])
def test_the_loss_sweep_finds_dead_evs_without_feeding_them_data(seed: int) -> None:
    """Half the EVs die at once: without the sweep each dead EV is found by losing a packet on
    it (32); with it, the first losses make every EV prove itself and the rest are retired on
    an unanswered probe -- the same EVs, no healthy one, for a fraction of the data."""
    without, _, _ = _data_into_dead_evs(False, seed)
    with_sweep, h, bad = _data_into_dead_evs(True, seed)
    c = h.ca.stats.counters
    assert without >= len(bad)
    assert with_sweep <= without // 2
    assert c["loss_sweeps"] >= 1 and c["sweep_retired"] > 0
    failed = {ev for ev, s in h.ca.sender.evs.states().items() if s == "failed"}
    assert failed == bad
    net = h.net
    net.blackhole_evs("a", "b", set())
    assert h.run(2.0)
    assert_exactly_once(h.sent_ab, h.received_ab)


def test_a_slow_path_is_not_a_dead_one_for_mrc():
    """Packets on a path far slower than the others are declared lost by RACK before their
    ACKs come: when the first copy's ACK (or its trim NACK) arrives after all, the loss is
    counted spurious, the reorder allowance grows and the EV the declaration retired is
    re-admitted at once, instead of being probed back."""
    net = SimNet(seed=5, n_paths=4)
    h = PairHarness(net, TransportConfig(line_rate_bps=1e9, base_rtt=60e-6))
    net.set_path("a", "b", 0, delay=400e-6)  # one path of four is 20x slower
    rng = random.Random(5)
    for _ in range(30):
        h.send_ab(blob(rng, 40_000))
    assert h.run(10.0), h.ca.snapshot()
    assert_exactly_once(h.sent_ab, h.received_ab)
    c = h.ca.stats.counters
    assert c["spurious_loss"] > 0 and c["ev_unretired"] > 0
    assert c["ev_unretired"] >= c["ev_retired"] // 2, dict(c)
    trs = [t for t in h.ca.stats.ev_transitions if t.reason == "spurious"]
    assert trs and all(t.old == "failed" and t.new == "good" for t in trs)

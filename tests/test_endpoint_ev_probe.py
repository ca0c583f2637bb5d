"""Controller EV probes (`Connection.probe`, endpoint.ev_probe) on the simulated network."""

from __future__ import annotations

import random

import pytest

from endpoint import codec
from endpoint.config import TransportConfig
from endpoint.ev_probe import CTL_SEQ_BIT, EvProber
from endpoint.simnet import PairHarness, PathSpec, SimNet


def _pair(seed: int = 1, delay: float = 20e-6) -> tuple[SimNet, PairHarness]:
    net = SimNet(seed=seed, default_path=PathSpec(delay=delay))
    return net, PairHarness(net, TransportConfig())


def _run_probe(net: SimNet, h: PairHarness, evs: list[int], timeout: float, until: float):
    run = h.ca.probe(evs, net.now, timeout)
    net.run(until, stop=lambda: run.done)
    return run


def test_probe_rtt_is_the_round_trip_delay_of_each_path_on_an_idle_connection() -> None:
    net, h = _pair()
    cfg = TransportConfig()
    evs = cfg.ev_values()
    pair = cfg.reply_pairs()
    # a few forward paths slower, so the RTTs differ per EV and must follow the path
    for i in range(0, net.n_paths, 3):
        net.set_path("a", "b", i, delay=70e-6)
    run = _run_probe(net, h, evs, timeout=1e-3, until=0.01)
    assert run.done and net.now < 1e-3
    for r in run.result():
        ev = r["ev"]
        fwd = net._dir_paths("a", "b")[net.path_index("a", "b", ev)].delay
        back = net._dir_paths("b", "a")[net.path_index("b", "a", pair.get(ev, ev))].delay
        assert r["rtt_us"] == pytest.approx((fwd + back) * 1e6, abs=0.01)
    assert {r["rtt_us"] for r in run.result()} == {40.0, 90.0}


def test_a_blackholed_ev_reports_none_after_the_timeout_and_the_others_their_rtt() -> None:
    net, h = _pair()
    evs = TransportConfig().ev_values()[:8]
    dead = {evs[2], evs[5]}
    net.blackhole_evs("a", "b", dead)
    t0 = net.now
    run = _run_probe(net, h, evs, timeout=500e-6, until=0.01)
    assert run.done
    assert net.now == pytest.approx(t0 + 500e-6)  # waited for the timeout, not longer
    got = {r["ev"]: r["rtt_us"] for r in run.result()}
    assert {ev for ev, rtt in got.items() if rtt is None} == dead
    assert all(got[ev] == pytest.approx(40.0) for ev in evs if ev not in dead)
    # the connection's own machinery saw nothing: controller probes retire and re-admit nothing
    assert h.ca.stats.ev_transitions == []
    assert h.ca.stats.counters["probe_tx"] == 0


def _transfer(probe: bool) -> tuple[PairHarness, object]:
    """20 + 20 messages a -> b with 4 EVs black-holed from 2 ms; with `probe`, a controller
    probes the dead EVs and 8 live ones at 4 ms, while the transfer goes on."""
    net, h = _pair(seed=3)
    rng = random.Random(3)
    evs = TransportConfig().ev_values()
    bad = set(rng.sample(evs, 4))
    for _ in range(20):
        h.send_ab(rng.randbytes(40_000))
    net.run(0.002)
    net.blackhole_evs("a", "b", bad)
    net.run(0.004)
    run = h.ca.probe(sorted(bad) + [e for e in evs if e not in bad][:8], net.now, 300e-6)
    if not probe:
        run = None
        h.ca.prober.runs.clear()
        h.ca.prober._queue.clear()
    for _ in range(20):
        h.send_ab(rng.randbytes(40_000))
    assert h.run(2.0)
    return h, (run, bad)


def test_controller_probes_do_not_disturb_the_connections_transfer() -> None:
    """Same seed, same traffic, with and without controller probes: the connection's own
    history -- EV transitions, its probes, delivery times -- is identical."""
    quiet, _ = _transfer(probe=False)
    probed, (run, bad) = _transfer(probe=True)
    assert run.done
    got = {r["ev"]: r["rtt_us"] for r in run.result()}
    assert {ev for ev, rtt in got.items() if rtt is None} == bad
    assert probed.ca.prober.sent == 12 and probed.ca.prober.answered == 8
    for h in (quiet, probed):
        assert all(h.received_ab[m] == [d] for m, d in h.sent_ab.items())
    assert probed.ca.stats.ev_transitions == quiet.ca.stats.ev_transitions
    assert probed.delivery_times == quiet.delivery_times
    c_q, c_p = quiet.ca.stats.counters, probed.ca.stats.counters
    for k in ("probe_tx", "ev_retired", "ev_readmitted", "probe_ack_ignored", "data_tx"):
        assert c_p[k] == c_q[k], k


def test_a_probe_answered_on_a_failed_ev_leaves_it_failed() -> None:
    net, h = _pair(seed=4)
    ev = TransportConfig().ev_values()[7]
    h.ca.sender.evs.retire(ev, net.now, h.ca.sender.recovery.probe_seq, "loss")
    run = _run_probe(net, h, [ev], timeout=1e-3, until=0.0005)  # before its own first probe
    assert run.result() == [{"ev": ev, "rtt_us": pytest.approx(40.0)}]
    assert h.ca.sender.evs.states()[ev] == "failed"


def test_bad_requests_name_the_field() -> None:
    _, h = _pair()
    with pytest.raises(ValueError, match="evs: 7 is not an EV"):
        h.ca.probe([7], 0.0, 1e-3)
    with pytest.raises(ValueError, match="evs: expected 1.."):
        h.ca.probe([], 0.0, 1e-3)
    with pytest.raises(ValueError, match="timeout"):
        h.ca.probe([TransportConfig().ev_base], 0.0, 0.0)


def test_prober_ignores_late_duplicate_and_foreign_answers() -> None:
    p = EvProber(remote_qp=5, tos=0)
    run = p.start([100, 101, 100], 0.0, 1e-3)
    assert run.evs == [100, 101, 100] and run.outstanding == 2  # a repeated EV probed once
    sent = p.take(10e-6)
    seqs = [codec.decode(pl).probe_seq for _, pl, _ in sent]
    assert all(s & CTL_SEQ_BIT for s in seqs)

    def ack(seq: int, ev: int) -> codec.ProbeAckPacket:
        return codec.decode(codec.encode_probe_ack(5, ev, seq, 0))  # type: ignore[return-value]

    p.on_ack(ack(seqs[0], 999), 20e-6)  # wrong EV echoed: not an answer
    p.on_ack(ack(seqs[0], 100), 30e-6)
    p.on_ack(ack(seqs[0], 100), 31e-6)  # duplicate
    assert run.rtt[100] == pytest.approx(20e-6) and not run.done
    p.expire(2e-3)
    assert run.done and run.result()[1] == {"ev": 101, "rtt_us": None}
    p.on_ack(ack(seqs[1], 101), 3e-3)  # after the deadline
    assert run.rtt[101] is None and p.late == 3

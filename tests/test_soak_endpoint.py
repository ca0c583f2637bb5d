"""Exactly-once accounting, draining and flat memory of endpoint jobs (what `testbed soak`
relies on), on the in-process network: no root, no fabric."""

from __future__ import annotations

from endpoint import codec
from endpoint.config import TransportConfig
from endpoint.ledger import Ledger, PeerLedger
from endpoint.simnet import Bottleneck, PairHarness, SimNet
from endpoint.stats import COMPLETIONS_KEPT
from endpoint.transport import Endpoint
from endpoint.wire import TOS_DATA
from endpoint.workload_roles import RECORDS_KEPT
from endpoint.workloads import Job
from tests.conftest import drive_jobs, keep_deliveries

HOSTS4 = ["h1", "h2", "h3", "h4"]


def test_the_ledger_counts_each_message_once_and_flags_a_second_delivery():
    p = PeerLedger(_below=5)
    for i in (5, 7, 6, 8):  # out of order, as a sprayed transport delivers
        p.post(100)
        assert p.deliver(i, 100)
    assert not p.deliver(6, 100)  # below the watermark now
    assert not p.deliver(8, 100)
    assert p.deliver(9, 100)
    d = p.as_dict()
    assert d["delivered_messages"] == 5 and d["delivered_bytes"] == 500
    assert d["duplicates"] == 2 and d["duplicate_bytes"] == 200
    assert d["pending_ids"] == 0  # contiguous: only the watermark is kept


def test_the_ledger_keeps_only_the_reordering_window_and_survives_id_wrap():
    start = 0xFFFFFFFF - 500
    p = PeerLedger(_below=start)
    ids = [(start + i) & 0xFFFFFFFF for i in range(1000)]
    for i in range(1, 1000, 2):  # every other id first: the window holds them
        assert p.deliver(ids[i], 1)
    assert p.as_dict()["pending_ids"] == 500
    for i in range(0, 1000, 2):
        assert p.deliver(ids[i], 1)
    assert p.as_dict()["pending_ids"] == 0
    assert not p.deliver(ids[0], 1) and not p.deliver(ids[999], 1)  # across the wrap too
    assert p.delivered_messages == 1000 and p.duplicates == 2


def test_a_message_handed_to_the_job_twice_is_a_duplicate_not_a_second_message():
    net = SimNet(seed=3)
    cfg = TransportConfig()
    eps = {h: net.add_endpoint(h, Endpoint(cfg)) for h in ("h1", "h2")}
    spec = {"kind": "bulk", "src": "h1", "dst": "h2", "bytes": 300_000, "message_bytes": 50_000}
    jobs = {h: Job(1, spec, h, ["h1", "h2"], eps[h], cfg) for h in eps}
    kept = keep_deliveries(jobs["h2"])
    for j in jobs.values():
        j.go(net.now)
    assert drive_jobs(net, eps, jobs, 5.0)
    rx = jobs["h2"].status()
    assert rx["duplicates"] == 0 and rx["received_bytes"] == 300_000
    assert rx["ledger"]["h1"]["delivered_messages"] == 6
    assert jobs["h1"].status()["ledger"]["h2"]["posted_bytes"] == 300_000
    jobs["h2"].on_delivery(kept[2])  # the application is handed message 2 again
    st = jobs["h2"].status()
    assert st["duplicates"] == 1
    assert st["ledger"]["h1"]["duplicate_bytes"] == len(kept[2].data)
    assert st["received_bytes"] == 300_000  # the role did not count it twice
    assert st["bad_messages"] == 0


def _tap(ep: Endpoint) -> list[bytes]:
    """Every datagram `ep` receives from now on, in order (it still handles each)."""
    seen: list[bytes] = []
    orig = ep.on_datagram

    def tap(raw: bytes, tos: int, now: float) -> None:
        seen.append(raw)
        orig(raw, tos, now)

    ep.on_datagram = tap  # type: ignore[method-assign]
    return seen


def test_the_receiver_never_hands_up_a_replayed_message():
    """The same packets fed to the receiver twice (a replay after completion): one delivery,
    and the replay is counted, not delivered."""
    net = SimNet(seed=1)
    h = PairHarness(net, TransportConfig(), qp_a=0x11, qp_b=0x22)
    orig = h.b.on_datagram
    captured = _tap(h.b)
    h.send_ab(b"m" * 4000)
    assert h.run(2.0)
    assert list(h.received_ab.values()) == [[b"m" * 4000]]
    before = h.cb.stats.counters["dup_data"]
    for raw in captured:
        orig(raw, TOS_DATA, net.now)
    assert h.b.take_deliveries() == []
    assert h.cb.stats.counters["dup_data"] > before
    assert h.cb.stats.counters["messages_delivered"] == 1


def test_a_message_whose_crc_fails_is_counted_and_never_delivered():
    net = SimNet(seed=2)
    cfg = TransportConfig()
    h = PairHarness(net, cfg, qp_a=0x11, qp_b=0x22)
    psn = h.cb.receiver.rcv_nxt
    payload = b"z" * 100
    raw = codec.encode_data(0x22, psn, 0, 0, 100, 49152, 1, 0xDEADBEEF, payload)
    h.b.on_datagram(raw, TOS_DATA, 0.0)
    assert h.cb.stats.drops["message_crc"] == 1
    assert h.b.take_deliveries() == []


def _jobs(spec: dict, msg_records: bool = False, seed: int = 1):
    net = SimNet(seed=seed)
    cfg = TransportConfig()
    eps = {h: net.add_endpoint(h, Endpoint(cfg)) for h in HOSTS4}
    for h in HOSTS4:
        net.set_bottleneck(h, Bottleneck())
    records: list[dict] = []
    jobs = {
        h: Job(1, spec, h, HOSTS4, eps[h], cfg, emit=records.append, msg_records=msg_records)
        for h in HOSTS4
    }
    for j in jobs.values():
        j.go(net.now)
    return net, eps, jobs, records


def _drain_and_settle(net, eps, jobs, run_s: float) -> None:
    drive_jobs(net, eps, jobs, net.now + run_s)
    for j in jobs.values():
        j.drain(net.now)
    end = net.now + 5.0
    while net.now < end and any(j.status()["unacked_messages"] for j in jobs.values()):
        drive_jobs(net, eps, jobs, net.now + 0.05)


def _assert_nothing_lost(jobs: dict) -> int:
    """Every message a host posted to a peer was delivered there once; returns the count."""
    total = 0
    for src, job in jobs.items():
        for dst, led in job.status()["ledger"].items():
            if not led["posted_messages"]:
                continue
            got = jobs[dst].status()["ledger"][src]
            assert got["delivered_messages"] == led["posted_messages"], (src, dst)
            assert got["delivered_bytes"] == led["posted_bytes"], (src, dst)
            assert got["duplicates"] == 0
            total += led["posted_messages"]
    return total


def test_a_long_permutation_drains_to_nothing_lost():
    spec = {"kind": "permutation", "bytes": "1GB", "message_bytes": 20_000}
    net, eps, jobs, records = _jobs(spec)
    _drain_and_settle(net, eps, jobs, 0.3)
    assert all(j.status()["unacked_messages"] == 0 for j in jobs.values())
    assert _assert_nothing_lost(jobs) > 20
    assert not [r for r in records if r["type"] == "msg"]  # msg records off


def test_an_endless_allreduce_keeps_its_state_bounded_and_drains_after_a_whole_step():
    spec = {"kind": "allreduce", "bytes": 8_000, "steps": 100_000, "message_bytes": 4096}
    net, eps, jobs, records = _jobs(spec)
    drive_jobs(net, eps, jobs, 1.5)
    rank0 = jobs["h1"].role
    steps = rank0.finished_steps
    assert steps > 20
    assert all(len(j.role.step_state) <= 3 for j in jobs.values())  # not one per step
    assert len(rank0.records) <= RECORDS_KEPT
    _drain_and_settle(net, eps, jobs, 0.0)
    assert all(j.status()["unacked_messages"] == 0 for j in jobs.values())
    assert rank0.done
    st = jobs["h1"].status()
    assert st["steps_finished"] == len(rank0.global_steps) or len(rank0.global_steps) == (
        RECORDS_KEPT
    )
    assert all(j.status()["bad_messages"] == 0 for j in jobs.values())
    assert _assert_nothing_lost(jobs) > 20 * 8
    assert not [r for r in records if r["type"] in ("msg", "rank_step")]


def test_completions_kept_by_a_connection_are_bounded():
    net = SimNet(seed=4)
    h = PairHarness(net, TransportConfig(), qp_a=0x11, qp_b=0x22)
    for _ in range(COMPLETIONS_KEPT + 50):
        h.send_ab(b"c" * 10)
    assert h.run(10.0)
    assert len(h.ca.stats.completions) == COMPLETIONS_KEPT
    assert h.ca.stats.snapshot()["completions"] == COMPLETIONS_KEPT + 50


def test_ledger_of_a_job_sums_duplicates_over_peers():
    led = Ledger()
    led.post("h2", 10)
    assert led.deliver("h2", 1, 10) and not led.deliver("h2", 1, 10)
    assert led.deliver("h3", 1, 10) and not led.deliver("h3", 1, 10)
    assert led.duplicates == 2
    assert set(led.as_dict()) == {"h2", "h3"}


def test_the_receiver_counts_out_of_order_arrivals_and_their_distance():
    """Packets that arrive behind a later PSN are counted, with the furthest distance (the
    REPS paper's out-of-order ratio and distance); in-order ones are not. The data packets of
    one run are replayed, reordered, into a fresh receiver."""
    h = PairHarness(SimNet(seed=1), TransportConfig(), qp_a=0x11, qp_b=0x22)
    seen = _tap(h.b)
    h.send_ab(b"m" * 20_000)
    assert h.run(2.0)
    data = [raw for raw in seen if isinstance(codec.decode(raw), codec.DataPacket)]
    assert len(data) >= 5 and h.cb.stats.counters["ooo_rx"] == 0  # the sim kept the order
    fresh = PairHarness(SimNet(seed=1), TransportConfig(), qp_a=0x11, qp_b=0x22)
    for i in (1, 2, 0, 3, 4):  # PSN 0 arrives behind PSN 2: once, 2 PSNs late
        fresh.b.on_datagram(data[i], TOS_DATA, 0.0)
    c = fresh.cb.stats.counters
    assert c["data_rx"] == 5
    assert c["ooo_rx"] == 1 and c["ooo_max_psns"] == 2

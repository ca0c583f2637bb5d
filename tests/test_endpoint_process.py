"""Endpoint process pieces without a fabric: workloads on the in-process network, metrics,
control framing, the UDP I/O designs and whole endpoint processes on loopback addresses.

Loopback processes run in the root namespace on 127.0.0.x with a random data port and EV range
(below the ephemeral port range), so they cannot collide with anything else on the machine.
"""

from __future__ import annotations

import io
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from contracts.framing import mrc_payload
from endpoint import udp_io as dio
from endpoint.codec import DataPacket
from endpoint.config import TransportConfig
from endpoint.control import ControlClient, ControlError, Coordinator, LineBuffer, parse_request
from endpoint.metrics import DeliveryBins, MetricsWriter, placed_samples, read_records
from endpoint.pacer import Pacer
from endpoint.process_config import ConfigError, EndpointConfig, job_transport_config
from endpoint.simnet import Bottleneck, SimNet
from endpoint.transport import Endpoint
from endpoint.workload_messages import HEADER, K_FLOW, make_message, parse_message
from endpoint.workloads import Job, WorkloadError, flows_of, parse_size
from tests.conftest import drive_jobs

ROOT = Path(__file__).resolve().parent.parent
HOSTS4 = ["h1", "h2", "h3", "h4"]


# ----- workloads on simnet ----------------------------------------------------------------------


def run_jobs(spec: dict, hosts: list[str], until: float = 5.0, bottleneck=None, cfg=None, seed=1):
    """Every host runs job 1 of ``spec`` on a SimNet; returns (all done, time, jobs, records)."""
    net = SimNet(seed=seed)
    cfg = cfg or TransportConfig()
    records: list[dict] = []
    eps = {h: net.add_endpoint(h, Endpoint(cfg)) for h in hosts}
    if bottleneck is not None:
        for h in hosts:
            net.set_bottleneck(h, bottleneck)
    jobs = {h: Job(1, spec, h, hosts, eps[h], cfg, emit=records.append) for h in hosts}
    for j in jobs.values():
        j.go(net.now)
    ok = drive_jobs(net, eps, jobs, until)
    return ok, net.now, jobs, records


@pytest.mark.parametrize(
    "spec,expect_rx",
    [
        ({"kind": "bulk", "src": "h1", "dst": "h3", "bytes": 2_000_000}, {"h3": 2_000_000}),
        ({"kind": "permutation", "bytes": "300KB"}, dict.fromkeys(HOSTS4, 300_000)),
        (
            {"kind": "permutation", "bytes": 1000, "pairs": [["h1", "h2"], ["h2", "h1"]]},
            {"h1": 1000, "h2": 1000},
        ),
        ({"kind": "incast", "dst": "h1", "srcs": "all", "bytes": 200_000}, {"h1": 600_000}),
        ({"kind": "incast", "dst": "h4", "srcs": ["h1", "h2"], "bytes": 5}, {"h4": 10}),
        (
            {"kind": "alltoall", "bytes": 100_000, "message_bytes": 30_000, "window_messages": 2},
            dict.fromkeys(HOSTS4, 300_000),
        ),
        ({"kind": "flows", "flows": [["h1", "h2", 7], ["h3", "h2", "2KiB"]]}, {"h2": 7 + 2048}),
    ],
)
def test_flow_workloads_deliver_every_byte(spec, expect_rx):
    ok, _t, jobs, records = run_jobs(spec, HOSTS4, bottleneck=Bottleneck())
    assert ok
    for h, job in jobs.items():
        st = job.status()
        assert st["received_bytes"] == expect_rx.get(h, 0), h
        assert st["bad_messages"] == 0
        assert st["sent_bytes"] == st["expected_tx"]
    rx = [r for r in records if r["type"] == "msg" and r["side"] == "rx"]
    tx = [r for r in records if r["type"] == "msg" and r["side"] == "tx"]
    assert sum(r["bytes"] for r in rx) == sum(expect_rx.values())
    assert sorted((r["peer"], r["bytes"]) for r in tx) != [] and len(tx) == len(rx)
    assert all(r["acked"] >= r["posted"] for r in tx)


def test_bulk_on_simnet_runs_at_the_bottleneck_rate():
    ok, t, jobs, _ = run_jobs(
        {"kind": "bulk", "src": "h1", "dst": "h2", "bytes": 3_000_000},
        ["h1", "h2"],
        bottleneck=Bottleneck(rate_bps=100e6),
    )
    assert ok
    ideal = 3_000_000 * (1400 + 52 + 42) / 1400 * 8 / 100e6
    assert t < ideal * 1.05, f"{t:.4f} s vs ideal {ideal:.4f} s"


def test_allreduce_steps_are_synchronised_and_exact():
    steps, nbytes = 4, 1_000_000
    ok, _t, jobs, records = run_jobs(
        {"kind": "allreduce", "hosts": "all", "bytes": nbytes, "steps": steps},
        HOSTS4,
        bottleneck=Bottleneck(),
    )
    assert ok
    per_hop = -(-2 * 3 * nbytes // 4)  # ceil(2(N-1)/N x bytes)
    for job in jobs.values():
        st = job.status()
        assert st["steps_finished"] == steps and st["bad_messages"] == 0
        assert st["received_bytes"] if "received_bytes" in st else True
        assert job.bytes_rx >= steps * per_hop  # data plus the barrier's tiny messages
    rank_steps = [r for r in records if r["type"] == "rank_step"]
    glob = sorted((r for r in records if r["type"] == "step"), key=lambda r: r["step"])
    assert [r["step"] for r in glob] == list(range(steps))
    assert len(rank_steps) == steps * 4
    for k, g in enumerate(glob):
        mine = [r for r in rank_steps if r["step"] == k]
        # The step ends when the slowest rank finishes ...
        assert g["end"] == pytest.approx(max(r["end"] for r in mine))
        # ... and no rank starts step k+1 before every rank finished step k.
        if k + 1 < steps:
            nxt = [r for r in rank_steps if r["step"] == k + 1]
            assert min(r["start"] for r in nxt) >= g["end"]
        assert g["ms"] > 0
    # Data placed per hop per step is exactly the scenario runner's per-hop flow size.
    data = [r for r in records if r["type"] == "msg" and r["side"] == "rx" and r["bytes"] > 24]
    assert sum(r["bytes"] for r in data) == steps * 4 * per_hop


def test_allreduce_two_ranks_and_a_subset_ring():
    ok, _t, jobs, records = run_jobs(
        {"kind": "allreduce", "hosts": ["h3", "h1"], "bytes": 50_000, "steps": 3}, HOSTS4
    )
    assert ok
    assert jobs["h2"].status()["peers"] == [] and jobs["h2"].done
    assert len([r for r in records if r["type"] == "step"]) == 3


def test_allreduce_survives_loss_and_blackholed_evs():
    net_spec = {"kind": "allreduce", "bytes": 200_000, "steps": 2}
    net = SimNet(seed=3)
    cfg = TransportConfig()
    eps = {h: net.add_endpoint(h, Endpoint(cfg)) for h in HOSTS4}
    for a in HOSTS4:
        for b in HOSTS4:
            if a != b:
                net.set_all_paths(a, b, loss=0.02)
                net.blackhole_evs(a, b, set(cfg.ev_values()[:16]))
    records: list = []
    jobs = {h: Job(1, net_spec, h, HOSTS4, eps[h], cfg, emit=records.append) for h in HOSTS4}
    for j in jobs.values():
        j.go(0.0)
    assert drive_jobs(net, eps, jobs, until=10.0)
    assert all(j.status()["bad_messages"] == 0 for j in jobs.values())


@pytest.mark.parametrize(
    "mode,reply_ev", [("mrc", "paired"), ("mrc", "spray"), ("single-path", "paired")]
)
def test_per_connection_ev_bases_deliver_and_replies_use_the_right_evs(mode, reply_ev):
    """With ev_seed every QP draws its own EV base, as RoCE NICs pick a source port per QP;
    each end computes the other's, so paired (and single-path) replies leave on the data
    sender's EVs and sprayed replies on the replier's own, and everything still arrives."""
    from endpoint import codec
    from endpoint.workloads import qp_number

    cfg = TransportConfig(mode=mode, reply_ev=reply_ev, ev_seed=7)
    net = SimNet(seed=2)
    eps = {h: net.add_endpoint(h, Endpoint(cfg)) for h in HOSTS4}
    seen: list[tuple[str, str, int, bool]] = []
    inject = net.inject

    def recording(src, tx):
        seen.append((src, tx.peer, tx.ev, isinstance(codec.decode(tx.payload), DataPacket)))
        inject(src, tx)

    net.inject = recording
    spec = {"kind": "permutation", "bytes": "200KB"}
    jobs = {h: Job(1, spec, h, HOSTS4, eps[h], cfg) for h in HOSTS4}
    for j in jobs.values():
        j.go(0.0)
    assert drive_jobs(net, eps, jobs, until=5.0)

    def evs(src: str, dst: str) -> set[int]:
        own = cfg.for_connection(src, dst, qp_number(1, HOSTS4.index(dst) + 1))
        return set(own.ev_values())

    bases = {min(evs(a, b)) for a in HOSTS4 for b in HOSTS4 if a != b}
    assert len(bases) == 12, "every direction of every connection draws its own base"
    data = {(s, d) for s, d, _, is_data in seen if is_data}
    assert data
    for src, dst, ev, is_data in seen:
        if is_data:
            assert ev in evs(src, dst), f"{src}->{dst} data on EV {ev}"
        elif (dst, src) in data:  # a reply to dst's data
            want = evs(src, dst) if reply_ev == "spray" and mode == "mrc" else evs(dst, src)
            assert ev in want, f"{src}->{dst} reply on EV {ev}"
    if mode == "single-path":  # one source port per connection: its base, EV index 0
        for pair in data:
            used = {ev for s, d, ev, is_data in seen if is_data and (s, d) == pair}
            assert used == {min(evs(*pair))}, pair


@pytest.mark.parametrize(
    "spec,error",
    [
        ({"kind": "nope"}, "workload.kind"),
        ({"kind": "bulk", "src": "h1", "dst": "h9", "bytes": 1}, "workload.dst"),
        ({"kind": "bulk", "src": "h1", "dst": "h1", "bytes": 1}, "workload.dst"),
        ({"kind": "bulk", "src": "h1", "dst": "h2"}, "workload.bytes"),
        ({"kind": "bulk", "src": "h1", "dst": "h2", "bytes": "3 parsecs"}, "workload.bytes"),
        ({"kind": "bulk", "src": "h1", "dst": "h2", "bytes": 1, "color": 1}, "workload.color"),
        ({"kind": "incast", "dst": "h1", "srcs": ["h2", "h2"], "bytes": 1}, "workload.srcs"),
        ({"kind": "incast", "dst": "h1", "srcs": ["h7"], "bytes": 1}, "workload.srcs[0]"),
        ({"kind": "flows", "flows": [["h1", "h2"]]}, "workload.flows[0]"),
        ({"kind": "permutation", "bytes": 1, "pairs": [["h1"]]}, "workload.pairs[0]"),
        ({"kind": "allreduce", "bytes": 1, "steps": 0}, "workload.steps"),
        ({"kind": "allreduce", "bytes": 1, "hosts": "some"}, "workload.hosts"),
        (
            {"kind": "bulk", "src": "h1", "dst": "h2", "bytes": 1, "message_bytes": 0},
            "message_bytes",
        ),
        ({"kind": "alltoall", "bytes": 1, "window_messages": 0}, "window_messages"),
    ],
)
def test_bad_workloads_name_the_key(spec, error):
    with pytest.raises(WorkloadError, match=error.replace("[", r"\[").replace("]", r"\]")):
        Job(1, spec, "h1", HOSTS4, Endpoint(), TransportConfig())


def test_job_numbers_and_qps():
    ep = Endpoint()
    with pytest.raises(WorkloadError, match="job"):
        Job(0, {"kind": "alltoall", "bytes": 1}, "h1", HOSTS4, ep, TransportConfig())
    job = Job(7, {"kind": "alltoall", "bytes": 1}, "h2", HOSTS4, ep, TransportConfig())
    assert sorted(job.peer_of_qp) == [(7 << 12) | i for i in (1, 3, 4)]
    assert job.peer_qps["h1"][0].remote_qp == (7 << 12) | 2
    with pytest.raises(WorkloadError, match="already prepared"):
        Job(7, {"kind": "alltoall", "bytes": 1}, "h2", HOSTS4, ep, TransportConfig())


def test_sizes_and_messages():
    assert parse_size("20MB", "x") == 20_000_000
    assert parse_size("1 MiB", "x") == 1 << 20
    assert parse_size(5, "x") == 5
    with pytest.raises(WorkloadError):
        parse_size(True, "x")
    m = make_message(K_FLOW, 3, 0, 9, 5000)
    assert len(m) == 5000 and parse_message(m, 3) == (K_FLOW, 0, 9, b"")
    assert parse_message(m, 4) is None  # another job's message
    bad = bytearray(m)
    bad[-1] ^= 1
    assert parse_message(bytes(bad), 3) is None
    tiny = make_message(K_FLOW, 3, 0, 0, 5)
    assert len(tiny) == 5 and parse_message(tiny, 3) is not None
    assert len(make_message(K_FLOW, 3, 0, 0, HEADER.size)) == HEADER.size
    assert flows_of({"kind": "permutation", "bytes": 1}, HOSTS4)[0].dst == "h3"


# ----- metrics ----------------------------------------------------------------------------------


def test_delivery_bins_and_writer(tmp_path):
    bins = DeliveryBins(0.01)
    bins.placed(1, "h1", 10.0005, 1000)
    bins.placed(1, "h2", 10.0095, 500)
    bins.placed(1, "h1", 10.0101, 7)
    bins.delivered(1, 10.002, 1500)
    bins.placed(2, "h1", 10.003, 1)
    out = bins.take(10.0100001)
    assert [(r["job"], r["t"], r["placed"]) for r in out] == [(1, 10.0, 1500), (2, 10.0, 1)]
    assert out[0]["ms"][0] == 1000 and out[0]["ms"][9] == 500 and out[0]["delivered"] == 1500
    assert out[0]["by_peer"] == {"h1": 1000, "h2": 500}
    rest = bins.take()
    assert len(rest) == 1 and rest[0]["placed"] == 7
    path = tmp_path / "m.jsonl"
    w = MetricsWriter(path)
    w.write_all(out + rest)
    w.flush()
    with open(path, "a") as f:
        f.write('{"type": "bin", "torn')  # a killed writer's last line
    recs = read_records(path)
    assert len(recs) == 3
    samples = placed_samples(recs, job=1)
    assert samples[0] == (10.0, 1000) and sum(n for _, n in samples) == 1507
    w.close()
    s = io.StringIO()
    MetricsWriter(None, stream=s).write({"type": "x", "t": 1})


# ----- control framing, config --------------------------------------------------------------------


def test_control_framing_and_requests():
    lb = LineBuffer()
    assert lb.feed(b'{"op": "pi') == []
    assert lb.feed(b'ng"}\n\n{"op":"stats"}\n{"op"') == [b'{"op": "ping"}', b'{"op":"stats"}']
    assert parse_request(b'{"op":"stop"}') == {"op": "stop"}
    for bad, msg in [(b"[1]", "object"), (b"{", "not JSON"), (b'{"op":"dance"}', "op:")]:
        with pytest.raises(ValueError, match=msg):
            parse_request(bad)
    with pytest.raises(ValueError, match="longer"):
        LineBuffer().feed(b"x" * (1 << 21))


def test_endpoint_config_validation():
    ok = EndpointConfig.from_obj(
        {"hosts": {"a": ["10.1.1.1", "10.2.1.1"], "b": ["10.1.2.1", "10.2.2.1"]}}
    )
    assert ok.planes == 2 and ok.port == 4791
    tc = job_transport_config(ok, {"mode": "single-path", "evs": 1, "ev_base": 50000})
    assert (
        tc.planes == 1
        and tc.num_evs == 1
        and tc.ev_base == 50000
        and tc.mode.value == "single-path"
    )
    assert job_transport_config(ok, {}).planes == 2
    for obj, msg in [
        ([], "config"),
        ({"hosts": {}}, "config.hosts"),
        ({"hosts": {"a": ["x"]}}, r"config.hosts.a\[0\]"),
        ({"hosts": {"a": ["10.0.0.1"], "b": ["10.0.0.2", "10.0.0.3"]}}, "config.hosts.b"),
        ({"hosts": {"a": ["10.0.0.1"]}, "color": 1}, "config.color"),
        ({"hosts": {"a": ["10.0.0.1"]}, "io": "carrier-pigeon"}, "config.io"),
        ({"hosts": {"a": ["10.0.0.1"]}, "transport": {"warp": 9}}, "config.transport.warp"),
        ({"hosts": {"a": ["10.0.0.1"]}, "pace_mbps": -1}, "config.pace_mbps"),
    ]:
        with pytest.raises(ConfigError, match=msg):
            EndpointConfig.from_obj(obj)
    with pytest.raises(ConfigError, match="mode"):
        job_transport_config(ok, {"mode": "tcp"})
    with pytest.raises(ConfigError, match="transport"):
        job_transport_config(ok, {"evs": 999})
    assert job_transport_config(ok, {"transport": {"ev_seed": 3}}).ev_seed == 3
    with pytest.raises(ConfigError, match=r"^ev_base: pins every connection's EVs"):
        job_transport_config(ok, {"ev_base": 50000, "transport": {"ev_seed": 3}})
    with pytest.raises(ConfigError, match="ev_seed must be an integer or None"):
        job_transport_config(ok, {"transport": {"ev_seed": "3"}})


def test_pacer_holds_the_rate_and_lets_control_first():
    p = Pacer(100, planes=1, burst_frames=1, now=0.0)
    sent: list = []

    def send(plane, ev, dst, payload, tos):
        sent.append((t, tos))

    for _ in range(10):
        p.push(0, (1, "x", bytes(1458), 42), control=False)
    p.push(0, (1, "x", bytes(44), 184), control=True)
    t = 0.0
    wake = p.drain(t, send)
    assert sent[0][1] == 184 and len(sent) == 1  # control first; the burst is one frame
    while p.queued:
        t = wake
        wake = p.drain(t, send)
    assert len(sent) == 11
    # 10 frames of 1500 B at 100 Mbps after the first burst: 1.2 ms per 10 frames.
    assert t == pytest.approx((10 * 1500 - (1500 - 86)) * 8 / 100e6, rel=0.01)


def test_pacer_counts_nic_time_lost_only_while_frames_waited():
    """A wake-up later than the bucket's depth loses NIC time only if frames were waiting for
    it: an idle NIC whose bucket fills loses nothing (the validity verdict reads this)."""
    p = Pacer(100, planes=1, burst_frames=2, now=0.0)  # 2 frames of 1514 B: 242 us at 100 Mbps
    sent: list = []
    for _ in range(6):
        p.push(0, (1, "x", bytes(1472), 42), control=False)  # 1514 B frames
    wake = p.drain(0.0, lambda *a: sent.append(a))
    assert len(sent) == 2 and p.lost_bytes == 0 and wake == pytest.approx(1514 * 8 / 100e6)
    # Woken 1 ms late: the bucket held 2 frames and the 12.5 kB over them overflowed.
    late = wake + 1e-3
    p.drain(late, lambda *a: sent.append(a))
    assert len(sent) == 4
    assert p.lost_bytes == pytest.approx(1514 + 100e6 / 8 * late - 2 * 1514 - 1514, rel=1e-6)
    lost = p.lost_bytes
    t = late
    while p.queued:  # served on time from here: nothing more is lost
        t = p.drain(t, lambda *a: sent.append(a)) or t
    assert p.lost_bytes == lost and p.sent_bytes == 6 * 1514
    # Idle for a second, then new frames: the full bucket is no loss.
    p.push(0, (1, "x", bytes(1472), 42), control=False)
    p.drain(t + 1.0, lambda *a: sent.append(a))
    assert p.lost_bytes == lost


def test_pacer_counts_the_frames_its_buckets_let_go_now():
    p = Pacer(100, planes=2, burst_frames=4, now=0.0)
    assert p.frames_now(0.0) == 8  # two full buckets of 4 frames
    sent: list = []
    for _ in range(5):
        p.push(0, (1, "x", bytes(1458), 42), control=False)
    p.drain(0.0, lambda *a: sent.append(a))
    assert len(sent) == 4 and p.frames_now(0.0) == 4  # plane 0 spent, plane 1 full
    # 120 us later plane 0 has earned one 1500 B frame at 100 Mbps (and 0.14 us more).
    assert p.frames_now(120.14e-6) == 5
    assert p.frames_now(1.0) == 8  # never more than the buckets hold


def test_a_paced_endpoint_asks_the_transport_only_for_what_can_leave_now():
    """A window of 64 packets is open, but the pacer lets 4 frames go: the transport hands out
    4 + pace_queue, and the rest keeps its send timestamps for later (no RTT in the pacer)."""
    from endpoint.process import EndpointProcess

    proc = EndpointProcess.__new__(EndpointProcess)
    proc.cfg = EndpointConfig.from_obj({"hosts": {"a": ["10.0.0.1"], "b": ["10.0.0.2"]}})
    proc.pacer = Pacer(100, planes=1, burst_frames=4, now=0.0)
    proc.ep = Endpoint(TransportConfig(base_rtt=10e-3))
    proc.ep.connect(1, 2, "b")
    proc.ep.send(1, bytes(64 * 1400), 0.0)
    sent: list = []

    class Tx:
        backlog = False

    proc.tx = Tx()
    proc._paced_send = lambda plane, ev, dst, payload, tos: sent.append(payload)
    wake = proc._transmit(0.0)
    conn = proc.ep.connections[1]
    assert len(sent) == 4 and proc.pacer.data_queued() == proc.cfg.pace_queue
    assert len(conn.sender.inflight) == 4 + proc.cfg.pace_queue
    assert wake is not None and wake > 0.0  # woken when the next queued frame may leave
    proc._transmit(0.0)  # nothing more while pace_queue packets wait
    assert len(conn.sender.inflight) == 4 + proc.cfg.pace_queue


def test_a_data_limited_poll_lets_the_qps_take_turns():
    ep = Endpoint(TransportConfig(base_rtt=10e-3))
    for qp in (1, 2, 3):
        ep.connect(qp, qp + 10, "b")
        ep.send(qp, bytes(20 * 1400), 0.0)
    firsts = []
    for k in range(6):
        out = ep.poll_transmit(k * 1e-3, data_limit=1)
        assert len(out) == 1
        firsts.append(out[0].qp)
    assert firsts == [1, 2, 3, 1, 2, 3]
    assert len(ep.poll_transmit(1.0, data_limit=0)) == 0
    assert len(ep.poll_transmit(1.0)) == 3 * 20 - 6  # no limit: the whole window


# ----- UDP I/O designs --------------------------------------------------------------------------


def test_udp_checksum_matches_scapy():
    from scapy.layers.inet import IP, UDP

    rng = random.Random(5)
    for n in (0, 1, 2, 33, 1452):
        payload = rng.randbytes(n)
        pkt = IP(src="10.1.1.1", dst="10.1.2.1") / UDP(sport=49152 + n, dport=4791) / payload
        want = IP(bytes(pkt))[UDP].chksum
        got = dio.udp_checksum(
            socket.inet_aton("10.1.1.1"), socket.inet_aton("10.1.2.1"), 49152 + n, 4791, payload
        )
        assert got == want


def _loopback_addr() -> str:
    return f"127.{random.randint(1, 250)}.{random.randint(1, 250)}.{random.randint(2, 250)}"


@pytest.mark.parametrize("kind", dio.IO_KINDS)
def test_io_designs_send_from_the_ev_port_with_the_tos(kind):
    if kind == "raw" and os.geteuid() != 0:
        pytest.skip("raw sockets need root")
    port = random.randint(20000, 30000)
    src, dst = _loopback_addr(), _loopback_addr()
    rx = dio.open_rx(dst, port)
    peek = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # to see the source port
    tx = dio.open_sender(kind, [src], port)
    try:
        ev = random.randint(10000, 19000)
        tx.send(0, ev, dst, b"data" * 100, 42)
        tx.send(0, ev + 1, dst, b"ctl", 184)
        assert tx.flush()
        time.sleep(0.05)
        got: list = []
        dio.recv_batch(rx, got)
        assert got == [(b"data" * 100, 42), (b"ctl", 184)]
        tx.send(0, ev, dst, b"again", 42)
        time.sleep(0.05)
        data, anc, _f, addr = rx.recvmsg(2048, socket.CMSG_SPACE(4))
        assert data == b"again" and addr == (src, ev)
        assert tx.sent == 3 and tx.errors == 0
    finally:
        tx.close()
        rx.close()
        peek.close()


# ----- whole processes on loopback ----------------------------------------------------------------


class Loopback:
    """Endpoint processes in the root namespace on random 127.x addresses and ports."""

    def __init__(self, tmp: Path, hosts: list[str], **extra) -> None:
        self.tmp = tmp
        base = random.randint(2, 200)
        net = random.randint(1, 250)
        addrs = extra.pop("addresses", None) or {
            h: [f"127.{net}.{base}.{i + 1}"] for i, h in enumerate(hosts)
        }
        self.config = {
            "hosts": addrs,
            "port": random.randint(20000, 30000),
            "transport": {"ev_base": random.randint(10000, 19000)},
            **extra,
        }
        self.procs: dict[str, subprocess.Popen] = {}
        for h in hosts:
            self.procs[h] = self.spawn(h)
        for h, p in self.procs.items():
            assert p.stdout.readline().startswith("ready"), h

    def spawn(self, h: str, *extra: str) -> subprocess.Popen:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "endpoint",
                "--host",
                h,
                "--config",
                json.dumps(self.config),
                "--control",
                str(self.sock(h)),
                "--metrics",
                str(self.metrics(h)),
                *extra,
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def sock(self, h: str) -> Path:
        return self.tmp / f"{h}.sock"

    def metrics(self, h: str) -> Path:
        return self.tmp / f"{h}.jsonl"

    def coordinator(self) -> Coordinator:
        return Coordinator({h: str(self.sock(h)) for h in self.procs})

    def close(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            p.stdout.close()
            p.stderr.close()


@pytest.fixture
def loopback(tmp_path):
    made: list[Loopback] = []

    def make(hosts, **extra):
        lb = Loopback(tmp_path, hosts, **extra)
        made.append(lb)
        return lb

    yield make
    for lb in made:
        lb.close()


def test_processes_bulk_on_loopback_with_metrics(loopback):
    lb = loopback(["a", "b"])
    co = lb.coordinator()
    res = co.run(1, {"workload": {"kind": "bulk", "src": "a", "dst": "b", "bytes": "3MB"}})
    assert res["a"]["done"] and res["b"]["done"]
    assert res["b"]["received_bytes"] == 3_000_000 and res["a"]["sent_bytes"] == 3_000_000
    stats = co.stats(1)
    conn = stats["a"]["jobs"]["1"]["connections"]["b"]
    assert conn["counters"]["data_tx"] >= 3_000_000 // mrc_payload()
    assert stats["b"]["process"]["rx_datagrams"] >= conn["counters"]["data_tx"]
    co.stop()
    for p in lb.procs.values():
        assert p.wait(10) == 0
    recs = read_records(lb.metrics("b"))
    kinds = {r["type"] for r in recs}
    assert {"start", "job", "bin", "counters", "msg", "end"} <= kinds
    assert sum(r["placed"] for r in recs if r["type"] == "bin") == 3_000_000
    assert sum(r["delivered"] for r in recs if r["type"] == "bin") == 3_000_000
    assert sum(n for _, n in placed_samples(recs, 1)) == 3_000_000
    sender = read_records(lb.metrics("a"))
    assert any(r["type"] == "rtt" and r["n"] > 0 for r in sender)
    tx = [r for r in sender if r["type"] == "msg" and r["side"] == "tx"]
    assert sum(r["bytes"] for r in tx) == 3_000_000
    assert [r["event"] for r in recs if r["type"] == "job"] == ["prepared", "go", "done"]
    assert recs[-1]["type"] == "end" and recs[-1]["reason"] == "stop request"


def test_processes_allreduce_and_alltoall_on_loopback(loopback):
    lb = loopback(["a", "b", "c"])
    co = lb.coordinator()
    res = co.run(1, {"workload": {"kind": "allreduce", "bytes": 300_000, "steps": 3}})
    assert all(r["done"] for r in res.values())
    assert res["a"]["rank"] == 0 and len(res["a"]["global_steps"]) == 3
    res = co.run(
        2, {"workload": {"kind": "alltoall", "bytes": 200_000}, "mode": "spray-no-failover"}
    )
    assert all(r["done"] and r["received_bytes"] == 400_000 for r in res.values())
    res = co.run(
        3,
        {
            "workload": {"kind": "incast", "dst": "a", "srcs": "all", "bytes": 100_000},
            "mode": "single-path",
            "evs": 1,
        },
    )
    assert res["a"]["received_bytes"] == 200_000
    co.stop()
    steps = [r for r in read_records(lb.metrics("a")) if r["type"] == "step"]
    assert [s["step"] for s in steps] == [0, 1, 2]


def test_control_errors_do_not_hurt_the_process(loopback):
    lb = loopback(["a", "b"])
    with ControlClient(str(lb.sock("a"))) as c:
        for req, msg in [
            ({"op": "go", "job": 5}, "no job 5"),
            ({"op": "start", "job": 1}, "workload"),
            ({"op": "start", "job": 1, "workload": {"kind": "bulk"}, "zap": 1}, "zap"),
            (
                {"op": "start", "job": 1, "workload": {"kind": "bulk", "src": "a", "bytes": 1}},
                "workload.dst",
            ),
            (
                {
                    "op": "start",
                    "job": 1,
                    "workload": {"kind": "alltoall", "bytes": 1},
                    "mode": "x",
                },
                "mode",
            ),
            ({"op": "start", "job": 99999, "workload": {"kind": "alltoall", "bytes": 1}}, "job"),
            ({"op": "wait", "job": 1}, "no job"),
        ]:
            with pytest.raises(ControlError, match=msg):
                c.call(req)
        c.sock.sendall(b"garbage\n")
        with pytest.raises(ControlError, match="not JSON"):
            c.receive()
        assert c.call({"op": "ping"})["host"] == "a"
        c.call({"op": "start", "job": 1, "workload": {"kind": "alltoall", "bytes": 1}})
        with pytest.raises(ControlError, match="exists"):
            c.call({"op": "start", "job": 1, "workload": {"kind": "alltoall", "bytes": 1}})
        # wait with a timeout answers "not done" without blocking other clients
        c.send({"op": "wait", "job": 1, "timeout": 0.2})
        with ControlClient(str(lb.sock("a"))) as c2:
            assert c2.call({"op": "stats"})["host"] == "a"
        assert c.receive()["done"] is False


def test_sigterm_flushes_metrics(loopback):
    lb = loopback(["a", "b"])
    co = lb.coordinator()
    co.start(1, {"workload": {"kind": "bulk", "src": "a", "dst": "b", "bytes": "200MB"}})
    co.go(1)
    time.sleep(0.3)  # mid-transfer on purpose: the point is a signal during the workload
    co.close()
    for p in lb.procs.values():
        p.send_signal(signal.SIGTERM)
    for p in lb.procs.values():
        assert p.wait(10) == 0
    recs = read_records(lb.metrics("b"))
    assert recs[-1]["type"] == "end" and recs[-1]["reason"] == "SIGTERM"
    assert sum(r["placed"] for r in recs if r["type"] == "bin") > 0
    assert any(r["type"] == "counters" for r in recs)
    assert not lb.sock("a").exists()


def test_bad_command_lines_exit_2(tmp_path):
    def run(*args):
        return subprocess.run(
            [sys.executable, "-m", "endpoint", *args], cwd=ROOT, capture_output=True, text=True
        )

    p = run("--host", "a", "--config", "{nope", "--control", str(tmp_path / "s"))
    assert p.returncode == 2 and "not JSON" in p.stderr
    p = run("--host", "z", "--config", '{"hosts": {"a": ["127.0.0.1"]}}', "--control", "x")
    assert p.returncode == 2 and "--host" in p.stderr
    p = run("--host", "a", "--config", str(tmp_path / "missing.json"), "--control", "x")
    assert p.returncode == 2 and "cannot read" in p.stderr


def test_two_planes_spread_evs_over_both_nics(loopback):
    net = random.randint(1, 250)
    base = random.randint(2, 200)
    hosts = {"a": [f"127.{net}.{base}.1", f"127.{net}.{base + 1}.1"]}
    hosts["b"] = [f"127.{net}.{base}.2", f"127.{net}.{base + 1}.2"]
    lbk = loopback(["a", "b"], addresses=hosts)
    co = lbk.coordinator()
    res = co.run(1, {"workload": {"kind": "bulk", "src": "a", "dst": "b", "bytes": 2_000_000}})
    assert res["b"]["received_bytes"] == 2_000_000
    by_addr = co.stats()["b"]["process"]["rx_by_address"]
    n1, n2 = by_addr[hosts["b"][0]], by_addr[hosts["b"][1]]
    assert abs(n1 - n2) <= 0.1 * (n1 + n2), f"EVs alternate planes: {by_addr}"
    co.stop()


def test_bench_table_and_helpers():
    from testbed.bench.endpoint_bench import format_endpoint_table, ideal_goodput_mbps
    from testbed.harness.endpoints import fabric_endpoint_config
    from topologies import leaf_spine

    assert ideal_goodput_mbps(100) == pytest.approx(100 * 1420 / 1514)  # full packets at 1500
    assert ideal_goodput_mbps(100, mtu=9000) == pytest.approx(100 * 8920 / 9014)
    cfg = fabric_endpoint_config(leaf_spine(spines=1, leaves=2, hosts_per_leaf=1, planes=2))
    assert cfg["hosts"]["h2"] == ["10.1.2.1", "10.2.2.1"]
    row = {"endpoint_sender": 1, "endpoint_receiver": 1, "udp_blaster": 2, "udp_sink": 2}
    d = {
        "bench": "endpoint",
        "meta": {"reps": 1, "cpus": 2},
        "loopback": [
            {"io": "udp", "pps": row, "cpu_us_per_packet": row, "ratio": {"x": 1.0}},
        ],
        "goodput": [
            {
                "link_mbps": 100,
                "goodput_mbps": {"endpoint": 90.0, "ideal": 93.7, "udp_blaster": 96.0},
                "ratio": {"endpoint_vs_link": 0.9, "endpoint_vs_ideal": 0.96},
            }
        ],
    }
    text = format_endpoint_table(d)
    assert "udp_blaster" in text and "93.7" in text
    assert "MRC header overhead ceiling: 93.79 % at 1500 B" in text and "88.65 %" in text


def test_a_deny_mask_keeps_a_transfer_off_its_evs_and_says_so(loopback):
    """The control socket's deny op (MRC's EV deny): given before the job, it applies to the
    connections the job makes; the transfer completes without one byte on a denied EV, the
    event stream records each EV's change with reason `deny`, and bad rules are refused."""
    lb = loopback(["a", "b"])
    co = lb.coordinator()
    # A rule in force that a new job's connections cannot take (it denies every EV): the job
    # does not start, and nothing of it is left.
    assert co.deny(0x0, 0x0, ["a"])["a"]["ok"]
    with pytest.raises(ControlError, match="min_active_evs"):
        co.start(9, {"workload": {"kind": "bulk", "src": "a", "dst": "b", "bytes": 1000}}, ["a"])
    assert co.stats()["a"]["jobs"] == {}
    assert co.allow(0x0, 0x0, ["a"])["a"]["ok"]
    assert co.deny(0x3, 0x1, ["a"])["a"]["ok"]
    with ControlClient(str(lb.sock("a"))) as c:
        with pytest.raises(ControlError, match="value: 0x4 has bits outside mask 0x3"):
            c.call({"op": "deny", "mask": 0x3, "value": 0x4})
        with pytest.raises(ControlError, match="mask: expected an EV bit pattern"):
            c.call({"op": "deny", "mask": 0xFFFF0, "value": 0})
    res = co.run(1, {"workload": {"kind": "bulk", "src": "a", "dst": "b", "bytes": "1MB"}})
    assert res["b"]["received_bytes"] == 1_000_000
    co.stop()
    for p in lb.procs.values():
        assert p.wait(10) == 0
    recs = read_records(lb.metrics("a"))
    denied = {r["ev"] for r in recs if r["type"] == "ev" and r["new"] == "denied"}
    assert denied and all(ev & 0x3 == 0x1 for ev in denied)
    assert all(r["reason"] == "deny" for r in recs if r["type"] == "ev" and r["new"] == "denied")
    used = {
        int(key.rsplit(":", 1)[1])
        for r in recs
        if r["type"] == "evtx"
        for key, n in r["bytes"].items()
        if n > 200  # data, not the ACKs this host sends for the other direction
    }
    assert used and not used & denied


def test_per_peer_denies_and_the_event_queue(loopback):
    """A deny with `peers` acts only on the connections to those hosts (MRC denies per QP), and
    the `events` op hands a controller every EV state change once, with its reason."""
    lb = loopback(["a", "b", "c"])
    co = lb.coordinator()
    co.start(1, {"workload": {"kind": "alltoall", "bytes": 1000}})
    assert co.deny(0x3, 0x1, ["a"], peers=["b"])["a"]["ok"]
    with ControlClient(str(lb.sock("a"))) as c:
        with pytest.raises(ControlError, match="peers: expected a non-empty list"):
            c.call({"op": "deny", "mask": 0x3, "value": 0x1, "peers": []})
    ev = co.events(["a"])["a"]
    assert ev["host"] == "a" and ev["dropped"] == 0
    assert ev["events"] and {e["peer"] for e in ev["events"]} == {"b"}  # not c
    assert all(e["new"] == "denied" and e["reason"] == "deny" and e["ev"] & 0x3 == 0x1
               for e in ev["events"])  # fmt: skip
    assert co.events(["a"])["a"]["events"] == []  # each change once
    assert co.allow(0x3, 0x1, ["a"], peers=["b"])["a"]["ok"]
    back = co.events(["a"])["a"]["events"]
    assert back and all(e["new"] == "good" and e["reason"] == "allow" for e in back)
    co.go(1)
    assert all(s["done"] for s in co.wait(1, timeout=30).values())
    co.stop()


def test_replace_and_the_ev_array_on_a_live_process(loopback):
    """The `replace` op (MRC's REPLACE_EV) swaps EVs on a live connection, all or none, with an
    event per new EV; the `evs` op (QUERY_EV_ARRAY) reads the array back slot by slot; bad
    entries are refused naming the key, and the job still completes on the new EVs."""
    lb = loopback(["a", "b"])
    co = lb.coordinator()
    co.start(1, {"workload": {"kind": "bulk", "src": "a", "dst": "b", "bytes": "1MB"}, "evs": 8})
    before = co.ev_arrays(["a"])["a"]["qps"]
    assert len(before) == 1 and before[0]["peer"] == "b" and len(before[0]["evs"]) == 8
    old = [s["ev"] for s in before[0]["evs"]]
    with ControlClient(str(lb.sock("a"))) as c:
        for entry, msg in (
            ({"ev": old[0], "ev_new": 0, "state": "good"}, r"entries\[0\]\.ev_new: expected an EV"),
            ({"ev": old[0], "ev_new": 9, "state": "bad"}, r"entries\[0\]\.state: expected one"),
            ({"ev": old[0], "ev_new": 9, "state": "good", "x": 1}, r"entries\[0\]\.x: unknown"),
            ({"ev": 7, "ev_new": 9, "state": "good"}, r"entries\[0\]\.ev: 7 is not an EV"),
        ):
            with pytest.raises(ControlError, match=msg):
                c.call({"op": "replace", "entries": [entry]})
    entries = [{"ev": old[0], "ev_new": 60_000, "state": "good"},
               {"ev": old[1], "ev_new": old[2], "state": "good"}]  # fmt: skip
    assert co.replace(entries, ["a"])["a"]["replaced"] == 2
    after = [s["ev"] for s in co.ev_arrays(["a"], peers=["b"])["a"]["qps"][0]["evs"]]
    assert after == [60_000, old[2], old[2], *old[3:]]
    ev = co.events(["a"])["a"]["events"]
    assert [(e["ev"], e["reason"]) for e in ev] == [(60_000, "replace"), (old[2], "replace")]
    co.go(1)
    res = co.wait(1, timeout=30)
    assert res["b"]["received_bytes"] == 1_000_000
    co.stop()
    for p in lb.procs.values():
        assert p.wait(10) == 0
    used = {
        int(key.rsplit(":", 1)[1])
        for r in read_records(lb.metrics("a"))
        if r["type"] == "evtx"
        for key, n in r["bytes"].items()
        if n > 200
    }
    assert 60_000 in used and not used & {old[0], old[1]}


def test_controller_probes_on_loopback_answer_per_ev(loopback):
    """The `probe` op on a live process: every EV of an idle connection answers with an RTT
    (one loopback round trip, well under the timeout), bad requests name the field, and the
    job still runs to the end afterwards."""
    lb = loopback(["a", "b"])
    co = lb.coordinator()
    co.start(1, {"workload": {"kind": "alltoall", "bytes": 20_000}, "evs": 8})
    got = co.probe({"a": ("b", None), "b": ("a", None)}, timeout_us=500_000)
    for h, peer in (("a", "b"), ("b", "a")):
        r = got[h]
        assert r["peer"] == peer and len(r["probes"]) == 8
        assert all(0 < p["rtt_us"] < 500_000 for p in r["probes"]), r["probes"]
        assert set(r["states"].values()) == {"good"}
    evs = [p["ev"] for p in got["a"]["probes"]]
    with ControlClient(str(lb.sock("a"))) as c:
        with pytest.raises(ControlError, match="peer: a has no connection to 'zz'"):
            c.call({"op": "probe", "peer": "zz"})
        with pytest.raises(ControlError, match="evs: 7 is not an EV"):
            c.call({"op": "probe", "peer": "b", "evs": [7]})
        with pytest.raises(ControlError, match="timeout_us"):
            c.call({"op": "probe", "peer": "b", "timeout_us": -1})
        one = c.call({"op": "probe", "peer": "b", "evs": evs[:2], "timeout_us": 500_000})
        assert [p["ev"] for p in one["probes"]] == evs[:2]
    co.go(1)
    assert all(s["done"] for s in co.wait(1, timeout=30).values())
    co.stop()


class SharedLoopback(Loopback):
    """The same hosts served by one process (endpoint.shared), all in the root namespace."""

    def __init__(self, tmp: Path, hosts: list[str], **extra) -> None:
        super().__init__(tmp, [], **extra)  # the config (random addresses), no process yet
        net = random.randint(1, 250)
        self.config["hosts"] = {h: [f"127.{net}.{i + 1}.{i + 1}"] for i, h in enumerate(hosts)}
        args = []
        for h in hosts:
            args += ["--host", h, "--control", str(self.sock(h)), "--metrics", str(self.metrics(h))]
        p = subprocess.Popen(
            [sys.executable, "-m", "endpoint", "--config", json.dumps(self.config), *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for h in hosts:
            self.procs[h] = p
            assert p.stdout.readline().startswith(f"ready {self.sock(h)}"), h


def test_one_process_serves_several_hosts_each_as_its_own(tmp_path):
    lb = SharedLoopback(tmp_path, ["a", "b", "c"])
    try:
        co = lb.coordinator()
        res = co.run(
            1,
            {"workload": {"kind": "permutation", "bytes": "1MB"}},
        )
        assert all(r["done"] for r in res.values()), res
        assert all(r["received_bytes"] == 1_000_000 for r in res.values()), res
        stats = co.stats(1)
        pids = {stats[h]["process"]["pid"] for h in "abc"}
        assert pids == {lb.procs["a"].pid}
        assert all(stats[h]["process"]["hosts_in_process"] == 3 for h in "abc")
        # each host keeps its own sockets, counters and lateness histogram
        assert all(stats[h]["process"]["rx_datagrams"] > 0 for h in "abc")
        co.stop()
        assert lb.procs["a"].wait(10) == 0
        for h in "abc":  # every host wrote its own end record
            assert read_records(lb.metrics(h))[-1]["type"] == "end"
    finally:
        lb.close()


def test_a_shared_process_stops_every_host_on_sigterm(tmp_path):
    lb = SharedLoopback(tmp_path, ["a", "b"])
    try:
        lb.procs["a"].send_signal(signal.SIGTERM)
        assert lb.procs["a"].wait(10) == 0
        for h in "ab":
            end = read_records(lb.metrics(h))[-1]
            assert end["type"] == "end" and end["reason"] == "SIGTERM"
    finally:
        lb.close()


def test_a_host_count_mismatch_is_a_one_line_error(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "endpoint", "--config", "{}", "--host", "a", "--host", "b",
         "--control", str(tmp_path / "a.sock")],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.strip() == "endpoint: --control: give it once per --host (2)"


def test_a_wait_times_out_on_time_when_bins_are_long(loopback):
    """At a high time dilation a bin lasts tens of real seconds; a wait's timeout must not wait
    for the next one (the caller gives up 10 s after its timeout: runs whose job never
    finished aborted on "no reply")."""
    lb = loopback(["a", "b"], bin_s=60.0)
    with ControlClient(str(lb.sock("a"))) as c:
        c.call({"op": "start", "job": 1, "workload": {"kind": "alltoall", "bytes": 1}})
        t0 = time.monotonic()
        c.send({"op": "wait", "job": 1, "timeout": 0.2})
        reply = c.receive(timeout=5.0)
        assert reply["done"] is False
        assert time.monotonic() - t0 < 2.0

"""Several QPs per peer (`transport.qps`, endpoint.workloads.Job): every message striped over a
peer's QPs, joined at the receiver, acknowledged once all its slices are; each QP on its own
source port. On the in-process network: no root, no fabric."""

from __future__ import annotations

import pytest

from endpoint.config import Mode, TransportConfig
from endpoint.simnet import SimNet
from endpoint.transport import Endpoint
from endpoint.workloads import (
    MAX_HOSTS_MULTI_QP,
    Job,
    WorkloadError,
    initial_psn,
    qp_number,
    stripe,
)
from testbed.harness.endpoint_driver import job_request
from testbed.scenario import ScenarioError, validate
from tests.conftest import drive_jobs, keep_deliveries


@pytest.mark.parametrize("n", [0, 1, 3, 4, 5, 4096, 1_000_003])
@pytest.mark.parametrize("parts", [1, 2, 4, 16])
def test_stripe_cuts_a_message_into_consecutive_even_slices(n: int, parts: int) -> None:
    data = bytes(i % 251 for i in range(n))
    slices = stripe(data, parts)
    assert len(slices) == parts
    assert b"".join(slices) == data
    sizes = [len(s) for s in slices]
    assert max(sizes) - min(sizes) <= 1


def test_qp_numbers_of_further_lanes_never_meet_another_peers_first_qp() -> None:
    first = {qp_number(7, i) for i in range(1, MAX_HOSTS_MULTI_QP + 1)}
    further = {
        qp_number(7, i, lane) for i in range(1, MAX_HOSTS_MULTI_QP + 1) for lane in range(1, 16)
    }
    assert len(further) == MAX_HOSTS_MULTI_QP * 15
    assert not first & further
    assert qp_number(7, 3) == (7 << 12) | 3  # lane 0 is the QP a single-QP job has
    assert qp_number(7, 3, 2) >> 12 == 7  # the job stays in the top bits
    assert initial_psn(7, "h1", "h2") != initial_psn(7, "h1", "h2", 1)


def _jobs(cfg: TransportConfig, spec: dict, hosts: list[str], seed: int = 3):
    net = SimNet(seed=seed)
    eps = {h: net.add_endpoint(h, Endpoint(cfg)) for h in hosts}
    jobs = {h: Job(1, spec, h, hosts, eps[h], cfg) for h in hosts}
    return net, eps, jobs


def test_a_bulk_flow_over_four_qps_arrives_byte_for_byte_and_is_acked_once() -> None:
    cfg = TransportConfig(mode=Mode.ROCE, num_evs=1, qps=4, ev_seed=11)
    spec = {"kind": "bulk", "src": "h1", "dst": "h2", "bytes": 300_001, "message_bytes": 50_000}
    net, eps, jobs = _jobs(cfg, spec, ["h1", "h2"])
    sent: list[bytes] = []
    got: list[bytes] = []
    send, deliver = jobs["h1"].send, jobs["h2"].role.on_message

    def keep_sent(peer: str, data: bytes, now: float) -> int:
        sent.append(bytes(data))
        return send(peer, data, now)

    def keep_got(peer: str, data: bytes, now: float) -> None:
        got.append(bytes(data))
        deliver(peer, data, now)

    jobs["h1"].send = keep_sent  # type: ignore[method-assign]
    jobs["h2"].role.on_message = keep_got  # type: ignore[method-assign]
    for j in jobs.values():
        j.go(net.now)
    assert drive_jobs(net, eps, jobs, 5.0)
    assert sorted(got) == sorted(sent) and len(sent) == 7  # 6 full messages and 1 byte
    tx, rx = jobs["h1"].status(), jobs["h2"].status()
    assert rx["received_bytes"] == 300_001 and rx["bad_messages"] == 0
    assert rx["ledger"]["h1"]["delivered_messages"] == 7 and rx["duplicates"] == 0
    assert tx["sent_bytes"] == 300_001 and tx["unacked_messages"] == 0
    # Four QPs each way, each its own QP number and source port, each carrying a quarter.
    qps = jobs["h1"].peer_qps["h2"]
    assert len(qps) == 4 and len({c.local_qp for c in qps}) == 4
    assert len({c.cfg.ev_base for c in qps}) == 4
    carried = [c.stats.counters["data_tx"] for c in qps]
    assert min(carried) > 0 and max(carried) - min(carried) <= 7
    assert [n for n, _ in jobs["h1"].connections()] == ["h2", "h2#1", "h2#2", "h2#3"]
    assert not jobs["h2"]._slices and not jobs["h1"]._unacked_slices


def test_a_slice_handed_up_twice_is_a_duplicate_and_the_message_is_not_joined_again() -> None:
    cfg = TransportConfig(qps=2)
    spec = {"kind": "bulk", "src": "h1", "dst": "h2", "bytes": 100_000, "message_bytes": 50_000}
    net, eps, jobs = _jobs(cfg, spec, ["h1", "h2"])
    kept = keep_deliveries(jobs["h2"])
    for j in jobs.values():
        j.go(net.now)
    assert drive_jobs(net, eps, jobs, 5.0)
    assert len(kept) == 4  # two messages, two slices each
    jobs["h2"].on_delivery(kept[1])
    st = jobs["h2"].status()
    assert st["duplicates"] == 1 and st["ledger"]["h1"]["duplicate_bytes"] == len(kept[1].data)
    assert st["received_bytes"] == 100_000 and st["ledger"]["h1"]["delivered_messages"] == 2
    assert not jobs["h2"]._slices  # the stray slice did not open a message that never ends


def test_a_ring_allreduce_runs_over_four_qps_per_peer_on_roce() -> None:
    """Phases shorter than the QP count too: GO and DONE tokens are a few bytes."""
    cfg = TransportConfig(mode=Mode.ROCE, num_evs=1, qps=4, ev_seed=2)
    hosts = ["h1", "h2", "h3", "h4"]
    spec = {"kind": "allreduce", "hosts": "all", "bytes": 64 * 1024, "steps": 3}
    net, eps, jobs = _jobs(cfg, spec, hosts)
    for j in jobs.values():
        j.go(net.now)
    assert drive_jobs(net, eps, jobs, 5.0)
    for h, j in jobs.items():
        st = j.status()
        assert st["steps_finished"] == 3 and st["bad_messages"] == 0, h
        assert st["qps_per_peer"] == 4 and st["duplicates"] == 0
    assert len(jobs["h1"].status()["global_steps"]) == 3


def test_several_qps_need_a_job_of_at_most_255_hosts() -> None:
    hosts = [f"h{i}" for i in range(1, MAX_HOSTS_MULTI_QP + 2)]
    spec = {"kind": "bulk", "src": "h1", "dst": "h2", "bytes": 1000}
    with pytest.raises(WorkloadError, match="transport.qps: 2 QPs per peer need at most 255"):
        Job(1, spec, "h1", hosts, Endpoint(TransportConfig()), TransportConfig(qps=2))
    Job(1, spec, "h1", hosts, Endpoint(TransportConfig()), TransportConfig(qps=1))


@pytest.mark.parametrize("bad", [0, 17, True, 2.0])
def test_the_transport_config_refuses_a_qp_count_out_of_range(bad) -> None:
    with pytest.raises(ValueError, match="qps must be 1..16"):
        TransportConfig(qps=bad)


def _scenario(qps) -> dict:
    return {
        "name": "x",
        "topology": {"spines": 2, "leaves": 2, "hosts_per_leaf": 2},
        "transport": [{"name": "roce", "label": "roce-4qp", "qps": qps}, "roce"],
        "workload": {"kind": "allreduce", "hosts": "all", "bytes": "64KiB", "steps": 2},
        "duration_s": 1,
    }


def test_a_scenario_passes_its_qp_count_to_the_endpoints_job() -> None:
    sc = validate(_scenario(4))
    assert job_request(sc, "roce-4qp")["transport"]["qps"] == 4
    assert "qps" not in job_request(sc, "roce").get("transport", {})


@pytest.mark.parametrize("bad", [0, 17])
def test_a_scenario_with_a_qp_count_out_of_range_is_refused_naming_it(bad: int) -> None:
    with pytest.raises(ScenarioError, match="qps"):
        validate(_scenario(bad))


def test_the_fluid_step_slowdown_counts_a_shared_uplink_whatever_the_qp_count() -> None:
    """One spine: both of leaf1's flows share its uplink, every QP of them too: half rate."""
    from testbed.analysis.ecmp import striped_step_slowdown

    sc = validate(
        {
            "name": "x",
            "topology": {"spines": 1, "leaves": 2, "hosts_per_leaf": 2},
            "transport": "roce",
            "workload": {"kind": "permutation", "bytes": "1MB"},
            "duration_s": 1,
        }
    )
    fab = sc.fabric()
    for qps in (1, 2, 4):
        assert striped_step_slowdown(fab, [("h1", "h3"), ("h2", "h4")], 1, qps) == 2.0
        assert striped_step_slowdown(fab, [("h1", "h3")], 1, qps) == 1.0
    with pytest.raises(ValueError, match="qps: at least 1"):
        striped_step_slowdown(fab, [("h1", "h3")], 1, 0)


def test_four_qps_shorten_the_shipped_rings_fluid_step_over_seeds() -> None:
    """The shipped roce-qp-scaling ring: one QP per hop collides (balls into bins), four QPs
    per hop spread each hop over four hashes; what its comment quotes."""
    from testbed.analysis.ecmp import striped_step_slowdown
    from testbed.scenario import load_scenario
    from testbed.scenario.catalog import find_scenario

    sc = load_scenario(find_scenario("roce-qp-scaling"))
    fab, ring = sc.fabric(), list(sc.workload.hosts)
    pairs = list(zip(ring, ring[1:] + ring[:1], strict=True))
    leaf = {h: fab.interfaces[h][0].peer_node for h in ring}
    assert all(leaf[s] != leaf[d] for s, d in pairs)  # every hop crosses leaves
    one = [striped_step_slowdown(fab, pairs, seed, 1) for seed in range(1, 201)]
    four = [striped_step_slowdown(fab, pairs, seed, 4) for seed in range(1, 201)]
    assert (one[0], four[0]) == (3.0, 2.25)  # seed 1, the scenario's
    assert sum(one) / 200 == pytest.approx(2.65, abs=0.005)
    assert sum(four) / 200 == pytest.approx(1.8175, abs=0.005)


def test_the_fluid_model_hashes_the_source_ports_the_roce_qps_use() -> None:
    """single_path_sport(lane) is each QP's port in a scenario's roce job with qps: 4."""
    from endpoint.process_config import EndpointConfig, job_transport_config
    from testbed.analysis.ecmp import single_path_sport
    from testbed.harness.endpoint_driver import JOB
    from testbed.harness.endpoints import fabric_endpoint_config

    sc = validate(_scenario(4))
    fab = sc.fabric()
    config = EndpointConfig.from_obj(fabric_endpoint_config(fab))
    req = job_request(sc, "roce-4qp")
    tcfg = job_transport_config(config, req)
    ports = set()
    for host in fab.hosts():
        job = Job(JOB, req["workload"], host, fab.hosts(), Endpoint(tcfg), tcfg)
        for peer, qps in job.peer_qps.items():
            for lane, conn in enumerate(qps):
                sport = conn.cfg.ev_values()[conn.cfg.single_path_ev_index]
                assert sport == single_path_sport(fab, sc.seed, host, peer, lane)
                ports.add(sport)
    assert len(ports) == 4 * 2 * 4  # 4 hosts, 2 ring neighbours each, 4 QPs: all distinct

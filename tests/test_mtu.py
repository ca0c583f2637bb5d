"""`topology.mtu`: checked before anything is built, one line naming the key; it sizes the
endpoints' data packets, their pacer and the emulator's budget, and it fixes the header
overhead ceiling (contracts.framing).

The switches' ring slots are in tests/test_switch_ring.py and jumbo frames through the
forwarding loops in tests/test_switch_vector.py; the fabric itself at MTU 9000 and 1500 is in
tests/test_mtu_netns.py.
"""

from __future__ import annotations

import copy
import json

import pytest

from contracts import framing
from endpoint.config import TransportConfig
from endpoint.pacer import Pacer
from endpoint.process_config import ConfigError, EndpointConfig, job_transport_config
from endpoint.simnet import PairHarness, SimNet
from testbed.cli.app import build_parser, main
from testbed.cli.commands import params_from_args
from testbed.harness.endpoints import fabric_endpoint_config
from testbed.scenario import (
    ScenarioError,
    emulation_budget_mbps,
    emulation_budget_pps,
    frame_rate_pps,
    lint,
    load_scenario,
    scenario_json_schema,
    validate,
)
from topologies import TopologyError, TopologyParams, leaf_spine

BASE = {
    "name": "mtu",
    "topology": {"spines": 1, "leaves": 2, "hosts_per_leaf": 1, "link_mbps": 20},
    "workload": {"kind": "bulk", "src": "h1", "dst": "h2", "bytes": "1MB"},
    "duration_s": 5,
}


def with_topology(**keys) -> dict:
    data = copy.deepcopy(BASE)
    data["topology"].update(keys)
    return data


# ----- the numbers ---------------------------------------------------------------------------


def test_sizes_and_the_header_overhead_ceiling_at_1500_and_9000() -> None:
    assert framing.DEFAULT_MTU == 1500 and (framing.MIN_MTU, framing.MAX_MTU) == (1280, 9000)
    assert framing.max_frame_bytes(1500) == 1514 and framing.max_frame_bytes(9000) == 9014
    # MTU - IPv4 (20) - UDP (8) - BTH (12) - the data extension (40)
    assert framing.mrc_payload(1500) == 1420 and framing.mrc_payload(9000) == 8920
    assert framing.goodput_ceiling(1500) == pytest.approx(1420 / 1514)  # 93.79 %
    assert framing.goodput_ceiling(9000) == pytest.approx(8920 / 9014)  # 98.96 %
    # With FCS, preamble and inter-frame gap, which the emulation does not carry or count.
    assert framing.goodput_ceiling(1500, physical=True) == pytest.approx(1420 / 1538)  # 92.33 %
    assert framing.goodput_ceiling(9000, physical=True) == pytest.approx(8920 / 9038)  # 98.69 %
    assert framing.goodput_ceiling(1500, physical=True) > 1500 / 1692  # htsim's NDP: 88.65 %


# ----- validation ----------------------------------------------------------------------------


@pytest.mark.parametrize("mtu", [1280, 1500, 4096, 9000])
def test_mtus_in_range_are_taken(mtu: int) -> None:
    assert leaf_spine(spines=1, leaves=2, hosts_per_leaf=1, mtu=mtu).params.mtu == mtu
    assert validate(with_topology(mtu=mtu)).fabric().params.mtu == mtu


def test_the_default_is_ethernets() -> None:
    assert TopologyParams().mtu == 1500
    assert validate(copy.deepcopy(BASE)).topology.mtu == 1500


@pytest.mark.parametrize(
    ("mtu", "reason"),
    [
        (1279, "must be between 1280 and 9000, got 1279"),
        (9001, "must be between 1280 and 9000, got 9001"),
        (9000.0, "must be an integer, got 9000.0"),
        ("9000", "must be an integer, got '9000'"),
        (True, "must be an integer, got True"),
    ],
)
def test_a_bad_mtu_is_one_line_naming_it(mtu, reason: str) -> None:
    with pytest.raises(TopologyError) as exc:
        TopologyParams(mtu=mtu).validate()
    assert str(exc.value) == f"mtu: {reason}"
    with pytest.raises(ScenarioError) as exc:
        validate(with_topology(mtu=mtu))
    assert len(exc.value.issues) == 1  # one mistake; then what waits for a valid topology
    assert str(exc.value).splitlines()[1:] == [
        "workload: host names not checked until topology is valid"
    ]
    assert exc.value.path == "topology.mtu"


def test_a_bad_mtu_in_a_file_is_named_where_it_is_written(tmp_path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "name: bad\n"
        "topology: {spines: 1, leaves: 2, hosts_per_leaf: 1,\n"
        "           mtu: 65536}\n"
        "workload: {kind: bulk, src: h1, dst: h2, bytes: 1MB}\n"
        "duration_s: 5\n"
    )
    with pytest.raises(ScenarioError) as exc:
        load_scenario(path)
    assert str(exc.value) == (
        f"{path}:3:12: topology.mtu: input should be less than or equal to 9000, got 65536\n"
        f"{path}:4:1: workload: host names not checked until topology is valid"
    )


def test_what_depends_on_the_mtu_is_checked_against_it() -> None:
    # A data queue must hold one full frame, or every data packet would be trimmed.
    with pytest.raises(ScenarioError, match=r"^topology\.queue_kb: must hold one frame of mtu"):
        validate(with_topology(mtu=9000, queue_kb=8))
    assert validate(with_topology(mtu=9000, queue_kb=9.014)).topology.queue_kb == 9.014
    # A trimmed frame is no longer than the MTU allows (1500 as before at the default).
    with pytest.raises(ScenarioError, match=r"^topology\.trim_bytes: .*between 64 and 1500"):
        validate(with_topology(trim_bytes=1501))
    assert validate(with_topology(mtu=9000, trim_bytes=4000)).topology.trim_bytes == 4000


def test_the_json_schema_carries_the_key_and_its_bounds() -> None:
    prop = scenario_json_schema()["$defs"]["TopologySpec"]["properties"]["mtu"]
    assert prop == {
        "default": 1500,
        "maximum": 9000,
        "minimum": 1280,
        "title": "Mtu",
        "type": "integer",
    }


def test_testbed_up_refuses_a_bad_mtu_before_building_anything(capsys) -> None:
    up = ["up", "--name", "zz", "--spines", "1", "--leaves", "2", "--hosts-per-leaf", "1"]
    assert params_from_args(build_parser().parse_args([*up, "--mtu", "9000"])).mtu == 9000
    assert params_from_args(build_parser().parse_args(up)).mtu == 1500
    assert main([*up, "--mtu", "100"]) == 2
    assert capsys.readouterr().err == "testbed: mtu: must be between 1280 and 9000, got 100\n"


# ----- the endpoints -------------------------------------------------------------------------


def endpoint_config(mtu: int, **transport) -> EndpointConfig:
    fab = leaf_spine(spines=1, leaves=2, hosts_per_leaf=1, mtu=mtu)
    return EndpointConfig.from_obj(
        json.loads(json.dumps(fabric_endpoint_config(fab, transport=transport)))
    )


@pytest.mark.parametrize("mtu", [1280, 1500, 9000])
def test_the_fabric_gives_the_endpoints_a_segment_that_fills_its_mtu(mtu: int) -> None:
    cfg = endpoint_config(mtu)
    assert cfg.mtu == mtu
    tcfg = job_transport_config(cfg, {"mode": "mrc"})
    assert tcfg.max_payload == mtu - 80
    assert tcfg.min_cwnd == tcfg.max_payload  # the emulation's floor: one full packet
    # A job may send smaller packets, never larger ones (the kernel would fragment them).
    assert job_transport_config(cfg, {"transport": {"max_payload": 1000}}).max_payload == 1000
    with pytest.raises(ConfigError, match=rf"^transport\.max_payload: .*at most {mtu - 80}"):
        job_transport_config(cfg, {"transport": {"max_payload": mtu - 79}})


def test_an_endpoint_config_with_a_bad_mtu_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^config\.mtu: must be between 1280 and 9000"):
        EndpointConfig.from_obj({"hosts": {"a": ["10.0.0.1"]}, "mtu": 100})
    with pytest.raises(ConfigError, match=r"^config\.transport\.max_payload: .* MTU 1500"):
        job_transport_config(endpoint_config(1500, max_payload=8920), {})


@pytest.mark.parametrize("mtu", [1500, 9000])
def test_data_packets_are_full_mtu_datagrams_but_the_last(mtu: int) -> None:
    """On the in-process network: every data packet's IP packet is exactly the MTU except a
    message's last; the message arrives whole."""
    cfg = TransportConfig(max_payload=framing.mrc_payload(mtu))
    net = SimNet(seed=1)
    sizes: list[int] = []
    inject = net.inject

    def spy(src, tx) -> None:
        if tx.tos == cfg.tos_data:
            sizes.append(framing.IPV4_HEADER_LEN + framing.UDP_HEADER_LEN + len(tx.payload))
        inject(src, tx)

    net.inject = spy
    pair = PairHarness(net, cfg)
    data = bytes(range(256)) * 800  # 204800 B: 23 full packets of 8920 and a short one
    pair.send_ab(data)
    assert pair.run(5.0)
    assert pair.received_ab == {0: [data]}
    full, rest = divmod(len(data), cfg.max_payload)
    assert sizes.count(mtu) >= full and max(sizes) == mtu
    assert min(sizes) == rest + 80


def test_the_pacer_lets_a_jumbo_frame_through_a_slow_bucket() -> None:
    """At 10 Mbps the catch-up time is worth 2500 B; a 9014 B frame must still leave."""
    pacer = Pacer(10, planes=1, burst_frames=1, now=0.0, burst_s=0.002, frame_bytes=9014)
    assert pacer.burst == 9014 and pacer.frames_now(0.0) == 1
    pacer.push(0, (1, "x", bytes(9014 - framing.FRAME_OVERHEAD), 42), control=False)
    sent: list = []
    assert pacer.drain(0.0, lambda *a: sent.append(a)) is None and len(sent) == 1


# ----- the emulator's budget -----------------------------------------------------------------


def test_the_emulation_budget_is_mostly_per_packet_so_a_larger_mtu_carries_more_mbps() -> None:
    assert emulation_budget_pps(1500) == pytest.approx(6.66e3, rel=0.01)
    assert emulation_budget_pps(9000) == pytest.approx(2.40e3, rel=0.01)  # a packet + its bytes
    assert emulation_budget_mbps(1500) == pytest.approx(80.7, abs=0.1)  # 80 at 1494 B, measured
    assert emulation_budget_mbps(9000) == pytest.approx(172.8, abs=0.1)
    # Four 40 Mbps flows (a permutation): too many packets at 1500, not at 9000.
    data = with_topology(link_mbps=40)
    data["topology"].update(spines=2, hosts_per_leaf=2)
    data["workload"] = {"kind": "permutation", "bytes": "20MB"}
    data["duration_s"] = 10
    data["emulation"] = {"time_dilation": 1}  # real time: under auto the runner picks N
    small, jumbo = validate(data), validate({**data, "topology": {**data["topology"], "mtu": 9000}})
    assert frame_rate_pps(small) == pytest.approx(frame_rate_pps(jumbo) * 9014 / 1514)
    assert any(w.startswith("topology.link_mbps:") and "1514 B frames" in w for w in lint(small))
    assert not any(w.startswith("topology.link_mbps:") for w in lint(jumbo))

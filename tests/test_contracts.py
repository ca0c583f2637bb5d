"""The bottom floor: contracts import nothing of the project, and a fabric's DSCPs reach the
endpoints' packets (not only the switches) from the fabric's parameters."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

from contracts import dscp, framing
from contracts.plugins import PluginError, load_plugin
from endpoint import codec
from endpoint.config import TransportConfig
from endpoint.process_config import ConfigError, EndpointConfig, job_transport_config
from endpoint.simnet import Bottleneck, SimNet
from endpoint.transport import Endpoint
from endpoint.wire import BTH, MRCData
from endpoint.workloads import Job
from testbed.harness.endpoints import fabric_endpoint_config
from tests.conftest import drive_jobs
from topologies import leaf_spine

ROOT = Path(__file__).resolve().parent.parent
PROJECT = {"contracts", "topologies", "switch", "endpoint", "testbed", "labs"}
OTHER = {"trimmable_dscp": 20, "trimmed_dscp": 21, "control_dscp": 40}


def test_contracts_import_nothing_of_the_project() -> None:
    for path in sorted((ROOT / "contracts").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] if node.level == 0 else ["contracts"]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top not in PROJECT - {"contracts"}, f"{path.name} imports {name}"


def test_data_overhead_is_what_the_codec_and_the_layers_put_before_the_payload() -> None:
    assert codec.DATA_HEADER_LEN == framing.DATA_OVERHEAD == len(BTH() / MRCData())
    assert framing.FRAME_OVERHEAD == 42


def test_dscps_are_checked_alike_everywhere() -> None:
    assert dscp.check_dscps(10, 11, 46) is None
    assert dscp.check_dscps(10, 10, 46) == "trimmed_dscp: must differ from trimmable_dscp"
    assert dscp.check_dscps(64, 11, 46).startswith("trimmable_dscp: must be between 0 and 63")
    with pytest.raises(ValueError, match="control_dscp"):
        TransportConfig(control_dscp=10)


def test_the_fabric_dscps_reach_the_endpoint_config_and_its_jobs() -> None:
    fab = leaf_spine(spines=1, leaves=2, hosts_per_leaf=1, **OTHER)
    cfg = EndpointConfig.from_obj(fabric_endpoint_config(fab, pace_mbps=100.0))
    tcfg = job_transport_config(cfg, {"mode": "mrc"})
    assert {k: getattr(tcfg, k) for k in OTHER} == OTHER
    assert (tcfg.tos_data, tcfg.tos_control) == (20 << 2 | dscp.ECN_ECT0, 40 << 2)
    # other transport defaults given with the fabric's are kept next to its DSCPs
    extra = fabric_endpoint_config(fab, transport={"num_evs": 8})["transport"]
    assert {k: extra[k] for k in (*OTHER, "num_evs")} == {**OTHER, "num_evs": 8}
    # the default fabric gives the contracts' defaults
    default = EndpointConfig.from_obj(fabric_endpoint_config(leaf_spine()))
    assert job_transport_config(default, {}).trimmed_dscp == dscp.TRIMMED_DSCP
    bad = fabric_endpoint_config(fab, transport={"control_dscp": 20})
    with pytest.raises(ConfigError, match="control_dscp"):
        job_transport_config(EndpointConfig.from_obj(bad), {})


def test_endpoints_mark_and_understand_the_configured_dscps_on_simnet() -> None:
    """An incast through a trimming bottleneck with non-default DSCPs: every packet carries the
    configured TOS, the network trims by them and the receivers NACK the trimmed headers."""
    hosts = ["h1", "h2", "h3", "h4"]
    cfg = TransportConfig(**OTHER, base_rtt=2e-3)  # NSCC's MaxWnd 37.5 kB x 3 overflows 15 kB
    net = SimNet(seed=1, **OTHER)
    eps = {h: net.add_endpoint(h, Endpoint(cfg)) for h in hosts}
    net.set_bottleneck("h1", Bottleneck(queue_bytes=15_000, ecn_bytes=8_000))
    spec = {"kind": "incast", "dst": "h1", "srcs": "all", "bytes": 400_000}
    jobs = {h: Job(1, spec, h, hosts, eps[h], cfg) for h in hosts}
    seen: Counter = Counter()
    inject = net.inject

    def spy(src, tx):
        seen[tx.tos] += 1
        inject(src, tx)

    net.inject = spy
    for j in jobs.values():
        j.go(net.now)
    assert drive_jobs(net, eps, jobs, until=5.0)
    assert jobs["h1"].status()["received_bytes"] == 3 * 400_000
    assert set(seen) == {cfg.tos_data, cfg.tos_control}, seen
    assert net.counters["trim_queue"] > 0
    trimmed_rx = sum(c.stats.counters["trimmed_rx"] for c in eps["h1"].connections.values())
    assert trimmed_rx == net.counters["trim_queue"]


def test_load_plugin_runs_the_file_afresh_and_registers_on_request(tmp_path) -> None:
    import sys

    path = tmp_path / "student.py"
    path.write_text("import dataclasses\n@dataclasses.dataclass\nclass P:\n    x: int = 1\n")
    mod = load_plugin(path, "contracts_test_student", register=True)
    assert mod.P().x == 1 and sys.modules.pop("contracts_test_student") is mod
    path.write_text("raise RuntimeError('student bug')\n")
    with pytest.raises(RuntimeError, match="student bug"):
        load_plugin(path, "contracts_test_student", register=True)
    assert "contracts_test_student" not in sys.modules
    with pytest.raises(PluginError, match="X=notes.txt: not a Python file"):
        load_plugin(tmp_path / "notes.txt", "n", source="X=notes.txt")

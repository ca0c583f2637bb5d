"""The compiled core inside a running switch process (switch/core_loop.py): control requests
act on the core's Python twins, `sync` puts their state into C, what only Python can do is
refused with a one-line error before anything changes, and counters carry the core's figures
and the data path. Pure: no namespaces (the twins have no ports of their own)."""

from __future__ import annotations

import json

import pytest
import yaml

from switch import core_loop
from switch.config import switch_config
from switch.control import handle
from switch.core import ForwardingCore, c_available, c_unavailable_reason
from testbed.scenario.datapath_needs import python_only_features
from testbed.scenario.validation import validate
from topologies import leaf_spine

needs_c = pytest.mark.skipif(not c_available(), reason=str(c_unavailable_reason()))


def _core(datapath: str):
    fab = leaf_spine(spines=2, leaves=2, hosts_per_leaf=1, link_mbps=100)
    configs = [switch_config(fab, n) for n, node in fab.nodes.items() if node.kind != "host"]
    core = ForwardingCore(configs, datapath=datapath)
    core_loop.adopt(core)
    return fab, core


def _request(sw, **req) -> dict:
    return handle(sw, json.dumps(req).encode())


def _roce(fab, src: str, dst: str, sport: int) -> bytes:
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    pkt = Ether() / IP(src=fab.host_ip(src), dst=fab.host_ip(dst), tos=10 << 2, ttl=64)
    return bytes(pkt / UDP(sport=sport, dport=4791) / (b"x" * 200))


@needs_c
def test_python_only_requests_are_refused_in_c_and_change_nothing():
    _, core = _core("c")
    leaf = core.switches[0]
    port = leaf.ports[0].name
    for req, feature in (
        ({"op": "port", "port": port, "loss_pct": 5}, "egress loss"),
        ({"op": "port", "port": port, "impair": {"jitter_us": 20, "seed": 1}}, "impairments"),
        ({"op": "capture", "on": True, "dir": "/tmp", "ports": [port]}, "capture"),
        ({"op": "debug", "on": True, "path": "/tmp/x.log"}, "the debug log"),
    ):
        reply = _request(leaf, **req)
        assert reply["ok"] is False and feature in reply["error"]
        assert "Python data path only" in reply["error"] and "\n" not in reply["error"]
    assert leaf.ports[0].loss == 0 and leaf.ports[0].impair is None
    assert leaf.capture is None and leaf.debug_log is None
    # loss 0 (a heal) is no impairment: accepted
    assert _request(leaf, op="port", port=port, loss_pct=0)["ok"]


def test_the_python_path_takes_them():
    _, core = _core("python")
    leaf = core.switches[0]
    assert _request(leaf, op="port", port=leaf.ports[0].name, loss_pct=5)["ok"]
    assert leaf.ports[0].loss == 0.05


@needs_c
def test_a_link_down_request_reaches_the_c_core():
    """leaf1's uplinks: with one taken down by a control request (and synced), every frame
    to leaf2 leaves by the other, as the carrier loss's ECMP prune says."""
    fab, core = _core("c")
    names = [c.name for c in core.configs]
    li, si = names.index("leaf1"), names.index("spine1")
    leaf = core.switches[li]
    up1 = fab.interface("leaf1", "spine1").name
    host_port = leaf.port_by_name[fab.interface("leaf1", "h1").name].index
    assert _request(leaf, op="port", port=up1, up=False)["ok"]
    core.sync(li)
    frames = [_roce(fab, "h1", "h2", 49152 + k) for k in range(32)]
    core.receive(li, host_port, frames, 0.0)
    now = 0.0
    while (due := core.service(now)) is not None:
        now = due
    counters = core.counters()
    assert counters[si]["ports"][fab.interface("spine1", "leaf1").name]["rx_packets"] == 0
    got = core.take_egress()
    assert len(got) == 32  # all delivered to h2 through spine2
    c = leaf.counters()
    assert c["datapath"] == "c"
    assert c["ports"][fab.interface("leaf1", "spine2").name]["tx_packets"] == 32
    assert c["ports"][up1]["state"]["up"] is False


SCENARIO = """
name: needs
topology: {spines: 2, leaves: 2, hosts_per_leaf: 1, link_mbps: 100}
transport: mrc
workload: {kind: bulk, src: h1, dst: h2, bytes: 1MB}
duration_s: 2
events:
  - {at: 0.5, action: link-down, link: [spine1, leaf2]}
  - {at: 0.6, action: loss, link: [leaf1, spine1], percent: 2}
  - {at: 0.7, action: impair, link: [leaf1, spine2], jitter_us: 5}
"""


def test_python_only_features_of_a_scenario_name_where_they_are():
    sc = validate(yaml.safe_load(SCENARIO))
    assert python_only_features(sc) == [
        "events[1] (loss): egress loss",
        "events[2] (impair): impairments",
    ]
    plain = validate(yaml.safe_load(SCENARIO.split("  - {at: 0.6")[0]))
    assert python_only_features(plain) == []


def test_a_run_that_needs_python_runs_python_or_refuses_c(monkeypatch):
    import os

    from contracts import datapath
    from testbed.experiment.errors import RunError
    from testbed.experiment.progress import Progress
    from testbed.experiment.runner import _switch_datapath

    monkeypatch.setattr(datapath, "missing", lambda c: None)  # both built: c by default
    monkeypatch.delenv(datapath.ENV, raising=False)
    sc = validate(yaml.safe_load(SCENARIO))
    lines: list[str] = []
    progress = Progress()
    monkeypatch.setattr(progress, "line", lines.append)
    with _switch_datapath(sc, progress):
        assert os.environ[datapath.ENV] == "python"
    assert datapath.ENV not in os.environ  # as it was
    assert lines == [
        "data path: python (events[1] (loss): egress loss runs in the Python data path only)"
    ]
    monkeypatch.setenv(datapath.ENV, "c")
    with pytest.raises(RunError, match=r"^--datapath c: events\[1\] \(loss\): egress loss"):
        with _switch_datapath(sc, progress):
            pass
    plain = validate(yaml.safe_load(SCENARIO.split("  - {at: 0.6")[0]))
    with _switch_datapath(plain, progress):
        assert os.environ[datapath.ENV] == "c"

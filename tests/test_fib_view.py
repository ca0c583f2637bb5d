"""`testbed fib` / `testbed path` tables, from the same configs the switch processes load."""

from __future__ import annotations

import json

import pytest

from switch.config import switch_config
from testbed.fabric.fib_view import fib_rows, format_fib, format_path, walk
from testbed.fabric.paths import predict_path
from topologies import leaf_spine

FAB = leaf_spine(spines=3, leaves=3, hosts_per_leaf=2)
CONFIGS = {sw: switch_config(FAB, sw, seed=1) for sw in FAB.switches()}


def test_leaf_fib_has_hosts_local_address_and_ecmp_groups_to_other_leaves() -> None:
    rows = {r.prefix: r for r in fib_rows(CONFIGS["leaf1"])}
    assert rows["10.1.1.254/32"].kind == "local"
    assert rows["10.1.1.1/32"].kind == "single"
    assert [m.peer for m in rows["10.1.1.1/32"].members] == ["h1"]
    group = rows["10.1.3.0/24"]
    assert group.kind == "ecmp"
    assert [m.peer for m in group.members] == ["spine1", "spine2", "spine3"]
    assert [m.peer for m in rows["10.1.0.2/32"].members] == ["spine2"]


def test_spine_has_one_way_to_each_leaf() -> None:
    rows = fib_rows(CONFIGS["spine2"])
    assert {r.prefix: [m.peer for m in r.members] for r in rows if r.members} == {
        "10.1.1.0/24": ["leaf1"],
        "10.1.2.0/24": ["leaf2"],
        "10.1.3.0/24": ["leaf3"],
    }


def test_down_port_is_shown_pruned() -> None:
    port = FAB.interface("leaf1", "spine2").name
    rows = {r.prefix: r for r in fib_rows(CONFIGS["leaf1"], {port: False})}
    live = [m.live for m in rows["10.1.3.0/24"].members]
    assert live == [True, False, True]
    text = format_fib(CONFIGS["leaf1"], list(rows.values()))
    assert f"{port} -> spine2 (DOWN, pruned)" in text
    assert f"ECMP hash seed {CONFIGS['leaf1'].seed}" in text


def test_walk_agrees_with_predict_path() -> None:
    src, dst = FAB.host_ip("h1"), FAB.host_ip("h6")
    spines = set()
    for sport in range(50000, 50040):
        hops = walk(CONFIGS, {}, "leaf1", src, dst, sport, 4791)
        nodes = ["h1", *(h.node for h in hops)]
        assert nodes == predict_path(FAB, "h1", "h6", sport, 4791, seed=1)
        spines.add(nodes[2])
        assert hops[0].bucket is not None and hops[0].live == 3
    assert spines == {"spine1", "spine2", "spine3"}


def test_walk_avoids_a_pruned_uplink_and_blackholes_at_a_spine() -> None:
    src, dst = FAB.host_ip("h1"), FAB.host_ip("h6")
    uplink = FAB.interface("leaf1", "spine1").name
    for sport in range(50000, 50030):
        hops = walk(CONFIGS, {"leaf1": {uplink: False}}, "leaf1", src, dst, sport, 4791)
        assert hops[1].node != "spine1"
    # spine1 lost leaf3: its only way there is down, the flows hashed onto it are lost.
    down = FAB.interface("spine1", "leaf3").name
    lost = [
        sport
        for sport in range(50000, 50030)
        if walk(CONFIGS, {"spine1": {down: False}}, "leaf1", src, dst, sport, 4791)[-1].note
    ]
    assert lost, "some flows must hash onto spine1"
    hops = walk(CONFIGS, {"spine1": {down: False}}, "leaf1", src, dst, lost[0], 4791)
    assert hops[-1].node == "spine1" and "black-holed" in hops[-1].note


def test_format_path_names_every_hop() -> None:
    src, dst = FAB.host_ip("h1"), FAB.host_ip("h6")
    hops = walk(CONFIGS, {}, "leaf1", src, dst, 50000, 4791)
    text = format_path("h1", src, dst, 50000, 4791, 17, hops)
    assert text.splitlines()[0] == "h1 10.1.1.1:50000 -> 10.1.3.2:4791 udp"
    assert text.splitlines()[-1].startswith("path: h1 leaf1 spine")
    assert text.splitlines()[-1].endswith("leaf3 h6")


# ----- `testbed fib --json` and `testbed path --json`, on a fabric stood in for -------------------


class FakeState:
    """The parts of a running fabric's state `testbed path` reads (testbed.fabric.state)."""

    def __init__(self) -> None:
        self.nodes = {
            h: {"kind": "host", "interfaces": [{"ip": i.ip, "peer": i.peer_node}
                                               for i in FAB.interfaces[h]]}
            for h in FAB.hosts()
        } | {sw: {"kind": FAB.nodes[sw].kind, "interfaces": []} for sw in FAB.switches()}  # fmt: skip


@pytest.fixture
def fabric_up(monkeypatch):
    """`testbed fib`/`path` against CONFIGS, with spine2's port to leaf3 down."""
    from testbed.cli import fib as cli_fib

    down = FAB.interface("spine2", "leaf3").name
    up = {sw: {p.name: p.name != down for p in cfg.ports} for sw, cfg in CONFIGS.items()}
    monkeypatch.setattr(cli_fib, "load_configs", lambda name: CONFIGS)
    monkeypatch.setattr(cli_fib, "live_ports", lambda name, node=None: up)
    monkeypatch.setattr(cli_fib.client, "state", lambda name: FakeState())
    return down, up


def test_fib_json_is_the_table_as_data(fabric_up, capsys) -> None:
    from testbed.cli.app import main

    assert main(["fib", "spine2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["switch"] == "spine2" and out["ecmp_seed"] == CONFIGS["spine2"].seed
    assert out["live_known"] is True
    routes = {r["prefix"]: r for r in out["routes"]}
    assert routes["10.1.3.0/24"]["next_hops"] == [
        {"port": fabric_up[0], "peer": "leaf3", "live": False}
    ]
    assert routes["10.1.1.0/24"]["kind"] == "single"
    assert [r["prefix"] for r in out["routes"]] == [r.prefix for r in fib_rows(CONFIGS["spine2"])]


def test_path_json_matches_the_walk(fabric_up, capsys) -> None:
    from testbed.cli.app import main

    assert main(["path", "h1", "h6", "--sport", "50001", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    src, dst = FAB.host_ip("h1"), FAB.host_ip("h6")
    hops = walk(CONFIGS, fabric_up[1], "leaf1", src, dst, 50001, 4791)
    assert out["src"] == "h1" and out["dst_ip"] == dst and out["proto"] == "udp"
    assert out["path"] == ["h1", *(h.node for h in hops)]
    assert out["hops"][0]["node"] == "leaf1" and out["hops"][0]["members"] == 3
    assert [h["port"] for h in out["hops"]] == [h.port for h in hops]
    # A flow hashed onto spine2, whose way to leaf3 is down, is reported black-holed there.
    blackholed = next(
        sport for sport in range(50000, 50100)
        if walk(CONFIGS, fabric_up[1], "leaf1", src, dst, sport, 4791)[-1].node == "spine2"
    )  # fmt: skip
    assert main(["path", "h1", "h6", "--sport", str(blackholed), "--json"]) == 0
    last = json.loads(capsys.readouterr().out)["hops"][-1]
    assert last["node"] == "spine2" and "black-holed" in last["note"]


def test_fib_json_error_goes_to_stderr_with_status_2(fabric_up, capsys) -> None:
    from testbed.cli.app import main

    assert main(["fib", "spine9", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "'spine9' is not a switch" in captured.err

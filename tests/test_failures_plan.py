"""What each failure action turns into, per switch and port (pure)."""

from __future__ import annotations

import pytest

from testbed.fabric.failures import FailureError, HostRateStep, SwitchStep, plan
from topologies import leaf_spine

FAB = leaf_spine(spines=2, leaves=2, hosts_per_leaf=2, planes=1, link_mbps=40)


def reqs(p):
    return {
        (s.switch, s.request.get("port")): s.request for s in p.steps if isinstance(s, SwitchStep)
    }


def test_link_down_acts_at_both_sending_switches():
    p = plan(FAB, "link-down", link=("spine1", "leaf2"))
    r = reqs(p)
    assert r[("spine1", FAB.interface("spine1", "leaf2").name)]["up"] is False
    assert r[("leaf2", FAB.interface("leaf2", "spine1").name)]["up"] is False
    assert len(p.steps) == 2


def test_one_direction_acts_only_at_the_sender():
    p = plan(FAB, "blackhole", link=("spine1", "leaf2"), direction=("leaf2", "spine1"))
    assert [s.switch for s in p.steps] == ["leaf2"]
    assert p.steps[0].request["blackhole"] is True


def test_host_direction_is_applied_on_receive_at_the_leaf():
    port = FAB.interface("leaf1", "h1").name
    p = plan(FAB, "loss", link=("h1", "leaf1"), percent=2.0)
    assert [s.request for s in p.steps] == [
        {"op": "port", "port": port, "rx_loss_pct": 2.0},  # h1 -> leaf1: the leaf drops on receive
        {"op": "port", "port": port, "loss_pct": 2.0},  # leaf1 -> h1: the leaf's egress
    ]
    assert all(s.switch == "leaf1" for s in p.steps)


def test_degrade_on_a_host_link_changes_the_host_nic():
    p = plan(FAB, "degrade", link=("h1", "leaf1"), mbps=10)
    hosts = [s for s in p.steps if isinstance(s, HostRateStep)]
    assert hosts == [HostRateStep("h1", "h1-eth0", 10)]
    heal = plan(FAB, "heal", link=("h1", "leaf1"))
    assert HostRateStep("h1", "h1-eth0", 40) in heal.steps


def test_switch_down_tells_neighbour_switches_only():
    p = plan(FAB, "switch-down", node="leaf1")
    switches = {s.switch for s in p.steps}
    assert switches == {"leaf1", "spine1", "spine2"}
    assert all(s.request["up"] is False for s in p.steps)


def test_plane_down_covers_every_switch_of_the_plane():
    fab = leaf_spine(spines=2, leaves=2, hosts_per_leaf=1, planes=2)
    p = plan(fab, "plane-down", plane=2)
    downs = {s.switch for s in p.steps if s.request["op"] == "switch"}
    assert downs == set(fab.plane_switches(2))
    assert not any(s.switch.endswith("p1") for s in p.steps)


def test_flap_is_returned_for_the_caller_to_toggle():
    p = plan(FAB, "flap", link=("leaf1", "spine1"), period_ms=200, count=3)
    assert p.flap == (0.2, 3) and p.steps == []


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"action": "nuke"}, "unknown"),
        ({"action": "link-down", "link": ("spine1", "spine2")}, "not adjacent"),
        ({"action": "link-down", "link": ("spine1", "leaf9")}, "no node named 'leaf9'"),
        (
            {"action": "link-down", "link": ("spine1", "leaf1"), "direction": ("leaf1", "leaf2")},
            "direction",
        ),
        ({"action": "loss", "link": ("spine1", "leaf1"), "percent": 101}, "percent"),
        ({"action": "degrade", "link": ("spine1", "leaf1"), "mbps": 0}, "mbps"),
        ({"action": "flap", "link": ("spine1", "leaf1"), "period_ms": 1}, "period_ms"),
        ({"action": "switch-down", "node": "h1"}, "is a host"),
        ({"action": "plane-down", "plane": 2}, "plane must be"),
    ],
)
def test_bad_actions_name_the_problem(kwargs, match):
    with pytest.raises(FailureError, match=match):
        plan(FAB, **kwargs)

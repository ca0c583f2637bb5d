"""`testbed up --switch-processes shared` on real namespaces: one switch process serves every
switch node (ports opened in each node's namespace), yet each switch keeps its own control
socket, counters and failure state.

The shared fabric runs with --seed 7 (not the default, so that the seed reaches the shared
process too): ICMP's flow hash covers only the addresses, so with some seeds every leaf1 <->
leaf2 ping of a 2x2 fabric hashes onto spine1 one way or the other and could not survive
`link-down spine1 leaf2`; with seed 7 pings cross spine2 both ways (asserted below from the
switches' own hash, testbed.fabric.paths).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from testbed.fabric.cleanup import leftovers, pid_exists
from testbed.fabric.paths import predict_path, source_ports_via
from testbed.fabric.state import RUN_ROOT
from testbed.fabric.switch_layout import ENV
from tests.conftest import tb, unique_name
from tests.test_lifecycle_netns import state, wait_for
from topologies import leaf_spine

pytestmark = pytest.mark.netns

SEED = 7
FAB = leaf_spine(spines=2, leaves=2, hosts_per_leaf=2)
SWITCHES = ["leaf1", "leaf2", "spine1", "spine2"]
SHAPE = ["--spines", "2", "--leaves", "2", "--hosts-per-leaf", "2"]

# UDP flows whose path the switches' hash fixes (see tests/test_failures_netns.py):
# A: h1 -> h3, hashed by leaf1 onto spine1, so it crosses spine1 -> leaf2.
# B: h3 -> h1, hashed by leaf2 onto spine1 while that uplink is up.
SPORT_A = source_ports_via(FAB, "h1", "h3", "spine1", 9000, seed=SEED)[0]
SPORT_B = source_ports_via(FAB, "h3", "h1", "spine1", 9001, start=11000, seed=SEED)[0]
N = 50  # datagrams per flow


@pytest.fixture(scope="module")
def fabric():
    name = unique_name("sh")
    tb("up", "--name", name, *SHAPE, "--switch-processes", "shared", "--seed", str(SEED))
    try:
        yield name
    finally:
        tb("down", "--name", name, check=False)


def counters(name: str) -> dict:
    return json.loads(tb("counters", "--name", name, "--json").stdout)


def sh(name: str, node: str, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return tb("exec", "--name", name, node, "--", *cmd, check=check, timeout=60)


def switch_pids(st: dict) -> dict[str, int]:
    return {p["node"]: p["pid"] for p in st["processes"] if p["role"] == "switch"}


def netns_of(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


def send(name: str, src: str, dst: str, sport: int, dport: int) -> None:
    out = sh(
        name, src, sys.executable, "-m", "testbed.harness.udp_probe", "send", "--dst", FAB.host_ip(dst),
        "--dport", str(dport), "--sports", str(sport), "--count", str(N), "--size", "200",
        "--interval-us", "200",
    ).stdout  # fmt: skip
    assert json.loads(out)["sent"] == N


def delta(after: dict, before: dict, sw: str, port: str, key: str) -> int:
    return after[sw]["ports"][port][key] - before[sw]["ports"][port][key]


def test_one_live_process_serves_every_switch_from_outside_their_namespaces(fabric):
    st = state(fabric)
    assert st["status"] == "up", st["message"]
    switches = [p for p in st["processes"] if p["role"] == "switch"]
    assert sorted(p["node"] for p in switches) == SWITCHES
    assert len({p["pid"] for p in switches}) == 1, switches
    assert all(p["alive"] for p in switches), switches
    pid = switches[0]["pid"]
    assert pid_exists(pid)
    cmdline = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
    assert cmdline.count(b"--config") == 4 and cmdline.count(b"--netns") == 4
    # Not inside any switch node: its ports were opened in each node's namespace by setns.
    shells = {p["node"]: p["pid"] for p in st["processes"] if p["role"] == "node-shell"}
    assert netns_of(pid) not in {netns_of(shells[n]) for n in SWITCHES}
    # Each switch still has its own control socket.
    assert sorted(st["switch_sockets"]) == SWITCHES
    assert len(set(st["switch_sockets"].values())) == 4
    log = (RUN_ROOT / fabric / "switches" / "switches.log").read_text()
    assert "(one process for 4 switches)" in log
    for n in SWITCHES:
        assert f"switch {n}: forwarding on " in log


def test_ping_and_traceroute_cross_leaf_spine_leaf(fabric):
    before = counters(fabric)
    out = sh(fabric, "h1", "ping", "-c1", "-W2", "10.1.2.1").stdout
    assert "1 received" in out
    assert "ttl=61" in out  # 64 - three switches
    # -N1: one probe at a time. With traceroute's 16 at once, the probes past leaf2 reach h3
    # together, over both spines, and h3's ICMP rate limit (6 at once, then 1/s) may silence
    # the one of hop 4.
    out = sh(fabric, "h1", "traceroute", "-n", "-N1", "-q1", "-w1", "10.1.2.1").stdout
    hops = {}
    for line in out.splitlines()[1:]:
        m = re.match(r"\s*(\d+)\s+(.*)", line)
        if m:
            hops[int(m.group(1))] = re.findall(r"\d+\.\d+\.\d+\.\d+", m.group(2))
    assert hops[1] == ["10.1.1.254"], out  # leaf1
    assert len(hops[2]) == 1 and re.fullmatch(r"10\.1\.0\.[12]", hops[2][0]), out  # a spine
    assert hops[3] == ["10.1.2.254"], out  # leaf2
    assert hops[4] == ["10.1.2.1"], out
    assert max(hops) == 4, out
    # Each hop's time-exceeded was sent by that switch's own state in the shared process, and
    # by no other switch.
    after = counters(fabric)
    spine = f"spine{hops[2][0].rsplit('.', 1)[1]}"
    for sw in SWITCHES:
        sent = after[sw]["icmp_sent"] - before[sw]["icmp_sent"]
        assert sent == (1 if sw in ("leaf1", spine, "leaf2") else 0), (sw, sent)


def test_counters_are_per_switch_and_count_forwarding(fabric):
    before = counters(fabric)
    assert sorted(before) == SWITCHES
    for sw, c in before.items():
        assert "error" not in c, c
        assert c["switch"] == sw
        ports = {i.name for i in FAB.interfaces[sw]}
        assert set(c["ports"]) == ports
    out = sh(fabric, "h1", "ping", "-c5", "-i0.2", "-W2", "10.1.2.1").stdout
    assert "5 received" in out
    after = counters(fabric)
    uplinks = ("eth2", "eth3")
    assert delta(after, before, "leaf1", "leaf1-eth0", "rx_packets") >= 5  # from h1
    assert sum(delta(after, before, "leaf1", f"leaf1-{e}", "tx_packets") for e in uplinks) >= 5
    assert sum(delta(after, before, "leaf2", f"leaf2-{e}", "rx_packets") for e in uplinks) >= 5
    assert delta(after, before, "leaf2", "leaf2-eth0", "tx_packets") >= 5  # to h3
    # h2 and h4 had no part in it: their leaf ports saw no echo traffic.
    assert delta(after, before, "leaf1", "leaf1-eth1", "rx_packets") < 5
    assert delta(after, before, "leaf2", "leaf2-eth1", "tx_packets") < 5


def veth_tx_packets(name: str, node: str, intf: str) -> int:
    return int(sh(name, node, "cat", f"/sys/class/net/{intf}/statistics/tx_packets").stdout)


def test_links_between_switches_are_wired_in_memory(fabric):
    """switch/local_links.py: the shared process carries leaf <-> spine frames itself, so the
    veths between switches stay silent while the switches count every frame on those ports;
    host links still cross their veths."""
    log = (RUN_ROOT / fabric / "switches" / "switches.log").read_text()
    assert "switch leaf1: forwarding on 4 ports, 2 of them wired in memory" in log
    assert "switch spine1: forwarding on 2 ports, 2 of them wired in memory" in log
    up = [(f"leaf1-{e}") for e in ("eth2", "eth3")]
    veth0 = {i: veth_tx_packets(fabric, "leaf1", i) for i in [*up, "leaf1-eth0"]}
    before = counters(fabric)
    out = sh(fabric, "h3", "ping", "-c5", "-i0.2", "-W2", "10.1.1.1").stdout  # h3 -> h1
    assert "5 received" in out
    after = counters(fabric)
    veth1 = {i: veth_tx_packets(fabric, "leaf1", i) for i in veth0}
    assert sum(delta(after, before, "leaf1", i, "tx_packets") for i in up) >= 5  # replies
    assert all(veth1[i] == veth0[i] for i in up), (veth0, veth1)
    assert delta(after, before, "leaf1", "leaf1-eth0", "tx_packets") >= 5  # requests, to h1
    assert veth1["leaf1-eth0"] - veth0["leaf1-eth0"] >= 5


def test_link_down_acts_on_its_two_switches_only(fabric):
    # With this seed a ping between the leaves crosses spine2, untouched by the failure below.
    assert predict_path(FAB, "h1", "h3", 0, 0, proto=1, seed=SEED)[2] == "spine2"
    assert predict_path(FAB, "h3", "h1", 0, 0, proto=1, seed=SEED)[2] == "spine2"
    down_ports = {("spine1", "spine1-eth1"), ("leaf2", "leaf2-eth2")}  # the spine1-leaf2 link
    tb("ctl", "--name", fabric, "link-down", "spine1", "leaf2")
    try:
        c = counters(fabric)
        for sw in SWITCHES:
            for port, pc in c[sw]["ports"].items():
                assert pc["state"]["up"] is ((sw, port) not in down_ports), (sw, port, pc["state"])
        out = sh(fabric, "h1", "ping", "-c1", "-W2", "10.1.2.1").stdout
        assert "1 received" in out
        # A: leaf1 cannot know; spine1 has no other way to leaf2 and drops it.
        send(fabric, "h1", "h3", SPORT_A, 9000)
        mid = counters(fabric)
        drops = mid["spine1"]["drops"].get("link_down", 0) - c["spine1"]["drops"].get(
            "link_down", 0
        )
        assert drops == N
        assert mid["spine2"]["drops"].get("link_down", 0) == 0
        # B: leaf2 pruned its dead uplink at once and sends B by spine2 instead.
        send(fabric, "h3", "h1", SPORT_B, 9001)
        end = counters(fabric)
        assert delta(end, mid, "leaf2", "leaf2-eth2", "tx_packets") == 0
        assert delta(end, mid, "leaf2", "leaf2-eth3", "tx_packets") >= N
        assert delta(end, mid, "spine2", "spine2-eth0", "tx_packets") >= N  # on to leaf1
    finally:
        tb("ctl", "--name", fabric, "link-up", "spine1", "leaf2")
    c = counters(fabric)
    assert all(pc["state"]["up"] for sw in SWITCHES for pc in c[sw]["ports"].values())
    send(fabric, "h1", "h3", SPORT_A, 9000)  # A crosses spine1 -> leaf2 again
    healed = counters(fabric)
    assert delta(healed, c, "spine1", "spine1-eth1", "tx_packets") >= N
    assert healed["spine1"]["drops"].get("link_down", 0) == c["spine1"]["drops"].get("link_down", 0)


def test_switch_down_stops_one_switch_not_the_process(fabric):
    pid = switch_pids(state(fabric))["spine1"]
    tb("ctl", "--name", fabric, "switch-down", "spine1")
    try:
        c = counters(fabric)
        assert {sw: c[sw]["up"] for sw in SWITCHES} == {
            "leaf1": True, "leaf2": True, "spine1": False, "spine2": True,
        }  # fmt: skip
        st = state(fabric)
        assert st["status"] == "up", st["message"]
        assert set(switch_pids(st).values()) == {pid} and pid_exists(pid)
        assert "1 received" in sh(fabric, "h1", "ping", "-c1", "-W2", "10.1.2.1").stdout
    finally:
        tb("ctl", "--name", fabric, "switch-up", "spine1")
    assert all(c["up"] for c in counters(fabric).values())


def test_down_after_a_normal_run_leaves_nothing():
    name = unique_name("sd")
    tb("up", "--name", name, *SHAPE, "--switch-processes", "shared")
    try:
        st = state(name)
        assert len(set(switch_pids(st).values())) == 1
        assert "1 received" in sh(name, "h2", "ping", "-c1", "-W2", "10.1.2.2").stdout
        pids = [p["pid"] for p in st["processes"]]
    finally:
        tb("down", "--name", name)
    assert leftovers(name) == []
    assert not (RUN_ROOT / name).exists()
    assert [p for p in pids if pid_exists(p)] == []


def test_killed_shared_process_degrades_every_switch_and_down_cleans(monkeypatch):
    """Chosen through the environment this time: the variable reaches the fabric builder."""
    monkeypatch.setenv(ENV, "shared")
    name = unique_name("sk")
    tb("up", "--name", name, *SHAPE)
    try:
        pids = switch_pids(state(name))
        assert sorted(pids) == SWITCHES and len(set(pids.values())) == 1, pids
        pid = pids["leaf1"]
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: state(name)["status"] == "degraded", what="degraded status")
        st = state(name)
        for n in SWITCHES:
            # The log tail quoted in the message names every switch anyway: look for the entry.
            assert f"{n} (exit -9)" in st["message"], st["message"]
        assert not any(p["alive"] for p in st["processes"] if p["role"] == "switch")
    finally:
        tb("down", "--name", name)
    assert leftovers(name) == []
    assert not pid_exists(pid)


def test_per_node_default_gives_each_switch_its_own_process(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    name = unique_name("pn")
    tb("up", "--name", name, "--spines", "1", "--leaves", "2", "--hosts-per-leaf", "1")
    try:
        st = state(name)
        pids = switch_pids(st)
        assert sorted(pids) == ["leaf1", "leaf2", "spine1"]
        assert len(set(pids.values())) == 3, pids
        assert all(p["alive"] for p in st["processes"] if p["role"] == "switch")
        shells = {p["node"]: p["pid"] for p in st["processes"] if p["role"] == "node-shell"}
        for n, pid in pids.items():
            assert netns_of(pid) == netns_of(shells[n]), n  # inside its own node
        assert not (RUN_ROOT / name / "switches" / "switches.log").exists()
    finally:
        tb("down", "--name", name)
    assert leftovers(name) == []

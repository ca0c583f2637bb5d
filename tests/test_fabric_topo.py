"""The Mininet Topo is the pure description, and plain Mininet forwards on it (Linux routers)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from topologies import leaf_spine

ROOT = Path(__file__).resolve().parent.parent
TOPO_FILE = ROOT / "testbed" / "fabric" / "topo.py"

topo = pytest.importorskip("testbed.fabric.topo", reason="needs Mininet (pip install mininet)")


def test_topo_has_the_description_nodes_links_names_and_macs():
    fab = leaf_spine(spines=2, leaves=3, hosts_per_leaf=2, planes=2)
    t = topo.LeafSpineTopo(fabric=fab)
    assert set(t.hosts()) == set(fab.hosts())
    assert set(t.switches()) == set(fab.switches())
    links = {
        (i["node1"], i["intfName1"], i["addr1"], i["node2"], i["intfName2"], i["addr2"])
        for _a, _b, i in t.links(withInfo=True)
    }
    want = set()
    for link in fab.links:
        a_mac = next(i.mac for i in fab.interfaces[link.a] if i.name == link.a_intf)
        b_mac = next(i.mac for i in fab.interfaces[link.b] if i.name == link.b_intf)
        want.add((link.a, link.a_intf, a_mac, link.b, link.b_intf, b_mac))
    assert links == want
    # Mininet's port numbers agree with the names (leaf1p2-eth3 is port 3 of leaf1p2).
    for _a, _b, i in t.links(withInfo=True):
        assert i["intfName1"].endswith(f"-eth{i['port1']}")
        assert i["intfName2"].endswith(f"-eth{i['port2']}")


def test_topo_from_mn_arguments_equals_leaf_spine():
    """`--topo leafspine,2,3,2,link_mbps=0` builds what leaf_spine(...) describes."""
    t = topo.LeafSpineTopo(2, 3, 2, link_mbps=0)
    assert (
        t.fabric.to_dict()
        == leaf_spine(spines=2, leaves=3, hosts_per_leaf=2, link_mbps=0).to_dict()
    )


def test_router_routes_are_the_fib_with_kernel_next_hops():
    fab = leaf_spine(spines=2, leaves=2, hosts_per_leaf=2)
    leaf1 = {r.prefix: r.hops for r in topo.router_routes(fab, "leaf1")}
    assert leaf1["10.1.1.1/32"] == ((None, "leaf1-eth0"),)  # the host is on that link
    assert leaf1["10.1.0.2/32"] == ((None, "leaf1-eth3"),)  # spine2's own address
    # The other leaf's subnet: one ECMP group over both spines, as in the switch's FIB.
    assert leaf1["10.1.2.0/24"] == (("10.1.0.1", "leaf1-eth2"), ("10.1.0.2", "leaf1-eth3"))
    assert "10.1.1.254/32" not in leaf1  # the router's own address lives on lo
    spine1 = {r.prefix: r.hops for r in topo.router_routes(fab, "spine1")}
    assert spine1 == {
        "10.1.1.0/24": (("10.1.1.254", "spine1-eth0"),),
        "10.1.2.0/24": (("10.1.2.254", "spine1-eth1"),),
    }
    neighbours = topo.router_neighbours(fab, "spine1")
    assert ("10.1.1.254", fab.interface("leaf1", "spine1").mac, "spine1-eth0") in neighbours


@pytest.mark.netns
def test_plain_mininet_pingall_through_linux_routers():
    """What `mn --custom testbed/fabric/topo.py --topo leafspine,2,2,2 --test pingall` does,
    through Mininet's Python API: the `mn` command itself runs Mininet's global cleanup (the
    equivalent of `mn -c`: kills by name, deletes every *-ethN link) on any error, which must
    never happen on a shared machine. The custom file is loaded the way `mn --custom` loads it."""
    from mininet.log import setLogLevel
    from mininet.net import Mininet
    from mininet.util import buildTopo

    from testbed.fabric.cleanup import pid_exists

    setLogLevel("error")
    customs: dict = {}
    exec(compile(TOPO_FILE.read_text(), str(TOPO_FILE), "exec"), customs, customs)  # noqa: S102
    net = Mininet(topo=buildTopo(customs["topos"], "leafspine,2,2,2"), controller=None)
    pids = []
    try:
        net.start()
        pids = [n.pid for n in net.hosts + net.switches]
        assert net.pingAll(timeout=2) == 0.0
        out = net.get("h1").cmd("ping -n -c1 -W2 10.1.2.2")
        assert "ttl=61" in out, out  # leaf, spine, leaf: three kernel routers
    finally:
        net.stop()
    deadline = time.monotonic() + 5
    while any(pid_exists(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p for p in pids if pid_exists(p)] == [], "node shells left behind"
    # Every interface lived in a node namespace; none was ever in ours.
    assert not any(n.startswith(("h1-", "leaf1-", "spine1-")) for n in os.listdir("/sys/class/net"))


@pytest.mark.netns
def test_netlink_failures_carry_errno_and_name_the_request():
    import errno
    import subprocess

    from testbed.fabric.netlink import NamespaceError, node_netlink

    holder = subprocess.Popen(["unshare", "-n", "sleep", "30"])
    try:
        deadline = time.monotonic() + 5
        while os.stat(f"/proc/{holder.pid}/ns/net").st_ino == os.stat("/proc/self/ns/net").st_ino:
            assert time.monotonic() < deadline, "unshare did not start"
            time.sleep(0.01)
        with node_netlink(holder.pid, "n1") as nl:
            nl.link_up("lo")
            nl.add_address("lo", "10.9.9.9", 32)
            with pytest.raises(NamespaceError) as exc:
                nl.add_address("lo", "10.9.9.9", 32)
            assert exc.value.errno == errno.EEXIST and "n1: add_address lo" in str(exc.value)
            with pytest.raises(NamespaceError) as exc:
                nl.add_route("10.1.0.0/16", "10.9.9.1", "nope-eth0")
            assert exc.value.errno == errno.ENODEV
            assert nl.addresses() >= {"127.0.0.1", "10.9.9.9"}
        # The thread is back home: the address is not here.
        assert "10.9.9.9" not in Path("/proc/net/fib_trie").read_text()
    finally:
        holder.kill()
        holder.wait()

"""`topology.mtu` on real namespaces: the smallest fabric (h1 - leaf1 - spine1 - leaf2 - h2,
100 Mbps) built at MTU 9000 and at the default 1500.

What must hold at either MTU: every veth end has it (offloads still off), a ping of exactly
the MTU crosses three switches and one byte more is refused at the sender, an MRC bulk
transfer completes with its data frames filling the MTU on the wire (the switch's own tx
counters: bytes over packets), iperf3's TCP does the same by itself, and no switch truncated
or dropped a frame of its own (its ring slots hold the MTU). Each test prints its figures
(run pytest with -s).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from contracts.framing import max_frame_bytes
from testbed.bench.endpoint_bench import ideal_goodput_mbps, transfer_metrics
from testbed.harness.endpoints import FabricEndpoints, run_job
from tests.conftest import tb, unique_name
from topologies import leaf_spine

pytestmark = pytest.mark.netns

MBPS = 100
BULK_BYTES = 20_000_000


def sh(name: str, node: str, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return tb("exec", "--name", name, node, "--", *cmd, check=check, timeout=60)


def counters(name: str) -> dict:
    return json.loads(tb("counters", "--name", name, "--json").stdout)


def uplink(fab, leaf: str) -> str:
    """The leaf's port towards the spine: only data leaves h1's leaf by it (ACKs come back)."""
    return next(i.name for i in fab.interfaces[leaf] if i.peer_node.startswith("spine"))


@pytest.fixture(scope="module", params=[9000, 1500], ids=["mtu9000", "mtu1500"])
def fabric(request):
    mtu = request.param
    fab = leaf_spine(spines=1, leaves=2, hosts_per_leaf=1, link_mbps=MBPS, mtu=mtu)
    name = unique_name("mtu")
    args = ["--spines", "1", "--leaves", "2", "--hosts-per-leaf", "1", "--link-mbps", str(MBPS)]
    tb("up", "--name", name, *args, "--mtu", str(mtu))
    try:
        yield name, fab
    finally:
        tb("down", "--name", name, check=False)


def test_every_veth_end_has_the_mtu_and_no_offloads(fabric) -> None:
    name, fab = fabric
    for node, intfs in fab.interfaces.items():
        for intf in intfs:
            out = sh(name, node, "sh", "-c", f"cat /sys/class/net/{intf.name}/mtu").stdout
            assert int(out) == fab.params.mtu, f"{node} {intf.name}: mtu {out.strip()}"
            k = sh(name, node, "ethtool", "-k", intf.name).stdout
            for feature in ("tcp-segmentation-offload", "generic-segmentation-offload"):
                assert f"{feature}: off" in k, f"{node} {intf.name}: {feature} on"


def test_a_ping_of_exactly_the_mtu_crosses_and_one_byte_more_is_refused(fabric) -> None:
    name, fab = fabric
    dst = fab.host_ip("h2")
    icmp = fab.params.mtu - 28  # IPv4 20 + ICMP 8
    ok = sh(name, "h1", "ping", "-c1", "-W2", "-M", "do", "-s", str(icmp), dst, check=False)
    assert "1 received" in ok.stdout, ok.stdout + ok.stderr
    big = sh(name, "h1", "ping", "-c1", "-W2", "-M", "do", "-s", str(icmp + 1), dst, check=False)
    assert big.returncode != 0 and "1 received" not in big.stdout


def test_an_mrc_bulk_completes_in_frames_that_fill_the_mtu(fabric) -> None:
    name, fab = fabric
    port = uplink(fab, "leaf1")
    eps = FabricEndpoints(name, fab, ["h1", "h2"], pace_mbps=MBPS)
    try:
        stats0, counters0 = eps.coordinator.stats(), counters(name)  # after the start-up
        res = run_job(
            eps, 1, {"workload": {"kind": "bulk", "src": "h1", "dst": "h2", "bytes": BULK_BYTES}}
        )
        stats = eps.coordinator.stats()
        goodput = transfer_metrics(eps, 1, res["t0"])["goodput_mbps"]
    finally:
        eps.stop()
        eps.cleanup()
    st = res["status"]["h2"]
    assert st["done"] and st["received_bytes"] == BULK_BYTES and st["bad_messages"] == 0
    after = counters(name)
    before, p = counters0["leaf1"]["ports"][port], after["leaf1"]["ports"][port]
    packets = p["tx_packets"] - before["tx_packets"]
    per_frame = (p["tx_bytes"] - before["tx_bytes"]) / packets
    frame = max_frame_bytes(fab.params.mtu)
    ideal = ideal_goodput_mbps(MBPS, fab.params.mtu)
    # The emulator's CPU per data packet (its ACK included): docs/performance.md, "MTU".
    cpu = {h: stats[h]["process"]["cpu_s"] - stats0[h]["process"]["cpu_s"] for h in ("h1", "h2")}
    cpu |= {n: after[n]["cpu_s"] - counters0[n]["cpu_s"] for n in after}
    us = {n: round(s / packets * 1e6, 1) for n, s in cpu.items()}
    for h in ("h1", "h2"):  # the largest lateness of the run bounds its P99
        proc = stats[h]["process"]
        if proc["timer_late_samples"] == 0:  # no timer came due: nothing measured, no P99
            assert proc["timer_late_us_p99"] is None and proc["timer_late_us_max"] == 0.0, proc
        else:
            assert proc["timer_late_us_max"] >= proc["timer_late_us_p99"] >= 0.0, proc
    print(
        f"\nFIGURES mtu {fab.params.mtu}: {packets} frames leaf1->spine1, "
        f"{per_frame:.1f} B each (full: {frame}); h2 received "
        f"{stats['h2']['process']['rx_datagrams']} datagrams; goodput {goodput:.1f} Mbps "
        f"(ideal {ideal:.1f}); CPU us per data packet {sum(us.values()):.0f}: {us}"
    )
    assert goodput <= ideal * 1.02  # the shaper holds, and the ideal counts this MTU's headers
    # Every data frame is full but a message's last; probes (70 B) are few, more on a busy
    # machine, where spurious losses retire EVs (2.7 % of the frames in one run: 8818 B).
    assert 0.9 * frame <= per_frame <= frame
    assert packets >= BULK_BYTES / (fab.params.mtu - 80)
    for node, c in after.items():
        assert c["kernel_drops"] == 0, f"{node}: {c['kernel_drops']} frames lost in the emulator"
        assert all(q["truncated"] == 0 for q in c["ports"].values()), node


def test_kernel_tcp_follows_the_interface_mtu(fabric) -> None:
    """iperf3 needs no setting: the kernel's TCP takes its MSS from the interface MTU."""
    name, fab = fabric
    port = uplink(fab, "leaf1")
    before = counters(name)["leaf1"]["ports"][port]
    sh(name, "h2", "iperf3", "-s", "-1", "-D", "-p", "5401")
    sh(
        name,
        "h2",
        "sh",
        "-c",
        "for i in $(seq 100); do ss -ltn | grep -q :5401 && exit 0; sleep 0.02; done; exit 1",
    )
    sh(name, "h1", "iperf3", "-c", fab.host_ip("h2"), "-p", "5401", "-t", "1", "-J")
    p = counters(name)["leaf1"]["ports"][port]
    per_frame = (p["tx_bytes"] - before["tx_bytes"]) / (p["tx_packets"] - before["tx_packets"])
    print(f"\nFIGURES mtu {fab.params.mtu}: iperf3 TCP frames {per_frame:.1f} B each")
    assert per_frame >= 0.95 * max_frame_bytes(fab.params.mtu)

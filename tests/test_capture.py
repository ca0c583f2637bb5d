"""`testbed capture` (testbed/capture.py): which ports, which command line, what it refuses; and
on a real fabric, MRC packets sent from h1 captured at h3 and decoded by the dissector."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from testbed.capture import (
    DISSECTOR,
    CaptureError,
    ports_to_capture,
    silent_ports,
    tshark_argv,
    wired_in_memory,
)
from tests.conftest import tb, unique_name
from topologies import leaf_spine

TOPO = leaf_spine(spines=2, leaves=2, hosts_per_leaf=2)
LOG = (
    "switch leaf1: forwarding on 4 ports, 2 of them wired in memory (one process for 4 switches)\n"
    "switch spine1: forwarding on 2 ports, 2 of them wired in memory (one process for 4 switches)\n"
)


def test_ports_default_to_all_of_the_nodes_and_a_bad_one_is_named():
    assert ports_to_capture(TOPO, "h1", None) == ["h1-eth0"]
    assert ports_to_capture(TOPO, "leaf1", "leaf1-eth2") == ["leaf1-eth2"]
    assert len(ports_to_capture(TOPO, "leaf1", None)) == 4
    with pytest.raises(CaptureError, match="^node: no node 'h9'"):
        ports_to_capture(TOPO, "h9", None)
    with pytest.raises(CaptureError, match="^port: h1 has no port 'h1-eth7' \\(it has h1-eth0\\)"):
        ports_to_capture(TOPO, "h1", "h1-eth7")


def test_ports_to_other_switches_of_a_wired_process_are_silent():
    uplinks = [i.name for i in TOPO.interfaces["leaf1"] if i.peer_node.startswith("spine")]
    everything = ports_to_capture(TOPO, "leaf1", None)
    assert wired_in_memory(LOG, "leaf1") == 2 and wired_in_memory(LOG, "leaf2") == 0
    assert silent_ports(TOPO, "leaf1", everything, LOG) == uplinks
    assert silent_ports(TOPO, "leaf1", everything, "") == []  # per-node: every veth carries
    assert silent_ports(TOPO, "h1", ["h1-eth0"], LOG) == []


def test_tshark_command_lines():
    assert tshark_argv(["h1-eth0"], "/tmp/x.pcap", 2.0, None, "udp port 4791") == [
        "tshark", "-q", "-i", "h1-eth0", "-w", "/tmp/x.pcap", "-a", "duration:2",
        "-f", "udp port 4791",
    ]  # fmt: skip
    printed = tshark_argv(["a", "b"], None, None, 10, None)
    assert printed == ["tshark", "-X", f"lua_script:{DISSECTOR}", "-i", "a", "-i", "b", "-c", "10"]


SEND = """
import sys
from scapy.all import Ether, IP, UDP, sendp
from endpoint.wire import BTH, MRCData, TOS_DATA
pkts = [Ether(dst=sys.argv[2]) / IP(src=sys.argv[3], dst=sys.argv[4], tos=TOS_DATA)
        / UDP(sport=49152 + i, dport=4791) / BTH(dqpn=7, psn=100 + i)
        / MRCData(offset=1420 * i, msg_id=42, msg_len=5 * 1420, ev=49152 + i) / (b"x" * 1420)
        for i in range(5)]
sendp(pkts, iface=sys.argv[1], verbose=False)
"""


@pytest.mark.netns
@pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark")
def test_capture_on_a_running_fabric_writes_a_pcap_the_dissector_decodes(tmp_path: Path):
    name = unique_name("cap")
    tb("up", "--name", name, "--spines", "2", "--leaves", "2", "--hosts-per-leaf", "2",
       "--switch-processes", "shared")  # fmt: skip
    try:
        # A port between two switches of the shared process is refused, in one line.
        bad = tb("capture", "--name", name, "leaf1", "leaf1-eth2", "-c", "1", check=False)
        assert bad.returncode == 2 and "carries them in memory" in bad.stderr
        assert len(bad.stderr.strip().splitlines()) == 1
        pcap = tmp_path / "h3.pcap"
        cap = threading.Thread(
            target=tb,
            args=("capture", "--name", name, "h3", "-w", str(pcap), "-c", "5", "-f", "udp port 4791"),
            kwargs={"timeout": 60},
        )  # fmt: skip
        cap.start()
        time.sleep(2.0)  # tshark up
        gw_mac = TOPO.interface("leaf1", "h1").mac  # leaf1's port towards h1
        tb("exec", "--name", name, "h1", "--", sys.executable, "-c", SEND, "h1-eth0", gw_mac,
           TOPO.host_ip("h1"), TOPO.host_ip("h3"), timeout=60)  # fmt: skip
        cap.join(60)
        assert pcap.exists()
        out = subprocess.run(
            ["tshark", "-X", f"lua_script:{DISSECTOR}", "-r", str(pcap), "-T", "fields",
             "-E", "separator=|", "-e", "mrc.bth.psn", "-e", "mrc.data.offset",
             "-e", "mrc.data.msg_id", "-e", "mrc.data.ev", "-e", "ip.ttl"],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout.split()  # fmt: skip
        rows = sorted(tuple(int(x) for x in line.split("|")) for line in out)
        assert rows == [(100 + i, 1420 * i, 42, 49152 + i, 61) for i in range(5)]  # 3 switches
    finally:
        tb("down", "--name", name, check=False)

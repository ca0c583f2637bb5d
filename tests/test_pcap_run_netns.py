"""`testbed run --pcap` on the real fabric: the switches' pcaps decode, count and time right.

A short dilated run (N = 4: the switches share one process, so spine1's links are wired in
memory and no veth carries them) captures every host-facing leaf port and every port of
spine1. The files must decode with tshark and the project's dissector (MRC fields), hold as
many frames as the ports' own counters say they carried meanwhile, and be stamped with
virtual time: monotonic per file and spanning the run's virtual duration from its t = 0.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from scapy.layers.inet import UDP
from scapy.utils import rdpcap

from testbed.capture import DISSECTOR
from tests.conftest import tb

pytestmark = [
    pytest.mark.netns,
    pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed"),
]


def test_a_dilated_run_with_pcap_writes_decodable_virtual_time_captures(tmp_path) -> None:
    out = tmp_path / "run"
    proc = tb("run", "link-failure", "--quick", "--transport", "mrc", "--time-dilation", "4",
              "--allow-invalid", "--out", str(out), "--pcap", "hosts,spine1",
              check=False, timeout=300)  # fmt: skip
    assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "pcap: " in proc.stdout + proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    cap = summary["transports"]["mrc"]["capture"]
    virtual_s = summary["emulation"]["virtual_s"]
    t0 = cap["t0_virtual_s"]
    assert cap["direction"] == "both" and cap["snaplen"] == 128
    ports = {f["port"] for f in cap["files"]}
    assert {p.split(":")[0] for p in ports} == {"leaf1", "leaf2", "spine1"}
    assert len([p for p in ports if p.startswith("spine1:")]) == 2  # one per leaf
    assert "Packet captures" in (out / "report.md").read_text()
    counters = json.loads((out / "raw/mrc/switch_counters.json").read_text())
    # The runner records each switch's CPU at the workload's start (bench capacity subtracts
    # it); the switches forwarded a workload since, in user and kernel time.
    for c in counters.values():
        assert 0.0 < c["cpu_s_at_go"] < c["cpu_s"], c
        assert 0.0 <= c["cpu_sys_s_at_go"] <= c["cpu_sys_s"] < c["cpu_s"], c
    data_frames = 0
    for f in cap["files"]:
        path = out / f["file"]
        pkts = rdpcap(str(path))
        assert len(pkts) == f["written"] and f["not_written"] == 0, f
        # Every frame the port's counters saw while captured, in both directions.
        assert f["written"] == f["tx_packets"] + f["rx_packets"], f
        sw, port = f["port"].split(":")
        end = counters[sw]["ports"][port]
        assert f["tx_packets"] <= end["tx_packets"] and f["rx_packets"] <= end["rx_packets"]
        assert all(len(p) <= 128 for p in pkts)
        times = [float(p.time) for p in pkts]
        assert times == sorted(times), f"{path.name}: timestamps go backwards"
        data = [float(p.time) for p in pkts if UDP in p and p[UDP].dport == 4791]
        data_frames += len(data)
        if data:
            # Virtual time from the run's t = 0: a real-time stamp would be 4x too large.
            assert t0 - 1.0 <= data[0] and data[-1] <= t0 + virtual_s + 1.0, (data[0], t0)
            if sw == "leaf1" or sw == "leaf2":
                assert data[-1] - data[0] >= 0.5 * virtual_s, (data[0], data[-1], virtual_s)
    assert data_frames > 1000
    # tshark with the dissector decodes the MRC headers of a link wired in memory.
    spine = next(out / f["file"] for f in cap["files"] if f["port"].startswith("spine1:")
                 and f["written"] > 100)  # fmt: skip
    run = subprocess.run(
        ["tshark", "-X", f"lua_script:{DISSECTOR}", "-r", str(spine), "-Y", "mrc.data.present",
         "-T", "fields", "-E", "separator=|", "-e", "mrc.bth.psn", "-e", "mrc.data.ev",
         "-e", "mrc.data.payload_len", "-e", "frame.len", "-e", "frame.cap_len",
         "-e", "mrc.trimmed"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    rows = [line.split("|") for line in run.stdout.strip().splitlines()]
    assert len(rows) > 100
    trims = summary["transports"]["mrc"]["trims"]
    for psn, ev, payload_len, wire, kept, trimmed in rows:
        assert psn and ev and int(payload_len) > 0
        assert int(kept) == min(int(wire), 128)
        # The snaplen cut the payload, not a switch: only a trimmed packet says trimmed.
        assert trimmed in ("False", "0") or trims > 0, trimmed
    assert len({r[1] for r in rows}) > 1  # sprayed over several EVs

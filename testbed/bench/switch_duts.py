"""The devices under test of `testbed bench switch`: what forwards d0 -> d1 in the DUT namespace.

Each DUT is started fresh for each measurement and stopped after it, and says how to read its
own CPU time and drops (testbed.bench.switch_bench's docstring lists them):

- `SwitchDut`  the switch (`python -m switch`) with a hand-built 2-port configuration;
- `PythonDut`  the repeater and the naive scapy forwarder (testbed.bench.baseline_forwarders);
- `BridgeDut`  a Linux bridge: softirq work, so its CPU is the DUT core's kernel time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from contracts import defaults
from switch.config import FibConfig, PortConfig, SwitchConfig
from switch.control import request
from testbed.bench.switch_bed import (
    DUT0_MAC,
    DUT1_MAC,
    DUT_IN,
    DUT_OUT,
    GEN_MAC,
    KERNEL_COLUMNS,
    SINK_MAC,
    Bed,
    proc_stat_ns,
    process_rss_mb,
    run_cmd,
    schedstat,
)

LINE_RATE_MBPS = 100_000.0  # "shaped at a rate that never binds"
QUEUE_KB = defaults.QUEUE_KB  # the fabric's default data queue per port


class Dut:
    name = ""
    dst_mac = DUT0_MAC  # where the generator addresses its frames
    proc: subprocess.Popen | None = None

    def start(self, bed: Bed) -> None:
        raise NotImplementedError

    def stop(self, bed: Bed) -> dict:
        """Stop; returns {"dut_drops": frames the DUT's own kernel socket dropped, ...}."""
        raise NotImplementedError

    def rss_mb(self) -> float:
        return process_rss_mb(self.proc.pid) if self.proc is not None else 0.0

    def cpu(self, bed: Bed) -> tuple[int, int]:
        """(ns of CPU the DUT used, ns it waited for a CPU), cumulative."""
        return schedstat(self.proc.pid) if self.proc is not None else (0, 0)


class SwitchDut(Dut):
    def __init__(
        self,
        name: str,
        rate_mbps: float,
        in_rate_mbps: float | None = None,
        queue_kb: float = QUEUE_KB,
    ) -> None:
        self.name = name
        self.rate_mbps = rate_mbps
        self.in_rate_mbps = rate_mbps if in_rate_mbps is None else in_rate_mbps
        self.queue_kb = queue_kb
        self.control = ""

    def config(self):

        q = self.queue_kb
        return SwitchConfig(
            name="dut",
            router_ip="10.9.9.9",
            seed=1,
            ports=[
                PortConfig(DUT_IN, DUT0_MAC, GEN_MAC, "gen", self.in_rate_mbps, 0.0, q, q / 2),
                PortConfig(DUT_OUT, DUT1_MAC, SINK_MAC, "sink", self.rate_mbps, 0.0, q, q / 2),
            ],
            fib=[FibConfig("10.1.2.0/24", [(DUT_OUT, SINK_MAC)]), FibConfig("10.9.9.9/32", [])],
            trimming=True,
        )

    def start(self, bed: Bed) -> None:
        cfg = bed.dir / f"{self.name}.json"
        cfg.write_text(self.config().to_json())
        self.control = str(bed.dir / f"{self.name}.sock")
        argv = [
            os.environ.get("TESTBED_SWITCH_PYTHON", sys.executable),
            "-m",
            "switch",
            "--config",
            str(cfg),
            "--control",
            self.control,
        ]
        self.proc = bed.spawn("dut", argv, bed.dut_cpu, self.name)
        bed.wait_line(self.proc, "forwarding on")

    def counters(self) -> dict:

        return request(self.control, {"op": "counters"}, timeout=5.0)["counters"]

    def stop(self, bed: Bed) -> dict:
        info: dict = {}
        try:
            c = self.counters()
            info = {
                "dut_drops": c["kernel_drops"],
                "queue_drops": sum(sum(p["drops"].values()) for p in c["ports"].values()),
                "trims": sum(p["trims"] for p in c["ports"].values()),
                "tx_packets": c["ports"][DUT_OUT]["tx_packets"],
                "vector_frames": c["vector_frames"],
                "vector_bursts": c["vector_bursts"],
            }
        except Exception as exc:  # noqa: BLE001 - reported, the bench goes on
            info = {"error": str(exc)}
        bed.stop(self.proc)
        self.proc = None
        return info


class PythonDut(Dut):
    """The repeater and the naive scapy forwarder: this module run as a script in the DUT."""

    def __init__(self, name: str) -> None:
        self.name = name

    def start(self, bed: Bed) -> None:
        argv = [
            sys.executable,
            "-m",
            "testbed.bench.switch_bench",
            self.name,
            DUT_IN,
            DUT_OUT,
            DUT1_MAC,
            SINK_MAC,
        ]
        self.proc = bed.spawn("dut", argv, bed.dut_cpu, self.name)
        bed.wait_line(self.proc, "ready", timeout=30.0)

    def stop(self, bed: Bed) -> dict:
        out = bed.stop(self.proc)
        self.proc = None
        for line in reversed(out.splitlines()):
            if line.startswith("{"):
                return json.loads(line)
        return {"error": "no statistics printed"}


class BridgeDut(Dut):
    name = "kernel_bridge"
    dst_mac = SINK_MAC  # a bridge forwards by destination MAC: address the sink

    def start(self, bed: Bed) -> None:
        d = bed.ns["dut"]
        run_cmd(
            "ip",
            "-n",
            d,
            "link",
            "add",
            "br0",
            "type",
            "bridge",
            "stp_state",
            "0",
            "forward_delay",
            "0",
        )
        for ifname in (DUT_IN, DUT_OUT):
            run_cmd("ip", "-n", d, "link", "set", ifname, "master", "br0")
        run_cmd("ip", "-n", d, "link", "set", "br0", "up")
        run_cmd("bridge", "-n", d, "fdb", "add", SINK_MAC, "dev", DUT_OUT, "master", "static")
        # The bridge forwards in softirq context; steer d0's receive work to the DUT's core
        # (else it would run on the generator's core, inside its send calls).
        bed.set_rps("dut", DUT_IN, bed.dut_cpu)
        _, self.before = bed.link_stats("dut")

    def stop(self, bed: Bed) -> dict:
        _, after = bed.link_stats("dut")
        bed.set_rps("dut", DUT_IN, None)
        run_cmd("ip", "-n", bed.ns["dut"], "link", "del", "br0", check=False)
        # d0's rx_dropped is g0's tx_dropped (the input backlog was full): counted as wire drops.
        return {"dut_drops": after[DUT_OUT]["tx_dropped"] - self.before[DUT_OUT]["tx_dropped"]}

    def cpu(self, bed: Bed) -> tuple[int, int]:
        # Softirq work is nobody's process: count the DUT core's kernel time (10 ms ticks).
        return proc_stat_ns([bed.dut_cpu], KERNEL_COLUMNS), 0


def make_dut(name: str) -> Dut:
    if name == "switch":
        return SwitchDut("switch", LINE_RATE_MBPS)
    if name == "switch_unshaped":
        return SwitchDut("switch_unshaped", 0.0)
    if name in ("repeater", "scapy_naive"):
        return PythonDut(name)
    if name == "kernel_bridge":
        return BridgeDut()
    raise ValueError(name)

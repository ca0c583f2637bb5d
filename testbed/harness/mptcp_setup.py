"""MPTCP set-up of a kernel baseline's hosts, and the monitors that count subflows.

MPTCP set-up, in every host of the workload: ``net.mptcp.enabled=1`` and
``ip mptcp limits set subflows 8 add_addr_accepted 8``. The client (the flow's destination, which
opens the connection) opens a subflow to every address the server announces, so the endpoints
go on the *server* (flow source) hosts:

* single plane: ``ip mptcp endpoint add <address> port <7001+j> signal`` for j < 3 (port-based
  signal endpoints, kernel >= 5.12; the kernel listens on those ports itself; a port still held
  by TIME_WAIT subflows of an earlier run in the namespace is skipped), so the client opens three
  more subflows to other destination ports. Measured with ``ip mptcp monitor``: **4 subflows**
  per connection (four 5-tuples that ECMP hashes independently) when the client host is not
  itself a server (bulk, incast); **6-7** when it is (permutation, all-to-all, all-reduce), since
  each side then opens subflows to the ports the other announced. Limits of 3 do not make that
  4: both sides race for the last slots and the loser's subflow is closed again (3-5 seen).
* multi-plane: ``ip mptcp endpoint add <plane-k address> dev <plane-k NIC> signal`` for every plane
  k > 1: **one subflow per plane** (measured with planes=2: 2 subflows, also for hosts with both
  roles, the bytes split ~50/50 between the two NICs, 33.5 Mbps over two 20 Mbps planes).
  ``subflow`` endpoints on the client do not work here: the kernel opens them towards the
  server's plane-1 address, which has no route out of a plane-k NIC (measured: no subflow, every
  byte on plane 1).

The subflows of each flow's data connection are counted from ``ip mptcp monitor`` in the client
hosts: ``details["flows"][i]["subflows"]`` and ``details["subflows"]`` (min/max). The iperf3
control connection is MPTCP as well and gets subflows of its own.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from testbed.harness.errors import BaselineError
from testbed.harness.owned_processes import Child
from testbed.scenario import Flow
from topologies import Fabric

SIGNAL_PORT_BASE = 7001
MPTCP_EXTRA_PORTS = 3  # single plane: subflows per connection = 1 + this
MONITOR_TIMEOUT_S = 10.0  # a monitor that has not become `ip` by then did not start


def announce_endpoints(
    run: Callable[..., str],
    ns: Callable[..., list[str]],
    fabric: Fabric,
    hosts: Sequence[str],
    flows: Sequence[Flow],
    planes: int,
) -> dict[str, list[str]]:
    """MPTCP on in every host, then the endpoints each server host announces; returns them.

    `run(host, *cmd)` runs a command in a host (raising BaselineError if it fails) and
    `ns(host, *cmd)` is the argv that would; `flows` are the baseline's flows (their sources
    are the servers)."""
    servers = {f.src for f in flows}
    # A host that is a server of one flow and a client of another announces its endpoints on
    # both connections, and each side then opens subflows to what the other announced: 7
    # subflows instead of 4 on one plane. Tighter limits do not give 4: both sides race for
    # the last slots and the loser's subflow is closed again (measured: 3 to 5).
    for host in hosts:
        run(host, "sysctl", "-q", "-w", "net.mptcp.enabled=1")
        limits = ["subflows", "8", "add_addr_accepted", "8"]
        run(host, "ip", "mptcp", "limits", "set", *limits)
        run(host, "ip", "mptcp", "endpoint", "flush")
    endpoints: dict[str, list[str]] = {}
    for host in sorted(servers):
        if planes > 1:
            for intf in fabric.interfaces[host]:
                if intf.plane > 1 and intf.ip:
                    run(
                        host,
                        "ip",
                        "mptcp",
                        "endpoint",
                        "add",
                        intf.ip,
                        "dev",
                        intf.name,
                        "signal",
                    )
                    endpoints.setdefault(host, []).append(f"{intf.ip} dev {intf.name} signal")
        else:
            ip = fabric.host_ip(host, 1)
            port = SIGNAL_PORT_BASE
            while len(endpoints.get(host, ())) < MPTCP_EXTRA_PORTS:
                # The kernel listens on a signal port itself; a port still held by TIME_WAIT
                # subflows of an earlier run in this namespace is refused (EADDRINUSE).
                add = ["ip", "mptcp", "endpoint", "add", ip, "port", str(port), "signal"]
                proc = subprocess.run(ns(host, *add), capture_output=True, text=True)
                if proc.returncode == 0:
                    endpoints.setdefault(host, []).append(f"{ip} port {port} signal")
                elif "-98" not in proc.stderr or port >= SIGNAL_PORT_BASE + 100:
                    raise BaselineError(f"{host}: {' '.join(add)} failed: {proc.stderr.strip()}")
                port += 1
    return endpoints


def start_monitors(
    ns: Callable[..., list[str]],
    clients: Sequence[str],
    workdir: Path,
    monitors: dict[str, Child],
) -> None:
    """An ``ip mptcp monitor`` in each client host, returning once each has subscribed.

    Each is added to `monitors` as soon as it is started, so that the caller's `stop` ends
    it even if a later one fails to start."""
    for host in clients:
        monitors[host] = Child(
            ns(host, "ip", "mptcp", "monitor"),
            workdir / f"mptcp-monitor-{host}.txt",
            workdir / f"mptcp-monitor-{host}.err",
        )
    # A monitor misses what happens before it subscribes: wait until each has become `ip`
    # (mnexec has entered the namespace and exec'd it), then give it a moment to subscribe.
    until = time.monotonic() + MONITOR_TIMEOUT_S
    for host, mon in monitors.items():
        while True:
            try:
                exe = Path(f"/proc/{mon.pid}/exe").readlink().name
            except OSError:
                exe = ""
            if exe == "ip":
                break
            if not mon.running or time.monotonic() >= until:
                raise BaselineError(f"{host}: ip mptcp monitor did not start")
            time.sleep(0.002)
    time.sleep(0.02)

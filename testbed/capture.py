"""`testbed capture`: packets from a running fabric, as a pcap or decoded by the MRC dissector.

Why a command of its own: a fabric's ports live in anonymous namespaces, a switch of the shared
process carries its links to other switches in memory (switch/local_links.py: their veths stay
silent), and tshark mislabels the MRC extension headers unless it loads the project's
dissector (endpoint/mrc.lua). This module knows all three: it runs tshark inside the node's
namespace on the right interfaces, refuses a port whose frames never cross its veth, and hands
tshark the dissector.

Pure except `capture`, which runs tshark.
"""

from __future__ import annotations

from pathlib import Path

import endpoint
from testbed.fabric.state import RUN_ROOT
from topologies import Fabric as Topology

DISSECTOR = str(Path(endpoint.__file__).resolve().parent / "mrc.lua")
"""The Wireshark Lua dissector of the wire format (docs/wire-format.md)."""


class CaptureError(ValueError):
    """The node or port cannot be captured; the message says why, in one line."""


def ports_to_capture(topo: Topology, node: str, port: str | None) -> list[str]:
    """The interfaces of `node` to capture on: `port`, else all of the node's."""
    if node not in topo.nodes:
        raise CaptureError(f"node: no node {node!r} in this fabric")
    names = [i.name for i in topo.interfaces[node]]
    if port is None:
        return names
    if port not in names:
        raise CaptureError(f"port: {node} has no port {port!r} (it has {', '.join(names)})")
    return [port]


def wired_in_memory(log_text: str, switch: str) -> int:
    """How many of `switch`'s ports its (shared) process wires in memory, from its start line
    in the switches' log ("switch leaf1: forwarding on 4 ports, 2 of them wired in memory")."""
    for line in log_text.splitlines():
        if line.startswith(f"switch {switch}: forwarding on ") and "wired in memory" in line:
            return int(line.split(", ", 1)[1].split(" of them", 1)[0])
    return 0


def silent_ports(topo: Topology, node: str, ports: list[str], log_text: str) -> list[str]:
    """Those of `ports` whose frames never cross the veth: links between two switches, when
    the node's process wires its links to other switches in memory."""
    if topo.nodes[node].kind == "host" or not wired_in_memory(log_text, node):
        return []
    to_switch = {i.name for i in topo.interfaces[node] if topo.nodes[i.peer_node].kind != "host"}
    return [p for p in ports if p in to_switch]


def tshark_argv(
    ports: list[str],
    write: str | None,
    duration_s: float | None,
    count: int | None,
    bpf: str | None,
) -> list[str]:
    """tshark's command line: write a pcap (`write`) or print each packet, decoded."""
    argv = ["tshark", "-q"] if write else ["tshark", "-X", f"lua_script:{DISSECTOR}"]
    for p in ports:
        argv += ["-i", p]
    if write:
        argv += ["-w", write]
    if duration_s is not None:
        argv += ["-a", f"duration:{duration_s:g}"]
    if count is not None:
        argv += ["-c", str(count)]
    if bpf:
        argv += ["-f", bpf]
    return argv


def decode_hint(pcap: str) -> str:
    return f"decode it: tshark -X lua_script:{DISSECTOR} -r {pcap} -O mrc   (or wireshark -X ...)"


def capture(
    fabric: str,
    node: str,
    port: str | None = None,
    write: str | None = None,
    duration_s: float | None = None,
    count: int | None = None,
    bpf: str | None = None,
) -> int:
    """Capture on a running fabric's node; tshark's exit status."""
    from testbed.fabric.session import Fabric  # the running fabric: needs root, state on disk

    fab = Fabric.attach(fabric)
    topo = fab.description
    ports = ports_to_capture(topo, node, port)
    log = RUN_ROOT / fabric / "switches" / "switches.log"
    silent = silent_ports(topo, node, ports, log.read_text() if log.exists() else "")
    if silent and len(silent) == len(ports):
        raise CaptureError(
            f"port: {', '.join(silent)} link{'s' if len(silent) > 1 else ''} {node} to another "
            "switch of the shared switch process, which carries them in memory; capture a host "
            "port, or bring the fabric up with TESTBED_SWITCH_LOCAL_LINKS=0"
        )
    ports = [p for p in ports if p not in silent]
    if write:
        Path(write).parent.mkdir(parents=True, exist_ok=True)
    argv = tshark_argv(ports, str(Path(write).resolve()) if write else None, duration_s, count, bpf)
    proc = fab.popen(node, argv)
    try:
        rc = proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        rc = proc.wait()
    if write:
        print(decode_hint(write))
    return rc


__all__ = ["DISSECTOR", "CaptureError", "capture", "decode_hint", "ports_to_capture", "tshark_argv"]

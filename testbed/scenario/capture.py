"""Which switch ports a run captures: `capture.ports` (or `--pcap`) resolved on the fabric.

Pure: names in, {switch: [port, ...]} out, or a one-line error naming the entry. An entry is
`SWITCH:PORT` (one port), `SWITCH` (every port of that switch) or `hosts` (every leaf port
that faces a host: what the hosts send and receive). The switches write the files themselves,
with virtual timestamps (switch/capture.py); testbed/fabric/pcap.py starts and stops them.
"""

from __future__ import annotations

from collections.abc import Sequence

from topologies import Fabric

HOSTS = "hosts"


def capture_ports(fabric: Fabric, entries: Sequence[str], key: str) -> dict[str, list[str]]:
    """{switch: its ports to capture, in the fabric's order}; ValueError `key[i]: reason`."""
    switches = fabric.switches()
    chosen: dict[str, set[str]] = {}
    for i, entry in enumerate(entries):
        where = f"{key}[{i}]"
        if not isinstance(entry, str) or not entry:
            raise ValueError(f"{where}: expected SWITCH, SWITCH:PORT or {HOSTS}, got {entry!r}")
        if entry == HOSTS:
            for sw in switches:
                for intf in fabric.interfaces[sw]:
                    if fabric.nodes[intf.peer_node].kind == "host":
                        chosen.setdefault(sw, set()).add(intf.name)
            continue
        node, _, port = entry.partition(":")
        if node not in switches:
            hint = (
                " (a host's traffic: its leaf's port, or `hosts`)" if node in fabric.nodes else ""
            )
            raise ValueError(
                f"{where}: no switch {node!r} in this fabric{hint}; switches: "
                + ", ".join(switches)
            )
        ports = [intf.name for intf in fabric.interfaces[node]]
        if not port:
            chosen.setdefault(node, set()).update(ports)
        elif port not in ports:
            raise ValueError(f"{where}: {node} has no port {port!r}; its ports: {', '.join(ports)}")
        else:
            chosen.setdefault(node, set()).add(port)
    return {
        sw: [i.name for i in fabric.interfaces[sw] if i.name in chosen[sw]]
        for sw in switches
        if sw in chosen
    }


def parse_pcap_arg(text: str) -> list[str]:
    """`--pcap leaf1:leaf1-eth3,spine1` -> its entries (validated by `capture_ports`)."""
    entries = [e.strip() for e in text.split(",")]
    if not text.strip() or any(not e for e in entries):
        raise ValueError(
            f"--pcap: expected SWITCH[:PORT] or {HOSTS}, comma-separated, got {text!r}"
        )
    return entries

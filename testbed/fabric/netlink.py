"""Configures one node's network namespace through netlink (pyroute2), from the builder's process.

Why netlink rather than `ip`, `tc`, `ethtool` and `sysctl` typed into the node's shell: a failure
is an exception carrying its errno (pyroute2's NetlinkError, OSError) at the request that failed,
not a string to search after a chain of commands; and no program is started per command.

Mininet's nodes are anonymous namespaces (no name under /var/run/netns), reachable only as
/proc/PID/ns/net. `node_netlink(pid)` moves the calling thread into one (setns affects that
thread alone), opens its sockets there -- a socket stays in the namespace it was created in, and
/proc/sys/net shows the namespace of the thread that opens it -- and moves back at once.
pyroute2's own `IPRoute(netns=PATH)` gets there by forking a helper per socket instead, which is
slower for the ~30 namespaces of a fabric and buys nothing here.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator
from contextlib import contextmanager
from functools import wraps
from pathlib import Path

from pyroute2 import Ethtool, IPRoute, NetlinkError

from contracts.framing import DEFAULT_MTU, max_frame_bytes
from contracts.netns import Netns

# What ethtool(8) turns off for `-K DEV tso off gso off gro off tx off rx off sg off`: each short
# name stands for the kernel features it matches (ethtool's common.c, off_flag_def).
OFFLOAD_FEATURES = {
    "tso": "tx-tcp*-segmentation",
    "gso": "tx-generic-segmentation",
    "gro": "rx-gro",
    "tx": "tx-checksum-*",
    "rx": "rx-checksum",
    "sg": "tx-scatter-gather*",
}
RTPROT_BOOT = 3  # what iproute2 marks the routes it adds with; pyroute2 would say "static"
RTNH_F_ONLINK = 4  # the gateway is on the link even though no address of ours covers it
TC_H_ROOT = 0xFFFFFFFF
HOST_QUEUE_FRAMES = 64  # the least a host NIC's queue holds, whatever the rate (set_rate)
TBF_MAX_RATE_BPS = 2**32 - 1  # pyroute2's tbf has no 64-bit rate attribute (34.4 Gbit/s)


class NamespaceError(OSError):
    """A request to a node's namespace failed. `errno` is the kernel's; the message names the
    node and the request, e.g. "[Errno 17] h1: add_route 10.1.0.0/16 10.1.1.254 h1-eth0: File
    exists"."""


def _request(method):
    """Name the node and the request in a failure, keeping the kernel's errno."""

    @wraps(method)
    def run(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except NetlinkError as exc:
            code, msg = exc.code, exc.args[1] if len(exc.args) > 1 else str(exc)
        except NamespaceError:
            raise
        except OSError as exc:
            code, msg = exc.errno, exc.strerror or str(exc)
        what = " ".join([method.__name__, *map(str, args)])
        raise NamespaceError(code, f"{self.node}: {what}: {msg}")

    return run


class NodeNetlink:
    """The requests the fabric makes of one namespace, on sockets opened inside it."""

    def __init__(self, ipr: IPRoute, eth: Ethtool, node: str) -> None:
        self.ipr = ipr
        self.eth = eth
        self.node = node  # for messages
        self._index: dict[str, int] = {}

    def index(self, ifname: str) -> int:
        if ifname not in self._index:
            found = self.ipr.link_lookup(ifname=ifname)
            if not found:
                raise NetlinkError(19, f"no interface {ifname}")  # ENODEV
            self._index[ifname] = found[0]
        return self._index[ifname]

    @_request
    def sysctl(self, key: str, value: int) -> None:
        """Write a /proc/sys/net value of this namespace (the calling thread is inside it)."""
        Path("/proc/sys", *key.split(".")).write_text(f"{value}\n")

    @_request
    def link_up(self, ifname: str) -> None:
        self.ipr.link("set", index=self.index(ifname), state="up")

    @_request
    def set_mtu(self, ifname: str, mtu: int) -> None:
        """The fabric's MTU on this end of a veth (each end has its own; a veth drops what is
        larger than its peer's MTU, so both ends of every link get the same value)."""
        self.ipr.link("set", index=self.index(ifname), mtu=mtu)

    @_request
    def offloads_off(self, ifname: str) -> None:
        """Otherwise AF_PACKET sees 64 KB GSO frames and forwarding breaks."""
        features = self.eth.get_features(ifname)
        for pattern in OFFLOAD_FEATURES.values():
            for name, feature in features.features.items():
                if feature.available and fnmatch.fnmatchcase(name, pattern):
                    feature.enable = False
        self.eth.set_features(ifname, features)

    @_request
    def add_address(self, ifname: str, ip: str, prefixlen: int) -> None:
        self.ipr.addr("add", index=self.index(ifname), address=ip, prefixlen=prefixlen)

    @_request
    def addresses(self) -> set[str]:
        return {msg.get("IFA_ADDRESS") for msg in self.ipr.addr("dump", family=2)}

    @_request
    def add_route(self, prefix: str, via: str | None, ifname: str, onlink: bool = False) -> None:
        """One next hop; no `via` makes a device route (the destination is on that link)."""
        spec = {"dst": prefix, "oif": self.index(ifname), "proto": RTPROT_BOOT}
        if via is not None:
            spec["gateway"] = via
            if onlink:
                spec["flags"] = RTNH_F_ONLINK
        self.ipr.route("add", **spec)

    @_request
    def add_multipath_route(self, prefix: str, hops: list[tuple[str, str]]) -> None:
        """An ECMP group: (gateway, interface) pairs, each gateway on-link on its interface."""
        self.ipr.route(
            "add",
            dst=prefix,
            proto=RTPROT_BOOT,
            multipath=[
                {"gateway": via, "oif": self.index(dev), "flags": RTNH_F_ONLINK}
                for via, dev in hops
            ],
        )

    @_request
    def set_neighbour(self, ip: str, mac: str, ifname: str) -> None:
        self.ipr.neigh("replace", dst=ip, lladdr=mac, ifindex=self.index(ifname), state="permanent")

    @_request
    def set_rate(self, ifname: str, mbps: float, mtu: int = DEFAULT_MTU) -> None:
        """The host NIC's line rate: a token bucket whose queue back-pressures the host stack.

        Switch ports are shaped by the switch itself; a host has no switch, so its egress is
        limited in its own kernel, like a NIC that cannot send faster than its link. The bucket
        holds ~200 us of line rate, at least 2 full frames of `mtu` (tbf drops a frame larger
        than its bucket). Its queue holds 50 ms of line rate, and at least HOST_QUEUE_FRAMES
        full frames: under time dilation `mbps` is the real rate (link / N), and 50 ms of
        62.5 kbit/s (10 Mbps at N = 160) is not one frame, so a sender's burst of a few frames
        (a coalesced ACK opens the window by four) was dropped by the host's own kernel -- the
        emulator's loss, not the network's. A NIC's tx ring holds hundreds of frames.
        """
        rate = min(int(mbps * 1e6 / 8), TBF_MAX_RATE_BPS)  # no host here sends 34 Gbit/s
        frame = max_frame_bytes(mtu)
        burst = max(2 * frame, int(mbps * 1e6 / 8 * 0.0002))
        limit = max(int(rate * 0.05), HOST_QUEUE_FRAMES * frame)
        self.ipr.tc("replace", "tbf", self.index(ifname), rate=rate, burst=burst, limit=limit)

    @_request
    def qdisc_counters(self, ifname: str) -> dict:
        """Packets sent and packets dropped by the root qdisc (the host's own kernel)."""
        for msg in self.ipr.get_qdiscs(index=self.index(ifname)):
            if msg["parent"] != TC_H_ROOT:
                continue
            stats = msg.get("TCA_STATS2")
            basic = stats.get("TCA_STATS_BASIC") if stats else None
            queue = stats.get("TCA_STATS_QUEUE") if stats else None
            if basic is None or queue is None:
                old = msg.get("TCA_STATS")
                return {"tx_packets": old["packets"], "qdisc_drops": old["drop"]}
            return {"tx_packets": basic["packets"], "qdisc_drops": queue["drops"]}
        raise NetlinkError(2, f"no root qdisc on {ifname}")  # ENOENT


@contextmanager
def node_netlink(pid: int, node: str) -> Iterator[NodeNetlink]:
    """Netlink, SIOCETHTOOL and /proc/sys/net of the namespace of process `pid` (Mininet node
    `node`), for the body; the calling thread is back in its own namespace after."""
    try:
        ns = Netns(f"/proc/{pid}/ns/net")
    except OSError as exc:
        raise NamespaceError(exc.errno, f"{node}: namespace of pid {pid}: {exc.strerror}") from None
    with ns, ns.entered(), IPRoute() as ipr, Ethtool() as eth:
        yield NodeNetlink(ipr, eth, node)

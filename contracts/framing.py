"""Bytes around the application's data: what a link carries beyond the payload, at any MTU.

Rates in this project are rates of frames (the switches shape and the hosts pace frame bytes),
so every conversion between goodput and link rate needs these numbers; with one definition the
pacer, the simulated bottleneck and the benches' "ideal" lines cannot drift apart.

The MTU (`topology.mtu`, an IP MTU as Linux sets it on an interface) fixes the rest: the
largest frame (MTU + 14), the largest data payload an MRC packet carries (MTU - 80) and so the
share of a link that can be goodput. Fewer, larger packets are how hardware carries bytes, and
each packet costs the emulator the same, so the MTU is also what a byte costs the emulator.
"""

from __future__ import annotations

ETH_HEADER_LEN = 14
IPV4_HEADER_LEN = 20  # no options: neither the endpoints nor the switches send any
UDP_HEADER_LEN = 8
FRAME_OVERHEAD = ETH_HEADER_LEN + IPV4_HEADER_LEN + UDP_HEADER_LEN
"""Frame bytes around a UDP payload (42; no FCS or preamble, as the kernel and tc count)."""

BTH_LEN = 12
"""InfiniBand base transport header, first in every MRC-style packet (``endpoint.wire.BTH``)."""
DATA_EXT_LEN = 40
"""The MRC data extension after the BTH of a data packet (``endpoint.wire.MRCData``)."""
DATA_OVERHEAD = BTH_LEN + DATA_EXT_LEN
"""UDP payload bytes of a data packet that are not message data (52)."""

DEFAULT_MTU = 1500
"""IP MTU of every interface of a fabric unless `topology.mtu` says otherwise (Ethernet's)."""
MIN_MTU = 1280
"""Smallest `topology.mtu`: the smallest MTU IPv6 lets any link have (RFC 8200), below anything
a datacenter fabric runs; smaller packets would only make the emulator spend more per byte."""
MAX_MTU = 9000
"""Largest `topology.mtu`: the jumbo MTU that NICs and switches commonly support (RoCE's 4096 B
payload fits). A switch's ring slot then takes 9216 B (switch.ring.frame_size_for)."""

WIRE_EXTRA = 4 + 8 + 12
"""What a physical Ethernet link spends per frame beyond what this project counts: FCS (4),
preamble and start delimiter (8), inter-frame gap (12). The emulation's links (veth, tc, the
switches' shapers) carry and count none of it."""


def check_mtu(mtu: object) -> str | None:
    """None if `mtu` is a valid MTU, else the reason (``mtu: ...``), as every input reports it."""
    if isinstance(mtu, bool) or not isinstance(mtu, int):
        return f"mtu: must be an integer, got {mtu!r}"
    if not MIN_MTU <= mtu <= MAX_MTU:
        return f"mtu: must be between {MIN_MTU} and {MAX_MTU}, got {mtu}"
    return None


def max_frame_bytes(mtu: int = DEFAULT_MTU) -> int:
    """Largest frame an interface of this MTU sends or receives (1514 at 1500; no FCS)."""
    return mtu + ETH_HEADER_LEN


def mrc_payload(mtu: int = DEFAULT_MTU) -> int:
    """Message bytes in a full MRC data packet: the MTU less IPv4, UDP, BTH and the data
    extension (1420 at 1500, 8920 at 9000). The endpoints' segment size (`max_payload`)."""
    return mtu - IPV4_HEADER_LEN - UDP_HEADER_LEN - DATA_OVERHEAD


def goodput_ceiling(mtu: int = DEFAULT_MTU, *, physical: bool = False) -> float:
    """The share of a link's rate that MRC data can be, in full packets: the header overhead
    ceiling, i.e. payload / frame bytes (0.938 at 1500, 0.990 at 9000).

    As this project counts (`physical=False`): frame bytes without FCS, preamble and gap, which
    is what the emulated links shape, so a transfer on the fabric can reach exactly this share.
    `physical=True` adds `WIRE_EXTRA`, for comparison with a real Ethernet link or a simulator
    that charges it (0.923 at 1500, 0.987 at 9000; htsim's NDP: 1500 / 1692 = 0.886).
    ACKs on the reverse path are not counted: they share no direction with the data.
    """
    wire = max_frame_bytes(mtu) + (WIRE_EXTRA if physical else 0)
    return mrc_payload(mtu) / wire

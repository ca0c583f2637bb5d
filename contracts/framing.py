"""Bytes around the application's data: what a link carries beyond the payload.

Rates in this project are rates of frames (the switches shape and the hosts pace frame bytes),
so every conversion between goodput and link rate needs these numbers; with one definition the
pacer, the simulated bottleneck and the benches' "ideal" lines cannot drift apart.
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

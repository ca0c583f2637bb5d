"""The UDP port of the transport, one number that switches, endpoints and tools must agree on.

The MRC-style packets are RoCEv2 packets (UDP / BTH), so they use RoCEv2's IANA port: tshark's
InfiniBand dissector then decodes captures without a hint, and the switches' ECMP hash sees the
same 5-tuple the endpoints chose. A different port here and not in one of them would silently
split the fabric into two protocols.
"""

from __future__ import annotations

ROCEV2_UDP_PORT = 4791
"""Destination port of every data and control packet (IANA "roce")."""

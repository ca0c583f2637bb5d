"""The scapy model of what the fast path does to a frame.

scapy is the switch's definition of the formats and its tooling, not its per-packet parser
(~10x slower). Each function here rebuilds the packet with scapy and lets scapy compute lengths
and checksums from scratch; tests assert that `switch.frames` produces the same bytes.
"""

from __future__ import annotations

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw


def forward(frame: bytes, dst_mac: str, src_mac: str) -> bytes:
    """TTL - 1, checksum recomputed, MACs rewritten."""
    pkt = Ether(frame)
    pkt[Ether].dst = dst_mac
    pkt[Ether].src = src_mac
    pkt[IP].ttl -= 1
    del pkt[IP].chksum
    return bytes(pkt)


def mark_ce(frame: bytes) -> bytes:
    pkt = Ether(frame)
    if pkt[IP].tos & 3 in (1, 2):
        pkt[IP].tos |= 3
        del pkt[IP].chksum
    return bytes(pkt)


def trim(frame: bytes, trim_bytes: int, trimmed_dscp: int) -> bytes:
    """Cut the frame to `trim_bytes`, re-mark DSCP, fix IP/UDP lengths, zero the UDP checksum."""
    pkt = Ether(frame)
    ip = pkt[IP]
    keep = max(0, min(len(frame), trim_bytes, 14 + ip.len) - 14 - 20 - 8)
    payload = bytes(ip[UDP].payload)[:keep]
    out = (
        Ether(dst=pkt.dst, src=pkt.src)
        / IP(
            version=4,
            ihl=5,
            tos=(trimmed_dscp << 2) | (ip.tos & 3),
            id=ip.id,
            flags=ip.flags,
            frag=ip.frag,
            ttl=ip.ttl,
            proto=ip.proto,
            src=ip.src,
            dst=ip.dst,
        )
        / UDP(sport=ip[UDP].sport, dport=ip[UDP].dport, chksum=0)
        / Raw(payload)
    )
    return bytes(out)


def summarize(frame: bytes) -> str:
    """One-line dissection for the switch's debug log."""
    try:
        import endpoint.wire  # noqa: F401 - binds the MRC-style layers to UDP 4791 if present
    except ImportError:
        pass
    try:
        return Ether(frame).summary()
    except Exception as exc:  # noqa: BLE001 - debugging must not crash on garbage
        return f"undecodable frame ({len(frame)} B): {exc}"

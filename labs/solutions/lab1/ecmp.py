"""Lab 1 (solution): predict which spine a flow takes, as the leaf's ECMP hash does.

A leaf holds one ECMP group per remote leaf: `testbed fib leaf1` lists it (next hops spine1,
spine2, spine3, in that order) together with the leaf's hash seed. Everything the switch decides
is a pure function of the packet's 5-tuple and that seed, so an endpoint that knows the function
can choose its path by choosing its UDP source port. Then:

    testbed lab check 1
    python3 labs/lab1-static-leaf-spine/ecmp.py SEED          # SEED from `testbed fib leaf1`

Only the standard library: this file runs with any python3.
"""

from __future__ import annotations

import socket
import struct
import sys
import zlib

BUCKETS = 256  # resilient-hash buckets per ECMP group (switch/fib.py)


def mix32(h: int) -> int:
    """The finaliser the switch applies to its CRC (murmur3's fmix32; given, not a TODO).

    A CRC is linear: flows whose addresses and ports differ in the same bits keep the same
    difference in their CRC, so structured addresses would spread over the spines in a
    structured way (perfectly, or all onto one). Real switch hashes mix their input; after these
    five lines every output bit depends on every input bit, and which flows share a spine looks
    random -- as in a real fabric.
    """
    h ^= h >> 16
    h = h * 0x85EBCA6B & 0xFFFFFFFF
    h ^= h >> 13
    h = h * 0xC2B2AE35 & 0xFFFFFFFF
    return h ^ h >> 16


def flow_hash(src_ip: str, dst_ip: str, sport: int, dport: int, proto: int, seed: int) -> int:
    """The switch's flow hash of one packet.

    For UDP (proto 17) and TCP (6): CRC32 over 12 bytes -- the source address, the destination
    address (4 bytes each), the source port and the destination port (2 bytes each), all in
    network byte order -- with the CRC's initial value `seed ^ proto`. For any other protocol
    (ICMP is 1) only the 8 address bytes are hashed; the ports are ignored. The hash is
    `mix32` of that CRC.
    """
    data = socket.inet_aton(src_ip) + socket.inet_aton(dst_ip)
    if proto in (6, 17):
        data += struct.pack("!HH", sport, dport)
    return mix32(zlib.crc32(data, seed ^ proto))


def pick(next_hops: list[str], h: int) -> str:
    """The member of an ECMP group (every member up) that flow hash `h` selects.

    The group is a table of BUCKETS buckets; the hash's low 8 bits name a bucket, and bucket b
    belongs to member b % len(next_hops).
    """
    bucket = h % BUCKETS
    return next_hops[bucket % len(next_hops)]


def source_port_via(
    wanted: str,
    next_hops: list[str],
    src_ip: str,
    dst_ip: str,
    dport: int,
    seed: int,
    start: int = 50000,
) -> int:
    """The first UDP source port >= `start` whose flow from src_ip to dst_ip:dport the leaf
    sends to `wanted` -- how an endpoint steers a packet onto a path of its choosing."""
    for sport in range(start, 65536):
        if pick(next_hops, flow_hash(src_ip, dst_ip, sport, dport, 17, seed)) == wanted:
            return sport
    raise ValueError(f"no source port from {start} reaches {wanted}")


def main(argv: list[str]) -> int:
    if not argv or not argv[0].isdigit():
        print("usage: python3 ecmp.py SEED [SPORT ...]   (SEED: `testbed fib leaf1`)")
        return 2
    seed = int(argv[0])
    ports = [int(p) for p in argv[1:]] or list(range(50000, 50008))
    group = ["spine1", "spine2", "spine3"]
    for sport in ports:
        spine = pick(group, flow_hash("10.1.1.1", "10.1.3.2", sport, 4791, 17, seed))
        print(f"sport {sport}: {spine}")
    for spine in group:
        port = source_port_via(spine, group, "10.1.1.1", "10.1.3.2", 4791, seed)
        print(f"first source port via {spine}: {port}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

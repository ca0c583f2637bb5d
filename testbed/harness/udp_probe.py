"""A small UDP traffic tool for fabric checks and labs: send marked flows, count what arrives.

`send` emits numbered datagrams from chosen source ports (the EV picks the ECMP path) with a
chosen DSCP/ECN; `recv` counts arrivals per source port and reports the DSCP and length of each
kind it saw (trimmed headers arrive as DSCP 11 and short), as one JSON object at the end.
Run inside a host with `testbed exec h1 -- python -m testbed.harness.udp_probe send ...`.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import time

HEADER = struct.Struct("!IIQ")  # source-port flow id, sequence, send time (ns, CLOCK_MONOTONIC)


def send(args: argparse.Namespace) -> dict:
    socks = []
    for sport in args.sports:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, (args.dscp << 2) | args.ecn)
        # The default send buffer is smaller than the NIC token bucket's queue, so a fast sender
        # blocks (back-pressure, as from a real NIC) instead of overflowing the host qdisc.
        s.bind(("", sport))
        socks.append((sport, s))
    payload_len = max(HEADER.size, args.size - 14 - 20 - 8)
    pad = b"\xa5" * (payload_len - HEADER.size)
    sent = errors = 0
    if args.start_at is not None:  # several senders in other namespaces start together
        wait = args.start_at - time.monotonic()
        if wait > 0:
            time.sleep(wait)
    t0 = time.monotonic()
    nxt = t0
    for seq in range(args.count):
        for sport, s in socks:
            msg = HEADER.pack(sport, seq, time.monotonic_ns()) + pad
            try:
                s.sendto(msg, (args.dst, args.dport))
                sent += 1
            except OSError:
                errors += 1
        if args.interval_us:
            nxt += args.interval_us / 1e6
            delay = nxt - time.monotonic()
            if delay > 0:
                time.sleep(delay)
    return {"sent": sent, "errors": errors, "seconds": time.monotonic() - t0}


def recv(args: argparse.Namespace) -> dict:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
    s.bind(("", args.port))
    s.settimeout(0.2)
    per_port: dict[int, int] = {}
    kinds: dict[str, int] = {}
    end = time.monotonic() + args.duration
    idle_end = None
    total = 0
    while time.monotonic() < end:
        try:
            data, anc, _flags, addr = s.recvmsg(65536, socket.CMSG_SPACE(1))
        except TimeoutError:
            if args.idle_exit and total and idle_end is not None and time.monotonic() > idle_end:
                break
            continue
        tos = 0
        for level, typ, cdata in anc:
            if level == socket.IPPROTO_IP and typ == socket.IP_TOS and cdata:
                tos = cdata[0]
        total += 1
        per_port[addr[1]] = per_port.get(addr[1], 0) + 1
        key = f"dscp{tos >> 2}_ecn{tos & 3}_len{len(data)}"
        kinds[key] = kinds.get(key, 0) + 1
        if args.idle_exit:
            idle_end = time.monotonic() + args.idle_exit
    return {"received": total, "per_sport": per_port, "kinds": kinds}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m testbed.harness.udp_probe", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sp = sub.add_parser("send")
    sp.add_argument("--dst", required=True)
    sp.add_argument("--dport", type=int, default=9000)
    sp.add_argument("--sports", type=lambda s: [int(x) for x in s.split(",")], default=[10000])
    sp.add_argument("--count", type=int, default=100, help="datagrams per source port")
    sp.add_argument("--size", type=int, default=1400, help="Ethernet frame size")
    sp.add_argument("--dscp", type=int, default=10)
    sp.add_argument("--ecn", type=int, default=2, choices=[0, 1, 2, 3])
    sp.add_argument(
        "--interval-us", type=float, default=0.0, help="gap between rounds; 0 = back to back"
    )
    sp.add_argument(
        "--start-at",
        type=float,
        default=None,
        help="CLOCK_MONOTONIC second to start sending at (one clock for every namespace), so "
        "that senders started one after another send at once",
    )
    rp = sub.add_parser("recv")
    rp.add_argument("--port", type=int, default=9000)
    rp.add_argument("--duration", type=float, default=5.0)
    rp.add_argument(
        "--idle-exit", type=float, default=0.0, help="stop this long after the last arrival"
    )
    args = ap.parse_args(argv)
    result = send(args) if args.cmd == "send" else recv(args)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

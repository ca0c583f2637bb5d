"""The Python baselines of `testbed bench switch`, run inside the DUT namespace.

- `repeater`     a bare AF_PACKET loop: recv_into + send, no parsing; the per-packet-syscall
                 baseline a Python design must beat;
- `scapy_naive`  a naive scapy forwarder: parse, ttl -= 1, MACs, checksum, rebuild, send.

They are started as `python -m testbed.bench.switch_bench repeater|scapy_naive RX TX SRC DST`
(switch_bench's `__main__` is this `main`), so the measured process -- and its RSS, a reported
figure -- is the same as when these loops lived in switch_bench itself.
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import struct
import sys

SOL_PACKET = 263
PACKET_STATISTICS = 6
PACKET_IGNORE_OUTGOING = 23
ETH_P_ALL = 0x0003


def _open_pair(rx_if: str, tx_if: str) -> tuple[socket.socket, socket.socket]:
    rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    with contextlib.suppress(OSError):
        rx.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    rx.bind((rx_if, ETH_P_ALL))
    tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # protocol 0: never receives
    tx.bind((tx_if, 0))
    return rx, tx


def _drops(sock: socket.socket) -> int:
    _packets, drops = struct.unpack("II", sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
    return drops


def _serve(kind: str, rx_if: str, tx_if: str, src_mac: str, dst_mac: str) -> int:
    rx, tx = _open_pair(rx_if, tx_if)
    _drops(rx)  # reset: count from now on

    def stop(_sig, _frm) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    forwarded = 0
    try:
        if kind == "repeater":
            buf = bytearray(2048)
            view = memoryview(buf)
            recv_into, send = rx.recv_into, tx.send
            print("ready", flush=True)
            while True:
                n = recv_into(buf)
                send(view[:n])
        else:
            # Lazy on purpose: scapy costs ~0.5 s to import, and only this baseline (the naive
            # per-packet scapy forwarder, run as a child process) needs it.
            from scapy.layers.inet import IP, UDP
            from scapy.layers.l2 import Ether

            print("ready", flush=True)
            recv, send = rx.recv, tx.send
            while True:
                pkt = Ether(recv(2048))
                if IP in pkt:
                    ip = pkt[IP]
                    ip.ttl -= 1
                    del ip.chksum
                    if UDP in pkt:
                        del pkt[UDP].chksum
                pkt.src = src_mac
                pkt.dst = dst_mac
                send(bytes(pkt))
                forwarded += 1
    except KeyboardInterrupt:
        pass
    print(json.dumps({"dut_drops": _drops(rx), "packets": forwarded}), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 5 and args[0] in ("repeater", "scapy_naive"):
        return _serve(*args)
    print(
        "usage: python -m testbed.bench.switch_bench repeater|scapy_naive RX TX SRC_MAC DST_MAC",
        file=sys.stderr,
    )
    return 2

"""UDP datagram I/O for the endpoint process: receive on the data port, send from the EV port.

The transport (``endpoint.transport``) says *what* to send: a UDP payload, the IP ToS, the NIC
(plane) and the UDP source port, which is the entropy value (EV) that makes the fabric's ECMP
hash pick a path. This module only moves bytes. Receiving is the same in every design: one
non-blocking UDP socket per local address on the data port (4791) with ``IP_RECVTOS``, read in
batches. For sending there are three designs, all selectable (``--io`` / config ``"io"``):

``udp``        one UDP socket per (plane, EV), bound to (NIC address, EV), ``sendto`` per
               packet; the ToS is set with ``setsockopt`` only when it changes on that socket.
``connected``  one UDP socket per (plane, EV, peer), bound and ``connect``-ed, ``send`` per
               packet: no address parsing and no route lookup per packet, at the cost of
               EVs x peers sockets.
``raw``        one ``IPPROTO_RAW`` socket per process; this module builds the IPv4 and UDP
               headers (UDP checksum included, so control packets stay protected) and any EV is
               just a number: no socket per EV.

``testbed bench endpoint`` measures the three side by side (docs/transport.md, "Endpoint
process"); ``udp`` is the default. A send that would block is not lost: it is queued in
``backlog`` and retried when the loop calls ``flush`` (the transport already counts the packet
as sent; dropping it here would look like a path failure to the sender).
"""

from __future__ import annotations

import errno
import socket
import struct
from collections import deque

IO_KINDS = ("udp", "connected", "raw")
RX_BUFSIZE = 65535
_TOS_ANC = socket.CMSG_SPACE(4)
_IPPROTO_IP = socket.IPPROTO_IP
_IP_TOS = socket.IP_TOS
_WOULD_BLOCK = (errno.EAGAIN, errno.EWOULDBLOCK, errno.ENOBUFS)


def open_rx(addr: str, port: int, rcvbuf: int = 4 << 20) -> socket.socket:
    """Non-blocking UDP socket on (addr, port) that reports each datagram's IP ToS."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.setsockopt(_IPPROTO_IP, socket.IP_RECVTOS, 1)
        s.bind((addr, port))
        s.setblocking(False)
    except OSError:
        s.close()
        raise
    return s


def recv_batch(sock: socket.socket, out: list, limit: int = 64) -> int:
    """Append up to ``limit`` (payload, tos) pairs from ``sock`` to ``out``; returns how many."""
    n = 0
    recvmsg = sock.recvmsg
    while n < limit:
        try:
            data, anc, _flags, _addr = recvmsg(RX_BUFSIZE, _TOS_ANC)
        except (BlockingIOError, InterruptedError):
            break
        except ConnectionRefusedError:  # an ICMP error queued on the socket: not a datagram
            continue
        tos = 0
        for level, kind, cdata in anc:
            if level == _IPPROTO_IP and kind == _IP_TOS and cdata:
                tos = cdata[0]
        out.append((data, tos))
        n += 1
    return n


class _Sender:
    """Common part of the send designs: the retry backlog and counters."""

    kind = ""

    def __init__(self, local_addrs: list[str], port: int) -> None:
        self.local_addrs = local_addrs
        self.port = port
        self.backlog: deque = deque()  # (plane, ev, dst, payload, tos) that would have blocked
        self.sent = 0
        self.blocked = 0  # sends that found the socket buffer full (then retried)
        self.errors = 0  # sends refused for another reason (counted, not retried)

    def send(self, plane: int, ev: int, dst: str, payload: bytes, tos: int) -> None:
        if self.backlog:
            self.backlog.append((plane, ev, dst, payload, tos))
            return
        if not self._send(plane, ev, dst, payload, tos):
            self.blocked += 1
            self.backlog.append((plane, ev, dst, payload, tos))

    def flush(self) -> bool:
        """Retry queued sends in order; True when the backlog is empty."""
        backlog = self.backlog
        while backlog:
            if not self._send(*backlog[0]):
                return False
            backlog.popleft()
        return True

    def _send(self, plane: int, ev: int, dst: str, payload: bytes, tos: int) -> bool:
        raise NotImplementedError

    def _failed(self, exc: OSError) -> bool:
        """True if the send should be retried later; False if it is dropped (counted)."""
        if exc.errno in _WOULD_BLOCK:
            return True
        self.errors += 1
        return False

    def fileno_count(self) -> int:
        return 0

    def close(self) -> None:
        pass


class EvSocketSender(_Sender):
    """``udp``: one socket per (plane, EV), opened on first use, ``sendto`` per packet."""

    kind = "udp"

    def __init__(self, local_addrs: list[str], port: int, sndbuf: int = 1 << 20) -> None:
        super().__init__(local_addrs, port)
        self.sndbuf = sndbuf
        self.socks: dict[tuple[int, int], list] = {}  # (plane, ev) -> [socket, current tos]

    def _open(self, plane: int, ev: int) -> list:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.sndbuf)
            s.bind((self.local_addrs[plane], ev))
            s.setblocking(False)
        except OSError:
            s.close()
            raise
        entry = [s, -1]
        self.socks[(plane, ev)] = entry
        return entry

    def _send(self, plane: int, ev: int, dst: str, payload: bytes, tos: int) -> bool:
        entry = self.socks.get((plane, ev))
        if entry is None:
            entry = self._open(plane, ev)
        s = entry[0]
        try:
            if entry[1] != tos:
                s.setsockopt(_IPPROTO_IP, _IP_TOS, tos)
                entry[1] = tos
            s.sendto(payload, (dst, self.port))
        except OSError as exc:
            return not self._failed(exc)
        self.sent += 1
        return True

    def fileno_count(self) -> int:
        return len(self.socks)

    def close(self) -> None:
        for s, _tos in self.socks.values():
            s.close()
        self.socks.clear()


class ConnectedSender(_Sender):
    """``connected``: one connected socket per (plane, EV, destination), ``send`` per packet."""

    kind = "connected"

    def __init__(self, local_addrs: list[str], port: int, sndbuf: int = 256 << 10) -> None:
        super().__init__(local_addrs, port)
        self.sndbuf = sndbuf
        self.socks: dict[tuple[int, int, str], list] = {}

    def _open(self, plane: int, ev: int, dst: str) -> list:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            # Several sockets share (address, EV), one per destination: they only send.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.sndbuf)
            s.bind((self.local_addrs[plane], ev))
            s.connect((dst, self.port))
            s.setblocking(False)
        except OSError:
            s.close()
            raise
        entry = [s, -1]
        self.socks[(plane, ev, dst)] = entry
        return entry

    def _send(self, plane: int, ev: int, dst: str, payload: bytes, tos: int) -> bool:
        entry = self.socks.get((plane, ev, dst))
        if entry is None:
            entry = self._open(plane, ev, dst)
        s = entry[0]
        try:
            if entry[1] != tos:
                s.setsockopt(_IPPROTO_IP, _IP_TOS, tos)
                entry[1] = tos
            s.send(payload)
        except ConnectionRefusedError:
            # An ICMP port unreachable reported on a connected socket: the datagram itself
            # went out (or the peer is not listening yet); the transport recovers either way.
            self.errors += 1
            return True
        except OSError as exc:
            return not self._failed(exc)
        self.sent += 1
        return True

    def fileno_count(self) -> int:
        return len(self.socks)

    def close(self) -> None:
        for s, _tos in self.socks.values():
            s.close()
        self.socks.clear()


_IP_UDP = struct.Struct("!BBHHHBBH4s4sHHHH")
_PSEUDO = struct.Struct("!4s4sBBH")


def udp_checksum(src: bytes, dst: bytes, sport: int, dport: int, payload: bytes) -> int:
    """RFC 768 checksum over the pseudo-header, UDP header and payload (0 sent as 0xFFFF).

    The ones' complement sum of 16-bit words is the big number they form modulo 0xFFFF
    (2^16 = 1 mod 0xFFFF), so ``int.from_bytes`` does the whole sum in C.
    """
    ulen = 8 + len(payload)
    data = _PSEUDO.pack(src, dst, 0, 17, ulen) + struct.pack("!HHHH", sport, dport, ulen, 0)
    data += payload
    if len(data) & 1:
        data += b"\x00"
    r = int.from_bytes(data, "big") % 0xFFFF
    return 0xFFFF - r if r else 0xFFFF


class RawSender(_Sender):
    """``raw``: one IPPROTO_RAW socket; IPv4 + UDP headers built here, any EV without a socket."""

    kind = "raw"

    def __init__(self, local_addrs: list[str], port: int, sndbuf: int = 4 << 20) -> None:
        super().__init__(local_addrs, port)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
        self.sock.setblocking(False)
        self._src = [socket.inet_aton(a) for a in local_addrs]
        self._dst: dict[str, bytes] = {}

    def _send(self, plane: int, ev: int, dst: str, payload: bytes, tos: int) -> bool:
        d = self._dst.get(dst)
        if d is None:
            d = self._dst[dst] = socket.inet_aton(dst)
        src = self._src[plane]
        ulen = 8 + len(payload)
        cks = udp_checksum(src, d, ev, self.port, payload)
        # Total length, IP id and IP checksum are filled in by the kernel (raw(7)); DF set as a
        # UDP socket would with path-MTU discovery.
        hdr = _IP_UDP.pack(0x45, tos, 0, 0, 0x4000, 64, 17, 0, src, d, ev, self.port, ulen, cks)
        try:
            self.sock.sendto(hdr + payload, (dst, 0))
        except OSError as exc:
            return not self._failed(exc)
        self.sent += 1
        return True

    def fileno_count(self) -> int:
        return 1

    def close(self) -> None:
        self.sock.close()


def open_sender(kind: str, local_addrs: list[str], port: int) -> _Sender:
    if kind == "udp":
        return EvSocketSender(local_addrs, port)
    if kind == "connected":
        return ConnectedSender(local_addrs, port)
    if kind == "raw":
        return RawSender(local_addrs, port)
    raise ValueError(f"io: unknown design {kind!r} (one of {', '.join(IO_KINDS)})")

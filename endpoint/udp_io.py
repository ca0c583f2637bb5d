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

Each design has two data paths (``endpoint.datapath``): the C one (``endpoint._burst``) reads
a socket with one ``recvmmsg`` and sends a transmit pass's packets with ``sendmmsg`` per run of
one socket, the ToS of each in an ``IP_TOS`` cmsg; the Python one is a ``recvmsg`` and a
``sendto``/``send`` per datagram. Same datagrams, same counters, same backlog rules
(tests/test_endpoint_burst.py sends the same inputs through both).
"""

from __future__ import annotations

import errno
import socket
import struct
from collections import deque
from types import ModuleType

from endpoint import datapath

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


_MSG_TRUNC = socket.MSG_TRUNC


def recv_batch_py(sock: socket.socket, out: list, limit: int = 64, with_addr: bool = False) -> int:
    """Append up to ``limit`` (payload, tos) pairs — (payload, tos, (ip, port)) ``with_addr``
    — from ``sock`` to ``out``; returns how many datagrams it took off the socket (a truncated
    one, longer than RX_BUFSIZE, is taken, dropped and counted in ``rx_truncated``)."""
    n = 0
    recvmsg = sock.recvmsg
    while n < limit:
        try:
            data, anc, flags, addr = recvmsg(RX_BUFSIZE, _TOS_ANC)
        except (BlockingIOError, InterruptedError):
            break
        except ConnectionRefusedError:  # an ICMP error queued on the socket: not a datagram
            continue
        n += 1
        if flags & _MSG_TRUNC:
            rx_truncated[0] += 1
            continue
        tos = 0
        for level, kind, cdata in anc:
            if level == _IPPROTO_IP and kind == _IP_TOS and cdata:
                tos = cdata[0]
        out.append((data, tos, addr) if with_addr else (data, tos))
    return n


def _recv_batch_c(
    burst: ModuleType, sock: socket.socket, out: list, limit: int = 64, with_addr: bool = False
) -> int:
    """``recv_batch_py``'s twin: one ``recvmmsg`` (endpoint._burst.recv_burst)."""
    got, truncated = burst.recv_burst(sock.fileno(), out, limit, RX_BUFSIZE, with_addr)
    if truncated:
        rx_truncated[0] += truncated
    return got + truncated


rx_truncated = [0]  # datagrams longer than RX_BUFSIZE, dropped (cannot happen over IPv4 UDP)


def recv_batch_for(burst: ModuleType | None):
    """The receive function of a data path: ``recv_batch(sock, out, limit, with_addr)``."""
    if burst is None:
        return recv_batch_py
    return lambda sock, out, limit=64, with_addr=False: _recv_batch_c(
        burst, sock, out, limit, with_addr
    )


recv_batch = recv_batch_for(datapath.burst)
"""This process's receive function (``endpoint.datapath`` chose C or Python)."""


class _Sender:
    """Common part of the send designs: the retry backlog and counters."""

    kind = ""

    def __init__(
        self, local_addrs: list[str], port: int, burst: ModuleType | None = datapath.burst
    ) -> None:
        self.local_addrs = local_addrs
        self.port = port
        self.burst = burst  # endpoint._burst: send_many by sendmmsg; None: the Python twin
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

    def send_many(self, batch: list[tuple[int, int, str, bytes, int]]) -> None:
        """``send`` of each (plane, ev, dst, payload, tos) in order: one transmit pass. The C
        path hands the pass to one ``send_burst`` (a sendmmsg per run of one socket)."""
        if not batch:
            return
        if self.backlog:
            self.backlog.extend(batch)
        elif self.burst is None:
            for item in batch:
                self.send(*item)
        elif not self._burst_send(batch):
            self.blocked += 1

    def flush(self) -> bool:
        """Retry queued sends in order; True when the backlog is empty."""
        backlog = self.backlog
        if self.burst is not None:
            if not backlog:
                return True
            batch = list(backlog)
            backlog.clear()
            return self._burst_send(batch)
        while backlog:
            if not self._send(*backlog[0]):
                return False
            backlog.popleft()
        return True

    def _burst_send(self, batch: list) -> bool:
        """``batch`` through endpoint._burst.send_burst, the backlog empty; what would block
        is queued (in order). True if nothing was."""
        done, sent, errors = self.burst.send_burst(self._burst_items(batch))
        self.sent += sent
        self.errors += errors
        if done < len(batch):
            self.backlog.extend(batch[done:])
            return False
        return True

    def _burst_items(self, batch: list) -> list:
        """(fd, dst, port, tos, payload) per (plane, ev, dst, payload, tos) of ``batch``."""
        raise NotImplementedError

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

    def __init__(
        self,
        local_addrs: list[str],
        port: int,
        sndbuf: int = 1 << 20,
        burst: ModuleType | None = datapath.burst,
    ) -> None:
        super().__init__(local_addrs, port, burst)
        self.sndbuf = sndbuf
        self.socks: dict[tuple[int, int], list] = {}  # (plane, ev) -> [socket, current tos, fd]

    def _open(self, plane: int, ev: int) -> list:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.sndbuf)
            s.bind((self.local_addrs[plane], ev))
            s.setblocking(False)
        except OSError:
            s.close()
            raise
        entry = [s, -1, s.fileno()]
        self.socks[(plane, ev)] = entry
        return entry

    def _burst_items(self, batch: list) -> list:
        socks = self.socks
        port = self.port
        items = []
        for plane, ev, dst, payload, tos in batch:
            entry = socks.get((plane, ev))
            if entry is None:
                entry = self._open(plane, ev)
            items.append((entry[2], dst, port, tos, payload))
        return items

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
        for entry in self.socks.values():
            entry[0].close()
        self.socks.clear()


class ConnectedSender(_Sender):
    """``connected``: one connected socket per (plane, EV, destination), ``send`` per packet."""

    kind = "connected"

    def __init__(
        self,
        local_addrs: list[str],
        port: int,
        sndbuf: int = 256 << 10,
        burst: ModuleType | None = datapath.burst,
    ) -> None:
        super().__init__(local_addrs, port, burst)
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
        entry = [s, -1, s.fileno()]
        self.socks[(plane, ev, dst)] = entry
        return entry

    def _burst_items(self, batch: list) -> list:
        socks = self.socks
        items = []
        for plane, ev, dst, payload, tos in batch:
            entry = socks.get((plane, ev, dst))
            if entry is None:
                entry = self._open(plane, ev, dst)
            items.append((entry[2], None, 0, tos, payload))
        return items

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
        for entry in self.socks.values():
            entry[0].close()
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

    def __init__(
        self,
        local_addrs: list[str],
        port: int,
        sndbuf: int = 4 << 20,
        burst: ModuleType | None = datapath.burst,
    ) -> None:
        super().__init__(local_addrs, port, burst)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
        self.sock.setblocking(False)
        self._src = [socket.inet_aton(a) for a in local_addrs]
        self._dst: dict[str, bytes] = {}

    def _frame(self, plane: int, ev: int, dst: str, payload: bytes, tos: int) -> bytes:
        d = self._dst.get(dst)
        if d is None:
            d = self._dst[dst] = socket.inet_aton(dst)
        src = self._src[plane]
        ulen = 8 + len(payload)
        cks = udp_checksum(src, d, ev, self.port, payload)
        # Total length, IP id and IP checksum are filled in by the kernel (raw(7)); DF set as a
        # UDP socket would with path-MTU discovery.
        hdr = _IP_UDP.pack(0x45, tos, 0, 0, 0x4000, 64, 17, 0, src, d, ev, self.port, ulen, cks)
        return hdr + payload

    def _burst_items(self, batch: list) -> list:
        fd = self.sock.fileno()
        frame = self._frame
        # tos -1: no IP_TOS cmsg, the header carries it
        return [(fd, item[2], 0, -1, frame(*item)) for item in batch]

    def _send(self, plane: int, ev: int, dst: str, payload: bytes, tos: int) -> bool:
        frame = self._frame(plane, ev, dst, payload, tos)
        try:
            self.sock.sendto(frame, (dst, 0))
        except OSError as exc:
            return not self._failed(exc)
        self.sent += 1
        return True

    def fileno_count(self) -> int:
        return 1

    def close(self) -> None:
        self.sock.close()


def open_sender(
    kind: str, local_addrs: list[str], port: int, burst: ModuleType | None = datapath.burst
) -> _Sender:
    """The send design ``kind`` on the data path of ``burst`` (endpoint._burst, or None: the
    Python twin)."""
    if kind == "udp":
        return EvSocketSender(local_addrs, port, burst=burst)
    if kind == "connected":
        return ConnectedSender(local_addrs, port, burst=burst)
    if kind == "raw":
        return RawSender(local_addrs, port, burst=burst)
    raise ValueError(f"io: unknown design {kind!r} (one of {', '.join(IO_KINDS)})")

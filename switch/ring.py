"""AF_PACKET port I/O with a TPACKET_V2 memory-mapped receive ring.

Measured on this kind of machine (docs/design.md, "Packet I/O"): the rx ring is most of the gain over
one recvfrom per packet, because a burst is read with no syscall at all. V2 rather than V3:
V3's block timeout adds ~1 ms of latency, which a switch cannot afford.

Pitfalls handled here: the socket is created with protocol 0, the ring is set up and mapped, and
only then is the socket bound to its interface with ETH_P_ALL (else it would see every interface
in between); PACKET_IGNORE_OUTGOING keeps the switch from reading its own transmissions; under
overload a slot can stay kernel-owned while later slots are ready, so `read_batch` skips ahead
after STUCK_SLOT_S; frames larger than a slot arrive truncated (TP_STATUS_COPY) and are dropped,
counted, which is why offloads must be off on every veth.
"""

from __future__ import annotations

import mmap
import socket
import struct
import time

SOL_PACKET = 263
PACKET_RX_RING = 5
PACKET_TX_RING = 13
PACKET_STATISTICS = 6
PACKET_VERSION = 10
PACKET_IGNORE_OUTGOING = 23
TPACKET_V2 = 1
ETH_P_ALL = 0x0003

TP_STATUS_KERNEL = 0
TP_STATUS_USER = 1
TP_STATUS_COPY = 2
TP_STATUS_AVAILABLE = 0
TP_STATUS_SEND_REQUEST = 1
TP_STATUS_WRONG_FORMAT = 4
TX_DATA_OFF = 32  # TPACKET_ALIGN(sizeof(struct tpacket2_hdr)): where a tx frame's bytes go

FRAME_SIZE = 2048  # the slot at the default MTU (1500: a 1514-byte frame)
WORDS_PER_FRAME = FRAME_SIZE // 4
RX_HEADROOM = 80
"""Slot bytes before an rx frame's IP header: TPACKET_ALIGN(TPACKET2_HDRLEN + 16), where the
kernel puts the network header of a SOCK_RAW ring (af_packet.c, tpacket_rcv); the Ethernet
header sits just before it, at 66. A slot holds an IP packet of `slot - RX_HEADROOM` bytes
whole; a longer one arrives truncated and is dropped, counted."""
BLOCK_SIZE = 1 << 16
STUCK_SLOT_S = 0.002
# Slots per port. The vector path (switch/vector.py) takes up to a tx ring's worth of frames
# at once, and its cost per frame halves from 256 to 512 (docs/performance.md).
RX_FRAMES = 1024
TX_FRAMES = 512
# ... within this much ring memory per switch: a busy port's ring pages are all resident
# (its slots are used in turn), and a switch's RSS budget is 60 MB (docs/performance.md).
RING_BUDGET_BYTES = 24 << 20


def frame_size_for(mtu: int) -> int:
    """The ring slot for interfaces of IP MTU `mtu`: 2048 up to MTU 1968, 16384 at 9000.

    A power of two, so that a block (BLOCK_SIZE, or one slot if larger) is a whole number of
    slots and of pages and the kernel allocates it without waste (it allocates blocks in
    powers of two of pages); slot i is then at i * slot, which the per-frame loop and the
    numpy views of switch.vector rely on. The price is the slot's unused tail: 45 % at 9000.
    """
    need = mtu + RX_HEADROOM
    size = FRAME_SIZE
    while size < need:
        size *= 2
    return size


def ring_frames_for(ports: int, frame_size: int = FRAME_SIZE) -> tuple[int, int]:
    """Rx and tx slots per port for a switch of `ports` ports: the defaults, halved until
    the switch's rings fit RING_BUDGET_BYTES (3 MB a port at the defaults). Larger slots
    (a larger MTU) mean fewer of them: the budget is of bytes, as the rings' RSS is."""
    rx, tx = RX_FRAMES, TX_FRAMES
    while ports * (rx + tx) * frame_size > RING_BUDGET_BYTES and tx > 64:
        rx //= 2
        tx //= 2
    return rx, tx


_HDR = struct.Struct("IIIHH")  # tp_status, tp_len, tp_snaplen, tp_mac, tp_net
_STATUS = struct.Struct("I")
_STATS = struct.Struct("II")  # tp_packets, tp_drops
_TX_HDR = struct.Struct("III")  # tp_status, tp_len, tp_snaplen


class RingSocket:
    """One interface's AF_PACKET sockets: one with a mapped rx ring, one with a mapped tx ring.

    Transmission is batched: `send()` only writes the frame into the next tx slot, and
    `flush()` -- called once per burst by the event loop -- hands every queued slot to the
    kernel with a single syscall. One `send()` syscall per packet was ~40 % of the switch's time.
    """

    def __init__(
        self,
        ifname: str,
        frames: int = RX_FRAMES,
        tx_frames: int = TX_FRAMES,
        frame_size: int = FRAME_SIZE,
    ) -> None:
        """`frame_size`: the slot, `frame_size_for(mtu)` of the interface's MTU; the same for
        every ring of a switch, as its loops copy an rx slot's frame into a tx slot."""
        self.ifname = ifname
        block = max(BLOCK_SIZE, frame_size)
        blocks = max(1, frames * frame_size // block)
        self.frame_nr = blocks * (block // frame_size)
        tx_blocks = max(1, tx_frames * frame_size // block)
        self.tx_nr = tx_blocks * (block // frame_size)
        # Two sockets: the rx ring's, which the event loop's epoll watches, and the tx ring's,
        # which nothing watches. On one socket, every transmitted frame the kernel frees runs
        # the socket's write-space wakeup through epoll's wait queue entry: 5 % of a saturated
        # switch's CPU in `perf` (docs/performance.md).
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        txsock = None
        try:
            sock.setsockopt(SOL_PACKET, PACKET_VERSION, TPACKET_V2)
            sock.setsockopt(
                SOL_PACKET,
                PACKET_RX_RING,
                struct.pack("IIII", block, blocks, frame_size, self.frame_nr),
            )
            self.mm = mmap.mmap(
                sock.fileno(),
                blocks * block,
                mmap.MAP_SHARED,
                mmap.PROT_READ | mmap.PROT_WRITE,
            )
            try:
                sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
            except OSError:
                pass  # kernels before 4.20: outgoing frames are filtered by pkttype below
            sock.bind((ifname, ETH_P_ALL))
            sock.setblocking(False)
            # Protocol 0, and bound with 0 too: this socket receives nothing.
            txsock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
            txsock.setsockopt(SOL_PACKET, PACKET_VERSION, TPACKET_V2)
            txsock.setsockopt(
                SOL_PACKET,
                PACKET_TX_RING,
                struct.pack("IIII", block, tx_blocks, frame_size, self.tx_nr),
            )
            tx_mm = mmap.mmap(
                txsock.fileno(),
                tx_blocks * block,
                mmap.MAP_SHARED,
                mmap.PROT_READ | mmap.PROT_WRITE,
            )
            txsock.bind((ifname, 0))
            txsock.setblocking(False)
            txsock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        except OSError:
            sock.close()
            if txsock is not None:
                txsock.close()
            raise
        self.sock = sock
        self.txsock = txsock
        self.fd = sock.fileno()
        self._send = txsock.send
        self._init_rings(self.mm, tx_mm, frame_size)

    def _init_rings(self, mm: mmap.mmap, tx_mm: mmap.mmap, frame_size: int = FRAME_SIZE) -> None:
        """The ring state over the rx ring's mapping `mm` and the tx ring's `tx_mm`, both of
        slots of `frame_size` bytes.

        Apart from __init__ so that tests can run the very same ring code over anonymous
        mappings (see tests/test_switch_fastpath.py) without a socket.
        """
        self.frame_size = frame_size
        self.words_per_frame = frame_size // 4
        self.mm = mm
        self.head = 0
        self.stuck_since = 0.0
        self.kernel_drops = 0
        self.truncated = 0
        self.ring_skips = 0
        self.mv = memoryview(mm)  # slice-assignable from a bytearray on PyPy too
        self.u32 = self.mv.cast("I")
        self.u16 = self.mv.cast("H")
        self.tx_mm = tx_mm
        self.tx_mv = memoryview(tx_mm)
        self.tx_u32 = self.tx_mv.cast("I")
        self.held: list[int] = []
        self.arrays = None  # numpy views of the rings, made by switch.vector when first used
        self.tx_head = 0
        self.tx_pending = 0
        self.tx_errors = 0
        self.netns = None  # contracts.netns.Netns the interface lives in, if not this process's

    def fileno(self) -> int:
        return self.fd

    def read_batch(self, out: list, limit: int = 256) -> int:
        """Append up to `limit` received frames to `out`; returns how many.

        Zero copy: each frame is a writable memoryview of its ring slot, valid until
        `release()`, which hands the slots back to the kernel -- the caller must copy any frame
        it keeps (a queued frame) before then. Slot headers are read through 32/16-bit views of
        the mapping: an index costs a fraction of a struct call, and this runs per packet.
        """
        mv = self.mv
        u32 = self.u32
        u16 = self.u16
        head = self.head
        frame_nr = self.frame_nr
        held = self.held
        size = self.frame_size
        words = self.words_per_frame
        n = 0
        append = out.append
        while n < limit:
            word = head * words  # tpacket2_hdr: status, len, snaplen, mac(16), net(16)
            status = u32[word]
            if not status & TP_STATUS_USER:
                if n == 0 and not held and self._skip_stuck_slot(head * size):
                    head = self.head
                    continue
                break
            tp_len = u32[word + 1]
            if status & TP_STATUS_COPY or u32[word + 2] < tp_len:
                self.truncated += 1
                u32[word] = TP_STATUS_KERNEL
            else:
                start = head * size + u16[word * 2 + 6]
                append(mv[start : start + tp_len])
                held.append(word)
                n += 1
            head += 1
            if head == frame_nr:
                head = 0
        self.head = head
        if n:
            self.stuck_since = 0.0
        return n

    def release(self) -> None:
        """Give the slots of the frames read since the last release back to the kernel."""
        u32 = self.u32
        for word in self.held:
            u32[word] = TP_STATUS_KERNEL
        self.held.clear()

    def _skip_stuck_slot(self, off: int) -> bool:
        """If the next slot is kernel-owned but a later one is ready for long enough, skip it."""
        nxt = ((self.head + 1) % self.frame_nr) * self.frame_size
        if not _STATUS.unpack_from(self.mm, nxt)[0] & TP_STATUS_USER:
            self.stuck_since = 0.0
            return False
        now = time.monotonic()
        if not self.stuck_since:
            self.stuck_since = now
            return False
        if now - self.stuck_since < STUCK_SLOT_S:
            return False
        self.ring_skips += 1
        self.stuck_since = 0.0
        self.head = (self.head + 1) % self.frame_nr
        return True

    def send(self, frame: bytes | bytearray) -> bool:
        """Queue `frame` in the tx ring; False if the ring is full even after a flush."""
        u32 = self.tx_u32
        word = self.tx_head * self.words_per_frame
        status = u32[word]
        if status != TP_STATUS_AVAILABLE:
            if status == TP_STATUS_WRONG_FORMAT:
                self.tx_errors += 1  # the kernel refused the frame that was here; reuse the slot
            else:
                self.flush()
                if u32[word] not in (TP_STATUS_AVAILABLE, TP_STATUS_WRONG_FORMAT):
                    return False
        n = len(frame)  # fits: no frame is longer than an rx slot holds, and slots are alike
        start = word * 4 + TX_DATA_OFF
        self.tx_mv[start : start + n] = frame
        u32[word + 1] = n  # tp_len
        u32[word + 2] = n  # tp_snaplen
        u32[word] = TP_STATUS_SEND_REQUEST  # last: the slot is the kernel's from here on
        head = self.tx_head + 1
        self.tx_head = 0 if head == self.tx_nr else head
        self.tx_pending += 1
        return True

    def flush(self) -> None:
        """Hand every queued tx slot to the kernel: one syscall per burst."""
        if not self.tx_pending:
            return
        self.tx_pending = 0
        try:
            self._send(b"", socket.MSG_DONTWAIT)
        except BlockingIOError:
            pass  # slots stay queued; the next flush sends them
        except OSError:
            self.tx_errors += 1

    def check_error(self) -> bool:
        """Clear a pending socket error; True if the interface no longer exists."""
        try:
            self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if self.netns is None:
                socket.if_nametoindex(self.ifname)
            else:
                with self.netns.entered():  # a process serving several switch namespaces
                    socket.if_nametoindex(self.ifname)
        except OSError:
            return True
        return False

    def poll_kernel_drops(self) -> int:
        """Frames the kernel dropped because the ring was full (emulator too slow), cumulative."""
        try:
            _pkts, drops = _STATS.unpack(
                self.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, _STATS.size)
            )
        except OSError:
            return self.kernel_drops
        self.kernel_drops += drops  # the kernel resets its counters on every read
        return self.kernel_drops

    def close(self) -> None:
        try:
            self.held.clear()
            self.arrays = None
            self.u32.release()
            self.u16.release()
            self.mv.release()
            self.mm.close()
            self.tx_u32.release()
            self.tx_mv.release()
            self.tx_mm.close()
        except BufferError:
            pass  # a frame view is still referenced; the mapping goes with the process
        finally:
            self.sock.close()
            self.txsock.close()

"""The vector path: a deep burst of clean frames forwarded with a few dozen numpy operations.

Why: a saturated switch finds hundreds of frames waiting in its rx ring, and the per-frame
loop of `switch.fastpath` spends ~1.7 µs of bytecode on each (docs/performance.md). Like VPP,
this path works on the whole vector instead: each header check, the TTL and checksum
rewrite, the copy into the tx ring and the slot bookkeeping is one numpy call over up to
`VEC_MAX` frames. A numpy call costs ~1 µs here, and a burst needs ~40 of them, so the path
only pays from ~100 frames on. Below `VEC_MIN` ready frames it declines, and so the fabric's
small bursts (2-3 frames per wakeup) never take it.

It takes a burst only when the per-frame loop would do the same thing to every frame of it.
It returns 0, touching nothing, when any of these fails:

- every slot is ready and whole, at one offset;
- every frame is IPv4 without options, with a good checksum, TTL > 1 and an honest length;
- every frame is UDP, or every frame TCP, and its flow's next hop is cached;
- every egress port is `direct` and idle, with a tx ring.

Of the frames it takes, each port gets the prefix that its shaper (the same float arithmetic
as `Port.offer`, in the same order) and its free tx slots allow. The burst is cut before the
first frame that would not fit, and the per-frame loop does the rest. So the result is the
per-frame loop's: the same bytes, slots, virtual clocks and counters, which
tests/test_switch_vector.py checks against `Switch.receive_batch`.
"""

from __future__ import annotations

import numpy as np

from switch.ring import (
    TP_STATUS_AVAILABLE,
    TP_STATUS_KERNEL,
    TP_STATUS_SEND_REQUEST,
    TP_STATUS_USER,
    TX_DATA_OFF,
    TX_FRAMES,
    RingSocket,
)

VEC_MIN = 96  # ready frames in a row before a burst is worth the ~40 numpy calls
VEC_MAX = TX_FRAMES  # frames per vector burst: a tx ring's worth
VEC_TAIL = 16  # ... but the ready frames up to the rx ring's end go as one vector from this many
_MIN_LEN = 38  # Ethernet + IPv4 + the ports of a UDP/TCP header
_FIXED = [0, 1, 2, 11]  # in bytes 12..37: ethertype (2), version/IHL, protocol


class RingArrays:
    """numpy views of one RingSocket's mapped rings: rows are slots."""

    __slots__ = ("rx", "rx32", "rx16", "tx", "tx32")

    def __init__(self, io: RingSocket) -> None:
        size = io.frame_size
        rx = np.frombuffer(io.mm, dtype=np.uint8, count=io.frame_nr * size)
        self.rx = rx.reshape(io.frame_nr, size)
        self.rx32 = self.rx.view(np.uint32)
        self.rx16 = self.rx.view(np.uint16)
        tx = np.frombuffer(io.tx_mm, dtype=np.uint8, count=io.tx_nr * size)
        self.tx = tx.reshape(io.tx_nr, size)
        self.tx32 = self.tx.view(np.uint32)


def arrays(io: RingSocket) -> RingArrays:
    a = io.arrays
    if a is None:
        a = io.arrays = RingArrays(io)
    return a


def forward_vector(sw, port, io: RingSocket, now: float) -> int:
    """Forward a deep burst from `io`'s rx ring, or return 0 having changed nothing."""
    head = io.head
    k = min(VEC_MAX, io.frame_nr - head)  # no wrap inside a vector: the ring's tail goes alone
    if k < VEC_TAIL:
        return 0
    ra = arrays(io)
    st = ra.rx32[head : head + k, 0]
    short = np.flatnonzero((st & TP_STATUS_USER) == 0)  # other bits (LOSING...) as the loop
    if short.size:
        k = int(short[0])
        if k < VEC_MIN:
            return 0
    hdr = ra.rx32[head : head + k]
    n = hdr[:, 1]
    mac = ra.rx16[head : head + k, 6]
    m0 = int(mac[0])
    if (hdr[:, 2] != n).any() or (mac != m0).any() or int(n.min()) < _MIN_LEN:
        return 0
    blk = ra.rx[head : head + k]
    h = blk[:, m0 + 12 : m0 + 38]  # bytes 12..37, as the per-frame loop reads them
    proto = int(h[0, 11])
    if proto not in (6, 17):
        return 0
    total = h[:, 4:6].view(">u2")[:, 0]
    # Ethertype, version/IHL and protocol in one comparison: bytes 12, 13, 14 and 23.
    if not (
        (h[:, _FIXED] == (0x08, 0x00, 0x45, proto)).all()
        and (h[:, 10] > 1).all()  # TTL
        and (total >= 20).all()
        and (total.astype(np.int64) <= n.astype(np.int64) - 14).all()
    ):
        return 0
    s = h[:, 2:22].view(">u2").sum(axis=1, dtype=np.uint32)
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    if not (s == 0xFFFF).all():
        return 0
    # The flows: one cached hop per distinct (src, dst, sport + dport), as 3 big-endian words.
    words = np.ascontiguousarray(h[:, 14:26]).view(">u4")
    flows = sw.udp_flows if proto == 17 else sw.tcp_flows
    if (words == words[0]).all():
        uniq, inverse = words[:1], np.zeros(k, dtype=np.intp)
    else:  # integer sorts: faster than np.unique on 12-byte voids (8 flows: -7 % per frame)
        order = np.lexsort((words[:, 2], words[:, 1], words[:, 0]))
        ranked = words[order]
        first = np.empty(k, dtype=bool)
        first[0] = True
        first[1:] = (ranked[1:] != ranked[:-1]).any(axis=1)
        inverse = np.empty(k, dtype=np.intp)
        inverse[order] = np.cumsum(first) - 1
        uniq = ranked[first]
    hops = []
    for src, dst, ports in uniq.tolist():
        hop = flows.get(src << 64 | dst << 32 | ports)
        if hop is None:
            return 0
        hops.append(hop)
    # Group the frames by egress port, in arrival order within each.
    port_of: dict = {}
    hop_port = np.empty(len(hops), dtype=np.intp)
    for i, (out, l2h, tx) in enumerate(hops):
        q = out.queue
        if tx is None or not out.direct or out.inflight or q.data or q.prio:
            return 0
        hop_port[i] = port_of.setdefault(out, (len(port_of), l2h, tx))[0]
    which = hop_port[inverse]
    soon = now + sw.early_s
    floor = now - sw.slack_s  # Port.offer's arrival slack
    cut = k
    plans = []
    for out, (idx, l2h, tx) in port_of.items():
        rows = np.flatnonzero(which == idx)
        fit = rows.size
        ends = None
        spb = out.sec_per_byte
        if spb != 0.0:
            busy = out.busy_until
            if busy > soon:
                fit = 0
            else:
                steps = np.empty(rows.size + 1)
                steps[0] = busy if busy > floor else now
                steps[1:] = n[rows] * spb
                ends = np.add.accumulate(steps)[1:]
                fit = int(np.searchsorted(ends, soon, side="right"))
        fit = min(fit, tx.tx_nr)
        txa = arrays(tx)
        slots = (tx.tx_head + np.arange(fit)) % tx.tx_nr
        free = txa.tx32[slots, 0] == TP_STATUS_AVAILABLE
        if not free.all():
            fit = int(np.argmin(free))
        if fit < rows.size:
            cut = min(cut, int(rows[fit]))
        plans.append((out, l2h, tx, txa, rows, ends))
    if cut < VEC_TAIL:
        return 0
    nbytes = 0
    for out, l2h, tx, txa, rows, ends in plans:
        rows = rows[rows < cut]
        m = rows.size
        if not m:
            continue
        lens = n[rows]
        width = int(lens.max())
        l2 = np.frombuffer((l2h >> 176).to_bytes(12, "big"), dtype=np.uint8)
        whole = rows[-1] - rows[0] + 1 == m  # this port's frames are one run of slots
        t0 = tx.tx_head
        done = 0
        while done < m:  # one piece, or two where the tx ring wraps
            size = min(m - done, tx.tx_nr - t0)
            part = rows[done : done + size]
            if whole:
                r0 = int(part[0])
                src = blk[r0 : r0 + size, m0 : m0 + width]  # a view: one copy, into the slots
            else:
                src = blk[part, m0 : m0 + width]
            t = txa.tx[t0 : t0 + size, TX_DATA_OFF : TX_DATA_OFF + width]
            t[:] = src
            t[:, 0:12] = l2
            t[:, 22] -= 1  # TTL
            c = t[:, 24:26].view(">u2")[:, 0]
            t[:, 24:26].view(">u2")[:, 0] = np.where(c < 0xFEFF, c + 0x0100, c - 0xFEFF)  # RFC 1624
            txa.tx32[t0 : t0 + size, 1] = lens[done : done + size]
            txa.tx32[t0 : t0 + size, 0] = TP_STATUS_SEND_REQUEST
            done += size
            t0 = 0
        tx.tx_head = (tx.tx_head + m) % tx.tx_nr
        tx.tx_pending += m
        sent = int(lens.sum(dtype=np.int64))
        if ends is not None:
            out.busy_until = float(ends[m - 1])
        c = out.counters
        c.tx_packets += m
        c.tx_bytes += sent
        nbytes += sent
    ra.rx32[head : head + cut, 0] = TP_STATUS_KERNEL
    io.head = (head + cut) % io.frame_nr
    io.stuck_since = 0.0
    c = port.counters
    c.rx_packets += cut
    c.rx_bytes += nbytes
    return cut

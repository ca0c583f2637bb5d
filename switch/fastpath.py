"""The inline forwarding loop: from an rx ring slot to a tx ring slot, in one pass.

Why a separate loop: at 1400 B the switch's Python work per packet, not the kernel, is what
kept it below a bare recv/send repeater (docs/performance.md). `Switch.receive_batch` is the
readable inline path over frame objects; this is the same decision made on the mapped rings
themselves, with no frame object at all in the common case:

- the slot's frame is parsed with one `int.from_bytes` of bytes 12..37 (ethertype, the whole
  IPv4 header, a UDP/TCP header's ports): ethertype, version/IHL, TTL, protocol, total length
  and destination are shifts of that integer, and the header checksum is checked as the
  integer modulo 0xFFFF (2**16 == 1 mod 0xFFFF, so the integer is congruent to the
  one's-complement sum of its 16-bit words; with ethertype 0x0800 in front, a valid header
  leaves 0x0800);
- the next hop comes from a per-flow cache keyed by src, dst and ports -- the ECMP hash's own
  input, so a flow's decision is the hash's -- and cleared by `Switch.refresh()` on every
  change of state;
- bytes 0..33 of the outgoing frame (the next hop's L2 header, the IPv4 header with TTL - 1
  and its checksum updated as RFC 1624 says) are built as one integer;
- if the egress port is `direct` (carrier up, no gray failure, no delay) and idle -- its queue
  and in-flight list empty and its serialisation would end within the early window
  (`sw.early_s`), exactly the test
  `Port.offer` makes -- those 34 bytes and the rest of the frame are written straight into
  that port's tx ring slot;
- every other case (anything malformed, a route not cached yet, a busy or impaired port,
  a full tx ring, a port that is not a ring) goes through `Switch._receive_slow` or
  `Port.offer` with a copy of the frame, so those remain the reference behaviour.

The slot is handed back to the kernel as soon as its frame is dealt with: nothing keeps a
view of it. tests/test_switch_fastpath.py runs this loop over in-memory rings and proves it
sends exactly what `Switch.receive_batch` sends, for random frames and port states.
"""

from __future__ import annotations

import os
from zlib import crc32

from contracts.defaults import ROCE_PORT
from switch.fib import BUCKET_MASK, mix32, source_route
from switch.ring import (
    TP_STATUS_AVAILABLE,
    TP_STATUS_KERNEL,
    TP_STATUS_SEND_REQUEST,
    TP_STATUS_USER,
    TX_DATA_OFF,
    RingSocket,
)

try:
    from switch.vector import VEC_MIN, forward_vector
except ImportError:  # no numpy (the switch under PyPy, say): the per-frame loop alone
    VEC_MIN, forward_vector = 1, None

# The vector path for deep bursts (switch/vector.py); TESTBED_SWITCH_VECTOR=0 turns it off, so
# that one bench can measure the per-frame loop alone.
VECTOR = forward_vector is not None and os.environ.get("TESTBED_SWITCH_VECTOR", "1") != "0"

_IPV4_NO_OPTIONS = 0x080045  # ethertype IPv4, then version 4 / IHL 5: the top 24 of 176 bits
_from_bytes = int.from_bytes
_TTL_DOWN = 0xFFFF00 << 64  # TTL - 1 and checksum + 0x0100, in bytes 12..33 as an integer
_TTL_ONE = 0x1000000 << 64
_CHECKSUM = 0xFFFF << 64
_FLOW = (1 << 96) - 1
FLOW_CACHE_MAX = 65536  # flows per protocol; the cache starts over when it is full


def tx_rings(ios: list) -> list[RingSocket | None]:
    """Per port index, its RingSocket if it has one (the only kind this loop writes into)."""
    return [io if isinstance(io, RingSocket) else None for io in ios]


def _decide(sw, h: int, key, proto: int, flows: dict | None) -> tuple | None:
    """The next hop of a frame whose route is cached, or None.

    The hop is (Port, its L2 header as an integer shifted to sit on top of bytes 12..33, its
    tx ring or None).

    None sends the frame to the slow path: its destination is not cached yet (the slow path
    looks it up and caches it), is local, or has no live next hop. `key` is the flow's src,
    dst, sport and dport as one integer (`flows` is where the answer is kept) or, for a
    protocol without ports or a frame too short for them, the frame itself, hashed the slow
    path's way.
    """
    route = sw._route_cache.get(h & 0xFFFFFFFF)
    live = route.live if route is not None else None
    if not live:  # a local route has no members, so no live ones either
        return None
    if len(live) == 1:
        out_index, l2 = live[0]
    elif sw._source_routed and proto == 17 and flows is not None and key & 0xFFFF == ROCE_PORT:
        out_index, l2 = route.table[source_route(key >> 16 & 0xFFFF, sw._plane_bits) & BUCKET_MASK]
    elif flows is not None:
        # Once per flow (the answer is cached below), so the finaliser may be a call.
        h = crc32(key.to_bytes(12, "big"), sw._seed ^ proto)
        out_index, l2 = route.table[(mix32(h) if sw._mixed else h) & BUCKET_MASK]
    else:
        out_index, l2 = route.table[sw.fib.flow_hash(key) & BUCKET_MASK]
    hop = (sw.ports[out_index], _from_bytes(l2, "big") << 176, sw.tx_rings[out_index])
    if flows is not None:
        if len(flows) >= FLOW_CACHE_MAX:
            flows.clear()
        flows[key] = hop
    return hop


def forward_from_ring(sw, port, io: RingSocket, now: float, limit: int = 64) -> int:
    """Forward up to `limit` frames waiting in `io`'s rx ring; returns how many were taken.

    `sw` is the Switch, `port` the Port `io` belongs to. A port the inline path may not take
    (debug mode, switch down, rx impairment) is read with `read_batch` and handed to
    `receive_batch`.

    The egress side works on runs: while consecutive frames leave by the same idle port, that
    port's tx ring head, virtual clock and counters live in locals and are written back once,
    when the run ends (another port, a frame for the slow path or `Port.offer`, the burst's
    end) -- nothing else can look at them in between, and the attribute traffic was a tenth of
    the per-frame time.
    """
    if not (sw.fast and port.rx_clean):
        batch: list = []
        n = io.read_batch(batch, limit)
        if n:
            sw.receive_batch(port, batch, now)
            io.release()
        return n
    wpf = io.words_per_frame  # every ring of a switch has slots of one size (switch.ring)
    if VECTOR and io.u32[((io.head + VEC_MIN - 1) % io.frame_nr) * wpf] & TP_STATUS_USER:
        taken = forward_vector(sw, port, io, now)  # a deep burst is waiting
        if taken:
            sw.vector_frames += taken
            sw.vector_bursts += 1
            return taken
    mm = io.mm
    mv = io.mv
    u32 = io.u32
    u16 = io.u16
    word = io.head * wpf  # the next rx slot's tpacket2_hdr, in 32-bit words
    rx_end = io.frame_nr * wpf
    slow = sw._receive_slow
    udp_flows = sw.udp_flows
    tcp_flows = sw.tcp_flows
    soon = now + sw.early_s
    floor = now - sw.slack_s  # Port.offer's arrival slack
    taken = 0
    nbytes = 0
    # The current run (see the docstring): its Port, tx ring and their state.
    run = None
    r_tx = r_mm = r_u32 = None
    r_word = r_end = r_pkts = r_bytes = 0
    r_spb = r_busy = 0.0
    while taken < limit:
        # tpacket2_hdr at `word`: status, len, snaplen, mac(16), net(16)
        if not u32[word] & TP_STATUS_USER:
            if taken == 0 and not io.held:
                io.head = word // wpf
                if io._skip_stuck_slot(word * 4):
                    word = io.head * wpf
                    continue
            break
        n = u32[word + 1]
        # A frame longer than its slot: snaplen < len (the kernel sets TP_STATUS_COPY only
        # with a snaplen cut short, so this test covers it).
        if u32[word + 2] < n:
            io.truncated += 1
        else:
            taken += 1
            nbytes += n
            off = word * 4 + u16[word * 2 + 6]  # the slot starts at byte word * 4
            # Bytes 12..37: ethertype, the IPv4 header, and the ports of a UDP or TCP packet.
            h = _from_bytes(mm[off + 12 : off + 38], "big")
            # src, dst, sport, dport: the ECMP key, so the decision's key too (if n >= 38: the
            # bytes after a shorter frame are a previous frame's leftovers in the slot).
            flow = h & _FLOW
            h >>= 32
            top = h >> 128  # bytes 12..17: ethertype, version/IHL, DSCP/ECN, total length
            mid = (h >> 64) & 0xFFFFFFFF  # bytes 22..25: TTL, protocol, header checksum
            if (
                n < 34
                or top >> 24 != _IPV4_NO_OPTIONS
                or h % 0xFFFF != 0x0800  # header checksum (module docstring)
                or mid >> 24 <= 1  # TTL
                or not 20 <= top & 0xFFFF <= n - 14  # total length
            ):
                hop = None
            else:
                proto = (mid >> 16) & 0xFF
                if (proto == 17 or proto == 6) and n >= 38:
                    hop = (udp_flows if proto == 17 else tcp_flows).get(flow)
                    if hop is None:
                        hop = _decide(sw, h, flow, proto, udp_flows if proto == 17 else tcp_flows)
                else:
                    hop = _decide(sw, h, mv[off : off + n], proto, None)
            if hop is None:
                if run is not None:
                    r_tx.tx_head = r_word // wpf
                    r_tx.tx_pending += r_pkts
                    run.busy_until = r_busy
                    c = run.counters
                    c.tx_packets += r_pkts
                    c.tx_bytes += r_bytes
                    run = None
                slow(port, bytearray(mv[off : off + n]), now)
            else:
                out, l2h, tx = hop
                # The new bytes 0..33 as one integer: the next hop's L2 header on top of
                # the IPv4 header with TTL - 1, so its checksum + 0x0100 (RFC 1624) -- with
                # the end-around carry, and 0xFEFF -> 0x0000 as a recompute would give.
                if mid & 0xFFFF < 0xFEFF:
                    h = l2h | (h - _TTL_DOWN)
                else:
                    h = l2h | (h - _TTL_ONE) & ~_CHECKSUM | ((mid & 0xFFFF) - 0xFEFF) << 64
                if out is not run:
                    if run is not None:
                        r_tx.tx_head = r_word // wpf
                        r_tx.tx_pending += r_pkts
                        run.busy_until = r_busy
                        c = run.counters
                        c.tx_packets += r_pkts
                        c.tx_bytes += r_bytes
                        run = None
                    q = out.queue
                    if tx is not None and out.direct and not (out.inflight or q.data or q.prio):
                        # An idle port with a tx ring: a run starts.
                        run = out
                        r_tx = tx
                        r_mm = tx.tx_mm
                        r_u32 = tx.tx_u32
                        r_word = tx.tx_head * wpf
                        r_end = tx.tx_nr * wpf
                        r_spb = out.sec_per_byte
                        r_busy = out.busy_until
                        r_pkts = r_bytes = 0
                sent = False
                if run is not None:
                    if r_u32[r_word] == TP_STATUS_AVAILABLE:
                        if r_spb != 0.0:
                            # Port.offer's own test: an idle link that ends this frame's
                            # serialisation within the early window sends it now, else it waits.
                            if r_busy <= soon:
                                busy = (r_busy if r_busy > floor else now) + n * r_spb
                                if busy <= soon:
                                    r_busy = busy
                                    sent = True
                        else:
                            sent = True
                        if sent:
                            start = r_word * 4 + TX_DATA_OFF
                            r_mm[start : start + 34] = h.to_bytes(34, "big")
                            r_mm[start + 34 : start + n] = mv[off + 34 : off + n]
                            r_u32[r_word + 1] = n  # tp_len (tx reads no snaplen)
                            r_u32[r_word] = TP_STATUS_SEND_REQUEST  # the kernel's at the flush
                            r_word += wpf
                            if r_word == r_end:
                                r_word = 0
                            r_pkts += 1
                            r_bytes += n
                if not sent:
                    if run is not None:
                        r_tx.tx_head = r_word // wpf
                        r_tx.tx_pending += r_pkts
                        run.busy_until = r_busy
                        c = run.counters
                        c.tx_packets += r_pkts
                        c.tx_bytes += r_bytes
                        run = None
                    frame = bytearray(mv[off : off + n])
                    frame[0:34] = h.to_bytes(34, "big")
                    out.offer(frame, now)
        u32[word] = TP_STATUS_KERNEL  # nothing refers to the slot any more
        word += wpf
        if word == rx_end:
            word = 0
    if run is not None:
        r_tx.tx_head = r_word // wpf
        r_tx.tx_pending += r_pkts
        run.busy_until = r_busy
        c = run.counters
        c.tx_packets += r_pkts
        c.tx_bytes += r_bytes
    io.head = word // wpf
    if taken:
        io.stuck_since = 0.0
        c = port.counters
        c.rx_packets += taken
        c.rx_bytes += nbytes
    return taken

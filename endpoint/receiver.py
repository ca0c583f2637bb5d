"""Receiver half of a QP: PSN window, validation, placement, exactly-once delivery, ACK/NACK.

Every check that can reject a packet runs before its PSN is marked received, so a malformed or
lying packet never consumes a PSN that the genuine packet then could not use.
Order of checks for a data packet: header version; PSN (duplicate -> re-ACK, beyond window ->
drop + NACK out-of-window); trimmed (DSCP 11 or short payload -> NACK trimmed in spraying modes,
drop in single-path as RoCE would on a bad ICRC); packet CRC; lengths; message consistency;
overlap. Only then: mark PSN, place bytes, ACK, and on completion verify the message crc32.

ACKs are coalesced as TCP's delayed ACK (RFC 1122 4.2.3.2, RFC 5681 4.2), DCTCP's CE rule
(RFC 8257 3.2) and QUIC's ACK frequency draft do it (docs/transport.md, "Delayed ACKs"): a run of
in-order packets with one CE state is answered by one ACK after ``ack_every`` packets or
``ack_delay``, whichever comes first; anything the sender's loss, EV or RTT logic must see at
once -- a packet out of order, one that fills a gap, a retransmission, the end of a message, a
duplicate, a CE change, a packet whose sender set the BTH AckReq bit -- is ACKed at once, and
a run still pending leaves first in an ACK of its own. So every data packet is named by exactly one ACK (its own, or the run's), as with one
ACK per packet, and the run's ACK says how many packets it answers and how long it was held.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from contracts.dscp import ECN_CE
from endpoint import codec
from endpoint.codec import DataPacket, ProbePacket
from endpoint.config import Mode, TransportConfig
from endpoint.psn import PSN_MASK, psn_add, psn_diff
from endpoint.reassembly import Reassembly
from endpoint.stats import ConnectionStats
from endpoint.wire import (
    DATA_FLAG_RETX,
    NACK_OUT_OF_WINDOW,
    NACK_SEQUENCE,
    NACK_TRIMMED,
    SACK_FLAG_DUP,
)

SACK_BITS = 64
_SACK_MASK = (1 << SACK_BITS) - 1
_U32 = 0xFFFFFFFF


@dataclass(slots=True)
class Delivery:
    """A message placed completely and verified, handed to the application exactly once."""

    qp: int
    msg_id: int
    data: bytes
    at: float


class Receiver:
    """Receives data and probes for one local QP and emits ACK/NACK/PROBE-ACK payloads."""

    def __init__(
        self,
        cfg: TransportConfig,
        local_qp: int,
        remote_qp: int,
        start_psn: int,
        stats: ConnectionStats,
        first_msg_id: int = 0,
        peer_ev_base: int | None = None,
    ) -> None:
        self.cfg = cfg
        self.local_qp = local_qp
        self.remote_qp = remote_qp
        self.rcv_nxt = start_psn & PSN_MASK
        # Bit j set: PSN rcv_nxt + j has arrived (bit 0 is never set: rcv_nxt is the hole).
        self._bits = 0
        self.stats = stats
        self.go_back_n = cfg.mode in (Mode.SINGLE_PATH, Mode.ROCE)
        self._reasm: dict[int, Reassembly] = {}
        self._reserved = 0
        self._done_below = first_msg_id & _U32  # every message id before this was delivered
        self._done: set[int] = set()  # delivered ids at or above _done_below
        self.gbn_nak_psn: int | None = None  # go-back-N: one NAK per gap, like RC
        self.gbn_nak_at: float | None = None  # when it went (a stall's diagnosis, in records)
        self.msn = 0
        self.deliveries: list[Delivery] = []
        # The run of packets a coalesced ACK will answer (`_coalesce`): (ev, psn, send ts, arrival)
        # of its latest packet, how many, their CE state, and when the ACK is due at the latest.
        self._pending: tuple[int, int, int, float] | None = None
        self._pending_count = 0
        self._pending_ce = False
        self._ce_state = False  # CE mark of the latest in-order packet (a run's state)
        self.ack_deadline: float | None = None
        # Replies to EV e leave on EV pair(e) by default (cfg.reply_ev "paired"): the sender's
        # view of e then covers a whole round trip, so a reverse path that dies retires e
        # instead of silently eating a share of the ACKs -- sprayed replies lost a message's
        # last ACK half the time during a spine-link blackhole, an RTO per message for the
        # whole failure. Single-path (RC) replies on the data's own EV.
        # The data arrives on the *peer's* EVs (each side of a connection may have its own base,
        # TransportConfig.for_connection): paired and single-path replies leave on those, spray
        # replies on this side's own. `reply_planes`: the plane of each EV a reply may take.
        self._spray_replies = cfg.reply_ev == "spray" and not self.go_back_n
        peer = cfg if peer_ev_base is None else replace(cfg, ev_base=peer_ev_base, ev_seed=None)
        self._pairs = {} if self.go_back_n or self._spray_replies else peer.reply_pairs()
        self._reply_evs = cfg.ev_values()
        self.reply_planes = (cfg if self._spray_replies else peer).ev_planes()
        self._reply_next = 0
        self._trimmed_dscp = cfg.trimmed_dscp  # the fabric's: a switch re-marked the packet
        self._tos_control = cfg.tos_control

    def _reply_ev(self, data_ev: int) -> int:
        if not self._spray_replies:
            return self._pairs.get(data_ev, data_ev)
        evs = self._reply_evs
        ev = evs[self._reply_next]
        self._reply_next = (self._reply_next + 1) % len(evs)
        return ev

    # -- data --------------------------------------------------------------------------------

    def on_data(self, raw: bytes, pkt: DataPacket, tos: int, now: float, out: list) -> None:
        """``out`` collects (ev, udp_payload, tos) control packets to send back."""
        st = self.stats
        drops = st.drops
        if pkt.tver != 0:
            drops["bad_version"] += 1
            return
        psn = pkt.psn
        d = psn_diff(psn, self.rcv_nxt)
        ce = (tos & 3) == ECN_CE
        if d < 0 or (d > 0 and (self._bits >> d) & 1):
            st.counters["dup_data"] += 1
            self.flush_ack(out, now)
            self._send_ack(pkt.ev, psn, pkt.send_ts, int(ce), 0, 0, out, dup=True)
            return
        if d >= self.cfg.window_psns:
            drops["out_of_window"] += 1
            if not self.go_back_n:
                nack = self._nack(psn, pkt.ev, NACK_OUT_OF_WINDOW, pkt.send_ts)
                out.append((self._reply_ev(pkt.ev), nack, self._tos_control))
            return
        if (tos >> 2) == self._trimmed_dscp or pkt.trimmed:
            st.counters["trimmed_rx"] += 1
            if self.go_back_n:
                drops["trimmed"] += 1  # RoCE RC: a cut packet fails its ICRC and is dropped
                self._maybe_gbn_nak(pkt, d, now, out)
            else:
                st.counters["nack_tx"] += 1
                nack = self._nack(psn, pkt.ev, NACK_TRIMMED, pkt.send_ts)
                out.append((self._reply_ev(pkt.ev), nack, self._tos_control))
            return
        if not codec.crc_ok(raw, pkt.pkt_crc):
            drops["bad_crc"] += 1
            return
        if self.go_back_n and d != 0:
            drops["out_of_order"] += 1
            self._maybe_gbn_nak(pkt, d, now, out)
            return
        msg_id, msg_len, offset, plen = pkt.msg_id, pkt.msg_len, pkt.offset, pkt.payload_len
        if msg_len > self.cfg.max_message_bytes:
            drops["message_too_big"] += 1
            return
        if ((msg_id - self._done_below) & _U32) >= 1 << 31 or msg_id in self._done:
            drops["stale_message"] += 1  # a new PSN for a delivered message: forged or corrupt
            return
        r = self._reasm.get(msg_id)
        if r is None:
            if offset + plen > msg_len:
                drops["bad_length"] += 1
                return
            if self._reserved + msg_len > self.cfg.max_reassembly_bytes:
                drops["no_buffer"] += 1
                return
            r = Reassembly(msg_len, pkt.msg_crc)
        elif r.msg_len != msg_len or r.msg_crc != pkt.msg_crc:
            drops["inconsistent_message"] += 1
            return
        if not r.fits(offset, plen):
            drops["bad_length" if offset + plen > msg_len else "overlap"] += 1
            return
        # Accepted: consume the PSN, place, acknowledge.
        if msg_id not in self._reasm:
            self._reasm[msg_id] = r
            self._reserved += msg_len
        reorder = self.cfg.ack_reorder
        hi = self._bits.bit_length() - 1  # the furthest PSN already here, from rcv_nxt (-1: none)
        # A packet that fills the hole at rcv_nxt while packets `reorder` or more PSNs beyond it
        # are already here: reordering past the threshold, which the sender may have taken
        # for a loss (with the threshold at 1, any packet beyond it).
        fills_gap = d == 0 and hi >= reorder
        if self._pending is not None and (d >= reorder or ce != self._ce_state):
            # The run pending is answered first, on its own, before this packet changes what
            # an ACK says: its ACK acknowledges exactly the run.
            self.flush_ack(out, now)
        if d < hi:
            # Arrived behind a later PSN: out of order, by `hi - d` PSNs (the REPS paper's
            # out-of-order ratio and distance).
            st.counters["ooo_rx"] += 1
            if hi - d > st.counters["ooo_max_psns"]:
                st.counters["ooo_max_psns"] = hi - d
        self._mark(d)
        r.place(offset, pkt.payload)
        st.counters["data_rx"] += 1
        st.counters["bytes_placed"] += plen
        if r.complete:
            self._complete(msg_id, r, now)
        if d >= reorder or self.cfg.ack_every == 1:
            self._send_ack(pkt.ev, psn, pkt.send_ts, int(ce), 0, 0, out)
            return
        urgent = fills_gap or pkt.ackreq or pkt.flags & DATA_FLAG_RETX or offset + plen == msg_len
        self._coalesce(pkt.ev, psn, pkt.send_ts, ce, bool(urgent), out, now)

    def _mark(self, d: int) -> None:
        self._bits |= 1 << d
        if d == 0:
            bits = self._bits
            run = (~bits & (bits + 1)).bit_length() - 1  # trailing ones
            self._bits = bits >> run
            self.rcv_nxt = psn_add(self.rcv_nxt, run)
            self.gbn_nak_psn = None

    def _complete(self, msg_id: int, r: Reassembly, now: float) -> None:
        del self._reasm[msg_id]
        self._reserved -= r.msg_len
        self._done.add(msg_id)
        while self._done_below in self._done:
            self._done.remove(self._done_below)
            self._done_below = (self._done_below + 1) & _U32
        if not r.verify():
            self.stats.drops["message_crc"] += 1  # never delivered; see docs/transport.md
            return
        self.msn = (self.msn + 1) & PSN_MASK
        self.stats.counters["messages_delivered"] += 1
        self.stats.counters["bytes_delivered"] += r.msg_len
        self.deliveries.append(Delivery(self.local_qp, msg_id, bytes(r.buf), now))

    def _maybe_gbn_nak(self, pkt: DataPacket, d: int, now: float, out: list) -> None:
        if d > 0 and self.gbn_nak_psn == self.rcv_nxt:
            # RC NAKs a gap once: if the resend of rcv_nxt is lost too, what follows it is
            # dropped in silence until the sender's timeout (tests/test_go_back_n_stall.py).
            self.stats.counters["gbn_held"] += 1
            return
        if d > 0:
            self.gbn_nak_psn = self.rcv_nxt
            self.gbn_nak_at = now
            self.stats.counters["nack_tx"] += 1
            out.append(
                (
                    pkt.ev,
                    self._nack(self.rcv_nxt, pkt.ev, NACK_SEQUENCE, pkt.send_ts),
                    self._tos_control,
                )
            )

    # -- ACKs --------------------------------------------------------------------------------

    def _coalesce(
        self, ev: int, psn: int, ts: int, ce: bool, urgent: bool, out: list, now: float
    ) -> None:
        """Add a packet to the run a coalesced ACK answers; send it when due.

        With ``ack_reorder`` 1 a run is in order (each packet at the next expected PSN); with a
        larger threshold (QUIC ACK frequency's Reordering Threshold) a run may also hold packets
        that arrived fewer than ``ack_reorder`` PSNs beyond the hole: under per-packet spraying
        nearly every packet arrives so, and an ACK each made coalescing save ~5 %. They all lie
        in the SACK bitmap's first block (``ack_reorder`` <= 64), so the run's ACK reports them.

        A run has one CE state (DCTCP, RFC 8257 3.2): a change has sent the old run's ACK at once
        (`on_data`), so an ACK's ECN echo holds for every packet it answers and the sender can
        mark each of their EVs; and the first CE-marked packet after clean ones is ACKed at
        once too (the QUIC ACK frequency draft: that transition is what the sender must react
        to at once). ``urgent`` packets (a gap filled, a retransmission, a message's last
        packet, a packet whose sender set the BTH AckReq bit) end the run at once: the sender's
        spurious-loss test, its tail and its window need their ACK now.
        """
        if ce != self._ce_state:
            self._ce_state = ce
            urgent = urgent or ce
        self._pending = (ev, psn, ts, now)
        self._pending_count += 1
        self._pending_ce = ce
        if urgent or self._pending_count >= self.cfg.ack_every:
            self.flush_ack(out, now)
        elif self.ack_deadline is None:
            self.ack_deadline = now + self.cfg.ack_delay

    def flush_ack(self, out: list, now: float) -> None:
        """Send the pending run's ACK (if any): it names its latest packet, how many in-order
        packets before it it answers, and how long that packet's ACK was held."""
        if self._pending is None:
            return
        ev, psn, ts, at = self._pending
        n = self._pending_count
        ce = n if self._pending_ce else 0
        self._pending = None
        self._pending_count = 0
        self._pending_ce = False
        self.ack_deadline = None
        held = min(_U32, max(0, round((now - at) * 1e9)))
        self._send_ack(ev, psn, ts, ce, n - 1, held, out)

    def _send_ack(
        self,
        ev: int,
        psn: int,
        ts: int,
        ce_count: int,
        coalesced: int,
        held_ns: int,
        out: list,
        dup: bool = False,
    ) -> None:
        d = psn_diff(psn, self.rcv_nxt)
        # The 64-PSN block holding the triggering PSN (first block if it is behind rcv_nxt).
        block = (d - 1) // SACK_BITS if d > 0 else 0
        rel = 1 + block * SACK_BITS
        bitmap = (self._bits >> rel) & _SACK_MASK
        self.stats.counters["ack_tx"] += 1
        payload = codec.encode_ack(
            self.remote_qp,
            psn,
            self.rcv_nxt,
            psn_add(self.rcv_nxt, rel),
            bitmap,
            ev,
            min(255, ce_count),
            ts,
            SACK_FLAG_DUP if dup else 0,
            self.msn,
            coalesced,
            held_ns,
        )
        out.append((self._reply_ev(ev), payload, self._tos_control))

    def _nack(self, psn: int, ev: int, reason: int, ts: int) -> bytes:
        return codec.encode_nack(self.remote_qp, psn, self.rcv_nxt, ev, reason, ts, self.msn)

    # -- probes ------------------------------------------------------------------------------

    def on_probe(self, pkt: ProbePacket, out: list) -> None:
        if pkt.tver != 0:
            self.stats.drops["bad_version"] += 1
            return
        self.stats.counters["probe_rx"] += 1
        reply = codec.encode_probe_ack(self.remote_qp, pkt.ev, pkt.probe_seq, pkt.send_ts)
        out.append((self._reply_ev(pkt.ev), reply, self._tos_control))

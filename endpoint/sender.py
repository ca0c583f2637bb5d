"""Sender half of a QP: packetise messages, spray them over EVs, react to ACKs and NACKs.

Each turn it picks an EV, builds the packet and hands it to its loss recovery
(`endpoint.recovery`, which decides what is lost, runs the timers and retires EVs); what
recovery declares lost comes back here to be resent.
"""

from __future__ import annotations

from collections import deque

from endpoint import codec
from endpoint.codec import AckPacket, NackPacket, ProbeAckPacket
from endpoint.config import Mode, TransportConfig
from endpoint.dcqcn import Dcqcn
from endpoint.ev import RESEND_RTT_FACTOR, EVSet
from endpoint.ev_path import EVPath, EVState
from endpoint.nscc import Nscc
from endpoint.outgoing import INFLIGHT, LOST, OutMessage, OutPacket
from endpoint.psn import PSN_MASK, psn_add, psn_diff
from endpoint.recovery import LAST_RESORT, Recovery
from endpoint.rtt import RttEstimator
from endpoint.stats import ConnectionStats, EVTransition, MessageCompletion
from endpoint.wire import (
    DATA_FLAG_RETX,
    NACK_OUT_OF_WINDOW,
    NACK_SEQUENCE,
    NACK_TRIMMED,
)

LOST_COPIES_KEPT = 4096  # first copies of resent packets remembered (oldest forgotten)
PACE_BURST = 2  # packets of rate credit a late DCQCN pacer may spend at once
_MAX_RTT_SAMPLE = 30.0  # seconds; a larger "RTT" comes from a forged or corrupt timestamp


class Sender:
    """Send side of one QP. ``poll_transmit`` appends (ev, plane, payload, tos) tuples."""

    def __init__(
        self,
        cfg: TransportConfig,
        local_qp: int,
        remote_qp: int,
        start_psn: int,
        stats: ConnectionStats,
        first_msg_id: int = 0,
    ) -> None:
        self.cfg = cfg
        self._tos_data, self._tos_control = cfg.tos_data, cfg.tos_control  # the fabric's DSCPs
        self.local_qp = local_qp
        self.remote_qp = remote_qp
        self.stats = stats
        self.evs = EVSet(cfg, on_change=self._ev_changed)
        # RoCE NICs pace each QP at a DCQCN rate; MRC runs NSCC's window.
        self.cc = Dcqcn(cfg) if cfg.mode is Mode.ROCE else Nscc(cfg)
        self._rate_based = cfg.mode is Mode.ROCE
        self.rtt = RttEstimator(cfg.rto_initial, cfg.rto_min, cfg.rto_max)
        self.next_psn = start_psn & PSN_MASK
        self.snd_una = self.next_psn
        self.recovery = Recovery(cfg, stats, self.evs, self.rtt, self.cc)
        self.policy = self.recovery.policy
        self.unacked: dict[int, OutPacket] = {}
        self.pending: deque[OutMessage] = deque()  # messages with bytes not yet packetised
        self.open_messages = 0
        self.next_msg_id = first_msg_id & 0xFFFFFFFF
        self._tail_copies = cfg.tail_copies if self.policy.failover else 1
        # Packets sent since the last one that asked for an ACK (_ack_request).
        self._unrequested = 0
        self._ack_every = cfg.ack_every
        self._quick_acks = 0  # packets still to ask for an ACK each, after an ACK went missing
        # Below one packet of window the sender paces: one packet per srtt * size / cwnd.
        self.pace_at = float("-inf")
        self._pace_blocked = False
        self.completions: list[MessageCompletion] = []
        # PSN -> (send ts in ns, EV) of a first copy declared lost and resent
        self._lost_copies: dict[int, tuple[int, int]] = {}
        values = cfg.ev_values()
        self.single_ev = values[cfg.single_path_ev_index]
        self.single_plane = cfg.single_path_ev_index % cfg.planes

    # -- application ---------------------------------------------------------------------------

    def send_message(self, data: bytes, now: float) -> int:
        msg_id = self.next_msg_id
        self.next_msg_id = (msg_id + 1) & 0xFFFFFFFF
        self.pending.append(OutMessage(msg_id, bytes(data), now))
        self.open_messages += 1
        self.stats.counters["messages_queued"] += 1
        return msg_id

    @property
    def idle(self) -> bool:
        """Nothing queued and nothing unacknowledged."""
        return not self.pending and not self.unacked

    @property
    def inflight(self) -> dict[int, OutPacket]:
        """Packets sent and neither acknowledged nor declared lost, oldest transmission first."""
        return self.recovery.inflight

    @property
    def inflight_bytes(self) -> int:
        return self.recovery.inflight_bytes

    # -- transmit ------------------------------------------------------------------------------

    def poll_transmit(self, now: float, out: list, limit: int | None = None) -> int:
        """Append what may leave now to `out`: probes, then resends, then new data.

        `limit` caps the data packets (resends and new) of this call, and the count is
        returned: a paced endpoint asks only for what its pacer lets go now, because a
        packet's send timestamp is taken here, and time it then waited in the pacer would
        count as RTT (`endpoint.pacer`).
        """
        rec = self.recovery
        if rec.qp_error:
            return 0  # roce: the QP is in error, nothing leaves
        rec.judge_losses(now)
        if rec.probe_queue:
            self._send_probes(rec.probe_queue, now, out)
            rec.probe_queue.clear()
        self._pace_blocked = False
        retx = rec.retx
        sent = 0
        cap = -1 if limit is None else limit
        while retx:
            if sent == cap:
                return sent
            p = retx[0]
            if p.state != LOST:
                retx.popleft()
                continue
            if not self._may_send(p.length, now) and not rec.timer_sends:
                return sent
            rec.timer_sends = 0  # the timer's resend is on its way
            retx.popleft()
            self._transmit(p, now, out)
            sent += 1
        rec.timer_sends = 0  # nothing left to resend: a credit is not kept for later
        window = self.cfg.window_psns
        max_payload = self.cfg.max_payload
        pending = self.pending
        while pending:
            if sent == cap:
                return sent
            if psn_diff(self.next_psn, self.snd_una) >= window:
                self.stats.counters["window_limited"] += 1
                return sent
            msg = pending[0]
            length = min(max_payload, msg.size - msg.next_offset)
            if not self._may_send(length, now):
                return sent
            p = OutPacket(self.next_psn, msg, msg.next_offset, length)
            self.next_psn = psn_add(self.next_psn, 1)
            msg.next_offset += length
            msg.outstanding += 1
            if msg.next_offset >= msg.size:
                pending.popleft()
            self.unacked[p.psn] = p
            self._transmit(p, now, out)
            sent += 1
        return sent

    def _send_probes(self, paths: list[EVPath], now: float, out: list) -> None:
        rec = self.recovery
        for p in paths:
            payload = codec.encode_probe(self.remote_qp, p.ev, rec.next_probe_seq(), int(now * 1e9))
            self.stats.counters["probe_tx"] += 1
            out.append((p.ev, p.plane, payload, self._tos_control))

    def _may_send(self, size: int, now: float) -> bool:
        if self._rate_based:
            return self._may_send_paced(size, now)
        cwnd = self.cc.cwnd
        inflight_bytes = self.recovery.inflight_bytes
        if inflight_bytes + size <= cwnd:
            return True
        if inflight_bytes:
            return False
        # The window is below one packet (heavy incast): pace instead of stalling or bursting.
        if now >= self.pace_at:
            self.pace_at = now + self.rtt.pacing_rtt(self.cfg.rto_initial) * max(size, 1) / cwnd
            return True
        self._pace_blocked = True
        return False

    def _may_send_paced(self, size: int, now: float) -> bool:
        """DCQCN's pacer: one packet per size / rate, with at most PACE_BURST packets' worth of
        credit kept from a late call (the endpoint loop does not wake exactly on time)."""
        if self.recovery.inflight_bytes + size > self.cc.cwnd:
            return False
        if now < self.pace_at:
            self._pace_blocked = True
            return False
        gap = size * 8.0 / self.cc.rate_bps
        self.pace_at = max(self.pace_at, now - PACE_BURST * gap) + gap
        self.cc.on_sent(size, now)
        return True

    def _transmit(self, p: OutPacket, now: float, out: list) -> None:
        if self.policy.single_path:
            ev, plane = self.single_ev, self.single_plane
        else:
            path = self._pick_path(p)
            ev, plane = path.ev, path.plane
            path.packets_sent += 1
            path.last_sent_at = now
        flags = 0
        if p.transmissions:
            flags = DATA_FLAG_RETX
            self.stats.retransmits[p.reason] += 1
            if p.reason == "loss" and p.transmissions == 1:
                lost = self._lost_copies
                lost[p.psn] = (p.ts_ns, p.ev)  # the copy declared lost, should it arrive after all
                if len(lost) > LOST_COPIES_KEPT:
                    del lost[next(iter(lost))]
        p.transmissions += 1
        p.ev, p.plane = ev, plane
        p.sent_at = now
        p.ts_ns = int(now * 1e9)
        self.recovery.on_sent(p)
        msg = p.msg
        payload = codec.encode_data(
            self.remote_qp,
            p.psn,
            p.offset,
            msg.msg_id,
            msg.size,
            ev,
            p.ts_ns,
            msg.crc,
            msg.data[p.offset : p.offset + p.length],
            flags,
            self._ack_request(flags),
        )
        c = self.stats.counters
        c["data_tx"] += 1
        c["data_bytes_tx"] += p.length
        out.append((ev, plane, payload, self._tos_data))
        if self._tail_copies > 1 and p.reason in LAST_RESORT:
            self._send_copies(p, payload, now, out)

    def _ack_request(self, flags: int) -> int:
        """The BTH AckReq bit of the packet just sent: 1 asks a coalescing receiver to ACK it at
        once, ending its run (as an IBA requester sets it on the packets it needs answered, or
        a QUIC sender sends IMMEDIATE_ACK). Asked for on a resend, on the last packet queued
        (nothing more can leave until its ACK comes), after `_run_budget` packets, and on every
        packet for a window after an ACK went missing (`on_ack`): a run's ACK carries several
        packets' worth of window, and while a reverse path eats ACKs, one per packet keeps the
        window moving as it does without coalescing (a quarter of the reply EVs black-holed
        made a 10 Gbps bulk 23-28 % slower than with an ACK per packet; within 3 % with this).
        """
        if flags or not (self.pending or self.recovery.retx):
            self._unrequested = 0
            return 1
        self._unrequested += 1
        if self._quick_acks > 0:
            self._quick_acks -= 1
            self._unrequested = 0
            return 1
        if self._unrequested >= self._run_budget():
            self._unrequested = 0
            return 1
        return 0

    def _run_budget(self) -> int:
        """How many packets a receiver's run may hold: `ack_every` (the peer's, as both ends of
        a connection share a config), but no more than half the window, so that at least two
        ACKs come back per window, as the QUIC ACK frequency draft advises a sender to keep
        its ack-eliciting threshold within the window. Why: a receiver waiting for four
        packets that a smaller window never sends held every ACK for `ack_delay`; and a
        window of 1.5 BDPs of two packets (simnet at 100 Mbps, 20 µs paths) answered in
        pairs idled the link for 47 µs per pair. That bulk (tests/test_endpoint_process.py)
        ran at 45 %, then 80 % of the link, and at 100 % with this budget."""
        if self._ack_every == 1:
            return 1
        return max(1, min(self._ack_every, int(self.cc.cwnd // (2 * self.cfg.max_payload))))

    def _pick_path(self, p: OutPacket) -> EVPath:
        """The EV of a spraying mode's packet: a resend avoids the EV it was lost on."""
        rec = self.recovery
        if p.transmissions and self.policy.failover:
            base = self.rtt.min_rtt
            limit = RESEND_RTT_FACTOR * base if base is not None else float("inf")
            return self.evs.pick_resend(exclude=p.ev, rtt_limit=limit)
        if rec.sweep_until is not None:
            return self.evs.pick(proven_since=rec.sweep_since)
        return self.evs.pick(exclude=p.ev if p.transmissions else None)

    def _send_copies(self, p: OutPacket, payload: bytes, now: float, out: list) -> None:
        """Extra copies of a last-resort (RTO or tail-probe) resend, each on another EV.

        Such a resend has no evidence of a working round trip to go on: right after a failure
        the EVs acknowledged last were acknowledged before it, and with a spine link dead both
        ways 3 in 4 round trips of a 2-spine fabric are gone, so one copy needed four tries on
        average, an RTO each. ``tail_copies`` copies on distinct EVs all die with probability
        0.75^k. They cost a few packets per tail loss; the receiver drops the duplicates. The
        packet keeps the first copy's EV, whose retirement a later loss would decide.
        """
        c = self.stats.counters
        used = {p.ev}
        for _ in range(self._tail_copies - 1):
            path = self.evs.pick(exclude=p.ev)
            if path.ev in used or path.state is EVState.FAILED or path.state is EVState.DENIED:
                continue
            used.add(path.ev)
            path.packets_sent += 1
            path.last_sent_at = now
            c["tail_copies_tx"] += 1
            out.append((path.ev, path.plane, payload, self._tos_data))

    # -- feedback ------------------------------------------------------------------------------

    def on_ack(self, a: AckPacket, now: float) -> None:
        st = self.stats
        window = self.cfg.window_psns
        dc = psn_diff(a.cum_psn, self.snd_una)
        if psn_diff(a.cum_psn, self.next_psn) > 0 or dc < -window:
            st.drops["bad_ack"] += 1  # acknowledges PSNs never sent
            return
        st.counters["ack_rx"] += 1
        rtt = self._rtt_sample(a.ts_echo, a.ack_delay, now)
        direct = a.psn
        unacked = self.unacked
        # What this ACK acknowledges that was not acknowledged before: the PSNs its cumulative
        # PSN passes, then its SACK bitmap's (found before they are marked: a coalesced ACK's
        # run is picked among them, and their EVs get the trigger's feedback).
        newly: list[OutPacket] = []
        if dc > 0:
            base = self.snd_una
            for i in range(dc):
                p = unacked.get(psn_add(base, i))
                if p is not None:
                    newly.append(p)
        bits = a.sack_bitmap
        una = a.cum_psn if dc > 0 else self.snd_una
        if bits and -window <= psn_diff(a.sack_base, una) <= window:
            base = a.sack_base
            while bits:
                low = bits & -bits
                p = unacked.get(psn_add(base, low.bit_length() - 1))
                if p is not None:
                    newly.append(p)
                bits ^= low
        trigger = unacked.get(direct)
        n = a.coalesced
        run = self._run_members(newly, trigger, n) if n else []
        self._spurious_by_echo(a, run, now)
        acked = 0
        newest = float("-inf")
        # Packets acknowledged by another packet's ACK (cumulative or SACK), not their own.
        in_run = {id(q) for q, _ in run}
        covered: list[OutPacket] = []
        for p in newly:
            if p.psn not in unacked:
                continue  # named twice (a forged ACK's bitmap overlapping its cumulative PSN)
            acked += self._acked(p, now)
            if p is not trigger and id(p) not in in_run:
                covered.append(p)
            if p.transmissions == 1 and p.sent_at > newest:
                newest = p.sent_at
        if trigger is not None and trigger.psn in unacked:
            acked += self._acked(trigger, now)
        if dc > 0:
            self.snd_una = a.cum_psn
        if rtt is not None:
            newest = max(newest, a.ts_echo / 1e9)  # the copy this ACK answers left then
        while self.snd_una != self.next_psn and self.snd_una not in unacked:
            self.snd_una = psn_add(self.snd_una, 1)
        # The round trip proven is the trigger's alone: the ACK came back on its EV's reply path.
        ev_path = self.evs.by_ev.get(a.ev_echo)
        if ev_path is not None:
            if rtt is not None:
                ev_path.last_ack_rtt = rtt
            recent = self.evs.recent
            if not recent or recent[-1] is not ev_path:
                recent.append(ev_path)
        self.recovery.on_ack(ev_path, a.ts_echo / 1e9, covered, acked > 0, newest, rtt, now)
        if covered and self._ack_every > 1:  # another ACK went missing (or is late)
            self._quick_acks = int(self.cc.cwnd // self.cfg.max_payload)
        ce = a.ecn_echo > 0
        if ce:
            st.counters["ecn_echo_rx"] += 1
        self._ev_feedback(a.ev_echo, run, ce, now)
        if acked:
            self.cc.on_ack(acked, rtt, ce, now, self.recovery.inflight_bytes)

    def _run_members(
        self, newly: list[OutPacket], trigger: OutPacket | None, n: int
    ) -> list[tuple[OutPacket, int | None]]:
        """The packets a coalesced ACK answers besides its trigger: the ``n`` highest PSNs among
        those it newly acknowledges (``newly``), each with the EV its arriving copy took (None
        if that is no longer known). With no ACK lost these are exactly what this ACK newly
        acknowledges; a lost ACK's packets are older (a run holds first copies sent in PSN
        order, and packets at most ``ack_reorder`` apart), so they are left as covered. Only
        first copies join a run: the receiver ends a run at once with any retransmission."""
        base = self.snd_una
        others = [p for p in newly if p is not trigger]
        if len(others) > n:
            others.sort(key=lambda p: psn_diff(p.psn, base))
            others = others[-n:]
        out: list[tuple[OutPacket, int | None]] = []
        lost = self._lost_copies
        for p in reversed(others):
            if p.transmissions == 1:
                out.append((p, p.ev))
            else:
                copy = lost.get(p.psn)
                out.append((p, None if copy is None else copy[1]))
        return out

    def _spurious_by_echo(
        self, a: AckPacket, run: list[tuple[OutPacket, int | None]], now: float
    ) -> None:
        """Loss declarations this ACK proves wrong by naming a copy sent before them.

        The trigger: declared lost, and now an ACK for the copy sent before that declaration --
        while the packet waits for its resend, or after the resend (even after the resend's own
        ACK): the loss was reordering (Recovery.on_spurious). (The copy stays remembered until
        its own ACK or trim NACK comes, or LOST_COPIES_KEPT newer ones push it out: the resend's
        ACK often comes first.) A coalesced run's other packets are first copies (see
        `_run_members`): one whose first copy was declared lost and resent proves the same.
        A packet whose only copy is acknowledged while its resend waits is `_acked`'s case.
        """
        direct = a.psn
        p = self.unacked.get(direct)
        copy = self._lost_copies.get(direct)
        if p is not None and p.reason == "loss" and p.state == LOST and p.transmissions > 1:
            self.recovery.on_spurious(a.ev_echo, now)
        elif copy is not None and copy[0] == a.ts_echo:
            del self._lost_copies[direct]
            self.recovery.on_spurious(a.ev_echo, now)
        for q, _ in run:
            copy = self._lost_copies.pop(q.psn, None)
            if copy is not None:
                self.recovery.on_spurious(copy[1], now)

    def _ev_feedback(
        self, ev: int, run: list[tuple[OutPacket, int | None]], ce: bool, now: float
    ) -> None:
        """ECN or clean-ACK feedback to the EV of every packet the ACK answers: the forward
        paths they took (a run's packets share one CE state: the receiver sends a run's ACK
        when the state changes). With one ACK per packet each EV had this from its own ACK; a
        coalesced ACK that fed back only its trigger's EV starved the rest (a congested EV
        recovered `ack_every` times slower, REPS recycled one EV in `ack_every`). What the ACK
        says of a round trip -- its way back -- holds for the trigger's EV alone (`on_ack`)."""
        evs = self.evs
        for _, run_ev in reversed(run):
            if run_ev is not None:
                if ce:
                    evs.on_congestion(run_ev, now, "ecn")
                else:
                    evs.on_clean_ack(run_ev, now)
        if ce:
            evs.on_congestion(ev, now, "ecn")
        else:
            evs.on_clean_ack(ev, now)

    def _rtt_sample(self, ts_echo: int, held_ns: int, now: float) -> float | None:
        """The round trip of the copy an ACK answers, without the time the receiver held the
        ACK on purpose (QUIC's ACK Delay): a coalesced ACK waits up to ``ack_delay``, and that
        wait counted as queueing made NSCC cut the window and the RTO and reorder allowance
        grow. A hold longer than the whole round trip is not believed."""
        rtt = now - ts_echo / 1e9
        if not 0.0 <= rtt <= _MAX_RTT_SAMPLE:
            return None
        held = held_ns / 1e9
        if held <= rtt:
            rtt -= held
        self.rtt.sample(rtt)
        self.stats.rtt_samples.append((now, rtt))
        return rtt

    def _acked(self, p: OutPacket, now: float) -> int:
        """Mark ``p`` delivered; returns its bytes. A packet declared lost whose only copy is
        acknowledged, by whatever ACK, was reordered, not lost (Recovery.on_spurious): a
        coalesced or cumulative ACK may be the only one that ever names it."""
        if p.state == LOST and p.reason == "loss" and p.transmissions == 1:
            self.recovery.on_spurious(p.ev, now)
        del self.unacked[p.psn]
        self.recovery.on_acked(p)
        msg = p.msg
        msg.outstanding -= 1
        if msg.outstanding == 0 and msg.next_offset >= msg.size and not msg.done:
            msg.done = True
            self.open_messages -= 1
            done = MessageCompletion(self.local_qp, msg.msg_id, msg.size, msg.started, now)
            self.completions.append(done)
            self.stats.completions.append(done)
            self.stats.counters["messages_acked"] += 1
        return p.length

    def on_nack(self, n: NackPacket, now: float) -> None:
        st = self.stats
        st.counters["nack_rx"] += 1
        if n.reason == NACK_SEQUENCE:
            self._on_sequence_nak(n, now)
            return
        p = self.unacked.get(n.psn)
        if p is None or p.state != INFLIGHT or p.ts_ns != n.ts_echo:
            st.counters["stale_nack"] += 1  # already resent, acked, or forged
            if n.reason == NACK_TRIMMED and self._trimmed_after_loss(n, p):
                # RACK declared the packet lost (and retired its EV) before the NACK of its
                # trim came back: the packet was cut by a full queue on a live path. The EV is
                # congested, not dead (Recovery.on_late_trim).
                self.recovery.on_late_trim(n.ev, now)
            return
        if n.reason == NACK_TRIMMED:
            st.counters["trim_nack_rx"] += 1
            rtt = now - n.ts_echo / 1e9
            if 0.0 <= rtt <= _MAX_RTT_SAMPLE:
                self.rtt.observe_base(rtt)
            self.recovery.declare_lost(p, "nack_trim", now, front=True)
            self.cc.on_trim(p.length, now, self.recovery.inflight_bytes)
            self.evs.on_congestion(p.ev, now, "trim")
        elif n.reason == NACK_OUT_OF_WINDOW:
            self.recovery.declare_lost(p, "nack_window", now)
        else:
            st.drops["bad_nack_reason"] += 1

    def _trimmed_after_loss(self, n: NackPacket, p: OutPacket | None) -> bool:
        """Is `n` the trim NACK of a copy that RACK had declared lost?"""
        if p is not None and p.reason == "loss" and p.state == LOST and p.ts_ns == n.ts_echo:
            return True
        copy = self._lost_copies.get(n.psn)
        if copy is not None and copy[0] == n.ts_echo:
            del self._lost_copies[n.psn]
            return True
        return False

    def _on_sequence_nak(self, n: NackPacket, now: float) -> None:
        # RC semantics: a NAK acknowledges everything before its PSN, then asks for the rest.
        if psn_diff(n.psn, self.next_psn) > 0 or psn_diff(n.psn, self.snd_una) < 0:
            self.stats.counters["stale_nack"] += 1
            return
        base = self.snd_una
        for i in range(psn_diff(n.psn, base)):
            p = self.unacked.get(psn_add(base, i))
            if p is not None:
                self._acked(p, now)
        self.snd_una = n.psn
        self.recovery.on_sequence_nak(n.ts_echo / 1e9, self.snd_una, now)

    def on_probe_ack(self, pa: ProbeAckPacket, now: float) -> None:
        self.recovery.on_probe_ack(pa.ev_echo, pa.probe_seq, pa.ts_echo / 1e9, now)

    # -- timers --------------------------------------------------------------------------------

    # The recovery's RTO and reorder allowance, where the tests read them.
    def _rto(self) -> float:
        return self.recovery.rto()

    def _reorder_allowance(self) -> float:
        return self.recovery.reorder_allowance()

    def next_timer(self) -> float | None:
        if self.recovery.qp_error:
            return None  # roce: a QP in error has nothing left to time
        t = self.recovery.next_timer()
        if self._pace_blocked and (t is None or self.pace_at < t):
            t = self.pace_at
        return t

    def on_timer(self, now: float) -> None:
        self.recovery.on_timer(now, self.snd_una)

    # -- stats ---------------------------------------------------------------------------------

    def _ev_changed(self, now: float, ev: int, old: EVState, new: EVState, reason: str) -> None:
        last_tx = None
        if new is EVState.FAILED:
            path = self.evs.by_ev.get(ev)
            if path is not None and path.last_sent_at > float("-inf"):
                last_tx = path.last_sent_at
        self.stats.ev_transitions.append(
            EVTransition(now, ev, old.value, new.value, reason, last_tx)
        )

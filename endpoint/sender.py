"""Sender half of a QP: packetise messages, spray them over EVs, recover what does not arrive.

Recovery by mode (docs/transport.md has the full story):

* ``mrc`` — every ACK carries a cumulative PSN, the PSN it answers and a 64-bit SACK block;
  only packets not covered are ever resent (never go-back-N). A trim NACK resends that PSN at
  once on a different EV. A packet is *lost* when a packet sent more than the reorder allowance
  after it has been acknowledged (RACK-style, time based: spraying reorders by design); a loss
  retires its EV at once and moves that EV's other packets in flight to healthy EVs. A data RTO
  is the last resort. FAILED EVs are probed; an answered probe re-admits them.
* ``spray-no-failover`` — the same, except that no EV is ever retired.
* ``single-path`` — one fixed EV; the receiver takes PSNs in order only and sends one
  "sequence" NAK per gap; the sender rewinds (go-back-N), and a long RC-style timeout rewinds
  when nothing comes back at all.
"""

from __future__ import annotations

import zlib
from collections import deque

from endpoint import codec
from endpoint.cc import WindowCC
from endpoint.codec import AckPacket, NackPacket, ProbeAckPacket
from endpoint.config import Mode, TransportConfig
from endpoint.ev import EVSet, EVState
from endpoint.psn import PSN_MASK, psn_add, psn_diff
from endpoint.rtt import RttEstimator
from endpoint.stats import ConnectionStats, EVTransition, MessageCompletion
from endpoint.wire import (
    DATA_FLAG_RETX,
    NACK_OUT_OF_WINDOW,
    NACK_SEQUENCE,
    NACK_TRIMMED,
)

_INFLIGHT, _LOST, _ACKED = 0, 1, 2
_MAX_RTT_SAMPLE = 30.0  # seconds; a larger "RTT" comes from a forged or corrupt timestamp
_LAST_RESORT = ("rto", "tlp")  # resends made without any ACK evidence (see _send_copies)
_TLP_MIN = 2e-3  # tail-loss probe timeout floor (the PTO is max(2 srtt, this))


class OutMessage:
    __slots__ = ("msg_id", "data", "crc", "size", "next_offset", "outstanding", "started", "done")

    def __init__(self, msg_id: int, data: bytes, now: float) -> None:
        self.msg_id = msg_id
        self.data = memoryview(data)
        self.crc = zlib.crc32(data)
        self.size = len(data)
        self.next_offset = 0
        self.outstanding = 0  # packets created and not yet acknowledged
        self.started = now
        self.done = False


class OutPacket:
    __slots__ = (
        "psn",
        "msg",
        "offset",
        "length",
        "ev",
        "plane",
        "sent_at",
        "ts_ns",
        "transmissions",
        "state",
        "reason",
    )

    def __init__(self, psn: int, msg: OutMessage, offset: int, length: int) -> None:
        self.psn = psn
        self.msg = msg
        self.offset = offset
        self.length = length
        self.ev = -1
        self.plane = 0
        self.sent_at = 0.0
        self.ts_ns = 0
        self.transmissions = 0
        self.state = _INFLIGHT
        self.reason = ""


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
        self.mode = cfg.mode
        self._tos_data, self._tos_control = cfg.tos_data, cfg.tos_control  # the fabric's DSCPs
        self.local_qp = local_qp
        self.remote_qp = remote_qp
        self.stats = stats
        self.evs = EVSet(cfg, on_change=self._ev_changed)
        self.cc = WindowCC(cfg)
        self.rtt = RttEstimator(cfg.rto_initial, cfg.rto_min, cfg.rto_max)
        self.next_psn = start_psn & PSN_MASK
        self.snd_una = self.next_psn
        self.unacked: dict[int, OutPacket] = {}
        self.inflight: dict[int, OutPacket] = {}  # insertion order == order of last transmission
        self.inflight_bytes = 0
        self.retx: deque[OutPacket] = deque()
        self.pending: deque[OutMessage] = deque()  # messages with bytes not yet packetised
        self.open_messages = 0
        self.next_msg_id = first_msg_id & 0xFFFFFFFF
        self.rack_sent = float("-inf")  # send time of the latest-sent packet known delivered
        self._losses_due = False  # an ACK moved rack_sent since the last loss test
        self.rto_backoff = 1
        self.last_progress_at = float("-inf")  # when an ACK last acknowledged new data
        # Reverse-path checks need one ACK per packet (with coalescing, "covered" is normal).
        self._ack_paths = self.mode is Mode.MRC and cfg.ack_every == 1
        self._tlp_on = self.mode is Mode.MRC
        self._tail_copies = cfg.tail_copies if self.mode is Mode.MRC else 1
        self._tlp_epoch = float("nan")  # last_progress_at when the last tail-loss probe left
        self.probe_seq = 0
        self._probe_queue: list = []
        # The loss sweep (_open_sweep): None, or when it ends; EVs must have worked since when.
        self._sweep_on = self.mode is Mode.MRC and cfg.loss_sweep
        self._sweep_until: float | None = None
        self._sweep_since = float("-inf")
        self._gbn_rewound_at = float("-inf")
        # Below one packet of window the sender paces: one packet per srtt * size / cwnd.
        self.pace_at = float("-inf")
        self._pace_blocked = False
        self.completions: list[MessageCompletion] = []
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

    # -- transmit ------------------------------------------------------------------------------

    def poll_transmit(self, now: float, out: list, limit: int | None = None) -> int:
        """Append what may leave now to `out`: probes, then resends, then new data.

        `limit` caps the data packets (resends and new) of this call, and the count is
        returned: a paced endpoint asks only for what its pacer lets go now, because a
        packet's send timestamp is taken here, and time it then waited in the pacer would
        count as RTT (endpoint.daemon, "Pacing").
        """
        self._judge_losses(now)
        for p in self._probe_queue:
            seq = self.probe_seq
            self.probe_seq += 1
            payload = codec.encode_probe(self.remote_qp, p.ev, seq, int(now * 1e9))
            self.stats.counters["probe_tx"] += 1
            out.append((p.ev, p.plane, payload, self._tos_control))
        self._probe_queue.clear()
        self._pace_blocked = False
        retx = self.retx
        sent = 0
        cap = -1 if limit is None else limit
        while retx:
            if sent == cap:
                return sent
            p = retx[0]
            if p.state != _LOST:
                retx.popleft()
                continue
            if not self._may_send(p.length, now):
                return sent
            retx.popleft()
            self._transmit(p, now, out)
            sent += 1
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

    def _may_send(self, size: int, now: float) -> bool:
        cwnd = self.cc.cwnd
        if self.inflight_bytes + size <= cwnd:
            return True
        if self.inflight_bytes:
            return False
        # The window is below one packet (heavy incast): pace instead of stalling or bursting.
        if now >= self.pace_at:
            self.pace_at = now + self.rtt.pacing_rtt(self.cfg.rto_initial) * max(size, 1) / cwnd
            return True
        self._pace_blocked = True
        return False

    def _transmit(self, p: OutPacket, now: float, out: list) -> None:
        if self.mode is Mode.SINGLE_PATH:
            ev, plane = self.single_ev, self.single_plane
        else:
            if p.transmissions and self.mode is Mode.MRC:
                path = self.evs.pick_resend(exclude=p.ev)
            elif self._sweep_until is not None:
                path = self.evs.pick(proven_since=self._sweep_since)
            else:
                path = self.evs.pick(exclude=p.ev if p.transmissions else None)
            ev, plane = path.ev, path.plane
            path.packets_sent += 1
        flags = 0
        if p.transmissions:
            flags = DATA_FLAG_RETX
            self.stats.retransmits[p.reason] += 1
        p.transmissions += 1
        p.ev, p.plane = ev, plane
        p.sent_at = now
        p.ts_ns = int(now * 1e9)
        p.state = _INFLIGHT
        self.inflight[p.psn] = p
        self.inflight_bytes += p.length
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
        )
        c = self.stats.counters
        c["data_tx"] += 1
        c["data_bytes_tx"] += p.length
        out.append((ev, plane, payload, self._tos_data))
        if self._tail_copies > 1 and p.reason in _LAST_RESORT:
            self._send_copies(p, payload, out)

    def _send_copies(self, p: OutPacket, payload: bytes, out: list) -> None:
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
            if path.ev in used or path.state is EVState.FAILED:
                continue
            used.add(path.ev)
            path.packets_sent += 1
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
        rtt = self._rtt_sample(a.ts_echo, now)
        acked = 0
        newest = float("-inf")
        unacked = self.unacked
        direct = a.psn
        # Packets acknowledged by another packet's ACK (cumulative or SACK), not their own.
        covered: list[OutPacket] = []
        if dc > 0:
            base = self.snd_una
            for i in range(dc):
                p = unacked.get(psn_add(base, i))
                if p is not None:
                    acked += self._acked(p, now)
                    if p.psn != direct:
                        covered.append(p)
                    if p.transmissions == 1 and p.sent_at > newest:
                        newest = p.sent_at
            self.snd_una = a.cum_psn
        p = unacked.get(direct)
        if p is not None:
            acked += self._acked(p, now)
            if rtt is not None:
                newest = max(newest, now - rtt)
        bits = a.sack_bitmap
        if bits and -window <= psn_diff(a.sack_base, self.snd_una) <= window:
            base = a.sack_base
            while bits:
                low = bits & -bits
                p = unacked.get(psn_add(base, low.bit_length() - 1))
                if p is not None:
                    acked += self._acked(p, now)
                    if p.psn != direct:
                        covered.append(p)
                    if p.transmissions == 1 and p.sent_at > newest:
                        newest = p.sent_at
                bits ^= low
        while self.snd_una != self.next_psn and self.snd_una not in unacked:
            self.snd_una = psn_add(self.snd_una, 1)
        ev_path = self.evs.by_ev.get(a.ev_echo)
        if ev_path is not None:
            ev_path.ack_misses = 0
            # Only the loss sweep reads proven_at: with it off, no work per ACK.
            if self._sweep_on and rtt is not None and now - rtt > ev_path.proven_at:
                ev_path.proven_at = now - rtt  # the packet this ACK answers left then
            recent = self.evs.recent
            if not recent or recent[-1] is not ev_path:
                recent.append(ev_path)
        if covered and rtt is not None and self._ack_paths:
            self._missing_acks(covered, now - rtt, now)
        ce = a.ecn_echo > 0
        if ce:
            st.counters["ecn_echo_rx"] += 1
            self.evs.on_congestion(a.ev_echo, now)
        else:
            self.evs.on_clean_ack(a.ev_echo, now)
        if acked:
            self.rto_backoff = 1
            self.last_progress_at = now
            self.cc.on_ack(
                acked, rtt, self.rtt.min_rtt, self.rtt.smoothed(self.cfg.rto_initial), ce, now
            )
        if newest > self.rack_sent:
            self.rack_sent = newest
        if self.mode is not Mode.SINGLE_PATH:
            self._losses_due = True  # judged once the whole batch is read (_judge_losses)

    def _missing_acks(self, covered: list[OutPacket], trigger_sent: float, now: float) -> None:
        """Reverse-path failure: packets whose own ACK never came, though a later one's did.

        Cumulative and SACK acknowledgement hide a dead reverse path: the data got through, the
        next ACK covers it, nothing looks lost -- until a message's last ACK dies and costs an
        RTO, for as long as the failure lasts. An EV names a round trip (replies to EV e leave
        on the receiver's pair(e)), so an EV whose packets keep being acknowledged only by
        packets sent more than the reorder allowance after them has a dead way back: after
        ``ack_miss_limit`` such packets in a row (one lost ACK is noise) it is retired like a
        dead forward path, and its probes (answered on the same pair) re-admit it.
        """
        limit = trigger_sent - self._reorder_allowance()
        by_ev = self.evs.by_ev
        for p in covered:
            if p.sent_at >= limit:
                continue
            path = by_ev.get(p.ev)
            if path is None:
                continue
            path.ack_misses += 1
            if path.ack_misses >= self.cfg.ack_miss_limit:
                self.stats.counters["ack_path_retired"] += 1
                self._retire(p.ev, now)

    def _reorder_allowance(self) -> float:
        cfg = self.cfg
        rtt = self.rtt
        return max(
            cfg.reorder_min,
            cfg.reorder_rtt_frac * rtt.smoothed(0.0),
            cfg.reorder_rttvar_mult * rtt.rttvar,
        )

    def _rtt_sample(self, ts_echo: int, now: float) -> float | None:
        rtt = now - ts_echo / 1e9
        if not 0.0 <= rtt <= _MAX_RTT_SAMPLE:
            return None
        self.rtt.sample(rtt)
        self.stats.rtt_samples.append((now, rtt))
        return rtt

    def _acked(self, p: OutPacket, now: float) -> int:
        """Mark ``p`` delivered; returns its bytes."""
        del self.unacked[p.psn]
        if p.state == _LOST:  # acknowledged before its resend left: the declaration was wrong
            self.stats.counters["undone_" + p.reason] += 1
        if p.state == _INFLIGHT:
            del self.inflight[p.psn]
            self.inflight_bytes -= p.length
        p.state = _ACKED
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

    def _judge_losses(self, now: float) -> None:
        """Run the RACK loss test once for all the ACKs read since the last turn.

        Why not per ACK: ACKs of one burst leave the receiver together on different EVs, so on
        different reverse paths, and arrive in any order within one read. Judged per ACK, an
        ACK read first declared lost every packet sent more than the allowance before its own
        -- whose ACKs were a few datagrams further on in the same batch. On the emulated fabric
        that was 41-47 of the ~65 spurious loss declarations (and EV retirements) of a healthy
        20 MB bulk (docs/transport.md, "Path (EV) health").
        """
        if self._losses_due:
            self._losses_due = False
            self._detect_losses(now)

    def _detect_losses(self, now: float) -> None:
        limit = self.rack_sent - self._reorder_allowance()
        lost = []
        for p in self.inflight.values():
            if p.sent_at >= limit:
                break
            lost.append(p)
        for p in lost:
            if p.state == _INFLIGHT:
                self._declare_lost(p, "loss", now)

    def _declare_lost(self, p: OutPacket, reason: str, now: float, front: bool = False) -> None:
        del self.inflight[p.psn]
        self.inflight_bytes -= p.length
        p.state = _LOST
        p.reason = reason
        if front:
            self.retx.appendleft(p)
        else:
            self.retx.append(p)
        if self.mode is Mode.MRC and reason in ("loss", "rto"):
            self._retire(p.ev, now)
            if self._sweep_on and self._sweep_until is None:
                self._open_sweep(p.sent_at, now)

    def _open_sweep(self, since: float, now: float) -> None:
        """A packet sent at ``since`` was lost: find every other EV the failure took, at once.

        Without it the sender learns of a dead EV only by losing a packet on it: with 64 EVs
        at 100 Mbps each EV carries a packet every ~7 ms, and during a spine-link black hole
        the EVs not yet found kept eating new packets and resends for several allowances plus
        RTTs (~70-110 packets lost, ~10 ms of goodput on a fabric with no headroom). For the
        sweep (about one probe round trip), new data goes only to EVs whose round trip has
        worked since ``since`` (an ACK or a PROBE-ACK answering something sent since); every
        other live EV gets one probe, and those still unanswered when it ends are retired --
        having lost no data. Healthy EVs it wrongly retires come back with their next probe.
        Off by default (``loss_sweep``): on the emulated fabric, losses from congestion and
        reordering on healthy paths kept opening sweeps when a spine died and its two peers
        ran full, and the narrowed spraying cost that failure its failover; a black hole
        gained little from it (docs/transport.md, "Loss sweep").
        """
        self.stats.counters["loss_sweeps"] += 1
        self._sweep_since = since
        srtt = self.rtt.smoothed(self.cfg.rto_initial)
        self._sweep_until = now + max(2 * srtt, self._reorder_allowance() + srtt)
        for path in self.evs.paths:
            if path.state is not EVState.FAILED and path.proven_at < since:
                self._probe_queue.append(path)

    def _close_sweep(self, now: float) -> None:
        self._sweep_until = None
        since = self._sweep_since
        for path in self.evs.paths:
            if path.state is not EVState.FAILED and path.proven_at < since:
                self.stats.counters["sweep_retired"] += 1
                self._retire(path.ev, now)

    def _retire(self, ev: int, now: float) -> None:
        if not self.evs.retire(ev, now, self.probe_seq):
            return
        self.stats.counters["ev_retired"] += 1
        for q in [q for q in self.inflight.values() if q.ev == ev]:
            self._declare_lost(q, "ev_failover", now)

    def on_nack(self, n: NackPacket, now: float) -> None:
        st = self.stats
        st.counters["nack_rx"] += 1
        if n.reason == NACK_SEQUENCE:
            self._on_sequence_nak(n, now)
            return
        p = self.unacked.get(n.psn)
        if p is None or p.state != _INFLIGHT or p.ts_ns != n.ts_echo:
            st.counters["stale_nack"] += 1  # already resent, acked, or forged
            return
        if n.reason == NACK_TRIMMED:
            st.counters["trim_nack_rx"] += 1
            rtt = now - n.ts_echo / 1e9
            if 0.0 <= rtt <= _MAX_RTT_SAMPLE:
                self.rtt.observe_base(rtt)
            self._declare_lost(p, "nack_trim", now, front=True)
            self.cc.on_trim(p.length)
            self.evs.on_congestion(p.ev, now)
        elif n.reason == NACK_OUT_OF_WINDOW:
            self._declare_lost(p, "nack_window", now)
        else:
            st.drops["bad_nack_reason"] += 1

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
        if n.ts_echo / 1e9 < self._gbn_rewound_at:
            self.stats.counters["stale_nack"] += 1  # caused by a packet sent before the rewind
            return
        self._rewind("gbn", now)

    def _rewind(self, reason: str, now: float) -> None:
        """Go-back-N: everything in flight is resent in PSN order."""
        self._gbn_rewound_at = now
        base = self.snd_una
        for p in sorted(self.inflight.values(), key=lambda q: psn_diff(q.psn, base)):
            self._declare_lost(p, reason, now)
        # Resend from snd_una in PSN order, including packets still queued from an earlier
        # rewind: appended behind them, the packet at snd_una went last and the in-order
        # receiver dropped every packet before it, one RC timeout per rotation (seen on the
        # fabric: single-path needed ~1 s after a heal instead of one timeout).
        self.retx = deque(
            sorted((q for q in self.retx if q.state == _LOST), key=lambda q: psn_diff(q.psn, base))
        )

    def on_probe_ack(self, pa: ProbeAckPacket, now: float) -> None:
        path = self.evs.by_ev.get(pa.ev_echo)
        sent = pa.ts_echo / 1e9
        if self._sweep_on and path is not None and sent <= now and sent > path.proven_at:
            path.proven_at = sent
        if self.evs.readmit(pa.ev_echo, pa.probe_seq, now):
            self.stats.counters["ev_readmitted"] += 1
        else:
            self.stats.counters["probe_ack_ignored"] += 1

    # -- timers --------------------------------------------------------------------------------

    def _rto(self) -> float:
        if self.mode is Mode.SINGLE_PATH:
            return self.cfg.single_path_rto
        return self.rtt.rto() * self.rto_backoff

    def _tlp_time(self) -> float | None:
        """When to send a tail-loss probe (mrc), or None.

        RACK needs a later packet's ACK to expose a loss; the last packets of a message have
        none, and the RTO (srtt + 4 rttvar, 40-60 ms behind the queues of a 20 Mbps fabric) was
        most of a step's P100 after a failure. Once per ACK-progress epoch, 2 srtt after the
        newest packet left or the last ACK progress (whichever is later), that packet is resent
        (as a last-resort resend, see ``_transmit``); its ACK, with SACK, lets RACK find the
        rest of the tail at once.
        """
        if not self._tlp_on or self._tlp_epoch == self.last_progress_at:
            return None
        newest = next(reversed(self.inflight.values()))
        since = max(newest.sent_at, self.last_progress_at)
        return since + max(2 * self.rtt.smoothed(self.cfg.rto_initial), _TLP_MIN)

    def next_timer(self) -> float | None:
        t = None
        if self.inflight:
            first = next(iter(self.inflight.values()))
            t = first.sent_at + self._rto()
            tlp = self._tlp_time()
            if tlp is not None and tlp < t:
                t = tlp
        if self.mode is Mode.MRC:
            tp = self.evs.next_probe_time()
            if tp is not None and (t is None or tp < t):
                t = tp
            if self._sweep_until is not None and (t is None or self._sweep_until < t):
                t = self._sweep_until
        if self._pace_blocked and (t is None or self.pace_at < t):
            t = self.pace_at
        return t

    def on_timer(self, now: float) -> None:
        self._judge_losses(now)
        if self._sweep_until is not None and self._sweep_until <= now:
            self._close_sweep(now)
        if self.mode is Mode.MRC:
            self._probe_queue.extend(self.evs.due_probes(now))
        if not self.inflight:
            return
        rto = self._rto()
        first = next(iter(self.inflight.values()))
        if first.sent_at + rto > now:
            tlp = self._tlp_time()
            if tlp is not None and tlp <= now:
                self._tlp_epoch = self.last_progress_at
                self.stats.counters["tlp_fired"] += 1
                self._declare_lost(next(reversed(self.inflight.values())), "tlp", now, front=True)
            return
        self.stats.counters["rto_fired"] += 1
        self.cc.on_rto()
        if self.mode is Mode.SINGLE_PATH:
            self._rewind("rto", now)
            return
        # As RFC 8985 (6.3) marks losses on an RTO: the expired packets, and every one that an
        # ACK should have answered by now (sent over an RTT plus the reorder allowance ago).
        # Expired one by one, the packets of a paced burst whose ACKs never come (an incast
        # queue dropped them all) went one per RTO, each RTO doubling the next: one sender of
        # a 5-to-1 incast without trimming resent nothing for 1.2 s.
        stale = now - self.rtt.smoothed(self.cfg.rto_initial) - self._reorder_allowance()
        expired = []
        for p in self.inflight.values():
            if p.sent_at + rto > now and p.sent_at > stale:
                break
            expired.append(p)
        for p in expired:
            if p.state == _INFLIGHT:
                self._declare_lost(p, "rto", now)
        self.rto_backoff = min(self.rto_backoff * 2, 64)

    # -- stats ---------------------------------------------------------------------------------

    def _ev_changed(self, now: float, ev: int, old: EVState, new: EVState) -> None:
        self.stats.ev_transitions.append(EVTransition(now, ev, old.value, new.value))

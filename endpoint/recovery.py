"""Loss recovery of one sender: which packets are lost, when its timers fire, which EVs retire.

The sender (`endpoint.sender`) builds packets and reads ACKs and NACKs; this module decides
loss, as aioquic keeps ``recovery.py`` apart from its connection. It owns the packets in
flight and the queue of packets to resend. What each mode does (docs/transport.md has the full
story) is one row of `POLICIES`:

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

from collections import deque
from dataclasses import dataclass

from endpoint.config import (
    MRC_RETRY_INFINITE,
    MRC_TIMEOUT_UNIT_S,
    RC_TIMEOUT_UNIT_S,
    Mode,
    TransportConfig,
)
from endpoint.ev import EVSet
from endpoint.ev_path import EVPath, EVState
from endpoint.nscc import Nscc
from endpoint.outgoing import ACKED, INFLIGHT, LOST, OutPacket
from endpoint.psn import psn_add, psn_diff
from endpoint.rtt import RttEstimator
from endpoint.stats import ConnectionStats

# RFC 8985 (RACK-TLP), 7.2: the probe timeout is two smoothed RTTs (but at least
# TransportConfig.tlp_pto_min).
TLP_PTO_SRTT_FACTOR = 2
# A sweep makes every EV prove itself, except those already known dead or denied.
_NOT_PROBED = (EVState.FAILED, EVState.DENIED)
# RFC 6298, 5.5: each RTO expiry doubles the next; the factor stops here.
RTO_BACKOFF_MAX = 64
REO_MULT_MAX = 16
REO_DECAY_RTTS = 16
# Resends made without any ACK evidence (see Sender._send_copies).
LAST_RESORT = ("rto", "tlp")


@dataclass(frozen=True, slots=True)
class RecoveryPolicy:
    """What one mode does about loss; a row of `POLICIES`."""

    # One fixed EV and an in-order receiver that NAKs each gap: go-back-N, and a fixed RC-style
    # timeout (``single_path_rto``) that also rewinds.
    single_path: bool
    # RACK (RFC 8985): a packet is lost once one sent more than the reorder allowance after it
    # has been acknowledged.
    rack: bool
    # Tail-loss probes (RFC 8985, 7): resend the newest packet when the tail's ACKs are missing.
    tlp: bool
    # A loss or data RTO retires its EV, FAILED EVs are probed and re-admitted, resends go to
    # the EVs acknowledged last, last-resort resends go out in ``tail_copies`` copies, an EV
    # whose own ACKs go missing is retired, and the optional loss sweep.
    failover: bool


POLICIES = {
    Mode.MRC: RecoveryPolicy(single_path=False, rack=True, tlp=True, failover=True),
    Mode.SPRAY_NO_FAILOVER: RecoveryPolicy(single_path=False, rack=True, tlp=False, failover=False),
    Mode.SINGLE_PATH: RecoveryPolicy(single_path=True, rack=False, tlp=False, failover=False),
    Mode.ROCE: RecoveryPolicy(single_path=True, rack=False, tlp=False, failover=False),
}


def _run_ends(covered: list[OutPacket]) -> list[OutPacket]:
    """Of packets acknowledged on behalf of others, the last of each stretch of consecutive
    PSNs: with coalesced ACKs, the packets whose missing ACK names a reverse path.

    A run's ACK leaves on the reply path of its last packet's EV, so when it dies the run's
    other packets are covered by a later ACK through no fault of their own EVs. Blamed too, with
    a quarter of the reply EVs black-holed, 5-7 EVs whose replies arrived were retired in a
    10 Gbps simnet bulk (a variant whose hosts serialise their packets). The last
    of a stretch is the trigger of its last lost ACK (runs are in PSN order); an earlier lost
    run in the same stretch goes unblamed, which only delays the verdict on its EV.
    """
    psns = {p.psn for p in covered}
    return [p for p in covered if psn_add(p.psn, 1) not in psns]


class Recovery:
    """Packets in flight, loss detection and timers of one sender, which drives it."""

    def __init__(
        self,
        cfg: TransportConfig,
        stats: ConnectionStats,
        evs: EVSet,
        rtt: RttEstimator,
        cc: Nscc,
    ) -> None:
        self.cfg = cfg
        self.policy = policy = POLICIES[cfg.mode]
        self.stats = stats
        self.evs = evs
        self.rtt = rtt
        self.cc = cc
        self.inflight: dict[int, OutPacket] = {}  # insertion order == order of last transmission
        self.inflight_bytes = 0
        self.retx: deque[OutPacket] = deque()  # declared lost, to be resent (front first)
        # Resends a timer (RTO or tail-loss probe) lets leave past the congestion window: as
        # RFC 6298 (5.4) retransmits on an RTO whatever the window. Without it, packets sent
        # just before the timeout, not yet expired, held a window the timeout had shrunk
        # below them, and the resend waited for the next, doubled, timeout: one sender of an
        # 8:1 incast with a dead spine sent nothing for the last 1.2 ms of a 2 ms run.
        self.timer_sends = 0
        self.probe_queue: list[EVPath] = []  # EVs to probe on the sender's next poll
        self.probe_seq = 0  # the sequence number of the next probe
        self.rack_sent = float("-inf")  # send time of the latest-sent packet known delivered
        self._losses_due = False  # an ACK moved rack_sent since the last loss test
        self.rto_backoff = 1
        self.last_progress_at = float("-inf")  # when an ACK last acknowledged new data
        # Timeouts in a row without progress: each is a retry. Past the QP's retry limit
        # (roce: rc_retry_cnt; mrc: retry_linear_cnt + retry_exp_cnt unless that is infinite)
        # the QP is in error, as a NIC's: it sends nothing more, its messages never complete.
        self.retries = 0
        self.qp_error = False
        self.reo_mult = 1  # the reorder allowance's multiple (on_spurious)
        self._reo_at = float("-inf")
        # Reverse-path checks need every packet named by an ACK of its own or of its run: the
        # receiver sends a pending run's ACK before any other, so coalescing keeps that true.
        self._ack_paths = policy.failover
        # The longest a receiver holds an ACK on purpose (0 without coalescing): the timers
        # that wait for an ACK wait this much longer, as QUIC's PTO adds max_ack_delay.
        self.max_ack_delay = cfg.ack_delay if cfg.ack_every > 1 else 0.0
        self._tlp_epoch = float("nan")  # last_progress_at when the last tail-loss probe left
        # The loss sweep (_open_sweep): None, or when it ends; EVs must have worked since when.
        self._sweep_on = policy.failover and cfg.loss_sweep
        self.sweep_until: float | None = None
        self.sweep_since = float("-inf")
        self.gbn_rewound_at = float("-inf")

    # -- what the sender reports ---------------------------------------------------------------

    def on_sent(self, p: OutPacket) -> None:
        p.state = INFLIGHT
        self.inflight[p.psn] = p
        self.inflight_bytes += p.length

    def on_acked(self, p: OutPacket) -> None:
        if p.state == LOST:  # acknowledged before its resend left: the declaration was wrong
            self.stats.counters["undone_" + p.reason] += 1
        if p.state == INFLIGHT:
            del self.inflight[p.psn]
            self.inflight_bytes -= p.length
        p.state = ACKED

    def on_ack(
        self,
        ev_path: EVPath | None,
        sent: float,
        covered: list[OutPacket],
        progress: bool,
        newest: float,
        rtt: float | None,
        now: float,
    ) -> None:
        """An ACK was read: it came back on ``ev_path`` (the EV of the packet that triggered
        it, sent at ``sent``), acknowledged ``covered`` packets on behalf of others (not the
        packets of its own run), new data (``progress``), and packets sent up to ``newest``."""
        if ev_path is not None:
            ev_path.ack_misses = 0
            # Only the loss sweep reads proven_at: with it off, no work per ACK.
            if self._sweep_on and rtt is not None and sent > ev_path.proven_at:
                ev_path.proven_at = sent  # the packet this ACK answers left then
        if covered and rtt is not None and self._ack_paths:
            self._missing_acks(covered, sent, now)
        if progress:
            self.rto_backoff = 1
            self.retries = 0
            self.last_progress_at = now
        if newest > self.rack_sent:
            self.rack_sent = newest
        if self.policy.rack:
            self._losses_due = True  # judged once the whole batch is read (judge_losses)

    def on_sequence_nak(self, sent: float, snd_una: int, now: float) -> None:
        """A sequence NAK for a packet sent at ``sent`` (everything before it is acknowledged)."""
        if sent < self.gbn_rewound_at:
            self.stats.counters["stale_nack"] += 1  # caused by a packet sent before the rewind
            return
        self.stats.counters["gbn_rewinds"] += 1
        self._rewind("gbn", snd_una, now)

    def on_probe_ack(self, ev: int, probe_seq: int, sent: float, now: float) -> None:
        path = self.evs.by_ev.get(ev)
        if self._sweep_on and path is not None and sent <= now and sent > path.proven_at:
            path.proven_at = sent
        if self.evs.readmit(ev, probe_seq, now, "probe_ack"):
            self.stats.counters["ev_readmitted"] += 1
        else:
            self.stats.counters["probe_ack_ignored"] += 1

    def next_probe_seq(self) -> int:
        seq = self.probe_seq
        self.probe_seq += 1
        return seq

    # -- loss detection ------------------------------------------------------------------------

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
        # A run's ACK may leave up to max_ack_delay after its first packet arrived, together
        # with the ACK of a later packet: only a lateness beyond that is a missing ACK.
        limit = trigger_sent - self.reorder_allowance() - self.max_ack_delay
        by_ev = self.evs.by_ev
        if self.max_ack_delay:
            covered = _run_ends(covered)
        for p in covered:
            if p.sent_at >= limit:
                continue
            path = by_ev.get(p.ev)
            if path is None:
                continue
            path.ack_misses += 1
            if path.ack_misses >= self.cfg.ack_miss_limit:
                self.stats.counters["ack_path_retired"] += 1
                self._retire(p.ev, now, "ack_path")

    def reorder_allowance(self) -> float:
        cfg = self.cfg
        rtt = self.rtt
        return self.reo_mult * max(
            cfg.reorder_min,
            cfg.reorder_rtt_frac * rtt.smoothed(0.0),
            cfg.reorder_rttvar_mult * rtt.rttvar,
        )

    def on_spurious(self, ev: int, now: float) -> None:
        """The first copy of a packet declared lost was acknowledged after all: the loss was
        reordering (a slow path, a deep queue), not a loss. As RACK does on a DSACK (RFC 8985,
        6.2), the reorder allowance grows -- by one multiple per spurious loss, up to
        REO_MULT_MAX, back to one after REO_DECAY_RTTS smoothed RTTs without another -- and
        the EV the copy went out on, which the declaration retired, is re-admitted at once:
        its round trip just worked."""
        self.stats.counters["spurious_loss"] += 1
        self.reo_mult = min(self.reo_mult + 1, REO_MULT_MAX)
        self._reo_at = now
        if self.policy.failover and self.evs.unretire(ev, now):
            self.stats.counters["ev_unretired"] += 1

    def on_late_trim(self, ev: int, now: float) -> None:
        """The trim NACK of a packet already declared lost came back: its path is alive, only
        congested, so the EV the declaration retired is re-admitted, at a congested weight.
        Why: on a slow link (a leaf-spine link at 10 % speed) the trim NACKs come back through
        its queue later than RACK's allowance, and every one retired a live EV -- MRC then kept
        probing and re-admitting the slow path's EVs instead of weighing them down."""
        self.stats.counters["late_trim_nack"] += 1
        if self.policy.failover and self.evs.unretire(ev, now, "trim"):
            self.stats.counters["ev_unretired"] += 1
        self.evs.on_congestion(ev, now, "trim")

    def judge_losses(self, now: float) -> None:
        """Run the RACK loss test once for all the ACKs read since the last turn.

        Why not per ACK: ACKs of one burst leave the receiver together on different EVs, so on
        different reverse paths, and arrive in any order within one read. Judged per ACK, an
        ACK read first declared lost every packet sent more than the allowance before its own
        -- whose ACKs were a few datagrams further on in the same batch. On the emulated fabric
        that was 41-47 of the ~65 spurious loss declarations (and EV retirements) of a healthy
        20 MB bulk (docs/transport.md, "Path (EV) health").
        """
        if self.reo_mult > 1 and now - self._reo_at > REO_DECAY_RTTS * self.rtt.smoothed(0.0):
            self.reo_mult = 1
        if self._losses_due:
            self._losses_due = False
            self._detect_losses(now)

    def _detect_losses(self, now: float) -> None:
        limit = self.rack_sent - self.reorder_allowance()
        lost = []
        for p in self.inflight.values():
            if p.sent_at >= limit:
                break
            lost.append(p)
        for p in lost:
            if p.state == INFLIGHT:
                self.declare_lost(p, "loss", now)

    def declare_lost(self, p: OutPacket, reason: str, now: float, front: bool = False) -> None:
        """Move ``p`` from in flight to the resend queue (at its ``front``: resent first)."""
        del self.inflight[p.psn]
        self.inflight_bytes -= p.length
        p.state = LOST
        p.reason = reason
        if front:
            self.retx.appendleft(p)
        else:
            self.retx.append(p)
        if self.policy.failover and reason in ("loss", "rto"):
            self._retire(p.ev, now, reason)
            if self._sweep_on and self.sweep_until is None:
                self._open_sweep(p.sent_at, now)

    def on_denied(self, evs: list[int], now: float) -> None:
        """The EVs ``evs`` were just denied (MRC's EV deny): what is in flight on them is
        resent now (``retransmits.ev_denied``), as on a retirement. A deny names a link the
        controller found dead, and nothing else tells the sender that those packets are gone:
        a connection whose last packets went into a spine link's black hole before the deny
        waited for a tail probe and an RTO (the dc-blackhole-controller scenario's slowest flow
        finished 99-166 µs after the median one). A copy that did get through costs one duplicate
        at the receiver, which drops it."""
        gone = set(evs)
        for q in [q for q in self.inflight.values() if q.ev in gone]:
            self.declare_lost(q, "ev_denied", now)

    def _retire(self, ev: int, now: float, reason: str) -> None:
        if not self.evs.retire(ev, now, self.probe_seq, reason):
            return
        self.stats.counters["ev_retired"] += 1
        for q in [q for q in self.inflight.values() if q.ev == ev]:
            self.declare_lost(q, "ev_failover", now)

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
        self.sweep_since = since
        srtt = self.rtt.smoothed(self.cfg.rto_initial)
        self.sweep_until = now + max(2 * srtt, self.reorder_allowance() + srtt)
        for path in self.evs.unique_paths():
            if path.state not in _NOT_PROBED and path.proven_at < since:
                self.probe_queue.append(path)

    def _close_sweep(self, now: float) -> None:
        self.sweep_until = None
        since = self.sweep_since
        for path in self.evs.unique_paths():
            if path.state not in _NOT_PROBED and path.proven_at < since:
                self.stats.counters["sweep_retired"] += 1
                self._retire(path.ev, now, "sweep")

    def _rewind(self, reason: str, snd_una: int, now: float) -> None:
        """Go-back-N: everything in flight is resent in PSN order."""
        self.gbn_rewound_at = now
        base = snd_una
        for p in sorted(self.inflight.values(), key=lambda q: psn_diff(q.psn, base)):
            self.declare_lost(p, reason, now)
        # Resend from snd_una in PSN order, including packets still queued from an earlier
        # rewind: appended behind them, the packet at snd_una went last and the in-order
        # receiver dropped every packet before it, one RC timeout per rotation (seen on the
        # fabric: single-path needed ~1 s after a heal instead of one timeout).
        self.retx = deque(
            sorted((q for q in self.retx if q.state == LOST), key=lambda q: psn_diff(q.psn, base))
        )

    # -- timers --------------------------------------------------------------------------------

    def rto(self) -> float:
        if self.policy.single_path:
            if self.cfg.mode is Mode.ROCE:
                return RC_TIMEOUT_UNIT_S * (1 << self.cfg.rc_timeout)
            return self.cfg.single_path_rto
        if self.cfg.ack_timeout is not None:  # MRC's local ACK timeout, set by the QP
            return MRC_TIMEOUT_UNIT_S * (1 << self.cfg.ack_timeout) * self.rto_backoff
        return (self.rtt.rto() + self.max_ack_delay) * self.rto_backoff

    def _tlp_time(self) -> float | None:
        """When to send a tail-loss probe, or None.

        RACK needs a later packet's ACK to expose a loss; the last packets of a message have
        none, and the RTO (srtt + 4 rttvar, 40-60 ms behind the queues of a 20 Mbps fabric) was
        most of a step's P100 after a failure. Once per ACK-progress epoch, 2 srtt after the
        newest packet left or the last ACK progress (whichever is later), that packet is resent
        (as a last-resort resend, see ``Sender._transmit``); its ACK, with SACK, lets RACK find
        the rest of the tail at once.
        """
        if not self.policy.tlp or self._tlp_epoch == self.last_progress_at:
            return None
        newest = next(reversed(self.inflight.values()))
        since = max(newest.sent_at, self.last_progress_at)
        pto = TLP_PTO_SRTT_FACTOR * self.rtt.smoothed(self.cfg.rto_initial)
        # The probed packet's ACK may be held by a coalescing receiver (RFC 8985 7.2 adds the
        # worst-case delayed-ACK time, QUIC's PTO max_ack_delay).
        return since + max(pto, self.cfg.tlp_pto_min) + self.max_ack_delay

    def next_timer(self) -> float | None:
        t = None
        if self.qp_error:
            return None
        if self.inflight:
            first = next(iter(self.inflight.values()))
            t = first.sent_at + self.rto()
            tlp = self._tlp_time()
            if tlp is not None and tlp < t:
                t = tlp
        if self.policy.failover:
            tp = self.evs.next_probe_time()
            if tp is not None and (t is None or tp < t):
                t = tp
            if self.sweep_until is not None and (t is None or self.sweep_until < t):
                t = self.sweep_until
        return t

    def on_timer(self, now: float, snd_una: int) -> None:
        self.judge_losses(now)
        if self.sweep_until is not None and self.sweep_until <= now:
            self._close_sweep(now)
        if self.policy.failover:
            self.probe_queue.extend(self.evs.due_probes(now))
        if not self.inflight or self.qp_error:
            return
        rto = self.rto()
        first = next(iter(self.inflight.values()))
        if first.sent_at + rto > now:
            tlp = self._tlp_time()
            if tlp is not None and tlp <= now:
                self._tlp_epoch = self.last_progress_at
                self.stats.counters["tlp_fired"] += 1
                self.declare_lost(next(reversed(self.inflight.values())), "tlp", now, front=True)
                self.timer_sends = 1
            return
        self._on_rto(rto, snd_una, now)

    def _on_rto(self, rto: float, snd_una: int, now: float) -> None:
        self.stats.counters["rto_fired"] += 1
        self.cc.on_rto(next(iter(self.inflight.values())).length)
        self.evs.on_timeout(now, rto)
        self.retries += 1
        if self.retries > self._retry_limit():
            self.qp_error = True  # retry count exceeded: the QP goes to the error state
            self.stats.counters["qp_error"] += 1
            self.retx.clear()
            return
        self.timer_sends = 1
        if self.policy.single_path:
            self._rewind("rto", snd_una, now)
            return
        # As RFC 8985 (6.3) marks losses on an RTO: the expired packets, and every one that an
        # ACK should have answered by now (sent over an RTT plus the reorder allowance ago).
        # Expired one by one, the packets of a paced burst whose ACKs never come (an incast
        # queue dropped them all) went one per RTO, each RTO doubling the next: one sender of
        # a 5-to-1 incast without trimming resent nothing for 1.2 s.
        stale = now - self.rtt.smoothed(self.cfg.rto_initial) - self.reorder_allowance()
        expired = []
        for p in self.inflight.values():
            if p.sent_at + rto > now and p.sent_at > stale:
                break
            expired.append(p)
        for p in expired:
            if p.state == INFLIGHT:
                self.declare_lost(p, "rto", now)
        if self.retries > self.cfg.retry_linear_cnt:  # a linear retry waits one timeout
            self.rto_backoff = min(self.rto_backoff * 2, RTO_BACKOFF_MAX)

    def _retry_limit(self) -> float:
        """How many timeouts in a row the QP retries before it fails."""
        cfg = self.cfg
        if cfg.mode is Mode.ROCE:
            return cfg.rc_retry_cnt
        if self.policy.single_path or cfg.retry_exp_cnt >= MRC_RETRY_INFINITE:
            return float("inf")
        return cfg.retry_linear_cnt + cfg.retry_exp_cnt

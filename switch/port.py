"""One switch port: egress shaping, propagation delay, failure controls and counters.

The link model is the one a datacenter link has: a packet waits in the port's TrimmingQueue,
is serialised at the configured rate (the port is busy for len*8/rate seconds), then flies for
the propagation delay and arrives. The kernel has no netem here, and trimming only happens where
the switch owns the queue, so all of it is emulated in the switch.

Timekeeping is exact: `busy_until` advances by exact serialisation times, so the long-run rate
is exact even though the event loop wakes up late by the timer's jitter; a late wake-up may catch
up at most `catch_up` of the backlog its queue held, so an idle port never bursts; a frame that
finds the link idle starts when it arrives, at most `slack` (half a frame time) in the past.

All times here are *virtual* seconds (contracts.clock): at time dilation N the loop hands in
monotonic / N, so rates and delays are the datacenter's own and only the machine's limits --
how precisely it wakes, how late it may be -- are divided by N (`egress_timing`).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable

from switch.queueing import ENQUEUED, TRIMMED, TrimmingQueue

CATCH_UP_S = 0.002
"""Real seconds of backlog a late wake-up may still send back to back (a real-time hazard)."""
# A frame may leave up to EARLY_S before its departure time: the event loop cannot wake more
# precisely than this anyway, and it keeps a burst read in one go at an unbinding rate from
# queueing up (the long-run rate stays exact: the departure clock never runs ahead).
EARLY_S = 20e-6
BATCH_REAL_S = 500e-6
"""Under dilation: the most real time by which a departure may be served early, so one wake-up
serves every departure of every port that falls due within it (issue 18, item 2)."""
BATCH_SERIALISATIONS = 0.125
"""... as long as that early service stays under this fraction of one frame's serialisation."""


ARRIVAL_SLACK_SERIALISATIONS = 0.5
"""How far back a frame that finds its link idle may start serialising, in full-frame times.

The loop reads a frame late by its own lateness, so the frame really arrived a little before
`now`; starting it at the previous frame's end (if that is this recent) keeps a line-rate
stream at line rate. No further: a frame arriving at an idle link never waited, and starting
it in the past took its serialisation and delay off a sparse stream (with the whole catch-up
budget, ACKs 1.2 us apart crossed a 1 us, 10 Gbps link in 0 us at N = 500). Half a frame is
the lateness a valid run may have (testbed.analysis.validity)."""


def arrival_slack(catch_up_s: float, serialisation_s: float, early_s: float) -> float:
    """The arrival slack (virtual s): ARRIVAL_SLACK_SERIALISATIONS of a full frame's
    serialisation, within the catch-up budget; on unshaped links only the early window."""
    if serialisation_s <= 0.0:
        return early_s
    return min(catch_up_s, max(early_s, ARRIVAL_SLACK_SERIALISATIONS * serialisation_s))


def egress_timing(dilation: float = 1.0, serialisation_s: float = 0.0) -> tuple[float, float]:
    """(early, catch_up) in virtual seconds for a switch at time dilation `dilation` whose
    fastest port serialises a full frame in `serialisation_s` (virtual; 0 = unshaped).

    At N = 1 these are EARLY_S and CATCH_UP_S. Under dilation the wake-up precision and the
    catch-up budget shrink by N; and since every real microsecond is then worth only 1/N of a
    virtual one, a departure may be served up to min(BATCH_REAL_S / N, 1/8 of a serialisation)
    early: the timing error stays well under one packet time while one wake-up serves a batch.
    """
    if dilation <= 1.0:
        return EARLY_S, CATCH_UP_S
    early = EARLY_S / dilation
    if serialisation_s > 0.0:
        early = max(early, min(BATCH_REAL_S / dilation, BATCH_SERIALISATIONS * serialisation_s))
    return early, CATCH_UP_S / dilation


QUEUE_MAX_INTERVAL_S = 0.010
"""Virtual seconds per queue-depth interval: the switch keeps the deepest data queue an arriving
frame made in each one. Why not the instantaneous depth at sampling time: the harness reads
counters every 250 ms, while a 64 kB queue fills in ~26 ms at 20 Mbps and empties in 5 ms at
100 Mbps; a sample sees a queue's fill only by luck."""
QUEUE_MAX_RING = 512
"""Closed intervals a port keeps until a counters read drains them: 5 s of busy intervals at
10 ms, so a reader every 250 ms (or one delayed by seconds) loses none; an overflow drops the
oldest and counts them (`QueueMaxima.lost`)."""

DROP_LINK_DOWN = "link_down"
DROP_BLACKHOLE = "blackhole"
DROP_LOSS = "loss"
DROP_TX_ERROR = "tx_error"


class PortCounters:
    __slots__ = (
        "rx_packets",
        "rx_bytes",
        "tx_packets",
        "tx_bytes",
        "drops",
        "impairments",
    )

    def __init__(self) -> None:
        self.rx_packets = 0
        self.rx_bytes = 0
        self.tx_packets = 0
        self.tx_bytes = 0
        self.drops: dict[str, int] = {}
        # Frames a stochastic impairment touched without dropping them (switch/impairment.py).
        self.impairments: dict[str, int] = {}

    def drop(self, reason: str, n: int = 1) -> None:
        self.drops[reason] = self.drops.get(reason, 0) + n

    def count(self, impairment: str) -> None:
        self.impairments[impairment] = self.impairments.get(impairment, 0) + 1


class QueueMaxima:
    """The deepest data queue per interval of `interval_s` virtual seconds, for the intervals in
    which a frame was queued: a bounded ring of (interval start, bytes) that `drain` empties.

    The per-frame cost is in `Port.offer` (one time compare, one max); `roll` runs once per
    interval. An interval in which no frame was queued has no entry: no arriving frame found a
    queue there (the queue could only drain)."""

    __slots__ = ("interval_s", "start", "until", "peak", "ring", "lost")

    def __init__(self, interval_s: float = QUEUE_MAX_INTERVAL_S, size: int = QUEUE_MAX_RING):
        self.interval_s = interval_s
        self.start = 0.0
        self.until = 0.0  # end of the open interval; 0: none open yet
        self.peak = 0
        self.ring: deque[tuple[float, int]] = deque(maxlen=size)
        self.lost = 0

    def roll(self, now: float) -> None:
        """Close the open interval (if it saw a queue) and open the one holding `now`."""
        if self.peak > 0:
            if len(self.ring) == self.ring.maxlen:
                self.lost += 1
            self.ring.append((self.start, self.peak))
        k = int(now // self.interval_s)
        self.start = k * self.interval_s
        self.until = self.start + self.interval_s
        self.peak = 0

    def drain(self) -> list[list[float]]:
        """The closed intervals since the last drain (removed), then the open one (kept: it may
        still grow, so a reader merges repeated starts by their maximum)."""
        out = [[round(t, 6), b] for t, b in self.ring]
        self.ring.clear()
        if self.peak > 0:
            out.append([round(self.start, 6), self.peak])
        return out


class Port:
    """Egress side of a port plus its run-time failure state.

    `transmit(frame)` puts a frame on the wire (the real veth); it returns False if the kernel
    refused it, which is counted as a kernel-side drop, apart from emulated drops.
    """

    # Slots: attribute reads on the per-packet path are measurably cheaper than dict lookups.
    __slots__ = (
        "index", "name", "mac", "peer_mac", "nominal_rate_mbps", "nominal_delay_us", "queue",
        "transmit", "rng", "counters", "up", "blackhole", "loss", "rx_up", "rx_blackhole",
        "rx_loss", "busy_until", "inflight", "rate_mbps", "sec_per_byte", "delay_s", "rx_clean",
        "direct", "early", "catch_up", "slack", "active", "seq", "impair", "qmax", "rx_ok",
        "rx_capture", "sched",
    )  # fmt: skip

    def __init__(
        self,
        index: int,
        name: str,
        mac: bytes,
        peer_mac: bytes,
        rate_mbps: float,
        delay_us: float,
        queue: TrimmingQueue,
        transmit: Callable[[bytes | bytearray], bool],
        rng: random.Random,
        queue_max_interval_s: float = QUEUE_MAX_INTERVAL_S,
    ) -> None:
        self.index = index
        self.name = name
        self.mac = mac
        self.peer_mac = peer_mac
        self.nominal_rate_mbps = rate_mbps
        self.nominal_delay_us = delay_us
        self.queue = queue
        self.transmit = transmit
        self.rng = rng
        self.counters = PortCounters()
        # Failure state (egress direction of this port).
        self.up = True
        self.blackhole = False
        self.loss = 0.0  # probability in [0, 1]
        # Failure state applied on receive: used for links whose far end is a host, which has
        # no switch to impair its egress.
        self.rx_up = True
        self.rx_blackhole = False
        self.rx_loss = 0.0
        self.busy_until = 0.0
        self.inflight: deque[tuple[float, bytearray]] = deque()
        self.set_rate(rate_mbps)
        self.delay_s = delay_us / 1e6
        self.rx_clean = True
        self.direct = True
        self.early = EARLY_S  # virtual seconds; Switch sets them from its dilation
        self.catch_up = CATCH_UP_S
        self.slack = EARLY_S  # arrival_slack: Switch sets it from its fastest port
        # The ports with a frame queued or in flight, shared by every port the event loop
        # serves: a port joins when it takes on work (`offer`), the loop drops it once idle,
        # and so a pass over the egress timers visits busy ports only.
        self.active: set[Port] = set()  # an egress_timers.ActivePorts once a switch owns it
        self.seq = index  # its place in the loop's order of service (switch/loop.py sets it)
        self.sched = -1  # its live entry in the loop's heap of departures (egress_timers.py)
        # Stochastic impairments (switch/impairment.py): while set, the port is an ImpairedPort.
        self.impair = None
        self.qmax = QueueMaxima(queue_max_interval_s)  # at the fabric's time scale
        # While set (switch/capture.py), receive_batch records every burst of this port.
        self.rx_capture: Callable[[object, float], None] | None = None
        self.refresh()

    def refresh(self) -> None:
        """Flags that gate the inline paths; call after any change of failure state or delay.

        `rx_ok`: nothing impairs receive on this port; `rx_clean`: nor is it captured, so
        the inline paths may take its frames (a captured port's go through
        `Switch.receive_batch`, which records them). `direct`: nothing on egress but the
        shaper -- carrier up, no gray failure, no propagation delay -- so a frame that finds
        the link idle may go from an rx ring slot straight into this port's tx ring
        (switch/fastpath.py).
        """
        self.rx_ok = self.rx_up and not self.rx_blackhole and not self.rx_loss
        self.rx_clean = self.rx_ok and self.rx_capture is None
        self.direct = self.up and not self.blackhole and not self.loss and self.delay_s == 0.0
        # (An ImpairedPort is never direct: it overrides this.)

    def set_rate(self, mbps: float) -> None:
        self.rate_mbps = mbps
        self.sec_per_byte = 8.0 / (mbps * 1e6) if mbps > 0 else 0.0

    @property
    def shaped(self) -> bool:
        return self.sec_per_byte > 0.0 or self.delay_s > 0.0

    def heal(self) -> None:
        """Back to nominal from any impairment (carrier state is separate: link-up)."""
        self.blackhole = self.rx_blackhole = False
        self.rx_up = True
        self.loss = self.rx_loss = 0.0
        self.set_rate(self.nominal_rate_mbps)
        self.delay_s = self.nominal_delay_us / 1e6
        if self.impair is not None:
            self.impair.clear(self)
        self.refresh()

    def flush(self) -> int:
        """Forget every frame queued or in flight; returns how many (the caller counts them)."""
        n = self.queue.flush() + len(self.inflight)
        self.inflight.clear()
        return n

    def set_down(self) -> None:
        self.up = False
        dropped = self.flush()
        if dropped:
            self.counters.drop(DROP_LINK_DOWN, dropped)
        self.refresh()

    def offer(self, frame: bytearray, now: float) -> None:
        """Hand a routed frame to this port's egress."""
        if not self.up:
            self.counters.drop(DROP_LINK_DOWN)
            return
        spb = self.sec_per_byte
        delay = self.delay_s
        if spb != 0.0 or delay != 0.0:
            q = self.queue
            if q.data or q.prio or self.busy_until > now + self.early:
                if type(frame) is not bytearray:
                    frame = bytearray(frame)  # a view of an rx ring slot: a queued frame is kept
                verdict = q.enqueue(frame)
                if verdict is not ENQUEUED and verdict is not TRIMMED:
                    self.counters.drop(verdict)
                else:
                    self.active.add(self)
                m = self.qmax  # the interval's deepest queue: one compare and one max
                if now >= m.until:
                    m.roll(now)
                if q.data_bytes > m.peak:
                    m.peak = q.data_bytes
                return
            # Idle link: the frame starts serialising at once (an empty queue admits it and
            # marks nothing); it leaves now if its serialisation ends within `early`. "At
            # once" is back to the previous frame's end at most `slack` ago (ARRIVAL_SLACK_
            # SERIALISATIONS): catching up further is for frames that waited in the queue.
            busy = self.busy_until
            busy = (busy if busy > now - self.slack else now) + len(frame) * spb
            self.busy_until = busy
            if delay != 0.0 or busy > now + self.early or self.inflight:
                if type(frame) is not bytearray:
                    frame = bytearray(frame)
                self.inflight.append((busy + delay, frame))
                self.active.add(self)
                return
        # On the wire now (inline copy of _wire's common case: no gray failure).
        if self.blackhole or self.loss:
            self._wire(frame)
        elif self.transmit(frame):
            c = self.counters
            c.tx_packets += 1
            c.tx_bytes += len(frame)
        else:
            self.counters.drop(DROP_TX_ERROR)

    def service(self, now: float) -> float | None:
        """Move frames from queue to wire as time allows; returns the next time to call again."""
        q = self.queue
        if q.data or q.prio:
            busy = self.busy_until
            floor = now - self.catch_up
            spb = self.sec_per_byte
            delay = self.delay_s
            while busy <= now + self.early:
                frame = q.dequeue()
                if frame is None:
                    break
                start = busy if busy > floor else now
                busy = start + len(frame) * spb
                if delay == 0.0 and busy <= now + self.early and not self.inflight:
                    self._wire(frame)
                else:
                    self.inflight.append((busy + delay, frame))
            self.busy_until = busy
        inflight = self.inflight
        while inflight and inflight[0][0] <= now + self.early:
            self._wire(inflight.popleft()[1])
        nxt = None
        if q.data or q.prio:
            nxt = self.busy_until
        if inflight and (nxt is None or inflight[0][0] < nxt):
            nxt = inflight[0][0]
        return nxt

    def _wire(self, frame: bytes | bytearray) -> None:
        """The frame leaves the switch: gray failures act here, on the wire, after the queue."""
        if self.blackhole:
            self.counters.drop(DROP_BLACKHOLE)
            return
        if self.loss and self.rng.random() < self.loss:
            self.counters.drop(DROP_LOSS)
            return
        if self.transmit(frame):
            c = self.counters
            c.tx_packets += 1
            c.tx_bytes += len(frame)
        else:
            self.counters.drop(DROP_TX_ERROR)

    def snapshot(self) -> dict:
        q = self.queue
        c = self.counters
        return {
            "rx_packets": c.rx_packets,
            "rx_bytes": c.rx_bytes,
            "tx_packets": c.tx_packets,
            "tx_bytes": c.tx_bytes,
            "drops": dict(c.drops),
            "impairments": dict(c.impairments),
            "trims": q.trims,
            "ecn_marks": q.ecn_marks,
            "queue_bytes": q.data_bytes,
            "prio_queue_bytes": q.prio_bytes,
            "max_queue_bytes": q.max_data_bytes,
            "max_prio_queue_bytes": q.max_prio_bytes,
            "state": {
                "up": self.up,
                "blackhole": self.blackhole,
                "loss_pct": self.loss * 100,
                "rx_up": self.rx_up,
                "rx_blackhole": self.rx_blackhole,
                "rx_loss_pct": self.rx_loss * 100,
                "rate_mbps": self.rate_mbps,
                "delay_us": self.delay_s * 1e6,
                "impair": self.impair.spec.to_dict() if self.impair is not None else None,
            },
        }

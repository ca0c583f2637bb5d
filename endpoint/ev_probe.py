"""Controller-issued EV probes: "probe these EVs toward this peer, give me each one's RTT".

MRC's controller interface has such probes (`mrc_ctl`: the EV-probe endpoint operation,
answered per request with an RTT, or not at all within the batch's timeout). Here a
controller asks an endpoint over its control socket (the `probe` op); the endpoint sends one
PROBE per EV on the connection to that peer, the peer answers with the PROBE-ACK it sends for
any probe (on the EV's paired reply EV, so the RTT covers the round trip the connection's own
packets take), and each EV's RTT is the virtual time from the probe leaving to its answer.

Why a sequence space of their own: the connection's own probes re-admit a FAILED EV when their
answer comes back (`ev_policy.readmit`); a controller measuring a path must not do that behind
the connection's back, nor be confused by the connection's answers. Controller probes carry
`CTL_SEQ_BIT` in their 32-bit probe sequence (the connection's own count from 0 and would need
2^31 probes to reach it); their answers are taken here and never reach the sender.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from endpoint import codec

CTL_SEQ_BIT = 1 << 31
"""Set in the probe sequence of every controller probe (and echoed in its PROBE-ACK)."""

MAX_EVS = 4096  # EVs per request: a connection has at most 256 (TransportConfig.num_evs)


def is_ctl_seq(probe_seq: int) -> bool:
    return bool(probe_seq & CTL_SEQ_BIT)


@dataclass
class ProbeRun:
    """One request: its EVs, when it gives up, and each EV's RTT (virtual seconds) so far."""

    evs: list[int]
    started: float
    deadline: float
    rtt: dict[int, float | None] = field(default_factory=dict)  # None: not answered (yet)
    outstanding: int = 0  # probes not answered yet

    @property
    def done(self) -> bool:
        """Every probe answered, or the deadline passed (`EvProber.expire`)."""
        return self.outstanding == 0

    def result(self) -> list[dict]:
        """Per EV in request order: ``ev`` and ``rtt_us`` (virtual µs; None: no answer)."""
        return [
            {"ev": ev, "rtt_us": None if (r := self.rtt.get(ev)) is None else round(r * 1e6, 3)}
            for ev in self.evs
        ]


class EvProber:
    """A connection's controller probes: what is to be sent, what is awaited, and the runs."""

    def __init__(self, remote_qp: int, tos: int) -> None:
        self.remote_qp = remote_qp
        self.tos = tos
        self._next = 0
        self._queue: list[tuple[int, ProbeRun, int]] = []  # (ev, run, seq) not sent yet
        self._awaited: dict[int, tuple[ProbeRun, int, float]] = {}  # seq -> run, ev, sent at
        self.runs: list[ProbeRun] = []  # not done yet
        self.sent = 0
        self.answered = 0
        self.late = 0  # answers after their run gave up, duplicates, unknown sequences

    def start(self, evs: list[int], now: float, timeout: float) -> ProbeRun:
        """Queue one probe per EV (the caller checked they are the connection's)."""
        run = ProbeRun(list(evs), now, now + timeout)
        for ev in dict.fromkeys(evs):  # a repeated EV is probed once
            run.rtt[ev] = None
            seq = CTL_SEQ_BIT | self._next
            self._next = (self._next + 1) % CTL_SEQ_BIT
            self._queue.append((ev, run, seq))
            run.outstanding += 1
        self.runs.append(run)
        return run

    def take(self, now: float) -> list[tuple[int, bytes, int]]:
        """The probes to send now as (ev, payload, tos); their clock starts here (a probe
        that waited in the queue since `start` would count that wait as RTT)."""
        out = []
        for ev, run, seq in self._queue:
            if run.done:
                continue  # expired before it could leave
            self._awaited[seq] = (run, ev, now)
            out.append((ev, codec.encode_probe(self.remote_qp, ev, seq, int(now * 1e9)), self.tos))
        self._queue.clear()
        self.sent += len(out)
        return out

    @property
    def has_queued(self) -> bool:
        return bool(self._queue)

    def on_ack(self, pkt: codec.ProbeAckPacket, now: float) -> None:
        entry = self._awaited.get(pkt.probe_seq)
        if entry is None or entry[1] != pkt.ev_echo or entry[0].done:
            self.late += 1  # late, duplicated, or not an answer to that probe
            return
        del self._awaited[pkt.probe_seq]
        run, ev, sent = entry
        run.rtt[ev] = now - sent
        run.outstanding -= 1
        self.answered += 1
        if run.done:
            self.runs.remove(run)

    def next_deadline(self) -> float | None:
        return min((r.deadline for r in self.runs), default=None)

    def expire(self, now: float) -> None:
        """Runs whose deadline passed are done: their unanswered EVs stay None."""
        for run in [r for r in self.runs if r.deadline <= now]:
            run.outstanding = 0
            self.runs.remove(run)
        if not self.runs:
            self._awaited.clear()
        elif len(self._awaited) > 4 * MAX_EVS:  # answers that never came, of expired runs
            self._awaited = {s: e for s, e in self._awaited.items() if not e[0].done}

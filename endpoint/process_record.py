"""What the endpoint process records (endpoint.metrics writes it): placed bytes per bin, bytes
per path, EV transitions and RTTs, each job's counters and end, and the process's own figures.
A mixin of :class:`endpoint.process.EndpointProcess`, which owns the state.

Split from ``endpoint/process.py`` (issue 32): the event loop and the socket I/O stay there, the
control requests are in ``endpoint.process_control``.
"""

from __future__ import annotations

import os

from contracts.runtime import peak_rss_mb
from endpoint import datapath, udp_io
from endpoint.metrics import rtt_summary
from endpoint.workloads import Job

EVENTS_MAX = 4096
"""EV events kept for the `events` op between two reads; older ones are dropped and counted,
as MRC's EV event queue counts what overflowed it."""

RELEASE_BATCH = 256  # EV transitions forgotten at a time (a list slice deletion is O(n))


class Recording:
    """The records the loop writes, once per bin and at each job's end."""

    def _sample_placed(self, now: float) -> None:
        placed = self._placed
        for qp, job in self.job_of_qp.items():
            conn = self.ep.connections[qp]
            n = conn.stats.counters["bytes_placed"]
            old = placed.get(qp, 0)
            if n != old:
                placed[qp] = n
                self.bins.placed(job.job_id, conn.peer, now, n - old)

    def _tick(self, now: float) -> None:
        """Once per bin: closed bins, EV transitions, RTT summaries; counters, flush."""
        self._next_bin = (int(now / self.cfg.bin_s) + 1) * self.cfg.bin_s
        w = self.metrics
        w.write_all(self.bins.take(now))
        self._write_ev_tx(now)
        for qp, job in self.job_of_qp.items():
            self._write_paths(qp, job, now)
        if now >= self._next_stats:
            self._next_stats = now + self.stats_interval
            for job in self.jobs.values():
                if job.go_at is not None and not job.done:
                    self._write_counters(job, now, only_changed=True)
        self.control.answer_waits(self.jobs, now)
        if now >= self._next_flush:
            self._next_flush = now + self.flush_interval
            w.flush()

    def _write_paths(self, qp: int, job: Job, now: float) -> None:
        """A connection's EV transitions and RTT samples since the last bin (``ev``, ``rtt``)."""
        w = self.metrics
        conn = self.ep.connections[qp]
        st = conn.stats
        seen = self._ev_seen.get(qp, 0)
        if len(st.ev_transitions) > seen:
            for tr in st.ev_transitions[seen:]:
                rec = {
                    "type": "ev",
                    "t": tr.at,
                    "job": job.job_id,
                    "peer": conn.peer,
                    "ev": tr.ev,
                    "old": tr.old,
                    "new": tr.new,
                    "reason": tr.reason,
                }
                if tr.new == "failed":  # null: the EV never carried data
                    rec["last_tx"] = tr.last_tx
                w.write(rec)
            self._ev_seen[qp] = len(st.ev_transitions)
            self._release_transitions(qp, st.ev_transitions)
        last = self._rtt_seen.get(qp, float("-inf"))
        new = []
        for at, rtt in reversed(st.rtt_samples):
            if at <= last:
                break
            new.append(rtt)
        if new:
            self._rtt_seen[qp] = st.rtt_samples[-1][0]
            new.reverse()
            w.write(
                {"type": "rtt", "t": now, "job": job.job_id, "peer": conn.peer, **rtt_summary(new)}
            )

    def _release_transitions(self, qp: int, trs: list) -> None:
        """Forget EV transitions already written and already read by the `events` op (if
        anyone reads it; a reader more than EVENTS_MAX behind loses only what that op would
        drop anyway): the list would otherwise grow for as long as failures keep coming (a
        30-minute soak measured its endpoints' memory growing with it)."""
        written = self._ev_seen.get(qp, 0)
        read = self._events_seen.get(qp)
        gone = written if read is None else min(written, max(read, len(trs) - EVENTS_MAX))
        if gone < RELEASE_BATCH:
            return
        del trs[:gone]
        self._ev_seen[qp] -= gone
        if qp in self._events_seen:
            self._events_seen[qp] = max(0, self._events_seen[qp] - gone)

    def _write_ev_tx(self, now: float) -> None:
        """The bin just closed: bytes sent per destination address and EV (``evtx``)."""
        if not self._ev_tx:
            return
        dt = self.cfg.bin_s
        start = round((int(now / dt) - 1) * dt, 6)
        by = {f"{dst}:{ev}": n for (dst, ev), n in self._ev_tx.items()}
        self._ev_tx = {}
        self.metrics.write({"type": "evtx", "t": start, "dt": dt, "bytes": by})

    def _write_counters(self, job: Job, now: float, only_changed: bool = False) -> None:
        for _, conn in job.connections():
            peer = job.peer_of_qp[conn.local_qp]
            c = conn.stats.counters
            sig = c["data_tx"] + c["data_rx"] + c["ack_rx"] + c["nack_rx"] + c["probe_tx"]
            sig += c["ack_tx"] + c["trimmed_rx"]
            if only_changed and self._counters_sig.get(conn.local_qp) == sig:
                continue
            self._counters_sig[conn.local_qp] = sig
            s = conn.sender
            extra = gbn_state(conn) if s.policy.single_path else {}
            self.metrics.write(
                {
                    "type": "counters",
                    "t": now,
                    "job": job.job_id,
                    "peer": peer,
                    "qp": conn.local_qp,
                    "counters": dict(c),
                    "retransmits": dict(conn.stats.retransmits),
                    "drops": dict(conn.stats.drops),
                    "cwnd": int(s.cc.cwnd),
                    "cc": s.cc.snapshot(),
                    "lb": {"policy": s.evs.lb, **s.evs.lb_counts},
                    "srtt": s.rtt.srtt,
                    "inflight_bytes": s.inflight_bytes,
                    "evs_failed": sum(1 for p in s.evs.unique_paths() if p.state.value == "failed"),
                    **extra,
                }
            )

    def _job_done(self, job: Job, now: float) -> None:
        self._sample_placed(now)
        self._write_counters(job, now)
        self.metrics.write(
            {"type": "job", "t": now, "job": job.job_id, "event": "done", "status": job.status()}
        )
        self._next_bin = now  # write bins and answer waiters on this turn
        self.metrics.flush()

    def process_stats(self, now: float) -> dict:
        t = os.times()
        cpu = (t.user - self.cpu0.user) + (t.system - self.cpu0.system)
        return {
            "uptime_s": now - self.started,
            "cpu_s": cpu,
            "cpu_user_s": t.user - self.cpu0.user,
            "cpu_sys_s": t.system - self.cpu0.system,
            # The CPU figures are the process's: hosts served by one process (endpoint.shared)
            # all report it, so a sum over hosts counts each pid once.
            "pid": os.getpid(),
            "hosts_in_process": getattr(self, "hosts_in_process", 1),
            "rss_peak_mb": peak_rss_mb(),
            "rx_datagrams": self.rx_datagrams,
            "rx_by_address": {
                a: self.rx_per_nic[s] for a, s in zip(self.addrs, self.rx, strict=True)
            },
            "tx_datagrams": self.tx_datagrams,
            "tx_blocked": self.tx.blocked,
            "tx_errors": self.tx.errors,
            "tx_sockets": self.tx.fileno_count(),
            "loops": self.loops,
            # Virtual microseconds (None before any timer came due: nothing to judge).
            "timer_late_us_p99": self.timer_late.percentile(99),
            "timer_late_samples": self.timer_late.n,
            "timer_late_us_max": self.timer_late.max_us,
            "timer_late_worst": self.timer_late_worst,
            # Timers the transport armed already due, and by how much at most (virtual µs):
            # its own behaviour, not lateness of this process (endpoint.process, `work`).
            "timer_armed_overdue": self.timer_armed_overdue,
            "timer_armed_overdue_us_max": self.timer_armed_overdue_us_max,
            "timer_late_hist": self.timer_late.to_json(),
            # NIC time lost while frames waited for it (endpoint.pacer): the process did not
            # keep up with its own NIC.
            "nic_lost_bytes": round(self.pacer.lost_bytes) if self.pacer else 0,
            "nic_sent_bytes": self.pacer.sent_bytes if self.pacer else 0,
            "time_dilation": self.dilation,
            "endpoint_drops": dict(self.ep.drops),
            # datagrams longer than the receive buffer, dropped (udp_io.recv_batch)
            "rx_truncated": udp_io.rx_truncated[0],
            **datapath.describe(),
        }


def gbn_state(conn) -> dict:
    """Where a go-back-N connection stands (`single-path`, `roce`): the receiver's next PSN,
    the PSN it last NAKed and when, and the sender's oldest unacknowledged PSN and last
    rewind. A receiver whose `nak_psn` is its `rcv_nxt` drops what follows without a word:
    only the sender's timeout moves it (tests/test_go_back_n_stall.py)."""
    r, s = conn.receiver, conn.sender
    rewound = s.recovery.gbn_rewound_at
    return {
        "gbn": {
            "rcv_nxt": r.rcv_nxt,
            "nak_psn": r.gbn_nak_psn,
            "nak_at": r.gbn_nak_at,
            "snd_una": s.snd_una,
            "next_psn": s.next_psn,
            "rewound_at": None if rewound == float("-inf") else rewound,
        }
    }

"""The endpoint process: one per host namespace, the transport over real UDP sockets.

One thread, one ``select()`` loop (microsecond timeouts, unlike epoll's milliseconds) over the
data sockets, the control socket and its clients, and a self-pipe for signals. Each turn:

1. read every readable data socket in batches (``rx_batch`` datagrams) into the transport;
2. fire the transport's timers if due (lateness is measured: ``timer_late_us``);
3. hand deliveries and send completions to the jobs, which post more messages;
4. send what the transport has, through the optional pacer;
5. account placed bytes into 10 ms bins, write metrics, answer waiting ``wait`` requests;
6. sleep until the earliest of: transport timer, pacer slot, metrics flush, wait deadline.

Its clock is virtual (contracts.clock): monotonic / N at time dilation N, so the transport's
timers, the pacer and the metrics all run in the datacenter's time; select() sleeps N times
the virtual interval, and the machine's own budgets (coalescing, catch-up, stats and flush
intervals, a wait request's timeout) are real seconds, divided by N where they meet the clock.

Its parts live beside it: the config in `endpoint.process_config`, the pacer (and why the
transport is asked for only what the pacer lets go now) in `endpoint.pacer`, the control
socket's server in `endpoint.control_server`.
"""

from __future__ import annotations

import contextlib
import os
import resource
import select
import signal
import socket
import time

from contracts.clock import virtual_clock
from contracts.framing import max_frame_bytes
from contracts.stats import LateHistogram
from endpoint import udp_io
from endpoint.control_server import ControlConnection, ControlServer
from endpoint.ev import Replacement
from endpoint.ev_path import EVState
from endpoint.ev_probe import ProbeRun
from endpoint.metrics import DeliveryBins, MetricsWriter, rtt_summary
from endpoint.pacer import Pacer
from endpoint.process_config import ConfigError, EndpointConfig, job_transport_config
from endpoint.transport import Endpoint
from endpoint.workloads import Job

_JOB_KEYS = {"op", "job", "workload", "mode", "evs", "ev_base", "transport", "go", "msg_records"}


EVENTS_MAX = 4096
"""EV events kept for the `events` op between two reads; older ones are dropped and counted,
as MRC's EV event queue counts what overflowed it."""


def _deny_rule(req: dict) -> tuple[int, int]:
    """(mask, value) of a deny/allow request, both 16-bit EV bit patterns, value within mask."""
    for key in ("mask", "value"):
        v = req.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 0xFFFF:
            raise ValueError(f"{key}: expected an EV bit pattern 0..65535, got {v!r}")
    if req["value"] & ~req["mask"]:
        raise ValueError(f"value: {req['value']:#x} has bits outside mask {req['mask']:#x}")
    return req["mask"], req["value"]


REPLACE_STATES = {"good": EVState.GOOD, "denied": EVState.DENIED}
"""The states a REPLACE_EV entry may give its new EV: MRC's GOOD and DENIED (an EV assumed
bad is the transport's own finding, proven by a loss and cleared by a probe)."""
REPLACE_KEYS = {"ev", "ev_new", "state", "all_copies"}
REPLACE_MAX = 256  # entries per request: an array's worth


def _replace_entries(req: dict) -> list[Replacement]:
    """A `replace` request's entries as (ev, ev_new, state, all_copies); ValueError names the
    first bad one (nothing is applied then)."""
    entries = req.get("entries")
    if not isinstance(entries, list) or not 1 <= len(entries) <= REPLACE_MAX:
        raise ValueError(f"entries: expected a list of 1..{REPLACE_MAX} entries, got {entries!r}")
    out: list[Replacement] = []
    for k, e in enumerate(entries):
        if not isinstance(e, dict):
            raise ValueError(f"entries[{k}]: expected an object, got {e!r}")
        unknown = sorted(set(e) - REPLACE_KEYS)
        if unknown:
            raise ValueError(f"entries[{k}].{unknown[0]}: unknown key")
        for key in ("ev", "ev_new"):
            v = e.get(key)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 0xFFFF:
                raise ValueError(f"entries[{k}].{key}: expected an EV 1..65535, got {v!r}")
        state = REPLACE_STATES.get(e.get("state"))  # type: ignore[arg-type]
        if state is None:
            raise ValueError(
                f"entries[{k}].state: expected one of {', '.join(REPLACE_STATES)}, "
                f"got {e.get('state')!r}"
            )
        copies = e.get("all_copies", False)
        if not isinstance(copies, bool):
            raise ValueError(f"entries[{k}].all_copies: expected true or false, got {copies!r}")
        out.append((e["ev"], e["ev_new"], state, copies))
    return out


def _deny_peers(req: dict) -> frozenset[str] | None:
    """A deny/allow request's `peers`: the connections it is for (MRC denies per QP); None:
    every connection."""
    peers = req.get("peers")
    if peers is None:
        return None
    if not isinstance(peers, list) or not peers or not all(isinstance(p, str) for p in peers):
        raise ValueError(f"peers: expected a non-empty list of host names, got {peers!r}")
    return frozenset(peers)


RELEASE_BATCH = 256  # EV transitions forgotten at a time (a list slice deletion is O(n))


class EndpointProcess:
    """Everything one host's endpoint owns; ``run()`` is the event loop."""

    def __init__(
        self,
        host: str,
        cfg: EndpointConfig,
        control_path: str,
        metrics_path: str | None,
    ) -> None:
        if host not in cfg.hosts:
            raise ConfigError(f"--host: {host!r} is not in config.hosts")
        self.host = host
        self.cfg = cfg
        self.hosts = list(cfg.hosts)
        self.addrs = cfg.hosts[host]
        self.control_path = control_path
        self.dilation = cfg.time_dilation
        self.clock = virtual_clock(self.dilation)
        self.metrics = MetricsWriter(metrics_path)
        self.bins = DeliveryBins(cfg.bin_s)
        self.ep = Endpoint(job_transport_config(cfg, {}))
        self.jobs: dict[int, Job] = {}
        # (mask, value, peers) of the deny requests in force; peers None: every connection
        self.deny_rules: list[tuple[int, int, frozenset[str] | None]] = []
        self._events_seen: dict[int, int] = {}  # qp -> EV transitions the `events` op returned
        self.job_of_qp: dict[int, Job] = {}
        self._probes: list[tuple[ProbeRun, ControlConnection, dict]] = []  # `probe` unanswered
        self.stopping = False
        self.stop_reason = ""
        self._fds_open: list = []
        self._open_sockets()
        now = self.clock()
        self.pacer = (
            Pacer(
                cfg.pace_mbps,
                cfg.planes,
                cfg.pace_burst,
                now,
                max(2 * cfg.rx_coalesce_us, cfg.pace_catch_up_us) * 1e-6 / self.dilation,
                frame_bytes=max_frame_bytes(cfg.mtu),
            )
            if cfg.pace_mbps > 0
            else None
        )
        self.started = now
        self.cpu0 = os.times()
        self.rx_datagrams = 0
        self.tx_datagrams = 0
        self.loops = 0
        # Virtual µs by which each wake-up found the transport's earliest timer overdue, every
        # one of the run (contracts.stats: nearest-rank P99 and the maximum, which one stall
        # can make a P100).
        self.timer_late = LateHistogram()
        self._placed: dict[int, int] = {}  # qp -> bytes_placed already binned
        self._ev_tx: dict[tuple[str, int], int] = {}  # (dst addr, EV) -> bytes sent this bin
        self._ev_seen: dict[int, int] = {}  # qp -> ev transitions already written
        self._rtt_seen: dict[int, float] = {}  # qp -> time of the last RTT sample written
        self._counters_sig: dict[int, int] = {}
        self.flush_interval = cfg.flush_interval / self.dilation  # real budgets, in virtual time
        self.stats_interval = cfg.stats_interval / self.dilation
        self._next_flush = now + self.flush_interval
        self._next_bin = (int(now / cfg.bin_s) + 1) * cfg.bin_s
        self._next_stats = now + self.stats_interval
        self.metrics.write(
            {
                "type": "start",
                "t": now,
                "wall": time.time(),
                "host": host,
                "pid": os.getpid(),
                "addrs": self.addrs,
                "io": cfg.io,
                "pace_mbps": cfg.pace_mbps,
                "port": cfg.port,
                "time_dilation": self.dilation,
            }
        )
        self.metrics.flush()

    # ----- set-up ---------------------------------------------------------------------------

    def _open_sockets(self) -> None:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = min(hard, 65536) if hard != resource.RLIM_INFINITY else 65536
        if soft < want:
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        # Select-watched sockets first, so their numbers stay below FD_SETSIZE.
        self.wake_r, self.wake_w = socket.socketpair()
        for s in (self.wake_r, self.wake_w):
            s.setblocking(False)
        self.rx = [udp_io.open_rx(a, self.cfg.port) for a in self.addrs]
        self.rx_per_nic = dict.fromkeys(self.rx, 0)  # datagrams received per local address
        self.control = ControlServer(
            self.control_path,
            {
                "ping": self._ping,
                "start": self._start,
                "go": self._go,
                "wait": self._wait,
                "stats": self._stats,
                "stop": self._stop,
                "deny": self._deny,
                "allow": self._allow,
                "events": self._events,
                "drain": self._drain,
                "probe": self._probe,
                "replace": self._replace,
                "evs": self._evs,
            },
            clock=self.clock,
        )
        self.tx = udp_io.open_sender(self.cfg.io, self.addrs, self.cfg.port)
        self._rlist: list = []
        self._ctl_rlist: list = []

    def _install_signals(self) -> None:
        signal.set_wakeup_fd(self.wake_w.fileno(), warn_on_full_buffer=False)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum, _frame) -> None:
        self.stopping = True
        self.stop_reason = signal.Signals(signum).name

    # ----- the loop -------------------------------------------------------------------------

    def run(self) -> None:
        self._install_signals()
        ep = self.ep
        rx = self.rx
        rx_set = set(rx)
        batch: list = []
        rx_batch = self.cfg.rx_batch
        coalesce = self.cfg.rx_coalesce_us * 1e-6 / self.dilation
        mono = self.clock
        t_next = None
        busy = False  # the last read found datagrams: poll on a timer instead of waking per packet
        try:
            while not self.stopping:
                self.loops += 1
                now = mono()
                # t_next is from the end of the previous turn: a timer that the datagrams just
                # read moved earlier fires one turn later, which is harmless, and the
                # transport's timer scan runs once per turn instead of twice.
                if t_next is not None and t_next <= now:
                    # The wake-up's lateness against the earliest timer that was due, taken
                    # before the datagrams are read: ACKs that move the timer do not make a
                    # late wake-up on time (sampling after them hid the overloaded case).
                    self.timer_late.add((now - t_next) * 1e6)
                    # Read what already arrived before any timer fires: after the process was
                    # descheduled for a while (2 shared cores), the ACKs of the packets whose
                    # RTO is "due" are usually sitting in the socket, and firing first would
                    # retire every EV of a healthy connection at once.
                    got = self._drain_rx(batch, rx_batch, now)
                    if got:
                        t_next = ep.next_timer()
                    if t_next is not None and t_next <= now:
                        ep.on_timer(now)
                self._app(now)
                wake = self._transmit(now)
                if self._probes:  # answered (read last turn) or expired (timers above)
                    self._answer_probes()
                if now >= self._next_bin:
                    self._tick(now)
                t_next = ep.next_timer()
                polling = busy and coalesce > 0
                deadline = self._deadline(now, t_next, wake, polling, coalesce)
                try:
                    readable, writable = self._select(deadline, polling)
                except InterruptedError:
                    continue
                now = mono()
                got = self._read(rx if polling else readable, rx_set, batch, rx_batch, now)
                busy = got > 0
                self._serve_control(readable, writable, rx_set)
        finally:
            self._shutdown()

    def _deadline(
        self, now: float, t_next: float | None, wake: float | None, polling: bool, coalesce: float
    ) -> float:
        """When this turn's sleep ends: the earliest of the next bin, the transport's timer,
        the pacer's next slot, a retry of a full socket buffer and (polling) the poll interval."""
        deadline = self._next_bin
        if t_next is not None and t_next < deadline:
            deadline = t_next
        if wake is not None:
            if polling:
                wake = max(wake, now + coalesce)  # the bucket holds 2 x coalesce of rate
            if wake < deadline:
                deadline = wake
        if self.tx.backlog:
            # socket buffer full: retry soon (200 real us)
            deadline = min(deadline, now + 200e-6 / self.dilation)
        if polling:
            # Interrupt moderation (as NAPI): while packets keep coming, sleep a fixed
            # interval with the data sockets unwatched and then read all that arrived.
            # On this kind of VM every wake-up costs ~30-50 us of CPU, more than a
            # packet's processing, so one wake per packet would double the cost.
            deadline = min(deadline, now + coalesce)
        return deadline

    def _select(self, deadline: float, polling: bool) -> tuple[list, list]:
        """Sleep until ``deadline`` or until a watched socket is ready (data sockets unwatched
        while ``polling``); returns the readable and the writable ones."""
        control = self.control
        if control.fds_dirty:
            self._ctl_rlist = [control.listener, self.wake_r, *control.clients]
            self._rlist = [*self.rx, *self._ctl_rlist]
            control.fds_dirty = False
        wlist = control.writers() if control.pending_out else []
        timeout = (deadline - self.clock()) * self.dilation
        readable, writable, _ = select.select(
            self._ctl_rlist if polling else self._rlist,
            wlist,
            [],
            timeout if timeout > 0 else 0,
        )
        return readable, writable

    def _read(self, socks: list, rx_set: set, batch: list, limit: int, now: float) -> int:
        """One batch from each data socket among ``socks`` into the transport; returns how many
        datagrams."""
        ep = self.ep
        got = 0
        for s in socks:
            if s in rx_set:
                batch.clear()
                n = udp_io.recv_batch(s, batch, limit)
                if n:
                    got += n
                    self.rx_per_nic[s] += n
                    for data, tos in batch:
                        ep.on_datagram(data, tos, now)
        if got:
            self.rx_datagrams += got
            self._sample_placed(now)
        return got

    def _serve_control(self, readable: list, writable: list, rx_set: set) -> None:
        control = self.control
        for s in readable:
            if s in rx_set:
                continue
            if s is self.wake_r:
                with contextlib.suppress(BlockingIOError):
                    self.wake_r.recv(4096)
            else:
                control.on_readable(s)
        for s in writable:
            control.on_writable(s)

    def _drain_rx(self, batch: list, limit: int, now: float) -> int:
        got = 0
        for s in self.rx:
            while True:
                batch.clear()
                n = udp_io.recv_batch(s, batch, limit)
                for data, tos in batch:
                    self.ep.on_datagram(data, tos, now)
                got += n
                self.rx_per_nic[s] += n
                if n < limit:
                    break
        if got:
            self.rx_datagrams += got
            self._sample_placed(now)
        return got

    def _app(self, now: float) -> None:
        ep = self.ep
        jobs = self.job_of_qp
        for d in ep.take_deliveries():
            job = jobs.get(d.qp)
            if job is not None:
                self.bins.delivered(job.job_id, d.at, len(d.data))
                was = job.done
                job.on_delivery(d)
                if job.done and not was:
                    self._job_done(job, now)
        for c in ep.take_completions():
            job = jobs.get(c.qp)
            if job is not None:
                was = job.done
                job.on_completion(c)
                if job.done and not was:
                    self._job_done(job, now)

    def _transmit(self, now: float) -> float | None:
        tx = self.tx
        if tx.backlog and not tx.flush():
            return None
        pacer = self.pacer
        addrs = self.cfg.hosts
        if pacer is None:
            for t in self.ep.poll_transmit(now):
                self._paced_send(t.plane, t.ev, addrs[t.peer][t.plane], t.payload, t.tos)
            return None
        wake = pacer.drain(now, self._paced_send) if pacer.queued else None
        queued = pacer.data_queued()
        if queued >= self.cfg.pace_queue:
            return wake
        # Only what the buckets let go now, plus pace_queue: the transport stamps a packet's
        # send time when it hands it out, so a window's worth waiting here would be RTT.
        out = self.ep.poll_transmit(now, pacer.frames_now(now) + self.cfg.pace_queue - queued)
        if not out:
            return wake
        control = self.ep.cfg.tos_control  # the fabric's control DSCP (endpoint config)
        for t in out:
            pacer.push(t.plane, (t.ev, addrs[t.peer][t.plane], t.payload, t.tos), t.tos == control)
        return pacer.drain(now, self._paced_send)

    def _paced_send(self, plane: int, ev: int, dst: str, payload: bytes, tos: int) -> None:
        self.tx.send(plane, ev, dst, payload, tos)
        self.tx_datagrams += 1
        key = (dst, ev)
        # Bytes per (destination, EV) per bin: which path carried the traffic (the runner maps
        # an EV to its spine with the switches' own hash, testbed.fabric.paths.predict_path).
        self._ev_tx[key] = self._ev_tx.get(key, 0) + len(payload)

    # ----- metrics --------------------------------------------------------------------------

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
                w.write(
                    {
                        "type": "ev",
                        "t": tr.at,
                        "job": job.job_id,
                        "peer": conn.peer,
                        "ev": tr.ev,
                        "old": tr.old,
                        "new": tr.new,
                        "reason": tr.reason,
                    }
                )
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
        for peer, conn in job.conns.items():
            c = conn.stats.counters
            sig = c["data_tx"] + c["data_rx"] + c["ack_rx"] + c["nack_rx"] + c["probe_tx"]
            sig += c["ack_tx"] + c["trimmed_rx"]
            if only_changed and self._counters_sig.get(conn.local_qp) == sig:
                continue
            self._counters_sig[conn.local_qp] = sig
            s = conn.sender
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

    # ----- control requests (endpoint.control documents them) ------------------------------

    def _ping(self, req: dict, c: ControlConnection, now: float) -> dict:
        return {"ok": True, "host": self.host, "pid": os.getpid(), "jobs": list(self.jobs)}

    def _go(self, req: dict, c: ControlConnection, now: float) -> dict:
        return self._job_event(req, now, "go")

    def _job_event(self, req: dict, now: float, event: str) -> dict:
        """`go` or `drain` the request's job, record it, and finish the job if that ended it."""
        job = self._job(req)
        was = job.done
        if event == "go":
            job.go(now)
        else:
            job.drain(now)
        self.metrics.write({"type": "job", "t": now, "job": job.job_id, "event": event})
        if job.done and not was:
            self._job_done(job, now)
        return {"ok": True, "t": now}

    def _wait(self, req: dict, c: ControlConnection, now: float) -> dict | None:
        job = self._job(req)
        timeout = req.get("timeout", 60.0)  # real seconds: how long the caller will wait
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout < 0:
            raise ValueError("timeout: expected seconds >= 0")
        if job.done:
            return {"ok": True, "done": True, "status": job.status()}
        self.control.wait(c, job.job_id, now + timeout / self.dilation)
        return None

    def _drain(self, req: dict, c: ControlConnection, now: float) -> dict:
        """The job posts nothing new; what is in flight completes (see Job.drain)."""
        return self._job_event(req, now, "drain")

    def _stop(self, req: dict, c: ControlConnection, now: float) -> dict:
        self.stopping = True
        self.stop_reason = "stop request"
        return {"ok": True}

    # ----- deny masks (MRC's EV deny; docs/transport.md, "Deny masks") ----------------------

    def _deny(self, req: dict, c: ControlConnection, now: float) -> dict:
        """Deny every EV with ev & mask == value on every connection (or those to `peers`), now
        and later ones: all or none (a connection that would keep fewer than min_active_evs
        refuses it)."""
        rule = _deny_rule(req)
        peers = _deny_peers(req)
        conns = self._conns_to(peers, self.ep.connections.values())
        denied = self._deny_on(conns, rule, now)
        if (*rule, peers) not in self.deny_rules:
            self.deny_rules.append((*rule, peers))
        return {"ok": True, "denied": denied, "qps": len(conns)}

    def _allow(self, req: dict, c: ControlConnection, now: float) -> dict:
        rule = _deny_rule(req)
        peers = _deny_peers(req)
        if (*rule, peers) in self.deny_rules:
            self.deny_rules.remove((*rule, peers))
        conns = self._conns_to(peers, self.ep.connections.values())
        back = sum(len(conn.sender.evs.allow(*rule, now)) for conn in conns)
        return {"ok": True, "allowed": back}

    # ----- REPLACE_EV and QUERY_EV_ARRAY (docs/transport.md, "Replacing EVs") ----------------

    def _replace(self, req: dict, c: ControlConnection, now: float) -> dict:
        """Replace EVs on every connection (or those to `peers`) that has them: all or none.
        Every connection is checked before any changes; an entry whose `ev` no connection has
        is an error, as is a connection with one fixed EV (single-path, roce)."""
        entries = _replace_entries(req)
        conns = self._conns_to(_deny_peers(req), self.ep.connections.values())
        found = [False] * len(entries)
        for conn in conns:
            hits = [False] * len(entries)
            try:
                conn.sender.evs.replace(entries, now, dry_run=True, hits=hits)
            except ValueError as exc:
                raise ValueError(f"{self.host}, connection to {conn.peer}: {exc}") from None
            if any(hits) and conn.sender.policy.single_path:
                raise ValueError(
                    f"{self.host}: the connection to {conn.peer} is {conn.sender.cfg.mode.value}: "
                    "one fixed EV, nothing to replace"
                )
            found = [a or b for a, b in zip(found, hits, strict=True)]
        if not all(found):
            k = found.index(False)
            raise ValueError(f"entries[{k}].ev: {entries[k][0]} is not an EV of any connection")
        replaced = sum(conn.sender.evs.replace(entries, now) for conn in conns)
        return {"ok": True, "replaced": replaced, "qps": len(conns)}

    def _evs(self, req: dict, c: ControlConnection, now: float) -> dict:
        """Every connection's EV array (or those to `peers`), slot by slot: MRC's
        QUERY_EV_ARRAY."""
        conns = self._conns_to(_deny_peers(req), self.ep.connections.values())
        return {
            "ok": True,
            "host": self.host,
            "t": now,
            "qps": [
                {"qp": conn.local_qp, "peer": conn.peer, "evs": conn.sender.evs.array()}
                for conn in conns
            ],
        }

    @staticmethod
    def _conns_to(peers: frozenset[str] | None, conns) -> list:
        return [c for c in conns if peers is None or c.peer in peers]

    def _events(self, req: dict, c: ControlConnection, now: float) -> dict:
        """EV state changes of every connection since the last `events` request (MRC's EV event
        queue, read by a controller): virtual time, QP, peer, EV, old -> new, reason. At most
        EVENTS_MAX per read; the oldest beyond that are dropped and counted."""
        out = []
        for qp, conn in self.ep.connections.items():
            trs = conn.stats.ev_transitions
            seen = self._events_seen.get(qp, 0)
            for tr in trs[seen:]:
                out.append(
                    {"t": tr.at, "qp": qp, "peer": conn.peer, "ev": tr.ev, "old": tr.old,
                     "new": tr.new, "reason": tr.reason}
                )  # fmt: skip
            self._events_seen[qp] = len(trs)
        out.sort(key=lambda e: e["t"])
        dropped = max(0, len(out) - EVENTS_MAX)
        return {
            "ok": True,
            "host": self.host,
            "now": now,
            "events": out[dropped:],
            "dropped": dropped,
        }

    # ----- controller EV probes (MRC's EV probe; endpoint.ev_probe) -------------------------

    def _probe(self, req: dict, c: ControlConnection, now: float) -> dict | None:
        """Probe `evs` (default: all) of the connection to `peer`; answered when every probe
        is or `timeout_us` (virtual) passed, with each EV's RTT in virtual µs or None."""
        peer = req.get("peer")
        conns = [x for x in self.ep.connections.values() if x.peer == peer]
        if "job" in req:
            job = self._job(req)
            conns = [x for x in conns if self.job_of_qp.get(x.local_qp) is job]
        if not conns:
            raise ValueError(f"peer: {self.host} has no connection to {peer!r} (start a job first)")
        conn = conns[-1]  # the newest: the one a running job is most likely using
        evs = req.get("evs")
        if evs is None:
            evs = [p.ev for p in conn.sender.evs.unique_paths()]
        if not isinstance(evs, list) or not all(
            isinstance(e, int) and not isinstance(e, bool) for e in evs
        ):
            raise ValueError(f"evs: expected a list of EV numbers, got {evs!r}")
        timeout = req.get("timeout_us", 1000.0)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout:
            raise ValueError(f"timeout_us: expected virtual microseconds > 0, got {timeout!r}")
        if timeout > 10e6:
            raise ValueError(f"timeout_us: at most 10 s of virtual time, got {timeout!r}")
        run = conn.probe(evs, now, timeout * 1e-6)
        paths = conn.sender.evs.by_ev
        base = {
            "ok": True,
            "host": self.host,
            "peer": peer,
            "qp": conn.local_qp,
            "t": now,
            "timeout_us": timeout,
            # each EV's state when asked: a DENIED or FAILED EV may answer (the path healed)
            "states": {str(ev): paths[ev].state.value for ev in dict.fromkeys(evs)},
        }
        self._probes.append((run, c, base))
        return None

    def _answer_probes(self) -> None:
        """Answer the `probe` requests whose probes are all answered or timed out (the
        transport's timer expires them: Connection.next_timer includes their deadlines)."""
        keep = []
        for run, client, base in self._probes:
            if run.done:
                self.control.reply(client, {**base, "probes": run.result()})
            else:
                keep.append((run, client, base))
        self._probes = keep

    def _deny_on(self, conns: list, rule: tuple[int, int], now: float) -> int:
        """`rule` on every connection of `conns` that has not got it, all or none; returns how
        many EVs it denied. A refusal undoes it where it was just applied, and only there."""
        applied = []
        denied = 0
        try:
            for conn in conns:
                evs = conn.sender.evs
                if rule in evs.deny_rules:
                    continue
                denied += len(evs.deny(*rule, now))
                applied.append(evs)
        except ValueError as exc:
            for evs in applied:
                evs.allow(*rule, now)
            raise ValueError(f"{self.host}: {exc}") from None
        return denied

    def _job(self, req: dict) -> Job:
        job = self.jobs.get(req.get("job"))  # type: ignore[arg-type]
        if job is None:
            raise ValueError(f"job: no job {req.get('job')!r} on {self.host} (start it first)")
        return job

    def _start(self, req: dict, c: ControlConnection, now: float) -> dict:
        for key in req:
            if key not in _JOB_KEYS:
                raise ValueError(f"{key}: unknown key in a start request")
        job_id = req.get("job")
        if job_id in self.jobs:
            raise ValueError(f"job: {job_id} exists on {self.host}")
        if "workload" not in req:
            raise ValueError("workload: required")
        tcfg = job_transport_config(self.cfg, req)
        msg_records = req.get("msg_records", True)
        if not isinstance(msg_records, bool):
            raise ValueError(f"msg_records: expected true or false, got {msg_records!r}")
        job = Job(
            job_id, req["workload"], self.host, self.hosts, self.ep, tcfg, self._emit, now,
            msg_records=msg_records,
        )  # fmt: skip
        try:  # the deny rules in force hold for the job's connections too, or it does not start
            for mask, value, peers in self.deny_rules:
                self._deny_on(self._conns_to(peers, job.conns.values()), (mask, value), now)
        except ValueError:
            for conn in job.conns.values():
                self.ep.connections.pop(conn.local_qp, None)
            raise
        self.jobs[job_id] = job
        for qp in job.peer_of_qp:
            self.job_of_qp[qp] = job
        self.metrics.write(
            {
                "type": "job",
                "t": now,
                "job": job_id,
                "event": "prepared",
                "workload": req["workload"],
                "mode": tcfg.mode.value,
                "evs": tcfg.num_evs,
                "ev_base": tcfg.ev_base,
                "ev_seed": tcfg.ev_seed,
                # Each connection's first EV (its UDP source port in single-path mode).
                "ev_bases": {peer: conn.cfg.ev_base for peer, conn in job.conns.items()},
                "planes": tcfg.planes,
                "peers": list(job.conns),
            }
        )
        if req.get("go"):
            job.go(now)
            self.metrics.write({"type": "job", "t": now, "job": job_id, "event": "go"})
            if job.done:
                self._job_done(job, now)
        self.metrics.flush()
        return {"ok": True, "job": job_id, "peers": list(job.conns), "t": now}

    def _emit(self, record: dict) -> None:
        self.metrics.write(record)

    def process_stats(self, now: float) -> dict:
        t = os.times()
        cpu = (t.user - self.cpu0.user) + (t.system - self.cpu0.system)
        return {
            "uptime_s": now - self.started,
            "cpu_s": cpu,
            "cpu_user_s": t.user - self.cpu0.user,
            "cpu_sys_s": t.system - self.cpu0.system,
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
            "timer_late_hist": self.timer_late.to_json(),
            # NIC time lost while frames waited for it (endpoint.pacer): the process did not
            # keep up with its own NIC.
            "nic_lost_bytes": round(self.pacer.lost_bytes) if self.pacer else 0,
            "nic_sent_bytes": self.pacer.sent_bytes if self.pacer else 0,
            "time_dilation": self.dilation,
            "endpoint_drops": dict(self.ep.drops),
        }

    def _stats(self, req: dict, c: ControlConnection, now: float) -> dict:
        jobs = [self._job(req)] if "job" in req else list(self.jobs.values())
        out = {}
        for job in jobs:
            conns = {}
            for peer, conn in job.conns.items():
                snap = conn.snapshot()
                snap["ev_states"] = dict(snap["ev_states"])
                conns[peer] = snap
            out[str(job.job_id)] = {"status": job.status(), "connections": conns}
        return {"ok": True, "host": self.host, "process": self.process_stats(now), "jobs": out}

    # ----- shutdown -------------------------------------------------------------------------

    def _shutdown(self) -> None:
        now = self.clock()
        self._sample_placed(now)
        w = self.metrics
        w.write_all(self.bins.take())
        self._write_ev_tx(now + self.cfg.bin_s)
        for job in self.jobs.values():
            self._write_counters(job, now)
        self._next_bin = now
        self.control.answer_waits(self.jobs, None)
        for run, _, _ in self._probes:
            run.outstanding = 0  # stopping: what was answered is the answer
        self._answer_probes()
        w.write(
            {
                "type": "end",
                "t": now,
                "reason": self.stop_reason or "loop ended",
                "process": self.process_stats(now),
            }
        )
        w.close()
        self.control.close()
        self.tx.close()
        for s in (*self.rx, self.wake_r, self.wake_w):
            s.close()
        with contextlib.suppress(ValueError):
            signal.set_wakeup_fd(-1)

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

Each turn reads a data socket in one burst and sends the turn's packets in one burst
(``endpoint.udp_io``: recvmmsg and sendmmsg on the C data path, ``endpoint.datapath``).

Its parts live beside it: the config in `endpoint.process_config`, the pacer (and why the
transport is asked for only what the pacer lets go now) in `endpoint.pacer`, the control
socket's server in `endpoint.control_server`, the control requests' handlers in
`endpoint.process_control` and what the process records in `endpoint.process_record` (mixins of
this class: one object's state, three modules).
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
from endpoint import datapath, udp_io
from endpoint.control_server import ControlConnection, ControlServer
from endpoint.ev_probe import ProbeRun
from endpoint.metrics import DeliveryBins, MetricsWriter
from endpoint.pacer import Pacer
from endpoint.process_config import ConfigError, EndpointConfig, job_transport_config
from endpoint.process_control import (  # noqa: F401 (re-exported: the helpers' old home)
    REPLACE_KEYS,
    REPLACE_MAX,
    REPLACE_STATES,
    ControlHandlers,
    _deny_peers,
    _deny_rule,
    _replace_entries,
)
from endpoint.process_record import EVENTS_MAX, RELEASE_BATCH, Recording  # noqa: F401
from endpoint.transport import Endpoint
from endpoint.workloads import Job


class EndpointProcess(ControlHandlers, Recording):
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
        self._tx_pass: list = []  # (plane, ev, dst, payload, tos) of this transmit pass
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
                **datapath.describe(),
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
            self._handlers(),
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
        """The loop of a process serving this host alone (endpoint.shared runs several hosts'
        turns in one loop): a turn's work, a sleep until its deadline or a watched socket,
        then what woke it."""
        self._install_signals()
        self.begin()
        try:
            while not self.stopping:
                deadline, polling = self.work(self.clock())
                try:
                    readable, writable = self._select(deadline, polling)
                except InterruptedError:
                    continue
                self.woken(readable, writable, self.clock())
        finally:
            self._shutdown()

    def begin(self) -> None:
        """State the turns share, set once before the first."""
        self._rx_set = set(self.rx)
        self._batch: list = []
        self._coalesce = self.cfg.rx_coalesce_us * 1e-6 / self.dilation
        self._t_next: float | None = None
        self._job_deadline: float | None = None
        # The last read found datagrams: poll on a timer instead of waking per packet.
        self._busy = False
        self._polling = False
        self._sleep_until = self._woken_at = self.clock()
        self.timer_late_worst: dict[str, float | None] | None = None
        self._select_timeout: float | None = None
        self._t_next_at = self._sleep_until
        self.timer_armed_overdue = 0
        self.timer_armed_overdue_us_max = 0.0

    def work(self, now: float) -> tuple[float, bool]:
        """A turn's work at `now`: timers, the jobs, a transmit pass, ticks. Returns when the
        turn's sleep must end and whether the data sockets are polled (unwatched) meanwhile."""
        self.loops += 1
        ep = self.ep
        t_next = self._t_next
        # t_next is from the end of the previous turn: a timer that the datagrams just read
        # moved earlier fires one turn later, which is harmless, and the transport's timer
        # scan runs once per turn instead of twice.
        if t_next is not None and t_next <= now:
            # The wake-up's lateness against the earliest timer that was due, taken before
            # the datagrams are read: ACKs that move the timer do not make a late wake-up on
            # time (sampling after them hid the overloaded case). Late from when the loop
            # could first know the timer: a transport can arm one already overdue (the RTO of
            # a packet sent long ago, once an ACK ends the backoff), and the loop cannot be
            # late for it before the turn that armed it (`timer_armed_overdue`).
            known = self._t_next_at
            late_us = (now - (t_next if t_next > known else known)) * 1e6
            if late_us > self.timer_late.max_us:
                self._note_worst(now, t_next)
            self.timer_late.add(late_us)
            # Read what already arrived before any timer fires: after the process was
            # descheduled for a while (2 shared cores), the ACKs of the packets whose RTO is
            # "due" are usually sitting in the socket, and firing first would retire every EV
            # of a healthy connection at once.
            got = self._drain_rx(self._batch, self.cfg.rx_batch, now)
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
        wait_t = self.control.next_wait_deadline()
        if wait_t is not None and wait_t <= now:
            self.control.answer_waits(self.jobs, now)
            wait_t = self.control.next_wait_deadline()
        t_next = ep.next_timer()
        job_t = self._job_deadline
        # A job's timer is a timer of this process: its lateness counts like the transport's.
        self._t_next = t_next if job_t is None or (t_next is not None and t_next < job_t) else job_t
        self._t_next_at = now
        if self._t_next is not None and self._t_next < now:
            # Armed already overdue: the transport's doing, not the loop's (reported, not
            # judged); it fires on the next turn, after the datagrams waiting are read.
            self.timer_armed_overdue += 1
            over_us = (now - self._t_next) * 1e6
            if over_us > self.timer_armed_overdue_us_max:
                self.timer_armed_overdue_us_max = over_us
        self._polling = self._busy and self._coalesce > 0
        self._sleep_until = self._deadline(now, self._t_next, wake, self._polling, self._coalesce)
        if wait_t is not None and wait_t < self._sleep_until:
            self._sleep_until = wait_t  # a caller's wait times out then (not a timer: unjudged)
        return self._sleep_until, self._polling

    def _note_worst(self, now: float, due: float) -> None:
        """Where the worst wake-up's lateness went, for a verdict that must say why: the sleep
        (woken after the deadline the last turn set: the machine did not run us) or the turn
        after it (woken on time, then `woken` and the turns of other hosts took the time).
        Virtual seconds; only a new maximum pays for this."""
        self.timer_late_worst = {
            "at": now,
            "due": due,
            "sleep_until": self._sleep_until,
            "woken_at": self._woken_at,
            "overslept_us": (self._woken_at - self._sleep_until) * 1e6,
            "turn_us": (now - self._woken_at) * 1e6,
            # The last sleep's timeout in real seconds (None in endpoint.shared's loop).
            "select_timeout_s": self._select_timeout,
            "known_at": self._t_next_at,
        }

    def woken(self, readable: list, writable: list, now: float) -> None:
        """What woke the turn's sleep: the data sockets (all of them while polling), then the
        control socket, its clients and the signal pipe."""
        self._woken_at = now
        socks = self.rx if self._polling else readable
        got = self._read(socks, self._rx_set, self._batch, self.cfg.rx_batch, now)
        self._busy = got > 0
        self._serve_control(readable, writable, self._rx_set)

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
        rlist, wlist = self.watched(polling)
        timeout = (deadline - self.clock()) * self.dilation
        self._select_timeout = timeout  # real seconds asked for (timer_late_worst)
        readable, writable, _ = select.select(rlist, wlist, [], timeout if timeout > 0 else 0)
        return readable, writable

    def watched(self, polling: bool) -> tuple[list, list]:
        """The sockets a sleep watches: to read (the data sockets unless ``polling``, the
        control socket and its clients, the signal pipe) and to write (clients with replies
        pending)."""
        control = self.control
        if control.fds_dirty:
            self._ctl_rlist = [control.listener, self.wake_r, *control.clients]
            self._rlist = [*self.rx, *self._ctl_rlist]
            control.fds_dirty = False
        wlist = control.writers() if control.pending_out else []
        return (self._ctl_rlist if polling else self._rlist), wlist

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
        self._job_deadline = None
        for job in self.jobs.values():
            # Roles that wait in virtual time (a trace's compute): what is due, then when next.
            t = job.next_deadline()
            if t is None:
                continue
            if t <= now:
                was = job.done
                job.poll(now)
                if job.done and not was:
                    self._job_done(job, now)
                t = job.next_deadline()
            if t is not None and (self._job_deadline is None or t < self._job_deadline):
                self._job_deadline = t

    def _transmit(self, now: float) -> float | None:
        """One transmit pass: what the transport and the pacer let go now, sent as one burst
        (``_send_pass``); returns when the pacer wants the loop back (None: not waiting)."""
        tx = self.tx
        if tx.backlog and not tx.flush():
            return None
        try:
            return self._transmit_pass(now)
        finally:
            self._send_pass()

    def _transmit_pass(self, now: float) -> float | None:
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

    _tx_pass: list = []  # noqa: RUF012 (replaced per instance in __init__; a stub never fills it)

    def _paced_send(self, plane: int, ev: int, dst: str, payload: bytes, tos: int) -> None:
        """A packet that may leave now: into this pass's burst (sent by ``_send_pass``)."""
        self._tx_pass.append((plane, ev, dst, payload, tos))
        self.tx_datagrams += 1
        key = (dst, ev)
        # Bytes per (destination, EV) per bin: which path carried the traffic (the runner maps
        # an EV to its spine with the switches' own hash, testbed.fabric.paths.predict_path).
        self._ev_tx[key] = self._ev_tx.get(key, 0) + len(payload)

    def _send_pass(self) -> None:
        """The pass's packets, in order, in one burst: one sendmmsg per run of one socket on the
        C data path, a sendto each on the Python one (``udp_io``)."""
        batch = self._tx_pass
        if batch:
            self.tx.send_many(batch)
            batch.clear()

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

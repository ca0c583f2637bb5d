"""The endpoint process: one per host namespace, the transport over real UDP sockets.

One thread, one ``select()`` loop (microsecond timeouts, unlike epoll's milliseconds) over the
data sockets, the control socket and its clients, and a self-pipe for signals. Each turn:

1. read every readable data socket in batches (``rx_batch`` datagrams) into the transport;
2. fire the transport's timers if due (lateness is measured: ``timer_late_us``);
3. hand deliveries and send completions to the jobs, which post more messages;
4. send what the transport has, through the optional pacer;
5. account placed bytes into 10 ms bins, write metrics, answer waiting ``wait`` requests;
6. sleep until the earliest of: transport timer, pacer slot, metrics flush, wait deadline.

**Pacing** (``pace_mbps`` > 0, normally the NIC rate): a token bucket per NIC counting frame
bytes (payload + 42), as the host's ``tbf`` and the switches do. The transport is asked for
only as many data packets as the buckets let go now plus ``pace_queue``, and not at all while
``pace_queue`` wait, so data waits inside the transport rather than in a host queue: send
timestamps stay within a few packets of the real departure, and the host qdisc — whose
overflow would be a silent local loss that the sender must not mistake for a path failure —
never fills. (Asked for everything its window allowed, the sender handed out a window at a
time, and the time those packets then queued here counted as RTT: 6-9 ms of it at 100 Mbps
on a fabric whose base RTT is ~1.5 ms.) Control packets go ahead of queued data.
"""

from __future__ import annotations

import contextlib
import os
import resource
import select
import signal
import socket
import time
from collections import deque
from dataclasses import dataclass, field, fields

from contracts.framing import FRAME_OVERHEAD
from contracts.ports import ROCEV2_UDP_PORT
from endpoint import io as dio
from endpoint.config import Mode, TransportConfig
from endpoint.control import LineBuffer, encode, parse_request
from endpoint.metrics import BIN_S, DeliveryBins, MetricsWriter, rtt_summary
from endpoint.transport import Endpoint
from endpoint.workloads import Job, WorkloadError

_TRANSPORT_FIELDS = {f.name for f in fields(TransportConfig)}
_JOB_KEYS = {"op", "job", "workload", "mode", "evs", "ev_base", "transport", "go"}

# TransportConfig's defaults are tuned on endpoint.simnet, where nothing but the modelled
# network delays a packet. On the emulated fabric every switch and endpoint is a Python process
# sharing two cores, and a process can wait for the CPU for tens of milliseconds; measured there
# (docs/transport.md, "Endpoint process"), these replace four defaults in every job unless the
# config or the start request sets them:
EMULATION_TRANSPORT = {
    # Sprayed packets overtake each other by a few ms when a spine process is descheduled; a
    # 200 us RACK allowance retired ~1 healthy EV per 50 packets and resent their packets.
    "reorder_min": 2e-3,
    # RTTs reach 40-80 ms during an 8-to-1 incast (the processes wait for the CPU), so a 15 ms
    # RTO fired spuriously and retired every EV of the expired packets.
    "rto_min": 50e-3,
    "rto_initial": 60e-3,
    # Below one packet the sender paces at srtt x size / cwnd; with an incast-inflated srtt a
    # flow whose window was cut to 128 B by trims sent one packet per ~250 ms and finished last.
    "min_cwnd": 1400,
}


class ConfigError(ValueError):
    """A bad endpoint config; the message names the key path."""


@dataclass
class EndpointConfig:
    """What every endpoint of a fabric shares (the ``--config`` JSON)."""

    hosts: dict[str, list[str]]  # host -> its NIC addresses, plane 1 first (config order = index)
    port: int = ROCEV2_UDP_PORT
    io: str = "udp"
    pace_mbps: float = 0.0  # 0 = no pacing
    pace_queue: int = 2  # packets queued in the pacer before the transport is no longer polled
    pace_burst: int = 4  # frames of token-bucket depth, at least
    # ... and at least this much time of rate: a process that wakes this late (it waited for a
    # CPU) still sends at the full rate. 500 us (2 x coalescing) lost ~30 % of a paced bulk's
    # rate on the fabric (60-68 vs 82-91 Mbps at 100 Mbps; docs/transport.md, "Pacing"); the
    # burst lands in the host NIC's tbf queue, which sends it at line rate.
    pace_catch_up_us: float = 2000.0
    rx_batch: int = 64
    rx_coalesce_us: float = 250.0  # interrupt moderation while busy (0 = wake per datagram)
    bin_s: float = BIN_S
    stats_interval: float = 0.1
    flush_interval: float = 0.2
    transport: dict = field(default_factory=dict)  # TransportConfig defaults for every job

    @classmethod
    def from_obj(cls, obj: object) -> EndpointConfig:
        if not isinstance(obj, dict):
            raise ConfigError("config: expected a JSON object")
        known = {f.name for f in fields(cls)}
        for key in obj:
            if key not in known:
                raise ConfigError(f"config.{key}: unknown key")
        hosts = obj.get("hosts")
        if not isinstance(hosts, dict) or not hosts:
            raise ConfigError("config.hosts: expected {host: [address per plane], ...}")
        planes = None
        for h, addrs in hosts.items():
            if isinstance(addrs, str):
                addrs = [addrs]
            if not isinstance(addrs, list) or not addrs:
                raise ConfigError(f"config.hosts.{h}: expected a list of addresses")
            for i, a in enumerate(addrs):
                try:
                    socket.inet_aton(a)
                except (OSError, TypeError):
                    raise ConfigError(
                        f"config.hosts.{h}[{i}]: not an IPv4 address: {a!r}"
                    ) from None
            if planes is not None and len(addrs) != planes:
                raise ConfigError(f"config.hosts.{h}: every host needs one address per plane")
            planes = len(addrs)
            hosts[h] = list(addrs)
        cfg = cls(**{k: v for k, v in obj.items()})
        if not isinstance(cfg.port, int) or not 0 < cfg.port < 65536:
            raise ConfigError("config.port: expected a UDP port")
        if cfg.io not in dio.IO_KINDS:
            raise ConfigError(f"config.io: one of {', '.join(dio.IO_KINDS)}")
        for key in (
            "pace_mbps",
            "bin_s",
            "stats_interval",
            "flush_interval",
            "rx_coalesce_us",
            "pace_catch_up_us",
        ):
            v = getattr(cfg, key)
            if not isinstance(v, int | float) or isinstance(v, bool) or v < 0:
                raise ConfigError(f"config.{key}: expected a number >= 0")
        if cfg.bin_s <= 0:
            raise ConfigError("config.bin_s: must be > 0")
        for key in ("pace_queue", "pace_burst", "rx_batch"):
            v = getattr(cfg, key)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"config.{key}: expected an integer >= 1")
        _check_transport(cfg.transport, "config.transport")
        return cfg

    @property
    def planes(self) -> int:
        return len(next(iter(self.hosts.values())))


def _check_transport(overrides: object, path: str) -> None:
    if not isinstance(overrides, dict):
        raise ConfigError(f"{path}: expected an object of TransportConfig fields")
    for key in overrides:
        if key not in _TRANSPORT_FIELDS:
            raise ConfigError(f"{path}.{key}: not a TransportConfig field")


def job_transport_config(cfg: EndpointConfig, req: dict) -> TransportConfig:
    """The TransportConfig of a job: process defaults, then the request's mode/evs/overrides."""
    params: dict = {"planes": cfg.planes, **EMULATION_TRANSPORT, **cfg.transport}
    over = req.get("transport", {})
    _check_transport(over, "transport")
    params.update(over)
    if "mode" in req:
        params["mode"] = req["mode"]
    if "evs" in req:
        params["num_evs"] = req["evs"]
    if "ev_base" in req:
        params["ev_base"] = req["ev_base"]
    try:
        mode = Mode(params.get("mode", Mode.MRC))
    except ValueError:
        raise ConfigError(
            f"mode: one of {', '.join(m.value for m in Mode)}, got {params.get('mode')!r}"
        ) from None
    params["mode"] = mode
    if params.get("planes", 1) > params.get("num_evs", 64):
        params["planes"] = params.get("num_evs", 64)  # fewer EVs than planes: use the first
    try:
        return TransportConfig(**params)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"transport: {exc}") from None


class Pacer:
    """Token bucket per NIC in frame bytes; control packets are sent ahead of waiting data."""

    def __init__(
        self, mbps: float, planes: int, burst_frames: int, now: float, burst_s: float = 0.0
    ) -> None:
        self.rate = mbps * 1e6 / 8  # bytes per second
        # Deep enough to cover a coalesced sleep or a late wake-up: tokens that overflow the
        # bucket are lost rate.
        self.burst = max(burst_frames * 1500.0, self.rate * burst_s)
        self.tokens = [self.burst] * planes
        self.last = [now] * planes
        self.data: list[deque] = [deque() for _ in range(planes)]
        self.ctrl: list[deque] = [deque() for _ in range(planes)]
        self.queued = 0

    def push(self, plane: int, item: tuple, control: bool) -> None:
        (self.ctrl if control else self.data)[plane].append(item)
        self.queued += 1

    def drain(self, now: float, send) -> float | None:
        """Send what the buckets allow; returns when the next waiting packet may leave."""
        wake = None
        for plane in range(len(self.tokens)):
            ctrl, data = self.ctrl[plane], self.data[plane]
            if not ctrl and not data:
                continue
            tok = min(self.burst, self.tokens[plane] + (now - self.last[plane]) * self.rate)
            self.last[plane] = now
            while ctrl or data:
                q = ctrl if ctrl else data
                item = q[0]
                size = len(item[2]) + FRAME_OVERHEAD
                if tok < size - 1e-3:  # tolerance: float rounding must not stall the bucket
                    t = now + (size - tok) / self.rate
                    wake = t if wake is None or t < wake else wake
                    break
                tok -= size
                q.popleft()
                self.queued -= 1
                send(plane, *item)
            self.tokens[plane] = tok
        return wake

    def data_queued(self) -> int:
        return sum(len(q) for q in self.data)

    def frames_now(self, now: float, size: int = 1500) -> int:
        """How many frames of `size` bytes the buckets of every NIC would let go at `now`."""
        n = 0
        for plane, tokens in enumerate(self.tokens):
            n += int(min(self.burst, tokens + (now - self.last[plane]) * self.rate) // size)
        return n


class _Client:
    __slots__ = ("sock", "lines", "out")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.lines = LineBuffer()
        self.out = b""


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
        self.metrics = MetricsWriter(metrics_path)
        self.bins = DeliveryBins(cfg.bin_s)
        self.ep = Endpoint(job_transport_config(cfg, {}))
        self.jobs: dict[int, Job] = {}
        self.job_of_qp: dict[int, Job] = {}
        self.stopping = False
        self.stop_reason = ""
        self._fds_open: list = []
        self._open_sockets()
        now = time.monotonic()
        self.pacer = (
            Pacer(
                cfg.pace_mbps,
                cfg.planes,
                cfg.pace_burst,
                now,
                max(2 * cfg.rx_coalesce_us, cfg.pace_catch_up_us) * 1e-6,
            )
            if cfg.pace_mbps > 0
            else None
        )
        self.started = now
        self.cpu0 = os.times()
        self.rx_datagrams = 0
        self.tx_datagrams = 0
        self.loops = 0
        self.timer_late: deque = deque(maxlen=4096)  # seconds late, recent timer firings
        self._placed: dict[int, int] = {}  # qp -> bytes_placed already binned
        self._ev_tx: dict[tuple[str, int], int] = {}  # (dst addr, EV) -> bytes sent this bin
        self._ev_seen: dict[int, int] = {}  # qp -> ev transitions already written
        self._rtt_seen: dict[int, float] = {}  # qp -> time of the last RTT sample written
        self._counters_sig: dict[int, int] = {}
        self._next_flush = now + cfg.flush_interval
        self._next_bin = (int(now / cfg.bin_s) + 1) * cfg.bin_s
        self._next_stats = now + cfg.stats_interval
        self._waiters: list[tuple[int, float, _Client]] = []
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
        self.rx = [dio.open_rx(a, self.cfg.port) for a in self.addrs]
        self.rx_per_nic = dict.fromkeys(self.rx, 0)  # datagrams received per local address
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.control_path)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.control_path)
        os.chmod(self.control_path, 0o600)
        self.listener.listen(16)
        self.listener.setblocking(False)
        self.tx = dio.open_sender(self.cfg.io, self.addrs, self.cfg.port)
        self.clients: dict[socket.socket, _Client] = {}
        self._fds_dirty = True  # the select() read list must be rebuilt (clients came or went)
        self._rlist: list = []
        self._ctl_rlist: list = []
        self._pending_out = False  # some client has reply bytes the socket did not take yet

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
        coalesce = self.cfg.rx_coalesce_us * 1e-6
        mono = time.monotonic
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
                    # Read what already arrived before any timer fires: after the process was
                    # descheduled for a while (2 shared cores), the ACKs of the packets whose
                    # RTO is "due" are usually sitting in the socket, and firing first would
                    # retire every EV of a healthy connection at once.
                    got = self._drain_rx(batch, rx_batch, now)
                    if got:
                        t_next = ep.next_timer()
                    if t_next is not None and t_next <= now:
                        self.timer_late.append(now - t_next)
                        ep.on_timer(now)
                self._app(now)
                wake = self._transmit(now)
                if now >= self._next_bin:
                    self._tick(now)
                t_next = ep.next_timer()
                deadline = self._next_bin
                if t_next is not None and t_next < deadline:
                    deadline = t_next
                if wake is not None:
                    if busy and coalesce > 0:
                        wake = max(wake, now + coalesce)  # the bucket holds 2 x coalesce of rate
                    if wake < deadline:
                        deadline = wake
                if self.tx.backlog:
                    deadline = min(deadline, now + 200e-6)  # socket buffer full: retry soon
                if self._fds_dirty:
                    self._rlist = [*rx, self.listener, self.wake_r, *self.clients]
                    self._ctl_rlist = [self.listener, self.wake_r, *self.clients]
                    self._fds_dirty = False
                wlist = (
                    [c.sock for c in self.clients.values() if c.out] if self._pending_out else []
                )
                polling = busy and coalesce > 0
                if polling:
                    # Interrupt moderation (as NAPI): while packets keep coming, sleep a fixed
                    # interval with the data sockets unwatched and then read all that arrived.
                    # On this kind of VM every wake-up costs ~30-50 us of CPU, more than a
                    # packet's processing, so one wake per packet would double the cost.
                    deadline = min(deadline, now + coalesce)
                timeout = deadline - mono()
                try:
                    readable, writable, _ = select.select(
                        self._ctl_rlist if polling else self._rlist,
                        wlist,
                        [],
                        timeout if timeout > 0 else 0,
                    )
                except InterruptedError:
                    continue
                now = mono()
                got = 0
                for s in rx if polling else readable:
                    if s in rx_set:
                        batch.clear()
                        n = dio.recv_batch(s, batch, rx_batch)
                        if n:
                            got += n
                            self.rx_per_nic[s] += n
                            for data, tos in batch:
                                ep.on_datagram(data, tos, now)
                if got:
                    self.rx_datagrams += got
                    self._sample_placed(now)
                busy = got > 0
                for s in readable:
                    if s in rx_set:
                        continue
                    if s is self.listener:
                        self._accept()
                    elif s is self.wake_r:
                        with contextlib.suppress(BlockingIOError):
                            self.wake_r.recv(4096)
                    else:
                        self._client_readable(s, now)
                for s in writable:
                    c = self.clients.get(s)
                    if c is not None:
                        self._client_flush(c)
        finally:
            self._shutdown()

    def _drain_rx(self, batch: list, limit: int, now: float) -> int:
        got = 0
        for s in self.rx:
            while True:
                batch.clear()
                n = dio.recv_batch(s, batch, limit)
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
                        }
                    )
                self._ev_seen[qp] = len(st.ev_transitions)
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
                    {
                        "type": "rtt",
                        "t": now,
                        "job": job.job_id,
                        "peer": conn.peer,
                        **rtt_summary(new),
                    }
                )
        if now >= self._next_stats:
            self._next_stats = now + self.cfg.stats_interval
            for job in self.jobs.values():
                if job.go_at is not None and not job.done:
                    self._write_counters(job, now, only_changed=True)
        for job_id, deadline, client in list(self._waiters):
            job = self.jobs.get(job_id)
            if job is None or job.done or now >= deadline:
                self._waiters.remove((job_id, deadline, client))
                status = job.status() if job is not None else {}
                self._reply(client, {"ok": True, "done": bool(job and job.done), "status": status})
        if now >= self._next_flush:
            self._next_flush = now + self.cfg.flush_interval
            w.flush()

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
                    "srtt": s.rtt.srtt,
                    "inflight_bytes": s.inflight_bytes,
                    "evs_failed": sum(1 for p in s.evs.paths if p.state.value == "failed"),
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

    # ----- control --------------------------------------------------------------------------

    def _accept(self) -> None:
        try:
            s, _ = self.listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        s.setblocking(False)
        self.clients[s] = _Client(s)
        self._fds_dirty = True

    def _client_readable(self, s: socket.socket, now: float) -> None:
        c = self.clients.get(s)
        if c is None:
            return
        try:
            data = s.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop_client(c)
            return
        try:
            lines = c.lines.feed(data)
        except ValueError as exc:
            self._reply(c, {"ok": False, "error": str(exc)})
            return
        for line in lines:
            try:
                req = parse_request(line)
                reply = self._handle(req, c, time.monotonic())
            except (ValueError, WorkloadError, ConfigError) as exc:
                reply = {"ok": False, "error": str(exc)}
            if reply is not None:
                self._reply(c, reply)

    def _reply(self, c: _Client, reply: dict) -> None:
        if c.sock not in self.clients:
            return
        c.out += encode(reply)
        self._client_flush(c)

    def _client_flush(self, c: _Client) -> None:
        try:
            n = c.sock.send(c.out)
            c.out = c.out[n:]
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            self._drop_client(c)
        self._pending_out = any(x.out for x in self.clients.values())

    def _drop_client(self, c: _Client) -> None:
        self.clients.pop(c.sock, None)
        self._fds_dirty = True
        self._waiters = [w for w in self._waiters if w[2] is not c]
        with contextlib.suppress(OSError):
            c.sock.close()

    def _handle(self, req: dict, c: _Client, now: float) -> dict | None:
        op = req["op"]
        if op == "ping":
            return {"ok": True, "host": self.host, "pid": os.getpid(), "jobs": list(self.jobs)}
        if op == "start":
            return self._start(req, now)
        if op in ("go", "wait"):
            job = self._job(req)
            if op == "go":
                was = job.done
                job.go(now)
                self.metrics.write({"type": "job", "t": now, "job": job.job_id, "event": "go"})
                if job.done and not was:
                    self._job_done(job, now)
                return {"ok": True, "t": now}
            timeout = req.get("timeout", 60.0)
            if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout < 0:
                raise ValueError("timeout: expected seconds >= 0")
            if job.done:
                return {"ok": True, "done": True, "status": job.status()}
            self._waiters.append((job.job_id, now + timeout, c))
            return None
        if op == "stats":
            return self._stats(req, now)
        # stop
        self.stopping = True
        self.stop_reason = "stop request"
        return {"ok": True}

    def _job(self, req: dict) -> Job:
        job = self.jobs.get(req.get("job"))  # type: ignore[arg-type]
        if job is None:
            raise ValueError(f"job: no job {req.get('job')!r} on {self.host} (start it first)")
        return job

    def _start(self, req: dict, now: float) -> dict:
        for key in req:
            if key not in _JOB_KEYS:
                raise ValueError(f"{key}: unknown key in a start request")
        job_id = req.get("job")
        if job_id in self.jobs:
            raise ValueError(f"job: {job_id} exists on {self.host}")
        if "workload" not in req:
            raise ValueError("workload: required")
        tcfg = job_transport_config(self.cfg, req)
        job = Job(job_id, req["workload"], self.host, self.hosts, self.ep, tcfg, self._emit, now)
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
        late = sorted(self.timer_late)
        p99 = late[min(len(late) - 1, int(0.99 * len(late)))] * 1e6 if late else 0.0
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
            "timer_late_us_p99": p99,
            "endpoint_drops": dict(self.ep.drops),
        }

    def _stats(self, req: dict, now: float) -> dict:
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
        now = time.monotonic()
        self._sample_placed(now)
        w = self.metrics
        w.write_all(self.bins.take())
        self._write_ev_tx(now + self.cfg.bin_s)
        for job in self.jobs.values():
            self._write_counters(job, now)
        self._next_bin = now
        for job_id, _deadline, client in self._waiters:
            job = self.jobs.get(job_id)
            self._reply(
                client,
                {"ok": True, "done": bool(job and job.done), "status": job.status() if job else {}},
            )
        self._waiters.clear()
        w.write(
            {
                "type": "end",
                "t": now,
                "reason": self.stop_reason or "loop ended",
                "process": self.process_stats(now),
            }
        )
        w.close()
        for c in list(self.clients.values()):
            self._client_flush(c)
            self._drop_client(c)
        self.tx.close()
        for s in (*self.rx, self.listener, self.wake_r, self.wake_w):
            s.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.control_path)
        with contextlib.suppress(ValueError):
            signal.set_wakeup_fd(-1)

"""One switch's forwarding state: receive bursts, route, queue, serialise, fail on command.

Single-threaded, so there are no locks on the hot path; switch/loop.py runs the event loop for
one switch or for several in one process.
"""

from __future__ import annotations

import json
import os
import random
import socket
import time
from collections.abc import Callable
from zlib import crc32

from contracts.clock import check_dilation
from contracts.defaults import ROCE_PORT, prio_limit_bytes
from contracts.runtime import peak_rss_mb
from contracts.stats import LateHistogram
from switch import fastpath, frames
from switch.config import SwitchConfig
from switch.egress_timers import ActivePorts
from switch.fib import BUCKET_MASK, Fib, mix32
from switch.port import Port, arrival_slack, egress_timing
from switch.queueing import TrimmingQueue, decision_from_env

NO_ROUTE = "no_route"
TTL_EXPIRED = "ttl_expired"
SWITCH_DOWN = "switch_down"
RX_LOSS = "rx_loss"
RX_BLACKHOLE = "rx_blackhole"
RX_BAD_FRAME = "rx_bad_frame"
LOCAL = "local"  # addressed to the switch and not an echo request: consumed, counted


class Switch:
    """Forwarding state plus the loop; I/O is injected so tests can run it without sockets."""

    def __init__(
        self, config: SwitchConfig, open_port: Callable[[str], object] | None = None
    ) -> None:
        self.config = config
        self.name = config.name
        self.router_ip = socket.inet_aton(config.router_ip)
        rng = random.Random(config.seed)
        self.ports: list[Port] = []
        self.io: list = []
        decide = decision_from_env()  # None: the built-in, inline in TrimmingQueue.enqueue
        for i, pc in enumerate(config.ports):
            io = open_port(pc.name) if open_port else None
            self.io.append(io)
            queue = TrimmingQueue(
                data_limit_bytes=int(pc.queue_kb * 1000),
                prio_limit_bytes=prio_limit_bytes(pc.queue_kb * 1000, config.trim_bytes),
                ecn_threshold_bytes=int(pc.ecn_kb * 1000),
                trim_bytes=config.trim_bytes,
                trimming=config.trimming,
                trimmable_dscp=config.trimmable_dscp,
                trimmed_dscp=config.trimmed_dscp,
                control_dscp=config.control_dscp,
                decide=decide,
            )
            transmit = io.send if io is not None else (lambda f: True)
            self.ports.append(
                Port(
                    i,
                    pc.name,
                    frames.mac_bytes(pc.mac),
                    frames.mac_bytes(pc.peer_mac),
                    pc.rate_mbps,
                    pc.delay_us,
                    queue,
                    transmit,
                    rng,
                    config.queue_max_interval_s,
                )
            )
        # Ports with work (Port.active) and the heap of their departures; the loop may share one.
        self.active = ActivePorts()
        for p in self.ports:
            p.active = self.active
        self.port_by_name = {p.name: p for p in self.ports}
        index = {p.name: p.index for p in self.ports}
        self.fib = Fib(
            [
                # Each next hop carries the frame's whole new L2 header: its MAC, then ours.
                (
                    e.prefix,
                    [
                        (index[port], frames.mac_bytes(mac) + self.ports[index[port]].mac)
                        for port, mac in e.next_hops
                    ],
                )
                for e in config.fib
            ],
            seed=config.seed,
            ecmp_hash=config.ecmp_hash,
            forwarding=config.forwarding,
            plane_bits=config.plane_bits,
        )
        self.up = True
        self.drops: dict[str, int] = {}
        self.local_rx = 0
        self.icmp_sent = 0
        self.started = time.time()
        self.loop_wakeups = 0
        # Frames the vector path (switch/vector.py) forwarded, and in how many bursts: how much
        # of a saturated switch's load it carried, for the bench to report.
        self.vector_frames = 0
        self.vector_bursts = 0
        # Every lateness sample of the run (virtual µs by which the loop served a due egress
        # event late: switch/loop.py), for the validity verdict; its maximum is kept too: one
        # stall is invisible in the P99, yet it can make a P100.
        self.late = LateHistogram()
        self.debug_log = None
        self._route_cache: dict[int, object] = {}
        # The inline ring path's decisions per flow (switch/fastpath.py): a flow's next hop,
        # keyed by its src, dst, sport, dport bytes as an integer; cleared by refresh(), i.e.
        # on any change.
        self.udp_flows: dict[int, tuple] = {}
        self.tcp_flows: dict[int, tuple] = {}
        self.tx_rings = fastpath.tx_rings(self.io)
        self._seed = self.fib.seed
        self._mixed = self.fib.mixed
        self._source_routed = self.fib.source_routed
        self._plane_bits = self.fib.plane_bits
        self.set_dilation(config.time_dilation)
        self.fast = True
        self.running = True
        self.capture = None  # a switch.capture.Capture while ports are captured
        # Which data path forwards this switch's frames (contracts.datapath). In the compiled
        # one (switch/core.py) this object is the core's Python twin: control requests act
        # on it, `guard(port, feature)` refuses what only Python can do, and
        # `counters_overlay` puts the core's figures into `counters()`.
        self.datapath = "python"
        self.guard: Callable[[str, str], None] | None = None
        self.counters_overlay: Callable[[dict], dict] | None = None

    def set_dilation(self, dilation: float) -> None:
        """Run at time dilation `dilation`: the loop's clock reads virtual seconds, and every
        port's early window and catch-up budget follow (switch.port.egress_timing)."""
        self.dilation = check_dilation(dilation, "time_dilation")
        shaped = [p.sec_per_byte for p in self.ports if p.sec_per_byte > 0.0]
        frame = self.config.mtu + 14  # a full frame of this fabric
        serialisation = frame * min(shaped) if shaped else 0.0
        self.early_s, self.catch_up_s = egress_timing(self.dilation, serialisation)
        self.slack_s = arrival_slack(self.catch_up_s, serialisation, self.early_s)
        for p in self.ports:
            p.early, p.catch_up, p.slack = self.early_s, self.catch_up_s, self.slack_s

    # ----- forwarding -------------------------------------------------------------------------

    def _drop(self, reason: str, frame: bytes | bytearray | None = None) -> None:
        self.drops[reason] = self.drops.get(reason, 0) + 1
        if self.debug_log is not None and frame is not None:
            self._debug("drop", reason, frame)

    def receive(self, port: Port, frame: bytearray, now: float) -> None:
        """Forward one frame that arrived on `port`."""
        self.receive_batch(port, (frame,), now)

    def receive_batch(self, port: Port, batch, now: float) -> None:
        """Forward a burst of frames that arrived on `port`.

        The common case -- a clean port, a plain IPv4 header with a good checksum and TTL > 1,
        a cached route with a live next hop -- is handled inline here, with everything it
        needs in locals for the whole burst; everything else (failures, malformed frames,
        local delivery, ICMP errors, debug mode) takes `_receive_slow`, the reference path.
        """
        c = port.counters
        slow = self._receive_slow
        if not (self.fast and port.rx_clean):
            # A captured port (switch/capture.py) records the burst, then takes the inline
            # path below if nothing else keeps it off: a port not captured pays nothing here.
            capture = port.rx_capture
            if capture is not None:
                capture(batch, now)
            if capture is None or not (self.fast and port.rx_ok):
                for frame in batch:
                    c.rx_packets += 1
                    c.rx_bytes += len(frame)
                    slow(port, frame, now)
                return
        cache_get = self._route_cache.get
        seed = self._seed
        mixed = self._mixed
        source_routed = self._source_routed
        plane_bits = self._plane_bits
        ports = self.ports
        nbytes = 0
        for frame in batch:
            n = len(frame)
            nbytes += n
            if n < 34 or frame[12] != 8 or frame[13] != 0 or frame[14] != 0x45:
                slow(port, frame, now)
                continue
            hdr = int.from_bytes(frame[14:34], "big")
            # A valid header's 16-bit words sum to 0xFFFF in one's complement, i.e. to 0 modulo
            # 0xFFFF -- and the big integer of the header is congruent to that sum mod 0xFFFF.
            if hdr % 0xFFFF or frame[22] <= 1 or not 20 <= ((frame[16] << 8) | frame[17]) <= n - 14:
                slow(port, frame, now)
                continue
            route = cache_get(hdr & 0xFFFFFFFF)
            # A local route has no members, so no live ones either: it takes the slow path too.
            live = route.live if route is not None else None
            if not live:
                slow(port, frame, now)
                continue
            if len(live) == 1:
                out_index, l2 = live[0]
            else:
                proto = frame[23]
                if (
                    source_routed
                    and proto == 17
                    and n >= 38
                    and (frame[36] << 8 | frame[37]) == ROCE_PORT
                ):
                    out_index, l2 = route.table[
                        (frame[34] << 8 | frame[35]) >> plane_bits & BUCKET_MASK
                    ]
                elif proto == 17 or proto == 6:
                    h = crc32(frame[26:38], seed ^ proto)
                    if mixed:  # inlined, its five lines were no faster than the call (~12 ns)
                        h = mix32(h)
                    out_index, l2 = route.table[h & BUCKET_MASK]
                else:
                    out_index, l2 = route.table[self.fib.flow_hash(frame) & BUCKET_MASK]
            # TTL - 1; the checksum rises by 0x0100 (RFC 1624; 0xFEFF -> 0x0000, as a recompute).
            frame[22] = frame[22] - 1
            cs = ((frame[24] << 8) | frame[25]) + 0x100
            cs = (cs & 0xFFFF) + (cs >> 16)
            if cs == 0xFFFF:
                cs = 0
            frame[24] = cs >> 8
            frame[25] = cs & 0xFF
            frame[0:12] = l2
            ports[out_index].offer(frame, now)
        c.rx_packets += len(batch)
        c.rx_bytes += nbytes

    def _receive_slow(self, port: Port, frame: bytearray | memoryview, now: float) -> None:
        """Everything the inline path does not handle; counters were already updated."""
        if type(frame) is not bytearray:
            frame = bytearray(frame)  # a view of a ring slot: this path may keep the frame
        c = port.counters
        if not self.up:
            self._drop(SWITCH_DOWN)
            return
        if not port.rx_up:
            c.drop("link_down")
            return
        if port.rx_blackhole:
            c.drop(RX_BLACKHOLE)
            return
        if port.rx_loss and port.rng.random() < port.rx_loss:
            c.drop(RX_LOSS)
            return
        reason = frames.classify(frame)
        if reason is not None:
            if reason == frames.BAD_CHECKSUM:
                # Damaged on the link into this port (switch/impairment.py corrupts frames so):
                # counted where a NIC counts an FCS error, on the receiving port.
                c.drop(RX_BAD_FRAME)
                if self.debug_log is not None:
                    self._debug("drop", RX_BAD_FRAME, frame)
                return
            self._drop(reason, frame)
            return
        dst = bytes(frame[30:34])
        route = self.fib.lookup(dst)
        if route is None:
            self._drop(NO_ROUTE, frame)
            return
        self._route_cache[int.from_bytes(dst, "big")] = route
        if route.local:
            self._local(frame, now)
            return
        if frame[22] <= 1:
            self._drop(TTL_EXPIRED, frame)
            if not frames.is_icmp_error(frame):  # RFC 1122 3.2.2: never an error about an error
                self._send_icmp(frames.icmp_time_exceeded(frame, self.router_ip), now)
            return
        live = route.live
        if not live:
            self._drop(NO_ROUTE if not route.members else "link_down", frame)
            return
        out_index, l2 = (
            route.table[self.fib.flow_hash(frame) & BUCKET_MASK] if len(live) > 1 else live[0]
        )
        out = self.ports[out_index]
        frames.decrement_ttl(frame)
        frame[0:12] = l2
        before = out.queue.trims
        out.offer(frame, now)
        if self.debug_log is not None and out.queue.trims != before:
            self._debug("trim", out.name, out.queue.prio[-1])

    def refresh(self) -> None:
        """Recompute the flags that gate the inline path; call after any state change."""
        if len(self._route_cache) > 65536:
            self._route_cache.clear()
        self.udp_flows.clear()
        self.tcp_flows.clear()
        self.fast = self.up and self.debug_log is None
        for p in self.ports:
            p.refresh()

    def _local(self, frame: bytearray, now: float) -> None:
        self.local_rx += 1
        reply = frames.icmp_echo_reply(frame)
        if reply is None:
            self._drop(LOCAL)
            return
        self._send_icmp(reply, now)

    def _send_icmp(self, packet: bytearray, now: float) -> None:
        """Route a packet the switch itself originates (ICMP errors and echo replies)."""
        frame = bytearray(12) + b"\x08\x00" + packet
        route = self.fib.lookup(bytes(frame[30:34]))
        if route is None or not route.live:
            return
        out_index, l2 = route.table[self.fib.flow_hash(frame) & BUCKET_MASK]
        out = self.ports[out_index]
        frame[0:12] = l2
        self.icmp_sent += 1
        out.offer(frame, now)

    # ----- failure controls -------------------------------------------------------------------

    def set_port_up(self, port: Port, up: bool) -> None:
        if up == port.up:
            return
        if up:
            port.up = True
        else:
            port.set_down()
        self.fib.set_port_state(port.index, up, [p.up for p in self.ports])
        self.refresh()

    def set_switch_up(self, up: bool) -> None:
        self.up = up
        if not up:
            for port in self.ports:
                n = port.flush()
                if n:
                    port.counters.drop(SWITCH_DOWN, n)
        self.refresh()

    # ----- reporting --------------------------------------------------------------------------

    def counters(self) -> dict:
        kernel = {}
        for port, io in zip(self.ports, self.io):  # noqa: B905 - runs on PyPy 3.9 too
            if io is not None:
                kernel[port.name] = {
                    "kernel_drops": io.poll_kernel_drops(),
                    "truncated": io.truncated,
                    "ring_skips": io.ring_skips,
                    "tx_errors": getattr(io, "tx_errors", 0),
                }
        user_s, sys_s = os.times()[:2]
        out = {
            "switch": self.name,
            "datapath": self.datapath,
            "up": self.up,
            "uptime_s": time.time() - self.started,
            "drops": dict(self.drops),
            "local_rx": self.local_rx,
            "icmp_sent": self.icmp_sent,
            # Each read drains the ports' per-interval queue maxima (switch.port.QueueMaxima):
            # the harness's periodic read collects them in batches, the switch keeps no history.
            "ports": {
                p.name: p.snapshot()
                | kernel.get(p.name, {})
                | {"queue_max": p.qmax.drain(), "queue_max_lost": p.qmax.lost}
                for p in self.ports
            },
            "queue_max_interval_s": self.ports[0].qmax.interval_s if self.ports else None,
            # Losses of the emulator, not of the emulated network: rings overrun, frames the
            # kernel would not take (tx ring full, send errors).
            "kernel_drops": sum(
                k["kernel_drops"] + k["truncated"] + k["tx_errors"] for k in kernel.values()
            )
            + sum(p.counters.drops.get("tx_error", 0) for p in self.ports),
            # Passes of the event loop that woke it (data, a timer, a request): with cpu_s and
            # the packets, how a switch's CPU splits (docs/performance.md, "The fabric").
            "loop_wakeups": self.loop_wakeups,
            "vector_frames": self.vector_frames,
            "vector_bursts": self.vector_bursts,
            # Virtual microseconds by which the loop served a due egress event late, over the
            # switch's whole life (contracts.stats: nearest rank, None before any sample); the
            # histogram itself, so that a reader can take one interval's samples (the run's).
            "timer_late_us_p99": self.late.percentile(99),
            "timer_late_samples": self.late.n,
            "timer_late_us_max": self.late.max_us,
            "timer_late_hist": self.late.to_json(),
            "time_dilation": self.dilation,
            "early_us": self.early_s * 1e6,
            "arrival_slack_us": self.slack_s * 1e6,
            # The process's CPU: switches of one shared process report the same figure, so a
            # sum over switches counts each pid once (testbed.bench.capacity_bench).
            "cpu_s": user_s + sys_s,
            # ... split: the kernel's share is what a switch in Python cannot shrink (its
            # send() to a host's veth runs the host's receive path and wakes its endpoint).
            "cpu_user_s": user_s,
            "cpu_sys_s": sys_s,
            "pid": os.getpid(),
            "rss_peak_mb": peak_rss_mb(),
        }
        return out if self.counters_overlay is None else self.counters_overlay(out)

    def _debug(self, event: str, detail: str, frame: bytes | bytearray) -> None:
        """Debug mode: dissect what was trimmed or dropped with scapy (slow; off by default)."""
        from switch.reference import summarize  # lazy: scapy costs ~0.5 s of switch start-up

        self.debug_log.write(
            json.dumps(
                {
                    "t": time.time(),
                    "event": event,
                    "detail": detail,
                    "packet": summarize(bytes(frame)),
                }
            )
            + "\n"
        )
        self.debug_log.flush()

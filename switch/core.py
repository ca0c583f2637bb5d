"""The forwarding core of every switch of one process, sans I/O, with two data paths.

A shared switch process serves all the switches of a fabric; `ForwardingCore` is their
forwarding state behind one interface that does no I/O of its own:

    core = ForwardingCore(configs, datapath="python" | "c", wire_local=True)
    core.receive(sw, port, frames, now)    # frames arrived on port `port` of switch `sw`
    core.service(now) -> next deadline     # serve every due departure; wires deliver in memory
    core.take_egress() -> [(sw, port, frame)]  # what left on ports not wired in memory
    core.take_exceptions() -> [(sw, port, frame)]  # what took the reference slow path
    core.counters() -> per switch, per port

`datapath="python"` is the existing code, wrapped: `switch.dataplane.Switch` (receive, the
inline path and `_receive_slow`), `switch.port.Port` and `switch.queueing.TrimmingQueue` (the
egress), `switch.egress_timers.ActivePorts` (the heap of departures, served in `seq` order)
and `switch.local_links` (the in-memory wires), set up as switch/loop.py sets them up. It is
the readable reference and supports everything.

`datapath="c"` is `switch._core` (switch/_core.c): the same semantics in C, decision for
decision and floating-point operation for operation, so both give the same bytes in the same
order and the same counters (tests/test_switch_core_diff.py). The C core keeps a Python twin
of every switch (a `Switch` whose ports hand `offer` to C): the frames the inline path would
hand to `_receive_slow` (malformed, TTL <= 1, local, no route, a switch down, a port whose
receive is impaired) go to that twin's `_receive_slow` at once and in order, which counts and
answers them (ICMP) exactly as today; what it routes comes back into C. Features that only the
Python path has -- a plug-in trim decision ($TESTBED_TRIM_DECISION), stochastic egress loss and
impairments, capture, the debug log -- make the C core refuse with `Unsupported`: run such a
process with `datapath="python"`.

Why the interface is the whole process and not one switch: a packet-hop between two switches
of the process is a function call inside the core (in C, no Python at all), and the order in
which the departures of all switches are served is one order (`seq`), which the tie-breaks of
two frames due together depend on.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable

from switch import local_links
from switch.config import SwitchConfig
from switch.dataplane import Switch
from switch.egress_timers import ActivePorts
from switch.port import Port
from switch.queueing import TRIM_DECISION_ENV

try:
    from switch import _core
except ImportError as exc:  # not built: no compiler at install time (setup.py: optional)
    _core = None
    _IMPORT_ERROR = str(exc)
else:
    _IMPORT_ERROR = None

DATAPATHS = ("python", "c")
EXCEPTIONS_KEPT = 4096
"""The most recent slow-path frames `take_exceptions` returns (older ones are only counted)."""


class Unsupported(RuntimeError):
    """The C data path cannot run this configuration or feature; datapath="python" can."""


def c_available() -> bool:
    return _core is not None


def c_unavailable_reason() -> str | None:
    """Why switch._core cannot be imported (None if it can)."""
    return None if _core is not None else f"switch._core is not built ({_IMPORT_ERROR})"


class _HostWire:
    """The wire of a port not wired in memory (a host-facing veth): the core's egress list."""

    __slots__ = ("out", "sw", "port", "truncated", "ring_skips")

    def __init__(self, out: list, sw: int, port: int) -> None:
        self.out = out
        self.sw = sw
        self.port = port
        self.truncated = self.ring_skips = 0

    def send(self, frame) -> bool:
        self.out.append((self.sw, self.port, bytes(frame)))
        return True

    def poll_kernel_drops(self) -> int:
        return 0


def _c_offer(self: Port, frame, now: float) -> None:
    """Port.offer of a C-core switch's Python twin: the slow path's frames go to C's egress."""
    self._c.offer(self._sw, self.index, frame, now)


class ForwardingCore:
    """Every switch of a process: receive, service, egress, counters (see the module doc)."""

    def __init__(
        self,
        configs: Iterable[SwitchConfig],
        datapath: str = "python",
        wire_local: bool = True,
        switches: list[Switch] | None = None,
    ) -> None:
        """`switches`: the twins already built, with their real ports (the running switch
        process: switch/core_loop.py); by default the core builds them, with ports whose
        wire is the core's egress list."""
        if datapath not in DATAPATHS:
            raise ValueError(f"datapath: one of {', '.join(DATAPATHS)}, got {datapath!r}")
        if datapath == "c":
            if _core is None:
                raise Unsupported(c_unavailable_reason())
            if os.environ.get(TRIM_DECISION_ENV):
                raise Unsupported(
                    f"{TRIM_DECISION_ENV} is set: a plug-in trim decision runs in Python only"
                )
        self.datapath = datapath
        self.now = 0.0
        self._egress: list[tuple[int, int, bytes]] = []
        self._exceptions: deque = deque(maxlen=EXCEPTIONS_KEPT)
        self.exceptions = 0  # every frame that took the slow path
        self.configs = list(configs)
        self.switches: list[Switch] = []
        for i, cfg in enumerate(self.configs):
            if switches is not None:
                sw = switches[i]
                sw._receive_slow = self._recorder(i, sw._receive_slow)
                self.switches.append(sw)
                continue
            ports = iter(range(len(cfg.ports)))
            sw = Switch(
                cfg,
                open_port=(lambda name, i=i, ports=ports: _HostWire(self._egress, i, next(ports)))
                if datapath == "python"
                else None,
            )
            sw._receive_slow = self._recorder(i, sw._receive_slow)
            self.switches.append(sw)
        self.delivered = (
            local_links.link(self.switches, self._clock) if wire_local else [0]
        )  # in the C data path, this only says which ports pair: C carries their frames
        # One set of busy ports and one heap for every switch, in one order of service.
        self.active = ActivePorts()
        seq = 0
        for sw in self.switches:
            sw.active = self.active
            for p in sw.ports:
                p.active = self.active
                p.seq = seq
                seq += 1
        self._c = self._build_c() if datapath == "c" else None

    # ----- the C data path's set-up -----------------------------------------------------------

    def _build_c(self):
        slot = max(cfg.mtu for cfg in self.configs) + 14 if self.configs else 1514
        c = _core.Core(slot, self._c_slow)
        index = {id(sw): i for i, sw in enumerate(self.switches)}
        for i, sw in enumerate(self.switches):
            cfg = sw.config
            fib = sw.fib
            c.add_switch(
                fib.seed,
                fib.mixed,
                fib.source_routed,
                fib.plane_bits,
                cfg.trim_bytes,
                cfg.trimming,
                cfg.trimmable_dscp,
                cfg.trimmed_dscp,
                cfg.control_dscp,
            )
            for p in sw.ports:
                q = p.queue
                c.add_port(
                    i,
                    p.sec_per_byte,
                    p.delay_s,
                    p.early,
                    p.catch_up,
                    p.slack,
                    q.data_limit,
                    q.prio_limit,
                    q.ecn_threshold,
                    p.qmax.interval_s,
                )
            for plen, table in fib._tables.items():
                for net, route in table.items():
                    c.add_route(i, plen, net, [(port, bytes(l2)) for port, l2 in route.members])
            # The twin's ports hand what its slow path routes to C (same slots: __class__ swaps).
            cls = type("CorePort", (Port,), {"__slots__": (), "offer": _c_offer, "_c": c, "_sw": i})
            for p in sw.ports:
                p.__class__ = cls
        for i, sw in enumerate(self.switches):
            for p in sw.ports:
                wire = getattr(p.transmit, "__self__", None)
                if isinstance(wire, local_links.LocalWire):
                    c.wire(i, p.index, index[id(wire.peer)], wire.port.index)
        return c

    def _c_slow(self, sw: int, port: int, frame: bytearray, now: float) -> None:
        s = self.switches[sw]
        s._receive_slow(s.ports[port], frame, now)

    def _recorder(self, i: int, slow):
        def receive_slow(port: Port, frame, now: float) -> None:
            self.exceptions += 1
            self._exceptions.append((i, port.index, bytes(frame)))
            slow(port, frame, now)

        return receive_slow

    def _clock(self) -> float:
        return self.now

    # ----- the data path ------------------------------------------------------------------------

    def receive(self, sw: int, port: int, frames, now: float) -> None:
        """Frames (bytes-like) that arrived on port `port` of switch `sw` at virtual `now`."""
        self.now = now
        if self._c is not None:
            self._c.receive(sw, port, frames, now)
            return
        s = self.switches[sw]
        s.receive_batch(
            s.ports[port], [f if type(f) is bytearray else bytearray(f) for f in frames], now
        )

    def service(self, now: float) -> float | None:
        """Serve every departure due at `now` (within its port's early window), again while an
        in-memory wire delivered something (switch/loop.py); the next deadline, or None."""
        self.now = now
        if self._c is not None:
            return self._c.service(now)
        delivered = self.delivered
        before = delivered[0]
        due = self.active.serve(now)
        while delivered[0] != before:
            before = delivered[0]
            due = self.active.serve(now)
        return due

    def take_egress(self) -> list[tuple[int, int, bytes]]:
        """(switch, port, frame) of every frame that left on a port not wired in memory since
        the last call, in the order they left."""
        if self._c is not None:
            return self._c.take_egress()
        out = self._egress[:]
        self._egress.clear()
        return out

    def discard_egress(self) -> int:
        """Forget the egress frames (a sink that only counts them); returns how many."""
        if self._c is not None:
            return self._c.discard_egress()
        n = len(self._egress)
        self._egress.clear()
        return n

    def take_exceptions(self) -> list[tuple[int, int, bytes]]:
        """(switch, port, frame) of the latest frames the reference slow path handled (at most
        EXCEPTIONS_KEPT; `exceptions` counts them all). The Python path also sends there the
        first frame to each destination (its route cache), so the two paths' lists differ by
        those."""
        out = list(self._exceptions)
        self._exceptions.clear()
        return out

    # ----- control --------------------------------------------------------------------------------

    def _port(self, sw: int, port: int) -> Port:
        return self.switches[sw].ports[port]

    def _push(self, sw: int, port: int) -> None:
        """The twin port's egress parameters and flags into C."""
        if self._c is not None:
            p = self._port(sw, port)
            self._c.set_port(sw, port, p.sec_per_byte, p.delay_s, p.blackhole, p.rx_clean)

    def set_port_up(self, sw: int, port: int, up: bool) -> None:
        """Carrier: down flushes the port's queue and prunes it from every ECMP group."""
        self.switches[sw].set_port_up(self._port(sw, port), up)
        if self._c is not None:
            self._c.set_port_up(sw, port, up)

    def set_switch_up(self, sw: int, up: bool) -> None:
        self.switches[sw].set_switch_up(up)
        if self._c is not None:
            self._c.set_switch_up(sw, up)

    def set_rate(self, sw: int, port: int, mbps: float) -> None:
        self._port(sw, port).set_rate(mbps)
        self._push(sw, port)

    def set_delay(self, sw: int, port: int, delay_us: float) -> None:
        p = self._port(sw, port)
        p.delay_s = delay_us / 1e6
        p.refresh()
        self._push(sw, port)

    def set_blackhole(self, sw: int, port: int, on: bool) -> None:
        """Egress gray failure: the port's frames vanish on the wire, after the queue."""
        p = self._port(sw, port)
        p.blackhole = on
        p.refresh()
        self._push(sw, port)

    def set_rx(
        self,
        sw: int,
        port: int,
        up: bool | None = None,
        blackhole: bool | None = None,
        loss: float | None = None,
    ) -> None:
        """Receive-side failures (a host link's); their frames take the reference slow path."""
        p = self._port(sw, port)
        if up is not None:
            p.rx_up = up
        if blackhole is not None:
            p.rx_blackhole = blackhole
        if loss is not None:
            p.rx_loss = loss
        p.refresh()
        self._push(sw, port)

    def set_loss(self, sw: int, port: int, loss: float) -> None:
        """Egress random loss: Python only (its draws interleave with the switch's rng)."""
        self.python_only(sw, port, "egress loss")
        p = self._port(sw, port)
        p.loss = loss
        p.refresh()

    def python_only(self, sw: int, port: int, feature: str) -> None:
        """Called before enabling a Python-only feature (impairments, capture, debug log) on a
        port: the C core refuses with a clear error, the Python core lets it through."""
        if self._c is not None:
            name = f"{self.switches[sw].name} {self._port(sw, port).name}"
            raise Unsupported(
                f"{name}: {feature} runs in the Python data path only; "
                "start this switch process with datapath='python'"
            )

    def sync(self, sw: int) -> None:
        """After a control request changed twin `sw` (switch/control.py acts on the twin):
        its carrier, egress and receive state into C, so both agree."""
        if self._c is None:
            return
        s = self.switches[sw]
        self._c.set_switch_up(sw, s.up)
        for p in s.ports:
            self._c.set_port_up(sw, p.index, p.up)
            self._push(sw, p.index)

    def guard(self, sw: int) -> Callable[[str, str], None]:
        """The check switch/control.py makes before enabling a Python-only feature on a port
        of twin `sw`: raises ValueError (the request's one-line error) in the C data path."""

        def check(port: str, feature: str) -> None:
            if self._c is not None:
                raise ValueError(
                    f"{self.switches[sw].name} {port}: {feature} runs in the Python data path "
                    "only; this switch runs the compiled one (--datapath python)"
                )

        return check

    def overlay(self, sw: int, counters: dict) -> dict:
        """`Switch.counters()` of twin `sw` with the C core's figures over its ports and drops
        (the twin's own hold only its slow path's); the kernel, CPU and lateness keys stay."""
        if self._c is None:
            return counters
        mine = self._switch_counters(sw, self.switches[sw])
        for name, snap in mine["ports"].items():
            counters["ports"][name].update(snap)
        counters["drops"] = mine["drops"]
        return counters

    # ----- counters ------------------------------------------------------------------------------

    def counters(self) -> list[dict]:
        """Per switch: its drops, local deliveries, ICMP sent and, per port, Port.snapshot's
        keys plus the drained queue maxima (QueueMaxima.drain: a read empties them)."""
        return [self._switch_counters(i, sw) for i, sw in enumerate(self.switches)]

    def _switch_counters(self, i: int, sw: Switch) -> dict:
        ports = {}
        for p in sw.ports:
            snap = p.snapshot()
            if self._c is None:
                snap["queue_max"] = p.qmax.drain()
                snap["queue_max_lost"] = p.qmax.lost
            else:
                self._overlay(i, p, snap)
            ports[p.name] = snap
        return {
            "switch": sw.name,
            "up": sw.up,
            "drops": dict(sw.drops),
            "local_rx": sw.local_rx,
            "icmp_sent": sw.icmp_sent,
            "ports": ports,
        }

    def _overlay(self, i: int, p: Port, snap: dict) -> None:
        """The C port's counters over the twin's (which hold its slow-path drops only)."""
        st = self._c.port_stats(i, p.index)
        for k in ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes"):
            snap[k] += st[k]
        drops = snap["drops"]
        for k in ("link_down", "blackhole", "queue_full", "prio_queue_full", "switch_down"):
            if st[k]:
                drops[k] = drops.get(k, 0) + st[k]
        for k in (
            "trims",
            "ecn_marks",
            "queue_bytes",
            "prio_queue_bytes",
            "max_queue_bytes",
            "max_prio_queue_bytes",
        ):
            snap[k] = st[k]
        closed, open_, lost = self._c.queue_max(i, p.index)
        out = [[round(t, 6), b] for t, b in closed]
        if open_ is not None:
            out.append([round(open_[0], 6), open_[1]])
        snap["queue_max"] = out
        snap["queue_max_lost"] = lost

"""The event loop: wait, drain the rings in bursts, serve the egress timers and control sockets.

One loop may serve one switch (the default: one process per switch node) or several switches of
a fabric (`python -m switch` given several configs). Why several: in a fabric every packet-hop
otherwise costs a process wakeup -- a select() return, a context switch, a pass of the loop --
and measured on this 2-core VM that, not forwarding, was most of a switch's CPU per packet. One
loop for all the switches forwards a packet that leaf1 just sent to spine1 in the same wakeup,
since a veth delivers into the peer's ring inside the sender's own send() call.

The loop waits until a port has frames, a control socket has a request, or the earliest egress
event is due: in select() on an epoll descriptor, for select's microsecond timeouts (epoll_wait
rounds to milliseconds) with epoll's cost, which does not grow with the number of ports. It
then drains every readable ring in bursts of 64, services the egress ports whose time has
come, hands each port's queued tx slots to the kernel with one send(), and asks epoll again,
without waiting, which rings that work has filled; it sleeps only when none has.

The loop's clock is virtual (contracts.clock): monotonic / N at time dilation N. It sleeps N
times the virtual interval to the next event, and records how late (in virtual time) it served
each due egress event: at every pass over the egress timers whose earliest departure had come
due, whether the loop woke from a timed sleep, woke for frames that were waiting, or never
slept because work kept it busy past the deadline. That lateness (every sample of the run, in
the switch's `LateHistogram`) is what the run's validity verdict judges. Sampling only the
wake-ups that found nothing to read, as the loop once did, skipped the overloaded case: a
loop woken late finds frames waiting.
"""

from __future__ import annotations

import select

from contracts.clock import virtual_clock
from switch import fastpath, local_links
from switch.control import ControlServer
from switch.dataplane import Switch
from switch.egress_timers import ActivePorts
from switch.port import Port

BURST = 64  # frames from one ring before the next ring's turn: no port starves another
SCAN_MAX = 8  # rings a due timer looks into directly; more, and it asks epoll which are ready


def _record_late(switches: list[Switch], late_us: float) -> None:
    last = None
    for sw in switches:
        if sw.late is not last:  # switches sharing one loop share one histogram (share_late)
            last = sw.late
            last.add(late_us)


def share_late(switches: list[Switch]) -> None:
    """One lateness histogram for every switch of one loop: every pass's sample is the same
    for all of them (the loop's), so the first switch's histogram stands for all, and a pass
    records it once instead of once per switch (16 adds per pass in a 4x4x4 fabric)."""
    for sw in switches[1:]:
        sw.late = switches[0].late


def wait_readable(
    poller, deadline: float | None, now: float, dilation: float, everything: list, scan: bool
) -> list[int]:
    """Sleep until `deadline` (virtual; None: up to a second) or until a registered descriptor
    is readable; return the readable ones. A deadline already due returns at once: every
    descriptor (`everything`) if `scan` -- for a few rings, looking into each costs less than
    asking epoll -- else what epoll says is ready."""
    timeout = 1.0 if deadline is None else max(0.0, (deadline - now) * dilation)
    if timeout > 0.0:
        # select() on the epoll descriptor: microsecond timeouts (epoll_wait's are whole
        # milliseconds) at the cost of one descriptor, however many ports there are.
        if select.select((poller.fileno(),), (), (), timeout)[0]:
            return [fd for fd, _ in poller.poll(0)]
        return []
    return everything if scan else [fd for fd, _ in poller.poll(0)]


def serve_due(switches: list[Switch], service, now: float, deadline: float | None) -> float | None:
    """Serve the egress timers at `now` and return the next deadline; if the previous
    `deadline` had come due, record by how much it was late (virtual µs), however the loop
    got here."""
    if deadline is not None and now >= deadline:
        _record_late(switches, (now - deadline) * 1e6)
    return service(now)


def run(
    members: list[tuple[Switch, ControlServer | None]], delivered: list[int] | None = None
) -> None:
    """Forward for every switch in `members` until one of them is told to stop (or loses every
    port: the fabric was torn down around it).

    `delivered`: the counter of switch/local_links.py's in-memory wires, if the switches were
    wired to each other; a frame such a wire delivers during the pass over the egress timers
    may give a port already passed a departure that is due, so the pass is repeated until no
    wire delivered anything (each repetition only serves what is due: it ends).
    """
    delivered = delivered if delivered is not None else [0]
    switches = [sw for sw, _ in members]
    entries: dict[int, tuple] = {}  # ring fd -> (switch, port, ring)
    for sw in switches:
        for port, io in zip(sw.ports, sw.io):  # noqa: B905 - runs on PyPy 3.9 too
            if io is not None:
                entries[io.fileno()] = (sw, port, io)
    controls = {ctl.fileno(): (ctl, sw) for sw, ctl in members if ctl is not None}
    # The rings a frame may be written into: not those of ports wired in memory
    # (switch/local_links.py), whose frames never touch their veth -- in a shared 4x4x4 fabric
    # two thirds of the rings, which a scan for pending frames after every pass would visit.
    rings = [
        io for sw, port, io in entries.values() if port.name not in local_links.wired_ports(sw)
    ]
    share_late(switches)
    ports: list[Port] = [p for sw in switches for p in sw.ports]
    active = ActivePorts()  # one set of busy ports (and heap of departures) for every switch
    for sw in switches:
        active |= sw.active
        sw.active = active
    for seq, p in enumerate(ports):
        p.active = active
        p.seq = seq
    poller = select.epoll()
    for fd in [*entries, *controls]:
        poller.register(fd, select.EPOLLIN)
    ready = poller.poll
    forward = fastpath.forward_from_ring
    dilation = switches[0].dilation if switches else 1.0
    monotonic = virtual_clock(dilation)
    service = active.serve
    deadline: float | None = None
    # When a timer is due: every ring once, without asking epoll -- for a few rings; past
    # SCAN_MAX, asking (one syscall) costs less than looking into each ring.
    everything = list(entries)
    scan = len(everything) <= SCAN_MAX
    while all(sw.running for sw in switches):
        readable = wait_readable(poller, deadline, monotonic(), dilation, everything, scan)
        for sw in switches:
            sw.loop_wakeups += 1
        while True:
            for fd in readable:
                entry = entries.get(fd)
                if entry is not None:
                    sw, port, io = entry
                    if not forward(sw, port, io, monotonic(), BURST) and readable is not everything:
                        # Readable with nothing in the ring: a socket error (carrier loss, or
                        # the interface is gone with its namespace). Clear it, else the loop
                        # spins; a port that is gone leaves the loop.
                        if io.check_error():
                            del entries[fd]
                            poller.unregister(fd)
                            everything.remove(fd)
                            if io in rings:
                                rings.remove(io)
                            sw.drops["port_vanished"] = sw.drops.get("port_vanished", 0) + 1
                else:
                    ctl = controls.get(fd)
                    if ctl is not None:
                        ctl[0].serve(ctl[1])
            # Lateness is taken here, after the frames that woke the loop were forwarded: a
            # departure due meanwhile waited for them too.
            now = monotonic()
            before = delivered[0]
            deadline = serve_due(switches, service, now, deadline)
            while delivered[0] != before:
                before = delivered[0]
                deadline = serve_due(switches, service, now, deadline)
            for io in rings:
                if io.tx_pending:
                    io.flush()  # one syscall hands the port's whole burst to the kernel
            if not entries:
                break
            readable = [fd for fd, _ in ready(0)]  # what that work (or the world) just filled
            if not readable:
                break
        if not entries:
            break
    poller.close()
    for io in list(entries.values()):
        io[2].close()

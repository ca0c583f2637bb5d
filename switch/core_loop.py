"""The event loop of a switch process on the compiled data path: rings in, the core, rings out.

switch/loop.py's twin for `ForwardingCore(datapath="c")` (switch/core.py): the same waits
(select() on an epoll descriptor, for microsecond timeouts), the same bursts of 64 frames per
readable ring, the same lateness samples at every pass whose previous deadline had come due
(`loop.serve_due`: the validity verdict reads them), the same one send() per ring per pass.
What differs is where a frame goes between the rings: into the C core, which routes, queues,
trims, marks, shapes, carries the in-memory wires between the switches of the process and
serves every due departure in one call; what leaves on a port with a real veth comes back as
(switch, port, frame) and is written into that port's tx ring here.

Control requests act on the core's Python twins (switch/control.py, as on the Python path);
after each, `core.sync` puts the twin's new state into C, and a request for what only the
Python path has (egress loss, impairments, capture, the debug log) is refused with a one-line
error by `core.guard` before it changes anything.
"""

from __future__ import annotations

import select

from contracts.clock import virtual_clock
from switch import local_links
from switch.control import ControlServer
from switch.core import ForwardingCore
from switch.loop import BURST, SCAN_MAX, serve_due, share_late, wait_readable
from switch.port import DROP_TX_ERROR


def adopt(core: ForwardingCore) -> None:
    """Make the core's twins report and guard for it (Switch.datapath, guard, counters)."""
    for i, sw in enumerate(core.switches):
        sw.datapath = core.datapath
        sw.guard = core.guard(i)
        sw.counters_overlay = lambda out, i=i: core.overlay(i, out)


def run(core: ForwardingCore, controls: list[ControlServer | None]) -> None:
    """Forward for every switch of `core` until one is told to stop (or every port is gone).

    `controls[i]`: switch i's control server (None: none)."""
    switches = core.switches
    entries: dict[int, tuple] = {}  # ring fd -> (switch index, port index, ring)
    rings: dict[tuple[int, int], object] = {}
    wired = [set(local_links.wired_ports(sw)) for sw in switches]
    for i, sw in enumerate(switches):
        for port, io in zip(sw.ports, sw.io):  # noqa: B905 - runs on PyPy 3.9 too
            if io is not None:
                entries[io.fileno()] = (i, port.index, io)
                rings[(i, port.index)] = io
    ctl = {c.fileno(): (c, i) for i, c in enumerate(controls) if c is not None}
    poller = select.epoll()
    for fd in [*entries, *ctl]:
        poller.register(fd, select.EPOLLIN)
    ready = poller.poll
    dilation = switches[0].dilation if switches else 1.0
    monotonic = virtual_clock(dilation)
    receive = core.receive
    service = core.service
    take_egress = core.take_egress
    everything = list(entries)
    scan = len(everything) <= SCAN_MAX
    # The rings a frame may be written into: not those of ports wired in memory (as loop.py).
    ios = [io for (i, p), io in rings.items() if switches[i].ports[p].name not in wired[i]]
    share_late(switches)
    batch: list = []
    deadline: float | None = None
    while all(sw.running for sw in switches):
        readable = wait_readable(poller, deadline, monotonic(), dilation, everything, scan)
        for sw in switches:
            sw.loop_wakeups += 1
        while True:
            for fd in readable:
                entry = entries.get(fd)
                if entry is not None:
                    i, p, io = entry
                    batch.clear()
                    if io.read_batch(batch, BURST):
                        receive(i, p, batch, monotonic())
                        batch.clear()  # views of ring slots: gone before the slots are
                        io.release()
                    elif readable is not everything and io.check_error():
                        # A socket error with nothing to read: carrier loss, or the interface
                        # is gone with its namespace (as switch/loop.py).
                        del entries[fd]
                        poller.unregister(fd)
                        everything.remove(fd)
                        del rings[(i, p)]  # its frames count as tx errors from now on
                        if io in ios:
                            ios.remove(io)  # never flushed again (as switch/loop.py)
                        sw = switches[i]
                        sw.drops["port_vanished"] = sw.drops.get("port_vanished", 0) + 1
                else:
                    c = ctl.get(fd)
                    if c is not None:
                        c[0].serve(switches[c[1]])
                        core.sync(c[1])
            now = monotonic()
            deadline = serve_due(switches, service, now, deadline)
            for i, p, frame in take_egress():
                io = rings.get((i, p))
                if io is None or not io.send(frame):
                    switches[i].ports[p].counters.drop(DROP_TX_ERROR)
            for io in ios:
                if io.tx_pending:
                    io.flush()
            if not entries:
                break
            readable = [fd for fd, _ in ready(0)]
            if not readable:
                break
        if not entries:
            break
    poller.close()
    for _, _, io in entries.values():
        io.close()

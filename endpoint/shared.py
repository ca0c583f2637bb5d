"""Several hosts' endpoints in one process: one event loop, each host's turns as its own.

Why: profiled in a dilated fabric (docs/performance.md, "Where a delivered packet's CPU
goes"), an endpoint process spent ~140 µs of CPU per datagram while the same transport in one
process with no sockets spent a sixth of that: with one process per host, 16 processes wake
in turn for nearly every packet on two cores, each with cold caches and a context switch. The
shared switch process (switch/loop.py) answered the same problem for the switches; this is
its twin for the endpoints: `python -m endpoint` given several `--host` serves them all.

Each host stays an `EndpointProcess` with everything it owns -- its sockets, opened inside its
host's namespace (contracts.netns; tx sockets opened later too), its control socket, metrics
file, transport, pacer, lateness histogram -- and its turns keep their triggers: a host's turn
runs when its own deadline has come or one of its own sockets woke the loop, exactly when its
own process would have woken, and a host that polls its data sockets (interrupt moderation)
has them unwatched here too. What the hosts share is the sleep: one epoll set over every
host's watched sockets, waited on with select() on the epoll descriptor for microsecond
timeouts (as the switch loop does; a select() over the sockets themselves would fail past
FD_SETSIZE, and 16 hosts' EV sockets pass it). A turn's work is the host's, in the fixed
order of the hosts, so a run is as reproducible as before.

What a host cannot have of its own here: the process's CPU time (every host reports the
process's, with its `pid` and `hosts_in_process`, so a sum counts it once) and its signals
(SIGTERM stops every host).
"""

from __future__ import annotations

import contextlib
import select
import signal
from collections.abc import Callable

from contracts.netns import Netns
from endpoint.process import EndpointProcess

_IN = select.EPOLLIN | select.EPOLLERR | select.EPOLLHUP
_OUT = select.EPOLLOUT


def in_netns(fn: Callable, netns: Netns) -> Callable:
    """`fn`, run inside `netns`: a sender's lazy socket opener (udp_io: a socket per EV on
    first use) must create its socket in the host's namespace, not the process's."""

    def opened_in_netns(*args):
        with netns.entered():
            return fn(*args)

    return opened_in_netns


class _Host:
    """The loop's view of one member: its next deadline, whether it polls, what it watches."""

    __slots__ = ("proc", "deadline", "polling", "fds")

    def __init__(self, proc: EndpointProcess) -> None:
        self.proc = proc
        self.deadline = 0.0
        self.polling = False
        self.fds: dict[int, tuple[object, int]] = {}  # fd -> (socket, epoll mask) registered


class SharedLoop:
    """Runs the turns of every `EndpointProcess` in `procs` (see the module doc)."""

    def __init__(self, procs: list[EndpointProcess]) -> None:
        if not procs:
            raise ValueError("SharedLoop: no hosts")
        self.hosts = [_Host(p) for p in procs]
        self.clock = procs[0].clock
        self.dilation = procs[0].dilation
        self.poller = select.epoll()
        self.owner: dict[int, _Host] = {}
        for p in procs:
            p.hosts_in_process = len(procs)

    def _on_signal(self, signum, _frame) -> None:
        for h in self.hosts:
            h.proc.stopping = True
            h.proc.stop_reason = signal.Signals(signum).name

    def _watch(self, h: _Host) -> None:
        """Bring the epoll set in line with what `h` watches now (its sockets change with the
        control clients, its writers and its polling)."""
        rlist, wlist = h.proc.watched(h.polling)
        want: dict[int, tuple[object, int]] = {}
        for s in rlist:
            want[s.fileno()] = (s, _IN)
        for s in wlist:
            fd = s.fileno()
            want[fd] = (s, want[fd][1] | _OUT if fd in want else _OUT)
        have = h.fds
        poller = self.poller
        for fd, (s, _mask) in have.items():
            if fd not in want or want[fd][0] is not s:
                with contextlib.suppress(OSError):  # closed: epoll dropped it already
                    poller.unregister(fd)
                self.owner.pop(fd, None)
        for fd, (s, mask) in want.items():
            old = have.get(fd)
            if old is None or old[0] is not s:
                poller.register(fd, mask)
                self.owner[fd] = h
            elif old[1] != mask:
                poller.modify(fd, mask)
        h.fds = want

    def _forget(self, h: _Host) -> None:
        for fd in h.fds:
            with contextlib.suppress(OSError):
                self.poller.unregister(fd)
            self.owner.pop(fd, None)
        h.fds = {}

    def install_signals(self) -> None:
        """SIGTERM and SIGINT stop every host (`python -m endpoint` calls this before it says
        `ready`, so a signal sent from then on is never the default, fatal one)."""
        first = self.hosts[0].proc
        signal.set_wakeup_fd(first.wake_w.fileno(), warn_on_full_buffer=False)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)

    def run(self) -> None:
        self.install_signals()
        live = list(self.hosts)
        for h in live:
            h.proc.begin()
        turn = list(live)  # every host's first turn
        epfd = [self.poller.fileno()]
        clock = self.clock
        try:
            while live:
                now = clock()
                for h in turn:
                    if not h.proc.stopping:
                        h.deadline, h.polling = h.proc.work(now)
                        self._watch(h)
                done = [h for h in live if h.proc.stopping]
                for h in done:
                    live.remove(h)
                    self._forget(h)
                    h.proc._shutdown()
                if not live:
                    break
                earliest = min(h.deadline for h in live)
                timeout = (earliest - clock()) * self.dilation
                if timeout > 0:
                    with contextlib.suppress(InterruptedError):
                        select.select(epfd, (), (), timeout)
                events = self.poller.poll(0)
                now = clock()
                readable: dict[_Host, list] = {}
                writable: dict[_Host, list] = {}
                for fd, ev in events:
                    h = self.owner.get(fd)
                    if h is None:
                        continue
                    s = h.fds[fd][0]
                    if ev & _IN:
                        readable.setdefault(h, []).append(s)
                    if ev & _OUT:
                        writable.setdefault(h, []).append(s)
                turn = [
                    h
                    for h in live
                    if h in readable or h in writable or h.deadline <= now or h.proc.stopping
                ]
                for h in turn:
                    if not h.proc.stopping:
                        h.proc.woken(readable.get(h, []), writable.get(h, []), now)
        finally:
            for h in live:
                self._forget(h)
                h.proc._shutdown()
            self.poller.close()
            with contextlib.suppress(ValueError):
                signal.set_wakeup_fd(-1)

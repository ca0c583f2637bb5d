"""Which ports the event loop must serve: those given work since its last pass, and those
whose next departure has come due -- not every busy port on every pass.

Why: a loaded fabric keeps nearly every port busy (a frame queued or in flight on each), so a
shared switch process serving a 4x4x4 fabric had ~43 busy ports, and its loop called
`Port.service` on all of them on every pass although only one or two were due: measured in a
dilated permutation, 8.2 calls per packet-hop, the largest share of the switch's Python time.
A heap of (next departure, port) lets a pass touch only what is due.

The contract with `Port` is unchanged: a port joins the `ActivePorts` set when it takes on
work (`Port.offer`: `self.active.add(self)`, a C-level set insertion on the hot path) and the
pass serves it; `Port.service(now)` returns the virtual time it must be served again (or
None: idle). A port not due is never served, which changes nothing: `service` acts only on a
departure due within the port's `early` window, and a port's next departure moves earlier
only when it takes on work, which makes it join the set.
"""

from __future__ import annotations

from heapq import heappop, heappush
from itertools import count
from operator import attrgetter

_SEQ = attrgetter("seq")


class ActivePorts(set):
    """The ports with work that the loop has not served since: a set, so `add` stays the C
    method, plus the heap of served ports' next departures (`heap`).

    A heap entry is (due, seq, n, port): `seq` breaks ties in the loop's fixed order of
    service, `n` (unique) keeps two entries of one port from comparing ports. A port holds
    its live entry's `n` in `sched`; an entry whose `n` is not the port's is stale (the port
    was served again since) and is skipped when it surfaces.
    """

    __slots__ = ("heap", "counter")

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self.heap: list[tuple] = []
        self.counter = count()

    def serve(self, now: float) -> float | None:
        """Serve every port given work since the last pass and every port due at `now` (within
        its `early` window), in the order of their `seq`; return the earliest next departure.

        Why in order: with switches wired in memory, ports served in one pass can feed one
        queue, and the order of service decides which of two frames due together goes first;
        a fixed order makes that tie-break the same in every run (and in the tests)."""
        heap = self.heap
        due = set(self)
        self.clear()
        while heap:
            entry = heap[0]
            port = entry[3]
            if port.sched != entry[2]:
                heappop(heap)  # stale: the port was served and rescheduled since
            elif entry[0] <= now + port.early:
                heappop(heap)
                due.add(port)
            else:
                break
        counter = self.counter
        for port in sorted(due, key=_SEQ) if len(due) > 1 else due:
            t = port.service(now)
            if t is None:
                port.sched = -1
            else:
                n = next(counter)
                port.sched = n
                heappush(heap, (t, port.seq, n, port))
        while heap and heap[0][3].sched != heap[0][2]:
            heappop(heap)
        return heap[0][0] if heap else None

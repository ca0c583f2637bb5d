"""A deterministic in-process network for the sans-IO transport: virtual clock, no sockets.

It models what the transport must survive, per direction ``src -> dst``:

* ``n_paths`` parallel paths; an EV picks one by a fixed hash (as ECMP hashes the UDP source
  port), so the transport sees paths only through EVs — exactly as on the fabric;
* per path: propagation delay, random extra delay (reordering), loss, duplication, random
  trimming, and a black-hole switch; plus black-holed EV subsets, independent of paths;
* per destination, optionally, a rate-limited bottleneck with a byte-bounded data queue, ECN
  marking above a threshold, trimming (cut to ``trim_bytes`` of frame, re-marked with the
  trimmed DSCP) or tail drop, and a strict-priority queue for control packets and trimmed
  headers (like the switch).

DSCPs and queue defaults are the fabric's (``contracts``); a SimNet built with other DSCPs
treats packets as switches configured with them would, to test endpoints configured alike.

Everything random comes from one seeded ``random.Random``: a run is a pure function of its seed.
"""

from __future__ import annotations

import heapq
import random
import zlib
from collections import Counter, deque
from dataclasses import dataclass, replace

from contracts import defaults
from contracts.dscp import CONTROL_DSCP, ECN_MASK, TRIMMABLE_DSCP, TRIMMED_DSCP
from contracts.framing import FRAME_OVERHEAD
from endpoint.transport import Endpoint, Transmit


@dataclass(frozen=True)
class PathSpec:
    delay: float = 20e-6
    jitter: float = 0.0  # uniform extra delay in [0, jitter): reorders packets
    loss: float = 0.0
    dup: float = 0.0
    trim: float = 0.0  # probability a trimmable packet is cut (as if a switch were full)
    blackhole: bool = False


@dataclass(frozen=True)
class Bottleneck:
    rate_bps: float = defaults.LINK_MBPS * 1e6
    queue_bytes: int = int(defaults.QUEUE_KB * 1000)
    ecn_bytes: int = int(defaults.ecn_threshold_kb(defaults.QUEUE_KB) * 1000)
    trimming: bool = defaults.TRIMMING
    trim_bytes: int = defaults.TRIM_BYTES  # of frame, as in the switch
    # priority queue bound (control + trimmed headers), as the switch sizes it
    prio_bytes: int = defaults.prio_limit_bytes(defaults.QUEUE_KB * 1000)


def trim_payload(
    payload: bytes, tos: int, trim_bytes: int, trimmed_dscp: int = TRIMMED_DSCP
) -> tuple[bytes, int]:
    """What a trimming switch leaves of a UDP payload: a cut and the trimmed DSCP (ECN kept)."""
    return payload[: max(0, trim_bytes - FRAME_OVERHEAD)], (trimmed_dscp << 2) | (tos & ECN_MASK)


class _Queue:
    """Bottleneck state for one destination."""

    def __init__(self, spec: Bottleneck) -> None:
        self.spec = spec
        self.data: deque = deque()
        self.prio: deque = deque()
        self.prio_bytes = 0
        self.data_bytes = 0
        self.busy = False
        self.max_data_bytes = 0


class SimNet:
    """Endpoints by name, the network between them, and the event loop that drives both."""

    def __init__(
        self,
        seed: int = 0,
        n_paths: int = 16,
        default_path: PathSpec | None = None,
        trimmable_dscp: int = TRIMMABLE_DSCP,
        trimmed_dscp: int = TRIMMED_DSCP,
        control_dscp: int = CONTROL_DSCP,
    ):
        self.rng = random.Random(seed)
        self.trimmable_dscp = trimmable_dscp
        self.trimmed_dscp = trimmed_dscp
        self.control_dscp = control_dscp
        self.n_paths = n_paths
        self.default_path = default_path or PathSpec()
        self.now = 0.0
        self.endpoints: dict[str, Endpoint] = {}
        self.paths: dict[tuple[str, str], list[PathSpec]] = {}
        self.blackholed_evs: dict[tuple[str, str], set[int]] = {}
        self.queues: dict[str, _Queue] = {}
        self.counters: Counter = Counter()
        self._heap: list = []
        self._seq = 0

    # -- configuration -------------------------------------------------------------------------

    def add_endpoint(self, name: str, ep: Endpoint) -> Endpoint:
        self.endpoints[name] = ep
        return ep

    def _dir_paths(self, src: str, dst: str) -> list[PathSpec]:
        key = (src, dst)
        if key not in self.paths:
            self.paths[key] = [self.default_path] * self.n_paths
        return self.paths[key]

    def path_index(self, src: str, dst: str, ev: int) -> int:
        """Which path an EV takes from src to dst (a fixed hash, like ECMP on the 5-tuple)."""
        h = zlib.crc32(f"{src}>{dst}:{ev}".encode())
        return h % self.n_paths

    def set_path(self, src: str, dst: str, index: int, **changes) -> None:
        paths = self._dir_paths(src, dst)
        paths[index] = replace(paths[index], **changes)

    def set_all_paths(self, src: str, dst: str, **changes) -> None:
        for i in range(self.n_paths):
            self.set_path(src, dst, i, **changes)

    def blackhole_evs(self, src: str, dst: str, evs: set[int]) -> None:
        self.blackholed_evs[(src, dst)] = set(evs)

    def set_bottleneck(self, dst: str, spec: Bottleneck) -> None:
        self.queues[dst] = _Queue(spec)

    # -- packets -------------------------------------------------------------------------------

    def _push(self, t: float, kind: int, item: tuple) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, kind, item))

    def inject(self, src: str, tx: Transmit) -> None:
        dst = tx.peer
        c = self.counters
        c["sent"] += 1
        if tx.ev in self.blackholed_evs.get((src, dst), ()):
            c["drop_blackhole_ev"] += 1
            return
        path = self._dir_paths(src, dst)[self.path_index(src, dst, tx.ev)]
        rng = self.rng
        if path.blackhole:
            c["drop_blackhole_path"] += 1
            return
        if path.loss and rng.random() < path.loss:
            c["drop_loss"] += 1
            return
        payload, tos = tx.payload, tx.tos
        if path.trim and (tos >> 2) == self.trimmable_dscp and rng.random() < path.trim:
            payload, tos = trim_payload(payload, tos, defaults.TRIM_BYTES, self.trimmed_dscp)
            c["trim_path"] += 1
        copies = 2 if path.dup and rng.random() < path.dup else 1
        c["dup"] += copies - 1
        for _ in range(copies):
            delay = path.delay + (rng.random() * path.jitter if path.jitter else 0.0)
            self._push(self.now + delay, 0, (dst, payload, tos))

    def _arrive(self, dst: str, payload: bytes, tos: int) -> None:
        q = self.queues.get(dst)
        if q is None:
            self._deliver(dst, payload, tos)
            return
        spec = q.spec
        dscp = tos >> 2
        size = len(payload) + FRAME_OVERHEAD
        trimmable = self.trimmable_dscp
        if dscp in (self.control_dscp, self.trimmed_dscp) or dscp != trimmable and not (tos & 3):
            self._enqueue_prio(q, payload, tos)
        else:
            if q.data_bytes + size > spec.queue_bytes:
                if spec.trimming and dscp == trimmable:
                    self.counters["trim_queue"] += 1
                    trimmed = trim_payload(payload, tos, spec.trim_bytes, self.trimmed_dscp)
                    self._enqueue_prio(q, *trimmed)
                else:
                    self.counters["drop_queue"] += 1
                    return
            else:
                if q.data_bytes > spec.ecn_bytes and (tos & 3) in (1, 2):
                    tos |= 3
                    self.counters["ecn_marked"] += 1
                q.data.append((payload, tos))
                q.data_bytes += size
                q.max_data_bytes = max(q.max_data_bytes, q.data_bytes)
        if not q.busy:
            self._serve(dst, q)

    def _enqueue_prio(self, q: _Queue, payload: bytes, tos: int) -> None:
        size = len(payload) + FRAME_OVERHEAD
        if q.prio_bytes + size > q.spec.prio_bytes:
            self.counters["drop_prio"] += 1
            return
        q.prio.append((payload, tos))
        q.prio_bytes += size

    def _serve(self, dst: str, q: _Queue) -> None:
        if q.prio:
            payload, tos = q.prio.popleft()
            q.prio_bytes -= len(payload) + FRAME_OVERHEAD
        elif q.data:
            payload, tos = q.data.popleft()
            q.data_bytes -= len(payload) + FRAME_OVERHEAD
        else:
            q.busy = False
            return
        q.busy = True
        t = self.now + (len(payload) + FRAME_OVERHEAD) * 8 / q.spec.rate_bps
        self._push(t, 1, (dst, payload, tos))

    def _deliver(self, dst: str, payload: bytes, tos: int) -> None:
        self.counters["delivered"] += 1
        self.endpoints[dst].on_datagram(payload, tos, self.now)

    # -- loop ----------------------------------------------------------------------------------

    def _poll(self) -> None:
        for name, ep in self.endpoints.items():
            for tx in ep.poll_transmit(self.now):
                self.inject(name, tx)

    def run(self, until: float, stop=None) -> bool:
        """Advance to ``until`` (virtual seconds) or until ``stop()`` is true (returns True)."""
        stuck = 0
        while True:
            self._poll()
            if stop is not None and stop():
                return True
            t_net = self._heap[0][0] if self._heap else float("inf")
            timers = [t for ep in self.endpoints.values() if (t := ep.next_timer()) is not None]
            t_tmr = min(timers) if timers else float("inf")
            t = min(t_net, t_tmr)
            if t > until:
                self.now = until
                return False
            if t <= self.now:
                stuck += 1
                if stuck > 100_000:
                    raise RuntimeError(f"no progress at t={self.now}: a timer never advances")
            else:
                stuck = 0
            self.now = max(self.now, t)
            if t_net <= t_tmr:
                _, _, kind, (dst, payload, tos) = heapq.heappop(self._heap)
                if kind == 0:
                    self._arrive(dst, payload, tos)
                else:  # a bottleneck finished serialising this packet
                    self._deliver(dst, payload, tos)
                    self._serve(dst, self.queues[dst])
            else:
                for ep in self.endpoints.values():
                    nt = ep.next_timer()
                    if nt is not None and nt <= self.now:
                        ep.on_timer(self.now)


class PairHarness:
    """Two endpoints ``a`` and ``b`` with one QP pair, and bookkeeping of what arrived.

    Used by tests and benchmarks: queue messages both ways, run, then compare ``received_*``
    with ``sent_*`` (message id -> bytes).
    """

    def __init__(
        self,
        net: SimNet,
        cfg_a,
        cfg_b=None,
        psn_ab: int = 0,
        psn_ba: int = 0,
        qp_a: int = 0x11,
        qp_b: int = 0x22,
    ) -> None:
        self.net = net
        self.a = net.add_endpoint("a", Endpoint(cfg_a))
        self.b = net.add_endpoint("b", Endpoint(cfg_b or cfg_a))
        self.ca = self.a.connect(qp_a, qp_b, "b", send_psn=psn_ab, recv_psn=psn_ba)
        self.cb = self.b.connect(qp_b, qp_a, "a", send_psn=psn_ba, recv_psn=psn_ab)
        self.sent_ab: dict[int, bytes] = {}
        self.sent_ba: dict[int, bytes] = {}
        self.received_ab: dict[int, list[bytes]] = {}  # lists: a duplicate delivery would show
        self.received_ba: dict[int, list[bytes]] = {}
        self.delivery_times: list[tuple[float, int]] = []  # (at, bytes) at b

    def send_ab(self, data: bytes) -> int:
        msg_id = self.ca.send(data, self.net.now)
        self.sent_ab[msg_id] = data
        return msg_id

    def send_ba(self, data: bytes) -> int:
        msg_id = self.cb.send(data, self.net.now)
        self.sent_ba[msg_id] = data
        return msg_id

    def _collect(self) -> None:
        for d in self.b.take_deliveries():
            self.received_ab.setdefault(d.msg_id, []).append(d.data)
            self.delivery_times.append((d.at, len(d.data)))
        for d in self.a.take_deliveries():
            self.received_ba.setdefault(d.msg_id, []).append(d.data)

    def all_done(self) -> bool:
        self._collect()
        return (
            len(self.received_ab) == len(self.sent_ab)
            and len(self.received_ba) == len(self.sent_ba)
            and self.a.idle
            and self.b.idle
        )

    def run(self, until: float) -> bool:
        return self.net.run(until, stop=self.all_done)

"""Stochastic link impairments at a switch's egress: bursty loss, jitter, reordering,
corruption and duplication -- netem's list, which this kernel does not have.

Why here: the egress port already owns the queue, the serialiser and the propagation delay
(switch/port.py), so an impairment acts where a real link's would -- on the wire, after the
queue -- and in the same *virtual* time: `jitter_us` and `reorder_delay_us` are virtual
microseconds, added to the port's virtual departure clock, so they mean the same at any time
dilation.

Why a subclass: an impaired port becomes an `ImpairedPort` (`impair(port, spec)`: the same
slots, other methods) and goes back to a plain `Port` when healed. A port without impairments
runs the unchanged `Port` code -- not one extra test per packet -- and is never `direct`
while impaired, so the inline ring loop (switch/fastpath.py) and the vector path
(switch/vector.py) hand its frames to `offer` instead of writing them into its tx ring.

Reproducible: each impairment has its own `random.Random(seed)`, the seed derived by the
planner from (scenario seed, link direction) (testbed/fabric/failures.py), and makes its
draws in a fixed order per frame, so the same frames in the same order meet the same fates.

Semantics (docs/fabric.md, "Impairments"):
- Gilbert-Elliott loss: per frame, lose it with the loss probability of the current state,
  then move Good->Bad with probability p or Bad->Good with r. Defaults loss_good 0,
  loss_bad 100 %: the Gilbert model, loss rate p/(p+r), mean burst 1/r frames.
- corruption: a frame is sent with one random bit of its IPv4 header (bytes 18..33: id to
  destination) flipped, so its header checksum fails at whoever receives it: a switch drops
  it as `rx_bad_frame` on its receiving port (where a NIC counts an FCS error), a host's
  kernel as a header error. A non-IPv4 frame cannot carry that mark and is dropped here.
- duplication: a clean copy of the frame is sent right after it.
- every n-th frame dropped (`drop_every: n`): a deterministic gray failure, as the REPS paper's
  "drops every 10th packet" -- the n-th, 2n-th, ... frame that reaches the wire is lost.
- jitter: each frame is held an extra uniform [0, jitter_us] (or |N(0, jitter_us)|) on top of
  the link's delay -- never less than the nominal delay: a link is not faster than light.
  By default jitter keeps the order (a frame never leaves before its predecessor, as on a real
  link whose delay varies); `jitter_reorder: true` lets frames overtake (netem's behaviour).
- reordering: `reorder_percent` of frames are held `reorder_delay_us` more, and frames behind
  them overtake them.
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any

from switch.port import DROP_BLACKHOLE, DROP_LINK_DOWN, DROP_LOSS, DROP_TX_ERROR, Port
from switch.queueing import ENQUEUED, TRIMMED

DROP_BURST_LOSS = "burst_loss"  # Gilbert-Elliott
DROP_EVERY_NTH = "every_nth"  # drop_every: the n-th, 2n-th, ... frame
DROP_CORRUPT = "corrupt_non_ipv4"  # a corrupted frame that cannot carry the bad-checksum mark
CORRUPTED = "corrupted"
DUPLICATED = "duplicated"
REORDERED = "reordered"
JITTERED = "jittered"
JITTER_DISTRIBUTIONS = ("uniform", "normal")
MAX_EXTRA_US = 10_000_000.0  # 10 virtual seconds: beyond that a "delay" is a black hole

_FLIP_FROM = 18  # IPv4 id .. destination: a flip there breaks only the header checksum
_FLIP_BITS = (34 - _FLIP_FROM) * 8


def _pct(d: dict, key: str, default: float = 0.0) -> float:
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 100:
        raise ValueError(f"{key}: must be a percentage in [0, 100], got {v!r}")
    return float(v)


def _us(d: dict, key: str) -> float:
    v = d.get(key, 0.0)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= MAX_EXTRA_US:
        raise ValueError(f"{key}: must be virtual microseconds in [0, {MAX_EXTRA_US:g}], got {v!r}")
    return float(v)


@dataclass(frozen=True)
class GilbertElliott:
    """Percentages, as netem's `loss gemodel p r 1-h 1-k` takes them."""

    p: float  # Good -> Bad per frame
    r: float = 100.0  # Bad -> Good per frame
    loss_good: float = 0.0
    loss_bad: float = 100.0

    @classmethod
    def from_dict(cls, d: Any) -> GilbertElliott:
        if not isinstance(d, dict):
            raise ValueError(
                f"gilbert_elliott: must be a mapping of p, r, loss_good, loss_bad, got {d!r}"
            )
        unknown = set(d) - {"p", "r", "loss_good", "loss_bad"}
        if unknown:
            raise ValueError(f"gilbert_elliott.{sorted(unknown)[0]}: unknown key")
        if "p" not in d:
            raise ValueError(
                "gilbert_elliott.p: required (percent chance per frame of Good -> Bad)"
            )
        try:
            ge = cls(
                _pct(d, "p"), _pct(d, "r", 100.0), _pct(d, "loss_good"), _pct(d, "loss_bad", 100.0)
            )
        except ValueError as exc:
            raise ValueError(f"gilbert_elliott.{exc}") from None
        if ge.p > 0 and ge.r == 0:
            raise ValueError("gilbert_elliott.r: 0 with p > 0 never leaves the Bad state")
        return ge

    def loss_rate(self) -> float:
        """The long-run fraction of frames lost (stationary: P(Bad) = p / (p + r))."""
        if self.p + self.r == 0:
            return self.loss_good / 100
        bad = self.p / (self.p + self.r)
        return (bad * self.loss_bad + (1 - bad) * self.loss_good) / 100


@dataclass(frozen=True)
class ImpairmentSpec:
    """What one direction of a link suffers; `from_dict` is the switch's control request's
    `impair` object (every key optional but `seed`; an error names the key)."""

    seed: int
    gilbert_elliott: GilbertElliott | None = None
    jitter_us: float = 0.0
    jitter_distribution: str = "uniform"
    jitter_reorder: bool = False
    reorder_percent: float = 0.0
    reorder_delay_us: float = 0.0
    corrupt_percent: float = 0.0
    duplicate_percent: float = 0.0
    drop_every: int = 0  # 0: off; n: every n-th frame is dropped

    KEYS = (
        "seed", "gilbert_elliott", "jitter_us", "jitter_distribution", "jitter_reorder",
        "reorder_percent", "reorder_delay_us", "corrupt_percent", "duplicate_percent",
        "drop_every",
    )  # fmt: skip

    @classmethod
    def from_dict(cls, d: Any) -> ImpairmentSpec:
        if not isinstance(d, dict):
            raise ValueError(f"impair: must be a mapping, got {d!r}")
        unknown = set(d) - set(cls.KEYS)
        if unknown:
            raise ValueError(f"impair.{sorted(unknown)[0]}: unknown key")
        seed = d.get("seed")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed: must be an integer, got {seed!r}")
        dist = d.get("jitter_distribution", "uniform")
        if dist not in JITTER_DISTRIBUTIONS:
            raise ValueError(
                f"jitter_distribution: one of {', '.join(JITTER_DISTRIBUTIONS)}, got {dist!r}"
            )
        reorder_jitter = d.get("jitter_reorder", False)
        if not isinstance(reorder_jitter, bool):
            raise ValueError(f"jitter_reorder: must be true or false, got {reorder_jitter!r}")
        every = d.get("drop_every", 0)
        if isinstance(every, bool) or not isinstance(every, int) or every < 0:
            raise ValueError(f"drop_every: must be an integer >= 0 (0: off), got {every!r}")
        ge = d.get("gilbert_elliott")
        spec = cls(
            seed=seed,
            gilbert_elliott=GilbertElliott.from_dict(ge) if ge is not None else None,
            jitter_us=_us(d, "jitter_us"),
            jitter_distribution=dist,
            jitter_reorder=reorder_jitter,
            reorder_percent=_pct(d, "reorder_percent"),
            reorder_delay_us=_us(d, "reorder_delay_us"),
            corrupt_percent=_pct(d, "corrupt_percent"),
            duplicate_percent=_pct(d, "duplicate_percent"),
            drop_every=every,
        )
        if spec.reorder_percent > 0 and spec.reorder_delay_us <= 0:
            raise ValueError("reorder_delay_us: must be > 0 when reorder_percent is set")
        return spec

    def to_dict(self) -> dict:
        return asdict(self)


class Impairment:
    """The run-time state of one spec on one port: its RNG, the Gilbert-Elliott state, the
    frames held back by jitter or reordering (a heap by release time), and the clock."""

    __slots__ = (
        "spec", "rng", "bad", "held", "n", "last_release", "now", "ge", "corrupt", "dup",
        "jitter_s", "normal", "reorder", "reorder_s", "every", "since_drop",
    )  # fmt: skip

    def __init__(self, spec: ImpairmentSpec) -> None:
        self.spec = spec
        self.rng = random.Random(spec.seed)
        self.bad = False  # Gilbert-Elliott state
        self.held: list[tuple[float, int, bytearray]] = []
        self.n = 0  # tie-break of equal release times: the order of arrival
        self.last_release = float("-inf")
        self.now = 0.0  # virtual; the port sets it on every offer and service
        g = spec.gilbert_elliott
        self.ge = (g.p / 100, g.r / 100, g.loss_good / 100, g.loss_bad / 100) if g else None
        self.corrupt = spec.corrupt_percent / 100
        self.dup = spec.duplicate_percent / 100
        self.jitter_s = spec.jitter_us / 1e6
        self.normal = spec.jitter_distribution == "normal"
        self.reorder = spec.reorder_percent / 100
        self.reorder_s = spec.reorder_delay_us / 1e6
        self.every = spec.drop_every
        self.since_drop = 0  # frames on the wire since the last `drop_every` drop

    def clear(self, port: Port) -> None:
        """Take this impairment off `port` (back to a plain Port). Frames still held back by
        jitter or reordering join its in-flight list in their order: none is lost by a heal."""
        if self.held:
            merged = [*port.inflight, *((t, f) for t, _, f in sorted(self.held))]
            port.inflight = deque(sorted(merged, key=lambda x: x[0]))
            self.held.clear()
            port.active.add(port)
        port.impair = None
        port.__class__ = Port

    def lose(self) -> bool:
        """The Gilbert-Elliott decision for the next frame (and the state's next step)."""
        p, r, loss_good, loss_bad = self.ge  # type: ignore[misc]
        rnd = self.rng.random
        if self.bad:
            lost = loss_bad >= 1.0 or (loss_bad > 0.0 and rnd() < loss_bad)
            if rnd() < r:
                self.bad = False
        else:
            lost = loss_good > 0.0 and rnd() < loss_good
            if rnd() < p:
                self.bad = True
        return lost

    def extra_delay(self) -> tuple[float, bool]:
        """(extra virtual seconds to hold the next frame, whether it is a reordered one)."""
        extra = 0.0
        if self.jitter_s:
            if self.normal:
                extra = abs(self.rng.gauss(0.0, self.jitter_s))
            else:
                extra = self.rng.random() * self.jitter_s
        if self.reorder and self.rng.random() < self.reorder:
            return extra + self.reorder_s, True
        return extra, False


def corrupt(frame: bytearray, rng: random.Random) -> bool:
    """Flip one random bit of `frame`'s IPv4 header from the id to the destination, so that
    its header checksum fails; False (frame untouched) if it is not a plain IPv4 frame."""
    if len(frame) < 34 or frame[12] != 8 or frame[13] != 0 or frame[14] != 0x45:
        return False
    bit = rng.randrange(_FLIP_BITS)
    frame[_FLIP_FROM + bit // 8] ^= 1 << (bit % 8)
    return True


class ImpairedPort(Port):
    """A Port while it has an impairment (`port.impair`): every frame passes `_wire`, where
    the impairments act, and frames held back wait in `impair.held` until due."""

    __slots__ = ()

    def refresh(self) -> None:
        Port.refresh(self)
        self.direct = False  # never straight into the tx ring: `_wire` must see every frame

    def offer(self, frame: bytearray, now: float) -> None:
        """`Port.offer` without its inline shortcut to the wire."""
        self.impair.now = now
        if not self.up:
            self.counters.drop(DROP_LINK_DOWN)
            return
        if type(frame) is not bytearray:
            frame = bytearray(frame)
        q = self.queue
        if q.data or q.prio or self.busy_until > now + self.early:
            verdict = q.enqueue(frame)
            if verdict is not ENQUEUED and verdict is not TRIMMED:
                self.counters.drop(verdict)
            else:
                self.active.add(self)
            m = self.qmax  # the interval's deepest queue, as in Port.offer
            if now >= m.until:
                m.roll(now)
            if q.data_bytes > m.peak:
                m.peak = q.data_bytes
            return
        busy = self.busy_until
        busy = (busy if busy > now - self.slack else now) + len(frame) * self.sec_per_byte
        self.busy_until = busy
        due = busy + self.delay_s
        if due > now + self.early or self.inflight:
            self.inflight.append((due, frame))
            self.active.add(self)
            return
        self._wire(frame)

    def service(self, now: float) -> float | None:
        imp = self.impair
        imp.now = now
        self._release(now)
        nxt = Port.service(self, now)
        self._release(now)
        held = imp.held
        if held and (nxt is None or held[0][0] < nxt):
            nxt = held[0][0]
        return nxt

    def flush(self) -> int:
        n = Port.flush(self) + len(self.impair.held)
        self.impair.held.clear()
        return n

    def _wire(self, frame: bytearray) -> None:
        """The frame is due on the wire: carrier and gray failures first (as `Port._wire`),
        then loss (random, bursty, every n-th), corruption, duplication, and the extra delay
        of jitter or reordering."""
        c = self.counters
        if self.blackhole:
            c.drop(DROP_BLACKHOLE)
            return
        if self.loss and self.rng.random() < self.loss:
            c.drop(DROP_LOSS)
            return
        imp = self.impair
        if imp.ge is not None and imp.lose():
            c.drop(DROP_BURST_LOSS)
            return
        if imp.every:
            imp.since_drop += 1
            if imp.since_drop >= imp.every:
                imp.since_drop = 0
                c.drop(DROP_EVERY_NTH)
                return
        copy = None
        if imp.dup and imp.rng.random() < imp.dup:
            copy = bytearray(frame)
            c.count(DUPLICATED)
        if imp.corrupt and imp.rng.random() < imp.corrupt:
            c.count(CORRUPTED)
            if type(frame) is not bytearray:
                frame = bytearray(frame)
            if not corrupt(frame, imp.rng):
                c.drop(DROP_CORRUPT)
                frame = None
        for f in (frame, copy):
            if f is None:
                continue
            extra, reordered = imp.extra_delay() if imp.jitter_s or imp.reorder else (0.0, False)
            if reordered:
                c.count(REORDERED)
            elif extra:
                c.count(JITTERED)
            t = imp.now + extra
            if not reordered and not imp.spec.jitter_reorder:
                # Order-keeping jitter: never before the frame sent before it.
                t = max(t, imp.last_release)
                imp.last_release = t
            if imp.held or t > imp.now + self.early:
                imp.n += 1
                heapq.heappush(imp.held, (t, imp.n, f))
                self.active.add(self)
            else:
                self._send(f)
        if imp.held:
            self._release(imp.now)

    def _release(self, now: float) -> None:
        """Send the held frames that are due, in release order (ties: order of arrival)."""
        held = self.impair.held
        horizon = now + self.early
        while held and held[0][0] <= horizon:
            self._send(heapq.heappop(held)[2])

    def _send(self, frame: bytes | bytearray) -> None:
        if self.transmit(frame):
            c = self.counters
            c.tx_packets += 1
            c.tx_bytes += len(frame)
        else:
            self.counters.drop(DROP_TX_ERROR)


def impair(port: Port, spec: ImpairmentSpec | None) -> None:
    """Give `port` the impairments of `spec` (replacing any it had; the RNG starts afresh
    from the spec's seed), or none (None): it then runs the plain Port code again."""
    if port.impair is not None:
        port.impair.clear(port)
    if spec is not None:
        port.impair = Impairment(spec)
        port.__class__ = ImpairedPort
    port.refresh()

"""Per-EV path state for one connection: which entropy values to spray over, and how much.

An EV is a UDP source port; the fabric's ECMP hash (or a source route) turns it into a path.
The sender never learns the path itself, only what happens to packets sent on the EV:

* A trim means *congestion*: the EV's weight drops (state CONGESTED) and recovers with clean
  ACKs; it is never retired for it. So does an ECN mark, except on generated EVs, which
  spread evenly by construction (`TransportConfig.ev_weight_on_ecn`: why).
* A loss (or data RTO) means *failure*: the EV is retired at once (FAILED), receives no data,
  and is probed on a timer with exponential back-off; an answered probe re-admits it. What
  retiring, backing off and re-admitting do to an EV is `endpoint.ev_policy` (three functions,
  replaceable per process with ``TESTBED_EV_POLICY=/path/file.py``: Lab 4); the state changes
  and their bookkeeping stay here.

Selection follows the connection's load-balancing policy (`TransportConfig.lb`, MRC's
"load balancing" choice, docs/transport.md):

* `wrr` (the default): weighted round-robin with credits, so a CONGESTED EV of weight w
  carries about w times the packets of a GOOD one, and consecutive packets land on different
  EVs (and, as EV i is on plane i % planes, on different planes);
* `oblivious`: a random usable EV per packet, blind to ECN and trims (oblivious packet
  spraying, the baseline adaptive schemes are measured against);
* `reps`: REPS (Recycled Entropy Packet Spraying, Bonato et al.; UET's load balancer). An EV
  whose packet came back acknowledged without ECN is *recycled*: kept in a small circular
  buffer, and the next packet takes the oldest one there. With nothing to recycle, a random
  usable EV explores. ECN-marked or trimmed EVs are not recycled, so traffic drains from a
  congested or slow path within a round trip. After a timeout REPS *freezes*: for one RTO it
  reuses the EVs in its buffer without using them up, since after a failure they are the ones
  known to work; then it forgets them and explores `reps_explore` packets at random.

Whatever the policy, FAILED and DENIED EVs carry no data, and a resend avoids the EV it was
lost on.
"""

from __future__ import annotations

import os
import random
from collections import deque
from types import ModuleType

from contracts.plugins import load_plugin
from endpoint import ev_policy
from endpoint.config import TransportConfig
from endpoint.ev_path import EVPath, EVState

EV_POLICY_ENV = "TESTBED_EV_POLICY"
POLICY_FUNCTIONS = ("retire", "schedule_probe", "readmit")


RECENT_ACKED = 8  # resends rotate over the EVs of this many latest ACKs
# ... whose latest round trip took at most this many times the connection's shortest: a
# standing queue (a switch slowed to a tenth: ~100x on the 8:1 fabric) is passed over, ordinary
# congestion (all-to-all into 12 kB queues: up to ~3x, every EV alike) is not.
RESEND_RTT_FACTOR = 8
RANDOM_TRIES = 8  # random draws before a random pick falls back to the round-robin one

Replacement = tuple[int, int, EVState, bool]
"""One REPLACE_EV entry: (ev, ev_new, state, all_copies)."""


class EVSet:
    """The EVs of one connection and the policy that picks among them."""

    def __init__(self, cfg: TransportConfig, on_change=None) -> None:
        self.cfg = cfg
        self.paths = [EVPath(ev, i % cfg.planes) for i, ev in enumerate(cfg.ev_values())]
        self.by_ev = {p.ev: p for p in self.paths}
        self._next = 0
        self._next_failed = 0
        self._next_resend = 0
        # The EVs of the latest ACKs, oldest first (the sender appends): where resends go.
        self.recent: deque[EVPath] = deque(maxlen=RECENT_ACKED)
        self._on_change = on_change  # callback(now, ev, old_state, new_state, reason)
        policy = current_policy()
        self._retire = policy.retire
        self._schedule_probe = policy.schedule_probe
        self._readmit = policy.readmit
        # FAILED EVs, kept by _set: the timer queries below run on every event-loop turn of the
        # endpoint process, and scanning every EV there cost ~10% of its CPU.
        self._failed: list[EVPath] = []
        self.fallback_picks = 0  # picks made from FAILED EVs because no other was left
        self.deny_rules: list[tuple[int, int]] = []  # (mask, value): EVs matching are DENIED
        # Load balancing (module docstring). The random choices are seeded by the connection's
        # EVs, so a run repeats them.
        self.lb = cfg.lb
        self._ecn_weight = cfg.ecn_lowers_weight  # per ECN echo: resolved once
        self._rng = random.Random(f"lb:{self.paths[0].ev}:{len(self.paths)}")
        self.reps_buffer: deque[EVPath] = deque(maxlen=cfg.reps_buffer)  # recycled, oldest first
        self.reps_frozen_until = float("-inf")
        self.reps_frozen: list[EVPath] = []  # what a freeze cycles through
        self._frozen_next = 0
        self.reps_explore = 0  # random picks left before recycling resumes
        self.lb_counts = {"recycled": 0, "explored": 0, "frozen": 0}

    # -- selection ---------------------------------------------------------------------------

    def pick(self, exclude: int | None = None, proven_since: float | None = None) -> EVPath:
        """Next EV to send on, skipping FAILED ones and (if possible) ``exclude``.

        With ``proven_since``, only EVs whose round trip worked at or after that time
        (``proven_at``) are taken, in turn, while there is one; else the normal choice.
        """
        paths = self.paths
        failed, denied = EVState.FAILED, EVState.DENIED  # per packet: locals, not lookups
        if proven_since is not None:
            for _ in range(len(paths)):
                p = paths[self._next]
                self._next = (self._next + 1) % len(paths)
                if (
                    p.proven_at >= proven_since
                    and p.state is not failed
                    and p.state is not denied
                    and p.ev != exclude
                ):
                    return p
        if self.lb != "wrr":
            p = self._pick_reps(exclude) if self.lb == "reps" else self._pick_random(exclude)
            if p is not None:
                return p
        n = len(paths)
        best: EVPath | None = None
        for _ in range(n):
            p = paths[self._next]
            self._next = (self._next + 1) % n
            if p.state is failed or p.state is denied or (p.ev == exclude and n > 1):
                continue
            p.credit += p.weight
            if p.credit >= 1.0:
                p.credit -= 1.0
                return p
            if best is None or p.credit > best.credit:
                best = p
        if best is not None:  # every candidate is congested: the one owed most goes
            best.credit = max(0.0, best.credit - 1.0)
            return best
        # Nothing healthy (all FAILED, or the only one excluded): keep data moving on the
        # failed EVs in turn rather than stall; probes still decide when they come back.
        self.fallback_picks += 1
        allowed = [p for p in paths if p.state is not EVState.DENIED]  # never a denied one
        candidates = [p for p in allowed if p.ev != exclude] or allowed
        p = candidates[self._next_failed % len(candidates)]
        self._next_failed += 1
        return p

    def _usable(self, p: EVPath, exclude: int | None) -> bool:
        return p.state is not EVState.FAILED and p.state is not EVState.DENIED and p.ev != exclude

    def _pick_random(self, exclude: int | None) -> EVPath | None:
        """A random usable EV, or None (then round-robin decides: few or none are usable)."""
        paths = self.paths
        for _ in range(RANDOM_TRIES):
            p = paths[self._rng.randrange(len(paths))]
            if self._usable(p, exclude):
                return p
        return None

    def _pick_reps(self, exclude: int | None) -> EVPath | None:
        """REPS (module docstring): explore, reuse a frozen buffer, or recycle the oldest."""
        if self.reps_explore > 0:
            self.reps_explore -= 1
            self.lb_counts["explored"] += 1
            return self._pick_random(exclude)
        frozen = self.reps_frozen
        if frozen:
            for _ in range(len(frozen)):
                p = frozen[self._frozen_next % len(frozen)]
                self._frozen_next += 1
                if self._usable(p, exclude):
                    self.lb_counts["frozen"] += 1
                    return p
        else:
            buf = self.reps_buffer
            while buf:
                p = buf.popleft()
                if self._usable(p, exclude):
                    self.lb_counts["recycled"] += 1
                    return p
        self.lb_counts["explored"] += 1
        return self._pick_random(exclude)

    def on_timeout(self, now: float, duration: float) -> None:
        """An RTO fired: REPS freezes for `duration` (module docstring)."""
        if self.lb != "reps" or self.reps_frozen or self.reps_explore:
            return
        self.reps_frozen = list(self.reps_buffer)
        self._frozen_next = 0
        self.reps_frozen_until = now + duration

    def _reps_feedback(self, p: EVPath, now: float, good: bool) -> None:
        if self.reps_frozen and now >= self.reps_frozen_until:  # the freeze ends
            self.reps_frozen = []
            self.reps_buffer.clear()
            self.reps_explore = self.cfg.reps_explore
        if good:
            self.reps_buffer.append(p)  # full: the oldest goes
            if self.reps_frozen and p not in self.reps_frozen:
                self.reps_frozen.append(p)

    def pick_resend(self, exclude: int | None = None, rtt_limit: float = float("inf")) -> EVPath:
        """An EV for a packet already lost once: one of the EVs whose ACKs arrived last, in
        turn (the most recent first), unless that ACK's round trip took longer than
        ``rtt_limit``; else whatever ``pick`` gives.

        Right after a failure the sender does not yet know which of its EVs died; a resend on
        the next EV in the rotation landed on another dead one as often as the failure's share
        of the paths (75% of round trips across a dead spine link on two spines), and a tail
        packet then needed one RTO per attempt. An EV that has just been acknowledged is the
        best evidence of a working round trip there is -- but not if that round trip crossed a
        standing queue: behind a switch slowed to a tenth its ~1 ms late ACKs were the only
        ones still coming back, and every resend of the REPS grid's slowest flows went into
        that queue again, one timeout after another
        (docs/measurements/2026-12-07-degraded-switch-resends.md). The test is the round
        trip's length, not its ECN mark: a mark says a queue passed half full, and a first
        rule on marks sent resends where ``pick`` puts them whenever the latest ACKs were all
        marked, the healthy spines' too; three flows of that cell so kept their last resends
        in the slowed spine (P99 896 µs against 586 by round trip;
        docs/measurements/2026-12-07-resend-rule-and-deny.md).
        """
        recent = self.recent
        n = len(recent)
        for i in range(n):
            p = recent[n - 1 - (self._next_resend + i) % n]
            if p.last_ack_rtt <= rtt_limit and self._usable(p, exclude):
                self._next_resend = (self._next_resend + i + 1) % RECENT_ACKED
                return p
        return self.pick(exclude)

    def healthy_count(self) -> int:
        return sum(1 for p in self.paths if self._usable(p, None))

    # -- feedback ----------------------------------------------------------------------------

    def on_congestion(self, ev: int, now: float, reason: str = "ecn") -> None:
        """An ECN echo or a trim NACK on `ev` (`reason`): its weight drops -- on an ECN echo
        only where `ecn_lowers_weight` (TransportConfig: not for generated EVs, and why).
        REPS hears both."""
        p = self.by_ev.get(ev)
        if p is None or p.state is EVState.FAILED or p.state is EVState.DENIED:
            return
        if self.lb == "reps":
            self._reps_feedback(p, now, good=False)
        if reason == "ecn" and not self._ecn_weight:
            return
        p.weight = max(self.cfg.weight_min, p.weight * self.cfg.ecn_weight_factor)
        self._set(p, EVState.CONGESTED, now, reason)

    def on_clean_ack(self, ev: int, now: float) -> None:
        p = self.by_ev.get(ev)
        if p is None:
            return
        if self.lb == "reps" and p.state is not EVState.FAILED and p.state is not EVState.DENIED:
            self._reps_feedback(p, now, good=True)
        if p.state is not EVState.CONGESTED:
            return
        p.weight = min(1.0, p.weight + self.cfg.weight_recover)
        if p.weight >= 1.0:
            self._set(p, EVState.GOOD, now, "clean_acks")

    def retire(self, ev: int, now: float, next_probe_seq: int, reason: str = "loss") -> bool:
        """Mark ``ev`` FAILED and schedule its first probe. False if it already was. `reason`:
        what proved it dead (loss, rto, ack_path, sweep), for the EV event stream."""
        p = self.by_ev.get(ev)
        if p is None or p.state is EVState.DENIED:
            return False
        if not self._retire(p, now, next_probe_seq, self.cfg):
            return False
        self._set(p, EVState.FAILED, now, reason)
        return True

    def unretire(self, ev: int, now: float, reason: str = "spurious") -> bool:
        """A FAILED EV's own round trip worked after all (a loss declared on it was reordering,
        `spurious`, or a trim, `trim`): GOOD again at once. False if it was not FAILED."""
        p = self.by_ev.get(ev)
        if p is None or p.state is not EVState.FAILED:
            return False
        p.ack_misses = 0
        self._set(p, EVState.GOOD, now, reason)
        return True

    def readmit(self, ev: int, probe_seq: int, now: float, reason: str = "probe_ack") -> bool:
        """A PROBE-ACK arrived: re-admit ``ev`` if it answers a probe sent since it failed."""
        p = self.by_ev.get(ev)
        if p is None or not self._readmit(p, probe_seq, now, self.cfg):
            return False
        p.ack_misses = 0
        self._set(p, EVState.GOOD, now, reason)
        return True

    # -- deny masks (MRC's EV deny: "link 1 at hop 2" as mask/value bits of the EV) ---------

    def deny(self, mask: int, value: int, now: float) -> list[int]:
        """Deny every EV with ev & mask == value: it carries nothing and is not probed until
        the rule is lifted. Returns the EVs it denied. Refused (ValueError, nothing changed)
        if fewer than ``min_active_evs`` EVs would be left undenied."""
        if (mask, value) in self.deny_rules:
            return []
        hit = [
            p for p in self.unique_paths() if p.ev & mask == value and p.state is not EVState.DENIED
        ]
        left = sum(1 for p in self.paths if p.state is not EVState.DENIED and p not in hit)
        if left < self.cfg.min_active_evs:
            raise ValueError(
                f"deny mask {mask:#x} value {value:#x}: would leave {left} of {len(self.paths)} "
                f"EVs, fewer than min_active_evs ({self.cfg.min_active_evs})"
            )
        self.deny_rules.append((mask, value))
        for p in hit:
            self._set(p, EVState.DENIED, now, "deny")  # a FAILED one stops being probed
        return [p.ev for p in hit]

    def allow(self, mask: int, value: int, now: float) -> list[int]:
        """Lift one deny rule: the EVs no other rule denies are GOOD again (full weight).
        Returns them."""
        if (mask, value) not in self.deny_rules:
            return []
        self.deny_rules.remove((mask, value))
        back = []
        for p in self.unique_paths():
            if (
                p.state is EVState.DENIED
                and p.ev & mask == value  # not an EV denied otherwise (by `replace`)
                and not any(p.ev & m == v for m, v in self.deny_rules)
            ):
                p.weight, p.credit, p.ack_misses = 1.0, 0.0, 0
                self._set(p, EVState.GOOD, now, "allow")
                back.append(p.ev)
        return back

    # -- REPLACE_EV (MRC's EV operation: swap an EV of the array for another) -------------------

    def replace(
        self,
        entries: list[Replacement],
        now: float,
        dry_run: bool = False,
        hits: list[bool] | None = None,
    ) -> int:
        """Replace EVs of this connection's array, entry by entry (MRC_CTL_EV_OP_REPLACE_EV):
        one occurrence of `ev` (the first), or every one with `all_copies`, becomes `ev_new` in
        state `state` (GOOD or DENIED; a deny rule in force that matches `ev_new` denies it
        whatever `state` says). An `ev_new` already in the array makes that slot a *copy*: the
        two slots share one EV, its state and its feedback, and it carries a share per slot.
        A slot keeps its plane, so an `ev_new` already on another plane is refused. An entry
        whose `ev` this connection has not got is skipped (a profile's EVs differ per
        connection when each draws its own base). Returns how many slots changed.

        All or none: every entry is checked in order on a copy of the array first, and a
        ValueError naming the entry leaves the connection as it was. `dry_run` only checks;
        `hits[k]` becomes True for each entry that found its `ev` (an earlier entry's `ev_new`
        counts: the entries apply in order).
        Why: an EV that the controller knows crosses a failed link can be swapped for one that
        does not, keeping the spraying width (a deny narrows it), and a hashed EV that
        collides can be re-rolled."""
        slots = [p.ev for p in self.paths]
        plane_of = {p.ev: p.plane for p in self.paths}
        denied = {p.ev for p in self.paths if p.state is EVState.DENIED}
        changed = 0
        for k, (ev, new, state, all_copies) in enumerate(entries):
            where = [i for i, e in enumerate(slots) if e == ev]
            if not where:
                continue
            if hits is not None:
                hits[k] = True
            if not all_copies:
                where = where[:1]
            plane = plane_of[ev]
            if new != ev and new in plane_of and plane_of[new] != plane:
                raise ValueError(
                    f"entries[{k}]: ev_new {new} is already an EV of plane {plane_of[new]}, "
                    f"and the slot of ev {ev} is on plane {plane}"
                )
            for i in where:
                slots[i] = new
            if ev not in slots:
                plane_of.pop(ev)
                denied.discard(ev)
            plane_of[new] = plane
            if state is EVState.DENIED or any(new & m == v for m, v in self.deny_rules):
                denied.add(new)
            else:
                denied.discard(new)
            left = sum(1 for e in slots if e not in denied)
            if left < self.cfg.min_active_evs:
                raise ValueError(
                    f"entries[{k}]: would leave {left} of {len(slots)} EVs undenied, fewer "
                    f"than min_active_evs ({self.cfg.min_active_evs})"
                )
            changed += len(where)
        if dry_run:
            return changed
        for ev, new, state, all_copies in entries:
            self._replace_one(ev, new, state, all_copies, now)
        return changed

    def _replace_one(self, ev: int, new: int, state: EVState, all_copies: bool, now: float) -> None:
        old = self.by_ev.get(ev)
        if old is None:
            return
        prev = old.state  # what the slot held: the new EV's event starts from it
        target = self.by_ev.get(new)
        created = target is None
        if target is None:
            target = self.by_ev[new] = EVPath(new, old.plane)
        for i, p in enumerate(self.paths):
            if p is old:
                self.paths[i] = target
                if not all_copies:
                    break
        if old is not target and all(p is not old for p in self.paths):
            self._forget(old)
        if state is not EVState.DENIED and any(new & m == v for m, v in self.deny_rules):
            state = EVState.DENIED
        if created:
            target.state = state  # a fresh EV: its event says what its slot held before
            if self._on_change is not None:
                self._on_change(now, new, prev, state, "replace")
        else:  # a copy: the event says so even when the EV's state stays what it was
            target.weight, target.credit, target.ack_misses = 1.0, 0.0, 0
            if target.state is not state:
                self._set(target, state, now, "replace")
            elif self._on_change is not None:
                self._on_change(now, new, state, state, "replace")

    def _forget(self, p: EVPath) -> None:
        """`p` left the array: no lookup, buffer or probe timer refers to it any more. Its
        state becomes DENIED so that a reference still held elsewhere (a resend queued on it)
        picks another EV."""
        del self.by_ev[p.ev]
        if p.state is EVState.FAILED:
            self._failed.remove(p)
        p.state = EVState.DENIED
        self.recent = deque((x for x in self.recent if x is not p), maxlen=RECENT_ACKED)
        self.reps_buffer = deque(
            (x for x in self.reps_buffer if x is not p), maxlen=self.cfg.reps_buffer
        )
        self.reps_frozen = [x for x in self.reps_frozen if x is not p]

    def array(self) -> list[dict]:
        """The EV array in slot order (MRC_CTL_EV_OP_QUERY_EV_ARRAY): each slot's EV, plane,
        state and weight; a copy appears once per slot."""
        return [
            {"ev": p.ev, "plane": p.plane, "state": p.state.value, "weight": round(p.weight, 3)}
            for p in self.paths
        ]

    def unique_paths(self) -> list[EVPath]:
        """Each EV once, in slot order (after `replace` a copy holds several slots)."""
        return list(dict.fromkeys(self.paths))

    # -- probing -----------------------------------------------------------------------------

    def due_probes(self, now: float) -> list[EVPath]:
        """FAILED EVs whose probe timer expired; their next probe is scheduled (backed off)."""
        due: list[EVPath] = []
        if not self._failed:
            return due
        for p in self.unique_paths():  # in EV order, as before the _failed list existed
            if p.state is EVState.FAILED and p.next_probe_at <= now:
                self._schedule_probe(p, now, self.cfg)
                due.append(p)
        return due

    def next_probe_time(self) -> float | None:
        if not self._failed:
            return None
        return min(p.next_probe_at for p in self._failed)

    def states(self) -> dict[int, str]:
        return {p.ev: p.state.value for p in self.paths}

    def _set(self, p: EVPath, state: EVState, now: float, reason: str) -> None:
        if p.state is state:
            return
        old = p.state
        p.state = state
        if state is EVState.FAILED:
            self._failed.append(p)
        elif old is EVState.FAILED:
            self._failed.remove(p)
        if self._on_change is not None:
            self._on_change(now, p.ev, old, state, reason)


# -- the failure policy --------------------------------------------------------------------------

_policy: ModuleType | None = None  # what EVSets built from now on use; None: not chosen yet


def load_policy(path: str) -> ModuleType:
    """The Python file at `path` as a policy module (``retire``, ``schedule_probe``, ``readmit``)."""
    module = load_plugin(path, "ev_policy_plugin", source=f"{EV_POLICY_ENV}={path}")
    missing = [f for f in POLICY_FUNCTIONS if not callable(getattr(module, f, None))]
    if missing:
        raise ImportError(f"{EV_POLICY_ENV}={path}: no function {', '.join(missing)}")
    return module


def current_policy() -> ModuleType:
    """The policy module: the one `use_policy` set, else ``$TESTBED_EV_POLICY``'s (loaded once per
    process), else the built-in `endpoint.ev_policy`."""
    global _policy
    if _policy is None:
        path = os.environ.get(EV_POLICY_ENV)
        _policy = load_policy(path) if path else ev_policy
    return _policy


def use_policy(module: ModuleType | None) -> ModuleType | None:
    """Make EVSets built from now on use `module` (None: choose again as at process start);
    returns the previous choice, for restoring it."""
    global _policy
    previous, _policy = _policy, module
    return previous

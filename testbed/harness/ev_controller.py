"""A fabric controller for MRC: read the endpoints' EV events, find the failed link, deny it.

MRC leaves failure handling to the endpoints -- each connection retires the EVs it loses
packets on -- and gives a system controller an interface to do better (`mrc_ctl`: EV
state-change events, deny masks; docs/transport.md, "MRC's interface, mapped"). This is such a
controller, as a scenario may run one (`controller:` in the scenario file):

1. It reads every endpoint's EV events (the control socket's `events` op) every `poll_ms` of
   real time.
2. It **localises** the failed link (with `confirm: probe`, instead of waiting `confirm_us`
   it probes each new failure's EV at once -- MRC's controller EV probe, the endpoints'
   `probe` op -- and counts only the EVs that stay silent for `probe_timeout_us`; an EV that
   answers is cleared, and its round trip's links are taken out of this poll's vote): each EV that went FAILED, and is still FAILED
   `confirm_us` later (its probes went unanswered: a congested path loses a packet, is
   retired, answers its first probe and is GOOD again within that time; a dead one does not),
   names a path -- the switches' own forwarding says which (`testbed.fabric.paths.
   predict_path`; with generated EVs on a source-routed fabric the EV's field *is* the
   uplink). Every link between switches on that path gets a vote from the connection; the link
   voted for by at least `min_votes` connections, and by more than any other, is the failed
   one. Without the confirmation, a run's first deny moved traffic onto the other spines, their
   queues filled, RACK declared losses there, and the controller denied healthy links. A black hole on spine1-leaf2
   fails connections into leaf2 via spine1 from every other leaf (and out of leaf2 via
   spine1): all their paths share that link, and only that one.
3. It **denies** the link on every endpoint, as MRC's deny masks do, before the connections
   that have not hit it yet send into it: hosts on the link's leaf deny, on their connections
   leaving the leaf, the EVs whose uplink field names the link's spine; the other hosts deny
   those EVs on their connections to that leaf's hosts (per-QP denies: `peers`).
4. After `hold_ms` of virtual time it lifts the deny (None: never), so a healed link carries
   traffic again; failures on it would be localised again.

The mask needs generated EVs on a source-routed fabric whose leaves have a power-of-two number
of uplinks per plane (the uplink field is then a bit field). Elsewhere the controller still
localises and reports, but pushes nothing, and says why.

5. At the end (`rtt_map`, on by default) it probes every EV of one connection per host, to a
   host on the next leaf, and reports the per-path RTTs (median per spine and per link, the
   links none of whose probes came back, and those clearly slower than the rest) under
   summary.json's `controller.rtt_us`.

Pure functions (`localise`, `localise_probed`, `rtt_map`, `deny_plan`) and a thread (`EvController`) that the scenario
runner starts after `go` and stops before collecting.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from contracts.clock import Clock
from contracts.defaults import plane_bits
from contracts.ports import ROCEV2_UDP_PORT
from endpoint.control import ControlError, Coordinator
from testbed.fabric.paths import FabricPaths
from testbed.harness.records import Failure
from topologies import Fabric

Link = tuple[str, str]  # two switch names, sorted: a link in both directions


@dataclass
class Verdict:
    link: Link
    votes: int  # connections whose failed EVs crossed it
    runner_up: int  # the most votes any other link had


def plane_of(ev: int, planes: int) -> int:
    """The plane an EV uses (1-based): EV i of a connection is on plane i % planes, and EV
    values keep that in their low bits (generated EVs; consecutive auto EVs from an aligned
    base)."""
    return ev % planes + 1 if planes > 1 else 1


_PATHS: dict[tuple[int, int], tuple[Fabric, FabricPaths]] = {}
_PATHS_KEPT = 8


def _fabric_paths(fab: Fabric, seed: int) -> FabricPaths:
    """The switches' tables of `fab` at `seed`, built once: a controller or a report asks for
    thousands of EVs' paths on the same fabric, and rebuilding every switch's FIB per question
    was most of their time. Keyed by identity (a Fabric is not hashable), a few kept; each
    entry holds its fabric, so an id in the table cannot be reused by another one."""
    key = (id(fab), seed)
    hit = _PATHS.get(key)
    if hit is None:
        if len(_PATHS) >= _PATHS_KEPT:
            _PATHS.pop(next(iter(_PATHS)))
        hit = _PATHS[key] = (fab, FabricPaths(fab, seed))
    return hit[1]


def path_links(fab: Fabric, src: str, dst: str, ev: int, seed: int) -> list[Link]:
    """The links between switches that `src`'s packets on EV `ev` to `dst` cross."""
    nodes = _fabric_paths(fab, seed).path(
        src, dst, ev, ROCEV2_UDP_PORT, plane=plane_of(ev, fab.params.planes)
    )
    switches = [n for n in nodes if fab.nodes[n].kind != "host"]
    return [tuple(sorted(pair)) for pair in zip(switches, switches[1:], strict=False)]  # type: ignore[misc]


def round_trip_links(
    fab: Fabric, f: Failure, seed: int, reply_of: dict[int, int] | None = None
) -> set[Link]:
    """The links a failed EV's round trip crosses: its data's path, and the path of the replies
    (ACKs, probe ACKs), which leave the peer on EV `reply_of[ev]` (the endpoints' paired reply
    EVs, TransportConfig.reply_pairs): a dead reverse path retires an EV as surely as a dead
    forward one."""
    links = set(path_links(fab, f.host, f.peer, f.ev, seed))
    back = (reply_of or {}).get(f.ev, f.ev)
    links.update(path_links(fab, f.peer, f.host, back, seed))
    return links


def localise(
    failures: Iterable[Failure], links_of: Callable[[Failure], set[Link]], min_votes: int = 2
) -> Verdict | None:
    """The link most failed connections' round trips (`links_of`, e.g. round_trip_links)
    crossed, if at least `min_votes` did and no other link has as many; None while the
    evidence is short of that."""
    voters: dict[Link, set[tuple[str, str]]] = {}
    for f in failures:
        for link in links_of(f):
            voters.setdefault(link, set()).add((f.host, f.peer))
    if not voters:
        return None
    ranked = sorted(voters.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    best, votes = ranked[0][0], len(ranked[0][1])
    runner_up = len(ranked[1][1]) if len(ranked) > 1 else 0
    if votes < min_votes or votes == runner_up:
        return None
    return Verdict(best, votes, runner_up)


def probe_votes(
    failures: Iterable[Failure],
    answered: Callable[[Failure], bool | None],
    links_of: Callable[[Failure], set[Link]],
) -> tuple[list[Failure], set[Link]]:
    """Probe-confirmed evidence: the failures whose EV did not answer a controller probe
    (`answered` False; None: not probed yet, no evidence either way), and the links that an
    answered probe's round trip just crossed -- alive now, so not the failed one."""
    confirmed, alive = [], set()
    for f in failures:
        a = answered(f)
        if a is False:
            confirmed.append(f)
        elif a:
            alive |= links_of(f)
    return confirmed, alive


def localise_probed(
    failures: Iterable[Failure],
    answered: Callable[[Failure], bool | None],
    links_of: Callable[[Failure], set[Link]],
    min_votes: int = 2,
) -> Verdict | None:
    """`localise` over the probe-confirmed failures, with the links an answered probe crossed
    taken out of every round trip (a link that carried a probe and its answer is not dead)."""
    confirmed, alive = probe_votes(failures, answered, links_of)
    return localise(confirmed, lambda f: links_of(f) - alive, min_votes)


def _median(xs: list[float]) -> float:
    ys = sorted(xs)
    n = len(ys)
    return ys[n // 2] if n % 2 else (ys[n // 2 - 1] + ys[n // 2]) / 2


SLOW_FACTOR = 1.5
"""A link whose probes are slow throughout -- even its 25th-percentile RTT exceeds the median
over all probes by this factor -- is reported as slow (`rtt_map`: `slow`): a degraded link's
EVs queue behind its lower rate. Not the link's median: the links next to a slow one share
about half of their round trips with it, and their medians rise too."""


def _p25(xs: list[float]) -> float:
    ys = sorted(xs)
    return ys[(len(ys) - 1) // 4]


def rtt_map(
    samples: Iterable[tuple[str, str, int, float | None]], links_of: Callable[..., set[Link]]
) -> dict:
    """Per-path RTTs from controller probes: `samples` are (host, peer, EV, RTT in virtual µs
    or None); `links_of(host, peer, ev)` the links of that EV's round trip. Per spine (the
    spines the round trip crosses) and per link: the median RTT of the answered probes and how
    many went unanswered; `slow` the links whose 25th-percentile RTT exceeds SLOW_FACTOR x the
    median of all answered probes, `dead` those none of whose probes was answered."""
    by_link: dict[Link, list[float | None]] = {}
    all_rtts = []
    n = 0
    for host, peer, ev, rtt in samples:
        n += 1
        if rtt is not None:
            all_rtts.append(rtt)
        for link in links_of(host, peer, ev):
            by_link.setdefault(link, []).append(rtt)

    def summary(rtts: list[float | None]) -> dict:
        ok = [r for r in rtts if r is not None]
        return {
            "median_us": round(_median(ok), 3) if ok else None,
            "p25_us": round(_p25(ok), 3) if ok else None,
            "probes": len(rtts),
            "unanswered": len(rtts) - len(ok),
        }

    by_spine: dict[str, list[float | None]] = {}
    for link, rtts in by_link.items():
        for node in link:
            if node.startswith("spine"):
                by_spine.setdefault(node, []).extend(rtts)
    overall = _median(all_rtts) if all_rtts else None
    links = {f"{a}-{b}": summary(r) for (a, b), r in sorted(by_link.items())}
    return {
        "probes": n,
        "answered": len(all_rtts),
        "median_us": None if overall is None else round(overall, 3),
        "by_spine": {sp: summary(r) for sp, r in sorted(by_spine.items())},
        "by_link": links,
        "slow": sorted(
            k
            for k, v in links.items()
            if overall and v["p25_us"] is not None and v["p25_us"] > SLOW_FACTOR * overall
        ),
        "dead": sorted(k for k, v in links.items() if v["median_us"] is None),
    }


def map_targets(fab: Fabric, hosts: Sequence[str]) -> dict[str, str]:
    """Whom each host probes for the RTT map: a host on the next leaf (of its first plane), so
    every leaf's uplinks carry probes out and every leaf's downlinks carry probes in."""
    leaf_of = {h: _leaf_of(fab, h, 1) for h in hosts}
    leaves = sorted(set(leaf_of.values()))
    out = {}
    for i, h in enumerate(hosts):
        if len(leaves) < 2:
            others = [x for x in hosts if x != h]
        else:
            nxt = leaves[(leaves.index(leaf_of[h]) + 1) % len(leaves)]
            others = [x for x in hosts if leaf_of[x] == nxt]
        if others:
            out[h] = others[i % len(others)]
    return out


@dataclass(frozen=True)
class Deny:
    host: str
    mask: int
    value: int
    peers: tuple[str, ...] | None  # None: every connection of the host


class CannotDeny(ValueError):
    """The link cannot be expressed as a deny mask on this fabric; the message says why."""


def _uplink_value(fab: Fabric, host: str, dst: str, spine: str, plane: int, seed: int) -> int:
    """The EV low bits (uplink field and plane) that take `host`'s packets to `dst` via
    `spine`, found with the switches' own source routing."""
    pb = plane_bits(fab.params.planes)
    for k in range(fab.params.spines):
        ev = 49152 | (k << pb) | (plane - 1)
        nodes = _fabric_paths(fab, seed).path(host, dst, ev, ROCEV2_UDP_PORT, plane=plane)
        if spine in nodes:
            return (k << pb) | (plane - 1)
    raise CannotDeny(f"no EV of {host} reaches {dst} via {spine}")


def deny_plan(
    fab: Fabric, link: Link, seed: int, reply_of: dict[int, int] | None = None
) -> list[Deny]:
    """What each host must deny so that no packet crosses `link` (leaf-spine), in either
    direction: on each connection through the link's leaf, the EVs whose data goes through the
    link's spine (one mask rule), and those whose replies do (`reply_of`: one exact rule per
    EV, since the reply pairing is a shuffle, not a bit pattern)."""
    p = fab.params
    if p.forwarding != "source-routed":
        raise CannotDeny("the fabric hashes EVs (forwarding: ecmp): a mask cannot name a link")
    if p.spines & (p.spines - 1):
        raise CannotDeny(f"{p.spines} uplinks per leaf: not a bit field of the EV")
    a, b = link
    leaf, spine = (a, b) if fab.nodes[a].kind == "leaf" else (b, a)
    if fab.nodes[leaf].kind != "leaf" or fab.nodes[spine].kind != "spine":
        raise CannotDeny(f"{a}-{b} is not a leaf-spine link")
    plane = fab.nodes[leaf].plane or 1
    pb = plane_bits(p.planes)
    mask = ((p.spines - 1) << pb) | ((1 << pb) - 1)
    hosts = fab.hosts()
    on_leaf = sorted(h for h in hosts if _leaf_of(fab, h, plane) == leaf)
    elsewhere = [h for h in hosts if h not in on_leaf]
    out = []
    if not elsewhere:
        return out
    for h, peer, peers in [(h, elsewhere[0], tuple(elsewhere)) for h in on_leaf] + [
        (h, on_leaf[0], tuple(on_leaf)) for h in elsewhere
    ]:
        value = _uplink_value(fab, h, peer, spine, plane, seed)  # data out of h via the spine
        out.append(Deny(h, mask, value, peers))
        back = _uplink_value(fab, peer, h, spine, plane, seed)  # replies into h via the spine
        for ev, reply in sorted((reply_of or {}).items()):
            if reply & mask == back and ev & mask != value:
                out.append(Deny(h, 0xFFFF, ev, peers))
    return out


def _leaf_of(fab: Fabric, host: str, plane: int) -> str:
    for intf in fab.interfaces[host]:
        if (
            fab.nodes[intf.peer_node].kind == "leaf"
            and (fab.nodes[intf.peer_node].plane or 1) == plane
        ):
            return intf.peer_node
    raise ValueError(f"{host} has no leaf on plane {plane}")


@dataclass
class ControllerReport:
    """What the controller saw and did, for summary.json (`controller`)."""

    polls: int = 0
    events: int = 0
    dropped: int = 0
    failures: int = 0
    denies: list[dict] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    confirm: str = "wait"
    probes: int = 0  # confirmation probes sent (confirm: probe)
    probes_unanswered: int = 0
    rtt_us: dict | None = None  # the RTT map taken at the end (rtt_map)

    def as_dict(self) -> dict:
        out = {
            "polls": self.polls,
            "events": self.events,
            "dropped": self.dropped,
            "failures": self.failures,
            "denies": self.denies,
            "errors": self.errors,
            "confirm": self.confirm,
        }
        if self.confirm == "probe":
            out["probes"] = self.probes
            out["probes_unanswered"] = self.probes_unanswered
        if self.rtt_us is not None:
            out["rtt_us"] = self.rtt_us
        return out


class EvController(threading.Thread):
    """The controller as a thread of the runner, talking to every endpoint's control socket."""

    def __init__(
        self,
        sockets: dict[str, str],
        fab: Fabric,
        seed: int,
        clock: Clock,
        t0: float,
        min_votes: int = 2,
        poll_ms: float = 2.0,
        hold_ms: float | None = None,
        confirm_us: float = 50.0,
        reply_of: dict[int, int] | None = None,
        confirm: str = "wait",
        probe_timeout_us: float = 50.0,
        rtt_map: bool = True,
    ) -> None:
        super().__init__(name="ev-controller", daemon=True)
        self.coordinator = Coordinator(sockets, timeout=10.0)
        self.fab = fab
        self.seed = seed
        self.clock = clock
        self.t0 = t0
        self.min_votes = min_votes
        self.poll_s = poll_ms / 1000.0
        self.hold_s = None if hold_ms is None else hold_ms / 1000.0
        self.stop_flag = threading.Event()
        self.report = ControllerReport()
        self.confirm_s = confirm_us / 1e6
        self.reply_of = reply_of
        if confirm not in ("wait", "probe"):
            raise ValueError(f"confirm: expected wait or probe, got {confirm!r}")
        self.confirm = confirm
        self.report.confirm = confirm
        self.probe_timeout_us = probe_timeout_us
        self.want_rtt_map = rtt_map
        # confirm: probe -- each failure's probe answer (True / False), by the Failure itself:
        # an EV that fails again is a new Failure and is probed again
        self._answered: dict[Failure, bool] = {}
        self._unprobed: set[Failure] = set()  # their probe request failed
        # (host, peer, EV) -> the latest transition to FAILED, while the EV stays FAILED
        self._failed_now: dict[tuple[str, str, int], Failure] = {}
        self._active: list[tuple[list[Deny], float, Link]] = []  # pushed, until (virtual)
        self._denied: set[Link] = set()
        # Each failure's round trip, worked out once: the controller is a thread of the runner,
        # and every poll looks at every EV still FAILED, on the machine the emulation runs on.
        self._links: dict[tuple[str, str, int], set[Link]] = {}

    def run(self) -> None:
        try:
            while not self.stop_flag.is_set():
                self.poll()
                self.stop_flag.wait(self.poll_s)
        finally:
            if not self.want_rtt_map:
                self.coordinator.close()  # else stop() closes it, after the map

    def poll(self) -> None:
        rep = self.report
        try:
            replies = self.coordinator.events()
        except (ControlError, OSError) as exc:
            rep.errors.append(f"events: {exc}")
            return
        rep.polls += 1
        now = self.clock.now()
        for host, r in replies.items():
            rep.events += len(r["events"])
            rep.dropped += r.get("dropped", 0)
            for e in r["events"]:
                key = (host, e["peer"], e["ev"])
                if e["new"] == "failed":
                    self._failed_now[key] = Failure(host, e["peer"], e["ev"], e["t"])
                    rep.failures += 1
                else:
                    self._failed_now.pop(key, None)  # re-admitted (or denied): not evidence
        self._lift_expired(now)
        if self.confirm == "probe":
            fresh = [f for f in self._failed_now.values() if not self._explained(f)]
            new = {f for f in fresh if f not in self._answered and f not in self._unprobed}
            self._probe_failures(sorted(new, key=lambda f: (f.host, f.peer, f.ev, f.t)))

            def answered(f: Failure) -> bool | None:
                # silence confirms for good; an answer vouches for its links only now
                a = self._answered.get(f)
                return a if a is False or f in new else None

            verdict = localise_probed(fresh, answered, self._round_trip, self.min_votes)
            for f in new:
                if self._answered.get(f):  # alive: no longer evidence (as if re-admitted)
                    self._failed_now.pop((f.host, f.peer, f.ev), None)
            now = self.clock.now()
        else:
            fresh = [
                f
                for f in self._failed_now.values()
                if now - f.t >= self.confirm_s and not self._explained(f)
            ]
            verdict = localise(fresh, self._round_trip, self.min_votes)
        if verdict is None or verdict.link in self._denied:
            return
        self._push(verdict, fresh, now)

    def _probe_failures(self, todo: list[Failure]) -> None:
        """Probe the EVs of the new failures, every host at once, one peer per host (a
        control connection answers in order); an answer clears a failure, silence confirms it.
        One round per poll: a round with a dead EV lasts the whole timeout, and the events
        must keep being read meanwhile -- the other peers' failures wait for the next poll."""
        groups: dict[tuple[str, str], list[Failure]] = {}
        for f in todo:
            groups.setdefault((f.host, f.peer), []).append(f)
        if groups:
            batch: dict[str, tuple[str, list[Failure]]] = {}
            for (host, peer), fs in list(groups.items()):
                if host not in batch:
                    batch[host] = (peer, fs)
                    del groups[(host, peer)]
            try:
                replies = self.coordinator.probe(
                    {h: (p, sorted({f.ev for f in fs})) for h, (p, fs) in batch.items()},
                    self.probe_timeout_us,
                    self.clock.dilation,
                )
            except (ControlError, OSError) as exc:
                # no evidence either way, and not asked again (an error per poll would pile up)
                self.report.errors.append(f"probe: {exc}")
                for _, fs in batch.values():
                    self._unprobed.update(fs)
                return
            for host, (_, fs) in batch.items():
                rtt = {r["ev"]: r["rtt_us"] for r in replies[host]["probes"]}
                for f in fs:
                    ok = rtt.get(f.ev) is not None
                    self._answered[f] = ok
                    self.report.probes += 1
                    self.report.probes_unanswered += not ok
        if len(self._answered) > 100_000:  # a long run's stale answers
            live = set(self._failed_now.values())
            self._answered = {f: a for f, a in self._answered.items() if f in live}
            self._unprobed &= live

    def take_rtt_map(self) -> dict | None:
        """Probe every EV of one connection per host (to a host on the next leaf) and report
        the per-path RTTs (`rtt_map`); None (and an error noted) if the endpoints did not
        answer."""
        targets = map_targets(self.fab, sorted(self.coordinator.clients))
        if not targets:
            return None
        try:
            replies = self.coordinator.probe(
                {h: (p, None) for h, p in targets.items()},
                self.probe_timeout_us,
                self.clock.dilation,
            )
        except (ControlError, OSError) as exc:
            self.report.errors.append(f"rtt map: {exc}")
            return None
        samples = [
            (h, targets[h], r["ev"], r["rtt_us"]) for h, rep in replies.items()
            for r in rep["probes"]
        ]  # fmt: skip

        def links_of(host: str, peer: str, ev: int) -> set[Link]:
            return self._round_trip(Failure(host, peer, ev, 0.0))

        out = rtt_map(samples, links_of)
        out["timeout_us"] = self.probe_timeout_us
        out["pairs"] = dict(sorted(targets.items()))
        return out

    def _explained(self, f: Failure) -> bool:
        """A failure on a link already denied needs no second verdict."""
        return bool(self._denied & self._round_trip(f))

    def _round_trip(self, f: Failure) -> set[Link]:
        key = (f.host, f.peer, f.ev)
        links = self._links.get(key)
        if links is None:
            links = self._links[key] = round_trip_links(self.fab, f, self.seed, self.reply_of)
        return links

    def _push(self, verdict: Verdict, evidence: Sequence[Failure], now: float) -> None:
        rep = self.report
        link = verdict.link
        record = {
            "link": f"{link[0]}-{link[1]}",
            "votes": verdict.votes,
            "runner_up": verdict.runner_up,
            "first_failure_s": round(min(f.t for f in evidence) - self.t0, 6),
            "decided_s": round(now - self.t0, 6),
        }
        try:
            plan = deny_plan(self.fab, link, self.seed, self.reply_of)
        except CannotDeny as exc:
            record["pushed"] = False
            record["why_not"] = str(exc)
            rep.denies.append(record)
            self._denied.add(link)  # reported once
            return
        refused = []
        for d in plan:
            try:
                self.coordinator.deny(d.mask, d.value, hosts=[d.host], peers=d.peers)
            except (ControlError, OSError) as exc:
                refused.append(str(exc))
        record["pushed"] = True
        record["denied_s"] = round(self.clock.now() - self.t0, 6)
        record["rules"] = len(plan) - len(refused)
        record["hosts"] = len({d.host for d in plan})
        if refused:
            record["refused"] = refused
        rep.denies.append(record)
        self._denied.add(link)
        until = float("inf") if self.hold_s is None else self.clock.now() + self.hold_s
        self._active.append((plan, until, link))

    def _lift_expired(self, now: float) -> None:
        keep = []
        for plan, until, link in self._active:
            if now < until:
                keep.append((plan, until, link))
                continue
            for d in plan:
                try:
                    self.coordinator.allow(d.mask, d.value, hosts=[d.host], peers=d.peers)
                except (ControlError, OSError) as exc:
                    self.report.errors.append(f"allow: {exc}")
            self._denied.discard(link)
            self._failed_now = {k: f for k, f in self._failed_now.items() if f.t >= until}
            for rec in self.report.denies:
                if rec["link"] == f"{link[0]}-{link[1]}" and "lifted_s" not in rec:
                    rec["lifted_s"] = round(now - self.t0, 6)
        self._active = keep

    def stop(self) -> ControllerReport:
        """Stop polling; with `rtt_map`, probe the paths once more for the report (the
        endpoints are still up: the runner stops the controller before collecting)."""
        self.stop_flag.set()
        self.join(10)
        if self.want_rtt_map:
            try:
                self.report.rtt_us = self.take_rtt_map()
            finally:
                self.coordinator.close()
        return self.report


__all__ = [
    "EvController",
    "Failure",
    "deny_plan",
    "localise",
    "localise_probed",
    "map_targets",
    "path_links",
    "probe_votes",
    "rtt_map",
]

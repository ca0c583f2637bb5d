"""The fabric controller (testbed/harness/ev_controller.py): from FAILED EVs to the failed link,
and from the link to the deny masks each host needs -- checked against the switches' own
forwarding."""

from __future__ import annotations

import pytest

from endpoint.config import TransportConfig
from testbed.fabric.paths import predict_path
from testbed.harness.ev_controller import (
    CannotDeny,
    Failure,
    deny_plan,
    localise,
    map_targets,
    path_links,
    probe_votes,
    round_trip_links,
    rtt_map,
)
from topologies import leaf_spine

SR = leaf_spine(spines=4, leaves=4, hosts_per_leaf=2, forwarding="source-routed")
SEED = 1


def generated_evs(n: int = 64, planes: int = 1) -> list[int]:
    return TransportConfig(num_evs=n, planes=planes, ev_profile="generated").ev_values()


def failures_through(fab, link, hosts=None) -> list[Failure]:
    """Every (host, peer, EV) whose data path crosses `link`: what a black hole there fails."""
    out = []
    for h in hosts or fab.hosts():
        for d in fab.hosts():
            if d == h:
                continue
            for ev in generated_evs():
                if tuple(sorted(link)) in path_links(fab, h, d, ev, SEED):
                    out.append(Failure(h, d, ev, 0.001))
    return out


def links(f: Failure) -> set:
    """A failure's data path only (the controller adds the replies' path: round_trip_links)."""
    return set(path_links(SR, f.host, f.peer, f.ev, SEED))


def test_path_links_follow_the_source_route():
    ev = generated_evs()[2]  # uplink 3 at the source leaf
    assert path_links(SR, "h1", "h3", ev, SEED) == [("leaf1", "spine3"), ("leaf2", "spine3")]
    assert path_links(SR, "h1", "h2", ev, SEED) == []  # one leaf: no link between switches


def test_a_black_hole_is_localised_from_a_few_connections():
    link = ("leaf2", "spine1")
    fails = failures_through(SR, link)
    pick = {("h1", "h3"), ("h5", "h4"), ("h7", "h3")}  # into leaf2 from three leaves
    few = list({(f.host, f.peer): f for f in fails if (f.host, f.peer) in pick}.values())
    v = localise(few, links, min_votes=2)
    assert v is not None and v.link == link and v.votes == 3 and v.runner_up == 1
    # From one leaf only, the leaf's uplink to spine1 is as suspect as spine1's downlink.
    same_leaf = [f for f in fails if f.host in ("h1", "h2") and f.peer in ("h3", "h4")]
    assert localise(same_leaf, links) is None


def test_one_connection_is_not_enough_evidence():
    (f,) = failures_through(SR, ("leaf2", "spine1"), hosts=["h1"])[:1]
    assert localise([f], links, min_votes=2) is None  # its two links tie, one vote each
    assert localise([], links) is None


PAIRS = TransportConfig(num_evs=64, ev_profile="generated").reply_pairs()


def test_the_deny_plan_stops_every_round_trip_across_the_link_and_no_other():
    link = ("leaf2", "spine1")
    plan = deny_plan(SR, link, SEED, PAIRS)
    by_host: dict[str, list] = {}
    for d in plan:
        by_host.setdefault(d.host, []).append(d)
    assert set(by_host) == set(SR.hosts())
    assert by_host["h3"][0].peers == ("h1", "h2", "h5", "h6", "h7", "h8")  # leaving leaf2
    assert by_host["h1"][0].peers == ("h3", "h4")  # elsewhere: only towards leaf2's hosts
    for h in SR.hosts():
        for peer in SR.hosts():
            if peer == h:
                continue
            for ev in generated_evs():
                denied = any(
                    (d.peers is None or peer in d.peers) and ev & d.mask == d.value
                    for d in by_host[h]
                )
                crosses = link in round_trip_links(SR, Failure(h, peer, ev, 0.0), SEED, PAIRS)
                assert denied == crosses, (h, peer, ev)
    # A deny leaves each connection through leaf2 EVs to use: 16 of 64 go through spine1 one
    # way, about as many more come back through it.
    left = [ev for ev in generated_evs() if not any(ev & d.mask == d.value for d in by_host["h1"])]
    assert 24 <= len(left) <= 40


def test_a_link_that_a_mask_cannot_name_is_refused_with_the_reason():
    hashed = leaf_spine(spines=4, leaves=2, hosts_per_leaf=1)
    with pytest.raises(CannotDeny, match="hashes EVs"):
        deny_plan(hashed, ("leaf1", "spine1"), SEED)
    three = leaf_spine(spines=3, leaves=2, hosts_per_leaf=1, forwarding="source-routed")
    with pytest.raises(CannotDeny, match="3 uplinks per leaf"):
        deny_plan(three, ("leaf1", "spine1"), SEED)


def test_two_planes_deny_only_the_links_plane():
    fab = leaf_spine(spines=2, leaves=2, hosts_per_leaf=1, planes=2, forwarding="source-routed")
    plan = {d.host: d for d in deny_plan(fab, ("leaf2p2", "spine1p2"), SEED)}
    for h, d in plan.items():
        for ev in TransportConfig(num_evs=16, planes=2, ev_profile="generated").ev_values():
            plane = ev % 2 + 1
            peer = "h2" if h == "h1" else "h1"
            nodes = predict_path(fab, h, peer, ev, 4791, plane=plane, seed=SEED)
            assert (ev & d.mask == d.value) == ("spine1p2" in nodes), (h, ev)


CONTROLLED = """
name: controller-check
topology: {spines: 2, leaves: 3, hosts_per_leaf: 1, link_mbps: 10000, delay_us: 1, queue_kb: 12,
           forwarding: source-routed}
transport: [mrc]
workload: {kind: alltoall, bytes: 400KB}
duration_s: 0.02
controller: {enabled: true, min_votes: 2}
seed: 1
events:
  - {at: 0.0003, action: blackhole, link: [spine1, leaf2]}
expect: {delivered_all: true}
"""


@pytest.mark.netns
def test_a_scenario_with_the_controller_denies_the_black_holed_link(tmp_path):
    """On a running fabric: the runner's controller reads the endpoints' EV events, names the
    black-holed link and denies it on every host, and summary.json says when."""
    import json

    from tests.conftest import tb

    path = tmp_path / "controller-check.yaml"
    path.write_text(CONTROLLED)
    out = tmp_path / "out"
    run = tb("run", str(path), "--out", str(out), "--allow-invalid", check=False, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    entry = json.loads((out / "summary.json").read_text())["transports"]["mrc"]
    ctl = entry["controller"]
    assert ctl["polls"] > 0 and ctl["failures"] > 0 and ctl["dropped"] == 0
    first = ctl["denies"][0]
    assert first["link"] == "leaf2-spine1" and first["pushed"] and first["hosts"] == 3
    assert "refused" not in first
    assert 0 < first["failure_to_deny_s"] < 0.01
    assert all(d["link"] == "leaf2-spine1" for d in ctl["denies"])  # no healthy link denied


# ----- controller EV probes: confirmation by probe, the RTT map -------------------------------

DEAD = ("leaf2", "spine1")


class FakeClock:
    dilation = 1.0

    def __init__(self) -> None:
        self.t = 0.01

    def now(self) -> float:
        return self.t


class FakeEndpoints:
    """The control sockets of every host of SR, answered from a model of the fabric: a probe
    on an EV whose round trip crosses a dead link is not answered, the others answer with
    10 µs plus 30 per slow link crossed."""

    def __init__(self, dead=(DEAD,), slow=()) -> None:
        self.clients = dict.fromkeys(SR.hosts(), None)
        self.dead, self.slow = set(dead), set(slow)
        self.pending: dict[str, list[dict]] = {h: [] for h in self.clients}
        self.probed: list[tuple[str, str, int]] = []
        self.denied: list[tuple[str, int, int]] = []

    def links(self, host: str, peer: str, ev: int) -> set:
        return round_trip_links(SR, Failure(host, peer, ev, 0.0), SEED, PAIRS)

    def fail(self, host: str, peer: str, ev: int, t: float = 0.001) -> None:
        self.pending[host].append(
            {"t": t, "qp": 1, "peer": peer, "ev": ev, "old": "good", "new": "failed",
             "reason": "loss"}
        )  # fmt: skip

    def events(self, hosts=None) -> dict:
        out = {h: {"events": ev, "dropped": 0} for h, ev in self.pending.items()}
        self.pending = {h: [] for h in self.clients}
        return out

    def probe(self, targets, timeout_us, dilation=1.0) -> dict:
        out = {}
        for host, (peer, evs) in targets.items():
            res = []
            for ev in evs if evs is not None else generated_evs():
                self.probed.append((host, peer, ev))
                links = self.links(host, peer, ev)
                rtt = None if links & self.dead else 10.0 + 30.0 * len(links & self.slow)
                res.append({"ev": ev, "rtt_us": rtt})
            out[host] = {"probes": res}
        return out

    def deny(self, mask, value, hosts=None, peers=None) -> dict:
        self.denied += [(h, mask, value) for h in hosts]
        return {}

    def allow(self, *a, **k) -> dict:
        return {}

    def close(self) -> None:
        pass


def _controller(fake: FakeEndpoints, **kw):
    from testbed.harness.ev_controller import EvController

    ctl = EvController({}, SR, SEED, FakeClock(), 0.0, reply_of=PAIRS, **kw)  # type: ignore[arg-type]
    ctl.coordinator = fake  # type: ignore[assignment]
    return ctl


def _congested_and_dead(fake: FakeEndpoints) -> None:
    """Three connections lose an EV through the dead link; four lose (to congestion) an EV
    through leaf1-spine2 and are still FAILED when the controller looks."""

    def through(h: str, p: str, link) -> int:
        """An EV whose round trip crosses `link` both ways (replies on the same spine)."""
        evs = [e for e in generated_evs() if link in fake.links(h, p, e)]
        return min(evs, key=lambda e: len(fake.links(h, p, e)))

    for h, p in [("h1", "h3"), ("h5", "h3"), ("h7", "h4")]:
        fake.fail(h, p, through(h, p, DEAD))
    for h, p in [("h1", "h5"), ("h2", "h7"), ("h1", "h8"), ("h2", "h6")]:
        fake.fail(h, p, through(h, p, ("leaf1", "spine2")))


def test_probe_confirmation_clears_congested_evs_and_finds_the_dead_link():
    """Waiting cannot tell a congested EV still FAILED from a dead one: with four congested
    connections on leaf1-spine2 it denies that healthy link. Probing clears them (they answer)
    and the three silent ones name the dead link."""
    waiting = FakeEndpoints()
    _congested_and_dead(waiting)
    w = _controller(waiting, confirm="wait", confirm_us=0.0)
    w.poll()
    assert [d["link"] for d in w.report.denies] == ["leaf1-spine2"]  # the wrong one

    probing = FakeEndpoints()
    _congested_and_dead(probing)
    p = _controller(probing, confirm="probe")
    p.poll()  # one peer per host per poll: h1 -> h3, h2 -> h6, h5 -> h3, h7 -> h4
    assert len(probing.probed) == 4
    assert [d["link"] for d in p.report.denies] == ["leaf2-spine1"]
    p.poll()
    p.poll()  # h1's and h2's other peers
    assert p.report.probes == 7 and p.report.probes_unanswered == 3
    assert p.report.as_dict()["confirm"] == "probe"
    assert len(probing.probed) == 7  # only the failed EVs, each once
    p.poll()  # nothing new: no more probes, no second deny
    assert len(probing.probed) == 7 and len(p.report.denies) == 1


def test_probe_votes_split_silent_from_answered():
    fs = [Failure("h1", "h3", 1, 0.0), Failure("h1", "h3", 2, 0.0), Failure("h5", "h3", 3, 0.0)]
    answers = {fs[0]: False, fs[1]: True}
    confirmed, alive = probe_votes(fs, answers.get, lambda f: {("a", str(f.ev))})
    assert confirmed == [fs[0]] and alive == {("a", "2")}  # fs[2] not probed: no evidence


def test_the_rtt_map_shows_a_slow_and_a_dead_link():
    fake = FakeEndpoints(dead=[("leaf1", "spine4")], slow=[("leaf3", "spine2")])
    ctl = _controller(fake)
    m = ctl.take_rtt_map()
    assert m is not None
    targets = m["pairs"]
    assert targets == map_targets(SR, SR.hosts()) and len(targets) == 8
    assert all(SR_LEAF[targets[h]] != SR_LEAF[h] for h in targets)
    assert m["probes"] == 8 * 64 == len(fake.probed)
    assert m["slow"] == ["leaf3-spine2"]
    assert m["by_link"]["leaf3-spine2"]["median_us"] == 40.0
    assert m["dead"] == ["leaf1-spine4"]
    assert m["by_link"]["leaf1-spine4"]["unanswered"] == m["by_link"]["leaf1-spine4"]["probes"]
    assert m["by_spine"]["spine1"]["median_us"] == 10.0
    assert set(m["by_spine"]) == {"spine1", "spine2", "spine3", "spine4"}


def test_rtt_map_of_nothing_answered_has_no_medians():
    m = rtt_map([("h1", "h3", 5, None)], lambda h, p, e: {("leaf1", "spine1")})
    assert m["median_us"] is None and m["dead"] == ["leaf1-spine1"] and m["slow"] == []


SR_LEAF = {h: next(i.peer_node for i in SR.interfaces[h]) for h in SR.hosts()}

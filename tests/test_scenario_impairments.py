"""The scenario side of stochastic failures: the `impair` event, `random_failures`, their
validation (every mistake, named by key path) and the pure event generator."""

from __future__ import annotations

import copy
import statistics

import pytest
import yaml

from testbed.fabric import failures
from testbed.scenario import validate
from testbed.scenario.random_failures import RandomFailureSpec, failure_events
from testbed.scenario.schema import scenario_json_schema
from testbed.scenario.validation import ScenarioError
from topologies import leaf_spine

BASE = yaml.safe_load(
    """
name: t
topology: {spines: 2, leaves: 2, hosts_per_leaf: 1}
workload: {kind: bulk, src: h1, dst: h2, bytes: 1MB}
duration_s: 10
seed: 3
"""
)


def scenario(**extra):
    return validate(copy.deepcopy(BASE) | extra)


def errors(**extra) -> list[str]:
    with pytest.raises(ScenarioError) as info:
        scenario(**extra)
    return [f"{i.path}: {i.reason}" for i in info.value.issues]


IMPAIR = {
    "at": 1,
    "action": "impair",
    "link": ["leaf1", "spine1"],
    "gilbert_elliott": {"p": 1, "r": 25},
    "jitter_us": 5,
}


def test_impair_plans_one_seeded_request_per_direction() -> None:
    sc = scenario(events=[IMPAIR])
    (e,) = sc.events
    assert e.is_failure and "GE p=1% r=25%" in e.describe()
    fab = sc.fabric()
    p = failures.plan(fab, **e.plan_kwargs(), seed=sc.seed)
    assert [s.switch for s in p.steps] == ["leaf1", "spine1"]
    seeds = {s.request["impair"]["seed"] for s in p.steps}
    assert len(seeds) == 2  # each direction its own RNG
    again = failures.plan(fab, **e.plan_kwargs(), seed=sc.seed)
    assert [s.request for s in again.steps] == [s.request for s in p.steps]
    other = failures.plan(fab, **e.plan_kwargs(), seed=sc.seed + 1)
    assert {s.request["impair"]["seed"] for s in other.steps}.isdisjoint(seeds)
    assert p.steps[0].request["impair"]["gilbert_elliott"] == {
        "p": 1.0,
        "r": 25.0,
        "loss_good": 0.0,
        "loss_bad": 100.0,
    }


def test_drop_every_is_a_failure_and_reaches_the_switch_request() -> None:
    e = {"at": 1, "action": "impair", "link": ["leaf1", "spine1"], "drop_every": 10}
    (ev,) = scenario(events=[e]).events
    assert ev.is_failure and "drop every 10th" in ev.describe()
    p = failures.plan(scenario(events=[e]).fabric(), **ev.plan_kwargs(), seed=3)
    assert {s.request["impair"]["drop_every"] for s in p.steps} == {10}
    assert any("drop_every" in m for m in errors(events=[{**e, "drop_every": -2}]))


def test_jitter_alone_is_not_a_failure_and_heal_clears_it_on_the_switch() -> None:
    sc = scenario(
        events=[{"at": 1, "action": "impair", "link": ["leaf1", "spine1"], "jitter_us": 5}]
    )
    assert not sc.events[0].is_failure
    heal = failures.plan(sc.fabric(), "heal", link=("leaf1", "spine1"))
    assert all(s.request.get("heal") for s in heal.steps)  # Port.heal drops the impairment


def test_impair_mistakes_are_all_reported_by_key() -> None:
    bad = [
        {**IMPAIR, "jitter_us": -1},
        {**IMPAIR, "gilbert_elliott": {"p": 120}},
        {**IMPAIR, "reorder_percent": 5},
        {"at": 1, "action": "impair", "link": ["leaf1", "spine1"]},
        {**IMPAIR, "jiter_us": 3},
    ]
    errs = errors(events=bad)
    text = "\n".join(errs)
    assert "events[0].jitter_us" in text
    assert "events[1].gilbert_elliott.p" in text
    assert "reorder_delay_us: must be > 0" in text
    assert "names no impairment" in text
    assert "events[4].jiter_us" in text and "jitter_us" in text  # did-you-mean
    assert len(errs) == 5
    # Meaning (checked once the shape is right): a host cannot impair what it sends.
    errs = errors(events=[{**IMPAIR, "link": ["h1", "leaf1"]}, {**IMPAIR, "at": 11}])
    assert errs[0].startswith("events[0].direction: h1 is a host")
    assert errs[1].startswith("events[1].at")
    scenario(events=[{**IMPAIR, "link": ["h1", "leaf1"], "direction": ["leaf1", "h1"]}])


def test_random_failures_are_drawn_into_the_timeline_reproducibly() -> None:
    rf = [
        {"links": "spine-leaf", "mtbf_s": 3, "mttr_s": 0.5},
        {"switches": ["spine2"], "mtbf_s": 4, "mttr_s": 1, "distribution": "fixed"},
    ]
    a, b = scenario(random_failures=rf), scenario(random_failures=rf)
    ta = [(e.at, e.describe()) for e in a.timeline()]
    assert ta == [(e.at, e.describe()) for e in b.timeline()]
    assert ta != [
        (e.at, e.describe()) for e in validate(BASE | {"seed": 4, "random_failures": rf}).timeline()
    ]
    assert ta == sorted(ta, key=lambda x: x[0])
    # Per link: down, up, down, up ... alternating, every event before the end.
    for link in (["leaf1", "spine1"], ["leaf2", "spine2"]):
        acts = [e.action for e in a.timeline() if getattr(e, "link", None) == link]
        assert acts and all(x == ("link-down", "link-up")[k % 2] for k, x in enumerate(acts))
    assert all(0 <= e.at < 10 for e in a.timeline())
    # fixed: exactly mtbf apart after a random phase, mttr down.
    downs = [e.at for e in a.timeline() if e.action == "switch-down"]
    ups = [e.at for e in a.timeline() if e.action == "switch-up"]
    assert downs and all(u - d == pytest.approx(1.0) for d, u in zip(downs, ups, strict=False))
    assert all(d2 - d1 == pytest.approx(5.0) for d1, d2 in zip(downs, downs[1:], strict=False))


def test_exponential_up_and_down_times_have_the_given_means() -> None:
    fab = leaf_spine(spines=4, leaves=4, hosts_per_leaf=1)
    spec = RandomFailureSpec(links="spine-leaf", mtbf_s=2.0, mttr_s=0.25, action="blackhole")
    events = failure_events(fab, [spec], seed=9, duration_s=2000.0)
    ups, downs = [], []
    for a, b in [(lk.a, lk.b) for lk in fab.links if "spine" in lk.a + lk.b and "h" not in lk.a]:
        mine = [e for e in events if e["link"] == [a, b]]
        assert [e["action"] for e in mine[:2]] == ["blackhole", "heal"]
        t = [e["at"] for e in mine]
        downs += [t[k + 1] - t[k] for k in range(0, len(t) - 1, 2)]
        ups += [t[k + 1] - t[k] for k in range(1, len(t) - 1, 2)]
    assert statistics.mean(ups) == pytest.approx(2.0, rel=0.1)
    assert statistics.mean(downs) == pytest.approx(0.25, rel=0.1)


def test_random_failure_mistakes_are_all_reported_by_key() -> None:
    errs = errors(
        random_failures=[
            {"links": [["leaf1", "spine9"], ["leaf1", "leaf2"]], "mtbf_s": 1, "mttr_s": 1},
            {"switches": ["h1"], "mtbf_s": 1, "mttr_s": 1},
            {"planes": [3], "mtbf_s": 1, "mttr_s": 1, "from_s": 20},
        ]
    )
    shape = errors(
        random_failures=[
            {"links": "all", "switches": "all", "mtbf_s": 1, "mttr_s": 1},
            {"links": "spine-leaf", "mtbf_s": 0, "mttr_s": 1},
            {"links": "spine-leaf", "mtbf_s": 1, "mttr_s": 1, "action": "switch-down"},
            {"links": "spine-leaf", "mtbf_s": 1, "mttr_s": 1, "from_s": 5, "until_s": 2},
        ]
    )
    text = "\n".join(errs + shape)
    assert "random_failures[0].links[0]: no node named spine9" in text
    assert "random_failures[0].links[1]: leaf1 and leaf2 are not adjacent" in text
    assert "random_failures[1].switches[0]: h1 is a host" in text
    assert "random_failures[2].planes[0]: no plane 3" in text
    assert "random_failures[2].from_s" in text
    assert "random_failures[0]" in shape[0] and "exactly one of links, switches, planes" in text
    assert "random_failures[1].mtbf_s" in text
    assert "action: switch-down does not fail links" in text
    assert "until_s: 2 is not after from_s 5" in text
    assert len(errs) == 5 and len(shape) == 4


def test_a_link_in_two_failure_processes_is_refused() -> None:
    errs = errors(
        random_failures=[
            {"links": "spine-leaf", "mtbf_s": 1, "mttr_s": 1},
            {"links": [["spine1", "leaf1"]], "mtbf_s": 1, "mttr_s": 1},
        ]
    )
    assert any("random_failures[1]" in e and "already failed at random" in e for e in errs)


def test_max_failover_ms_accepts_drawn_failures() -> None:
    rf = [{"links": "spine-leaf", "mtbf_s": 3, "mttr_s": 0.5}]
    scenario(random_failures=rf, expect={"max_failover_ms": 100})


def test_json_schema_covers_impair_and_random_failures() -> None:
    schema = scenario_json_schema()
    text = str(schema)
    assert "random_failures" in schema["properties"]
    for key in ("gilbert_elliott", "jitter_reorder", "corrupt_percent", "mtbf_s", "distribution"):
        assert key in text


def test_ctl_words_of_impair() -> None:
    req = failures.ctl_request("impair", ["leaf1", "spine1", "jitter_us=20", "ge=1,25"])
    assert req["impair"] == {"jitter_us": 20.0, "gilbert_elliott": {"p": 1.0, "r": 25.0}}
    with pytest.raises(failures.FailureError, match="unknown 'jitter'"):
        failures.ctl_request("impair", ["leaf1", "spine1", "jitter=20"])

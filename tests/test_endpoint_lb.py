"""Load-balancing policies of a connection's EVs (endpoint.ev, TransportConfig.lb): wrr,
oblivious, REPS -- what each picks, given what the ACKs said."""

from __future__ import annotations

from collections import Counter

import pytest

from endpoint.config import LB_POLICIES, TransportConfig
from endpoint.ev import EVSet, EVState


def evset(lb: str, n: int = 16, **kw) -> tuple[EVSet, list[int]]:
    cfg = TransportConfig(num_evs=n, lb=lb, **kw)
    return EVSet(cfg), cfg.ev_values()


def test_policies_and_a_bad_name():
    assert LB_POLICIES == ("wrr", "oblivious", "reps")
    with pytest.raises(ValueError, match="^lb: one of wrr, oblivious, reps, got 'ecmp'"):
        TransportConfig(lb="ecmp")
    with pytest.raises(ValueError, match="reps_buffer"):
        TransportConfig(lb="reps", reps_buffer=0)


def test_reps_sends_the_next_packet_on_the_oldest_ev_that_came_back_clean():
    evs, ev = evset("reps")
    for e in (ev[3], ev[7], ev[5]):
        evs.on_clean_ack(e, 1.0)
    assert [evs.pick().ev for _ in range(3)] == [ev[3], ev[7], ev[5]]
    assert evs.lb_counts["recycled"] == 3
    evs.pick()  # nothing left to recycle: a random EV explores
    assert evs.lb_counts["explored"] == 1


def test_reps_never_recycles_an_ev_whose_ack_carried_ecn_or_that_was_trimmed():
    evs, ev = evset("reps")
    evs.on_clean_ack(ev[1], 1.0)
    evs.on_congestion(ev[2], 1.0, "ecn")
    evs.on_congestion(ev[4], 1.0, "trim")
    evs.on_clean_ack(ev[6], 1.0)
    assert [p.ev for p in evs.reps_buffer] == [ev[1], ev[6]]


def test_reps_keeps_its_newest_evs_when_the_buffer_is_full():
    evs, ev = evset("reps", reps_buffer=4)
    for e in ev[:6]:
        evs.on_clean_ack(e, 1.0)
    assert [p.ev for p in evs.reps_buffer] == ev[2:6]


def test_reps_skips_recycled_evs_that_failed_or_were_denied_since():
    evs, ev = evset("reps")
    for e in ev[:4]:
        evs.on_clean_ack(e, 1.0)
    evs.retire(ev[0], 1.1, next_probe_seq=1)
    evs.deny(0xFFFF, ev[1], 1.1)
    assert evs.pick().ev == ev[2]
    assert evs.pick(exclude=ev[3]).ev != ev[3]  # a resend avoids the EV it was lost on


def test_reps_freezes_on_a_timeout_then_forgets_and_explores():
    evs, ev = evset("reps", reps_explore=5)
    for e in (ev[8], ev[9]):
        evs.on_clean_ack(e, 1.0)
    evs.on_timeout(2.0, duration=0.5)
    # Frozen: the buffer's EVs again and again, not used up.
    assert [evs.pick().ev for _ in range(6)] == [ev[8], ev[9]] * 3
    evs.on_clean_ack(ev[10], 2.1)  # a good EV found while frozen joins the cycle
    assert {evs.pick().ev for _ in range(6)} == {ev[8], ev[9], ev[10]}
    evs.on_clean_ack(ev[11], 2.6)  # the freeze is over: forget, explore 5 packets at random
    assert (
        not evs.reps_frozen
        and evs.reps_explore == 5
        and list(evs.reps_buffer) == [evs.by_ev[ev[11]]]
    )
    explored = evs.lb_counts["explored"]
    for _ in range(5):
        evs.pick()
    assert evs.lb_counts["explored"] == explored + 5
    assert evs.pick().ev == ev[11]  # recycling again


def test_only_reps_freezes():
    evs, ev = evset("wrr")
    evs.on_clean_ack(ev[0], 1.0)
    evs.on_timeout(1.0, 0.5)
    assert not evs.reps_frozen and not evs.reps_buffer


def test_oblivious_spreads_over_usable_evs_and_ignores_congestion():
    evs, ev = evset("oblivious", n=8)
    for e in ev[:4]:
        evs.on_congestion(e, 1.0, "ecn")  # wrr would send less there; oblivious does not care
    evs.retire(ev[7], 1.0, next_probe_seq=1)
    counts = Counter(evs.pick().ev for _ in range(7000))
    assert ev[7] not in counts
    assert set(counts) == set(ev[:7])
    assert all(800 <= c <= 1200 for c in counts.values()), counts  # ~1000 each


def test_wrr_sends_less_on_trimmed_evs():
    evs, ev = evset("wrr", n=8)
    for _ in range(3):
        evs.on_congestion(ev[0], 1.0, "trim")
    counts = Counter(evs.pick().ev for _ in range(8000))
    assert counts[ev[0]] < counts[ev[1]] / 4


def test_an_ecn_echo_lowers_the_weight_of_hashed_evs_not_of_generated_ones():
    """Generated EVs spread evenly by construction: an ECN mark there is the congestion
    control's, and the round-robin's spacing over the paths stays even; hashed EVs collide,
    and a marked one loses weight (TransportConfig.ev_weight_on_ecn)."""
    hashed, ev = evset("wrr", n=8)
    assert hashed.cfg.ev_profile == "auto"
    for _ in range(3):
        hashed.on_congestion(ev[0], 1.0, "ecn")
    assert hashed.by_ev[ev[0]].state is EVState.CONGESTED
    counts = Counter(hashed.pick().ev for _ in range(8000))
    assert counts[ev[0]] < counts[ev[1]] / 4

    generated, ev = evset("wrr", n=8, ev_profile="generated")
    for _ in range(3):
        generated.on_congestion(ev[0], 1.0, "ecn")
    assert generated.by_ev[ev[0]].state is EVState.GOOD
    assert generated.by_ev[ev[0]].weight == 1.0
    assert Counter(generated.pick().ev for _ in range(800)) == dict.fromkeys(ev, 100)
    generated.on_congestion(ev[0], 1.0, "trim")  # a full queue cuts whatever the EVs
    assert generated.by_ev[ev[0]].state is EVState.CONGESTED

    # Either way on request.
    forced, ev = evset("wrr", n=8, ev_profile="generated", ev_weight_on_ecn=True)
    forced.on_congestion(ev[0], 1.0, "ecn")
    assert forced.by_ev[ev[0]].state is EVState.CONGESTED
    deaf, ev = evset("wrr", n=8, ev_weight_on_ecn=False)
    deaf.on_congestion(ev[0], 1.0, "ecn")
    assert deaf.by_ev[ev[0]].state is EVState.GOOD


def test_a_scenario_asks_for_ecn_to_lower_the_weights():
    import copy

    from testbed.harness.endpoint_driver import job_request
    from testbed.scenario import ScenarioError, validate
    from tests.test_scenario_validation import BASE

    data = copy.deepcopy(BASE)
    data["transport"] = ["mrc", {"name": "mrc", "label": "mrc-ecnw", "ev_weight_on_ecn": True}]
    sc = validate(data)
    assert job_request(sc, "mrc-ecnw")["transport"]["ev_weight_on_ecn"] is True
    assert "ev_weight_on_ecn" not in job_request(sc, "mrc").get("transport", {})
    data["transport"] = [{"name": "mrc", "ev_weight_on_ecn": "sometimes"}]
    with pytest.raises(ScenarioError) as err:
        validate(data)
    assert "transport[0].ev_weight_on_ecn" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("lb", LB_POLICIES)
def test_every_policy_keeps_data_moving_when_every_ev_failed(lb):
    evs, ev = evset(lb, n=4)
    for e in ev:
        evs.retire(e, 1.0, next_probe_seq=1)
    assert all(p.state is EVState.FAILED for p in evs.paths)
    assert evs.pick().ev in ev  # on a failed EV in turn, as before
    assert evs.fallback_picks == 1


@pytest.mark.parametrize("lb", ["oblivious", "reps"])
def test_random_choices_repeat_for_a_connection(lb):
    a, _ = evset(lb)
    b, _ = evset(lb)
    assert [a.pick().ev for _ in range(50)] == [b.pick().ev for _ in range(50)]


def test_a_scenario_chooses_the_policy_per_configuration():
    import copy

    from testbed.harness.endpoint_driver import job_request
    from testbed.scenario import ScenarioError, validate
    from tests.test_scenario_validation import BASE

    data = copy.deepcopy(BASE)
    data["transport"] = ["mrc", {"name": "mrc", "label": "mrc-reps", "lb": "reps"}]
    sc = validate(data)
    assert job_request(sc, "mrc-reps")["transport"]["lb"] == "reps"
    assert "lb" not in job_request(sc, "mrc").get("transport", {})
    data["transport"] = [{"name": "mrc", "lb": "random"}]
    with pytest.raises(ScenarioError) as err:
        validate(data)
    assert "transport[0].lb" in str(err.value) and "\n" not in str(err.value)

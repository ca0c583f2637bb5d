"""Lab 4 checks, part 1: your three functions on one EVPath, and inside an EVSet.

Each check's name starts with the TODO it is about. No root needed.
"""

from __future__ import annotations

import pytest

from endpoint.config import TransportConfig
from endpoint.ev import EVPath, EVSet, EVState

CFG = TransportConfig()  # probe_interval 1 ms, probe_interval_max 16 ms
MS = 1e-3


def failed_path(policy, now=1.0, seq=5) -> EVPath:
    p = EVPath(CFG.ev_base, 0)
    assert policy.retire(p, now, seq, CFG) is True, "retire() of a GOOD EV must return True"
    p.state = EVState.FAILED  # what EVSet does when retire() says True
    return p


def test_todo1_an_ev_that_failed_already_is_not_retired_again(policy):
    p = failed_path(policy)
    before = (p.failed_at, p.retirements, p.next_probe_at, p.probe_min_seq)
    assert policy.retire(p, 2.0, 9, CFG) is False
    assert (p.failed_at, p.retirements, p.next_probe_at, p.probe_min_seq) == before


def test_todo2_retire_records_when_and_how_often(policy):
    p = EVPath(CFG.ev_base, 0)
    assert policy.retire(p, 1.5, 0, CFG) is True
    assert p.failed_at == 1.5 and p.retirements == 1
    p.state = EVState.GOOD  # re-admitted meanwhile
    assert policy.retire(p, 2.5, 0, CFG) is True
    assert p.failed_at == 2.5 and p.retirements == 2


def test_todo3_first_probe_one_probe_interval_after_the_failure(policy):
    p = EVPath(CFG.ev_base, 0)
    p.probe_backoff = 64.0  # left over from an earlier failure
    assert policy.retire(p, 1.0, 7, CFG) is True
    assert p.next_probe_at == pytest.approx(1.0 + CFG.probe_interval)
    assert p.probe_backoff == 1.0 and p.probe_min_seq == 7


def test_todo4_probe_intervals_double_up_to_the_maximum(policy):
    p = failed_path(policy, now=0.0)
    times = [p.next_probe_at]
    for _ in range(7):
        policy.schedule_probe(p, times[-1], CFG)
        times.append(p.next_probe_at)
    gaps = [round((b - a) / MS, 6) for a, b in zip(times, times[1:], strict=False)]
    assert gaps == [2, 4, 8, 16, 16, 16, 16], f"gaps between probes (ms): {gaps}"


def test_todo4_backoff_stays_finite_for_a_long_outage(policy):
    p = failed_path(policy, now=0.0)
    t = p.next_probe_at
    for _ in range(200):
        policy.schedule_probe(p, t, CFG)
        assert t < p.next_probe_at <= t + CFG.probe_interval_max + 1e-12
        t = p.next_probe_at
    assert p.probe_backoff <= 1 << 20


def test_todo5_an_answer_to_an_old_probe_is_ignored(policy):
    p = failed_path(policy, seq=5)
    assert policy.readmit(p, 4, 2.0, CFG) is False  # sent before the failure
    assert p.state is EVState.FAILED and p.next_probe_at < float("inf")


def test_todo5_an_ev_that_is_not_failed_is_not_readmitted(policy):
    p = EVPath(CFG.ev_base, 0)
    p.weight = 0.25
    p.state = EVState.CONGESTED
    assert policy.readmit(p, 10, 2.0, CFG) is False
    assert p.weight == 0.25  # congestion state is not the policy's business


def test_todo6_a_fresh_answer_readmits_at_full_weight(policy):
    p = failed_path(policy, seq=5)
    p.weight, p.credit = 0.125, 0.7
    assert policy.readmit(p, 5, 2.0, CFG) is True
    assert p.weight == 1.0 and p.credit == 0.0 and p.next_probe_at == float("inf")


def test_evset_uses_your_policy_end_to_end(policy):
    evs = EVSet(TransportConfig(num_evs=8))
    e = evs.paths[3].ev
    assert evs.retire(e, 1.0, next_probe_seq=2)
    assert evs.states()[e] == "failed" and evs.healthy_count() == 7
    assert all(evs.pick().ev != e for _ in range(50))  # a FAILED EV carries no data
    assert evs.due_probes(1.0 + 0.5 * MS) == []  # not yet
    assert [p.ev for p in evs.due_probes(1.0 + MS)] == [e]
    assert not evs.readmit(e, 1, 1.01)  # stale answer
    assert evs.readmit(e, 2, 1.01) and evs.states()[e] == "good"
    assert evs.next_probe_time() is None

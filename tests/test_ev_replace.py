"""MRC's REPLACE_EV and QUERY_EV_ARRAY (issue 19): an EV of a connection's array swapped for
another, one slot or every copy, all or none; the array read back slot by slot."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from endpoint.config import TransportConfig
from endpoint.ev import EVSet
from endpoint.ev_path import EVState
from tests.conftest import record_sends

GOOD, DENIED = EVState.GOOD, EVState.DENIED


def _evs(**kw) -> tuple[EVSet, list]:
    seen: list = []
    return EVSet(TransportConfig(**kw), on_change=lambda *a: seen.append(a)), seen


def test_a_replaced_ev_takes_its_slot_and_the_old_one_is_gone() -> None:
    evs, seen = _evs(num_evs=8)
    old = [p.ev for p in evs.paths]
    assert evs.replace([(old[0], 60_000, GOOD, False)], 1.0) == 1
    assert [s["ev"] for s in evs.array()] == [60_000, *old[1:]]
    assert old[0] not in evs.by_ev and evs.by_ev[60_000].state is GOOD
    assert [(s[1], s[2], s[3], s[4]) for s in seen] == [(60_000, GOOD, GOOD, "replace")]
    picks = Counter(evs.pick().ev for _ in range(80))
    assert picks[60_000] == 10 and old[0] not in picks  # one slot: one share in eight


def test_a_copy_shares_one_ev_and_carries_a_share_per_slot() -> None:
    """An ev_new already in the array makes a copy (MRC's EV array may hold one EV twice):
    round-robin gives it two turns a round; `all_copies` then replaces both slots at once,
    without it only the first."""
    evs, _ = _evs(num_evs=4)
    a, b, c, d = (p.ev for p in evs.paths)
    assert evs.replace([(b, c, GOOD, False)], 1.0) == 1
    assert evs.paths[1] is evs.paths[2] and b not in evs.by_ev
    picks = Counter(evs.pick().ev for _ in range(400))
    assert picks == {a: 100, c: 200, d: 100}
    evs.on_congestion(c, 2.0, "trim")  # feedback on the EV: both slots
    assert [s["state"] for s in evs.array()] == ["good", "congested", "congested", "good"]
    assert evs.replace([(c, 61_000, GOOD, False)], 3.0) == 1
    assert [s["ev"] for s in evs.array()] == [a, 61_000, c, d]
    evs.replace([(61_000, c, GOOD, False)], 4.0)
    assert evs.replace([(c, 62_000, DENIED, True)], 5.0) == 2
    assert [s["ev"] for s in evs.array()] == [a, 62_000, 62_000, d]
    assert evs.healthy_count() == 2 and evs.by_ev[62_000].state is DENIED


def test_replace_is_all_or_none_and_names_the_entry() -> None:
    evs, seen = _evs(num_evs=4, min_active_evs=3)
    before = evs.array()
    a, b, c, _ = (p.ev for p in evs.paths)
    with pytest.raises(ValueError, match=r"entries\[1\]: would leave 2 of 4 EVs undenied"):
        evs.replace([(a, 60_000, DENIED, False), (b, 60_001, DENIED, False)], 1.0)
    assert evs.array() == before and seen == []
    # An entry for an EV this connection has not got is skipped (another connection's), and
    # `hits` says which entries found theirs -- an earlier entry's ev_new counts.
    hits = [False] * 3
    entries = [(999, 60_002, GOOD, False), (c, 60_003, GOOD, False), (60_003, 60_004, GOOD, False)]
    assert evs.replace(entries, 2.0, hits=hits) == 2
    assert hits == [False, True, True] and 60_004 in evs.by_ev and 60_003 not in evs.by_ev


def test_a_slot_keeps_its_plane() -> None:
    evs, _ = _evs(num_evs=4, planes=2)
    e0, e1, e2, _ = (p.ev for p in evs.paths)
    with pytest.raises(ValueError, match=r"entries\[0\]: ev_new .* already an EV of plane 1"):
        evs.replace([(e0, e1, GOOD, False)], 1.0)
    evs.replace([(e0, e2, GOOD, False)], 1.0)  # plane 0 to plane 0: a copy
    evs.replace([(e1, 60_001, GOOD, False)], 1.0)
    assert [s["plane"] for s in evs.array()] == [0, 1, 0, 1]


def test_deny_rules_hold_for_new_evs_and_allow_lifts_only_its_own() -> None:
    """A rule in force denies a matching ev_new whatever its state says; lifting a rule brings
    back only the EVs that rule denied, not one a replacement denied."""
    evs, _ = _evs(ev_profile="generated", num_evs=8)
    e = [p.ev for p in evs.paths]
    evs.deny(0x3, 0x1, 1.0)
    evs.replace([(e[0], e[0] + 0x101, GOOD, False)], 2.0)  # low bits 01: the rule's
    assert evs.by_ev[e[0] + 0x101].state is DENIED
    evs.replace([(e[2], 0xF002, DENIED, False)], 3.0)
    assert evs.allow(0x3, 0x1, 4.0) == [e[0] + 0x101, e[1], e[5]]
    assert evs.by_ev[0xF002].state is DENIED


def test_a_failed_ev_replaced_is_no_longer_probed_or_recycled() -> None:
    evs, _ = _evs(num_evs=4, lb="reps")
    a, b, *_ = (p.ev for p in evs.paths)
    evs.on_clean_ack(a, 0.5)
    assert evs.by_ev[a] in evs.reps_buffer
    evs.retire(a, 1.0, 0)
    assert evs.next_probe_time() is not None
    evs.replace([(a, 60_000, GOOD, False)], 2.0)
    assert evs.next_probe_time() is None and evs.due_probes(1e9) == []
    assert all(p.ev != a for p in evs.reps_buffer)
    assert a not in {evs.pick().ev for _ in range(100)}


def test_a_transfer_moves_onto_the_replacement_evs_mid_flight() -> None:
    """On the simulated network, REPLACE_EV in the middle of a transfer: from then on no data
    packet leaves on the old EVs (resends included), the new ones carry their share, the ACKs
    still naming an old EV are taken, and every message arrives whole (the peer replies on an
    EV it has never seen)."""
    from endpoint.simnet import PairHarness, SimNet

    cfg = TransportConfig(num_evs=8, base_rtt=2e-3)
    net = SimNet(seed=5)
    h = PairHarness(net, cfg)
    evs = h.ca.sender.evs
    old = [p.ev for p in evs.paths[:3]]
    new = [60_000, 60_001, 60_002]
    used = record_sends(net, "a")
    rng = random.Random(5)
    sent = [rng.randbytes(60_000) for _ in range(4)]
    for data in sent:
        h.send_ab(data)
    net.run(1.0, stop=lambda: len(used) >= 60)  # 60 of ~170 data packets sent
    at = net.now
    early = {ev for t, ev in used}
    assert set(old) <= early and not h.all_done()  # the old EVs were in use, data in flight
    assert evs.replace([(o, n, GOOD, False) for o, n in zip(old, new, strict=True)], at) == 3
    assert h.run(10.0)
    late = Counter(ev for t, ev in used if t > at)
    assert not set(old) & set(late) and all(late[n] > 0 for n in new)
    assert sorted(b"".join(parts) for parts in h.received_ab.values()) == sorted(sent)

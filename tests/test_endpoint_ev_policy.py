"""The EV failure policy is three functions EVSet calls; a process may plug in its own."""

from __future__ import annotations

import types

import pytest

from endpoint import ev, ev_policy
from endpoint.config import TransportConfig
from endpoint.ev import EV_POLICY_ENV, EVSet, EVState, current_policy, load_policy, use_policy


@pytest.fixture
def fresh_policy():
    previous = use_policy(None)
    yield
    use_policy(previous)


def test_builtin_policy_by_default(fresh_policy, monkeypatch) -> None:
    monkeypatch.delenv(EV_POLICY_ENV, raising=False)
    assert current_policy() is ev_policy
    cfg = TransportConfig(num_evs=4)
    evs = EVSet(cfg)
    e = cfg.ev_values()[1]
    assert evs.retire(e, 1.0, next_probe_seq=7)
    assert not evs.retire(e, 1.1, next_probe_seq=8)  # already FAILED
    p = evs.by_ev[e]
    assert p.state is EVState.FAILED and p.next_probe_at == 1.0 + cfg.probe_interval
    t, sent = p.next_probe_at, []
    for _ in range(6):
        assert evs.due_probes(t) == [p]
        sent.append(t)
        t = p.next_probe_at
    gaps = [round((b - a) / cfg.probe_interval, 6) for a, b in zip(sent, sent[1:], strict=False)]
    assert gaps == [2, 4, 8, 16, 16]  # doubling, capped at probe_interval_max
    assert not evs.readmit(e, 6, 2.0)  # a probe from before the failure
    assert evs.readmit(e, 7, 2.0) and p.state is EVState.GOOD and p.next_probe_at == float("inf")


def test_a_plugged_policy_decides(fresh_policy) -> None:
    calls = []
    never = types.SimpleNamespace(
        retire=lambda *a: calls.append("retire") or False,
        schedule_probe=lambda *a: calls.append("probe"),
        readmit=lambda *a: calls.append("readmit") or False,
    )
    use_policy(never)
    evs = EVSet(TransportConfig(num_evs=4))
    assert not evs.retire(evs.paths[0].ev, 1.0, 0)
    assert evs.paths[0].state is EVState.GOOD and calls == ["retire"]
    assert evs.due_probes(5.0) == [] and evs.next_probe_time() is None


def test_policy_from_the_environment(fresh_policy, tmp_path, monkeypatch) -> None:
    src = tmp_path / "mine.py"
    src.write_text(
        "from endpoint.ev_policy import schedule_probe, readmit\n"
        "def retire(path, now, seq, cfg):\n    return False\n"
    )
    monkeypatch.setenv(EV_POLICY_ENV, str(src))
    policy = current_policy()
    assert policy is not ev_policy and policy.readmit is ev_policy.readmit
    assert not EVSet(TransportConfig()).retire(TransportConfig().ev_base, 0.0, 0)
    assert current_policy() is policy  # loaded once per process
    (tmp_path / "half.py").write_text("def retire(*a):\n    return True\n")
    with pytest.raises(ImportError, match="schedule_probe, readmit"):
        load_policy(str(tmp_path / "half.py"))
    assert ev.POLICY_FUNCTIONS == ("retire", "schedule_probe", "readmit")

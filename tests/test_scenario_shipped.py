"""Every shipped scenario loads, lints clean (also in --quick form) and is listed."""

from pathlib import Path

import pytest

from testbed.scenario import (
    EMULATION_BUDGET_MBPS,
    QUICK_FACTOR,
    capacity_mbps,
    ideal_completion_s,
    lint,
    load_scenario,
    quick,
)
from testbed.scenario.catalog import (
    SCENARIO_DIR,
    find_scenario,
    format_catalog,
    list_scenarios,
)

REQUIRED = {
    "link-failure",
    "link-flap",
    "gray-failure",
    "silent-blackhole",
    "spine-down",
    "ack-path-failure",
    "incast-trim-vs-drop",
    "permutation-ecmp-collisions",
    "allreduce-under-failure",
    "multi-plane-failure",
}
SHIPPED = sorted(SCENARIO_DIR.glob("*.yaml"))


def test_the_required_scenarios_are_shipped():
    assert REQUIRED <= {p.stem for p in SHIPPED}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_scenario_is_valid_and_sensible(path: Path):
    sc = load_scenario(path)
    assert sc.name == path.stem, "the file name is how users refer to a scenario"
    assert sc.description.strip()
    assert sc.expect.delivered_all is True, "MRC must deliver everything in every shipped scenario"
    assert lint(sc) == []
    # Small enough for a 2-core machine: tens of Mbps and a few seconds in real time (the
    # scenarios whose point is the kernel baselines, which cannot be dilated), or datacenter
    # rates under time dilation, with a few ms of virtual time. duration_s is a limit, not a
    # length: a run ends when its workload does.
    if sc.emulation.time_dilation == 1:
        assert sc.topology.link_mbps <= 50
        assert 4 <= sc.duration_s <= 20
        assert capacity_mbps(sc) <= EMULATION_BUDGET_MBPS
    else:
        assert 0.005 <= sc.duration_s <= 0.05 and "tcp" not in sc.transports
        assert sc.topology.link_mbps >= 10_000, "a dilated scenario runs at datacenter rates"
    assert sc.expect.model_dump(exclude_none=True), "each scenario states what MRC must meet"


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_quick_form_keeps_the_experiment(path: Path):
    sc = load_scenario(path)
    q = quick(sc)
    assert lint(q) == [], "every failure must still hit the workload in --quick form"
    assert q.duration_s == pytest.approx(sc.duration_s * QUICK_FACTOR)
    assert ideal_completion_s(q) <= ideal_completion_s(sc) * QUICK_FACTOR * 1.15
    assert [e.action for e in q.timeline()] == [e.action for e in sc.timeline()]
    assert q.expect == sc.expect


def test_failure_scenarios_fail_something():
    for path in SHIPPED:
        sc = load_scenario(path)
        if path.stem in {"incast-trim-vs-drop", "permutation-ecmp-collisions", "roce-qp-scaling"}:
            assert sc.events == []  # pure congestion scenarios
        else:
            assert any(e.is_failure for e in sc.events), path.stem
            if sc.workload.kind in ("allreduce", "trace"):  # judged by its step P100 instead
                assert sc.expect.max_p100_over_p50 is not None
            else:
                assert sc.expect.max_failover_ms is not None, path.stem


def test_catalog_lists_each_with_one_line():
    entries = list_scenarios()
    assert {e.name for e in entries} >= REQUIRED
    assert all(e.error is None for e in entries)
    assert all(e.description and "\n" not in e.description for e in entries)
    text = format_catalog(entries)
    assert len(text.splitlines()) == len(entries)
    assert "link-failure" in text


def test_catalog_flags_a_broken_file_without_hiding_others(tmp_path):
    (tmp_path / "good.yaml").write_text(
        (SCENARIO_DIR / "link-failure.yaml").read_text().replace("name: link-failure", "name: good")
    )
    (tmp_path / "bad.yaml").write_text("name: bad\n")
    entries = {e.name: e for e in list_scenarios(tmp_path)}
    assert entries["good"].error is None
    assert "topology: required" in entries["bad"].error
    assert "INVALID" in format_catalog(list(entries.values()))


def test_find_scenario_by_name_or_path(tmp_path):
    assert find_scenario("link-failure") == SCENARIO_DIR / "link-failure.yaml"
    own = tmp_path / "mine.yaml"
    own.write_text("x")
    assert find_scenario(str(own)) == own
    with pytest.raises(ValueError, match="no scenario file or shipped scenario named 'nope'"):
        find_scenario("nope")


def test_description_is_optional(tmp_path):
    text = (SCENARIO_DIR / "link-failure.yaml").read_text()
    lines = [ln for ln in text.splitlines() if not ln.startswith("description:")]
    (tmp_path / "plain.yaml").write_text(
        "\n".join(lines).replace("name: link-failure", "name: plain")
    )
    (entry,) = list_scenarios(tmp_path)
    assert entry.error is None and entry.name == "plain" and entry.description == ""

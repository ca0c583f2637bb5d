"""Every independent mistake of a scenario in one pass (issue 37, item 5).

The topology, the transports, the workload and the events are checked at once; only a check
that reads another part which is wrong waits (a host name on an invalid topology), and the
error says that it waits, one line per waiting check, after the mistakes.
"""

from __future__ import annotations

import copy

import pytest

from testbed.scenario import ScenarioError, load_scenario, validate

# The issue's file: a negative link rate, an unknown transport, an unknown host, a bad size
# unit and a misspelt event key. Before, three lines came out and the range error only once
# the others were fixed.
ISSUE_FILE = """\
name: bad
topology: {spines: 2, leaves: 2, hosts_per_leaf: 2, link_mbps: -5}
transport: quic
workload: {kind: bulk, src: h1, dst: h9, bytes: 12XB}
duration_s: 0.03
events:
  - {at: 0.003, action: link-down, lnk: [spine1, leaf2]}
"""

TRANSPORTS = "one of mrc, single-path, spray-no-failover, roce, tcp, mptcp"
UNITS = "use B, KB, MB, GB, KiB, MiB or GiB"

BASE = {
    "name": "base",
    "topology": {"spines": 2, "leaves": 2, "hosts_per_leaf": 2},
    "workload": {"kind": "bulk", "src": "h1", "dst": "h3", "bytes": "1MB"},
    "duration_s": 8,
    "events": [
        {"at": 2.0, "action": "link-down", "link": ["spine1", "leaf2"]},
        {"at": 5.0, "action": "link-up", "link": ["spine1", "leaf2"]},
    ],
}


def failure(data) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        validate(data)
    return info.value


def lines_of(data) -> list[str]:
    return str(failure(data)).splitlines()


def with_(**top) -> dict:
    data = copy.deepcopy(BASE)
    data.update(top)
    return data


def test_the_issues_file_reports_every_independent_mistake_at_once(tmp_path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(ISSUE_FILE)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert str(info.value).splitlines() == [
        f"{path}:2:53: topology.link_mbps: must be between 0 and 800000, got -5",
        f"{path}:3:1: transport: unknown transport 'quic' ({TRANSPORTS})",
        f"{path}:4:42: workload.bytes: unknown unit 'XB' in '12XB' ({UNITS})",
        f"{path}:7:36: events[0].lnk: unknown key (did you mean 'link'?)",
        # h9 can only be judged against a fabric: it waits, and says so.
        f"{path}:4:1: workload: host names not checked until topology is valid",
    ]
    # The first mistake for one-line use; a waiting check is no mistake.
    err = info.value
    assert (err.path, len(err.issues), len(err.waiting)) == ("topology.link_mbps", 4, 1)


def test_with_a_valid_topology_the_unknown_host_is_reported_beside_the_shape_mistakes(
    tmp_path,
) -> None:
    """The workload's size unit is wrong, but not its host names: they are checked."""
    path = tmp_path / "bad.yaml"
    path.write_text(ISSUE_FILE.replace("link_mbps: -5", "link_mbps: 5"))
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert str(info.value).splitlines() == [
        f"{path}:3:1: transport: unknown transport 'quic' ({TRANSPORTS})",
        f"{path}:4:33: workload.dst: no host named h9",
        f"{path}:4:42: workload.bytes: unknown unit 'XB' in '12XB' ({UNITS})",
        f"{path}:7:36: events[0].lnk: unknown key (did you mean 'link'?)",
    ]
    assert info.value.waiting == []


def test_a_topology_range_error_comes_with_the_checks_that_do_not_need_the_fabric() -> None:
    """The topology's range used to stop every meaning check: an event after the end is
    independent of it and is reported; the event's link waits."""
    data = with_(topology={**BASE["topology"], "link_mbps": -5})
    data["events"][1]["at"] = 9.0
    assert lines_of(data) == [
        "topology.link_mbps: must be between 0 and 800000, got -5",
        "events[1].at: 9.0 is after the end (duration_s 8)",
        "workload: host names not checked until topology is valid",
        "events[0].link: not checked until topology is valid",
        "events[1].link: not checked until topology is valid",
    ]


def test_the_waiting_line_names_the_field_that_waits() -> None:
    events = [
        *BASE["events"],
        {"at": 1.0, "action": "switch-down", "node": "spine9"},
        {"at": 1.5, "action": "plane-down", "plane": 2},
    ]
    err = failure(with_(topology={**BASE["topology"], "spines": 0}, events=events))
    assert [f"{w.path}: {w.reason}" for w in err.waiting] == [
        "workload: host names not checked until topology is valid",
        "events[0].link: not checked until topology is valid",
        "events[1].link: not checked until topology is valid",
        "events[2].node: not checked until topology is valid",
        "events[3].plane: not checked until topology is valid",
    ]
    assert [i.path for i in err.issues] == ["topology.spines"]


def test_event_times_wait_for_the_duration_while_their_names_are_checked() -> None:
    data = with_(duration_s=-1)
    data["events"][1]["link"] = ["spine1", "spine9"]
    assert lines_of(data) == [
        "duration_s: input should be greater than 0, got -1",
        "events[1].link: no node named spine9",
        "events[0].at: not checked until duration_s is valid",
        "events[1].at: not checked until duration_s is valid",
    ]


def test_an_event_with_a_bad_value_still_has_its_names_and_time_checked() -> None:
    """`percent` is out of range; the link and the time the event gives are checked anyway."""
    loss = {"at": 9.0, "action": "loss", "link": ["leaf1", "spine7"], "percent": 250}
    assert lines_of(with_(events=[loss])) == [
        "events[0].percent: input should be less than or equal to 100, got 250",
        "events[0].at: 9.0 is after the end (duration_s 8)",
        "events[0].link: no node named spine7",
    ]


def test_a_misspelt_host_key_does_not_make_up_other_host_errors() -> None:
    """A workload whose host keys are wrong is not checked for host names (nothing to read)."""
    data = with_(workload={"kind": "bulk", "srcc": "h1", "dst": "h9", "bytes": "1MB"})
    assert lines_of(data) == ["workload.srcc: unknown key (did you mean 'src'?)"]


def test_independent_parts_all_report_with_a_valid_topology() -> None:
    data = with_(transport=["mrc", "tcpp"], duration_s=8, expect={"max_stal_ms": 1})
    data["workload"] = {"kind": "bulk", "src": "h1", "dst": "h1", "bytes": 0}
    data["events"][0]["link"] = ["spine1", "spine2"]
    assert lines_of(data) == [  # in the order the keys are written (transport came last)
        "workload.bytes: must be more than 0 bytes",
        "workload.dst: same host as workload.src (h1)",
        "events[0].link: spine1 and spine2 are not adjacent",
        f"transport[1]: unknown transport 'tcpp' ({TRANSPORTS})",
        "expect.max_stal_ms: unknown key (did you mean 'max_stall_ms'?)",
    ]


def test_expectations_wait_for_the_parts_they_read() -> None:
    """No written event is valid: whether the timeline has a failure is not known yet; a
    workload of a wrong kind cannot say whether it has step times."""
    data = with_(
        workload={"kind": "bulkk"},
        events=[{"at": 1.0, "action": "link-dwn", "link": ["spine1", "leaf2"]}],
        expect={"max_failover_ms": 10, "max_p100_over_p50": 2},
    )
    err = failure(data)
    assert [i.path for i in err.issues] == ["workload.kind", "events[0].action"]
    assert [f"{w.path}: {w.reason}" for w in err.waiting] == [
        "expect.max_p100_over_p50: not checked until workload is valid",
        "expect.max_failover_ms: not checked until events are valid",
    ]


def test_a_dilation_check_waits_for_the_transports() -> None:
    data = with_(transport="quic", emulation={"time_dilation": 4})
    assert lines_of(data) == [
        f"transport: unknown transport 'quic' ({TRANSPORTS})",
        "emulation.time_dilation: not checked until transport is valid",
    ]


def test_random_failures_wait_for_the_topology_and_check_their_start() -> None:
    spec = {"links": [["spine1", "leaf9"]], "mtbf_s": 2, "mttr_s": 1,
            "from_s": 9}  # fmt: skip
    data = with_(topology={**BASE["topology"], "leaves": 0}, events=[], random_failures=[spec])
    err = failure(data)
    assert [f"{i.path}: {i.reason}" for i in err.issues] == [
        "topology.leaves: must be between 1 and 253, got 0",
        "random_failures[0].from_s: 9 is not before the end (duration_s 8)",
    ]
    assert [f"{w.path}: {w.reason}" for w in err.waiting] == [
        "workload: host names not checked until topology is valid",
        "random_failures[0]: names not checked until topology is valid",
    ]


def test_a_sound_scenario_has_nothing_waiting() -> None:
    assert validate(copy.deepcopy(BASE)).name == "base"


def test_a_tag_that_is_not_a_name_is_one_mistake_not_a_crash() -> None:
    """`action: {}` or `kind: [1, 2]` cannot select a model to check the rest by."""
    data = with_(workload={"kind": [1, 2], "src": "h1", "dst": "h3", "bytes": "1MB"})
    data["events"][1]["action"] = {}
    err = failure(data)
    assert [i.path for i in err.issues] == ["workload.kind", "events[1].action"]
    assert [w.path for w in err.waiting] == []

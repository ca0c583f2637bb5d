"""Every class of scenario mistake fails fast, creates nothing, and names its key path."""

import copy
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from testbed.scenario import (
    FAILURE_ACTIONS,
    RECOVERY_ACTIONS,
    Scenario,
    ScenarioError,
    load_scenario,
    validate,
)

BASE = {
    "name": "link-failure",
    "description": "One spine-leaf link dies mid-transfer and comes back.",
    "topology": {
        "spines": 2,
        "leaves": 2,
        "hosts_per_leaf": 2,
        "planes": 1,
        "link_mbps": 100,
        "delay_us": 20,
        "queue_kb": 64,
        "trim_bytes": 128,
        "trimming": True,
    },
    "transport": "mrc",
    "workload": {"kind": "bulk", "src": "h1", "dst": "h3", "bytes": "20MB"},
    "duration_s": 8,
    "seed": 1,
    "events": [
        {"at": 2.0, "action": "link-down", "link": ["spine1", "leaf2"]},
        {"at": 5.0, "action": "link-up", "link": ["spine1", "leaf2"]},
    ],
    "expect": {"delivered_all": True, "max_stall_ms": 50, "min_goodput_fraction": 0.8},
}


def variant(**changes):
    """BASE with dotted-path changes; a value of ... deletes the key."""
    data = copy.deepcopy(BASE)
    for dotted, value in changes.items():
        node = data
        parts = dotted.split(".")
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if value is ...:
            del node[parts[-1]]
        else:
            node[parts[-1]] = value
    return data


# What BASE checks against its topology, or against its duration, when that part is invalid:
# those checks wait (the rest of the file is checked all the same) and the error says so.
TOPOLOGY_WAITS = "".join(
    f"\n{path}: {what}not checked until topology is valid"
    for path, what in [("workload", "host names "), ("events[0].link", ""), ("events[1].link", "")]
)
DURATION_WAITS = "".join(
    f"\nevents[{i}].at: not checked until duration_s is valid" for i in range(2)
)


def error_of(data) -> str:
    with pytest.raises(ScenarioError) as info:
        validate(data)
    return str(info.value)


def test_design_md_example_is_valid():
    sc = validate(BASE)
    assert isinstance(sc, Scenario)
    assert sc.transports == ["mrc"]
    assert sc.workload.bytes == 20_000_000
    assert [e.action for e in sc.timeline()] == ["link-down", "link-up"]


# The four mistakes the issue names, with the exact messages.


def test_typo_in_a_key():
    data = variant(**{"topology.spinse": 2, "topology.spines": ...})
    assert (
        error_of(data) == "topology.spinse: unknown key (did you mean 'spines'?)" + TOPOLOGY_WAITS
    )


def test_the_ecmp_model_is_one_of_two_and_reaches_the_fabric():
    assert error_of(variant(**{"topology.ecmp_hash": "md5"})) == (
        "topology.ecmp_hash: input should be 'mixed' or 'crc', got 'md5'" + TOPOLOGY_WAITS
    )
    assert validate(BASE).fabric().params.ecmp_hash == "mixed"
    assert validate(variant(**{"topology.ecmp_hash": "crc"})).fabric().params.ecmp_hash == "crc"


def test_link_between_non_adjacent_nodes():
    data = copy.deepcopy(BASE)
    data["events"].append({"at": 3.0, "action": "blackhole", "link": ["spine1", "spine2"]})
    assert error_of(data) == "events[2].link: spine1 and spine2 are not adjacent"


def test_event_after_the_end():
    data = variant(**{"events.0.at": 9.0})
    assert error_of(data) == "events[0].at: 9.0 is after the end (duration_s 8)"


def test_event_at_the_end():
    assert (
        error_of(variant(**{"events.1.at": 8})) == "events[1].at: 8.0 is at the end (duration_s 8)"
    )


def test_host_that_does_not_exist():
    assert error_of(variant(**{"workload.dst": "h99"})) == "workload.dst: no host named h99"


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"nme": "x"}, "nme: unknown key (did you mean 'name'?)"),
        ({"duration_s": ...}, "duration_s: required" + DURATION_WAITS),
        ({"duration_s": 0}, "duration_s: input should be greater than 0, got 0" + DURATION_WAITS),
        (
            {"name": "Bad Name"},
            "name: string should match pattern '^[a-z0-9][a-z0-9_-]*$', got 'Bad Name'",
        ),
        (
            {"transport": "mrcc"},
            "transport: unknown transport 'mrcc' (one of mrc, single-path, spray-no-failover, roce, tcp, mptcp)",
        ),
        (
            {"transport": ["mrc", "tcpp"]},
            "transport[1]: unknown transport 'tcpp' (one of mrc, single-path, spray-no-failover, roce, tcp, mptcp)",
        ),
        (
            {"topology.spines": "2"},
            "topology.spines: input should be a valid integer, got '2'" + TOPOLOGY_WAITS,
        ),
        (
            {"topology.spines": 300},
            "topology.spines: must be between 1 and 253, got 300" + TOPOLOGY_WAITS,
        ),
        (
            {"topology.trimming": 1},
            "topology.trimming: input should be a valid boolean, got 1" + TOPOLOGY_WAITS,
        ),
        (
            {"topology.ecn_kb": 100},
            "topology.ecn_kb: must be in (0, queue_kb=64], got 100.0" + TOPOLOGY_WAITS,
        ),
        (
            {"workload.kind": "bulkk"},
            "workload.kind: unknown kind 'bulkk' (one of bulk, permutation, incast, alltoall, allreduce, trace)",
        ),
        ({"workload.kind": ...}, "workload.kind: required"),
        ({"workload.srcc": "h1"}, "workload.srcc: unknown key (did you mean 'src'?)"),
        (
            {"workload.bytes": "20XB"},
            "workload.bytes: unknown unit 'XB' in '20XB' (use B, KB, MB, GB, KiB, MiB or GiB)",
        ),
        ({"workload.bytes": 0}, "workload.bytes: must be more than 0 bytes"),
        ({"workload.src": "h3"}, "workload.dst: same host as workload.src (h3)"),
        ({"workload.src": "leaf1"}, "workload.src: no host named leaf1"),
        (
            {"events.0.action": "link-dwn"},
            "events[0].action: unknown action 'link-dwn' (one of link-down, link-up, blackhole, loss, degrade, flap, heal, impair, switch-down, switch-up, plane-down, plane-up)",
        ),
        ({"events.0.action": ...}, "events[0].action: required"),
        (
            {"events.0.link": ["spine1"]},
            "events[0].link: list should have at least 2 items after validation, not 1, got ['spine1']",
        ),
        ({"events.0.link": ["spine1", "spine9"]}, "events[0].link: no node named spine9"),
        ({"events.0.at": -1}, "events[0].at: input should be greater than or equal to 0, got -1"),
        (
            {"events.0.direction": ["leaf1", "spine1"]},
            "events[0].direction: [leaf1, spine1] is not a direction of link [spine1, leaf2]",
        ),
        ({"events.0.percent": 5}, "events[0].percent: unknown key"),
        (
            {"expect.max_stal_ms": 5},
            "expect.max_stal_ms: unknown key (did you mean 'max_stall_ms'?)",
        ),
        (
            {"expect.min_goodput_fraction": 1.5},
            "expect.min_goodput_fraction: input should be less than or equal to 1, got 1.5",
        ),
        (
            {"expect.max_p100_over_p50": 1.5},
            "expect.max_p100_over_p50: needs step times; the bulk workload has no steps",
        ),
        (
            {"events": [], "expect.max_failover_ms": 10},
            "expect.max_failover_ms: the timeline has no failure event",
        ),
    ],
)
def test_error_names_the_key_path(changes, message):
    assert error_of(variant(**changes)) == message


@pytest.mark.parametrize(
    "event,message",
    [
        ({"at": 1.0, "action": "loss", "link": ["leaf1", "spine1"]}, "events[2].percent: required"),
        (
            {"at": 1.0, "action": "loss", "link": ["leaf1", "spine1"], "percent": -1},
            "events[2].percent: input should be greater than or equal to 0, got -1",
        ),
        (
            {"at": 1.0, "action": "loss", "link": ["leaf1", "spine1"], "percnt": 1},
            "events[2].percnt: unknown key (did you mean 'percent'?)",
        ),
        (
            {"at": 1.0, "action": "degrade", "link": ["leaf1", "spine1"], "mbps": -3},
            "events[2].mbps: input should be greater than 0, got -3",
        ),
        (
            {"at": 1.0, "action": "flap", "link": ["leaf1", "spine1"], "period_ms": 500},
            "events[2].count: required",
        ),
        (
            {"at": 1.0, "action": "flap", "link": ["leaf1", "spine1"], "period_ms": 1, "count": 2},
            "events[2].period_ms: input should be greater than or equal to 2, got 1",
        ),
        (
            {
                "at": 6.0,
                "action": "flap",
                "link": ["leaf1", "spine1"],
                "period_ms": 1000,
                "count": 3,
            },
            "events[2].count: the flap runs until 9 s, after the end (duration_s 8)",
        ),
        (
            {"at": 1.0, "action": "switch-down", "node": "h1"},
            "events[2].node: h1 is a host, not a switch",
        ),
        (
            {"at": 1.0, "action": "switch-up", "node": "spine7"},
            "events[2].node: no switch named spine7",
        ),
        (
            {"at": 1.0, "action": "switch-down", "link": ["spine1", "leaf2"]},
            "events[2].link: unknown key",
        ),
        (
            {"at": 1.0, "action": "plane-down", "plane": 2},
            "events[2].plane: no plane 2 (topology.planes 1)",
        ),
        (
            {"at": 1.0, "action": "plane-down", "plane": 0},
            "events[2].plane: input should be greater than or equal to 1, got 0",
        ),
        (
            {"at": 1.0, "action": "heal", "link": ["h1", "h2"]},
            "events[2].link: h1 and h2 are not adjacent",
        ),
        (
            {"at": 1.0, "action": "heal", "link": ["leaf1", "leaf1"]},
            "events[2].link: both ends are leaf1",
        ),
        (
            {"at": 1.0, "action": "heal", "link": ["leaf1", "h1"], "direction": ["h1", "h1"]},
            "events[2].direction: [h1, h1] is not a direction of link [leaf1, h1]",
        ),
    ],
)
def test_event_errors(event, message):
    data = copy.deepcopy(BASE)
    data["events"].append(event)
    assert error_of(data) == message


@pytest.mark.parametrize(
    "workload,message",
    [
        (
            {"kind": "incast", "dst": "h1", "srcs": ["h2", "h9"], "bytes": "1MB"},
            "workload.srcs[1]: no host named h9",
        ),
        (
            {"kind": "incast", "dst": "h1", "srcs": ["h2", "h1"], "bytes": "1MB"},
            "workload.srcs: contains the destination h1",
        ),
        (
            {"kind": "incast", "dst": "h1", "srcs": ["h2", "h2"], "bytes": "1MB"},
            "workload.srcs[1]: h2 is listed twice",
        ),
        (
            {"kind": "allreduce", "hosts": ["h1"], "bytes": "1MB", "steps": 3},
            "workload.hosts: needs at least 2 hosts, got 1",
        ),
        (
            {"kind": "allreduce", "hosts": "all", "bytes": "1MB", "steps": 0},
            "workload.steps: input should be greater than or equal to 1, got 0",
        ),
        ({"kind": "allreduce", "bytes": "1MB"}, "workload.steps: required"),
        ({"kind": "alltoall", "bytes": "1MB", "dst": "h1"}, "workload.dst: unknown key"),
        ({"kind": "permutation"}, "workload.bytes: required"),
    ],
)
def test_workload_errors(workload, message):
    data = variant(workload=workload)
    assert error_of(data) == message


def test_every_action_and_workload_is_accepted():
    events = [
        {"at": 0.5, "action": "link-down", "link": ["spine1p2", "leaf2p2"]},
        {"at": 0.6, "action": "link-up", "link": ["spine1p2", "leaf2p2"]},
        {
            "at": 0.7,
            "action": "blackhole",
            "link": ["h1", "leaf1p1"],
            "direction": ["h1", "leaf1p1"],
        },
        {"at": 0.8, "action": "loss", "link": ["leaf1p1", "spine1p1"], "percent": 1.5},
        {"at": 0.9, "action": "degrade", "link": ["leaf1p1", "spine1p1"], "mbps": 10},
        {
            "at": 1.0,
            "action": "flap",
            "link": ["leaf1p1", "spine1p1"],
            "period_ms": 200,
            "count": 5,
        },
        {"at": 2.0, "action": "heal", "link": ["leaf1p1", "spine1p1"]},
        {"at": 2.1, "action": "switch-down", "node": "spine2p1"},
        {"at": 2.2, "action": "switch-up", "node": "spine2p1"},
        {"at": 2.3, "action": "plane-down", "plane": 2},
        {"at": 2.4, "action": "plane-up", "plane": 2},
    ]
    data = variant(**{"topology.planes": 2, "events": events, "expect.max_failover_ms": 100})
    sc = validate(data)
    assert {e.action for e in sc.events} == FAILURE_ACTIONS | RECOVERY_ACTIONS
    for w in [
        {"kind": "permutation", "bytes": "1MB"},
        {"kind": "incast", "dst": "h4", "srcs": "all", "bytes": "1MB"},
        {"kind": "alltoall", "bytes": "64KiB"},
        {"kind": "allreduce", "hosts": ["h1", "h2", "h4"], "bytes": "1MiB", "steps": 10},
    ]:
        assert validate(variant(workload=w)).workload.kind == w["kind"]


def test_plane_suffix_hint():
    data = variant(**{"topology.planes": 2})
    hint = "no node named spine1 (with 2 planes switch names end in p1..p2, e.g. spine1p1)"
    # Both events name spine1: both are reported, each with the hint.
    assert error_of(data).splitlines() == [f"events[0].link: {hint}", f"events[1].link: {hint}"]


def test_transport_list_for_compare():
    from testbed.experiment.runner import COMPARE_BASELINES, compare_transports

    sc = validate(variant(transport=["mrc", "single-path", "spray-no-failover", "tcp", "mptcp"]))
    assert sc.transports == ["mrc", "single-path", "spray-no-failover", "tcp", "mptcp"]
    # compare's default: a file that lists three transports compares those three...
    three = validate(variant(transport=["mrc", "roce", {"name": "mrc", "label": "mrc-reps",
                                                        "lb": "reps"}]))  # fmt: skip
    assert compare_transports(three.transports) == ["mrc", "roce", "mrc-reps"]
    # ... and one that names one compares it with the baselines, itself first.
    one = validate(variant(transport="roce"))
    assert compare_transports(one.transports) == ["roce", *COMPARE_BASELINES]
    assert compare_transports(["mrc"]) == list(COMPARE_BASELINES)


def test_plan_kwargs_match_the_failure_controls():
    data = copy.deepcopy(BASE)
    data["events"].append(
        {
            "at": 1.0,
            "action": "loss",
            "link": ["leaf1", "spine1"],
            "direction": ["spine1", "leaf1"],
            "percent": 2,
        }
    )
    sc = validate(data)
    assert sc.events[2].plan_kwargs() == {
        "action": "loss",
        "link": ("leaf1", "spine1"),
        "direction": ("spine1", "leaf1"),
        "percent": 2.0,
    }
    assert sc.events[2].describe() == "loss 2% spine1->leaf1"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return path


def test_load_names_the_file_and_key(tmp_path):
    data = variant(**{"workload.dst": "h99"})
    path = write(tmp_path, yaml.safe_dump(data))
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    line = yaml.safe_dump(data).splitlines().index("  dst: h99") + 1
    assert str(info.value) == f"{path}:{line}:3: workload.dst: no host named h99"
    assert info.value.path == "workload.dst"


def test_load_rejects_duplicate_keys(tmp_path):
    path = write(tmp_path, "name: a\nname: b\n")
    with pytest.raises(ScenarioError, match=r"s\.yaml:2:1: yaml: duplicate key 'name'"):
        load_scenario(path)


def test_load_reports_yaml_syntax_with_line(tmp_path):
    path = write(tmp_path, "name: a\ntopology: {spines: 2\n")
    with pytest.raises(ScenarioError, match=r"s\.yaml:\d+:\d+: yaml: "):
        load_scenario(path)


def test_load_missing_file(tmp_path):
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "nope.yaml")


def test_not_a_mapping():
    with pytest.raises(ScenarioError, match="must be a mapping"):
        validate(["name"])


def test_validation_creates_nothing(tmp_path, monkeypatch):
    """No subprocess, no file: nothing is built before the scenario is valid. (How long it
    takes is not a unit test's to judge on a shared machine: a timed assert failed under load.)"""

    def no_processes(*args, **kwargs):
        raise AssertionError(f"validation started a process: {args}")

    monkeypatch.setattr(subprocess, "Popen", no_processes)
    monkeypatch.setattr(os, "system", no_processes)
    monkeypatch.chdir(tmp_path)
    bad = [
        variant(**{"topology.spinse": 2}),
        variant(**{"events.0.link": ["spine1", "spine2"]}),
        variant(**{"events.0.at": 9.0}),
        variant(**{"workload.dst": "h99"}),
    ]
    for data in bad:
        path = write(tmp_path, yaml.safe_dump(data))
        with pytest.raises(ScenarioError):
            load_scenario(path)
        path.unlink()
    # A big fabric is checked the same way, without building it.
    big = variant(
        **{
            "topology.spines": 16,
            "topology.leaves": 32,
            "topology.hosts_per_leaf": 16,
            "topology.planes": 4,
            "events": [],
        }
    )
    assert validate(big).topology.spines == 16
    assert list(tmp_path.iterdir()) == []


FIVE_MISTAKES = """\
name: five
topology: {spines: 2, leaves: 2, hosts_per_leaf: 2, link_mbps: fast}
workload: {kind: bulk, src: h1, dst: h3, bytes: 1MB}
duration_s: 4
colour: blue
events:
  - {acton: link-down, at: 1.0, link: [spine1, leaf2]}
  - {at: 2.0, action: loss, link: [leaf1, spine1], percent: 250}
expect: {max_stall_ms: -1}
"""


def test_every_shape_mistake_in_one_pass_with_line_and_column(tmp_path):
    """Five mistakes, five lines, each `file:line:col: key.path: message`; the misspelt key is
    named with a did-you-mean (not reported as a missing `action`). Then what waits for the
    topology: the workload's hosts and the second event's link (its only mistake, `percent`,
    is not what names its link)."""
    path = write(tmp_path, FIVE_MISTAKES)
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    lines = str(info.value).splitlines()
    expected = [
        (2, "topology.link_mbps: "),
        (5, "colour: unknown key"),
        (7, "events[0].acton: unknown key (did you mean 'action'?)"),
        (8, "events[1].percent: "),
        (9, "expect.max_stall_ms: "),
    ]
    assert len(info.value.issues) == len(expected), lines
    assert lines[len(expected) :] == [
        f"{path}:3:1: workload: host names not checked until topology is valid",
        f"{path}:8:29: events[1].link: not checked until topology is valid",
    ]
    for line, (row, start) in zip(lines, expected, strict=False):  # in the file's order
        assert line.startswith(f"{path}:{row}:"), line
        assert f": {start}" in line, line
    assert not any("events[0].action: required" in ln for ln in lines)
    assert info.value.path == info.value.issues[0].path  # the first mistake, for one-line use


def test_every_meaning_mistake_in_one_pass():
    data = variant(**{"workload.dst": "h99"})
    data["events"][0]["at"] = 999.0
    data["events"][1]["link"] = ["spine1", "spine2"]
    lines = error_of(data).splitlines()
    assert [ln.split(":")[0] for ln in lines] == ["workload.dst", "events[0].at", "events[1].link"]


def test_key_positions_find_keys_and_items():
    from testbed.scenario.validation import key_positions

    pos = key_positions("a: 1\nb:\n  - {c: 2}\n  - d: 3\n")
    assert pos[("a",)] == (1, 1) and pos[("b",)] == (2, 1)
    assert pos[("b", 0)] == (3, 5) and pos[("b", 0, "c")] == (3, 6)
    assert pos[("b", 1, "d")] == (4, 5)
    assert key_positions("a: [unclosed\n") == {}


def _with_transport(transport) -> dict:
    return {
        "name": "x",
        "topology": {"spines": 2, "leaves": 2, "hosts_per_leaf": 1},
        "transport": transport,
        "workload": {"kind": "bulk", "src": "h1", "dst": "h2", "bytes": 1000},
        "duration_s": 1,
    }


def test_a_transport_may_be_a_configuration_under_its_own_label() -> None:
    from endpoint.process_config import EndpointConfig, job_transport_config
    from testbed.harness.endpoint_driver import job_request

    sc = validate(
        _with_transport(
            [
                {"name": "mrc", "label": "mrc-16ev", "evs": 16, "cc": {"target_rtts": 1.0}},
                {"name": "mrc", "ev_profile": "generated", "cc": {"base_rtt_us": 13}},
                "tcp",
            ]
        )
    )
    assert sc.transports == ["mrc-16ev", "mrc", "tcp"]
    assert sc.transport_name("mrc-16ev") == "mrc" and sc.transport_name("tcp") == "tcp"
    req = job_request(sc, "mrc-16ev")
    assert req["mode"] == "mrc" and req["evs"] == 16
    cfg = EndpointConfig.from_obj({"hosts": {"h1": ["10.1.1.1"], "h2": ["10.1.2.1"]}})
    tcfg = job_transport_config(cfg, req)
    assert tcfg.num_evs == 16 and tcfg.target_rtts == 1.0
    tcfg = job_transport_config(cfg, job_request(sc, "mrc"))
    assert tcfg.ev_profile == "generated" and tcfg.base_rtt == pytest.approx(13e-6)
    assert validate(_with_transport({"name": "mrc"})).transports == ["mrc"]
    sc = validate(
        _with_transport({"name": "mrc", "ev_profile": "explicit", "explicit_evs": [50000, 50007]})
    )
    tcfg = job_transport_config(cfg, job_request(sc, "mrc"))
    assert tcfg.ev_values() == [50000, 50007] and tcfg.num_evs == 2
    # MRC's QP attributes (mrc_qp_attr) reach the endpoints' transport as they were written.
    sc = validate(
        _with_transport(
            {"name": "mrc", "ack_timeout": 8, "retry_linear_cnt": 7, "retry_exp_cnt": 3}
        )
    )
    tcfg = job_transport_config(cfg, job_request(sc, "mrc"))
    assert (tcfg.ack_timeout, tcfg.retry_linear_cnt, tcfg.retry_exp_cnt) == (8, 7, 3)
    # The copies of a last-resort resend: 3 unless a scenario says otherwise.
    assert job_transport_config(cfg, job_request(sc, "mrc")).tail_copies == 3
    sc = validate(_with_transport({"name": "mrc", "tail_copies": 1}))
    assert job_transport_config(cfg, job_request(sc, "mrc")).tail_copies == 1


@pytest.mark.parametrize(
    "transport,where,says",
    [
        ([{"name": "mrc", "label": "tcp"}], "transport", "name of another transport"),
        (["mrc", "mrc"], "transport", "listed twice"),
        ([{"name": "tcp"}], "transport[0].name", "cannot be configured"),
        ([{"name": "mrc", "evz": 3}], "transport[0].evz", "did you mean 'evs'"),
        ([{"name": "mrc", "cc": {"gama": 2}}], "transport[0].cc.gama", "did you mean 'gamma'"),
        ([{"name": "mrc", "cc": {"gamma": 2}}], "transport[0].cc.gamma", "less than or equal"),
        ([{"name": "mrc", "evs": 0}], "transport[0].evs", "greater than or equal"),
        (["mrcc"], "transport[0]", "unknown transport 'mrcc'"),
        ([{"name": "mrc", "ev_profile": "explicit"}], "transport[0]", "explicit_evs: given"),
        ([{"name": "mrc", "explicit_evs": [50000]}], "transport[0]", "explicit_evs: given"),
        (
            [{"name": "mrc", "ev_profile": "explicit", "explicit_evs": [5, 5]}],
            "transport[0]",
            "once",
        ),
        ([{"name": "mrc", "ack_timeout": 25}], "transport[0].ack_timeout", "less than or equal"),
        ([{"name": "mrc", "tail_copies": 0}], "transport[0].tail_copies", "greater than or equal"),
        ([{"name": "roce", "tail_copies": 1}], "transport[0]", "tail_copies: only for name mrc"),
        (
            [{"name": "mrc", "retry_exp_cnt": 26}],
            "transport[0].retry_exp_cnt",
            "less than or equal",
        ),
        ([{"name": "roce", "ack_timeout": 8}], "transport[0]", "ack_timeout: only for name mrc"),
        ([{"name": "mrc", "rc_timeout": 8}], "transport[0]", "rc_timeout: only for name roce"),
    ],
)
def test_a_bad_transport_configuration_names_its_key(transport, where, says) -> None:
    with pytest.raises(ScenarioError) as err:
        validate(_with_transport(transport))
    assert err.value.path == where and says in str(err.value)

"""The command line's pure parts: parsing, validation before anything is created, help."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from testbed.cli.app import build_parser, main
from testbed.cli.commands import params_from_args
from testbed.fabric.failures import FailureError, ctl_request
from tests.conftest import ROOT
from topologies import TopologyError

COMMANDS = ["up", "inspect", "exec", "ctl", "counters", "cli", "down", "clean", "list", "bench"]


@pytest.mark.parametrize("cmd", COMMANDS)
def test_every_command_has_help(cmd):
    proc = subprocess.run(
        [sys.executable, "-m", "testbed.cli", cmd, "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0 and "usage: testbed " + cmd in proc.stdout


def test_up_options_map_to_topology_params():
    args = build_parser().parse_args(
        ["up", "--spines", "3", "--leaves", "2", "--hosts-per-leaf", "4", "--planes", "2", "--link-mbps", "50",
         "--delay-us", "5", "--queue-kb", "32", "--trim-bytes", "256", "--no-trim"]
    )  # fmt: skip
    p = params_from_args(args)
    assert (p.spines, p.leaves, p.hosts_per_leaf, p.planes) == (3, 2, 4, 2)
    assert (p.link_mbps, p.delay_us, p.queue_kb, p.trim_bytes, p.trimming) == (
        50,
        5,
        32,
        256,
        False,
    )


def test_up_takes_the_ecmp_model_and_defaults_to_the_mixed_one():
    base = ["up", "--spines", "2", "--leaves", "2", "--hosts-per-leaf", "1"]
    assert params_from_args(build_parser().parse_args(base)).ecmp_hash == "mixed"
    crc = params_from_args(build_parser().parse_args([*base, "--ecmp-hash", "crc"]))
    assert crc.ecmp_hash == "crc"
    with pytest.raises(SystemExit):
        build_parser().parse_args([*base, "--ecmp-hash", "md5"])


def test_invalid_topology_is_one_line_naming_the_field(capsys):
    rc = main(["up", "--name", "zz", "--spines", "0", "--leaves", "2", "--hosts-per-leaf", "1"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "spines" in err


def test_invalid_topology_fails_before_root_check():
    args = build_parser().parse_args(
        ["up", "--spines", "2", "--leaves", "2", "--hosts-per-leaf", "1", "--queue-kb", "-1"]
    )
    with pytest.raises(TopologyError, match="queue_kb"):
        params_from_args(args)


@pytest.mark.parametrize(
    "argv,expected",
    [
        (
            ["link-down", "spine1", "leaf2"],
            {"op": "ctl", "action": "link-down", "link": ["spine1", "leaf2"]},
        ),
        (
            ["loss", "leaf1", "spine2", "1.5"],
            {"op": "ctl", "action": "loss", "link": ["leaf1", "spine2"], "percent": 1.5},
        ),
        (
            ["flap", "a", "b", "200", "5"],
            {"op": "ctl", "action": "flap", "link": ["a", "b"], "period_ms": 200.0, "count": 5},
        ),
        (
            ["flap", "a", "b", "200"],
            {"op": "ctl", "action": "flap", "link": ["a", "b"], "period_ms": 200.0},
        ),
        (["switch-down", "spine2"], {"op": "ctl", "action": "switch-down", "node": "spine2"}),
        (["plane-down", "2"], {"op": "ctl", "action": "plane-down", "plane": 2}),
    ],
)
def test_ctl_parsing(argv, expected):
    assert ctl_request(argv[0], argv[1:], None) == expected


def test_ctl_direction():
    req = ctl_request("blackhole", ["leaf2", "spine1"], "leaf2,spine1")
    assert req["direction"] == ["leaf2", "spine1"]
    with pytest.raises(FailureError, match="--direction"):
        ctl_request("blackhole", ["leaf2", "spine1"], "leaf2")


@pytest.mark.parametrize(
    "argv,match",
    [
        (["explode", "a", "b"], "unknown action"),
        (["link-down", "spine1"], "two adjacent nodes"),
        (["loss", "a", "b"], "PERCENT"),
        (["loss", "a", "b", "x"], "PERCENT must be a number"),
        (["degrade", "a", "b", "1", "2"], "MBPS"),
        (["plane-down", "two"], "plane number"),
        (["switch-up"], "one switch name"),
    ],
)
def test_ctl_errors_name_the_argument(argv, match):
    with pytest.raises(FailureError, match=match):
        ctl_request(argv[0], argv[1:], None)


def test_list_shows_shipped_scenarios(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "link-failure" in out and "allreduce-under-failure" in out


def test_list_json_is_machine_readable():
    proc = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "list", "--json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    names = {r["name"] for r in rows}
    assert {"silent-blackhole", "link-failure"} <= names
    assert all(set(r) == {"name", "path", "description", "error"} for r in rows)
    assert all(r["error"] is None and r["path"].endswith(".yaml") for r in rows)

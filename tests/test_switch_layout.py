"""How switch nodes map to switch processes (testbed.fabric.switch_layout), and the command lines that
choose it: pure, no root, nothing is built."""

from __future__ import annotations

import subprocess
import sys

import pytest

from testbed.cli import app as cli
from testbed.fabric import lifecycle
from testbed.fabric.state import RUN_ROOT
from testbed.fabric.switch_layout import (
    ENV,
    LAYOUTS,
    PER_NODE,
    SHARED,
    layout_for_run,
    switch_layout,
)
from tests.conftest import ROOT, unique_name


def test_names_and_choices():
    assert (PER_NODE, SHARED) == ("per-node", "shared")
    assert LAYOUTS == (PER_NODE, SHARED)
    assert ENV == "TESTBED_SWITCH_PROCESSES"


def test_default_is_per_node(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert switch_layout() == PER_NODE
    assert switch_layout(None) == PER_NODE


@pytest.mark.parametrize("mode", [PER_NODE, SHARED])
def test_environment_sets_the_default(monkeypatch, mode):
    monkeypatch.setenv(ENV, mode)
    assert switch_layout() == mode


@pytest.mark.parametrize("env,explicit", [(SHARED, PER_NODE), (PER_NODE, SHARED)])
def test_explicit_value_wins_over_environment(monkeypatch, env, explicit):
    monkeypatch.setenv(ENV, env)
    assert switch_layout(explicit) == explicit


def test_explicit_value_wins_even_over_a_bad_environment(monkeypatch):
    monkeypatch.setenv(ENV, "bogus")
    assert switch_layout(SHARED) == SHARED


def test_bad_explicit_value_names_the_option_and_the_value(monkeypatch):
    monkeypatch.setenv(ENV, SHARED)
    with pytest.raises(ValueError) as info:
        switch_layout("bogus")
    msg = str(info.value)
    assert msg.startswith("--switch-processes:")
    assert "'bogus'" in msg
    assert ENV not in msg
    assert "per-node" in msg and "shared" in msg  # says what would have been accepted


@pytest.mark.parametrize("bad", ["bogus", "Shared", "per_node"])
def test_bad_environment_value_names_the_variable_and_the_value(monkeypatch, bad):
    monkeypatch.setenv(ENV, bad)
    with pytest.raises(ValueError) as info:
        switch_layout()
    msg = str(info.value)
    assert msg.startswith(f"{ENV}:")
    assert repr(bad) in msg
    assert "--switch-processes" not in msg


def test_up_refuses_a_bad_choice_in_argparse_and_creates_nothing():
    name = unique_name("sp")
    proc = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "up", "--name", name, "--spines", "1",
         "--leaves", "1", "--hosts-per-leaf", "1", "--switch-processes", "bogus"],
        capture_output=True, text=True, timeout=30, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, proc.stderr
    assert errors[0].startswith("testbed up: error: argument --switch-processes:")
    assert "'bogus'" in errors[0]
    assert proc.stderr.splitlines()[-1] == errors[0]  # usage, then the one error line
    assert proc.stdout == ""
    assert not (RUN_ROOT / name).exists()


def test_up_refuses_a_bad_environment_value_before_anything(monkeypatch, capsys):
    """A bad $TESTBED_SWITCH_PROCESSES is refused with one line before the root check (and so
    before anything is created); getting as far as the root check fails the test here instead
    of building a fabric."""

    def no_further(what: str) -> None:
        raise AssertionError(f"bring_up got as far as the root check ({what})")

    monkeypatch.setattr(lifecycle, "need_root", no_further)
    monkeypatch.setenv(ENV, "bogus")
    name = unique_name("sp")
    rc = cli.main(["up", "--name", name, "--spines", "1", "--leaves", "2", "--hosts-per-leaf", "1"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1, err
    assert err.startswith(f"testbed: {ENV}: 'bogus'")
    assert not (RUN_ROOT / name).exists()


def _switch(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "switch", *argv],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
    )


def test_switch_refuses_configs_and_controls_that_do_not_pair(tmp_path):
    socks = [tmp_path / "a.sock", tmp_path / "b.sock"]
    proc = _switch("--config", "a.json", "--config", "b.json", "--control", str(socks[0]))
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.splitlines()[-1]
    assert last == "python -m switch: error: 2 --config but 1 --control"
    assert proc.stdout == ""
    assert not socks[0].exists()  # refused before any control socket was made


def test_switch_refuses_netns_that_do_not_pair(tmp_path):
    sock = tmp_path / "a.sock"
    proc = _switch(
        "--config", "a.json", "--control", str(sock), "--netns", "/x", "--netns", "/y"
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines()[-1] == "python -m switch: error: 1 --config but 2 --netns"
    assert not sock.exists()


@pytest.mark.parametrize(
    "choice,dilation,expected",
    [("auto", 1.0, PER_NODE), ("auto", 5000.0, SHARED), ("per-node", 5000.0, PER_NODE),
     ("shared", 1.0, SHARED)],
)  # fmt: skip
def test_a_scenario_run_takes_shared_under_dilation_unless_told(
    monkeypatch, choice, dilation, expected
):
    monkeypatch.delenv(ENV, raising=False)
    assert layout_for_run(choice, dilation) == expected


def test_the_environment_overrides_a_scenario_run(monkeypatch):
    monkeypatch.setenv(ENV, PER_NODE)
    assert layout_for_run("auto", 5000.0) == PER_NODE
    assert layout_for_run("shared", 5000.0) == PER_NODE


def test_a_bad_switch_processes_in_a_scenario_is_one_line_naming_the_key():
    import copy

    from testbed.scenario import ScenarioError, validate
    from tests.test_scenario_validation import BASE

    good = copy.deepcopy(BASE) | {"emulation": {"switch_processes": "shared"}}
    assert validate(good).emulation.switch_processes == "shared"
    with pytest.raises(ScenarioError) as err:
        validate(copy.deepcopy(BASE) | {"emulation": {"switch_processes": "one"}})
    assert "emulation.switch_processes" in str(err.value) and "\n" not in str(err.value)

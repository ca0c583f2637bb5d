"""The data path choice (contracts.datapath): one-line errors naming the key, before anything
is built; the compiled path by default only where it is built; what a run records."""

from __future__ import annotations

import pytest

from contracts import datapath
from testbed.cli.app import main


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.delenv(datapath.ENV, raising=False)
    datapath._missing_cache.clear()
    yield
    datapath._missing_cache.clear()


def _built(monkeypatch, switch: bool, endpoint: bool) -> None:
    state = {"switch": switch, "endpoint": endpoint}
    monkeypatch.setattr(
        datapath, "missing", lambda c: None if state[c] else f"{datapath.EXTENSIONS[c]} gone"
    )


def test_default_is_compiled_only_where_built(monkeypatch):
    _built(monkeypatch, True, True)
    assert datapath.check(None) == "c"
    assert datapath.notice() is None
    _built(monkeypatch, False, False)
    assert datapath.check(None) == "python"
    assert datapath.notice() == (
        "note: the Python data path runs (switch._core gone; endpoint._burst gone)"
    )
    _built(monkeypatch, True, False)
    assert datapath.check(None) == "mixed"
    assert datapath.resolve("switch") == "c"
    assert datapath.resolve("endpoint") == "python"


def test_explicit_c_without_the_extension_is_an_error_naming_the_key(monkeypatch):
    _built(monkeypatch, True, False)
    with pytest.raises(datapath.DatapathError, match=r"^--datapath: c asked for, but endpoint"):
        datapath.check("c", "--datapath")
    assert datapath.check("python", "--datapath") == "python"  # always possible


def test_environment_value_is_validated(monkeypatch):
    _built(monkeypatch, True, True)
    monkeypatch.setenv(datapath.ENV, "rust")
    with pytest.raises(datapath.DatapathError, match=r"^TESTBED_DATAPATH: 'rust' is not one"):
        datapath.resolve("switch")
    monkeypatch.setenv(datapath.ENV, "python")
    assert datapath.resolve("switch") == "python"
    assert datapath.notice() is None  # asked for: nothing to explain


def test_missing_reports_a_real_import_failure(monkeypatch):
    monkeypatch.setitem(datapath.EXTENSIONS, "switch", "switch._no_such_extension")
    reason = datapath.missing("switch")
    assert reason is not None and reason.startswith("switch._no_such_extension is not built")


def test_cli_refuses_before_building_anything(monkeypatch, capsys, tmp_path):
    _built(monkeypatch, False, False)
    rc = main(["run", "link-failure", "--datapath", "c", "--out", str(tmp_path / "r")])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("testbed: --datapath: c asked for")
    assert not (tmp_path / "r").exists()


def test_cli_hands_the_choice_to_child_processes(monkeypatch):
    _built(monkeypatch, False, False)
    seen = {}

    def fake(args):
        import os

        seen["env"] = os.environ.get(datapath.ENV)
        return 0

    from testbed.cli import app

    args = app.build_parser().parse_args(["run", "x", "--datapath", "python"])
    args.func = fake
    assert app._run(args) == 0
    assert seen["env"] == "python"


@pytest.mark.build
def test_without_a_compiler_the_build_succeeds_and_python_runs(tmp_path):
    """setup.py's extensions are optional: a build whose compiler fails still succeeds (as
    `pip install` does), builds nothing, and the processes run the Python path with a
    one-line notice saying why."""
    import os
    import shutil
    import subprocess
    import sys
    import zipfile
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    clone = tmp_path / "clone"
    shutil.copytree(
        root,
        clone,
        ignore=shutil.ignore_patterns(".venv", ".git", "results", "*.so", "build", "__pycache__"),
    )
    # pip's own build (isolated, as `pip install` runs it), with a compiler that always fails.
    env = {**os.environ, "CC": "false", "LDSHARED": "false"}
    env.pop(datapath.ENV, None)
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "w"),
         str(clone)],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-2000:]
    (wheel,) = (tmp_path / "w").glob("mrc_testbed-*.whl")
    assert not [n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".so")]
    assert not list(clone.glob("switch/*.so")) and not list(clone.glob("endpoint/*.so"))
    probe = subprocess.run(
        # -S: not the project's editable install (its finder would map `switch` to this
        # checkout, whose extensions are built), only the clone on PYTHONPATH.
        [sys.executable, "-S", "-c", "from contracts import datapath; print(datapath.notice()); "
         "print(datapath.check(None))"],
        cwd=clone, env={**env, "PYTHONPATH": str(clone)}, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    note, path = probe.stdout.strip().splitlines()
    assert note.startswith("note: the Python data path runs (switch._core is not built")
    assert path == "python"


def test_where_a_compiler_is_the_compiled_path_is_built():
    """setup (scripts/setup.sh: gcc, python3-dev, zlib1g-dev) builds both extensions; an
    extension that silently failed to build would skip the C half of every differential
    test, so on a machine with the compiler and headers a missing one is a failure."""
    import shutil
    import sysconfig
    from pathlib import Path

    headers = Path(sysconfig.get_paths()["include"], "Python.h").exists()
    if shutil.which("gcc") is None or not headers or not Path("/usr/include/zlib.h").exists():
        pytest.skip("no compiler or headers here: the Python path is this machine's")
    assert datapath.missing("switch") is None
    assert datapath.missing("endpoint") is None


def test_up_runs_python_unless_asked(monkeypatch):
    """A fabric driven by hand may be given any control later (loss, impairments, capture):
    `testbed up` runs the Python path unless --datapath or $TESTBED_DATAPATH says otherwise."""
    import os

    from testbed.cli import app

    _built(monkeypatch, True, True)
    args = app.build_parser().parse_args(["up", "--spines", "1", "--leaves", "1",
                                          "--hosts-per-leaf", "1"])  # fmt: skip
    app._apply_datapath(args)
    assert os.environ[datapath.ENV] == "python"
    monkeypatch.setenv(datapath.ENV, "c")
    app._apply_datapath(args)
    assert os.environ[datapath.ENV] == "c"
    args = app.build_parser().parse_args(["run", "x"])
    monkeypatch.delenv(datapath.ENV)
    app._apply_datapath(args)
    assert datapath.ENV not in os.environ  # a run: the compiled path where built


def test_the_python_pass_takes_every_module_that_reaches_the_data_path():
    """`make test` reruns on the Python data path only the modules `datapath` marks: the
    differential and data-path tests must be among them, a pure scenario test need not."""
    from tests.conftest import _DATAPATH_IMPORT, ROOT

    tests = ROOT / "tests"
    for name in ("test_switch_core_diff", "test_switch_vector", "test_endpoint_burst",
                 "test_endpoint_process", "test_labs"):  # fmt: skip
        assert _DATAPATH_IMPORT.search((tests / f"{name}.py").read_text()), name
    assert not _DATAPATH_IMPORT.search((tests / "test_scenario_all_errors.py").read_text())

"""The import contract in pyproject.toml (every import points down, no sibling cycles) holds,
and it really fails on an upward import: a copy of the packages with one import added from the
fabric layer up to the CLI must break it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("contracts", "topologies", "switch", "endpoint", "testbed")
LINT = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(not LINT.exists(), reason="import-linter is not installed")


def _lint(tree: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(tree))
    return subprocess.run(
        [str(LINT), str(tree / "pyproject.toml"), "--no-cache"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _copy(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, tree / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


def test_the_contract_holds(tmp_path):
    proc = _lint(_copy(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "BROKEN" not in proc.stdout


def test_an_upward_import_breaks_it(tmp_path):
    tree = _copy(tmp_path)
    state = tree / "testbed" / "fabric" / "state.py"
    state.write_text(state.read_text() + "\nfrom testbed.cli import commands  # noqa\n")
    proc = _lint(tree)
    assert proc.returncode != 0
    assert "testbed.fabric.state -> testbed.cli.commands" in proc.stdout, proc.stdout[-3000:]


def test_a_sibling_cycle_breaks_it(tmp_path):
    tree = _copy(tmp_path)
    sizes = tree / "contracts" / "sizes.py"
    sizes.write_text(sizes.read_text() + "\nfrom contracts import runtime  # noqa\n")
    runtime = tree / "contracts" / "runtime.py"
    runtime.write_text(runtime.read_text() + "\nfrom contracts import sizes  # noqa\n")
    proc = _lint(tree)
    assert proc.returncode != 0
    assert "No cycles are allowed in contracts" in proc.stdout, proc.stdout[-3000:]

"""The project's own files install and describe it: the Vagrantfile and the set-up script."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(
    shutil.which("vagrant") is None, reason="vagrant not installed (scripts/setup.sh installs it)"
)
def test_vagrantfile_validates():
    proc = subprocess.run(
        ["vagrant", "validate", "-p"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_vagrant_provisions_with_the_readme_setup_script():
    vagrantfile = (ROOT / "Vagrantfile").read_text()
    assert "scripts/setup.sh" in vagrantfile
    makefile = (ROOT / "Makefile").read_text()
    assert "scripts/setup.sh" in makefile
    readme = (ROOT / "README.md").read_text()
    assert "sudo make demo" in readme and "sudo make test" in readme


def test_ci_runs_the_readme_test_command():
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_setup_script_is_valid_bash():
    subprocess.run(["bash", "-n", str(ROOT / "scripts" / "setup.sh")], check=True)
    subprocess.run(["bash", "-n", str(ROOT / "scripts" / "demo.sh")], check=True)


def test_bench_plot_renders_the_committed_result(tmp_path):
    import json

    from testbed.bench.plot import plot_switch_bench

    result = json.loads((ROOT / "docs" / "img" / "switch-bench.json").read_text())
    out = plot_switch_bench(result, tmp_path / "bench.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000

"""The project's own files install and describe it: the Vagrantfile, the set-up script, the
version, and a wheel that carries the shipped scenarios and labs."""

from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import sys
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


# ----- version, shipped data, and a wheel installed outside the checkout ------------------------


def _pyproject_version() -> str:
    table = (ROOT / "pyproject.toml").read_text().split("[project]", 1)[1].split("\n[", 1)[0]
    found = re.search(r'^version\s*=\s*"([^"]+)"', table, re.M)
    assert found, "pyproject.toml: no [project] version"
    return found.group(1)


def test_version_flag_prints_the_project_version():
    from tests.conftest import tb

    assert tb("--version").stdout.strip() == f"testbed {_pyproject_version()}"


def test_a_checkout_reads_its_version_from_pyproject():
    import contracts.project as project

    assert project.checkout() == ROOT
    assert project.__version__ == _pyproject_version()


def test_shipped_data_is_found_in_the_checkout():
    from contracts.project import shipped
    from testbed.labs.definition import LABS_DIR
    from testbed.scenario.catalog import SCENARIO_DIR

    assert SCENARIO_DIR == shipped("scenarios") == ROOT / "scenarios"
    assert LABS_DIR == shipped("labs") == ROOT / "labs"


def test_someone_elses_labs_package_is_not_taken_for_ours(tmp_path, monkeypatch):
    """`python -m testbed.cli` puts the current directory first on sys.path: a user's own
    ``labs`` package there must not replace the shipped labs."""
    from contracts.project import shipped

    (tmp_path / "labs").mkdir()
    (tmp_path / "labs" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "labs", raising=False)
    assert shipped("labs") == ROOT / "labs"
    import labs

    assert Path(labs.__file__).parent == tmp_path / "labs"  # it was theirs that got imported


def test_an_installed_labs_results_go_to_the_current_directory(tmp_path, monkeypatch):
    from testbed.labs import definition

    lab_dir = definition.lab_dirs()[0]
    lab = definition.load_lab(lab_dir)
    assert lab.results_dir == lab_dir / "results"  # a checkout: in the lab folder
    monkeypatch.setattr(definition, "checkout", lambda: None)  # as if installed from a wheel
    monkeypatch.chdir(tmp_path)
    lab = definition.load_lab(lab_dir)
    assert lab.results_dir == tmp_path / "results" / f"lab{lab.number}"
    copied = tmp_path / "mine" / lab_dir.name  # a student's own copy of an installed lab
    shutil.copytree(lab_dir, copied)
    assert definition.load_lab(copied).results_dir == copied / "results"


# What pip prints when the isolated build cannot get setuptools (no index, no network).
_OFFLINE = re.compile(
    r"No matching distribution found for setuptools|Could not find a version that satisfies"
    r"|NewConnectionError|Temporary failure in name resolution|Network is unreachable",
)


@pytest.mark.build
def test_a_wheel_installed_outside_the_checkout_lists_scenarios_and_labs(tmp_path):
    """Build a wheel, install it into a fresh venv, and use it from a folder with no checkout.

    The build is pip's own (isolated: setuptools comes from the configured index). The
    project's dependencies are not downloaded again: the venv sees this interpreter's
    site-packages through a .pth file, after its own, so the wheel's copy is what runs.
    """
    src = tmp_path / "src"  # build from a copy: the build leaves build/ and *.egg-info behind
    junk = shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis",
        ".vagrant",
    )  # fmt: skip

    def ignore(folder: str, names: list[str]) -> set[str]:
        # Runs' results folders (./results, labs/*/results) are not source; testbed/results is.
        here = Path(folder)
        runs = here == ROOT or here.parent == ROOT / "labs"
        return set(junk(folder, names)) | ({"results"} & set(names) if runs else set())

    shutil.copytree(ROOT, src, ignore=ignore)
    dist = tmp_path / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--retries", "0", "--timeout", "20",
         "-w", str(dist), str(src)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if build.returncode != 0 and _OFFLINE.search(build.stdout + build.stderr):
        pytest.skip("pip cannot get setuptools for the isolated build (no package index here)")
    assert build.returncode == 0, build.stdout + build.stderr
    (wheel,) = dist.glob("mrc_testbed-*.whl")

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index",
         "-q", str(wheel)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert install.returncode == 0, install.stdout + install.stderr
    purelib = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    (Path(purelib) / "_outer_site.pth").write_text("\n".join(site.getsitepackages()) + "\n")

    away = tmp_path / "elsewhere"  # no checkout here or above it
    away.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def run(*args: str) -> str:
        proc = subprocess.run(
            list(args), cwd=away, env=env, capture_output=True, text=True, timeout=180
        )
        assert proc.returncode == 0, f"{' '.join(args)} -> {proc.returncode}\n{proc.stderr}"
        return proc.stdout

    testbed = str(venv / "bin" / "testbed")
    where = run(str(py), "-c", "import contracts.project as p, testbed.labs.definition as g, "
                "testbed.scenario.catalog as c; print(p.checkout(), g.LABS_DIR, c.SCENARIO_DIR, "
                "g.find_lab(2).results_dir, sep='\\n')").split("\n")  # fmt: skip
    assert where[0] == "None"  # an installation, not a checkout
    for shipped_dir in where[1:3]:
        assert shipped_dir.startswith(purelib), shipped_dir
    assert where[3] == str(away / "results" / "lab2")

    assert run(testbed, "--version").strip() == f"testbed {_pyproject_version()}"
    listed = run(testbed, "list")
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        assert path.stem in listed
    assert "INVALID" not in listed
    labs = run(testbed, "lab", "list")
    assert purelib in labs and str(ROOT) not in labs
    assert "Trim" in labs and "(broken)" not in labs
    graded = run(testbed, "lab", "check", "2", "--solution", "--unit-only")
    assert "Lab 2: PASSED" in graded

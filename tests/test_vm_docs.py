"""The classroom-VM page (docs/vm.md) agrees with the Vagrantfile and the Makefile it describes."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "vm.md").read_text()
VAGRANTFILE = (ROOT / "Vagrantfile").read_text()
MAKEFILE = (ROOT / "Makefile").read_text()

COMMAND = "vagrant up && vagrant ssh -c 'cd /vagrant && sudo make demo'"


def test_readme_and_vm_page_give_the_two_commands() -> None:
    assert COMMAND in DOC
    readme = (ROOT / "README.md").read_text()
    assert COMMAND in readme and "docs/vm.md" in readme


def test_vm_page_states_time_disk_cpus_and_memory() -> None:
    for needed in ("time", "disk", "CPU", "memory", "download"):
        assert re.search(rf"\|\s*{needed}", DOC, re.I), f"docs/vm.md: no {needed!r} row"
    cpus = re.findall(r"\.cpus = (\d+)", VAGRANTFILE)
    memory = re.findall(r"\.memory = (\d+)", VAGRANTFILE)
    assert cpus and set(cpus) == {"2"} and "2 virtual CPUs" in DOC
    assert memory and set(memory) == {"4096"} and "4 GB for the VM" in DOC


def test_makefile_uses_the_venv_the_vagrantfile_provisions() -> None:
    provisioned = re.search(r"TESTBED_VENV=(\S+) bash /vagrant/scripts/setup.sh", VAGRANTFILE)
    assert provisioned, "the Vagrantfile provisions with scripts/setup.sh and a TESTBED_VENV"
    assert f"VM_VENV ?= {provisioned.group(1)}" in MAKEFILE
    assert provisioned.group(1) in DOC


def _make_n(*args: str, env: dict | None = None) -> str:
    return subprocess.run(
        ["make", "-n", "-p", *args], cwd=ROOT, capture_output=True, text=True, env=env, check=True
    ).stdout


def test_make_picks_the_vm_venv_when_it_exists(tmp_path) -> None:
    import os

    env = {k: v for k, v in os.environ.items() if k != "TESTBED_VENV"}
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").symlink_to("/usr/bin/python3")
    vm = _make_n("lint", f"VM_VENV={tmp_path}", env=env)
    assert f"\nTESTBED_VENV := {tmp_path}\n" in vm
    assert f"{tmp_path}/bin/ruff check ." in vm
    bare = _make_n("lint", f"VM_VENV={tmp_path / 'absent'}", env=env)
    assert f"\nTESTBED_VENV := {ROOT / '.venv'}\n" in bare
    assert ".venv/bin/ruff check ." in bare

# Two commands do everything on a fresh Debian 12 / Ubuntu 24.04: `sudo make demo`, `sudo make test`.
# The classroom VM keeps its venv outside the shared folder (see Vagrantfile); use it there, so
# that `sudo make demo` in the VM neither builds a second venv nor writes one into /vagrant.
VM_VENV ?= /opt/mrc-testbed/venv
ifdef TESTBED_VENV
VENV ?= $(TESTBED_VENV)
else
VENV ?= $(if $(wildcard $(VM_VENV)/bin/python),$(VM_VENV),.venv)
endif
PY := $(VENV)/bin/python
# scripts/setup.sh and scripts/demo.sh read it.
export TESTBED_VENV := $(abspath $(VENV))

.PHONY: setup test check demo lint format clean

setup:
	bash scripts/setup.sh

# The pure tests on both cores on the compiled data path (the default where it is built), then
# again on the Python one (contracts.datapath) those whose modules import what the data path
# can change (the `datapath` marker, tests/conftest.py); then the namespace tests, one at a time
# (they measure the machine), listing every one that took 5 s or more (where the time goes). The
# differential tests of the two paths run in both passes.
test: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -m "not netns" -n 2 -q
	TESTBED_DATAPATH=python $(PY) -m pytest -m "datapath and not netns" -n 2 -q
	$(PY) -m pytest -m netns --durations=0 --durations-min=5

# Lint and the pure tests (no root, no namespaces) on both cores: under two minutes. It leaves
# out the `build` tests (a wheel built and installed, the ASan/UBSan builds of the C code, a
# build without a compiler): `make test` runs them in its first pass. worksteal: a worker that
# runs dry takes tests queued on the other, so neither waits alone at the end.
check: setup
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check . && $(VENV)/bin/lint-imports
	$(PY) -m pytest -m "not netns and not build" -n 2 --dist worksteal -q

demo: setup
	bash scripts/demo.sh

lint:
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check . && $(VENV)/bin/lint-imports

format:
	$(VENV)/bin/ruff format . && $(VENV)/bin/ruff check --fix .

clean:
	$(PY) -m testbed.cli clean

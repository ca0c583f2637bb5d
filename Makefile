# Two commands do everything on a fresh Debian 12 / Ubuntu 24.04: `sudo make demo`, `sudo make test`.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup test demo lint format clean

setup:
	bash scripts/setup.sh

test: setup
	$(VENV)/bin/ruff check .
	$(PY) -m pytest

demo: setup
	bash scripts/demo.sh

lint:
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

format:
	$(VENV)/bin/ruff format . && $(VENV)/bin/ruff check --fix .

clean:
	$(PY) -m testbed.cli clean

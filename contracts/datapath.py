"""Which data path a process runs: the compiled one (C extensions) or the Python one.

Why a choice at all: the Python data path is the readable reference, the one a lab's plug-in
policy runs in, and the fallback where no compiler was present at install; the compiled one is
the fast twin of the same decisions (tests prove both give the same bytes). So each process
resolves the same way: `--datapath c|python` on the command line, which the CLI puts into
$TESTBED_DATAPATH so that every switch and endpoint process it starts inherits it; unset, the
compiled path where it is built, else the Python one with a one-line notice. Asking for `c`
where an extension is missing is an error before anything is built, never a silent fallback.

This module knows the extensions only by name (setup.py builds them, optional): it imports
them to learn whether they are there, and never calls into them.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Iterator

ENV = "TESTBED_DATAPATH"
C = "c"
PYTHON = "python"
DATAPATHS = (C, PYTHON)
EXTENSIONS = {
    "switch": "switch._core",  # the switch's forwarding core (switch/_core.c)
    "endpoint": "endpoint._burst",  # the endpoint's burst I/O and codec (endpoint/_burst.c)
}
_missing_cache: dict[str, str | None] = {}


class DatapathError(ValueError):
    """A data path was asked for that is not valid or not built here (one line, names the key)."""


def missing(component: str) -> str | None:
    """Why `component`'s compiled part cannot be used here, or None if it can."""
    if component not in _missing_cache:
        try:
            importlib.import_module(EXTENSIONS[component])
            _missing_cache[component] = None
        except ImportError as exc:  # not built: no compiler at install, or an old checkout
            _missing_cache[component] = f"{EXTENSIONS[component]} is not built ({exc})"
    return _missing_cache[component]


def requested(value: str | None = None, key: str = ENV) -> str | None:
    """The data path asked for (`value`, else $TESTBED_DATAPATH), validated; None if neither."""
    if value is None:
        value = os.environ.get(ENV) or None
        key = ENV
    if value is None:
        return None
    if value not in DATAPATHS:
        raise DatapathError(f"{key}: {value!r} is not one of {', '.join(DATAPATHS)}")
    return value


def resolve(component: str, value: str | None = None, key: str = ENV) -> str:
    """The data path `component` ("switch" or "endpoint") runs: `c` or `python`.

    Explicit `c` with the extension missing raises DatapathError; unset means `c` if built."""
    want = requested(value, key)
    reason = missing(component)
    if want == C and reason is not None:
        raise DatapathError(
            f"{key}: c asked for, but {reason}; reinstall with a compiler "
            f"(sudo make setup) or use --datapath python"
        )
    if want is None:
        return C if reason is None else PYTHON
    return want


def check(value: str | None, key: str = "--datapath") -> str:
    """Validate a requested data path for every component before anything is built; returns
    what will run ("c" or "python") and raises DatapathError (naming `key`) otherwise."""
    paths = {resolve(component, value, key) for component in EXTENSIONS}
    return C if paths == {C} else PYTHON if paths == {PYTHON} else "mixed"


def notice() -> str | None:
    """One line for a user whose run falls back to Python because an extension is missing
    (and who did not ask for a data path); None when there is nothing to say."""
    if requested() is not None:
        return None
    reasons = [r for c in EXTENSIONS if (r := missing(c)) is not None]
    if not reasons:
        return None
    return "note: the Python data path runs (" + "; ".join(reasons) + ")"


@contextlib.contextmanager
def forced(path: str) -> Iterator[None]:
    """$TESTBED_DATAPATH = `path` for the processes started inside (as it was, after): a run
    that must use one path (a bench measuring both, a scenario only Python can run)."""
    old = os.environ.get(ENV)
    os.environ[ENV] = path
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = old

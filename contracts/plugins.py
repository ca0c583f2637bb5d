"""Load a user's Python file as a module: how student and user code is switched in.

A lab's student file (an ECMP hash, a trim decision, an EV policy, all-reduce steps) is not on
sys.path and must not need to be: it is named by a path (an environment variable, ``--code``)
and run in place of a built-in with the same signature. Every such loader in the project is
this one function, so they all fail the same way and register the module the same way.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


class PluginError(ImportError):
    """The path cannot be loaded as a Python module."""


def load_plugin(
    path: str | Path, name: str, *, register: bool = False, source: str | None = None
) -> ModuleType:
    """Execute the Python file at `path` as a new module called `name` and return it.

    Each call executes the file afresh (an edited file is picked up). With `register` the module
    is put in ``sys.modules`` under `name` while and after it runs, which dataclasses and pickle
    need to find classes it defines; it is removed again if running it fails. Errors raised by
    the file itself propagate unchanged: a student's traceback should point at their own code.
    `source` is how the user named the file (``TESTBED_EV_POLICY=...``), for the error message.
    """
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PluginError(f"{source or path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        if register:
            sys.modules.pop(name, None)
        raise
    return module

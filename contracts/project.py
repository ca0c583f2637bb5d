"""The project as it runs here: its version, and where its shipped scenarios and labs are.

The same code runs from a checkout (``PYTHONPATH=.`` or an editable install) and from a wheel
installed anywhere. The shipped ``scenarios/`` and ``labs/`` folders are data packages, so a
wheel puts them in site-packages next to ``testbed/`` and `shipped` finds them through
importlib.resources whatever the current directory is. Only a checkout has a ``pyproject.toml``
next to the packages: there the version is read from it, so a stale installation's metadata
never speaks for the code that actually runs.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.resources
import re
from pathlib import Path

from contracts.runtime import PACKAGE_ROOT

DISTRIBUTION = "mrc-testbed"  # pyproject's [project] name
SHIPPED_MARK = "__shipped_with__"  # set to DISTRIBUTION by scenarios/ and labs/ __init__.py

# pyproject's [project] table up to the next table (tomllib is not in Python 3.10).
_PROJECT_TABLE_RE = re.compile(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", re.M | re.S)


def _pyproject_field(key: str) -> str | None:
    """A string field of the [project] table of a pyproject.toml next to the packages."""
    try:
        text = (PACKAGE_ROOT / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return None
    table = _PROJECT_TABLE_RE.search(text)
    found = table and re.search(rf'^{key}\s*=\s*"([^"]+)"', table.group(1), re.M)
    return found.group(1) if found else None


def checkout() -> Path | None:
    """The source checkout this code runs from, or None when it runs from an installation."""
    return PACKAGE_ROOT if _pyproject_field("name") == DISTRIBUTION else None


def shipped(package: str) -> Path:
    """The folder of a data package the project ships: ``scenarios`` or ``labs``.

    Another project's package of the same name earlier on sys.path (a user's own ``labs/``
    in the current directory under ``python -m``) is not taken for ours: ours carries
    SHIPPED_MARK. A checkout that is not importable as such (an editable install made before
    these folders were packages) falls back to the folder next to ``testbed/``.
    """
    try:
        module = importlib.import_module(package)
        root = importlib.resources.files(package)
    except ImportError:
        return PACKAGE_ROOT / package
    if getattr(module, SHIPPED_MARK, None) != DISTRIBUTION or not isinstance(root, Path):
        return PACKAGE_ROOT / package
    return root


def _version() -> str:
    if checkout() is not None:
        return _pyproject_field("version") or "unknown"
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


__version__ = _version()

"""The testbed's public Python API (docs/api.md)::

    from testbed import Fabric, LeafSpine, run
    with Fabric(LeafSpine(spines=2, leaves=2, hosts_per_leaf=2, link_mbps=100)) as f:
        f.exec("h1", "ping", "-c1", "10.1.2.1")
    summary = run("silent-blackhole")          # a shipped name, a YAML path, or a dict

Names resolve on first use (PEP 562), so ``import testbed.fabric.state`` in a switch or
supervisor process does not pay for the scenario engine, pydantic and the plots.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers and editors; at run time __getattr__ below resolves them
    from testbed.experiment.api import run, validate  # noqa: F401
    from testbed.experiment.errors import RunError  # noqa: F401
    from testbed.fabric.lifecycle import FabricError  # noqa: F401
    from testbed.fabric.session import Fabric  # noqa: F401
    from testbed.scenario import ScenarioError  # noqa: F401
    from topologies import LeafSpine  # noqa: F401

_PUBLIC = {
    "Fabric": ("testbed.fabric.session", "Fabric"),
    "FabricError": ("testbed.fabric.lifecycle", "FabricError"),
    "LeafSpine": ("topologies", "LeafSpine"),
    "run": ("testbed.experiment.api", "run"),
    "validate": ("testbed.experiment.api", "validate"),
    "ScenarioError": ("testbed.scenario", "ScenarioError"),
    "RunError": ("testbed.experiment.errors", "RunError"),
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    try:
        module, attr = _PUBLIC[name]
    except KeyError:
        raise AttributeError(f"module 'testbed' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_PUBLIC])

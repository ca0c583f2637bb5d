"""Where `testbed.scenario.catalog` still looks for `ScenarioError` and `load_scenario`.

The scenario module was split by job (schema, validation, traffic, capacity, linting, scaling);
importers use ``from testbed.scenario import ...``. catalog.py, which is being changed in
parallel, imports from here until it does the same; then this module goes.
"""

from testbed.scenario.validation import ScenarioError, load_scenario

__all__ = ["ScenarioError", "load_scenario"]

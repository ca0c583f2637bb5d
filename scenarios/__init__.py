"""The shipped scenarios: a data package, so that an installed wheel carries the YAML files.

`testbed list` shows them; `testbed run NAME` runs one by name (docs/scenario-format.md).
"""

__shipped_with__ = "mrc-testbed"  # contracts.project.shipped() checks it is ours

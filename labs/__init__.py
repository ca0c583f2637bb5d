"""The teaching labs: a data package, so that an installed wheel carries them (labs/README.md).

`testbed lab list` shows them; `testbed lab check N` grades one.
"""

__shipped_with__ = "mrc-testbed"  # contracts.project.shipped() checks it is ours

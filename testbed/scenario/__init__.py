"""Scenario files: what a run is asked to do, checked completely before anything is built.

Importers use this package's names; which module inside defines each is the package's own
business (docs/scenario-format.md documents the format).
"""

from testbed.scenario.model import (
    EMULATION_BUDGET_MBPS,
    FAILURE_ACTIONS,
    QUICK_FACTOR,
    RECOVERY_ACTIONS,
    TRANSPORTS,
    AllreduceWorkload,
    Event,
    Expect,
    Flow,
    Scenario,
    ScenarioError,
    capacity_mbps,
    flows,
    ideal_completion_s,
    lint,
    load_scenario,
    quick,
    total_bytes,
    validate,
    workload_hosts,
)

__all__ = [
    "EMULATION_BUDGET_MBPS",
    "FAILURE_ACTIONS",
    "QUICK_FACTOR",
    "RECOVERY_ACTIONS",
    "TRANSPORTS",
    "AllreduceWorkload",
    "Event",
    "Expect",
    "Flow",
    "Scenario",
    "ScenarioError",
    "capacity_mbps",
    "flows",
    "ideal_completion_s",
    "lint",
    "load_scenario",
    "quick",
    "total_bytes",
    "validate",
    "workload_hosts",
]

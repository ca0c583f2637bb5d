"""Scenario files: what a run is asked to do, checked completely before anything is built.

Importers use this package's names; which module inside defines each is the package's own
business (docs/scenario-format.md documents the format):

- `schema`: the pydantic models of the file (workload kinds: `contracts.workloads`);
- `events`: the timeline's events; `transports`: the transports and their configurations;
- `validation`: the strict YAML loader, error messages with key paths, checks of meaning;
  `sound_parts`: what of a scenario its checks of meaning may read when its shape is wrong;
- `traffic`: the flows a workload asks for, who takes part, how many bytes;
- `capacity`: what the fabric could carry (`min_goodput_fraction`'s yardstick);
- `linting`: warnings about scenarios that would not show what they claim;
- `scaling`: the `--quick` form.
"""

from testbed.scenario.capacity import capacity_mbps, frame_rate_pps, ideal_completion_s
from testbed.scenario.linting import (
    EMULATION_BUDGET_MBPS,
    PACKET_COST_BYTES,
    emulation_budget_mbps,
    emulation_budget_pps,
    lint,
)
from testbed.scenario.scaling import QUICK_FACTOR, quick
from testbed.scenario.schema import (
    ACTIONS,
    FAILURE_ACTIONS,
    RECOVERY_ACTIONS,
    TRANSPORTS,
    WORKLOAD_KINDS,
    AllreduceWorkload,
    AlltoallWorkload,
    BulkWorkload,
    Event,
    Expect,
    IncastWorkload,
    PermutationWorkload,
    Scenario,
    TopologySpec,
    TraceWorkload,
    Workload,
    scenario_json_schema,
)
from testbed.scenario.traffic import Flow, flows, total_bytes, workload_hosts
from testbed.scenario.validation import ScenarioError, load_scenario, validate

__all__ = [
    "ACTIONS",
    "EMULATION_BUDGET_MBPS",
    "PACKET_COST_BYTES",
    "FAILURE_ACTIONS",
    "QUICK_FACTOR",
    "RECOVERY_ACTIONS",
    "TRANSPORTS",
    "WORKLOAD_KINDS",
    "AllreduceWorkload",
    "AlltoallWorkload",
    "BulkWorkload",
    "Event",
    "Expect",
    "Flow",
    "IncastWorkload",
    "PermutationWorkload",
    "Scenario",
    "ScenarioError",
    "TopologySpec",
    "TraceWorkload",
    "Workload",
    "capacity_mbps",
    "emulation_budget_mbps",
    "emulation_budget_pps",
    "flows",
    "frame_rate_pps",
    "ideal_completion_s",
    "lint",
    "load_scenario",
    "quick",
    "scenario_json_schema",
    "total_bytes",
    "validate",
    "workload_hosts",
]

"""The columns and dtypes of every tidy frame: one definition for the loader, the parquet files,
docs/results.md and the tests.

Every frame opens with the identity columns (`ID_COLUMNS`), then one column per sweep key of the
results tree (named by the dotted key, e.g. ``topology.link_mbps``), then its own columns. Names
are pandas ``string`` (missing = ``<NA>``), counts ``Int64`` (a count that may be missing), times
and rates ``float64`` (missing = NaN), flags ``bool`` when always known and ``boolean`` when a
summary may not say.
"""

from __future__ import annotations

ID_COLUMNS: dict[str, str] = {
    "run": "string",  # the leaf run folder, relative to the loaded folder ("." for itself)
    "transport": "string",
    "seed": "Int64",  # the run's seed (a repetition's own when it has one)
    "rep": "Int64",  # the repetition index (1..N), <NA> outside a repeat folder
}

FRAMES: dict[str, dict[str, str]] = {
    "goodput": {
        "time_s": "float64",
        "flow": "string",
        "src": "string",
        "dst": "string",
        "goodput_mbps": "float64",
    },
    "steps": {
        "step": "Int64",
        "step_ms": "float64",
        "finished": "bool",
    },
    "flows": {
        "src": "string",
        "dst": "string",
        "bytes": "Int64",
        "acked_bytes": "Int64",
        "start_s": "float64",
        "end_s": "float64",
        "fct_ms": "float64",
        "goodput_mbps": "float64",
        "finished": "bool",
        "retransmits": "Int64",
    },
    "ev_events": {
        "time_s": "float64",
        "host": "string",
        "peer": "string",
        "connection": "string",
        "ev": "Int64",
        "old": "string",
        "state": "string",
        "reason": "string",
    },
    "collectives": {
        "iteration": "Int64",
        "rank": "Int64",
        "host": "string",
        "name": "string",
        "kind": "string",
        "start_s": "float64",
        "end_s": "float64",
        "ms": "float64",
        "bytes": "Int64",
    },
    "switch_counters": {
        "switch": "string",
        "port": "string",
        "counter": "string",
        "value": "Int64",
    },
    "runs": {
        "scenario": "string",
        "started": "string",
        "valid": "boolean",
        "time_dilation": "float64",
        "delivered_bytes": "Int64",
        "lost_bytes": "Int64",
        "goodput_mbps": "float64",
        "bottleneck_mbps": "float64",
        "max_stall_ms": "float64",
        "failover_ms": "float64",
        "step_p50_ms": "float64",
        "step_p99_ms": "float64",
        "step_p100_ms": "float64",
        "retransmits": "Int64",
        "trims": "Int64",
        "ev_retirements": "Int64",
        "qp_errors": "Int64",
        "expectations_passed": "boolean",
        "kernel_drops": "Int64",
        "real_s": "float64",
        "virtual_s": "float64",
        "note": "string",
    },
}
"""Each frame's own columns and dtypes, in order (after the identity and sweep columns)."""

FRAME_NAMES = tuple(FRAMES)

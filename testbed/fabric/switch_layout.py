"""How a fabric's switch nodes map to switch processes (pure; the CLI and the builder share it).

`per-node` (the default, as docs/design.md's data flow has it): one process per switch node, in the
node's namespace. `shared`: one process serves every switch node of the fabric in one event
loop, each switch with its own ports (opened in its node's namespace), state, counters and
control socket. Why offer both: on a 2-core machine a packet-hop between per-node processes
costs a process wakeup, and switch/loop.py's single loop forwards a packet across all the
switches of its path in one; docs/performance.md ("The fabric") has the measured difference.
"""

from __future__ import annotations

import os

PER_NODE = "per-node"
SHARED = "shared"
LAYOUTS = (PER_NODE, SHARED)
ENV = "TESTBED_SWITCH_PROCESSES"


def switch_layout(value: str | None = None) -> str:
    """`value`, else $TESTBED_SWITCH_PROCESSES, else per-node; ValueError names a bad one."""
    source = "--switch-processes" if value is not None else ENV
    mode = value if value is not None else os.environ.get(ENV, PER_NODE)
    if mode not in LAYOUTS:
        raise ValueError(f"{source}: {mode!r} is not one of {', '.join(LAYOUTS)}")
    return mode

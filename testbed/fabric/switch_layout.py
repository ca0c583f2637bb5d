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
AUTO = "auto"
ENV = "TESTBED_SWITCH_PROCESSES"


def switch_layout(value: str | None = None) -> str:
    """`value`, else $TESTBED_SWITCH_PROCESSES, else per-node; ValueError names a bad one."""
    source = "--switch-processes" if value is not None else ENV
    mode = value if value is not None else os.environ.get(ENV, PER_NODE)
    if mode not in LAYOUTS:
        raise ValueError(f"{source}: {mode!r} is not one of {', '.join(LAYOUTS)}")
    return mode


def layout_for_run(choice: str, time_dilation: float) -> str:
    """The layout of a scenario run (`emulation.switch_processes`): $TESTBED_SWITCH_PROCESSES
    if set, else `choice`, where `auto` is `shared` under time dilation and `per-node` in real
    time.

    Why shared under dilation: with its links between switches wired in memory
    (switch/local_links.py) it spends about half the CPU per packet-hop of one process per
    switch, and measured on the fidelity bench's permutation its flows came closer to htsim's
    (docs/fidelity.md). Why per-node in real time: that is the layout of the labs, where a
    switch is a process a student can see, and kill.
    """
    if os.environ.get(ENV):
        return switch_layout()
    if choice == AUTO:
        return SHARED if time_dilation > 1 else PER_NODE
    return switch_layout(choice)

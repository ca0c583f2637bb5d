"""The switches' port counters made plottable: queue-depth maxima per interval, drops by cause.

Pure: the input is what `testbed counters` returns (one dict per switch), so a run's ports plot
can be redrawn from raw/<transport>/queue_max.json and switch_counters.json.

Why maxima: the harness reads counters every 250 ms, while a queue fills in tens of
milliseconds; each switch port keeps the deepest data queue per 10 ms of virtual time
(switch.port.QueueMaxima) and every counters read drains those, so the series is complete
whatever the reading rhythm.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from switch.dataplane import RX_BLACKHOLE, RX_LOSS, SWITCH_DOWN
from switch.port import DROP_BLACKHOLE, DROP_LINK_DOWN, DROP_LOSS, QUEUE_MAX_INTERVAL_S
from switch.queueing import DROP_PRIO_FULL, DROP_QUEUE_FULL

QueueMaxima = dict[str, dict[float, int]]
"""port -> {interval start (virtual s, the switches' clock): deepest data queue (bytes)}."""

FAILURE = "failure"
CONGESTION = "congestion"
OTHER = "other"
DROP_CAUSES: dict[str, str] = {
    # What a failure action does to packets: carrier loss, black holes, gray loss, a dead switch.
    DROP_LINK_DOWN: FAILURE,
    DROP_BLACKHOLE: FAILURE,
    DROP_LOSS: FAILURE,
    RX_LOSS: FAILURE,
    RX_BLACKHOLE: FAILURE,
    SWITCH_DOWN: FAILURE,
    # A full queue: the data queue of a non-trimmable packet, or the priority queue.
    DROP_QUEUE_FULL: CONGESTION,
    DROP_PRIO_FULL: CONGESTION,
}
"""Port drop reason -> cause; any other reason (tx_error: the emulator's own) is OTHER."""


def drops_by_cause(drops: int | Mapping[str, int]) -> dict[str, int]:
    """{failure, congestion, other: packets} of one port's drops ({reason: n}; a bare total
    counts as OTHER: its cause is unknown)."""
    out = {FAILURE: 0, CONGESTION: 0, OTHER: 0}
    if not isinstance(drops, Mapping):
        out[OTHER] = int(drops)
        return out
    for reason, n in drops.items():
        out[DROP_CAUSES.get(reason, OTHER)] += int(n)
    return out


def merge_queue_maxima(into: QueueMaxima, counters: Mapping[str, Any]) -> QueueMaxima:
    """Add one counters read (switch -> its counters) to `into`. An interval seen twice (the
    open one is repeated until it closes) keeps its larger value: a maximum only grows."""
    for sw in counters.values():
        for port, pc in sw.get("ports", {}).items():
            per = into.setdefault(port, {})
            for start, depth in pc.get("queue_max", ()):
                if depth > per.get(start, 0):
                    per[start] = int(depth)
    return into


def queue_series(
    maxima: Mapping[str, Mapping[float, int]],
    t0: float,
    interval_s: float = QUEUE_MAX_INTERVAL_S,
) -> dict[str, tuple[list[float], list[float]]]:
    """port -> (interval starts in s since `t0`, deepest queue in bytes), one point per
    interval from the port's first queued frame to its last; an interval without an entry
    is 0 (no frame was queued there). Ports that never queued are left out."""
    out: dict[str, tuple[list[float], list[float]]] = {}
    for port, per in maxima.items():
        if not per:
            continue
        by_k = {round(start / interval_s): depth for start, depth in per.items()}
        first, last = min(by_k), max(by_k)
        ks = range(first, last + 1)
        out[port] = (
            [k * interval_s - t0 for k in ks],
            [float(by_k.get(k, 0)) for k in ks],
        )
    return out


def sparse_json(maxima: Mapping[str, Mapping[float, int]], t0: float) -> dict[str, list]:
    """The maxima as JSON for raw/<transport>/queue_max.json: port -> [[s since t0, bytes]]."""
    return {
        port: [[round(start - t0, 6), depth] for start, depth in sorted(per.items())]
        for port, per in sorted(maxima.items())
        if per
    }

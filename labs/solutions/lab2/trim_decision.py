"""Lab 2 solution: the trimming decision (the same policy as `switch.queueing.decide`)."""

from __future__ import annotations

from switch.queueing import DROP, ENQUEUE, PRIORITY, TRIM


def decide(
    dscp: int,
    size: int,
    is_udp: bool,
    data_bytes: int,
    data_limit: int,
    trimming: bool,
    trimmable_dscp: int,
    trimmed_dscp: int,
    control_dscp: int,
) -> str:
    """Where a frame goes: PRIORITY, ENQUEUE, TRIM or DROP."""
    # 1. Control and already-trimmed headers jump the data queue.
    if dscp == control_dscp or dscp == trimmed_dscp:
        return PRIORITY
    # 2. Room in the data queue.
    if data_bytes + size <= data_limit:
        return ENQUEUE
    # 3. Full: trim what may be trimmed, so the receiver can NACK it within one RTT.
    if trimming and dscp == trimmable_dscp and is_udp:
        return TRIM
    # 4. Everything else is tail-dropped and must wait for loss detection.
    return DROP

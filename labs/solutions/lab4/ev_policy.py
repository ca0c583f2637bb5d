"""Lab 4 solution: EV retirement, probing with exponential back-off, re-admission.

The same policy as the built-in `endpoint.ev_policy`.
"""

from __future__ import annotations

from endpoint.config import TransportConfig
from endpoint.ev import EVPath, EVState

BACKOFF_CAP = 1 << 20


def retire(path: EVPath, now: float, next_probe_seq: int, cfg: TransportConfig) -> bool:
    """A loss was blamed on ``path``'s EV at time ``now``; True retires it."""
    if path.state is EVState.FAILED:  # 1. the other losses on a dead path change nothing
        return False
    path.failed_at = now  # 2.
    path.retirements += 1
    path.probe_backoff = 1.0  # 3. the first probe one probe interval from now
    path.probe_min_seq = next_probe_seq
    path.next_probe_at = now + cfg.probe_interval
    return True


def schedule_probe(path: EVPath, now: float, cfg: TransportConfig) -> None:
    """A probe goes out on the FAILED ``path`` now; set when the next one is due."""
    path.probe_backoff = min(path.probe_backoff * 2, BACKOFF_CAP)  # 4.
    path.next_probe_at = now + min(cfg.probe_interval_max, cfg.probe_interval * path.probe_backoff)


def readmit(path: EVPath, probe_seq: int, now: float, cfg: TransportConfig) -> bool:
    """A PROBE-ACK answering probe ``probe_seq`` came back on ``path``; True re-admits it."""
    if path.state is not EVState.FAILED or probe_seq < path.probe_min_seq:  # 5.
        return False
    path.weight = 1.0  # 6.
    path.credit = 0.0
    path.next_probe_at = float("inf")
    return True

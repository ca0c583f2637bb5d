"""EV failure policy: retire an EV on loss, probe it with exponential back-off, re-admit it.

Three small functions over one `endpoint.ev_path.EVPath`; `EVSet` calls them and owns the state
change itself (``FAILED`` and back), its bookkeeping and the stats callback. These are the
built-in policy and the reference for Lab 4, whose student file has the same three functions.
An endpoint process started with ``TESTBED_EV_POLICY=/path/file.py`` uses that file's instead.
"""

from __future__ import annotations

from endpoint.config import TransportConfig
from endpoint.ev_path import EVPath, EVState

BACKOFF_CAP = 1 << 20  # keeps the factor finite however long an EV stays dead


def retire(path: EVPath, now: float, next_probe_seq: int, cfg: TransportConfig) -> bool:
    """A loss was blamed on ``path``: prepare its retirement; True retires it.

    ``next_probe_seq`` is the sequence number the next probe will carry: an answer to an older
    probe says nothing about the path since it failed.
    """
    if path.state is EVState.FAILED:
        return False
    path.failed_at = now
    path.retirements += 1
    path.probe_backoff = 1.0
    path.probe_min_seq = next_probe_seq
    path.next_probe_at = now + cfg.probe_interval
    return True


def schedule_probe(path: EVPath, now: float, cfg: TransportConfig) -> None:
    """A probe goes out on the FAILED ``path`` now: set when the next one is due."""
    path.probe_backoff = min(path.probe_backoff * 2, BACKOFF_CAP)
    path.next_probe_at = now + min(cfg.probe_interval_max, cfg.probe_interval * path.probe_backoff)


def readmit(path: EVPath, probe_seq: int, now: float, cfg: TransportConfig) -> bool:
    """A PROBE-ACK for probe ``probe_seq`` came back on ``path``; True re-admits it."""
    if path.state is not EVState.FAILED or probe_seq < path.probe_min_seq:
        return False
    path.weight = 1.0
    path.credit = 0.0
    path.next_probe_at = float("inf")
    return True

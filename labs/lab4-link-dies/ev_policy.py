"""Lab 4: what an MRC-style sender does when a path dies -- retire the EV, probe it, re-admit it.

An EV (entropy value) is a UDP source port; the fabric's ECMP hash turns it into a path. The
sender never sees the path, only what happens to packets sent on the EV. When a packet is
declared lost (later packets were acknowledged around it, or a timeout fired), the sender
blames its EV and calls `retire`; while the EV is FAILED it carries no data, and the sender
sends it a small PROBE whenever ``path.next_probe_at`` has passed, calling `schedule_probe`
each time; a PROBE-ACK coming back calls `readmit`.

You write the three functions. `EVSet` (endpoint/ev.py) owns the state change itself: when
`retire` returns True it marks the EV FAILED, when `readmit` returns True it marks it GOOD.
`testbed lab check 4` plugs this file into every endpoint of its runs
(TESTBED_EV_POLICY=.../ev_policy.py).

The fields of an `EVPath` you need: ``state`` (EVState.GOOD / CONGESTED / FAILED),
``failed_at``, ``retirements``, ``probe_backoff``, ``probe_min_seq``, ``next_probe_at``,
``weight`` and ``credit``. From ``cfg``: ``probe_interval`` (1 ms) and ``probe_interval_max``
(16 ms). Work through the numbered TODOs in order; each has checks named after it.
"""

from __future__ import annotations

from endpoint.config import TransportConfig
from endpoint.ev import EVPath, EVState  # noqa: F401 - you will need EVState

BACKOFF_CAP = 1 << 20  # keeps the back-off factor finite however long an EV stays dead


def retire(path: EVPath, now: float, next_probe_seq: int, cfg: TransportConfig) -> bool:
    """A loss was blamed on ``path``'s EV at time ``now``; True retires it.

    ``next_probe_seq`` is the sequence number the next probe this sender sends will carry.
    """
    # TODO 1: every packet lost on a dead path blames it, so most calls find the EV retired
    #         already: if path.state is EVState.FAILED, return False (nothing changes).
    # TODO 2: record the failure: path.failed_at = now, and count it (path.retirements += 1).
    # TODO 3: schedule the first probe: reset path.probe_backoff to 1.0; remember
    #         path.probe_min_seq = next_probe_seq (an answer to an older probe says nothing
    #         about the path since it failed); path.next_probe_at = now + cfg.probe_interval.
    #         Then return True.
    return False  # replace this line


def schedule_probe(path: EVPath, now: float, cfg: TransportConfig) -> None:
    """A probe goes out on the FAILED ``path`` now; set ``path.next_probe_at`` for the next one."""
    # TODO 4: exponential back-off, so a long outage costs few probes: double
    #         path.probe_backoff (at most BACKOFF_CAP), then set path.next_probe_at to
    #         now + cfg.probe_interval * path.probe_backoff, but never later than
    #         now + cfg.probe_interval_max (a healed path must not wait long).
    #         The first probe went at failed_at + 1 ms, so probes go at +1, +3, +7, +15, +31,
    #         +47, ... ms.
    path.next_probe_at = now + cfg.probe_interval  # replace this line: no back-off yet


def readmit(path: EVPath, probe_seq: int, now: float, cfg: TransportConfig) -> bool:
    """A PROBE-ACK answering probe number ``probe_seq`` came back on ``path``; True re-admits it."""
    # TODO 5: only a FAILED EV can be re-admitted, and only by an answer to a probe sent since
    #         it failed (probe_seq >= path.probe_min_seq); otherwise return False.
    # TODO 6: start it afresh: full weight (path.weight = 1.0), no credit (path.credit = 0.0),
    #         no more probes (path.next_probe_at = float("inf")). Then return True.
    return False  # replace this line

"""Lab 2: the trimming decision of the switch's egress queue.

The switch calls `decide` for every frame that meets a busy egress port, and does what it
returns: PRIORITY (the strict-priority queue, which always drains first), ENQUEUE (the data
queue, bounded in bytes), TRIM (cut the frame to a 128-byte header, re-mark it DSCP 11 and put
it on the priority queue) or DROP (tail drop). `testbed lab check 2` plugs this file into every
switch of its runs (TESTBED_TRIM_DECISION=.../trim_decision.py).

Work through the numbered TODOs in order; each has checks named after it.
"""

from __future__ import annotations

from switch.queueing import DROP, ENQUEUE, PRIORITY, TRIM  # noqa: F401 - you will need them


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
    """Where a frame goes.

    dscp            the frame's DSCP (the IP TOS byte >> 2)
    size            the frame's length in bytes
    is_udp          whether it carries UDP (only UDP lengths can be fixed after a cut)
    data_bytes      bytes already waiting in the data queue
    data_limit      the data queue's bound in bytes
    trimming        whether this switch trims (`testbed up --no-trim`, `trimming: false`)
    trimmable_dscp  the DSCP the endpoints put on data that may be trimmed (10)
    trimmed_dscp    the DSCP of a header that was trimmed already (11)
    control_dscp    the DSCP of ACKs, NACKs and probes (46)
    """
    # TODO 1: control packets (dscp == control_dscp) and headers that were trimmed already
    #         (dscp == trimmed_dscp) go to the priority queue: return PRIORITY. They are small,
    #         and a late ACK or NACK costs a whole round trip.
    # TODO 2: a frame that fits in the data queue (data_bytes + size <= data_limit) goes
    #         there: return ENQUEUE.
    # TODO 3: it does not fit. If trimming is on and the frame is trimmable (dscp ==
    #         trimmable_dscp) and UDP, keep its header so the receiver learns of the loss at
    #         once: return TRIM.
    # TODO 4: anything else that does not fit is tail-dropped: return DROP.
    return DROP  # replace this line

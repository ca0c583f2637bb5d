"""The egress queue discipline: a byte-bounded data queue, a strict-priority header queue, trimming.

Read this class as the whole policy (in the spirit of htsim's CompositeQueue):
- control packets (DSCP control) and already-trimmed headers go to the priority queue;
- data that fits in the data queue is enqueued, CE-marked if ECT and the backlog is above the
  ECN threshold;
- data that does not fit is trimmed to a header and sent on the priority queue when it is
  DSCP-trimmable UDP and trimming is on (the receiver then knows exactly what to ask again);
- anything else that does not fit is tail-dropped;
- the priority queue is bounded too; its overflow drops are counted apart.
The priority queue always drains first, so a trimmed header overtakes the data that filled the
queue: that is what makes trim-NACK recovery take one RTT instead of a timeout.

`decide` is that admission decision as one pure function, the reference definition.
`TrimmingQueue.enqueue` carries an inline copy of it (a function call per queued packet costs
~2% of the switch's per-packet budget); tests prove the two equal. A queue built with another
decision function (``decide=``, e.g. a student's in Lab 2, loaded from the file named by
``TESTBED_TRIM_DECISION`` at switch start) calls that function for every frame instead.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable

from contracts.defaults import TRIM_BYTES, TRIMMING
from contracts.dscp import CONTROL_DSCP, TRIMMABLE_DSCP, TRIMMED_DSCP
from contracts.plugins import load_plugin
from switch import frames

ENQUEUED = "enqueued"
TRIMMED = "trimmed"
DROP_QUEUE_FULL = "queue_full"
DROP_PRIO_FULL = "prio_queue_full"

# What `decide` returns: where a frame goes.
PRIORITY = "priority"  # the strict-priority queue (control, already-trimmed headers)
ENQUEUE = "enqueue"  # the data queue
TRIM = "trim"  # cut to a header, re-marked, onto the priority queue
DROP = "drop"  # tail drop
DECISIONS = (PRIORITY, ENQUEUE, TRIM, DROP)

TRIM_DECISION_ENV = "TESTBED_TRIM_DECISION"


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
    """Where a frame of `size` bytes and DSCP `dscp` goes, given `data_bytes` already queued."""
    if dscp == control_dscp or dscp == trimmed_dscp:
        return PRIORITY
    if data_bytes + size <= data_limit:
        return ENQUEUE
    if trimming and dscp == trimmable_dscp and is_udp:
        return TRIM
    return DROP


def load_decision(path: str) -> Callable[..., str]:
    """The ``decide`` function of the Python file at `path` (same signature as `decide`)."""
    module = load_plugin(path, "trim_decision_plugin", source=f"{TRIM_DECISION_ENV}={path}")
    fn = getattr(module, "decide", None)
    if not callable(fn):
        raise ImportError(f"{TRIM_DECISION_ENV}={path}: defines no function decide()")
    return fn


def decision_from_env() -> Callable[..., str] | None:
    """The decision named by ``TESTBED_TRIM_DECISION``, or None for the built-in."""
    path = os.environ.get(TRIM_DECISION_ENV)
    return load_decision(path) if path else None


class TrimmingQueue:
    def __init__(
        self,
        data_limit_bytes: int,
        prio_limit_bytes: int,
        ecn_threshold_bytes: int,
        trim_bytes: int = TRIM_BYTES,
        trimming: bool = TRIMMING,
        trimmable_dscp: int = TRIMMABLE_DSCP,
        trimmed_dscp: int = TRIMMED_DSCP,
        control_dscp: int = CONTROL_DSCP,
        decide: Callable[..., str] | None = None,
    ) -> None:
        self.data: deque[bytearray] = deque()
        self.prio: deque[bytearray] = deque()
        self.data_bytes = 0
        self.prio_bytes = 0
        self.data_limit = data_limit_bytes
        self.prio_limit = prio_limit_bytes
        self.ecn_threshold = ecn_threshold_bytes
        self.trim_bytes = trim_bytes
        self.trimming = trimming
        self.trimmable_dscp = trimmable_dscp
        self.trimmed_dscp = trimmed_dscp
        self.control_dscp = control_dscp
        # Counters.
        self.trims = 0
        self.ecn_marks = 0
        self.drops_queue_full = 0
        self.drops_prio_full = 0
        self.max_data_bytes = 0
        self.max_prio_bytes = 0
        if decide is not None:  # bound once: the built-in path below stays call-free
            self._decide = decide
            self.enqueue = self._enqueue_decided

    def __len__(self) -> int:
        return len(self.data) + len(self.prio)

    def enqueue(self, frame: bytearray) -> str:
        """Admit `frame`; returns ENQUEUED, TRIMMED or a drop reason (inline `decide`)."""
        d = frame[frames.OFF_TOS] >> 2
        if d == self.control_dscp or d == self.trimmed_dscp:
            return self._enqueue_prio(frame)
        size = len(frame)
        if self.data_bytes + size <= self.data_limit:
            if self.data_bytes > self.ecn_threshold and frames.mark_ce(frame):
                self.ecn_marks += 1
            self.data.append(frame)
            self.data_bytes += size
            if self.data_bytes > self.max_data_bytes:
                self.max_data_bytes = self.data_bytes
            return ENQUEUED
        if (
            self.trimming
            and d == self.trimmable_dscp
            and frame[frames.OFF_PROTO] == frames.PROTO_UDP
        ):
            header = frames.trim(frame, self.trim_bytes, self.trimmed_dscp)
            verdict = self._enqueue_prio(header)
            if verdict == ENQUEUED:
                self.trims += 1
                return TRIMMED
            return verdict
        self.drops_queue_full += 1
        return DROP_QUEUE_FULL

    def _enqueue_decided(self, frame: bytearray) -> str:
        """`enqueue` with the admission decision made by the function given as ``decide``."""
        d = frame[frames.OFF_TOS] >> 2
        size = len(frame)
        verdict = self._decide(
            d,
            size,
            frame[frames.OFF_PROTO] == frames.PROTO_UDP,
            self.data_bytes,
            self.data_limit,
            self.trimming,
            self.trimmable_dscp,
            self.trimmed_dscp,
            self.control_dscp,
        )
        if verdict == PRIORITY:
            return self._enqueue_prio(frame)
        if verdict == ENQUEUE:
            if self.data_bytes > self.ecn_threshold and frames.mark_ce(frame):
                self.ecn_marks += 1
            self.data.append(frame)
            self.data_bytes += size
            if self.data_bytes > self.max_data_bytes:
                self.max_data_bytes = self.data_bytes
            return ENQUEUED
        if verdict == TRIM:
            verdict = self._enqueue_prio(frames.trim(frame, self.trim_bytes, self.trimmed_dscp))
            if verdict == ENQUEUED:
                self.trims += 1
                return TRIMMED
            return verdict
        if verdict == DROP:
            self.drops_queue_full += 1
            return DROP_QUEUE_FULL
        raise ValueError(f"decide() returned {verdict!r}, not one of {', '.join(DECISIONS)}")

    def _enqueue_prio(self, frame: bytearray) -> str:
        size = len(frame)
        if self.prio_bytes + size > self.prio_limit:
            self.drops_prio_full += 1
            return DROP_PRIO_FULL
        self.prio.append(frame)
        self.prio_bytes += size
        if self.prio_bytes > self.max_prio_bytes:
            self.max_prio_bytes = self.prio_bytes
        return ENQUEUED

    def dequeue(self) -> bytearray | None:
        """Strict priority: headers and control first, then data."""
        if self.prio:
            frame = self.prio.popleft()
            self.prio_bytes -= len(frame)
            return frame
        if self.data:
            frame = self.data.popleft()
            self.data_bytes -= len(frame)
            return frame
        return None

    def flush(self) -> int:
        """Drop everything queued (carrier loss); returns the number of frames dropped."""
        n = len(self)
        self.data.clear()
        self.prio.clear()
        self.data_bytes = self.prio_bytes = 0
        return n

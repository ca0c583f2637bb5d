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
"""

from __future__ import annotations

from collections import deque

from switch import frames

ENQUEUED = "enqueued"
TRIMMED = "trimmed"
DROP_QUEUE_FULL = "queue_full"
DROP_PRIO_FULL = "prio_queue_full"


class TrimmingQueue:
    def __init__(
        self,
        data_limit_bytes: int,
        prio_limit_bytes: int,
        ecn_threshold_bytes: int,
        trim_bytes: int = 128,
        trimming: bool = True,
        trimmable_dscp: int = 10,
        trimmed_dscp: int = 11,
        control_dscp: int = 46,
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

    def __len__(self) -> int:
        return len(self.data) + len(self.prio)

    def enqueue(self, frame: bytearray) -> str:
        """Admit `frame`; returns ENQUEUED, TRIMMED or a drop reason."""
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

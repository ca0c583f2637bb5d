"""Counters and samples a connection exposes; the metrics writer turns them into JSON lines."""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

COMPLETIONS_KEPT = 256


@dataclass(slots=True)
class MessageCompletion:
    """A message whose every byte the sender saw acknowledged (sender side)."""

    qp: int
    msg_id: int
    nbytes: int
    started: float
    finished: float


@dataclass(slots=True)
class EVTransition:
    at: float
    ev: int
    old: str
    new: str
    reason: str = ""  # loss, rto, ack_path, sweep, probe_ack, ecn, trim, clean_acks
    # On a move to FAILED: when the connection last sent data on the EV (None: never). The
    # retirement itself can come much later, when a tail-loss probe or an RTO reveals losses.
    last_tx: float | None = None


@dataclass
class ConnectionStats:
    """Everything countable about one QP. ``drops`` are receiver-side, by reason."""

    counters: Counter = field(default_factory=Counter)
    drops: Counter = field(default_factory=Counter)
    retransmits: Counter = field(default_factory=Counter)
    rtt_samples: deque = field(default_factory=lambda: deque(maxlen=4096))  # (at, rtt)
    ev_transitions: list[EVTransition] = field(default_factory=list)
    # The latest completions only: a connection completes a message every few ms for as long
    # as it runs, and the total is counters["messages_acked"].
    completions: deque = field(default_factory=lambda: deque(maxlen=COMPLETIONS_KEPT))

    def snapshot(self) -> dict:
        return {
            "counters": dict(self.counters),
            "drops": dict(self.drops),
            "retransmits": dict(self.retransmits),
            "rtt_samples": len(self.rtt_samples),
            "ev_transitions": len(self.ev_transitions),
            "completions": self.counters["messages_acked"],
        }

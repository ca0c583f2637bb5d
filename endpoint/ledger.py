"""Exactly-once accounting at the application: what a job posted and what it was handed.

The receiver (`endpoint.receiver`) already refuses to deliver a message twice (its own
watermark of delivered ids); this ledger is the application's independent check of that
promise, so a soak can *show* "0 duplicates" instead of assuming it. Per peer it counts the
messages and bytes the application posted and the messages and bytes it was delivered, and
remembers which message ids it was handed with a watermark plus the ids above it -- memory
bounded by the reordering window, not by the length of the run (a 30-minute soak delivers
hundreds of thousands of messages per connection).

Message ids are 32-bit and wrap (as the receiver's); an id more than 2**31 behind the
watermark counts as seen (it is from the distant past: a duplicate).
"""

from __future__ import annotations

from dataclasses import dataclass, field

_U32 = 0xFFFFFFFF
_HALF = 1 << 31


@dataclass
class PeerLedger:
    """One direction pair of one connection, as the application sees it."""

    posted_messages: int = 0
    posted_bytes: int = 0
    delivered_messages: int = 0
    delivered_bytes: int = 0
    duplicates: int = 0
    duplicate_bytes: int = 0
    _below: int = 0  # every id before this was delivered (a connection's ids start at 0)
    _above: set[int] = field(default_factory=set)  # delivered ids at or after _below

    def post(self, nbytes: int) -> None:
        self.posted_messages += 1
        self.posted_bytes += nbytes

    def count_duplicate(self, nbytes: int) -> None:
        """A duplicate the job caught below the message (a slice of a message striped over
        several QPs, seen twice on its QP: endpoint.workloads.Job)."""
        self.duplicates += 1
        self.duplicate_bytes += nbytes

    def deliver(self, msg_id: int, nbytes: int) -> bool:
        """Count one delivery; False (and counted as a duplicate) if `msg_id` was delivered
        before."""
        msg_id &= _U32
        behind = ((msg_id - self._below) & _U32) >= _HALF
        if behind or msg_id in self._above:
            self.count_duplicate(nbytes)
            return False
        self._above.add(msg_id)
        while self._below in self._above:
            self._above.remove(self._below)
            self._below = (self._below + 1) & _U32
        self.delivered_messages += 1
        self.delivered_bytes += nbytes
        return True

    def as_dict(self) -> dict[str, int]:
        return {
            "posted_messages": self.posted_messages,
            "posted_bytes": self.posted_bytes,
            "delivered_messages": self.delivered_messages,
            "delivered_bytes": self.delivered_bytes,
            "duplicates": self.duplicates,
            "duplicate_bytes": self.duplicate_bytes,
            "pending_ids": len(self._above),
        }


class Ledger:
    """Every peer of one job: ``post`` on send, ``deliver`` on each delivery handed up.
    `first_msg_id`: the first message id of every connection (the sender's, 0 by default)."""

    def __init__(self, first_msg_id: int = 0) -> None:
        self.peers: dict[str, PeerLedger] = {}
        self.first_msg_id = first_msg_id & _U32

    def _of(self, peer: str) -> PeerLedger:
        p = self.peers.get(peer)
        if p is None:
            p = self.peers[peer] = PeerLedger(_below=self.first_msg_id)
        return p

    def post(self, peer: str, nbytes: int) -> None:
        self._of(peer).post(nbytes)

    def deliver(self, peer: str, msg_id: int, nbytes: int) -> bool:
        return self._of(peer).deliver(msg_id, nbytes)

    def duplicate(self, peer: str, nbytes: int) -> None:
        self._of(peer).count_duplicate(nbytes)

    @property
    def duplicates(self) -> int:
        return sum(p.duplicates for p in self.peers.values())

    def as_dict(self) -> dict[str, dict[str, int]]:
        return {peer: p.as_dict() for peer, p in self.peers.items()}

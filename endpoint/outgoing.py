"""What a sender has handed out and not yet seen acknowledged: messages and their packets.

Its own module because two parts read these records: the sender, which creates them and
builds each packet's bytes, and its loss recovery (`endpoint.recovery`), which tracks them in
flight and decides which are lost.
"""

from __future__ import annotations

import zlib

# OutPacket.state
INFLIGHT, LOST, ACKED = 0, 1, 2


class OutMessage:
    __slots__ = ("msg_id", "data", "crc", "size", "next_offset", "outstanding", "started", "done")

    def __init__(self, msg_id: int, data: bytes, now: float) -> None:
        self.msg_id = msg_id
        self.data = memoryview(data)
        self.crc = zlib.crc32(data)
        self.size = len(data)
        self.next_offset = 0
        self.outstanding = 0  # packets created and not yet acknowledged
        self.started = now
        self.done = False


class OutPacket:
    __slots__ = (
        "psn",
        "msg",
        "offset",
        "length",
        "ev",
        "plane",
        "sent_at",
        "ts_ns",
        "transmissions",
        "state",
        "reason",
    )

    def __init__(self, psn: int, msg: OutMessage, offset: int, length: int) -> None:
        self.psn = psn
        self.msg = msg
        self.offset = offset
        self.length = length
        self.ev = -1
        self.plane = 0
        self.sent_at = 0.0
        self.ts_ns = 0
        self.transmissions = 0
        self.state = INFLIGHT
        self.reason = ""  # why it was last declared lost (a key of ConnectionStats.retransmits)

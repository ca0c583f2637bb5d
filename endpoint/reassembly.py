"""One message being placed by offset: arrival order does not matter, overlap is refused."""

from __future__ import annotations

import zlib
from bisect import bisect_right


class Reassembly:
    """Bytes of one message, placed where each packet says, with the ranges already filled.

    Ranges are kept merged (``starts``/``ends`` sorted, disjoint, non-adjacent), so a message
    arriving mostly in order stays a single range. A packet overlapping bytes already placed is
    refused rather than trusted: a correct sender never sends two PSNs covering the same bytes.
    """

    __slots__ = ("msg_len", "msg_crc", "buf", "starts", "ends", "filled")

    def __init__(self, msg_len: int, msg_crc: int) -> None:
        self.msg_len = msg_len
        self.msg_crc = msg_crc
        self.buf = bytearray(msg_len)
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.filled = 0

    def fits(self, offset: int, length: int) -> bool:
        """True if ``[offset, offset+length)`` is inside the message and not yet filled."""
        end = offset + length
        if end > self.msg_len:
            return False
        if length == 0:
            return self.msg_len == 0
        i = bisect_right(self.starts, offset) - 1
        if i >= 0 and self.ends[i] > offset:
            return False
        return not (i + 1 < len(self.starts) and self.starts[i + 1] < end)

    def place(self, offset: int, data: bytes | memoryview) -> None:
        """Copy ``data`` in; the caller checked ``fits`` first."""
        length = len(data)
        end = offset + length
        self.buf[offset:end] = data
        self.filled += length
        starts, ends = self.starts, self.ends
        i = bisect_right(starts, offset) - 1
        if i >= 0 and ends[i] == offset:  # extends the range on the left
            ends[i] = end
            if i + 1 < len(starts) and starts[i + 1] == end:
                ends[i] = ends[i + 1]
                del starts[i + 1], ends[i + 1]
        elif i + 1 < len(starts) and starts[i + 1] == end:  # extends the range on the right
            starts[i + 1] = offset
        else:
            starts.insert(i + 1, offset)
            ends.insert(i + 1, end)

    @property
    def complete(self) -> bool:
        return self.filled == self.msg_len

    def verify(self) -> bool:
        """End-to-end check: the placed message hashes to the sender's crc32."""
        return zlib.crc32(self.buf) == self.msg_crc

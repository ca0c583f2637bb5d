"""One message being placed by offset: arrival order does not matter, overlap is refused."""

from __future__ import annotations

import zlib
from bisect import bisect_right
from operator import itemgetter

_BY_OFFSET = itemgetter(0)


class Reassembly:
    """Bytes of one message, placed where each packet says, with the ranges already filled.

    Ranges are kept merged (``starts``/``ends`` sorted, disjoint, non-adjacent), so a message
    arriving mostly in order stays a single range. A packet overlapping bytes already placed is
    refused rather than trusted: a correct sender never sends two PSNs covering the same bytes.

    The bytes are not copied into a message-sized buffer as they arrive: each packet's payload
    is kept (a read-only view of its datagram) and the message is joined once, in offset order,
    when it is read (``buf``). A zeroed 1 MiB buffer, a copy into it and a copy out of it cost
    ~1.4 ns per byte; the join is one copy.
    """

    __slots__ = ("msg_len", "msg_crc", "_chunks", "_joined", "starts", "ends", "filled")

    def __init__(self, msg_len: int, msg_crc: int) -> None:
        self.msg_len = msg_len
        self.msg_crc = msg_crc
        self._chunks: list[tuple[int, bytes | memoryview]] = []  # (offset, payload) as placed
        self._joined: bytes | None = None
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
        """Keep ``data`` at ``offset``; the caller checked ``fits`` first. A view of mutable
        memory is copied (the caller may reuse it); bytes and read-only views are kept as is."""
        length = len(data)
        end = offset + length
        if type(data) is not bytes and (type(data) is not memoryview or not data.readonly):
            data = bytes(data)
        self._chunks.append((offset, data))
        self._joined = None
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
    def buf(self) -> bytes:
        """The message's bytes (zeros where nothing was placed yet), joined once per change."""
        joined = self._joined
        if joined is None:
            chunks = self._chunks
            chunks.sort(key=_BY_OFFSET)  # arrival order; mostly sorted already (timsort: O(n))
            if self.filled == self.msg_len:
                joined = b"".join([c for _, c in chunks])
                self._chunks = [(0, joined)]  # let the datagrams go
            else:
                parts: list[bytes | memoryview] = []
                at = 0
                for off, c in chunks:
                    if off > at:
                        parts.append(bytes(off - at))
                    parts.append(c)
                    at = off + len(c)
                parts.append(bytes(self.msg_len - at))
                joined = b"".join(parts)
            self._joined = joined
        return joined

    @property
    def complete(self) -> bool:
        return self.filled == self.msg_len

    def verify(self) -> bool:
        """End-to-end check: the placed message hashes to the sender's crc32."""
        return zlib.crc32(self.buf) == self.msg_crc

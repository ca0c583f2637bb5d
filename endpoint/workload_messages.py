"""The bytes of a workload message: a 16-byte header and a fixed pattern, built and checked.

Every message starts with a 16-byte header (magic ``MW``, kind, job, step, index) and the rest
is a fixed pattern, so the receiver checks each message end to end on top of the transport's
crc. Messages shorter than the header carry only the pattern's first bytes.
"""

from __future__ import annotations

import struct

HEADER = struct.Struct("!2sBBIII")  # magic, kind, version, job, step, index
MAGIC = b"MW"
K_FLOW, K_RING_DATA, K_RING_GO, K_RING_DONE, K_TRACE = 1, 2, 3, 4, 5
DONE_EXTRA = struct.Struct("!Q")  # DONE carries the latest finish time seen (ns)
# A trace message (endpoint.trace_role): step = the iteration, index = the collective instance
# (or the send's tag), then whether it is point to point, the schedule lane and the sequence
# number of the sender's messages to this receiver in that lane.
TRACE_EXTRA = struct.Struct("!BHI")
TRACE_HEAD = HEADER.size + TRACE_EXTRA.size

_BASE = bytes(range(256))
_patterns: dict[int, tuple[bytes, bytes]] = {}  # size -> (pattern, its tail after the header)


def _pattern_and_tail(n: int) -> tuple[bytes, bytes]:
    """The pattern of ``n`` bytes and its part after a message header, built once per size
    (a message is 1 MiB: rebuilding or slicing it per message cost ~1 ns per byte)."""
    pt = _patterns.get(n)
    if pt is None:
        p = (_BASE * (n // 256 + 1))[:n]
        if len(_patterns) > 16:
            _patterns.clear()
        pt = _patterns[n] = (p, p[HEADER.size :])
    return pt


def _pattern(n: int) -> bytes:
    return _pattern_and_tail(n)[0]


def make_message(
    kind: int, job: int, step: int, index: int, size: int, extra: bytes = b""
) -> bytes:
    head = HEADER.pack(MAGIC, kind, 1, job, step, index) + extra
    if size < len(head):
        if extra:
            raise ValueError("message too small for its control fields")
        return _pattern(size)
    # One copy of the pattern's bytes: no slice of it first.
    return b"".join((head, memoryview(_pattern(size))[len(head) :]))


def parse_message(data: bytes, job: int) -> tuple[int, int, int, bytes] | None:
    """(kind, step, index, extra) of a message of this job, or None if it is not one."""
    n = len(data)
    if n < HEADER.size:
        return (K_FLOW, 0, 0, b"") if data == _pattern(n) else None
    magic, kind, version, mjob, step, index = HEADER.unpack_from(data)
    if magic != MAGIC or version != 1 or mjob != job:
        return None
    extra = b""
    if kind == K_RING_DONE:
        if n < HEADER.size + DONE_EXTRA.size:
            return None
        extra = bytes(data[HEADER.size : HEADER.size + DONE_EXTRA.size])
    elif kind == K_TRACE:
        if n < TRACE_HEAD:
            return None
        extra = bytes(data[HEADER.size : TRACE_HEAD])
        if n > TRACE_HEAD and memoryview(data)[TRACE_HEAD:] != memoryview(_pattern(n))[TRACE_HEAD:]:
            return None
    elif n > HEADER.size:
        # The pattern's tail compared in place (memcmp), against a cached copy: no temporaries.
        if not isinstance(data, bytes):
            data = bytes(data)
        if not data.endswith(_pattern_and_tail(n)[1]):
            return None
    return kind, step, index, extra

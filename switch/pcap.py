"""A classic pcap file written by the switch itself, with virtual nanosecond timestamps.

Why the switch writes it: under time dilation a kernel capture (tcpdump on a veth) stamps
every frame with real time, N times too slow, and between two switches of a shared process
the frames never cross a veth at all (switch/local_links.py). The switch sees every frame a
port sends or receives, at the virtual instant it happens, so a capture it writes is the
datacenter's own trace. The format is the nanosecond variant of classic pcap (magic
0xa1b23c4d, LINKTYPE_ETHERNET): tcpdump, tshark, Wireshark and scapy read it, and
microsecond stamps would merge the frames of a 100 Gbps link (one 1500 B frame is 120 ns).

Each record keeps at most `snaplen` bytes of its frame and the frame's length on the wire
(`orig_len`; a trimmed packet is recorded as the header it was cut to). A file stops growing
at `max_bytes`: the frames it would exceed that with are counted (`not_written`), not kept.
Writes go to one buffer flushed in large pieces; `close()` writes what is left.
"""

from __future__ import annotations

import struct
from pathlib import Path

MAGIC_NS = 0xA1B23C4D
"""Classic pcap with nanosecond timestamps (the microsecond variant is 0xa1b2c3d4)."""
LINKTYPE_ETHERNET = 1
SNAPLEN_DEFAULT = 128
"""Bytes kept of each frame: Ethernet, IPv4, UDP, BTH and every MRC extension header fit
(docs/wire-format.md), and 128 B per record is ~10 % of a full frame's."""
HEADER = struct.Struct("<IHHiIII")
RECORD = struct.Struct("<IIII")
FLUSH_BYTES = 1 << 20
_NS = 1_000_000_000


class PcapWriter:
    """Appends records to one pcap file; `record(frame, t)` with `t` in virtual seconds."""

    __slots__ = ("path", "file", "snaplen", "max_bytes", "size", "buf", "written", "not_written")

    def __init__(self, path: str | Path, snaplen: int = SNAPLEN_DEFAULT, max_bytes: int = 0):
        if not 14 <= snaplen <= 262144:
            raise ValueError(f"snaplen: must be between 14 and 262144, got {snaplen!r}")
        self.path = str(path)
        self.snaplen = snaplen
        self.max_bytes = max_bytes  # 0: unbounded
        self.file = open(self.path, "wb")  # noqa: SIM115 - open until close()
        self.buf = bytearray(HEADER.pack(MAGIC_NS, 2, 4, 0, 0, snaplen, LINKTYPE_ETHERNET))
        self.size = len(self.buf)
        self.written = 0
        self.not_written = 0

    def record(self, frame: bytes | bytearray | memoryview, t: float, n: int = -1) -> None:
        """One record of `frame` at `t`; `n`: the length on the wire if `frame` is already
        only the head of it (as `head` cut it)."""
        if n < 0:
            n = len(frame)
        incl = min(len(frame), self.snaplen)
        size = self.size + RECORD.size + incl
        if self.max_bytes and size > self.max_bytes:
            self.not_written += 1
            return
        self.size = size
        sec, ns = divmod(round(t * _NS), _NS)
        buf = self.buf
        buf += RECORD.pack(sec, ns, incl, n)
        buf += frame[:incl]
        self.written += 1
        if len(buf) >= FLUSH_BYTES:
            self.file.write(buf)
            buf.clear()

    def close(self) -> None:
        if self.file.closed:
            return
        self.file.write(self.buf)
        self.buf.clear()
        self.file.close()

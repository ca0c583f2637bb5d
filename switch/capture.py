"""Packet capture on chosen ports of a switch, written by the switch (switch/pcap.py says why).

Capturing costs nothing on a port that is not captured: no test is added to any path a frame
of such a port takes. A captured port is switched onto paths that record its frames instead,
the way switch/impairment.py moves an impaired port off the inline paths:

- tx: the port's `transmit` (a ring socket's send, or an in-memory wire's) is wrapped by
  `PortCapture.send`, which records what the wire accepted, and the port loses its tx ring in
  the switch's inline paths (`Switch.tx_rings`, as local_links.py does), so that the per-frame
  loop (switch/fastpath.py) and the vector path (switch/vector.py) hand its frames to
  `Port.offer`, which ends in `transmit`. Every frame counted in the port's `tx_packets` is
  recorded (or counted as not written, past the file's cap).
- rx: the port's `rx_capture` is set, which makes it not `rx_clean`; the inline paths then
  hand its bursts to `Switch.receive_batch`, which records them and, if nothing else keeps the
  port off the inline path, forwards them inline. Every frame counted in `rx_packets` is
  recorded, including those the port's rx-side failure emulation then drops.

Timestamps are virtual seconds (contracts.clock): tx, the loop's clock when the frame goes on
the wire; rx, the clock the frame's burst was read (or delivered in memory) at. One file per
port (`<dir>/<switch>-<port>.pcap`); with direction `both` it holds both, as tcpdump on an
interface would.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from switch.pcap import SNAPLEN_DEFAULT, PcapWriter

if TYPE_CHECKING:
    from switch.dataplane import Switch
    from switch.port import Port

DIRECTIONS = ("tx", "rx", "both")


class PortCapture:
    """The capture of one port: its file, and the transmit function it wraps (tx)."""

    __slots__ = ("port", "writer", "clock", "inner", "ring", "tx", "rx", "tx0", "rx0")

    def __init__(
        self, port: Port, writer: PcapWriter, clock: Callable[[], float], tx: bool, rx: bool
    ) -> None:
        self.port = port
        self.writer = writer
        self.clock = clock
        self.inner = port.transmit
        self.ring = None
        self.tx = tx
        self.rx = rx
        self.tx0 = port.counters.tx_packets
        self.rx0 = port.counters.rx_packets

    def send(self, frame: bytes | bytearray | memoryview) -> bool:
        """The port's transmit while its tx is captured: the wire's, then the record.

        The clock and the frame's head are taken first: an in-memory wire delivers inside
        `inner`, the peer switch rewrites the frame in place as it forwards it, and its
        arrival there must not be stamped before its departure here."""
        t = self.clock()
        w = self.writer
        head = bytes(frame[: w.snaplen])
        n = len(frame)
        if self.inner(frame):
            w.record(head, t, n)
            return True
        return False

    def receive(self, batch, now: float) -> None:
        """Record a burst that arrived on the port (`Switch.receive_batch` calls it)."""
        record = self.writer.record
        for frame in batch:
            record(frame, now)

    def stats(self) -> dict:
        c = self.port.counters
        w = self.writer
        return {
            "file": os.path.basename(w.path),
            "written": w.written,
            "not_written": w.not_written,
            "bytes": w.size,
            # What the port's own counters say it sent / received while captured: written +
            # not_written equals their sum (the captured directions').
            "tx_packets": c.tx_packets - self.tx0 if self.tx else None,
            "rx_packets": c.rx_packets - self.rx0 if self.rx else None,
        }


class Capture:
    """Every captured port of one switch; `stop()` restores them and closes the files."""

    def __init__(
        self,
        sw: Switch,
        ports: list[str],
        directory: str,
        clock: Callable[[], float],
        direction: str = "both",
        snaplen: int = SNAPLEN_DEFAULT,
        max_bytes: int = 0,
    ) -> None:
        if direction not in DIRECTIONS:
            raise ValueError(f"direction: one of {', '.join(DIRECTIONS)}, got {direction!r}")
        if not ports:
            raise ValueError("ports: name at least one port")
        chosen = []
        for name in ports:
            port = sw.port_by_name.get(name) if isinstance(name, str) else None
            if port is None:
                raise ValueError(f"ports: no port {name!r} on {sw.name}")
            if port in chosen:
                raise ValueError(f"ports: {name!r} named twice")
            chosen.append(port)
        if not os.path.isdir(directory):
            raise ValueError(f"dir: no directory {directory!r}")
        self.sw = sw
        self.direction = direction
        self.ports: dict[str, PortCapture] = {}
        tx = direction in ("tx", "both")
        rx = direction in ("rx", "both")
        try:
            for port in chosen:
                path = os.path.join(directory, f"{sw.name}-{port.name}.pcap")
                writer = PcapWriter(path, snaplen, max_bytes)
                self.ports[port.name] = PortCapture(port, writer, clock, tx, rx)
        except OSError as exc:
            for pc in self.ports.values():
                pc.writer.close()
            raise ValueError(f"dir: cannot write there: {exc.strerror}") from None
        for pc in self.ports.values():
            port = pc.port
            if tx:
                port.transmit = pc.send
                pc.ring = sw.tx_rings[port.index]
                sw.tx_rings[port.index] = None
            if rx:
                port.rx_capture = pc.receive
        sw.refresh()  # the flow caches hold tx rings; rx_clean follows rx_capture

    def stop(self) -> dict[str, dict]:
        """Put the ports back on their own paths, flush and close the files; per port, what
        was captured (PortCapture.stats)."""
        out = {}
        for name, pc in self.ports.items():
            port = pc.port
            if pc.tx:
                port.transmit = pc.inner
                self.sw.tx_rings[port.index] = pc.ring
            if pc.rx:
                port.rx_capture = None
            pc.writer.close()
            out[name] = pc.stats()
        self.sw.refresh()
        return out

"""Per-byte and per-packet costs of the endpoint's hot spots, before and after issue 32, in one run.

    .venv/bin/python tools/endpoint_microbench.py [--repeat 5]

Pure (no sockets but a loopback UDP pair, no namespaces). Each "before" is the code as it was
before issue 32, copied here verbatim as the reference; each "after" is the module's code now,
on the data path ``endpoint.datapath`` chose (``TESTBED_DATAPATH=python`` for the Python twins)
and, where there is one, on the other as well. Prints ns per payload byte (or µs per packet)
and the before/after ratio; the best of ``--repeat`` runs of each, interleaved.
"""

from __future__ import annotations

import argparse
import time
import zlib
from bisect import bisect_right

from endpoint import codec, datapath, udp_io, workload_messages
from endpoint.reassembly import Reassembly

MSG = 1 << 20
PKT = 1420

# ----- before: the code as it was (verbatim) -----------------------------------------------------

_BASE = bytes(range(256))
_old_patterns: dict[int, bytes] = {}


def _old_pattern(n: int) -> bytes:
    p = _old_patterns.get(n)
    if p is None:
        p = (_BASE * (n // 256 + 1))[:n]
        if len(_old_patterns) > 16:
            _old_patterns.clear()
        _old_patterns[n] = p
    return p


def old_make_message(kind, job, step, index, size, extra=b""):
    head = workload_messages.HEADER.pack(workload_messages.MAGIC, kind, 1, job, step, index) + extra
    return head + _old_pattern(size)[len(head) :]


def old_parse_message(data, job):
    H = workload_messages.HEADER
    magic, kind, version, mjob, step, index = H.unpack_from(data)
    if magic != workload_messages.MAGIC or version != 1 or mjob != job:
        return None
    tail = len(data) - H.size
    if tail and data[H.size :] != _old_pattern(len(data))[H.size :]:
        return None
    return kind, step, index, b""


class OldReassembly:
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


_ZERO = bytes(4)


def old_data_packet_crc(p):  # endpoint.wire.data_packet_crc, which crc_ok called
    crc = zlib.crc32(p[:48])
    crc = zlib.crc32(_ZERO, crc)
    return zlib.crc32(p[52:], crc)


def old_seal(header, payload):
    crc = zlib.crc32(payload, zlib.crc32(header))
    return header[:48] + crc.to_bytes(4, "big") + payload


# ----- timing ------------------------------------------------------------------------------------


def best(fn, repeat: int, number: int) -> float:
    """Best seconds per call of fn over `repeat` runs of `number` calls."""
    out = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        for _ in range(number):
            fn()
        out = min(out, (time.perf_counter() - t) / number)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    r = args.repeat
    msg = workload_messages.make_message(workload_messages.K_FLOW, 7, 0, 1, MSG)
    assert msg == old_make_message(workload_messages.K_FLOW, 7, 0, 1, MSG)
    chunks = [(o, memoryview(msg)[o : o + PKT]) for o in range(0, MSG, PKT)]
    # the receiver's payloads are views into datagrams (codec.decode): emulate that
    dgrams = [(o, memoryview(bytes(52) + bytes(c))[52:]) for o, c in chunks]
    crc = zlib.crc32(msg)
    header = bytes(52)
    payload = msg[:PKT]
    pkt = old_seal(header, payload)
    rows = []

    def row(name, before, after, unit_bytes, note=""):
        rows.append((name, before, after, unit_bytes, note))

    def reasm_old():
        ra = OldReassembly(MSG, crc)
        for o, c in dgrams:
            ra.place(o, c)
        assert ra.verify()
        return bytes(ra.buf)

    def reasm_new():
        ra = Reassembly(MSG, crc)
        for o, c in dgrams:
            ra.place(o, c)
        assert ra.verify()
        return bytes(ra.buf)

    assert reasm_old() == reasm_new()
    n_msg = 20
    row(
        "make_message (1 MiB)",
        best(lambda: old_make_message(0, 7, 0, 1, MSG), r, n_msg),
        best(lambda: workload_messages.make_message(0, 7, 0, 1, MSG), r, n_msg),
        MSG,
    )
    assert workload_messages.parse_message(msg, 7) == old_parse_message(msg, 7)
    row(
        "parse_message (1 MiB)",
        best(lambda: old_parse_message(msg, 7), r, n_msg),
        best(lambda: workload_messages.parse_message(msg, 7), r, n_msg),
        MSG,
    )
    row(
        "reassembly place+verify+bytes (1 MiB)",
        best(reasm_old, r, 5),
        best(reasm_new, r, 5),
        MSG,
        "old and new Reassembly whole, fed 1420 B views into datagrams as the receiver does",
    )
    n_pkt = 20000
    burst = datapath.burst
    for name, fn in (("python", codec.data_crc_py), ("c", burst.data_crc if burst else None)):
        if fn is None:
            continue
        assert fn(pkt) == old_data_packet_crc(pkt)
        row(
            f"crc check on receive ({PKT} B), {name}",
            best(lambda: old_data_packet_crc(pkt), r, n_pkt),
            best(lambda fn=fn: fn(pkt), r, n_pkt),
            len(pkt),
        )
    for name, fn in (("python", codec._seal_py), ("c", burst.seal_data if burst else None)):
        if fn is None:
            continue
        assert fn(header, payload) == old_seal(header, payload)
        row(
            f"data packet seal: copy + crc ({PKT} B), {name}",
            best(lambda: old_seal(header, payload), r, n_pkt),
            best(lambda fn=fn: fn(header, payload), r, n_pkt),
            len(pkt),
        )
    rows.extend(io_rows(r))
    print(f"data path: {datapath.DATAPATH} ({datapath.REASON})")
    print(f"{'':48} {'before':>12} {'after':>12} {'after/before':>12}")
    for name, b, a, nbytes, note in rows:
        if nbytes:
            print(
                f"{name:48} {b / nbytes * 1e9:9.3f} ns/B {a / nbytes * 1e9:9.3f} ns/B {a / b:12.2f}"
            )
        else:
            print(f"{name:48} {b * 1e6:9.2f} µs/p {a * 1e6:9.2f} µs/p {a / b:12.2f}")
        if note:
            print(f"    ({note})")


def io_rows(repeat: int) -> list:
    """µs per datagram of a 64-datagram burst over loopback: Python recvmsg/sendto per
    datagram (before) against the C burst (after). Sender and receiver both in this process."""
    burst = datapath.burst
    if burst is None:
        return []
    rx = udp_io.open_rx("127.0.0.1", 0)
    port = rx.getsockname()[1]
    out = []
    try:
        payload = bytes(PKT + 52)
        batch = [(0, 0, "127.0.0.1", payload, 0x28 | (k & 3)) for k in range(64)]
        senders = {
            "python": udp_io.EvSocketSender(["127.0.0.1"], port, burst=None),
            "c": udp_io.EvSocketSender(["127.0.0.1"], port, burst=burst),
        }
        recv = {"python": udp_io.recv_batch_py, "c": udp_io.recv_batch_for(burst)}
        times = {}
        for name in ("python", "c"):
            tx = senders[name]
            rcv = recv[name]
            got: list = []

            def one(tx=tx, rcv=rcv, got=got) -> None:
                tx.send_many(batch)
                got.clear()
                while len(got) < 64:
                    if not rcv(rx, got, 64):
                        break

            one()
            times[name] = best(one, repeat, 200) / 64
        out.append(
            ("UDP send+recv, 64-datagram bursts, per datagram", times["python"], times["c"], 0, "")
        )
    finally:
        rx.close()
        for s in senders.values():
            s.close()
    return out


if __name__ == "__main__":
    main()

"""endpoint._burst against its Python twins: same inputs, same bytes (issue 32).

Pure: UDP sockets on 127.0.0.1 in this process, no namespaces. Skipped where the extension is
not built (the Python path is then the only one, and the other tests cover it).
"""

from __future__ import annotations

import os
import random
import socket
import zlib

import pytest

from endpoint import codec, udp_io, wire, workload_messages
from endpoint.reassembly import Reassembly

_burst = pytest.importorskip("endpoint._burst")

LO = "127.0.0.1"


def _rx() -> tuple[socket.socket, int]:
    s = udp_io.open_rx(LO, 0)
    return s, s.getsockname()[1]


def _free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((LO, 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _read_all(rx: socket.socket, recv, want: int) -> list:
    got: list = []
    for _ in range(1000):
        if len(got) >= want:
            break
        recv(rx, got, 64, True)
    return got


# ----- codec ------------------------------------------------------------------------------------


def test_data_crc_is_the_wire_definition_at_every_length_and_buffer_type():
    rng = random.Random(1)
    for n in [*range(0, 120), 1472, 9000, 65000]:
        data = rng.randbytes(n)
        want = wire.data_packet_crc(data)
        for buf in (data, bytearray(data), memoryview(data)):
            assert _burst.data_crc(buf) == want == codec.data_crc_py(buf), n


def test_seal_is_the_python_twin_and_encode_data_round_trips():
    rng = random.Random(2)
    for n in (0, 1, 1420, 8920):
        header = codec._DATA.pack(0x0A, 0, 0xFFFF, 5, 7, 0, 1, n, n, 9, 0, 0, 3, 4, 0)
        payload = rng.randbytes(n)
        sealed = _burst.seal_data(header, payload)
        assert sealed == codec._seal_py(header, payload)
        assert _burst.seal_data(header, memoryview(payload)) == sealed
        pkt = codec.decode(sealed)
        assert codec.crc_ok(sealed, pkt.pkt_crc) and bytes(pkt.payload) == payload
        bad = bytearray(sealed)
        bad[-1 if n else 0] ^= 1
        assert not codec.crc_ok(bad, pkt.pkt_crc)


@pytest.mark.parametrize("n", [0, 51, 53, 1000])
def test_seal_refuses_a_header_that_is_not_52_bytes(n):
    with pytest.raises(ValueError, match="52"):
        _burst.seal_data(bytes(n), b"x")


# ----- receive ----------------------------------------------------------------------------------


def test_recv_burst_and_recvmsg_read_the_same_datagrams_tos_and_sources():
    rx, port = _rx()
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.bind((LO, 0))
    rng = random.Random(3)
    sent = []
    try:
        for c_path in (False, True):
            sent.clear()
            for _ in range(150):
                tos = rng.choice((0, 0x28, 0x29, 0x2A, 0x2C, 0xB8, 0xFF & ~3))
                tx.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
                data = rng.randbytes(rng.choice((0, 1, 64, 1472, 9000)))
                tx.sendto(data, (LO, port))
                sent.append((data, tos, tx.getsockname()))
            recv = udp_io.recv_batch_for(_burst if c_path else None)
            assert _read_all(rx, recv, len(sent)) == sent
            out: list = []
            assert recv(rx, out, 64) == 0 and out == []  # empty socket: nothing, no error
    finally:
        rx.close()
        tx.close()


def test_recv_burst_drops_and_counts_a_datagram_longer_than_its_buffer():
    rx, port = _rx()
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for n in (10, 200, 100, 101, 5):
            tx.sendto(bytes(n), (LO, port))
        out: list = []
        assert _burst.recv_burst(rx.fileno(), out, 64, 100) == (3, 2)
        assert [len(d) for d, _tos in out] == [10, 100, 5]
    finally:
        rx.close()
        tx.close()


@pytest.mark.parametrize(
    ("args", "exc"),
    [((-1,), ValueError), ((2000,), ValueError), ((8, 0), ValueError), ((8, 70000), ValueError)],
)
def test_recv_burst_checks_its_limits(args, exc):
    rx, _ = _rx()
    try:
        with pytest.raises(exc):
            _burst.recv_burst(rx.fileno(), [], *args)
    finally:
        rx.close()


def test_recv_burst_on_a_bad_fd_raises_oserror():
    with pytest.raises(OSError):
        _burst.recv_burst(10_000, [], 4)


# ----- send -------------------------------------------------------------------------------------


def _batch(rng: random.Random, evs: list[int], n: int) -> list:
    return [
        (
            0,
            rng.choice(evs),
            LO,
            rng.randbytes(rng.choice((0, 1, 52, 1472, 4000))),
            rng.choice((0, 0x28, 0x29, 0xB8, 0x2E)),
        )
        for _ in range(n)
    ]


@pytest.mark.parametrize("kind", ["udp", "connected"])
def test_both_data_paths_send_the_same_datagrams(kind):
    """The same batches through the Python sender and the C one: the same payloads, ToS and
    source ports (EVs) arrive, in the same order, and the counters agree."""
    rx, port = _rx()
    rng = random.Random(4)
    evs = _free_ports(5)
    batches = [_batch(rng, evs, n) for n in (1, 7, 64, 200)]
    seen = {}
    try:
        for name, burst in (("python", None), ("c", _burst)):
            tx = udp_io.open_sender(kind, [LO], port, burst=burst)
            got = []
            for b in batches:
                tx.send_many(b)
                assert tx.flush()
                got.extend(_read_all(rx, udp_io.recv_batch_py, len(b)))
            seen[name] = ([(d, tos, addr[1]) for d, tos, addr in got], tx.sent, tx.errors)
            tx.close()
    finally:
        rx.close()
    want = [(p, tos, ev) for b in batches for _plane, ev, _dst, p, tos in b]
    assert seen["python"] == seen["c"] == (want, len(want), 0)


@pytest.mark.skipif(os.geteuid() != 0, reason="raw sockets need CAP_NET_RAW")
def test_both_data_paths_send_the_same_raw_frames():
    rx, port = _rx()
    rng = random.Random(5)
    evs = [40001, 40002, 40003]
    batch = _batch(rng, evs, 50)
    seen = {}
    try:
        for name, burst in (("python", None), ("c", _burst)):
            tx = udp_io.open_sender("raw", [LO], port, burst=burst)
            tx.send_many(batch)
            assert tx.flush()
            got = _read_all(rx, udp_io.recv_batch_py, len(batch))
            seen[name] = [(d, tos, addr[1]) for d, tos, addr in got]
            tx.close()
    finally:
        rx.close()
    assert seen["python"] == seen["c"] == [(p, tos, ev) for _, ev, _, p, tos in batch]


def test_a_send_that_would_block_queues_the_rest_in_order():
    """A tiny socket buffer and no reader: the C path stops at the first EAGAIN, queues the
    rest in order, and flush sends it once there is room; counts as the Python twin does."""
    rx, port = _rx()
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    (ev,) = _free_ports(1)
    tx = udp_io.EvSocketSender([LO], port, sndbuf=4096, burst=_burst)
    try:
        batch = [(0, ev, LO, k.to_bytes(4, "big") * 400, 0) for k in range(300)]
        tx.send_many(batch)
        tx.send_many(batch[:2])  # behind a backlog: queued, not sent
        sent_first = tx.sent
        got: list = []
        for _ in range(2000):
            if tx.flush() and len(got) >= 302:
                break
            udp_io.recv_batch_py(rx, got, 64)
        got.extend(_read_all(rx, udp_io.recv_batch_py, 302 - len(got)))
        assert [d for d, _ in got] == [p for *_, p, _ in batch + batch[:2]]
        assert tx.sent == 302 and tx.errors == 0
        if sent_first < 300:  # the buffer did fill (it does on Linux at 4 KiB)
            assert tx.blocked >= 1
    finally:
        tx.close()
        rx.close()


def test_a_refused_connected_send_is_an_error_and_not_retried():
    (port,) = _free_ports(1)  # nobody listens: ICMP port unreachable comes back
    tx = udp_io.ConnectedSender([LO], port, burst=_burst)
    try:
        for _ in range(5):
            tx.send_many([(0, 0, LO, b"x", 0)] * 3)
        assert not tx.backlog and tx.sent + tx.errors == 15 and tx.errors >= 1
    finally:
        tx.close()


@pytest.mark.parametrize(
    ("item", "exc"),
    [
        ((3,), TypeError),
        ("not a tuple", TypeError),
        ((-1, "127.0.0.1", 1, 0, b""), ValueError),
        ((0, "127.0.0.1", 70000, 0, b""), ValueError),
        ((0, "127.0.0.1", 1, 256, b""), ValueError),
        ((0, "127.0.0.1", 1, -2, b""), ValueError),
        ((0, "not-an-address", 1, 0, b""), ValueError),
        ((0, 12, 1, 0, b""), TypeError),
        ((0, "127.0.0.1", 1, 0, 12), TypeError),
        ((0, "127.0.0.1", "1", 0, b""), TypeError),
    ],
)
def test_send_burst_refuses_a_bad_item_and_holds_no_buffer(item, exc):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        good = (s.fileno(), LO, 9, 0, bytearray(b"held?"))
        with pytest.raises(exc):
            _burst.send_burst([good, good, item])
        good[4].extend(b"!")  # a buffer still exported would make this raise BufferError
    finally:
        s.close()


def test_send_burst_on_a_closed_fd_counts_errors():
    assert _burst.send_burst([(10_000, LO, 9, 0, b"x")] * 3) == (3, 0, 3)
    assert _burst.send_burst([]) == (0, 0, 0)
    with pytest.raises(TypeError):
        _burst.send_burst(((10_000, LO, 9, 0, b"x"),))


# ----- the per-byte changes -----------------------------------------------------------------------


def test_reassembly_joins_in_offset_order_with_zeros_for_holes():
    msg = random.Random(6).randbytes(10_000)
    r = Reassembly(len(msg), zlib.crc32(msg))
    order = list(range(0, len(msg), 1000))
    random.Random(7).shuffle(order)
    scratch = bytearray(1000)
    for k, off in enumerate(order):
        if k == 3:
            hole = bytes(r.buf)
            assert len(hole) == len(msg)
        chunk = memoryview(msg)[off : off + 1000]
        if k % 2:  # a mutable buffer the caller reuses: copied, not kept
            scratch[:] = chunk
            r.place(off, memoryview(scratch))
            scratch[:] = bytes(1000)
        else:
            r.place(off, chunk)
    assert r.complete and r.verify() and bytes(r.buf) == msg
    placed = {o for o in order[:3]}
    for off in range(0, len(msg), 1000):
        want = msg[off : off + 1000] if off in placed else bytes(1000)
        assert hole[off : off + 1000] == want


def test_parse_message_takes_any_buffer_and_checks_every_pattern_byte():
    data = workload_messages.make_message(workload_messages.K_FLOW, 3, 1, 2, 5000)
    for buf in (data, bytearray(data), memoryview(data)):
        assert workload_messages.parse_message(buf, 3) == (workload_messages.K_FLOW, 1, 2, b"")
    for at in (16, 17, 2000, 4999):
        bad = bytearray(data)
        bad[at] ^= 0x80
        assert workload_messages.parse_message(bytes(bad), 3) is None
    assert workload_messages.parse_message(data[:-1], 3) == (workload_messages.K_FLOW, 1, 2, b"")
    assert workload_messages.parse_message(data + b"\x00", 3) is None

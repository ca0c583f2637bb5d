"""Forged and malformed packets are dropped and counted; nothing raises; no bad byte is delivered."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from endpoint import codec
from endpoint.config import TransportConfig
from endpoint.psn import psn_add
from endpoint.simnet import PairHarness, SimNet
from endpoint.wire import NACK_TRIMMED, TOS_CONTROL, TOS_DATA

QP_A, QP_B = 0x11, 0x22
EV = 49152


def _pair(seed: int = 1) -> tuple[SimNet, PairHarness, list[bytes]]:
    net = SimNet(seed=seed)
    h = PairHarness(net, TransportConfig(), qp_a=QP_A, qp_b=QP_B)
    rng = random.Random(seed)
    for n in (5000, 30_000, 1):
        h.send_ab(rng.randbytes(n))
    return net, h, []


def _data(
    psn: int,
    msg_id: int = 0,
    msg_len: int = 5000,
    offset: int = 0,
    payload: bytes = b"x" * 100,
    **kw,
):
    return codec.encode_data(QP_B, psn, offset, msg_id, msg_len, EV, 1, 0, payload, **kw)


def test_each_kind_of_bad_packet_is_dropped_and_counted() -> None:
    net, h, _ = _pair()
    b, cb, ca = h.b, h.cb, h.ca
    base = cb.receiver.rcv_nxt
    cases = [
        ("unknown_qp", codec.encode_data(0x999, base, 0, 0, 10, EV, 1, 0, b"x" * 10)),
        ("malformed", bytes([0x04]) + bytes(60)),  # RC SEND ONLY: not an opcode of this format
        ("malformed", _data(base)[:30]),  # header cut short
        ("malformed", _data(base, payload_len=50)),  # payload longer than the header says
        ("malformed", b""),
    ]
    for reason, raw in cases:
        before = b.drops[reason]
        b.on_datagram(raw, TOS_DATA, 0.0)
        assert b.drops[reason] == before + 1, reason
    qp_cases = [
        ("out_of_window", _data(psn_add(base, 10_000))),
        ("bad_version", _data(base, bth_flags=0x01)),
        ("bad_crc", _data(base, pkt_crc=0x12345678)),
        ("bad_length", _data(base, offset=4950)),  # offset + length beyond the message
        ("message_too_big", _data(base, msg_len=2**31)),
    ]
    for reason, raw in qp_cases:
        before = cb.stats.drops[reason]
        b.on_datagram(raw, TOS_DATA, 0.0)
        assert cb.stats.drops[reason] == before + 1, reason
    assert cb.receiver.rcv_nxt == base  # none of them consumed a PSN
    # Sender side: an ACK for PSNs never sent, a NACK for nothing outstanding, a stray probe-ack.
    a = h.a
    a.on_datagram(codec.encode_ack(QP_A, 5, psn_add(base, 500), 0, 0, EV, 0, 1), TOS_CONTROL, 0.0)
    assert ca.stats.drops["bad_ack"] == 1
    a.on_datagram(codec.encode_nack(QP_A, 77, base, EV, NACK_TRIMMED, 1), TOS_CONTROL, 0.0)
    assert ca.stats.counters["stale_nack"] == 1
    a.on_datagram(codec.encode_probe_ack(QP_A, EV, 0, 1), TOS_CONTROL, 0.0)
    assert ca.stats.counters["probe_ack_ignored"] == 1
    assert h.run(5.0)
    assert set(h.received_ab) == set(h.sent_ab)
    assert all(h.received_ab[k] == [v] for k, v in h.sent_ab.items())


def test_lying_message_metadata_mid_transfer_is_refused() -> None:
    """Once a message's first packet fixed its length and crc, packets disagreeing are dropped."""
    net, h, _ = _pair()
    cb = h.cb
    net.run(0.0001)  # some packets of message 0 have arrived
    r = cb.receiver
    assert 0 in r._reasm or cb.stats.counters["messages_delivered"] > 0
    nxt = r.rcv_nxt
    if 0 in r._reasm:
        msg_crc = r._reasm[0].msg_crc
        forged = codec.encode_data(QP_B, nxt, 0, 0, 4000, EV, 1, msg_crc, b"y" * 100)
        h.b.on_datagram(forged, TOS_DATA, net.now)
        assert cb.stats.drops["inconsistent_message"] == 1
    assert h.run(5.0)
    assert all(h.received_ab[k] == [v] for k, v in h.sent_ab.items())


garbage = st.one_of(
    st.binary(max_size=200),
    st.builds(
        lambda op, rest: bytes([op]) + rest,
        st.sampled_from([0x0A, 0x11, 0xC0, 0xC1]),
        st.binary(max_size=120),
    ),
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
@given(st.integers(0, 10_000), garbage, st.floats(0.0, 0.3))
def test_fuzzing_both_ends_during_a_transfer_never_raises_or_corrupts(
    seed: int, junk: bytes, rate: float
) -> None:
    """Random garbage, plus genuine data packets with flipped bits or cut short, are thrown at
    both endpoints throughout a transfer; delivery stays exactly-once and byte-exact."""
    net, h, _ = _pair(seed)
    rng = random.Random(seed)
    inject = net.inject

    def evil(src, tx):
        if rng.random() >= rate:
            inject(src, tx)
            return
        if rng.random() < 0.5:  # the genuine packet also arrives, or it was lost to corruption
            inject(src, tx)
        raw = bytearray(tx.payload)
        dst = net.endpoints[tx.peer]
        if tx.tos == TOS_DATA and raw:
            choice = rng.randrange(3)
            if choice == 0:  # flipped bit somewhere: the packet CRC must catch it
                raw[rng.randrange(len(raw))] ^= 1 << rng.randrange(8)
            elif choice == 1:  # cut: looks like a trim, or is malformed
                raw = raw[: rng.randrange(len(raw))]
            else:
                raw = bytearray(junk)
        else:  # control packets: truncations and garbage only (see docs/transport.md)
            raw = raw[: rng.randrange(len(raw))] if raw and rng.random() < 0.5 else bytearray(junk)
        dst.on_datagram(bytes(raw), tx.tos, net.now)

    net.inject = evil
    assert h.run(30.0)
    assert set(h.received_ab) == set(h.sent_ab)
    assert all(h.received_ab[k] == [v] for k, v in h.sent_ab.items())
    assert h.cb.stats.drops["message_crc"] == 0

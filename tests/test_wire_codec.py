"""The struct codec is byte-identical to the scapy layers, and decode() fails in one way only."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from endpoint import codec
from endpoint.wire import (
    AETH,
    BTH,
    OP_MRC_PROBE,
    OP_MRC_PROBE_ACK,
    OP_RC_ACKNOWLEDGE,
    SYNDROME_ACK,
    SYNDROME_NAK,
    MRCData,
    MRCNack,
    MRCProbe,
    MRCProbeAck,
    MRCSack,
)

u8 = st.integers(0, 0xFF)
u16 = st.integers(0, 0xFFFF)
u24 = st.integers(0, 0xFFFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
u64 = st.integers(0, 2**64 - 1)

bth_fields = st.fixed_dictionaries(
    {
        "dqpn": u24,
        "psn": u24,
        "ackreq": st.integers(0, 1),
        "pkey": u16,
        "bth_flags": u8,
        "resv8": u8,
        "resv7": st.integers(0, 0x7F),
    }
)


def scapy_bth(opcode: int, f: dict) -> BTH:
    bf = f["bth_flags"]
    return BTH(
        opcode=opcode,
        se=bf >> 7,
        migreq=(bf >> 6) & 1,
        padcnt=(bf >> 4) & 3,
        tver=bf & 0xF,
        pkey=f["pkey"],
        resv8=f["resv8"],
        dqpn=f["dqpn"],
        ackreq=f["ackreq"],
        resv7=f["resv7"],
        psn=f["psn"],
    )


def assert_fields(obj: object, expected: dict) -> None:
    for name, value in expected.items():
        assert getattr(obj, name) == value, name


data_fields = st.fixed_dictionaries(
    {
        "offset": u64,
        "msg_id": u32,
        "msg_len": u32,
        "ev": u16,
        "flags": u8,
        "resv": u8,
        "send_ts": u64,
        "msg_crc": u32,
    }
)


@settings(max_examples=150, deadline=None)
@given(bth_fields, data_fields, st.binary(max_size=300), st.booleans())
def test_data_codec_equals_scapy(b: dict, d: dict, payload: bytes, explicit: bool) -> None:
    # explicit=False exercises the auto-filled payload_len and packet CRC on both sides.
    crc = d["msg_crc"] ^ 0x5A5A5A5A if explicit else None
    plen = len(payload) if explicit else None
    layer = scapy_bth(0x0A, b) / MRCData(payload_len=plen, pkt_crc=crc, **d) / Raw(payload)
    ref = bytes(layer)
    assert codec.encode_data(payload=payload, pkt_crc=crc, **b, **d) == ref
    pkt = codec.decode(ref)
    assert isinstance(pkt, codec.DataPacket)
    assert_fields(pkt, {**b, **d, "payload_len": len(payload)})
    assert bytes(pkt.payload) == payload and not pkt.trimmed
    if explicit:
        assert pkt.pkt_crc == crc
    else:
        assert pkt.pkt_crc == zlib.crc32(ref[:48] + bytes(4) + ref[52:])
        assert codec.crc_ok(ref, pkt.pkt_crc)
        # A flipped bit anywhere outside the CRC field itself (BTH, extension, payload) is caught.
        for at in [10, 30, *([len(ref) - 1] if payload else [])]:
            flipped = bytearray(ref)
            flipped[at] ^= 0x10
            assert not codec.crc_ok(flipped, pkt.pkt_crc)
    # The scapy stack dissects what the codec built (bind_layers selects MRCData by opcode).
    again = BTH(codec.encode_data(payload=payload, **b, **d))
    assert again[MRCData].msg_id == d["msg_id"] and bytes(again[MRCData].payload) == payload


ack_fields = st.fixed_dictionaries(
    {
        "msn": u24,
        "cum_psn": u24,
        "sack_base": u24,
        "sack_bitmap": u64,
        "ev_echo": u16,
        "ecn_echo": u8,
        "flags": u8,
        "ts_echo": u64,
        "coalesced": u8,
        "ack_delay": u32,
        "resv1": u8,
    }
)


@settings(max_examples=150, deadline=None)
@given(bth_fields, ack_fields)
def test_ack_codec_equals_scapy(b: dict, a: dict) -> None:
    sack = {k: v for k, v in a.items() if k != "msn"}
    ref = bytes(
        scapy_bth(OP_RC_ACKNOWLEDGE, b)
        / AETH(syndrome=SYNDROME_ACK, msn=a["msn"])
        / MRCSack(**sack)
    )
    assert codec.encode_ack(**b, **a) == ref
    pkt = codec.decode(ref)
    assert isinstance(pkt, codec.AckPacket)
    assert_fields(pkt, {**b, **a})
    assert MRCSack in BTH(ref)


nack_fields = st.fixed_dictionaries(
    {
        "msn": u24,
        "cum_psn": u24,
        "ev": u16,
        "reason": u8,
        "ts_echo": u64,
        "resv0": u8,
        "resv1": u8,
    }
)


@settings(max_examples=150, deadline=None)
@given(bth_fields, nack_fields)
def test_nack_codec_equals_scapy(b: dict, n: dict) -> None:
    ext = {k: v for k, v in n.items() if k != "msn"}
    ref = bytes(
        scapy_bth(OP_RC_ACKNOWLEDGE, b) / AETH(syndrome=SYNDROME_NAK, msn=n["msn"]) / MRCNack(**ext)
    )
    assert codec.encode_nack(**b, **n) == ref
    pkt = codec.decode(ref)
    assert isinstance(pkt, codec.NackPacket)
    assert_fields(pkt, {**b, **n})
    assert MRCNack in BTH(ref)


probe_fields = st.fixed_dictionaries({"ev": u16, "probe_seq": u32, "ts": u64, "resv": u16})


@settings(max_examples=150, deadline=None)
@given(bth_fields, probe_fields, st.booleans())
def test_probe_codec_equals_scapy(b: dict, p: dict, is_ack: bool) -> None:
    if is_ack:
        ext = MRCProbeAck(
            ev_echo=p["ev"], probe_seq=p["probe_seq"], ts_echo=p["ts"], resv=p["resv"]
        )
        ref = bytes(scapy_bth(OP_MRC_PROBE_ACK, b) / ext)
        mine = codec.encode_probe_ack(
            ev_echo=p["ev"], probe_seq=p["probe_seq"], ts_echo=p["ts"], resv=p["resv"], **b
        )
        expect = {"ev_echo": p["ev"], "ts_echo": p["ts"], "probe_seq": p["probe_seq"]}
        cls = codec.ProbeAckPacket
    else:
        ext = MRCProbe(ev=p["ev"], probe_seq=p["probe_seq"], send_ts=p["ts"], resv=p["resv"])
        ref = bytes(scapy_bth(OP_MRC_PROBE, b) / ext)
        mine = codec.encode_probe(
            ev=p["ev"], probe_seq=p["probe_seq"], send_ts=p["ts"], resv=p["resv"], **b
        )
        expect = {"ev": p["ev"], "send_ts": p["ts"], "probe_seq": p["probe_seq"]}
        cls = codec.ProbePacket
    assert mine == ref
    pkt = codec.decode(ref)
    assert type(pkt) is cls
    assert_fields(pkt, {**b, **expect, "resv": p["resv"]})
    assert type(ext) in [type(layer) for layer in BTH(ref).iterpayloads()]


def test_full_frame_dissects_through_udp_4791() -> None:
    """Importing endpoint.wire binds BTH to UDP dport 4791: a raw frame dissects to the end."""
    body = codec.encode_data(7, 42, 2800, 9, 10_000, 49_200, 123, 0xDEADBEEF, b"x" * 100)
    frame = bytes(Ether() / IP(tos=42) / UDP(sport=49_200, dport=4791) / Raw(body))
    pkt = Ether(frame)
    assert pkt[BTH].dqpn == 7 and pkt[BTH].psn == 42
    assert pkt[MRCData].offset == 2800 and pkt[MRCData].ev == 49_200
    assert "MRCData" in pkt.summary()
    ack = Ether(
        bytes(Ether() / IP() / UDP(dport=4791) / Raw(codec.encode_ack(1, 2, 3, 4, 5, 6, 7, 8)))
    )
    assert ack[MRCSack].cum_psn == 3 and ack[AETH].syndrome == SYNDROME_ACK


def _valid_packets() -> list[bytes]:
    return [
        codec.encode_data(1, 2, 0, 3, 100, 5, 6, 7, b"p" * 40),
        codec.encode_ack(1, 2, 3, 4, 5, 6, 7, 8),
        codec.encode_nack(1, 2, 3, 4, 1, 8),
        codec.encode_probe(1, 2, 3, 4),
        codec.encode_probe_ack(1, 2, 3, 4),
    ]


@pytest.mark.parametrize("index", range(5))
def test_every_truncation_is_malformed_or_trimmed(index: int) -> None:
    full = _valid_packets()[index]
    for cut in range(len(full)):
        prefix = full[:cut]
        if index == 0 and cut >= codec.DATA_HEADER_LEN:
            pkt = codec.decode(prefix)  # header intact, payload cut: that is a trimmed packet
            assert pkt.trimmed and bytes(pkt.payload) == full[codec.DATA_HEADER_LEN : cut]
            continue
        with pytest.raises(codec.MalformedPacket):
            codec.decode(prefix)


def test_lying_lengths_are_malformed() -> None:
    longer = codec.encode_data(1, 2, 0, 3, 100, 5, 6, 7, b"p" * 40, payload_len=39)
    with pytest.raises(codec.MalformedPacket):
        codec.decode(longer)
    with pytest.raises(codec.MalformedPacket):
        codec.decode(codec.encode_ack(1, 2, 3, 4, 5, 6, 7, 8) + b"\0")
    with pytest.raises(codec.MalformedPacket):
        codec.decode(bytes([0x04]) + bytes(60))  # RC SEND ONLY: not an opcode of this format
    bad_syndrome = bytearray(codec.encode_ack(1, 2, 3, 4, 5, 6, 7, 8))
    bad_syndrome[12] = 0x20
    with pytest.raises(codec.MalformedPacket):
        codec.decode(bytes(bad_syndrome))


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=120),
        st.builds(
            lambda op, rest: bytes([op]) + rest,
            st.sampled_from([0x0A, 0x11, 0xC0, 0xC1]),
            st.binary(max_size=80),
        ),
        st.builds(
            lambda i, cut, junk: _valid_packets()[i][:cut] + junk,
            st.integers(0, 4),
            st.integers(0, 60),
            st.binary(max_size=8),
        ),
    )
)
def test_garbage_raises_only_malformed(data: bytes) -> None:
    try:
        pkt = codec.decode(data)
    except codec.MalformedPacket:
        return
    # Anything accepted must re-encode to exactly the input: decode lost nothing, invented nothing.
    assert _reencode(pkt) == data


def _reencode(p: codec.Packet) -> bytes:
    bth = {
        "dqpn": p.dqpn,
        "psn": p.psn,
        "ackreq": p.ackreq,
        "pkey": p.pkey,
        "bth_flags": p.bth_flags,
        "resv8": p.resv8,
        "resv7": p.resv7,
    }
    if isinstance(p, codec.DataPacket):
        return codec.encode_data(
            offset=p.offset,
            msg_id=p.msg_id,
            msg_len=p.msg_len,
            ev=p.ev,
            send_ts=p.send_ts,
            msg_crc=p.msg_crc,
            payload=bytes(p.payload),
            flags=p.flags,
            pkt_crc=p.pkt_crc,
            payload_len=p.payload_len,
            resv=p.resv,
            **bth,
        )
    if isinstance(p, codec.AckPacket):
        return codec.encode_ack(
            cum_psn=p.cum_psn,
            sack_base=p.sack_base,
            sack_bitmap=p.sack_bitmap,
            ev_echo=p.ev_echo,
            ecn_echo=p.ecn_echo,
            ts_echo=p.ts_echo,
            flags=p.flags,
            msn=p.msn,
            coalesced=p.coalesced,
            ack_delay=p.ack_delay,
            resv1=p.resv1,
            **bth,
        )
    if isinstance(p, codec.NackPacket):
        return codec.encode_nack(
            cum_psn=p.cum_psn,
            ev=p.ev,
            reason=p.reason,
            ts_echo=p.ts_echo,
            msn=p.msn,
            resv0=p.resv0,
            resv1=p.resv1,
            **bth,
        )
    if isinstance(p, codec.ProbePacket):
        return codec.encode_probe(
            ev=p.ev, probe_seq=p.probe_seq, send_ts=p.send_ts, resv=p.resv, **bth
        )
    return codec.encode_probe_ack(
        ev_echo=p.ev_echo, probe_seq=p.probe_seq, ts_echo=p.ts_echo, resv=p.resv, **bth
    )

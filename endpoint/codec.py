"""Hot-path encoder/decoder for the MRC-style headers: precompiled ``struct``, no scapy.

``endpoint.wire`` (scapy) is the definition of the format; this module is the fast path the
transport uses per packet, and ``tests/test_wire_codec.py`` proves the two byte-identical.

Decoding is structural only: it raises :class:`MalformedPacket` — and nothing else — when the
bytes cannot be a packet of this format (too short for their header, unknown opcode or AETH
syndrome, a payload longer than the header says). Everything semantic (is this QP known, is the
PSN in the window, does the offset fit the message) is the transport's job. A data payload
shorter than its header says is *not* malformed: it is how a trimmed packet looks.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from contracts.framing import BTH_LEN
from endpoint.datapath import burst as _burst
from endpoint.wire import (
    OP_MRC_PROBE,
    OP_MRC_PROBE_ACK,
    OP_RC_ACKNOWLEDGE,
    OP_RC_RDMA_WRITE_ONLY,
    PKT_CRC_AT,
    SYNDROME_ACK,
    SYNDROME_NAK,
)

__all__ = [
    "AckPacket",
    "DataPacket",
    "MalformedPacket",
    "NackPacket",
    "ProbeAckPacket",
    "ProbePacket",
    "crc_ok",
    "decode",
    "encode_ack",
    "encode_data",
    "encode_nack",
    "encode_probe",
    "encode_probe_ack",
]

_M24 = 0xFFFFFF
_BTH = ">BBHII"  # opcode, SE|M|pad|tver, P_Key, resv8|dqpn, A|resv7|psn
_DATA = struct.Struct(_BTH + "QIIIHBBQII")
# + AETH, coalesced|cum word, base word, bitmap, ev, ecn, flags, ts, ack_delay
_ACK = struct.Struct(_BTH + "IIIQHBBQI")
_NACK = struct.Struct(_BTH + "IIHBBQ")  # + AETH, cum word, ev, reason, resv, ts
_PROBE = struct.Struct(_BTH + "HHIQ")  # ev, resv, seq, ts (same layout for PROBE-ACK)
DATA_HEADER_LEN = _DATA.size
ACK_LEN = _ACK.size
NACK_LEN = _NACK.size
PROBE_LEN = _PROBE.size


class MalformedPacket(ValueError):
    """The bytes are not a packet of the MRC-style format (the only exception decode raises)."""


@dataclass(slots=True)
class _BthPart:
    """BTH fields every packet carries. ``bth_flags`` is the raw SE|M|PadCnt|TVer byte."""

    dqpn: int
    psn: int
    ackreq: int = 0
    pkey: int = 0xFFFF
    bth_flags: int = 0
    resv8: int = 0
    resv7: int = 0

    @property
    def tver(self) -> int:
        return self.bth_flags & 0x0F


@dataclass(slots=True)
class DataPacket(_BthPart):
    offset: int = 0
    msg_id: int = 0
    payload_len: int = 0
    msg_len: int = 0
    ev: int = 0
    flags: int = 0
    resv: int = 0
    send_ts: int = 0
    msg_crc: int = 0
    pkt_crc: int = 0
    payload: bytes | memoryview = b""

    @property
    def trimmed(self) -> bool:
        """A switch cut the payload (it is shorter than the header says)."""
        return len(self.payload) < self.payload_len


@dataclass(slots=True)
class AckPacket(_BthPart):
    msn: int = 0
    cum_psn: int = 0
    sack_base: int = 0
    sack_bitmap: int = 0
    ev_echo: int = 0
    ecn_echo: int = 0
    flags: int = 0
    ts_echo: int = 0
    coalesced: int = 0  # in-order data packets answered before the triggering one
    resv1: int = 0
    ack_delay: int = 0  # ns the receiver held the ACK


@dataclass(slots=True)
class NackPacket(_BthPart):
    msn: int = 0
    cum_psn: int = 0
    ev: int = 0
    reason: int = 0
    ts_echo: int = 0
    resv0: int = 0
    resv1: int = 0


@dataclass(slots=True)
class ProbePacket(_BthPart):
    ev: int = 0
    probe_seq: int = 0
    send_ts: int = 0
    resv: int = 0


@dataclass(slots=True)
class ProbeAckPacket(_BthPart):
    ev_echo: int = 0
    probe_seq: int = 0
    ts_echo: int = 0
    resv: int = 0


Packet = DataPacket | AckPacket | NackPacket | ProbePacket | ProbeAckPacket


def encode_data(
    dqpn: int,
    psn: int,
    offset: int,
    msg_id: int,
    msg_len: int,
    ev: int,
    send_ts: int,
    msg_crc: int,
    payload: bytes | memoryview,
    flags: int = 0,
    ackreq: int = 1,
    pkey: int = 0xFFFF,
    bth_flags: int = 0,
    pkt_crc: int | None = None,
    payload_len: int | None = None,
    resv8: int = 0,
    resv7: int = 0,
    resv: int = 0,
) -> bytes:
    """One data packet (UDP payload). ``pkt_crc``/``payload_len`` default to the truth."""
    if payload_len is None:
        payload_len = len(payload)
    header = _DATA.pack(
        OP_RC_RDMA_WRITE_ONLY,
        bth_flags,
        pkey,
        (resv8 << 24) | dqpn,
        (ackreq << 31) | (resv7 << 24) | psn,
        offset,
        msg_id,
        payload_len,
        msg_len,
        ev,
        flags,
        resv,
        send_ts,
        msg_crc,
        0 if pkt_crc is None else pkt_crc,
    )
    if pkt_crc is None:
        return _seal(header, payload)
    return header + payload


_ZERO_CRC = bytes(4)


def _seal_py(header: bytes, payload: bytes | memoryview) -> bytes:
    """Header + payload with the header's crc field set to the crc32 of both, that field taken
    as zero: Python twin of ``endpoint._burst.seal_data``."""
    if len(header) != DATA_HEADER_LEN:
        raise ValueError(f"seal_data: header of {len(header)} bytes, expected {DATA_HEADER_LEN}")
    head = header[:PKT_CRC_AT]
    crc = zlib.crc32(payload, zlib.crc32(_ZERO_CRC, zlib.crc32(head)))
    return b"".join((head, crc.to_bytes(4, "big"), payload))


def data_crc_py(data: bytes | bytearray | memoryview) -> int:
    """crc32 of a data packet with its ``pkt_crc`` field taken as zero (the definition is
    ``endpoint.wire.data_packet_crc``), without copying the payload out: Python twin of
    ``endpoint._burst.data_crc``."""
    mv = memoryview(data)
    crc = zlib.crc32(mv[:PKT_CRC_AT])
    crc = zlib.crc32(_ZERO_CRC, crc)
    return zlib.crc32(mv[PKT_CRC_AT + 4 :], crc)


_seal = _burst.seal_data if _burst is not None else _seal_py
data_crc = _burst.data_crc if _burst is not None else data_crc_py


def encode_ack(
    dqpn: int,
    psn: int,
    cum_psn: int,
    sack_base: int,
    sack_bitmap: int,
    ev_echo: int,
    ecn_echo: int,
    ts_echo: int,
    flags: int = 0,
    msn: int = 0,
    coalesced: int = 0,
    ack_delay: int = 0,
    ackreq: int = 0,
    pkey: int = 0xFFFF,
    bth_flags: int = 0,
    resv8: int = 0,
    resv7: int = 0,
    resv1: int = 0,
) -> bytes:
    """One ACK/SACK. ``psn`` is the PSN of the data packet that triggered it; ``coalesced``
    the in-order packets it answers before that one (PSNs psn - coalesced .. psn - 1);
    ``ack_delay`` the ns the receiver held it."""
    return _ACK.pack(
        OP_RC_ACKNOWLEDGE,
        bth_flags,
        pkey,
        (resv8 << 24) | dqpn,
        (ackreq << 31) | (resv7 << 24) | psn,
        (SYNDROME_ACK << 24) | msn,
        (coalesced << 24) | cum_psn,
        (resv1 << 24) | sack_base,
        sack_bitmap,
        ev_echo,
        ecn_echo,
        flags,
        ts_echo,
        ack_delay,
    )


def encode_nack(
    dqpn: int,
    psn: int,
    cum_psn: int,
    ev: int,
    reason: int,
    ts_echo: int,
    msn: int = 0,
    ackreq: int = 0,
    pkey: int = 0xFFFF,
    bth_flags: int = 0,
    resv8: int = 0,
    resv7: int = 0,
    resv0: int = 0,
    resv1: int = 0,
) -> bytes:
    """One NACK for ``psn``."""
    return _NACK.pack(
        OP_RC_ACKNOWLEDGE,
        bth_flags,
        pkey,
        (resv8 << 24) | dqpn,
        (ackreq << 31) | (resv7 << 24) | psn,
        (SYNDROME_NAK << 24) | msn,
        (resv0 << 24) | cum_psn,
        ev,
        reason,
        resv1,
        ts_echo,
    )


def _encode_probe_like(
    opcode: int,
    dqpn: int,
    ev: int,
    probe_seq: int,
    ts: int,
    psn: int,
    ackreq: int,
    pkey: int,
    bth_flags: int,
    resv8: int,
    resv7: int,
    resv: int,
) -> bytes:
    return _PROBE.pack(
        opcode,
        bth_flags,
        pkey,
        (resv8 << 24) | dqpn,
        (ackreq << 31) | (resv7 << 24) | psn,
        ev,
        resv,
        probe_seq,
        ts,
    )


def encode_probe(
    dqpn: int,
    ev: int,
    probe_seq: int,
    send_ts: int,
    psn: int = 0,
    ackreq: int = 1,
    pkey: int = 0xFFFF,
    bth_flags: int = 0,
    resv8: int = 0,
    resv7: int = 0,
    resv: int = 0,
) -> bytes:
    """One PROBE for the path of ``ev``."""
    return _encode_probe_like(
        OP_MRC_PROBE, dqpn, ev, probe_seq, send_ts, psn, ackreq, pkey, bth_flags, resv8, resv7, resv
    )


def encode_probe_ack(
    dqpn: int,
    ev_echo: int,
    probe_seq: int,
    ts_echo: int,
    psn: int = 0,
    ackreq: int = 0,
    pkey: int = 0xFFFF,
    bth_flags: int = 0,
    resv8: int = 0,
    resv7: int = 0,
    resv: int = 0,
) -> bytes:
    """One PROBE-ACK answering ``probe_seq`` on ``ev_echo``."""
    return _encode_probe_like(
        OP_MRC_PROBE_ACK,
        dqpn,
        ev_echo,
        probe_seq,
        ts_echo,
        psn,
        ackreq,
        pkey,
        bth_flags,
        resv8,
        resv7,
        resv,
    )


def crc_ok(data: bytes | bytearray | memoryview, pkt_crc: int) -> bool:
    """True if an (untrimmed) data packet's bytes match its ``pkt_crc``."""
    return data_crc(data) == pkt_crc


def decode(data: bytes | bytearray | memoryview) -> Packet:
    """Parse one UDP payload. Raises :class:`MalformedPacket` and nothing else."""
    n = len(data)
    if n < BTH_LEN:
        raise MalformedPacket(f"{n} bytes: shorter than a BTH")
    opcode = data[0]
    if opcode == OP_RC_RDMA_WRITE_ONLY:
        if n < DATA_HEADER_LEN:
            raise MalformedPacket(f"{n} bytes: data header truncated")
        (_, bf, pkey, w1, w2, off, mid, plen, mlen, ev, fl, rv, ts, mcrc, pcrc) = _DATA.unpack_from(
            data
        )
        if n - DATA_HEADER_LEN > plen:
            raise MalformedPacket(f"payload {n - DATA_HEADER_LEN} B longer than header's {plen}")
        return DataPacket(
            w1 & _M24,
            w2 & _M24,
            w2 >> 31,
            pkey,
            bf,
            w1 >> 24,
            (w2 >> 24) & 0x7F,
            off,
            mid,
            plen,
            mlen,
            ev,
            fl,
            rv,
            ts,
            mcrc,
            pcrc,
            memoryview(data)[DATA_HEADER_LEN:],
        )
    if opcode == OP_RC_ACKNOWLEDGE:
        if n < BTH_LEN + 4:
            raise MalformedPacket(f"{n} bytes: AETH truncated")
        syndrome = data[BTH_LEN]
        if syndrome == SYNDROME_ACK:
            if n != ACK_LEN:
                raise MalformedPacket(f"ACK of {n} bytes, expected {ACK_LEN}")
            (_, bf, pkey, w1, w2, aeth, cw, bw, bitmap, ev, ecn, fl, ts, held) = _ACK.unpack(data)
            return AckPacket(
                w1 & _M24,
                w2 & _M24,
                w2 >> 31,
                pkey,
                bf,
                w1 >> 24,
                (w2 >> 24) & 0x7F,
                aeth & _M24,
                cw & _M24,
                bw & _M24,
                bitmap,
                ev,
                ecn,
                fl,
                ts,
                cw >> 24,
                bw >> 24,
                held,
            )
        if syndrome == SYNDROME_NAK:
            if n != NACK_LEN:
                raise MalformedPacket(f"NACK of {n} bytes, expected {NACK_LEN}")
            (_, bf, pkey, w1, w2, aeth, cw, ev, reason, r1, ts) = _NACK.unpack(data)
            return NackPacket(
                w1 & _M24,
                w2 & _M24,
                w2 >> 31,
                pkey,
                bf,
                w1 >> 24,
                (w2 >> 24) & 0x7F,
                aeth & _M24,
                cw & _M24,
                ev,
                reason,
                ts,
                cw >> 24,
                r1,
            )
        raise MalformedPacket(f"unknown AETH syndrome {syndrome:#04x}")
    if opcode == OP_MRC_PROBE or opcode == OP_MRC_PROBE_ACK:
        if n != PROBE_LEN:
            raise MalformedPacket(f"probe of {n} bytes, expected {PROBE_LEN}")
        (_, bf, pkey, w1, w2, ev, rv, seq, ts) = _PROBE.unpack(data)
        cls = ProbePacket if opcode == OP_MRC_PROBE else ProbeAckPacket
        return cls(
            w1 & _M24, w2 & _M24, w2 >> 31, pkey, bf, w1 >> 24, (w2 >> 24) & 0x7F, ev, seq, ts, rv
        )
    raise MalformedPacket(f"unknown opcode {opcode:#04x}")

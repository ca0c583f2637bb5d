"""Scapy layers of the MRC-style wire format: the single definition of every header.

Layout (documented byte by byte in ``docs/wire-format.md``; MRC-style, not the spec's byte
layout)::

    UDP dport 4791 / BTH (12 B) / MRCData (40 B) / payload          opcode 0x0A
    UDP dport 4791 / BTH (12 B) / AETH (4 B) / MRCSack (32 B)       opcode 0x11, syndrome 0x1F
    UDP dport 4791 / BTH (12 B) / AETH (4 B) / MRCNack (16 B)       opcode 0x11, syndrome 0x60
    UDP dport 4791 / BTH (12 B) / MRCProbe (16 B)                   opcode 0xC0
    UDP dport 4791 / BTH (12 B) / MRCProbeAck (16 B)                opcode 0xC1

The BTH is the real InfiniBand base transport header, so tshark's InfiniBand dissector decodes
opcode, destination QP and PSN of captured packets. No ICRC trailer is carried (see the doc).
Importing this module binds ``BTH`` to UDP destination port 4791, so ``Ether(raw_bytes)``
dissects captures. The hot path does not use scapy: ``endpoint.codec`` is proven byte-identical
to these layers by ``tests/test_wire_codec.py``.
"""

from __future__ import annotations

import zlib

from scapy.fields import (
    BitField,
    ByteEnumField,
    ByteField,
    FlagsField,
    IntField,
    LongField,
    ShortField,
    XByteField,
    XIntField,
    XLongField,
    XShortField,
)
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_layers

from contracts.dscp import CONTROL_DSCP, ECN_ECT0, TRIMMABLE_DSCP, tos
from contracts.framing import BTH_LEN, DATA_EXT_LEN
from contracts.ports import ROCEV2_UDP_PORT
from endpoint.psn import (  # re-exported: labs craft packets and compare PSNs from one module
    PSN_MASK,
    PSN_MOD,
    psn_add,
    psn_diff,
    psn_in_window,
    psn_le,
    psn_lt,
)

__all__ = [
    "AETH",
    "BTH",
    "MRCData",
    "MRCNack",
    "MRCProbe",
    "MRCProbeAck",
    "MRCSack",
    "PSN_MASK",
    "PSN_MOD",
    "psn_add",
    "psn_diff",
    "psn_in_window",
    "psn_le",
    "psn_lt",
]

# InfiniBand RC opcodes (IBA vol. 1, table 38) plus two from the manufacturer-specific range
# 0xC0-0xFF, which no standard transport uses, for the MRC-style path probes.
OP_RC_RDMA_WRITE_ONLY = 0x0A
OP_RC_ACKNOWLEDGE = 0x11
OP_MRC_PROBE = 0xC0
OP_MRC_PROBE_ACK = 0xC1
OPCODES = {
    OP_RC_RDMA_WRITE_ONLY: "RC_RDMA_WRITE_ONLY",
    OP_RC_ACKNOWLEDGE: "RC_ACKNOWLEDGE",
    OP_MRC_PROBE: "MRC_PROBE",
    OP_MRC_PROBE_ACK: "MRC_PROBE_ACK",
}

# AETH syndromes (IBA 9.7.5.2.2): 0b00_11111 = ACK with "credits invalid", 0b11_00000 = NAK
# "PSN sequence error". The MRC-style reason lives in the MRCNack extension.
SYNDROME_ACK = 0x1F
SYNDROME_NAK = 0x60
SYNDROMES = {SYNDROME_ACK: "ACK", SYNDROME_NAK: "NAK"}

# MRCNack.reason
NACK_TRIMMED = 1  # the payload was cut by a switch: resend this PSN now (congestion only)
NACK_OUT_OF_WINDOW = 2  # PSN beyond the receiver's window: resend later, not a loss
NACK_SEQUENCE = 3  # go-back-N (single-path mode): everything from this PSN again
NACK_REASONS = {
    NACK_TRIMMED: "trimmed",
    NACK_OUT_OF_WINDOW: "out-of-window",
    NACK_SEQUENCE: "sequence",
}

DATA_FLAG_RETX = 0x01  # this transmission is a retransmit (informational; RTT uses ts echo)
SACK_FLAG_DUP = 0x01  # the triggering packet was a duplicate

# DSCP / ToS values with the default DSCPs (docs/design.md "Transport"), for tests and labs that
# craft packets; a connection marks its packets with its TransportConfig's (the fabric's) DSCPs.
TOS_DATA = tos(TRIMMABLE_DSCP, ECN_ECT0)
TOS_CONTROL = tos(CONTROL_DSCP)

PKT_CRC_AT = BTH_LEN + 36  # byte offset of MRCData.pkt_crc in the UDP payload
_ZERO_CRC = bytes(4)


def data_packet_crc(udp_payload: bytes | bytearray | memoryview) -> int:
    """crc32 of a whole data packet with its ``pkt_crc`` field taken as zero.

    It plays the role of RoCE's ICRC (which tshark and this format do not carry as a trailer):
    any flipped bit in BTH, extension or payload is caught before a byte is placed. It sits in
    the header so that a trimmed packet still says which PSN it was.
    """
    crc = zlib.crc32(udp_payload[:PKT_CRC_AT])
    crc = zlib.crc32(_ZERO_CRC, crc)
    return zlib.crc32(udp_payload[PKT_CRC_AT + 4 :], crc)


class BTH(Packet):
    """InfiniBand base transport header (12 bytes, IBA 9.2), first after UDP as in RoCEv2."""

    name = "BTH"
    fields_desc = [
        ByteEnumField("opcode", OP_RC_RDMA_WRITE_ONLY, OPCODES),
        BitField("se", 0, 1),
        BitField("migreq", 0, 1),
        BitField("padcnt", 0, 2),
        BitField("tver", 0, 4),
        XShortField("pkey", 0xFFFF),
        XByteField("resv8", 0),  # FECN/BECN + reserved in IBA; sent as 0
        BitField("dqpn", 0, 24),
        BitField("ackreq", 0, 1),
        BitField("resv7", 0, 7),
        BitField("psn", 0, 24),
    ]

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        # The packet CRC of a data packet covers the BTH too, so it is filled in here, where
        # both are known: crc32 over BTH + MRCData (pkt_crc field zero) + payload.
        data = self.payload
        if isinstance(data, MRCData) and data.pkt_crc is None and len(pay) >= DATA_EXT_LEN:
            crc = data_packet_crc(pkt + pay)
            pay = pay[: PKT_CRC_AT - 12] + crc.to_bytes(4, "big") + pay[PKT_CRC_AT - 8 :]
        return pkt + pay

    def mysummary(self) -> str:
        return self.sprintf("BTH %opcode% qp=%dqpn% psn=%psn%")


class MRCData(Packet):
    """DATA extension (40 bytes). The first 16 bytes sit where an RETH would, so tshark shows
    the placement offset as "Virtual Address", the message id as "Remote Key" and the payload
    length as "DMA Length"."""

    name = "MRCData"
    fields_desc = [
        LongField("offset", 0),  # placement offset of the payload's first byte in the message
        IntField("msg_id", 0),
        IntField("payload_len", None),  # None: filled with the real payload length
        IntField("msg_len", 0),
        ShortField("ev", 0),
        FlagsField("flags", 0, 8, ["retx", "f1", "f2", "f3", "f4", "f5", "f6", "f7"]),
        ByteField("resv", 0),
        LongField("send_ts", 0),  # sender clock, nanoseconds; echoed back for RTT
        XIntField("msg_crc", 0),  # crc32 of the whole message, verified on completion
        XIntField("pkt_crc", None),  # crc32 of BTH+extension(this field 0)+payload; None: computed
    ]

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        if self.payload_len is None:
            pkt = pkt[:12] + len(pay).to_bytes(4, "big") + pkt[16:]
        return pkt + pay

    def mysummary(self) -> str:
        return self.sprintf("MRCData msg=%msg_id% off=%offset% len=%payload_len% ev=%ev%")


class AETH(Packet):
    """ACK extended transport header (4 bytes, IBA 9.3.5): syndrome + message sequence number."""

    name = "AETH"
    fields_desc = [
        ByteEnumField("syndrome", SYNDROME_ACK, SYNDROMES),
        BitField("msn", 0, 24),
    ]

    def mysummary(self) -> str:
        return self.sprintf("AETH %syndrome% msn=%msn%")


class MRCSack(Packet):
    """ACK/SACK extension (32 bytes). BTH.psn is the PSN of the packet that triggered it.

    A coalesced ACK answers ``coalesced`` + 1 data packets that arrived in order, PSNs
    ``psn - coalesced`` .. ``psn``, all with one CE state, and says how long the receiver held
    it (``ack_delay``): the sender credits each of those packets' EVs and takes the hold out of
    its RTT sample, as QUIC's ACK Delay field lets a QUIC sender do.
    """

    name = "MRCSack"
    fields_desc = [
        ByteField("coalesced", 0),  # in-order data packets answered before the triggering one
        BitField("cum_psn", 0, 24),  # next PSN expected: every PSN before it has arrived
        ByteField("resv1", 0),
        BitField("sack_base", 0, 24),  # bit i of sack_bitmap is PSN sack_base + i
        XLongField("sack_bitmap", 0),
        ShortField("ev_echo", 0),  # EV of the triggering packet
        ByteField("ecn_echo", 0),  # CE-marked data packets covered by this ACK
        FlagsField("flags", 0, 8, ["dup", "f1", "f2", "f3", "f4", "f5", "f6", "f7"]),
        LongField("ts_echo", 0),  # send_ts of the triggering packet
        IntField("ack_delay", 0),  # ns the receiver held this ACK after the triggering packet
    ]

    def mysummary(self) -> str:
        return self.sprintf(
            "MRCSack cum=%cum_psn% base=%sack_base% ev=%ev_echo% ce=%ecn_echo% n=%coalesced%"
        )


class MRCNack(Packet):
    """NACK extension (16 bytes). BTH.psn is the PSN being NACKed."""

    name = "MRCNack"
    fields_desc = [
        ByteField("resv0", 0),
        BitField("cum_psn", 0, 24),
        ShortField("ev", 0),  # EV the NACKed packet arrived on
        ByteEnumField("reason", NACK_TRIMMED, NACK_REASONS),
        ByteField("resv1", 0),
        LongField("ts_echo", 0),  # send_ts of the NACKed transmission (stale NACKs are ignored)
    ]

    def mysummary(self) -> str:
        return self.sprintf("MRCNack %reason% ev=%ev% cum=%cum_psn%")


class MRCProbe(Packet):
    """PROBE extension (16 bytes): asks "is the path of this EV alive?". BTH.psn is sent 0."""

    name = "MRCProbe"
    fields_desc = [
        ShortField("ev", 0),
        ShortField("resv", 0),
        IntField("probe_seq", 0),
        LongField("send_ts", 0),
    ]

    def mysummary(self) -> str:
        return self.sprintf("MRCProbe ev=%ev% seq=%probe_seq%")


class MRCProbeAck(Packet):
    """PROBE-ACK extension (16 bytes), sent back on the probed EV."""

    name = "MRCProbeAck"
    fields_desc = [
        ShortField("ev_echo", 0),
        ShortField("resv", 0),
        IntField("probe_seq", 0),
        LongField("ts_echo", 0),
    ]

    def mysummary(self) -> str:
        return self.sprintf("MRCProbeAck ev=%ev_echo% seq=%probe_seq%")


bind_layers(UDP, BTH, dport=ROCEV2_UDP_PORT)
bind_layers(BTH, MRCData, opcode=OP_RC_RDMA_WRITE_ONLY)
bind_layers(BTH, AETH, opcode=OP_RC_ACKNOWLEDGE)
bind_layers(AETH, MRCSack, syndrome=SYNDROME_ACK)
bind_layers(AETH, MRCNack, syndrome=SYNDROME_NAK)
bind_layers(BTH, MRCProbe, opcode=OP_MRC_PROBE)
bind_layers(BTH, MRCProbeAck, opcode=OP_MRC_PROBE_ACK)

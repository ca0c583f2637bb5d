"""tshark's InfiniBand dissector decodes the BTH (and RETH/AETH) of captured MRC-style packets."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw
from scapy.utils import wrpcap

from endpoint import codec
from endpoint.wire import NACK_TRIMMED, TOS_CONTROL, TOS_DATA

TSHARK = shutil.which("tshark")
pytestmark = pytest.mark.skipif(TSHARK is None, reason="tshark not installed")

FIELDS = [
    "infiniband.bth.opcode",
    "infiniband.bth.destqp",
    "infiniband.bth.psn",
    "infiniband.bth.a",
    "infiniband.reth.va",
    "infiniband.reth.r_key",
    "infiniband.reth.dmalen",
    "infiniband.aeth.syndrome.opcode",
    "infiniband.invariant.crc",
]


def _frame(body: bytes, sport: int, tos: int) -> Ether:
    return (
        Ether()
        / IP(src="10.0.1.1", dst="10.0.2.1", tos=tos)
        / UDP(sport=sport, dport=4791)
        / Raw(body)
    )


def _tshark(pcap: Path, decode_as: bool) -> list[list[str]]:
    cmd = [TSHARK, "-r", str(pcap)]
    if decode_as:
        cmd += ["-d", "udp.port==4791,infiniband"]
    cmd += ["-T", "fields", "-E", "separator=|"]
    for f in FIELDS:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True).stdout
    return [line.split("|") for line in out.strip().splitlines()]


@pytest.mark.parametrize("decode_as", [True, False], ids=["decode-as", "default-port"])
def test_tshark_decodes_bth_of_every_packet_type(tmp_path: Path, decode_as: bool) -> None:
    payload = bytes(range(256)) * 4
    frames = [
        _frame(
            codec.encode_data(0x123456, 0xFFFFFE, 2800, 9, 10_000, 49_200, 1, 2, payload),
            49_200,
            TOS_DATA,
        ),
        _frame(codec.encode_ack(0xABCDEF, 77, 78, 79, 5, 49_200, 1, 8), 49_200, TOS_CONTROL),
        _frame(codec.encode_nack(0xABCDEF, 88, 3, 49_201, NACK_TRIMMED, 8), 49_201, TOS_CONTROL),
        _frame(codec.encode_probe(0x000042, 49_202, 3, 4), 49_202, TOS_CONTROL),
        _frame(codec.encode_probe_ack(0x000043, 49_202, 3, 4), 49_202, TOS_CONTROL),
    ]
    pcap = tmp_path / "mrc.pcap"
    wrpcap(str(pcap), frames)
    rows = _tshark(pcap, decode_as)
    assert len(rows) == 5
    got = [(int(r[0]), int(r[1], 16), int(r[2])) for r in rows]
    assert got == [
        (0x0A, 0x123456, 0xFFFFFE),
        (0x11, 0xABCDEF, 77),
        (0x11, 0xABCDEF, 88),
        (0xC0, 0x42, 0),
        (0xC1, 0x43, 0),
    ]
    data = rows[0]
    assert data[3] in ("1", "True")  # ack-request set on data
    # The DATA extension's first 16 bytes read as an RETH: offset, message id, payload length.
    assert (int(data[4], 16), int(data[5], 16), int(data[6])) == (2800, 9, len(payload))
    # No ICRC is carried: tshark shows the payload's last 4 bytes as "Invariant CRC" (unchecked).
    assert int(data[8], 16) == int.from_bytes(payload[-4:], "big")
    # AETH syndrome class: 0 = ACK, 3 = NAK.
    assert rows[1][7] == "0" and rows[2][7] == "3"

"""wireshark/mrc.lua decodes every MRC-style packet field by field as the scapy layers do.

Packets of every type are built with the scapy layers (endpoint/wire.py, the format's single
definition) from seeded random field values, plus data packets cut as a trimming switch cuts
them; tshark with the dissector reads the pcap, and each field it prints must equal the one
scapy reads back from the same bytes.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap

from contracts.dscp import TRIMMED_DSCP, tos
from endpoint.wire import (
    AETH,
    BTH,
    NACK_REASONS,
    OP_MRC_PROBE,
    OP_MRC_PROBE_ACK,
    OP_RC_ACKNOWLEDGE,
    SYNDROME_ACK,
    SYNDROME_NAK,
    TOS_CONTROL,
    TOS_DATA,
    MRCData,
    MRCNack,
    MRCProbe,
    MRCProbeAck,
    MRCSack,
)
from testbed.capture import DISSECTOR

TSHARK = shutil.which("tshark")
pytestmark = pytest.mark.skipif(TSHARK is None, reason="tshark not installed")

# (tshark field, scapy layer, scapy field); a layer absent from a packet leaves the field empty.
FIELDS = [
    ("mrc.bth.opcode", BTH, "opcode"),
    ("mrc.bth.dqpn", BTH, "dqpn"),
    ("mrc.bth.psn", BTH, "psn"),
    ("mrc.bth.pkey", BTH, "pkey"),
    ("mrc.data.offset", MRCData, "offset"),
    ("mrc.data.msg_id", MRCData, "msg_id"),
    ("mrc.data.payload_len", MRCData, "payload_len"),
    ("mrc.data.msg_len", MRCData, "msg_len"),
    ("mrc.data.ev", MRCData, "ev"),
    ("mrc.data.flags", MRCData, "flags"),
    ("mrc.data.send_ts", MRCData, "send_ts"),
    ("mrc.data.msg_crc", MRCData, "msg_crc"),
    ("mrc.data.pkt_crc", MRCData, "pkt_crc"),
    ("mrc.aeth.syndrome", AETH, "syndrome"),
    ("mrc.aeth.msn", AETH, "msn"),
    ("mrc.sack.cum_psn", MRCSack, "cum_psn"),
    ("mrc.sack.sack_base", MRCSack, "sack_base"),
    ("mrc.sack.sack_bitmap", MRCSack, "sack_bitmap"),
    ("mrc.sack.ev_echo", MRCSack, "ev_echo"),
    ("mrc.sack.ecn_echo", MRCSack, "ecn_echo"),
    ("mrc.sack.flags", MRCSack, "flags"),
    ("mrc.sack.ts_echo", MRCSack, "ts_echo"),
    ("mrc.sack.coalesced", MRCSack, "coalesced"),
    ("mrc.sack.ack_delay", MRCSack, "ack_delay"),
    ("mrc.nack.cum_psn", MRCNack, "cum_psn"),
    ("mrc.nack.ev", MRCNack, "ev"),
    ("mrc.nack.reason", MRCNack, "reason"),
    ("mrc.nack.ts_echo", MRCNack, "ts_echo"),
    ("mrc.probe.ev", MRCProbe, "ev"),
    ("mrc.probe.seq", MRCProbe, "probe_seq"),
    ("mrc.probe.ts", MRCProbe, "send_ts"),
]
PROBE_ACK_FIELDS = {
    "mrc.probe.ev": "ev_echo",
    "mrc.probe.seq": "probe_seq",
    "mrc.probe.ts": "ts_echo",
}
EXTRA = ["mrc.trimmed", "mrc.data.present", "_ws.col.Info"]


def _ip(t: int) -> IP:
    return IP(src="10.1.1.1", dst="10.1.2.1", tos=t)


def packets(seed: int) -> list[Ether]:
    rng = random.Random(seed)
    u16, u24, u32, u64 = (lambda b=b: rng.getrandbits(b) for b in (16, 24, 32, 64))
    out: list[Ether] = []
    for _ in range(4):
        ev = 49152 + rng.randrange(256)
        bth = BTH(dqpn=u24(), psn=u24(), pkey=u16(), ackreq=1)
        payload = bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 1400)))
        data = MRCData(offset=u64() >> 1, msg_id=u32(), msg_len=u32(), ev=ev, flags=rng.choice([0, 1]),
                       send_ts=u64() >> 1, msg_crc=u32())  # fmt: skip
        out.append(Ether() / _ip(TOS_DATA) / UDP(sport=ev, dport=4791) / bth / data / payload)
        out.append(
            Ether() / _ip(TOS_CONTROL) / UDP(sport=ev, dport=4791)
            / BTH(opcode=OP_RC_ACKNOWLEDGE, dqpn=u24(), psn=u24())
            / AETH(syndrome=SYNDROME_ACK, msn=u24())
            / MRCSack(cum_psn=u24(), sack_base=u24(), sack_bitmap=u64() >> 1, ev_echo=ev,
                      ecn_echo=rng.randrange(256), flags=rng.choice([0, 1]), ts_echo=u64() >> 1,
                      coalesced=rng.randrange(256), ack_delay=u32())
        )  # fmt: skip
        out.append(
            Ether() / _ip(TOS_CONTROL) / UDP(sport=ev, dport=4791)
            / BTH(opcode=OP_RC_ACKNOWLEDGE, dqpn=u24(), psn=u24())
            / AETH(syndrome=SYNDROME_NAK, msn=u24())
            / MRCNack(cum_psn=u24(), ev=ev, reason=rng.choice(list(NACK_REASONS)), ts_echo=u64() >> 1)
        )  # fmt: skip
        out.append(
            Ether() / _ip(TOS_CONTROL) / UDP(sport=ev, dport=4791)
            / BTH(opcode=OP_MRC_PROBE, dqpn=u24())
            / MRCProbe(ev=ev, probe_seq=u32(), send_ts=u64() >> 1)
        )  # fmt: skip
        out.append(
            Ether() / _ip(TOS_CONTROL) / UDP(sport=ev, dport=4791)
            / BTH(opcode=OP_MRC_PROBE_ACK, dqpn=u24())
            / MRCProbeAck(ev_echo=ev, probe_seq=u32(), ts_echo=u64() >> 1)
        )  # fmt: skip
    return out


def trimmed(pkt: Ether, frame_bytes: int = 128) -> Ether:
    """As switch/queueing.py trims: cut to `frame_bytes` of frame, DSCP 11, lengths fixed."""
    raw = bytes(pkt)[:frame_bytes]
    cut = Ether(raw)
    cut[IP].tos = tos(TRIMMED_DSCP, pkt[IP].tos & 3)
    cut[IP].len = len(raw) - 14
    cut[UDP].len = len(raw) - 34
    del cut[IP].chksum
    cut[UDP].chksum = 0
    return Ether(bytes(cut))


def tshark_rows(pcap: Path) -> list[list[str]]:
    cmd = [TSHARK, "-X", f"lua_script:{DISSECTOR}", "-r", str(pcap), "-T", "fields",
           "-E", "separator=|", "-E", "occurrence=f"]  # fmt: skip
    for name in [f for f, _, _ in FIELDS] + EXTRA:
        cmd += ["-e", name]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "Lua" not in run.stderr and "error" not in run.stderr.lower(), run.stderr
    return [line.split("|") for line in run.stdout.strip().splitlines()]


def _int(text: str) -> int:
    return int(text, 16) if text.startswith("0x") else int(text)


def expected(pkt: Ether) -> dict[str, int | None]:
    got: dict[str, int | None] = {}
    for name, layer, field in FIELDS:
        if layer is MRCProbe and pkt.haslayer(MRCProbeAck):
            layer, field = MRCProbeAck, PROBE_ACK_FIELDS[name]
        got[name] = int(getattr(pkt[layer], field)) if pkt.haslayer(layer) else None
    return got


def test_the_dissector_ships_where_capture_says():
    assert Path(DISSECTOR).is_file() and DISSECTOR.endswith("endpoint/mrc.lua")


@pytest.mark.parametrize("seed", [1, 2])
def test_every_field_of_every_packet_type_as_scapy_reads_it(tmp_path: Path, seed: int):
    frames = packets(seed)
    pcap = tmp_path / "mrc.pcap"
    wrpcap(str(pcap), frames)
    rows = tshark_rows(pcap)
    assert len(rows) == len(frames)
    for pkt, row in zip(frames, rows, strict=True):
        dissected = Ether(bytes(pkt))  # what scapy reads from the bytes on the wire
        want = expected(dissected)
        got = {name: (_int(v) if v else None) for (name, _, _), v in zip(FIELDS, row, strict=False)}
        assert got == want, dissected.summary()
        trim, present, info = row[len(FIELDS) :]
        if dissected.haslayer(MRCData):
            assert trim in ("False", "0") and int(present) == dissected[MRCData].payload_len
            assert f"ev={dissected[MRCData].ev}" in info
        else:
            assert trim == "" and present == ""


def test_a_trimmed_data_packet_keeps_its_header_and_says_it_was_trimmed(tmp_path: Path):
    full = [p for p in packets(3) if p.haslayer(MRCData)]
    cut = [trimmed(p) for p in full]
    pcap = tmp_path / "trimmed.pcap"
    wrpcap(str(pcap), cut)
    rows = tshark_rows(pcap)
    for pkt, whole, row in zip(cut, full, rows, strict=True):
        want = expected(Ether(bytes(whole)))  # the header is whole: every field as sent
        got = {name: (_int(v) if v else None) for (name, _, _), v in zip(FIELDS, row, strict=False)}
        assert got == want
        trim, present, info = row[len(FIELDS) :]
        assert trim in ("True", "1") and "[TRIMMED]" in info
        assert int(present) == len(bytes(pkt)) - 14 - 20 - 8 - 12 - 40  # 34 of 128 B

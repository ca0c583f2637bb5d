"""The fixed-offset fast path (switch.frames) agrees with the scapy model (switch.reference).

Every property builds random packets with scapy, runs the byte-level operation and compares it
with what scapy computes from scratch: TTL/checksum, MAC rewrite, ECN CE marking, trimming
(lengths, DSCP, checksums), classify() drop reasons and the ICMP builders.
"""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from scapy.layers.inet import ICMP, IP, TCP, UDP, IPerror, IPOption_RR
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, Dot1Q, Ether
from scapy.packet import Raw
from scapy.utils import checksum

from switch import frames, reference

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

u8 = st.integers(0, 0xFF)
u16 = st.integers(0, 0xFFFF)
ipv4 = st.integers(0, 0xFFFFFFFF).map(lambda n: ".".join(str(b) for b in n.to_bytes(4, "big")))
mac = st.binary(min_size=6, max_size=6).map(lambda b: ":".join(f"{x:02x}" for x in b))
# 4791 (RoCEv2) is included on purpose: it is the port the fabric actually carries.
l4port = st.one_of(u16, st.just(4791))
forwardable_ttl = st.integers(2, 255)


@st.composite
def ip_frames(draw, protos=("udp", "tcp"), ttl=forwardable_ttl, allow_frag=True, tos=u8):
    """A random Ether/IPv4/{UDP,TCP}/payload frame, as bytes, built by scapy."""
    proto = draw(st.sampled_from(protos))
    n = draw(st.integers(0, 1400))
    payload = draw(st.binary(min_size=n, max_size=n))
    if proto == "udp":
        l4 = UDP(sport=draw(l4port), dport=draw(l4port))
    else:
        l4 = TCP(
            sport=draw(l4port),
            dport=draw(l4port),
            seq=draw(st.integers(0, 2**32 - 1)),
            ack=draw(st.integers(0, 2**32 - 1)),
            flags=draw(u8),
            window=draw(u16),
        )
    ip = IP(
        src=draw(ipv4),
        dst=draw(ipv4),
        ttl=draw(ttl),
        tos=draw(tos),
        id=draw(u16),
        flags=draw(st.integers(0, 7)),
        frag=draw(st.integers(0, 0x1FFF)) if allow_frag and draw(st.booleans()) else 0,
    )
    return bytes(Ether(dst=draw(mac), src=draw(mac)) / ip / l4 / Raw(payload))


def header_ok(frame: bytes) -> bool:
    """IPv4 header checksum verified with scapy's own checksum routine."""
    return checksum(frame[14:34]) == 0


# ----- TTL + MAC rewrite -------------------------------------------------------------------


@SETTINGS
@given(ip_frames(), mac, mac)
def test_forward_equals_reference(frame: bytes, dst_mac: str, src_mac: str) -> None:
    fast = bytearray(frame)
    frames.decrement_ttl(fast)
    frames.rewrite_macs(fast, frames.mac_bytes(dst_mac), frames.mac_bytes(src_mac))
    assert bytes(fast) == reference.forward(frame, dst_mac, src_mac)
    assert fast[frames.OFF_TTL] == frame[frames.OFF_TTL] - 1
    assert frames.ip_checksum_ok(fast) and header_ok(bytes(fast))


def test_incremental_checksum_exact_for_every_id() -> None:
    """RFC 1624 update equals a from-scratch recompute for all 65536 ids (covers 0x0000/0xFFFF)."""
    base = bytearray(bytes(Ether() / IP(src="10.1.1.1", dst="10.1.2.1", ttl=9) / UDP()))
    for ident in range(0x10000):
        f = bytearray(base)
        struct.pack_into("!H", f, 18, ident)
        frames.set_ip_checksum(f)
        ref = bytearray(f)
        frames.decrement_ttl(f)
        ref[frames.OFF_TTL] -= 1
        frames.set_ip_checksum(ref)
        assert f == ref, ident


@SETTINGS
@given(ip_frames(protos=("udp",)))
def test_set_ip_checksum_equals_scapy(frame: bytes) -> None:
    f = bytearray(frame)
    f[frames.OFF_CSUM : frames.OFF_CSUM + 2] = b"\xde\xad"
    frames.set_ip_checksum(f)
    assert bytes(f) == frame


# ----- ECN ---------------------------------------------------------------------------------


@SETTINGS
@given(ip_frames(tos=st.integers(0, 63).map(lambda d: d << 2)), st.integers(0, 3))
def test_mark_ce_equals_reference_for_all_codepoints(frame: bytes, ecn: int) -> None:
    f = bytearray(frame)
    f[frames.OFF_TOS] |= ecn
    frames.set_ip_checksum(f)
    frame = bytes(f)
    changed = frames.mark_ce(f)
    assert changed == (ecn in (1, 2))
    assert bytes(f) == reference.mark_ce(frame)
    assert frames.dscp(f) == frame[frames.OFF_TOS] >> 2
    assert f[frames.OFF_TOS] & 3 == (3 if ecn else 0)
    assert header_ok(bytes(f))


# ----- trimming ----------------------------------------------------------------------------


def check_trimmed(out: bytes, orig: bytes, trim_bytes: int, trimmed_dscp: int) -> None:
    """What a receiver (and tshark with validation on) must see in a trimmed header."""
    orig_ip = Ether(orig)[IP]
    assert len(out) == min(len(orig), trim_bytes, 14 + orig_ip.len)
    pkt = Ether(out)
    ip = pkt[IP]
    assert ip.len == len(out) - 14
    assert header_ok(out)
    recomputed = ip.copy()
    recomputed.chksum = None
    assert IP(bytes(recomputed)).chksum == ip.chksum
    assert ip.tos >> 2 == trimmed_dscp
    assert ip.tos & 3 == orig_ip.tos & 3
    assert (ip.src, ip.dst, ip.id, ip.ttl, ip.proto) == (
        orig_ip.src,
        orig_ip.dst,
        orig_ip.id,
        orig_ip.ttl,
        orig_ip.proto,
    )
    udp = pkt[UDP]
    assert udp.len == ip.len - 20 == len(bytes(udp))
    assert udp.chksum == 0
    assert (udp.sport, udp.dport) == (orig_ip[UDP].sport, orig_ip[UDP].dport)
    assert out[42:] == orig[42 : len(out)]  # the kept payload is the original's prefix


@SETTINGS
@given(
    ip_frames(protos=("udp",), allow_frag=False),
    st.integers(64, 1500),
    st.integers(0, 63),
)
@example(frame=bytes(Ether() / IP() / UDP() / Raw(b"x" * 10)), trim_bytes=64, trimmed_dscp=11)
@example(
    frame=bytes(Ether() / IP(tos=0x2A) / UDP(dport=4791) / Raw(b"y" * 1400)),
    trim_bytes=128,
    trimmed_dscp=11,
)
@example(frame=bytes(Ether() / IP() / UDP() / Raw(b"x" * 22)), trim_bytes=64, trimmed_dscp=11)
@example(frame=bytes(Ether() / IP() / UDP() / Raw(b"x" * 23)), trim_bytes=64, trimmed_dscp=11)
def test_trim_equals_reference(frame: bytes, trim_bytes: int, trimmed_dscp: int) -> None:
    f = bytearray(frame)
    out = frames.trim(f, trim_bytes, trimmed_dscp)
    assert f == frame  # the input is not modified
    assert bytes(out) == reference.trim(frame, trim_bytes, trimmed_dscp)
    check_trimmed(bytes(out), frame, trim_bytes, trimmed_dscp)
    assert frames.classify(out) is None


@SETTINGS
@given(st.integers(0, 200), st.integers(64, 1500), st.integers(0, 3))
def test_trim_of_frame_shorter_than_trim_size_only_remarks(
    payload_len: int, trim_bytes: int, ecn: int
) -> None:
    frame = bytes(
        Ether() / IP(tos=(10 << 2) | ecn) / UDP(sport=7, dport=4791) / (b"p" * payload_len)
    )
    trim_bytes = max(trim_bytes, len(frame))
    out = bytes(frames.trim(bytearray(frame), trim_bytes, 11))
    assert len(out) == len(frame)
    assert out == reference.trim(frame, trim_bytes, 11)
    check_trimmed(out, frame, trim_bytes, 11)


@SETTINGS
@given(st.integers(0, 40), st.integers(64, 200))
def test_trim_drops_ethernet_padding(payload_len: int, trim_bytes: int) -> None:
    """A padded minimum-size frame: the trimmed header is cut at the IP length, not the frame's."""
    frame = bytes(Ether() / IP(tos=10 << 2) / UDP() / (b"p" * payload_len)) + b"\0" * 30
    out = bytes(frames.trim(bytearray(frame), trim_bytes, 11))
    assert out == reference.trim(frame, trim_bytes, 11)
    check_trimmed(out, frame, trim_bytes, 11)


# ----- checksums ---------------------------------------------------------------------------


@SETTINGS
@given(ip_frames(), st.integers(14, 33), st.integers(1, 255))
def test_any_header_byte_flip_is_detected(frame: bytes, offset: int, xor: int) -> None:
    assert frames.ip_checksum_ok(frame)
    assert frames.classify(frame) is None
    f = bytearray(frame)
    f[offset] ^= xor
    assert not frames.ip_checksum_ok(f)
    assert frames.classify(f) in frames.MALFORMED_REASONS


@SETTINGS
@given(st.binary(max_size=300))
def test_inet_checksum_equals_scapy(data: bytes) -> None:
    assert frames.inet_checksum(data) == checksum(data)


@SETTINGS
@given(ipv4, ipv4, u8, st.binary(max_size=64), st.integers(1, 255), u8)
def test_build_ipv4_equals_scapy(src, dst, proto, payload, ttl, tos) -> None:
    from socket import inet_aton

    built = frames.build_ipv4(inet_aton(src), inet_aton(dst), proto, payload, ttl=ttl, tos=tos)
    ref = IP(src=src, dst=dst, proto=proto, ttl=ttl, tos=tos, id=0, flags=0) / Raw(payload)
    assert bytes(built) == bytes(ref)


@SETTINGS
@given(mac)
def test_mac_bytes(m: str) -> None:
    from scapy.utils import mac2str

    assert frames.mac_bytes(m) == mac2str(m)


# ----- classify ----------------------------------------------------------------------------


GOOD = bytes(Ether() / IP(src="10.1.1.1", dst="10.1.2.1") / UDP(sport=1, dport=4791) / (b"x" * 50))


def fixed(frame: bytearray) -> bytes:
    frames.set_ip_checksum(frame)
    return bytes(frame)


def with_byte(offset: int, value: int, fix: bool = True) -> bytes:
    f = bytearray(GOOD)
    f[offset] = value
    return fixed(f) if fix else bytes(f)


def with_totlen(n: int) -> bytes:
    f = bytearray(GOOD)
    struct.pack_into("!H", f, frames.OFF_TOTLEN, n)
    return fixed(f)


CLASSIFY_CASES = [
    (b"", frames.TRUNCATED),
    (GOOD[:13], frames.TRUNCATED),
    (GOOD[:14], frames.TRUNCATED),
    (GOOD[:33], frames.TRUNCATED),
    (bytes(Ether() / ARP()), frames.NON_IPV4),
    (bytes(Ether() / IPv6() / UDP()), frames.NON_IPV4),
    (bytes(Ether() / Dot1Q(vlan=5) / IP() / UDP()), frames.NON_IPV4),
    (GOOD[:12] + b"\x08\x06" + GOOD[14:], frames.NON_IPV4),
    (GOOD[:12] + b"\x88\xb5" + b"\0" * 2, frames.NON_IPV4),  # short non-IP: not "truncated"
    (with_byte(frames.OFF_VER_IHL, 0x65), frames.BAD_VERSION),
    (with_byte(frames.OFF_VER_IHL, 0x05), frames.BAD_VERSION),
    (with_byte(frames.OFF_VER_IHL, 0xF5), frames.BAD_VERSION),
    (GOOD[:14] + bytes(IPv6() / UDP()), frames.BAD_VERSION),
    (with_byte(frames.OFF_VER_IHL, 0x44), frames.BAD_IHL),
    (with_byte(frames.OFF_VER_IHL, 0x40), frames.BAD_IHL),
    (bytes(Ether() / IP(options=[IPOption_RR()]) / UDP()), frames.IP_OPTIONS),
    (with_byte(frames.OFF_VER_IHL, 0x4F), frames.IP_OPTIONS),
    (with_totlen(19), frames.BAD_LENGTH),
    (with_totlen(0), frames.BAD_LENGTH),
    (with_totlen(len(GOOD) - 14 + 1), frames.BAD_LENGTH),
    (with_totlen(0xFFFF), frames.BAD_LENGTH),
    (GOOD[:-1], frames.BAD_LENGTH),  # cut short: the IP length claims more than arrived
    (with_byte(frames.OFF_CSUM, GOOD[frames.OFF_CSUM] ^ 1, fix=False), frames.BAD_CHECKSUM),
    (with_byte(frames.OFF_TTL, 7, fix=False), frames.BAD_CHECKSUM),
]


@pytest.mark.parametrize(("frame", "reason"), CLASSIFY_CASES)
def test_classify_reasons(frame: bytes, reason: str) -> None:
    assert frames.classify(frame) == reason
    assert frames.classify(bytearray(frame)) == reason
    assert frames.classify(memoryview(frame)) == reason


@pytest.mark.parametrize(
    "frame",
    [
        GOOD,
        bytes(Ether() / IP() / TCP() / (b"t" * 100)),
        bytes(Ether() / IP() / ICMP()),
        bytes(Ether() / IP(proto=99)),  # bare 20-byte header
        bytes(Ether() / IP() / UDP()) + b"\0" * 18,  # Ethernet padding to 60 bytes
        with_byte(frames.OFF_TTL, 0),  # TTL is the dataplane's business, not classify's
        with_totlen(20),  # shorter IP length than the frame: the rest is padding
    ],
)
def test_classify_good_frames(frame: bytes) -> None:
    assert frames.classify(frame) is None


@SETTINGS
@given(ip_frames(ttl=st.integers(0, 255)))
def test_classify_accepts_every_scapy_frame(frame: bytes) -> None:
    assert frames.classify(frame) is None


ipv4_prefix = st.binary(min_size=12, max_size=12).map(lambda b: b + b"\x08\x00")


@settings(max_examples=600, deadline=None)
@given(st.one_of(st.binary(max_size=120), st.tuples(ipv4_prefix, st.binary(max_size=80))))
def test_classify_fuzz_never_raises(data) -> None:
    if isinstance(data, tuple):
        data = data[0] + data[1]
    reason = frames.classify(data)
    assert reason is None or reason in frames.MALFORMED_REASONS
    if reason is None:
        assert data[12:14] == b"\x08\x00" and data[14] == 0x45
        assert header_ok(data)
        ip = Ether(data)[IP]
        assert 20 <= ip.len <= len(data) - 14


def test_classify_fuzz_near_valid_frames() -> None:
    """Random byte mutations of valid frames: only None or a known reason, and None only if valid."""
    rng = random.Random(7)
    for _ in range(3000):
        f = bytearray(GOOD)
        for _ in range(rng.randint(1, 3)):
            f[rng.randrange(12, 34)] = rng.randrange(256)
        if rng.random() < 0.5:
            frames.set_ip_checksum(f) if f[14] == 0x45 and len(f) >= 34 else None
        if rng.random() < 0.3:
            f = f[: rng.randrange(len(f) + 1)]
        reason = frames.classify(f)
        assert reason is None or reason in frames.MALFORMED_REASONS
        if reason is None:
            assert f[14] == 0x45 and header_ok(bytes(f))


# ----- ICMP builders -----------------------------------------------------------------------


@SETTINGS
@given(ip_frames(ttl=st.integers(0, 1)), ipv4)
def test_icmp_time_exceeded_is_valid_and_quotes_header(frame: bytes, router: str) -> None:
    from socket import inet_aton

    pkt = IP(bytes(frames.icmp_time_exceeded(frame, inet_aton(router))))
    orig = Ether(frame)[IP]
    assert pkt.src == router and pkt.dst == orig.src
    assert pkt.len == len(bytes(pkt))
    assert checksum(bytes(pkt)[:20]) == 0
    icmp = pkt[ICMP]
    assert (icmp.type, icmp.code) == (11, 0)
    assert checksum(bytes(icmp)) == 0
    assert bytes(icmp)[8:] == frame[14:42]  # original IP header + first 8 bytes
    assert pkt[IPerror].src == orig.src and pkt[IPerror].dst == orig.dst
    assert pkt[IPerror].ttl == orig.ttl


@SETTINGS
@given(ipv4, ipv4, u16, u16, st.binary(max_size=200))
def test_icmp_echo_reply(src: str, dst: str, ident: int, seq: int, payload: bytes) -> None:
    req = bytes(Ether() / IP(src=src, dst=dst) / ICMP(type=8, id=ident, seq=seq) / Raw(payload))
    reply = IP(bytes(frames.icmp_echo_reply(req)))
    assert (reply.src, reply.dst) == (dst, src)
    assert checksum(bytes(reply)[:20]) == 0 and reply.len == len(bytes(reply))
    icmp = reply[ICMP]
    assert (icmp.type, icmp.code, icmp.id, icmp.seq) == (0, 0, ident, seq)
    assert checksum(bytes(icmp)) == 0
    assert bytes(icmp.payload) == payload


@pytest.mark.parametrize(
    "frame",
    [
        bytes(Ether() / IP() / ICMP(type=0)),  # an echo reply is not answered
        bytes(Ether() / IP() / ICMP(type=3)),
        bytes(Ether() / IP() / UDP()),
        bytes(Ether() / IP(proto=1) / b"\x08\0\0"),  # too short to be an echo request
    ],
)
def test_icmp_echo_reply_ignores_other_packets(frame: bytes) -> None:
    assert frames.icmp_echo_reply(frame) is None

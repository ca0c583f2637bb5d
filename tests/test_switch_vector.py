"""The vector path (switch/vector.py) sends exactly what the frame-object path sends.

Same method as tests/test_switch_fastpath.py, with rings as deep as the real ones (1024 rx
slots, 512 tx slots) and bursts deep enough for the vector path to take them: one switch
forwards through `forward_from_ring` (vector path on), its twin through read_batch +
`Switch.receive_batch`; what leaves each port, when, and every counter must be identical, and
the vector path must really have carried most of the frames.
"""

from __future__ import annotations

import random
import struct

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether
from scapy.utils import checksum

from switch import fastpath, ring, vector
from switch.config import switch_config
from switch.dataplane import Switch
from tests.test_switch_dataplane import fabric, peer_of
from tests.test_switch_fastpath import MemoryRing, same_behaviour, settle, step


def deep_twins(name: str, **topo) -> tuple[Switch, dict, Switch, dict]:
    topo = {"spines": 4, "leaves": 3, "hosts_per_leaf": 2, "link_mbps": 0, "delay_us": 0} | topo
    cfg = switch_config(fabric(**topo), name)
    size = ring.frame_size_for(cfg.mtu)  # as python -m switch opens its rings
    rx, tx = (ring.RX_FRAMES, ring.TX_FRAMES) if size == ring.FRAME_SIZE else (512, 512)
    a: dict[str, MemoryRing] = {}
    b: dict[str, MemoryRing] = {}
    sa = Switch(cfg, open_port=lambda p: a.setdefault(p, MemoryRing(p, rx, tx, size)))
    sb = Switch(cfg, open_port=lambda p: b.setdefault(p, MemoryRing(p, rx, tx, size)))
    return sa, a, sb, b


_HEADERS: dict[tuple, bytes] = {}


def _frame(f: int, dst: str, size: int, tcp: bool, ttl: int) -> bytes:
    """Ether / IP / TCP-or-UDP / padding to `size`, byte for byte what scapy builds.

    scapy builds each (flow, destination, size) once; the TTL is then set in a copy and the IPv4
    header checksum recomputed (scapy's own `checksum`). The L4 checksum does not cover the TTL.
    Building thousands of frames with scapy was most of this module's time."""
    key = (f, dst, size, tcp)
    if key not in _HEADERS:
        l4 = TCP(sport=30000 + f, dport=80) if tcp else UDP(sport=49152 + f, dport=4791)
        pkt = (
            Ether(dst="02:7b:00:00:00:02", src="02:7b:00:00:00:01")
            / IP(src="10.1.1.1", dst=dst, ttl=64)
            / l4
        )
        _HEADERS[key] = bytes(pkt / (b"v" * max(0, size - len(pkt))))
    frame = bytearray(_HEADERS[key])
    frame[22] = ttl  # Ethernet 14 + IPv4 TTL offset 8
    frame[24:26] = b"\0\0"  # the checksum, zero while it is summed
    frame[24:26] = struct.pack("!H", checksum(bytes(frame[14:34])))
    return bytes(frame)


def flow_frames(
    rng: random.Random, n: int, flows: int, tcp: bool = False, sizes=(64, 100, 600, 1400, 1514)
) -> list[bytes]:
    """`n` frames from h1 over `flows` flows to hosts behind other leaves, of `sizes`."""
    out = []
    for _ in range(n):
        f = rng.randrange(flows)
        size = rng.choice(sizes)
        dst = rng.choice(["10.1.2.1", "10.1.3.2"])
        out.append(_frame(f, dst, size, tcp, ttl=rng.randrange(2, 256)))
    return out


def test_frames_are_what_scapy_builds() -> None:
    """The shortcut in `_frame` changes no byte: the same draws, built whole by scapy."""
    rng, again = random.Random(7), random.Random(7)
    for tcp, sizes in ((False, (64, 1514)), (True, (100, 600)), (False, (4110, 9014))):
        fast = flow_frames(rng, 60, 8, tcp, sizes)
        for frame in fast:
            f = again.randrange(8)
            size = again.choice(sizes)
            l4 = TCP(sport=30000 + f, dport=80) if tcp else UDP(sport=49152 + f, dport=4791)
            pkt = (
                Ether(dst="02:7b:00:00:00:02", src="02:7b:00:00:00:01")
                / IP(
                    src="10.1.1.1",
                    dst=again.choice(["10.1.2.1", "10.1.3.2"]),
                    ttl=again.randrange(2, 256),
                )
                / l4
            )
            assert frame == bytes(pkt / (b"v" * max(0, size - len(pkt))))


@pytest.fixture
def vector_frames(monkeypatch) -> list[int]:
    """Counts the frames the vector path took (fastpath calls it by this name)."""
    taken: list[int] = []

    def counting(sw, port, io, now):
        n = vector.forward_vector(sw, port, io, now)
        taken.append(n)
        return n

    monkeypatch.setattr(fastpath, "forward_vector", counting)
    monkeypatch.setattr(fastpath, "VECTOR", True)
    return taken


def run_deep(name: str, bursts: list[list[bytes]], ingress: int = 0, before=None, **topo):
    """Both twins get `bursts`, one loop turn each; `before(k, ...)` runs before burst k."""
    sa, a, sb, b = deep_twins(name, **topo)
    now = 1.0
    for k, burst in enumerate(bursts):
        if before is not None:
            before(k, sa, a, sb, b)
        for f in burst:
            assert a[sa.ports[ingress].name].push(f)
            assert b[sb.ports[ingress].name].push(f)
        step(sa, a, True, now)
        step(sb, b, False, now)
        now += 1e-3
    settle(sa, a, now)
    settle(sb, b, now)
    same_behaviour(sa, a, sb, b)
    return sa, a


@pytest.mark.parametrize(
    "topo",
    [{}, {"link_mbps": 100_000}, {"link_mbps": 10_000}],
    ids=["unshaped", "100gbps", "10gbps-cut-by-the-shaper"],
)
@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
def test_deep_bursts_over_ecmp_leave_as_from_the_reference(vector_frames, topo, tcp) -> None:
    rng = random.Random(5)
    bursts = [flow_frames(rng, 700, 24, tcp) for _ in range(6)]  # vectors up to VEC_MAX
    sw, rings = run_deep("leaf1", bursts, **topo)
    total = sum(len(b) for b in bursts)
    sent = sum(len(io.sent) for io in rings.values())
    if topo.get("link_mbps", 0) in (0, 100_000):
        assert sent == total
    else:  # 700 frames at once overflow a 10 Gbps port's queue: tail drops, as the reference
        # (~37 %: a burst that finds the link idle starts serialising when it arrives, not
        # back at the end of the previous burst, so nothing is sent faster than the line rate)
        assert 0.25 * total < sent < 0.5 * total
    uplinks = [io for name, io in rings.items() if peer_of(sw, name).startswith("spine")]
    assert sum(1 for io in uplinks if io.sent) >= 3  # sprayed over the spines
    # A flow's first frame fills the flow cache through the per-frame path; most of the rest
    # go by vector (with a shaper, only as many per turn as end within EARLY_S).
    # At 10 Gbps a burst that finds the link idle starts when it arrives, so ~16 frames
    # (EARLY_S of serialisation) go straight to the wire per turn and the rest queue.
    share = sum(vector_frames) / total
    floor = {0: 0.6, 100_000: 0.15, 10_000: 0.03}[topo.get("link_mbps", 0)]
    assert share > floor, share
    assert sw.vector_frames == sum(vector_frames)  # the counters the bench reports
    assert sw.vector_bursts == sum(1 for n in vector_frames if n)


def test_a_bad_frame_is_left_to_the_per_frame_loop_with_everything_before_it(
    vector_frames,
) -> None:
    """No vector may hold the bad frame: the per-frame loop takes the slots up to and
    including it, and only the frames after it can go by vector again."""
    rng = random.Random(9)
    warm = flow_frames(rng, 300, 8)
    bad = flow_frames(rng, 300, 8)
    broken = bytearray(bad[150])
    broken[24] ^= 0x5A  # the IPv4 header checksum no longer holds
    bad[150] = bytes(broken)
    marks: list[int] = []
    sw, _ = run_deep(
        "leaf1", [warm, warm, bad], before=lambda k, *_: marks.append(len(vector_frames))
    )
    ends = [*marks[1:], len(vector_frames)]
    per_burst = [sum(vector_frames[m:e]) for m, e in zip(marks, ends, strict=True)]
    # A bad header checksum is a frame damaged on the link: counted on the receiving port.
    assert sum(p.counters.drops.get("rx_bad_frame", 0) for p in sw.ports) == 1
    assert per_burst[0] > 200 and per_burst[1] > 200  # clean bursts: mostly by vector
    assert 0 < per_burst[2] <= 300 - 151  # the bad burst: only frames after the bad one


def test_a_full_tx_ring_cuts_the_vector_and_the_rest_queues_as_in_the_reference(
    vector_frames,
) -> None:
    """The kernel stops taking frames from one uplink's tx ring: the vector gives that port
    only its free slots and stops before the first frame that does not fit."""

    full: list[int] = []

    def stall_one_uplink(k, sa, a, sb, b):
        for sw, rings in ((sa, a), (sb, b)):
            up = next(p.name for p in sw.ports if peer_of(sw, p.name) == "spine2")
            rings[up].refuse = k >= 1
        io = a[next(p.name for p in sa.ports if peer_of(sa, p.name) == "spine2")]
        full.append(sum(io.tx_u32[i * ring.WORDS_PER_FRAME] != 0 for i in range(io.tx_nr)))

    rng = random.Random(3)
    bursts = [flow_frames(rng, 300, 16) for _ in range(10)]
    run_deep("leaf1", bursts, before=stall_one_uplink, link_mbps=100_000)
    assert sum(vector_frames) > 0
    # The stalled uplink's tx ring really filled up (~75 frames a burst).
    assert max(full) == ring.TX_FRAMES


def test_the_vector_path_declines_below_its_minimum_depth(vector_frames) -> None:
    rng = random.Random(4)
    frames = flow_frames(rng, vector.VEC_MIN - 1, 4)
    run_deep("leaf1", [frames, frames, frames])
    assert sum(vector_frames) == 0


def test_jumbo_frames_in_jumbo_slots_leave_whole_as_from_the_reference(vector_frames) -> None:
    """MTU 9000: the rings have 16 KiB slots, and 9014-byte frames (a full MTU plus the
    Ethernet header) cross both the vector path and the per-frame loop whole, exactly as the
    frame-object reference sends them."""
    rng = random.Random(9)
    bursts = [flow_frames(rng, 300, 24, sizes=(64, 1514, 4110, 9014)) for _ in range(4)]
    sw, rings = run_deep("leaf1", bursts, mtu=9000)
    assert {io.frame_size for io in rings.values()} == {16384}
    sent = [f for io in rings.values() for _, f in io.sent]
    total = sum(len(b) for b in bursts)
    assert len(sent) == total and max(len(f) for f in sent) == 9014
    assert sum(vector_frames) > 0.5 * total

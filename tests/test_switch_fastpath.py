"""The inline ring path (switch/fastpath.py) sends exactly what the frame-object path sends.

Both run over in-memory rings: `MemoryRing` is the real RingSocket ring code (read_batch,
send, flush, the slot headers) on an anonymous mapping, with the kernel's part played by
`push` (a frame arrives in the next rx slot) and the flush (every queued tx slot leaves). Two
switches with the same config see the same frames at the same times, one through
`forward_from_ring`, the other through read_batch + `Switch.receive_batch`; what leaves each
port, the counters and the drop reasons must be identical. No root needed.
"""

from __future__ import annotations

import mmap
import random
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.utils import checksum

from switch import fastpath, frames, ring
from switch.config import switch_config
from switch.dataplane import Switch
from tests.test_switch_dataplane import fabric, mutate, peer_mac_of, peer_of, templates, udp_frame

MAC_OFFSET = 66  # where TPACKET_V2 puts an Ethernet frame in its slot on this kernel


class MemoryRing(ring.RingSocket):
    """RingSocket's ring code over anonymous mappings (rx, tx); this class plays the kernel."""

    def __init__(
        self, ifname: str, frames_nr: int = 64, tx_nr: int = 16, frame_size: int = ring.FRAME_SIZE
    ) -> None:
        self.ifname = ifname
        self.frame_nr = frames_nr
        self.tx_nr = tx_nr
        self.fd = -1
        self._send = self._kernel_sends
        self._init_rings(
            mmap.mmap(-1, frames_nr * frame_size), mmap.mmap(-1, tx_nr * frame_size), frame_size
        )
        self.rx_tail = 0  # next rx slot the "kernel" fills
        self.tx_tail = 0  # next tx slot the "kernel" sends
        self.sent: list[tuple[float, bytes]] = []  # (the loop's clock, frame) as it left
        self.clock = 0.0
        self.refuse = False  # the kernel leaves queued tx slots alone (a full tx ring)

    def push(self, frame: bytes, truncated: bool = False) -> bool:
        """A frame arrives: into the next rx slot, unless the ring is full (a kernel drop)."""
        word = self.rx_tail * self.words_per_frame
        if self.u32[word] != ring.TP_STATUS_KERNEL:
            self.kernel_drops += 1
            return False
        start = self.rx_tail * self.frame_size + MAC_OFFSET
        self.mm[start : start + len(frame)] = frame
        self.u32[word + 1] = len(frame)
        self.u32[word + 2] = len(frame) // 2 if truncated else len(frame)
        self.u16[word * 2 + 6] = MAC_OFFSET
        self.u32[word] = ring.TP_STATUS_USER | (ring.TP_STATUS_COPY if truncated else 0)
        self.rx_tail = (self.rx_tail + 1) % self.frame_nr
        return True

    def _kernel_sends(self, _data: bytes, _flags: int) -> None:
        if self.refuse:
            return
        while True:
            word = self.tx_tail * self.words_per_frame
            if self.tx_u32[word] != ring.TP_STATUS_SEND_REQUEST:
                return
            start = word * 4 + ring.TX_DATA_OFF
            self.sent.append((self.clock, bytes(self.tx_mm[start : start + self.tx_u32[word + 1]])))
            self.tx_u32[word] = ring.TP_STATUS_AVAILABLE
            self.tx_tail = (self.tx_tail + 1) % self.tx_nr

    def poll_kernel_drops(self) -> int:
        return self.kernel_drops


def twin_switches(name: str, **topo) -> tuple[Switch, dict, Switch, dict]:
    topo = {"spines": 4, "leaves": 3, "hosts_per_leaf": 2, "link_mbps": 0, "delay_us": 0} | topo
    cfg = switch_config(fabric(**topo), name)
    a: dict[str, MemoryRing] = {}
    b: dict[str, MemoryRing] = {}
    sa = Switch(cfg, open_port=lambda p: a.setdefault(p, MemoryRing(p)))
    sb = Switch(cfg, open_port=lambda p: b.setdefault(p, MemoryRing(p)))
    return sa, a, sb, b


def step(sw: Switch, rings: dict[str, MemoryRing], fast: bool, now: float) -> None:
    """One turn of the event loop: drain every rx ring, service the shapers, flush."""
    for io in rings.values():
        io.clock = now
    for port, io in zip(sw.ports, sw.io, strict=True):
        while True:
            if fast:
                n = fastpath.forward_from_ring(sw, port, io, now, 8)
            else:
                batch: list = []
                n = io.read_batch(batch, 8)
                if n:
                    sw.receive_batch(port, batch, now)
                    io.release()
            if not n:
                break
    sw.active.serve(now)
    for io in rings.values():
        io.flush()


def settle(sw: Switch, rings: dict[str, MemoryRing], now: float) -> None:
    """Run the clock on until nothing is queued or in flight."""
    for _ in range(10_000):
        if not any(p.inflight or p.queue.data or p.queue.prio for p in sw.ports):
            break
        now += 1e-4
        step(sw, rings, False, now)
    for io in rings.values():
        io.refuse = False
        io.flush()


def same_behaviour(sa, a, sb, b) -> None:
    sent_a = {n: io.sent for n, io in a.items() if io.sent}
    sent_b = {n: io.sent for n, io in b.items() if io.sent}
    assert sent_a == sent_b
    ca, cb = sa.counters(), sb.counters()
    for c in (ca, cb):
        for key in (
            "uptime_s",
            "cpu_s",
            "cpu_user_s",
            "cpu_sys_s",
            "rss_peak_mb",  # the process's memory, which grows between the two reads
            "loop_wakeups",
            "vector_frames",
            "vector_bursts",
        ):
            c.pop(key, None)
    assert ca == cb


def run_both(name: str, script, impair=None, **topo) -> tuple:
    """`script` yields (port index, frame bytes, now, truncated); both switches get the same."""
    sa, a, sb, b = twin_switches(name, **topo)
    if impair is not None:
        impair(sa)
        impair(sb)
    now = 0.0
    for pending in script:
        for idx, frame, at, truncated in pending:
            a[sa.ports[idx].name].push(frame, truncated)
            b[sb.ports[idx].name].push(frame, truncated)
            now = at
        step(sa, a, True, now)
        step(sb, b, False, now)
    settle(sa, a, now)
    settle(sb, b, now)
    same_behaviour(sa, a, sb, b)
    return sa, a


def fuzz_script(seed: int, n: int, nports: int, burst: int = 12):
    rng = random.Random(seed)
    now = 1.0
    out = []
    for _ in range(n // burst):
        pending = []
        for _ in range(rng.randint(1, burst)):
            t = rng.choice(templates())
            f = mutate(rng, t) if rng.random() < 0.5 else t
            pending.append((rng.randrange(nports), f[:1514], now, rng.random() < 0.02))
        now += rng.choice([0.0, 1e-6, 3e-5, 2e-4, 3e-3])
        out.append(pending)
    return out


def impairments(sw: Switch) -> None:
    sw.ports[-1].loss = 0.3
    sw.ports[-2].blackhole = True
    sw.ports[0].rx_loss = 0.1
    sw.set_port_up(sw.ports[1], False)
    sw.refresh()


@pytest.mark.parametrize("name", ["leaf1", "spine2"])
@pytest.mark.parametrize(
    "topo",
    [
        {},  # unshaped: every routed frame goes straight to the tx ring
        {"link_mbps": 100},  # shaped, no delay: idle cut-through, else the queue
        {"link_mbps": 10, "queue_kb": 4},  # shaped hard: queues, trims and drops
        {"link_mbps": 100, "delay_us": 20},  # a delay: never direct
        {"ecmp_hash": "crc"},  # _decide's other hash (the default, mixed, is in the rest)
    ],
    ids=["unshaped", "100mbps", "10mbps-small-queue", "delay", "crc-hash"],
)
def test_fuzzed_traffic_leaves_both_paths_identically(name, topo) -> None:
    sw, rings = run_both(name, fuzz_script(7, 1200, 6 if name == "leaf1" else 3), **topo)
    assert sum(len(io.sent) for io in rings.values()) > 100  # most of it was forwarded
    assert sw.udp_flows and sw.tcp_flows  # the inline path made decisions of its own


@pytest.mark.parametrize("name", ["leaf1", "spine2"])
def test_impaired_ports_behave_identically(name) -> None:
    run_both(name, fuzz_script(11, 1200, 3), impair=impairments, link_mbps=100)


def test_debug_mode_and_switch_down_take_the_reference_path() -> None:
    def down(sw):
        sw.set_switch_up(False)

    sw, rings = run_both("leaf1", fuzz_script(3, 200, 6), impair=down)
    assert sum(len(io.sent) for io in rings.values()) == 0
    assert sw.drops.get("switch_down", 0) > 0


def test_a_full_tx_ring_falls_back_and_counts_like_the_reference() -> None:
    sa, a, sb, b = twin_switches("leaf1")
    for rings in (a, b):
        for io in rings.values():
            io.refuse = True  # the kernel sends nothing: the 16 tx slots fill up
    frame = bytes(Ether(dst="02:7b:00:00:00:02") / IP(src="10.1.1.1", dst="10.1.1.2") / UDP())
    for _ in range(3):
        for _ in range(20):
            a[sa.ports[2].name].push(frame)
            b[sb.ports[2].name].push(frame)
        step(sa, a, True, 1.0)
        step(sb, b, False, 1.0)
    [c] = [p for p in sa.counters()["ports"].values() if p["tx_packets"] or p["drops"]]
    assert c["tx_packets"] == 16 and c["drops"] == {"tx_error": 44}
    settle(sa, a, 1.0)
    settle(sb, b, 1.0)
    same_behaviour(sa, a, sb, b)


def frame_with_checksum(target: int, ttl: int = 64) -> bytes:
    """A valid UDP frame to a remote host whose IP header checksum is `target`."""
    base = IP(src="10.1.1.1", dst="10.1.3.2", ttl=ttl, id=0) / UDP(sport=1000, dport=4791)
    c0 = struct.unpack_from("!H", bytes(base), 10)[0]
    # The checksum is ~(S + id) in one's complement arithmetic, where ~S is c0 (id 0).
    x = (~target & 0xFFFF) + c0
    x = (x & 0xFFFF) + (x >> 16)
    f = bytes(Ether(dst="02:7b:00:00:00:02") / IP(bytes(base)))
    f = bytearray(f)
    struct.pack_into("!H", f, 18, x)
    frames.set_ip_checksum(f)
    assert struct.unpack_from("!H", f, 24)[0] == target
    return bytes(f)


# 0xFFFF never comes out of a checksum computation (it would need every word to be zero).
@pytest.mark.parametrize("target", [0x0000, 0x1234, 0xFEFE, 0xFEFF, 0xFF00, 0xFFFE])
def test_ttl_and_checksum_update_at_every_carry_boundary(target) -> None:
    f = frame_with_checksum(target)
    warm = frame_with_checksum(0x1111)  # the first frame to a destination caches its route
    sw, rings = run_both("leaf1", [[(0, warm, 1.0, False)], [(0, f, 1.0, False)]])
    [_, (_, got)] = [s for io in rings.values() for s in io.sent]
    assert got[22] == 63 and checksum(got[14:34]) == 0
    ref = bytearray(f)
    frames.decrement_ttl(ref)  # the slow path's RFC 1624 update
    assert got[22:26] == ref[22:26]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.sampled_from(range(40)), st.binary(max_size=24)),
        min_size=1,
        max_size=30,
    ),
    st.sampled_from([0, 100]),
)
def test_hypothesis_random_frames_and_corruptions(items, mbps) -> None:
    ts = templates()
    script = []
    for k, (port, which, junk) in enumerate(items):
        f = bytearray(ts[which % len(ts)])
        for i, byte in enumerate(junk[: len(junk) // 2]):
            f[(i * 37 + byte) % len(f)] = byte
        if junk and junk[0] & 1 and len(f) >= 34 and f[12:14] == b"\x08\x00":
            frames.set_ip_checksum(f)  # corrupt, but with a valid header checksum
        script.append([(port, bytes(f), 1.0 + k * 1e-5, False)])
    sw, _ = run_both("leaf1", script, link_mbps=mbps)


def test_every_forwarded_frame_is_valid_and_addressed_to_the_peer() -> None:
    sw, rings = run_both("leaf1", fuzz_script(5, 600, 6), link_mbps=100)
    for pname, io in rings.items():
        for _, f in io.sent:
            assert frames.classify(f) is None
            assert f[0:6] == frames.mac_bytes(peer_mac_of(sw, pname))


def test_a_frame_never_overtakes_a_queue_the_loop_was_late_to_serve() -> None:
    """The loop wakes long after the queue's frames were due: a new frame still goes last."""
    burst = [(0, f, 1.0, False) for f in [frame_with_checksum(0x2000 + i) for i in range(12)]]
    late = [(0, frame_with_checksum(0x3000), 1.5, False)]
    sw, rings = run_both("leaf1", [burst, late], link_mbps=10, queue_kb=64)
    [out] = [io.sent for io in rings.values() if io.sent]
    ids = [struct.unpack_from("!H", f, 18)[0] for _, f in out]
    assert len(ids) == 13 and ids[-1] == struct.unpack_from("!H", late[0][1], 18)[0]


@pytest.mark.parametrize("length", [34, 35, 36, 37])
def test_a_udp_header_cut_short_hashes_on_its_own_bytes_not_the_slots_leftovers(length) -> None:
    """A frame that ends inside the ports: the bytes after it in the slot are a previous frame's."""
    long = [
        (0, bytes(udp_frame(sport=40000 + i, payload=b"x" * 200)), 1.0, False) for i in range(64)
    ]
    short = []
    for i in range(16):
        f = bytearray(udp_frame(src="10.1.1.1", dst="10.1.3.2", sport=50000 + i))[:length]
        struct.pack_into("!H", f, 16, 20)  # total length: the IPv4 header alone
        frames.set_ip_checksum(f)
        short.append((0, bytes(f), 1.0, False))
    sw, rings = run_both("leaf1", [long[:32], long[32:], short])
    assert sum(len(io.sent) for io in rings.values()) == 64 + 16


def test_a_run_to_one_port_interrupted_by_the_slow_path_keeps_order_and_counts() -> None:
    """Runs (forward_from_ring's docstring): the egress state a run keeps in locals is written
    back before the slow path sends on that same port, so nothing is overwritten or reordered.

    On spine2 every frame for 10.1.1.0/24 leaves by the leaf1 port: a cached flow starts a run,
    the first frame to another host of that subnet takes the slow path (its route is not
    cached yet) out of the same port, a frame with a bad checksum is dropped in between, and
    the run goes on."""
    cached = [bytes(udp_frame(src="10.1.2.1", dst="10.1.1.1", sport=7000 + i)) for i in range(6)]
    first = bytes(udp_frame(src="10.1.2.1", dst="10.1.1.2", sport=9000))
    bad = bytearray(udp_frame(src="10.1.2.1", dst="10.1.1.1", sport=9001))
    bad[24] ^= 0xFF
    sa, a, sb, b = twin_switches("spine2")
    ingress = next(i for i, p in enumerate(sa.ports) if peer_of(sa, p.name) == "leaf2")
    egress = next(p.name for p in sa.ports if peer_of(sa, p.name) == "leaf1")
    script = [[(ingress, cached[0], 1.0, False)]]  # caches the route to 10.1.1.1
    burst = [cached[1], cached[2], first, cached[3], bytes(bad), cached[4], cached[5]]
    script.append([(ingress, f, 1.0, False) for f in burst])
    for pending in script:
        for idx, frame, _, _ in pending:
            a[sa.ports[idx].name].push(frame)
            b[sb.ports[idx].name].push(frame)
        step(sa, a, True, 1.0)
        step(sb, b, False, 1.0)
    same_behaviour(sa, a, sb, b)
    got = [struct.unpack_from("!H", f, 34)[0] for _, f in a[egress].sent]
    assert got == [7000, 7001, 7002, 9000, 7003, 7004, 7005]
    c = sa.counters()["ports"][egress]
    assert c["tx_packets"] == 7 and c["tx_bytes"] == sum(len(f) for f in [*cached, first])
    assert sa.counters()["ports"][sa.ports[ingress].name]["rx_packets"] == 8


def test_the_ring_path_source_routes_mrc_traffic_as_the_reference_does() -> None:
    """On a source-routed fabric _decide reads a RoCEv2 packet's EV instead of hashing: the
    ring path and the reference path send every EV (and every other flow) to the same port."""
    rng = random.Random(5)
    script = []
    now = 1.0
    for _ in range(60):
        burst = []
        for _ in range(rng.randint(1, 8)):
            dport = 4791 if rng.random() < 0.8 else rng.randrange(1, 65536)
            frame = udp_frame(dst=f"10.1.{rng.choice([2, 3])}.{rng.choice([1, 2])}")
            frame = (
                frame[:34] + struct.pack("!HH", rng.randrange(0xC000, 0x10000), dport) + frame[38:]
            )
            burst.append((rng.randrange(2), frame, now, False))
        now += rng.choice([1e-6, 3e-5, 2e-4])
        script.append(burst)
    sw, rings = run_both("leaf1", script, forwarding="source-routed")
    assert sum(len(io.sent) for io in rings.values()) > 200
    assert sw.udp_flows  # the ring path decided (and cached) flows of its own

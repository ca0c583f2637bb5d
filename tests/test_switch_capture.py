"""switch/pcap.py and switch/capture.py: the switch writes what its ports send and receive.

The writer's files are read back with scapy (frames, nanosecond virtual timestamps, snaplen
and the length on the wire, the size cap). The capture is checked against what the ports
really sent, on a switch over in-memory rings (the inline per-frame loop and the vector path
must hand a captured port's frames to the recording path, and forward exactly as without a
capture) and on switches wired in memory (switch/local_links.py), whose links no veth carries:
their capture must hold what a veth would have carried, at the same virtual times. No root.
"""

from __future__ import annotations

import json
import struct

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.utils import rdpcap

from switch import fastpath
from switch.capture import Capture
from switch.config import switch_config
from switch.control import handle
from switch.dataplane import Switch
from switch.pcap import MAGIC_NS, PcapWriter
from tests.test_switch_dataplane import make_switch, udp_frame, uplinks
from tests.test_switch_fastpath import (
    MemoryRing,
    fabric,
    fuzz_script,
    same_behaviour,
    settle,
    step,
    twin_switches,
)
from tests.test_switch_local_links import FAB, Bed, replay, traffic


def ns(t: float) -> int:
    return round(t * 1e9)


def read(path) -> list[tuple[int, int, bytes]]:
    """(timestamp in ns, length on the wire, the bytes kept) of every record, via scapy."""
    return [(int(p.time * 1_000_000_000), p.wirelen, bytes(p)) for p in rdpcap(str(path))]


# ----- the writer ------------------------------------------------------------------------------


def test_the_writer_round_trips_frames_and_virtual_nanoseconds_through_scapy(tmp_path) -> None:
    frames = [bytes(udp_frame(sport=49152 + i, payload=b"p" * (10 * i))) for i in range(20)]
    times = [12345.000000001 + i * 1.2e-7 for i in range(20)]  # 120 ns apart: a 100G frame
    w = PcapWriter(tmp_path / "a.pcap", snaplen=65535)
    for f, t in zip(frames, times, strict=True):
        w.record(f, t)
    w.close()
    assert (tmp_path / "a.pcap").read_bytes()[:4] == struct.pack("<I", MAGIC_NS)
    got = read(tmp_path / "a.pcap")
    assert [g[2] for g in got] == frames
    assert [g[1] for g in got] == [len(f) for f in frames]
    assert [g[0] for g in got] == [ns(t) for t in times]
    assert w.written == 20 and w.not_written == 0


def test_snaplen_keeps_the_head_and_the_length_on_the_wire(tmp_path) -> None:
    big = bytes(udp_frame(payload=b"x" * 1400))
    small = bytes(udp_frame(payload=b"y" * 10))
    w = PcapWriter(tmp_path / "s.pcap", snaplen=128)
    w.record(big, 1.0)
    w.record(small, 2.0)
    w.close()
    (t1, len1, kept1), (t2, len2, kept2) = read(tmp_path / "s.pcap")
    assert kept1 == big[:128] and len1 == len(big) == 1442
    assert kept2 == small and len2 == len(small)
    assert (t1, t2) == (1_000_000_000, 2_000_000_000)
    assert Ether(kept1)[UDP].dport == 4791  # the headers survive the cut


def test_the_size_cap_stops_the_file_and_counts_what_it_left_out(tmp_path) -> None:
    f = bytes(udp_frame(payload=b"z" * 200))  # 242 B; 128 kept: a record of 144 B
    w = PcapWriter(tmp_path / "c.pcap", snaplen=128, max_bytes=24 + 144 * 10 + 100)
    for i in range(25):
        w.record(f, 1.0 + i)
    w.close()
    assert (w.written, w.not_written) == (10, 15)
    assert len(read(tmp_path / "c.pcap")) == 10
    assert (tmp_path / "c.pcap").stat().st_size == w.size <= w.max_bytes


def test_a_snaplen_that_cannot_hold_an_ethernet_header_is_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match="snaplen"):
        PcapWriter(tmp_path / "x.pcap", snaplen=10)


# ----- a switch over in-memory rings: the inline loop and the vector path -------------------


class StepClock:
    """The capture's clock: the virtual time the test's event loop is at."""

    def __init__(self, rings: dict[str, MemoryRing]) -> None:
        self.ring = next(iter(rings.values()))

    def __call__(self) -> float:
        return self.ring.clock


@pytest.mark.parametrize("topo", [{}, {"link_mbps": 100}, {"link_mbps": 10, "queue_kb": 4}])
@pytest.mark.parametrize("direction", ["tx", "rx"])
def test_a_captured_ring_switch_records_what_its_ports_carry_and_forwards_as_before(
    tmp_path, topo, direction
) -> None:
    sa, a, sb, b = twin_switches("leaf1", **topo)
    names = [p.name for p in sa.ports]
    cap = Capture(sa, names, str(tmp_path), StepClock(a), direction=direction, snaplen=2000)
    assert all(not p.rx_clean for p in sa.ports) == (direction == "rx")
    pushed: dict[str, list[tuple[float, bytes]]] = {n: [] for n in names}
    now = 0.0
    for pending in fuzz_script(5, 900, len(names)):
        for idx, frame, at, truncated in pending:
            arrived = a[names[idx]].push(frame, truncated)
            b[names[idx]].push(frame, truncated)
            now = at
            if arrived and not truncated:  # one longer than its slot never reaches the switch
                pushed[names[idx]].append((at, bytes(frame)))
        step(sa, a, True, now)
        step(sb, b, True, now)
    settle(sa, a, now)
    settle(sb, b, now)
    stats = cap.stop()
    same_behaviour(sa, a, sb, b)  # the capture changed nothing the network sees
    total = 0
    for name in names:
        got = read(tmp_path / f"leaf1-{name}.pcap")
        want = a[name].sent if direction == "tx" else pushed[name]
        assert [(t, f) for t, _, f in got] == [(ns(t), f) for t, f in want], name
        key = f"{direction}_packets"
        counted = getattr(sa.port_by_name[name].counters, key)
        assert stats[name]["written"] == stats[name][key] == len(got) == counted, name
        total += len(got)
    assert total > 100
    # Put back: the inline paths are the port's own again.
    assert all(p.rx_clean and p.transmit == a[p.name].send for p in sa.ports)
    assert sa.tx_rings == [a[p.name] for p in sa.ports]


def test_the_vector_path_leaves_a_captured_port_to_the_recording_path(tmp_path) -> None:
    """A deep burst of one flow: without a capture the vector path forwards it (so this test
    exercises it); with the egress port captured every frame is recorded, none is lost."""
    cfg = switch_config(fabric(spines=4, leaves=3, hosts_per_leaf=2, link_mbps=0, delay_us=0),
                        "leaf1")  # fmt: skip

    def bed() -> tuple[Switch, dict[str, MemoryRing]]:
        rings: dict[str, MemoryRing] = {}
        sw = Switch(cfg, open_port=lambda p: rings.setdefault(p, MemoryRing(p, 256, 256)))
        return sw, rings

    warm = bytes(udp_frame(payload=b"w" * 200))
    burst = [bytes(udp_frame(payload=bytes([i]) * 200)) for i in range(200)]
    host = next(p.name for p in cfg.ports if p.peer_node == "h1")
    runs = {}
    for captured in (False, True):
        sw, rings = bed()
        # Warm the caches: the first frame caches the route (slow path), the second the
        # flow's hop (inline loop); the vector path takes only flows with a cached hop.
        for _ in range(2):
            rings[host].push(warm)
            step(sw, rings, True, 1.0)
        out = next(n for n, io in rings.items() if io.sent)
        cap = None
        if captured:
            cap = Capture(sw, [out], str(tmp_path), StepClock(rings), direction="tx")
        # Starting a capture clears the flow caches (Switch.refresh): warm the hop again,
        # so that it is the captured port, not a cold cache, that keeps the vector path off.
        rings[host].push(warm)
        step(sw, rings, True, 1.5)
        assert sw.udp_flows
        for f in burst:
            rings[host].push(f)
        for io in rings.values():
            io.clock = 2.0
        assert fastpath.forward_from_ring(sw, sw.port_by_name[host], rings[host], 2.0, 256) > 0
        step(sw, rings, True, 2.0)
        stats = cap.stop() if cap is not None else None
        runs[captured] = (sw, rings, out, stats)
    sw0, rings0, out0, _ = runs[False]
    assert sw0.vector_frames >= 96, "the uncaptured switch did not take the vector path"
    sw1, rings1, out1, stats = runs[True]
    assert sw1.vector_frames == 0
    assert out1 == out0
    assert [f for _, f in rings1[out1].sent] == [f for _, f in rings0[out0].sent]
    assert len(rings1[out1].sent) == 203
    got = read(tmp_path / f"leaf1-{out1}.pcap")
    assert len(got) == stats[out1]["written"] == stats[out1]["tx_packets"] == 201
    assert [f for _, _, f in got] == [f[:128] for _, f in rings1[out1].sent[2:]]
    assert [t for t, _, _ in got] == [1_500_000_000] + [2_000_000_000] * 200


# ----- switches wired in memory ------------------------------------------------------------------


def test_links_wired_in_memory_are_captured_as_their_veths_would_have_carried_them(
    tmp_path,
) -> None:
    """leaf1's uplink to spine1 (tx) and spine1's port from leaf1 (rx), on switches wired in
    memory, hold the frames -- and the virtual times -- that the same link's veth carried in
    the bed whose switches are wired through veths."""
    veth, wired = Bed(wired=False), Bed(wired=True)
    up = FAB.interface("leaf1", "spine1")
    # What the veth bed's leaf1 puts on that veth (its fake veth hands it on, keeping none).
    carried_by_veth: list[tuple[float, bytes]] = []
    port = veth.switches["leaf1"].port_by_name[up.name]
    inner = port.transmit

    def logged(f) -> bool:
        carried_by_veth.append((veth.clock.t, bytes(f)))
        return inner(f)

    port.transmit = logged
    spine = wired.switches["spine1"]
    tx = Capture(wired.switches["leaf1"], [up.name], str(tmp_path), wired.clock,
                 direction="tx", snaplen=4096)  # fmt: skip
    rx = Capture(spine, [up.peer_name], str(tmp_path), wired.clock, direction="rx", snaplen=4096)
    frames = traffic(4)
    replay(veth, frames)
    replay(wired, frames)
    tx.stop()
    rx.stop()
    carried = [(ns(t), f) for t, f in carried_by_veth]
    assert len(carried) > 30
    got_tx = read(tmp_path / f"leaf1-{up.name}.pcap")
    got_rx = read(tmp_path / f"spine1-{up.peer_name}.pcap")
    assert [(t, f) for t, _, f in got_tx] == carried
    assert [(t, f) for t, _, f in got_rx] == carried
    assert wired.host_rx() == veth.host_rx()  # and the capture changed nothing
    assert all(IP(f[14:]).ttl == 63 for _, f in carried)  # leaf1 forwarded them (TTL - 1)


# ----- the control op --------------------------------------------------------------------------


def ctl(sw: Switch, **req) -> dict:
    return handle(sw, json.dumps({"op": "capture", **req}).encode())


def test_the_capture_op_starts_stops_and_reports(tmp_path) -> None:
    sw, ios = make_switch("leaf1")
    up = uplinks(sw)[0]
    host = next(p.name for p in sw.config.ports if p.peer_node == "h1")
    r = ctl(sw, on=True, dir=str(tmp_path), ports=[up], direction="both", snaplen=64)
    assert r["ok"] and r["files"] == {up: str(tmp_path / f"leaf1-{up}.pcap")}
    assert ctl(sw, on=True, dir=str(tmp_path), ports=[up])["error"].endswith("stop it first")
    for i in range(40):
        sw.receive(sw.port_by_name[host], udp_frame(sport=50000 + i), 1.0)
    r = ctl(sw, on=False)
    assert r["ok"]
    st = r["ports"][up]
    sent_up = len(ios[up].sent)
    assert st["tx_packets"] == sent_up == st["written"] > 0
    assert st["rx_packets"] == 0
    assert len(read(tmp_path / f"leaf1-{up}.pcap")) == sent_up
    assert ctl(sw, on=False)["error"] == "capture: no capture is running"


@pytest.mark.parametrize(
    ("req", "error"),
    [
        ({"ports": ["leaf1-eth99"]}, "capture: ports: no port 'leaf1-eth99' on leaf1"),
        ({"ports": []}, "capture: ports: name at least one port"),
        ({"ports": "leaf1-eth0"}, "capture: ports: must be a list"),
        ({"ports": ["leaf1-eth0"], "direction": "up"}, "capture: direction: one of tx, rx, both"),
        ({"ports": ["leaf1-eth0"], "snaplen": 4}, "capture: snaplen: must be a number in"),
        ({"ports": ["leaf1-eth0"], "dir": "/nonexistent/x"}, "capture: dir: no directory"),
        ({"ports": ["leaf1-eth0"], "colour": 1}, "capture: unknown field 'colour'"),
    ],
)
def test_a_bad_capture_request_is_refused_and_changes_nothing(tmp_path, req, error) -> None:
    sw, _ = make_switch("leaf1")
    before = [(p.transmit, p.rx_clean) for p in sw.ports]
    r = ctl(sw, on=True, **({"dir": str(tmp_path)} | req))
    assert not r["ok"] and r["error"].startswith(error)
    assert sw.capture is None
    assert [(p.transmit, p.rx_clean) for p in sw.ports] == before

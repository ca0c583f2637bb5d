"""Lab 1 checks: your ecmp.py must agree with the switches' own hash, and with what your
traceroutes saw (results/traceroutes.txt, written by step 5 of the README)."""

from __future__ import annotations

import random
import re
import socket
import struct
from pathlib import Path

import pytest

from contracts.ports import ROCEV2_UDP_PORT
from switch.config import switch_config
from switch.fib import Fib, Route, select_next_hop
from testbed.fabric.paths import predict_path
from testbed.labs.grading import load_student
from topologies import leaf_spine

LAB = Path(__file__).resolve().parent.parent
FAB = leaf_spine(spines=3, leaves=3, hosts_per_leaf=2)  # the README's fabric
SEED = switch_config(FAB, "leaf1", seed=1).seed  # `testbed fib leaf1` prints it
GROUP = ["spine1", "spine2", "spine3"]


@pytest.fixture(scope="module")
def ecmp():
    return load_student("ecmp")


def _frame(src: str, dst: str, sport: int, dport: int, proto: int) -> bytes:
    ip = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        28,
        0,
        0,
        64,
        proto,
        0,
        socket.inet_aton(src),
        socket.inet_aton(dst),
    )
    return bytes(14) + ip + struct.pack("!HHHH", sport, dport, 8, 0)


def _random_ip(rng: random.Random) -> str:
    return socket.inet_ntoa(rng.getrandbits(32).to_bytes(4, "big"))


@pytest.mark.parametrize("proto", [17, 6])
def test_flow_hash_matches_the_switch(ecmp, proto: int) -> None:
    rng = random.Random(proto)
    for _ in range(200):
        seed = rng.getrandbits(32)
        src, dst = _random_ip(rng), _random_ip(rng)
        sport, dport = rng.randrange(65536), rng.randrange(65536)
        frame = _frame(src, dst, sport, dport, proto)
        want = Fib([], seed=seed).flow_hash(frame)
        got = ecmp.flow_hash(src, dst, sport, dport, proto, seed)
        plain = Fib([], seed=seed, ecmp_hash="crc").flow_hash(frame)
        assert got != plain, "that is the CRC alone: the switch passes it through mix32"
        assert got == want, f"flow_hash({src}, {dst}, {sport}, {dport}, {proto}, {seed})"


def test_flow_hash_of_icmp_ignores_ports(ecmp) -> None:
    want = Fib([], seed=SEED).flow_hash(_frame("10.1.1.1", "10.1.3.2", 0, 0, 1))
    assert ecmp.flow_hash("10.1.1.1", "10.1.3.2", 0, 0, 1, SEED) == want
    assert ecmp.flow_hash("10.1.1.1", "10.1.3.2", 1234, 4321, 1, SEED) == want


@pytest.mark.parametrize("members", [1, 2, 3, 4, 7])
def test_pick_matches_the_resilient_hash_table(ecmp, members: int) -> None:
    names = [f"spine{i + 1}" for i in range(members)]
    hops = tuple((i, b"") for i in range(members))
    route = Route("10.1.3.0/24", hops, hops)
    rng = random.Random(members)
    for _ in range(300):
        h = rng.getrandbits(32)
        port, _ = select_next_hop(route, h)
        assert ecmp.pick(names, h) == names[port], f"pick({names}, {h:#x})"


def test_prediction_matches_the_path_through_the_fabric(ecmp) -> None:
    for sport in range(50000, 50064):
        spine = predict_path(FAB, "h1", "h6", sport, ROCEV2_UDP_PORT, seed=1)[2]
        got = ecmp.pick(
            GROUP, ecmp.flow_hash("10.1.1.1", "10.1.3.2", sport, ROCEV2_UDP_PORT, 17, SEED)
        )
        assert got == spine, f"source port {sport}: the fabric sends it via {spine}"


@pytest.mark.parametrize("spine", GROUP)
def test_source_port_via_returns_the_first_port_onto_that_spine(ecmp, spine: str) -> None:
    port = ecmp.source_port_via(spine, GROUP, "10.1.1.1", "10.1.3.2", ROCEV2_UDP_PORT, SEED)
    assert predict_path(FAB, "h1", "h6", port, ROCEV2_UDP_PORT, seed=1)[2] == spine
    for earlier in range(50000, port):
        assert predict_path(FAB, "h1", "h6", earlier, ROCEV2_UDP_PORT, seed=1)[2] != spine, (
            f"{earlier} already goes via {spine}: return the first port"
        )


def test_source_port_via_honours_start(ecmp) -> None:
    port = ecmp.source_port_via(
        "spine2", GROUP, "10.1.1.1", "10.1.3.2", ROCEV2_UDP_PORT, SEED, start=51000
    )
    assert port >= 51000
    assert predict_path(FAB, "h1", "h6", port, ROCEV2_UDP_PORT, seed=1)[2] == "spine2"


def test_prediction_matches_your_traceroutes(ecmp) -> None:
    path = LAB / "results" / "traceroutes.txt"
    if not path.exists():
        pytest.skip("no results/traceroutes.txt yet: run step 5 of the README (needs root)")
    seen = re.findall(r"^sport (\d+): 10\.1\.0\.(\d+)$", path.read_text(), re.M)
    assert seen, f"{path} has no lines like 'sport 50000: 10.1.0.1'"
    for sport, spine in seen:
        got = ecmp.pick(
            GROUP, ecmp.flow_hash("10.1.1.1", "10.1.3.2", int(sport), ROCEV2_UDP_PORT, 17, SEED)
        )
        assert got == f"spine{spine}", f"traceroute with source port {sport} crossed spine{spine}"

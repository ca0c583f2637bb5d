"""What the ECMP finaliser costs per hash: the linear CRC (`crc`, the hash before it) against CRC
then fmix32 (`mixed`), timed in one process, in paired rounds.

Where the hash runs: the ring path (switch/fastpath.py) decides once per flow in `_decide` and
keeps the answer in its per-flow cache, so a steady flow never hashes again; the slow path
(`Fib.flow_hash`, every frame of an impaired port) and `Switch.receive_batch`'s inline loop (the
reference path, `Switch.receive`) hash every frame. Each round times a `crc` switch and a
`mixed` one back to back, alternating which goes first; the ratio is the median of the rounds'
ratios, so that a machine shared with other work drifts out of it.
"""

from __future__ import annotations

import statistics
import timeit
from collections.abc import Callable

from switch import fastpath
from switch.config import switch_config
from switch.dataplane import Switch
from topologies import leaf_spine

FLOWS = 64


class _NullIO:
    def send(self, frame) -> bool:
        return True

    def poll_kernel_drops(self) -> int:
        return 0

    def fileno(self) -> int:
        return -1


def _frames() -> list[bytes]:
    """64 UDP flows of 1400 B frames from h1 to leaf2's and leaf3's first hosts, EVs 49152+."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    return [
        bytes(
            Ether()
            / IP(src="10.1.1.1", dst=f"10.1.{2 + i % 2}.1", ttl=64)
            / UDP(sport=49152 + i, dport=4791)
            / bytes(1358)
        )
        for i in range(FLOWS)
    ]


def _switch(model: str) -> tuple[Switch, object]:
    fab = leaf_spine(spines=4, leaves=3, hosts_per_leaf=2, link_mbps=0, delay_us=0, ecmp_hash=model)
    sw = Switch(switch_config(fab, "leaf1"), open_port=lambda _p: _NullIO())
    return sw, sw.port_by_name["leaf1-eth0"]


def _cases(model: str, frames: list[bytes]) -> dict[str, Callable[[], None]]:
    sw, port = _switch(model)
    sw.receive_batch(port, [bytearray(f) for f in frames], 0.0)  # the routes are cached
    keys = [int.from_bytes(f[26:38], "big") for f in frames]
    heads = [int.from_bytes(f[12:38], "big") >> 32 for f in frames]
    fib, flows = sw.fib, sw.udp_flows

    def decide() -> None:  # every frame a new flow: the ring path's worst case
        flows.clear()
        for h, k in zip(heads, keys, strict=True):
            fastpath._decide(sw, h, k, 17, flows)

    def flow_hash() -> None:
        for f in frames:
            fib.flow_hash(f)

    def receive_batch() -> None:
        sw.receive_batch(port, [bytearray(f) for f in frames], 0.0)

    return {
        "ring path, new flow (_decide)": decide,
        "slow path (Fib.flow_hash)": flow_hash,
        "receive_batch, per frame": receive_batch,
    }


def _ns(fn: Callable[[], None], number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=3)) / number / FLOWS * 1e9


def hash_cost(rounds: int = 15) -> dict:
    """{case: {"crc_ns", "mixed_ns", "ratio"}}: ns per frame, medians over `rounds`."""
    frames = _frames()
    crc, mixed = _cases("crc", frames), _cases("mixed", frames)
    copies = (lambda: [bytearray(f) for f in frames], 300)
    got: dict[str, tuple[list[float], list[float], list[float]]] = {k: ([], [], []) for k in crc}
    for r in range(rounds):
        for case in crc:
            number = 300 if "receive_batch" in case else 1000
            base = _ns(*copies) if "receive_batch" in case else 0.0  # its frames' copies
            pair = [(crc[case], 0), (mixed[case], 1)]
            times = [0.0, 0.0]
            for fn, k in pair if r % 2 else pair[::-1]:
                times[k] = _ns(fn, number) - base
            got[case][0].append(times[0])
            got[case][1].append(times[1])
            got[case][2].append(times[1] / times[0])
    return {
        case: {
            "crc_ns": round(statistics.median(a), 1),
            "mixed_ns": round(statistics.median(b), 1),
            "ratio": round(statistics.median(q), 3),
        }
        for case, (a, b, q) in got.items()
    }

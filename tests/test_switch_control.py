"""control.handle(): garbage gets an error naming the field and changes nothing; valid requests act."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from switch.config import switch_config
from switch.control import handle
from switch.dataplane import Switch
from topologies import leaf_spine

P = "leaf1-eth2"  # an uplink (spine1)


class FakeIO:
    def __init__(self, name: str) -> None:
        self.sent: list[bytes] = []
        self.truncated = 0
        self.ring_skips = 0

    def send(self, frame) -> bool:
        self.sent.append(bytes(frame))
        return True

    def poll_kernel_drops(self) -> int:
        return 0

    def fileno(self) -> int:
        return -1


FABRIC = leaf_spine(spines=2, leaves=2, hosts_per_leaf=2)


@pytest.fixture
def sw() -> Switch:
    return Switch(switch_config(FABRIC, "leaf1"), open_port=FakeIO)


def state(sw: Switch) -> dict:
    """Everything a control request may change."""
    return copy.deepcopy(
        {
            "up": sw.up,
            "running": sw.running,
            "debug": sw.debug_log is not None,
            "ports": {p.name: p.snapshot()["state"] for p in sw.ports},
            "live": [r.live for r in sw.fib.routes],
        }
    )


def req(sw: Switch, obj) -> dict:
    line = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    reply = handle(sw, line)
    json.dumps(reply)  # every reply is serialisable
    return reply


GARBAGE = [
    (b"", "JSON"),
    (b"not json", "JSON"),
    (b"\xff\xfe\x00", "JSON"),
    (b"{", "JSON"),
    (b"[1, 2]", "op"),
    (b'"port"', "op"),
    (b"null", "op"),
    (b"42", "op"),
    ({}, "op"),
    ({"op": 5}, "op"),
    ({"op": None}, "op"),
    ({"op": ["port"]}, "op"),
    ({"op": "bogus"}, "bogus"),
    ({"op": "PORT", "port": P}, "PORT"),
    ({"op": "port"}, "port"),
    ({"op": "port", "blackhole": True}, "port"),
    ({"op": "port", "port": "nope", "blackhole": True}, "nope"),
    ({"op": "port", "port": 3, "blackhole": True}, "3"),
    ({"op": "port", "port": None, "up": False}, "None"),
    ({"op": "port", "port": "leaf2-eth0", "up": False}, "leaf2-eth0"),  # another switch's port
    ({"op": "port", "port": P, "up": "false"}, "up"),
    ({"op": "port", "port": P, "up": 0}, "up"),
    ({"op": "port", "port": P, "rx_up": None}, "rx_up"),
    ({"op": "port", "port": P, "blackhole": "yes"}, "blackhole"),
    ({"op": "port", "port": P, "rx_blackhole": 1}, "rx_blackhole"),
    ({"op": "port", "port": P, "loss_pct": 150}, "loss_pct"),
    ({"op": "port", "port": P, "loss_pct": -1}, "loss_pct"),
    ({"op": "port", "port": P, "loss_pct": "5"}, "loss_pct"),
    ({"op": "port", "port": P, "loss_pct": True}, "loss_pct"),
    ({"op": "port", "port": P, "loss_pct": None}, "loss_pct"),
    ({"op": "port", "port": P, "rx_loss_pct": 100.5}, "rx_loss_pct"),
    ({"op": "port", "port": P, "rate_mbps": 0}, "rate_mbps"),
    ({"op": "port", "port": P, "rate_mbps": -10}, "rate_mbps"),
    ({"op": "port", "port": P, "rate_mbps": 1e9}, "rate_mbps"),
    ({"op": "port", "port": P, "rate_mbps": [100]}, "rate_mbps"),
    (b'{"op": "port", "port": "leaf1-eth2", "loss_pct": NaN}', "loss_pct"),
    (b'{"op": "port", "port": "leaf1-eth2", "rate_mbps": Infinity}', "rate_mbps"),
    ({"op": "port", "port": P, "bogus": 1}, "bogus"),
    ({"op": "port", "port": P, "loss": 5}, "loss"),
    ({"op": "port", "port": P, "blackhole": True, "Up": False}, "Up"),
    ({"op": "switch"}, "up"),
    ({"op": "switch", "up": "no"}, "up"),
    ({"op": "switch", "up": None}, "up"),
    ({"op": "debug"}, "on"),
    ({"op": "debug", "on": "yes"}, "on"),
    ({"op": "debug", "on": True}, "path"),
    ({"op": "debug", "on": True, "path": 7}, "path"),
]


@pytest.mark.parametrize(("line", "field"), GARBAGE, ids=[str(g[0])[:60] for g in GARBAGE])
def test_garbage_is_an_error_naming_the_field_and_changes_nothing(sw, line, field) -> None:
    before = state(sw)
    reply = req(sw, line)
    assert reply["ok"] is False
    assert isinstance(reply["error"], str) and reply["error"]
    assert field in reply["error"], reply["error"]
    assert state(sw) == before


@pytest.mark.parametrize(
    "obj",
    [
        {"op": "port", "port": P, "blackhole": True, "loss_pct": 500},
        {"op": "port", "port": P, "up": False, "rate_mbps": -1},
        {"op": "port", "port": P, "up": False, "blackhole": "x"},
        {"op": "port", "port": P, "heal": True, "rx_loss_pct": 101},
        {"op": "port", "port": P, "loss_pct": 5, "rx_blackhole": True, "extra": 1},
        {"op": "port", "port": P, "rate_mbps": 10, "rx_up": "down"},
    ],
)
def test_no_half_applied_requests(sw, obj) -> None:
    # Start from an impaired port, so that a stray "heal" or "up" would show.
    assert req(sw, {"op": "port", "port": P, "loss_pct": 2.5, "rate_mbps": 50})["ok"]
    before = state(sw)
    reply = req(sw, obj)
    assert reply["ok"] is False
    assert state(sw) == before


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=80),
        st.dictionaries(
            st.sampled_from(
                [
                    "op",
                    "port",
                    "up",
                    "rx_up",
                    "blackhole",
                    "loss_pct",
                    "rx_loss_pct",
                    "rate_mbps",
                    "heal",
                    "rx_blackhole",
                    "x",
                ]
            ),
            st.one_of(
                st.none(),
                st.booleans(),
                st.integers(-1000, 1000),
                st.floats(),
                st.text(max_size=10),
                st.sampled_from(["port", "switch", P, "counters"]),
            ),
            max_size=5,
        ).map(lambda d: json.dumps(d).encode()),
    )
)
def test_fuzz_handle_never_raises(data: bytes) -> None:
    sw = Switch(switch_config(FABRIC, "leaf1"), open_port=FakeIO)
    reply = handle(sw, data)
    assert isinstance(reply, dict) and isinstance(reply.get("ok"), bool)
    if not reply["ok"]:
        assert isinstance(reply["error"], str)


# ----- valid requests ------------------------------------------------------------------------


def test_ping(sw) -> None:
    reply = req(sw, {"op": "ping"})
    assert reply["ok"] is True and reply["switch"] == "leaf1" and isinstance(reply["pid"], int)


def test_port_impairments_apply(sw) -> None:
    port = sw.port_by_name[P]
    reply = req(sw, {"op": "port", "port": P, "blackhole": True, "loss_pct": 12.5, "rate_mbps": 10})
    assert reply["ok"] is True
    assert reply["port"]["blackhole"] is True and reply["port"]["loss_pct"] == 12.5
    assert port.blackhole and port.loss == 0.125 and port.rate_mbps == 10.0
    assert req(sw, {"op": "port", "port": P, "rx_blackhole": True, "rx_loss_pct": 100})["ok"]
    assert port.rx_blackhole and port.rx_loss == 1.0
    assert req(sw, {"op": "port", "port": P, "rx_up": False})["ok"]
    assert port.rx_up is False and port.up is True  # one direction only
    assert req(sw, {"op": "port", "port": P, "rx_up": True})["ok"]
    assert port.rx_up is True
    assert req(sw, {"op": "port", "port": P, "heal": True})["ok"]
    s = port.snapshot()["state"]
    assert (s["blackhole"], s["loss_pct"], s["rx_blackhole"], s["rx_loss_pct"]) == (
        False,
        0,
        False,
        0,
    )
    assert s["rate_mbps"] == 100.0


def test_port_down_prunes_ecmp_and_up_restores(sw) -> None:
    port = sw.port_by_name[P]
    remote = sw.fib.lookup(bytes([10, 1, 2, 1]))
    members = remote.live
    assert req(sw, {"op": "port", "port": P, "up": False})["ok"]
    assert port.up is False
    assert all(p != port.index for p, _ in remote.live) and len(remote.live) == len(members) - 1
    assert req(sw, {"op": "port", "port": P, "up": True})["ok"]
    assert remote.live == members


def test_port_request_without_changes_is_ok(sw) -> None:
    before = state(sw)
    assert req(sw, {"op": "port", "port": P})["ok"] is True
    assert req(sw, {"op": "port", "port": P, "heal": False})["ok"] is True
    assert state(sw) == before


def test_switch_down_and_up(sw) -> None:
    assert req(sw, {"op": "switch", "up": False}) == {"ok": True}
    assert sw.up is False
    frame = bytes(Ether() / IP(src="10.1.1.1", dst="10.1.2.1") / UDP())
    sw.receive(sw.ports[0], bytearray(frame), 0.0)
    assert sw.drops == {"switch_down": 1}
    assert req(sw, {"op": "switch", "up": True}) == {"ok": True}
    assert sw.up is True


def test_stop(sw) -> None:
    assert req(sw, {"op": "stop"}) == {"ok": True}
    assert sw.running is False


def test_debug_log_dissects_drops(sw, tmp_path) -> None:
    path = tmp_path / "debug.jsonl"
    assert req(sw, {"op": "debug", "on": True, "path": str(path)}) == {"ok": True}
    sw.receive(sw.ports[0], bytearray(b"\x00" * 12 + b"\x08\x00" + b"\x44" + b"\x00" * 30), 0.0)
    assert req(sw, {"op": "debug", "on": False}) == {"ok": True}
    assert sw.debug_log is None
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert len(lines) == 1 and lines[0]["event"] == "drop" and lines[0]["detail"] == "bad_ihl"


def test_counters_op_returns_documented_keys(sw) -> None:
    frame = bytes(Ether() / IP(src="10.1.1.1", dst="10.1.2.1") / UDP() / b"x")
    sw.receive(sw.ports[0], bytearray(frame), 0.0)
    reply = req(sw, {"op": "counters"})
    assert reply["ok"] is True
    c = reply["counters"]
    for key in (
        "switch",
        "up",
        "uptime_s",
        "drops",
        "local_rx",
        "icmp_sent",
        "ports",
        "kernel_drops",
        "timer_late_us_p99",
        "cpu_s",
        "pid",
    ):
        assert key in c, key
    assert set(c["ports"]) == {p.name for p in sw.ports}
    for p in c["ports"].values():
        for key in (
            "rx_packets",
            "rx_bytes",
            "tx_packets",
            "tx_bytes",
            "drops",
            "trims",
            "ecn_marks",
            "max_queue_bytes",
            "queue_bytes",
            "prio_queue_bytes",
            "max_prio_queue_bytes",
            "state",
            "kernel_drops",
            "truncated",
            "ring_skips",
        ):
            assert key in p, key
    assert c["ports"]["leaf1-eth0"]["rx_packets"] == 1
    assert sum(p["tx_packets"] for p in c["ports"].values()) == 0  # shaped: still in flight


# ----- bugs ----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["no", 1, 0, None])
def test_heal_must_be_a_bool(sw, value) -> None:
    assert req(sw, {"op": "port", "port": P, "blackhole": True})["ok"]
    before = state(sw)
    reply = req(sw, {"op": "port", "port": P, "heal": value})
    assert reply["ok"] is False and "heal" in reply["error"]
    assert state(sw) == before


@pytest.mark.parametrize(
    "obj",
    [
        {"op": "switch", "up": False, "direction": "rx"},
        {"op": "stop", "now": False},
        {"op": "debug", "on": False, "bogus": 1},
    ],
)
def test_unknown_fields_rejected_for_every_op(sw, obj) -> None:
    before = state(sw)
    reply = req(sw, obj)
    assert (
        reply["ok"] is False
        and next(k for k in obj if k not in ("op", "up", "on")) in reply["error"]
    )
    assert state(sw) == before


@pytest.mark.parametrize(
    "line",
    [b"[" * 50000, json.dumps({"op": "debug", "on": True, "path": "/nonexistent/dir/x"}).encode()],
    ids=["nested", "bad-path"],
)
def test_handle_never_raises(sw, line) -> None:
    before = state(sw)
    reply = handle(sw, line)
    assert reply["ok"] is False
    assert state(sw) == before

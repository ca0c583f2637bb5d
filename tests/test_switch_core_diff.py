"""switch/core.py: the C forwarding core and its Python twin give the same bytes, in the same
order, at the same instants, with the same counters -- and both agree with the scapy model.

Hypothesis draws a small fabric (rates, delays, queue sizes, ECN thresholds, trimming on or
off, the crc or mixed ECMP hash, ECMP or source-routed forwarding, one or two planes, time
dilation) and a schedule (bursts of frames on any port of any switch at any instant, egress
service, carrier down and up, rate changes, black holes, receive failures, a switch down). The
frames are valid RoCE, UDP, TCP and ICMP packets with every DSCP that matters (control,
trimmable, trimmed, other) and every ECN codepoint, TTLs 0 to 3, pings to a switch, packets to
nowhere, and garbage: random bytes, truncated frames, bad checksums, bad lengths, IP options,
non-IPv4. Both cores run the schedule; what leaves on host ports (switch, port, bytes, in
order, after which event) and every counter must be equal. The C half is skipped, saying why,
when switch._core is not built (CI builds it).
"""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from contracts.dscp import CONTROL_DSCP, TRIMMABLE_DSCP, TRIMMED_DSCP
from switch import frames, reference
from switch.config import switch_config
from switch.core import ForwardingCore, Unsupported, c_available, c_unavailable_reason
from testbed.bench import hop_bench
from topologies import TopologyError, leaf_spine

needs_c = pytest.mark.skipif(not c_available(), reason=c_unavailable_reason() or "")
DATAPATHS = ["python", pytest.param("c", marks=needs_c)]

# ----- frames -------------------------------------------------------------------------------

KINDS = (
    "roce",
    "roce",
    "roce",
    "roce",
    "udp",
    "tcp",
    "icmp",
    "ping_switch",
    "other_proto",
    "no_route",
    "garbage",
    "truncated",
    "bad_checksum",
    "bad_length",
    "ip_options",
    "non_ipv4",
)


@st.composite
def frame_spec(draw) -> tuple:
    return (
        draw(st.sampled_from(KINDS)),
        draw(st.integers(0, 7)),  # src host (mod hosts)
        draw(st.integers(0, 7)),  # dst host
        draw(st.one_of(st.integers(49152, 49152 + 63), st.integers(0, 65535))),  # sport / EV
        draw(st.sampled_from([TRIMMABLE_DSCP, TRIMMABLE_DSCP, CONTROL_DSCP, TRIMMED_DSCP, 0, 33])),
        draw(st.integers(0, 3)),  # ECN
        draw(st.sampled_from([64, 64, 3, 2, 1, 0])),  # TTL
        draw(st.sampled_from([0, 1, 6, 100, 1000, 1472, 1472, 1472])),  # payload bytes
        draw(st.binary(min_size=0, max_size=80)),  # garbage / the cut for "truncated"
    )


def build(spec: tuple, hosts: list[str], routers: list[str]) -> bytes:
    kind, src, dst, sport, dscp, ecn, ttl, size, junk = spec
    if kind == "garbage":
        return junk
    src_ip = bytes(int(x) for x in hosts[src % len(hosts)].split("."))
    dst_ip = bytes(int(x) for x in hosts[dst % len(hosts)].split("."))
    tos = dscp << 2 | ecn
    payload = bytes(range(256)) * 6
    body = payload[:size]
    proto = 17
    if kind == "ping_switch":
        dst_ip = bytes(int(x) for x in routers[dst % len(routers)].split("."))
        proto, l4 = 1, _icmp_echo(body[:56])
    elif kind == "icmp":
        proto, l4 = 1, _icmp_echo(body[:56])
    elif kind == "tcp":
        proto = 6
        l4 = struct.pack("!HHIIBBHHH", sport, 80, 1, 0, 0x50, 0x10, 1000, 0x1234, 0) + body
    elif kind == "other_proto":
        proto, l4 = 47, body[:64]
    else:
        dport = 4791 if kind in ("roce", "truncated", "bad_checksum", "no_route") else 9000
        l4 = struct.pack("!HHHH", sport, dport, 8 + len(body), 0xBEEF) + body
    if kind == "no_route":
        dst_ip = b"\xc0\xa8\x07" + bytes([dst])
    ip = frames.build_ipv4(src_ip, dst_ip, proto, l4, ttl=ttl, tos=tos)
    frame = bytearray(b"\x02\x7b\0\0\0\x02\x02\x7b\0\0\0\x01\x08\x00") + ip
    if kind == "truncated":
        return bytes(frame[: len(junk) % 60])
    if kind == "bad_checksum":
        frame[24] ^= 1 + (len(junk) % 255)
    elif kind == "bad_length":
        frame[16:18] = struct.pack("!H", len(frame) - 14 + 1 + len(junk))
        frames.set_ip_checksum(frame)
    elif kind == "ip_options":
        frame[14] = 0x46
        frames.set_ip_checksum(frame)
    elif kind == "non_ipv4":
        frame[12:14] = b"\x86\xdd"
    return bytes(frame)


def _icmp_echo(data: bytes) -> bytes:
    icmp = bytearray(struct.pack("!BBHHH", 8, 0, 0, 7, 1) + data)
    icmp[2:4] = struct.pack("!H", frames.inet_checksum(icmp))
    return bytes(icmp)


# ----- fabrics and schedules ----------------------------------------------------------------


@st.composite
def fabric_keys(draw) -> dict:
    return {
        "spines": draw(st.integers(1, 2)),
        "leaves": 2,
        "hosts_per_leaf": draw(st.integers(1, 2)),
        "planes": draw(st.sampled_from([1, 1, 2])),
        "link_mbps": draw(st.sampled_from([0, 1000, 10_000, 10_000, 100_000])),
        "delay_us": draw(st.sampled_from([0, 0, 0.3, 1, 5])),
        "queue_kb": draw(st.sampled_from([1.6, 3, 6, 12])),
        "ecn_kb": draw(st.sampled_from([None, 0.5, 1])),
        "trim_bytes": draw(st.sampled_from([64, 100, 256])),
        "trimming": draw(st.booleans()),
        "ecmp_hash": draw(st.sampled_from(["crc", "mixed"])),
        "forwarding": draw(st.sampled_from(["ecmp", "source-routed"])),
    }


RX = st.tuples(
    st.just("rx"),
    st.integers(0, 99),
    st.integers(0, 99),
    st.lists(frame_spec(), min_size=1, max_size=6),
    st.sampled_from([1, 1, 4, 16, 40]),  # copies of the burst, each with its own EV
)
EVENT = st.one_of(
    RX,
    RX,
    RX,
    st.tuples(st.just("service")),
    st.tuples(st.just("service")),
    st.tuples(st.just("port_up"), st.integers(0, 99), st.integers(0, 99), st.booleans()),
    st.tuples(
        st.just("rate"), st.integers(0, 99), st.integers(0, 99), st.sampled_from([0, 100, 25_000])
    ),
    st.tuples(st.just("blackhole"), st.integers(0, 99), st.integers(0, 99), st.booleans()),
    st.tuples(
        st.just("rx_fail"),
        st.integers(0, 99),
        st.integers(0, 99),
        st.booleans(),
        st.booleans(),
        st.sampled_from([0.0, 0.0, 0.5]),
    ),
    st.tuples(st.just("switch_up"), st.integers(0, 99), st.booleans()),
    st.tuples(st.just("counters")),
)
SCHEDULE = st.lists(
    st.tuples(st.sampled_from([0.0, 0.0, 1e-7, 1.2e-6, 1e-5, 3e-4]), EVENT), min_size=1, max_size=30
)


def _fabric(keys: dict):
    try:
        return leaf_spine(**keys)
    except TopologyError:
        return None


def configs_of(fab, dilation: float, seed: int = 1) -> list:
    return [
        switch_config(fab, n, seed=seed, time_dilation=dilation)
        for n, node in fab.nodes.items()
        if node.kind != "host"
    ]


def run(configs, fab, schedule, datapath: str, load: int = 0) -> tuple[list, list]:
    """Apply `schedule` after `load` RoCE frames from every host at once (so that queues fill,
    mark and trim); (every egress frame with the event after which it left, counters)."""
    core = ForwardingCore(configs, datapath=datapath)
    hosts = [fab.host_ip(n) for n, node in fab.nodes.items() if node.kind == "host"]
    routers = [c.router_ip for c in configs]
    out: list = []
    reads: list = []
    now = 0.0
    nsw = len(core.switches)
    for i, cfg in enumerate(configs):
        for j, pc in enumerate(cfg.ports):
            if load and fab.nodes[pc.peer_node].kind == "host":
                h = hosts.index(fab.host_ip(pc.peer_node))
                spec = ("roce", h, 0, 49152, TRIMMABLE_DSCP, 2, 64, 1472, b"")
                burst = [
                    build((*spec[:2], h + 1 + k, 49152 + k, *spec[4:]), hosts, routers)
                    for k in range(load)
                ]
                core.receive(i, j, burst, now)
    for k, (dt, ev) in enumerate(schedule):
        now += dt
        kind = ev[0]
        if kind != "service" and kind != "counters" and kind != "switch_up":
            sw = ev[1] % nsw
            port = ev[2] % len(core.switches[sw].ports)
        if kind == "rx":
            burst = [
                build((s[0], s[1], s[2], (s[3] + j) & 0xFFFF, *s[4:]), hosts, routers)
                for j in range(ev[4])
                for s in ev[3]
            ]
            core.receive(sw, port, burst, now)
        elif kind == "service":
            core.service(now)
        elif kind == "port_up":
            core.set_port_up(sw, port, ev[3])
        elif kind == "rate":
            core.set_rate(sw, port, ev[3])
        elif kind == "blackhole":
            core.set_blackhole(sw, port, ev[3])
        elif kind == "rx_fail":
            core.set_rx(sw, port, up=ev[3], blackhole=ev[4], loss=ev[5])
        elif kind == "switch_up":
            core.set_switch_up(ev[1] % nsw, ev[2])
        elif kind == "counters":
            reads.append(core.counters())
        out += [(k, now, *e) for e in core.take_egress()]
    for _ in range(100_000):  # drain: every departure, at its own deadline
        due = core.service(now)
        out += [(-1, now, *e) for e in core.take_egress()]
        if due is None:
            break
        now = max(now, due)
    else:
        raise AssertionError("the queues never drained")
    reads.append(core.counters())
    return out, reads


@needs_c
@settings(
    max_examples=int(os.environ.get("CORE_DIFF_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    keys=fabric_keys(),
    dilation=st.sampled_from([1.0, 100.0, 3000.0]),
    load=st.sampled_from([0, 4, 12, 30]),
    schedule=SCHEDULE,
)
def test_c_and_python_cores_agree(keys: dict, dilation: float, load: int, schedule: list) -> None:
    fab = _fabric(keys)
    assume(fab is not None)
    configs = configs_of(fab, dilation)
    py_out, py_counters = run(configs, fab, schedule, "python", load)
    c_out, c_counters = run(configs, fab, schedule, "c", load)
    assert len(c_out) == len(py_out)
    for i, (a, b) in enumerate(zip(py_out, c_out, strict=True)):
        assert a == b, f"egress frame {i} differs: python {a[:4]} c {b[:4]}"
    assert c_counters == py_counters
    ports = [p for sw in c_counters[-1] for p in sw["ports"].values()]
    event(f"egress frames: {'0' if not c_out else '1-9' if len(c_out) < 10 else '10+'}")
    for what in ("trims", "ecn_marks"):
        event(f"{what}: {'yes' if sum(p[what] for p in ports) else 'no'}")
    drops = {r for sw in c_counters[-1] for r in sw["drops"]}
    drops |= {r for p in ports for r in p["drops"]}
    for r in sorted(drops):
        event(f"drop: {r}")
    if any(sw["icmp_sent"] for sw in c_counters[-1]):
        event("icmp sent")


@pytest.mark.parametrize("datapath", DATAPATHS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(frame_spec(), min_size=1, max_size=12),
    link_mbps=st.sampled_from([0, 10_000]),
    trim_bytes=st.sampled_from([64, 100]),
)
def test_both_cores_forward_trim_and_mark_as_scapy_does(
    datapath: str, specs: list, link_mbps: int, trim_bytes: int
) -> None:
    """One burst from host 1 to host 2 on one leaf: every frame that leaves is the scapy
    model's forward() of one that came in -- CE-marked (mark_ce) or trimmed (trim) if the
    queue made it so."""
    fab = leaf_spine(
        spines=1, leaves=2, hosts_per_leaf=2, link_mbps=link_mbps, queue_kb=3, trim_bytes=trim_bytes
    )
    configs = configs_of(fab, 1.0)
    core = ForwardingCore(configs, datapath=datapath)
    leaf = next(i for i, c in enumerate(configs) if c.name == "leaf1")
    sw = core.switches[leaf]
    hosts = [n for n, node in fab.nodes.items() if node.kind == "host"]
    rx = sw.port_by_name[fab.interface("leaf1", hosts[0]).name]
    tx = sw.port_by_name[fab.interface("leaf1", hosts[1]).name]
    ips = [fab.host_ip(hosts[0]), fab.host_ip(hosts[1])]
    sent = []
    for k, s in enumerate(specs):  # valid RoCE frames, host 1 -> host 2, a distinct EV each
        spec = ("roce", 0, 1, 50000 + k, s[4], s[5], max(s[6], 2), s[7], b"")
        sent.append(build(spec, ips, []))
    core.receive(leaf, rx.index, sent, 0.0)
    out = core.take_egress()
    now = 0.0
    while (due := core.service(now)) is not None:
        now = due
        out += core.take_egress()
    out += core.take_egress()
    dst_mac = ":".join(f"{b:02x}" for b in tx.peer_mac)
    src_mac = ":".join(f"{b:02x}" for b in tx.mac)
    by_ev = {struct.unpack_from("!H", f, 34)[0]: f for f in sent}
    for _, port, frame in out:
        assert port == tx.index
        fwd = reference.forward(by_ev[struct.unpack_from("!H", frame, 34)[0]], dst_mac, src_mac)
        ok = (fwd, reference.mark_ce(fwd), reference.trim(fwd, trim_bytes, TRIMMED_DSCP))
        assert frame in ok
    snap = core.counters()[leaf]["ports"][tx.name]
    assert len(out) + sum(snap["drops"].values()) == len(sent)


@needs_c
def test_hop_bench_fabric_forwards_identically() -> None:
    """The hop bench's 4x4x4 fabric, its permutation at line rate: both cores deliver the same
    frames to the same host ports at the same wake-ups, every one of them, trims included."""
    py = hop_bench.run_hops(0.13, 150e-6, datapath="python", digest=True)
    c = hop_bench.run_hops(0.13, 150e-6, datapath="c", digest=True)
    assert py.conserved and c.conserved
    assert py.trims > 0
    assert (c.hops, c.at_hosts, c.trims, c.digest) == (py.hops, py.at_hosts, py.trims, py.digest)


@needs_c
def test_c_core_refuses_what_it_does_not_support(monkeypatch, tmp_path) -> None:
    fab = leaf_spine(spines=1, leaves=2, hosts_per_leaf=1)
    configs = configs_of(fab, 1.0)
    core = ForwardingCore(configs, datapath="c")
    with pytest.raises(Unsupported, match="Python data path only"):
        core.set_loss(0, 0, 0.1)
    with pytest.raises(Unsupported, match="capture"):
        core.python_only(0, 0, "capture")
    ForwardingCore(configs, datapath="python").set_loss(0, 0, 0.1)  # the reference takes it
    plugin = tmp_path / "decide.py"
    plugin.write_text("def decide(*a):\n    return 'drop'\n")
    monkeypatch.setenv("TESTBED_TRIM_DECISION", str(plugin))
    with pytest.raises(Unsupported, match="TESTBED_TRIM_DECISION"):
        ForwardingCore(configs, datapath="c")


def test_unknown_datapath_is_refused() -> None:
    with pytest.raises(ValueError, match="datapath"):
        ForwardingCore([], datapath="rust")

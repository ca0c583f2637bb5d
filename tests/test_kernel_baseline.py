"""The kernel baseline's parsing, without a fabric: iperf3 JSON, server text, monitor events."""

from __future__ import annotations

import json

import pytest

from testbed.harness import iperf_output
from testbed.harness import kernel_baseline as kb
from testbed.scenario import validate

# The shape of a real `iperf3 -c ... -R -n 500000 -J -i 0.1` client document (trimmed): the
# client is the receiver, so every interval has "sender": false.
SAMPLE = {
    "start": {
        "connected": [
            {
                "socket": 7,
                "local_host": "10.1.2.1",
                "local_port": 55734,
                "remote_host": "10.1.1.1",
                "remote_port": 5201,
            }
        ],
        "version": "iperf 3.12",
        "timestamp": {"time": "Wed, 02 Dec 2026 21:39:01 GMT", "timesecs": 1796247541},
        "test_start": {"protocol": "TCP", "num_streams": 1, "blksize": 131072, "bytes": 500000},
    },
    "intervals": [
        {
            "streams": [{"socket": 7, "start": 0, "end": 0.100173, "bytes": 214600}],
            "sum": {
                "start": 0,
                "end": 0.100173,
                "seconds": 0.1001729965209961,
                "bytes": 214600,
                "bits_per_second": 17138351.24858386,
                "omitted": False,
                "sender": False,
            },
        },
        {
            "streams": [{"socket": 7, "start": 0.100173, "end": 0.200131, "bytes": 250000}],
            "sum": {
                "start": 0.100173,
                "end": 0.200131,
                "seconds": 0.09995800256729126,
                "bytes": 250000,
                "bits_per_second": 20008403.1,
                "omitted": False,
                "sender": False,
            },
        },
        {
            "streams": [{"socket": 7, "start": 0.200131, "end": 0.242515, "bytes": 81088}],
            "sum": {
                "start": 0.200131,
                "end": 0.242515,
                "seconds": 0.04238399863243103,
                "bytes": 81088,
                "bits_per_second": 15305114.2,
                "omitted": False,
                "sender": False,
            },
        },
    ],
    "end": {
        "sum_sent": {"start": 0, "end": 0.245026, "bytes": 589824, "retransmits": 3},
        "sum_received": {"start": 0, "end": 0.242515, "bytes": 545688, "sender": False},
        "sender_tcp_congestion": "bbr",
        "receiver_tcp_congestion": "bbr",
    },
}


def test_receiver_intervals_reads_the_sums_and_skips_omitted():
    assert iperf_output.receiver_intervals(SAMPLE) == [
        (0.0, 0.100173, 214600),
        (0.100173, 0.200131, 250000),
        (0.200131, 0.242515, 81088),
    ]
    doc = json.loads(json.dumps(SAMPLE))
    doc["intervals"][0]["sum"]["omitted"] = True
    assert [iv[2] for iv in iperf_output.receiver_intervals(doc)] == [250000, 81088]
    assert iperf_output.receiver_intervals({"start": {}, "intervals": [], "end": {}}) == []


def test_spread_makes_uniform_millisecond_samples_capped_at_the_flow_size():
    samples, done = iperf_output.spread(
        iperf_output.receiver_intervals(SAMPLE), offset=1.5, limit=500000
    )
    assert sum(n for _, n in samples) == 500000  # 545688 received, the block overshoot dropped
    times = [t for t, _ in samples]
    assert times == sorted(times)
    assert times[0] == pytest.approx(1.5 + 0.100173 / 100)  # first 1 ms slice, stamped at its end
    # the first interval: 100 slices of 2146 bytes, its last one at the interval's end
    first = [n for t, n in samples if t <= 1.5 + 0.100173 + 1e-9]
    assert len(first) == 100 and set(first) == {2146}
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert max(gaps) < 0.0011
    # 35400 bytes were still missing after two intervals: 35400 / (81088 / 42 slices) -> slice 19
    assert done == pytest.approx(1.5 + 0.200131 + 19 * 0.042384 / 42)
    assert done == times[-1]


def test_spread_keeps_every_byte_and_reports_no_completion_when_short():
    samples, done = iperf_output.spread([(0.0, 0.1, 1001), (0.1, 0.15, 0)], offset=0.0, limit=10**6)
    assert done is None
    assert sum(n for _, n in samples) == 1001 and len(samples) == 100
    assert sorted({n for _, n in samples}) == [10, 11]  # remainder spread over the first slices
    short, done = iperf_output.spread([(0.0, 0.0004, 500)], offset=2.0, limit=500)
    assert short == [(pytest.approx(2.0004), 500)] and done == pytest.approx(2.0004)


SERVER_LINES = [
    (100.000, "-----------------------------------------------------------"),
    (100.001, "Server listening on 5201 (test #1)"),
    (100.236, "Accepted connection from 10.1.2.1, port 55732"),
    (100.236, "[  7] local 10.1.1.1 port 5201 connected to 10.1.2.1 port 55734"),
    (100.236, "[ ID] Interval           Transfer     Bitrate         Retr  Cwnd"),
    # the first write came 2 ms late; the second tick shows the start was 100.134
    (100.236, "[  7]   0.00-0.10   sec   775 KBytes  62.6 Mbits/sec    0   22.6 KBytes"),
    (100.3345, "[  7]   0.10-0.20   sec   264 KBytes  21.9 Mbits/sec    0   17.0 KBytes"),
    (100.420, "[  7]   0.20-0.25   sec  0.00 Bytes  0.00 bits/sec    0   17.0 KBytes"),
    (100.470, "- - - - - - - - - - - - - - - - - - - - - - - - -"),
    (100.470, "[  7]   0.00-0.25   sec  1.01 MBytes  34.1 Mbits/sec    0             sender"),
    (100.471, "Server listening on 5201 (test #2)"),
    # a test shorter than one interval: only its partial interval, at TEST_END
    (101.000, "Accepted connection from 10.1.2.1, port 55740"),
    (101.000, "[  7] local 10.1.1.1 port 5201 connected to 10.1.2.1 port 55742"),
    (101.000, "[  7]   0.00-0.07   sec  96.0 KBytes  11.2 Mbits/sec    0   22.6 KBytes"),
    (101.040, "- - - - - - - - - - - - - - - - - - - - - - - - -"),
    (101.040, "[  7]   0.00-0.07   sec  96.0 KBytes  11.2 Mbits/sec    0             sender"),
]


def test_server_anchors_take_the_earliest_upper_bound_per_data_port():
    anchors = iperf_output.server_anchors(SERVER_LINES)
    assert set(anchors) == {55734, 55742}
    assert anchors[55734] == pytest.approx(100.1345)  # tick 2, not the late tick 1 (100.136)
    assert anchors[55742] == pytest.approx(101.000 - 0.07 + 0.005)
    assert iperf_output.server_anchors([]) == {}


# `ip mptcp monitor` lines as the kernel prints them (remid/locid/backup fields left out)
MONITOR = """\
[       CREATED] token=8821332b saddr4=10.1.2.1 daddr4=10.1.1.1 sport=50502 dport=5206
[   ESTABLISHED] token=8821332b saddr4=10.1.2.1 daddr4=10.1.1.1 sport=50502 dport=5206
[     ANNOUNCED] token=8821332b remid=3 daddr4=10.1.1.1 dport=7003
[SF_ESTABLISHED] token=8821332b saddr4=10.1.2.1 daddr4=10.1.1.1 sport=53787 dport=7003
[       CREATED] token=58ab4650 saddr4=10.1.2.1 daddr4=10.1.1.1 sport=50510 dport=5206
[   ESTABLISHED] token=58ab4650 saddr4=10.1.2.1 daddr4=10.1.1.1 sport=50510 dport=5206
[SF_ESTABLISHED] token=58ab4650 saddr4=10.1.2.1 daddr4=10.1.1.1 sport=42697 dport=7003
[SF_ESTABLISHED] token=58ab4650 saddr4=10.1.2.1 daddr4=10.1.1.1 sport=57609 dport=7002
[SF_ESTABLISHED] token=58ab4650 saddr4=10.1.2.1 daddr4=10.1.1.1 sport=42417 dport=7001
[SF_ESTABLISHED] token=58ab4650 saddr4=10.1.2.1 daddr4=10.1.1.1 sport=42418 dport=7004
[     SF_CLOSED] token=58ab4650 saddr4=10.1.2.1 daddr4=10.1.1.1 sport=42418 dport=7004
[        CLOSED] token=58ab4650
[        CLOSED] token=8821332b
"""


def test_monitor_subflows_counts_live_subflows_per_connection():
    assert iperf_output.monitor_subflows(MONITOR.splitlines()) == {50502: 2, 50510: 4}
    assert iperf_output.monitor_subflows([]) == {}


def test_load_json_tolerates_missing_and_cut_short_files(tmp_path):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(SAMPLE))
    assert iperf_output.load_json(good)["end"]["sum_sent"]["retransmits"] == 3
    cut = tmp_path / "cut.json"
    cut.write_text(json.dumps(SAMPLE)[:200])
    assert iperf_output.load_json(cut) is None
    assert iperf_output.load_json(tmp_path / "absent.json") is None


def _scenario(transport: str = "tcp"):
    return validate(
        {
            "name": "t",
            "description": "d",
            "topology": {"spines": 2, "leaves": 2, "hosts_per_leaf": 2, "link_mbps": 20},
            "transport": transport,
            "workload": {"kind": "bulk", "src": "h1", "dst": "h3", "bytes": "2MB"},
            "duration_s": 10,
        }
    )


@pytest.mark.parametrize(("transport", "tool"), [("tcp", "iperf3"), ("mptcp", "mptcpize")])
def test_a_missing_tool_is_one_clear_line(monkeypatch, tmp_path, transport, tool):
    monkeypatch.setattr(kb.shutil, "which", lambda name: None if name == tool else "/bin/true")
    with pytest.raises(kb.BaselineError) as exc:
        kb.KernelBaseline("nofabric", _scenario(transport), transport, tmp_path)
    msg = str(exc.value)
    assert "\n" not in msg and tool in msg and "scripts/setup.sh" in msg


def test_only_kernel_transports_are_accepted(tmp_path):
    with pytest.raises(kb.BaselineError, match="not a kernel baseline"):
        kb.KernelBaseline("nofabric", _scenario("mrc"), "mrc", tmp_path)


def test_kernel_flows_add_up_the_tests_of_each_pair():
    rows = [
        {"src": "h1", "dst": "h2", "bytes": 100, "launched_s": 0.0, "test_start_s": 0.01,
         "received": 100, "done_s": 0.2, "json_retransmits": 3},
        {"src": "h1", "dst": "h2", "bytes": 100, "launched_s": 0.3, "test_start_s": 0.31,
         "received": 100, "done_s": 0.5, "json_retransmits": None},
        {"src": "h2", "dst": "h1", "bytes": 100, "launched_s": 0.0, "received": 0,
         "done_s": None},
    ]  # fmt: skip
    a, b = iperf_output.kernel_flow_records(rows)
    assert (a.src, a.dst, a.bytes, a.acked_bytes) == ("h1", "h2", 200, 200)
    assert (a.start_s, a.done_s, a.retransmits) == (0.01, 0.5, {"tcp": 3})
    # No iperf3 output: it starts at its launch and never finishes.
    assert (b.start_s, b.done_s, b.acked_bytes) == (0.0, None, 0)

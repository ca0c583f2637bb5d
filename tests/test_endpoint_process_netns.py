"""Endpoint processes in two namespaces of their own (a veth, no switch), every I/O design.

The same bed as `testbed bench endpoint`; here only correctness and clean-up are checked, the
figures are the bench's job.
"""

from __future__ import annotations

import subprocess

import pytest

from testbed.bench.endpoint_bench import NetnsPair, _baseline_udp, _endpoint_loopback

pytestmark = pytest.mark.netns


@pytest.fixture(scope="module")
def pair():
    p = NetnsPair()
    try:
        yield p
    finally:
        p.destroy()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert p.prefix not in listed, "the bench must delete exactly the namespaces it created"


@pytest.mark.parametrize("design", ["udp", "connected", "raw"])
def test_bulk_between_namespaces(pair, design):
    r = _endpoint_loopback(pair, design, 3_000_000)
    assert r["endpoint_sender"]["pps"] > 1000
    assert 0 < r["endpoint_sender"]["cpu_us"] < 1000
    assert r["goodput_mbps"] > 10


def test_udp_baseline_runs(pair):
    r = _baseline_udp(pair, 0.3)
    assert r["udp_blaster"]["pps"] > r["udp_sink"]["pps"] * 0.1 > 0

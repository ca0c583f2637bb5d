"""Which endpoint process serves which host (`TESTBED_ENDPOINT_PROCESSES`, testbed.harness.
endpoints): per-host, shared (one process) or shared:K (K processes, one per core). The layout
parsing and the grouping are pure; the K processes serving their groups over loopback need root
(`--netns`: each host's sockets are opened in a namespace, here the root one)."""

from __future__ import annotations

import os
import random

import pytest

from testbed.harness.endpoints import (
    ENDPOINT_LAYOUT_ENV,
    PER_HOST,
    SHARED,
    EndpointProcs,
    endpoint_layout,
    host_groups,
)

HOSTS = [f"h{i}" for i in range(1, 17)]


@pytest.mark.parametrize("value", ["per-host", "shared", "shared:1", "shared:2", "shared:16"])
def test_known_layouts_are_taken(value: str) -> None:
    assert endpoint_layout(value) == value


@pytest.mark.parametrize("value", ["shared:0", "shared:", "shared:x", "shared:-1", "sharded", ""])
def test_an_unknown_layout_is_a_one_line_error_naming_the_choices(value: str) -> None:
    with pytest.raises(ValueError, match=r"endpoint layout: .* is not one of per-host, shared"):
        endpoint_layout(value)


def test_the_environment_names_itself_in_its_error(monkeypatch) -> None:
    monkeypatch.setenv(ENDPOINT_LAYOUT_ENV, "shared:none")
    with pytest.raises(ValueError, match=ENDPOINT_LAYOUT_ENV):
        endpoint_layout()
    monkeypatch.delenv(ENDPOINT_LAYOUT_ENV)
    assert endpoint_layout() == PER_HOST


def test_groups_per_layout() -> None:
    assert host_groups(HOSTS[:3], PER_HOST) == [["h1"], ["h2"], ["h3"]]
    assert host_groups(HOSTS[:3], SHARED) == [["h1", "h2", "h3"]]
    assert host_groups(HOSTS, "shared:2") == [HOSTS[:8], HOSTS[8:]]


@pytest.mark.parametrize("k", [1, 2, 3, 5, 16, 40])
def test_shared_k_covers_every_host_once_in_contiguous_groups_of_near_equal_size(k: int) -> None:
    groups = host_groups(HOSTS, f"shared:{k}")
    assert [h for g in groups for h in g] == HOSTS
    assert len(groups) == min(k, len(HOSTS))
    assert max(map(len, groups)) - min(map(len, groups)) <= 1


@pytest.mark.netns
def test_two_processes_serve_four_hosts_over_loopback(tmp_path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: each host's sockets are opened with setns (--netns)")
    net, base = random.randint(1, 250), random.randint(2, 200)
    hosts = ["a", "b", "c", "d"]
    config = {
        "hosts": {h: [f"127.{net}.{base}.{i + 1}"] for i, h in enumerate(hosts)},
        "port": random.randint(20000, 30000),
        "transport": {"ev_base": random.randint(10000, 19000)},
    }
    ns = {h: "/proc/self/ns/net" for h in hosts}
    eps = EndpointProcs(
        config, {h: [] for h in hosts}, str(tmp_path), netns=ns,
        groups=host_groups(hosts, "shared:2"),
    )  # fmt: skip
    try:
        res = eps.coordinator.run(1, {"workload": {"kind": "permutation", "bytes": "200kB"}})
        assert all(r["received_bytes"] == 200_000 for r in res.values()), res
        stats = eps.coordinator.stats(1)
        pids = {h: stats[h]["process"]["pid"] for h in hosts}
        assert pids["a"] == pids["b"] != pids["c"] == pids["d"]
        assert all(stats[h]["process"]["hosts_in_process"] == 2 for h in hosts)
    finally:
        eps.stop()
        eps.cleanup()

"""Life cycle on real namespaces: interrupted builds, killed processes, garbage, multi-plane."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from testbed.fabric.cleanup import leftovers, pid_exists
from testbed.fabric.state import RUN_ROOT
from tests.conftest import ROOT, interruptible, tb, unique_name

pytestmark = pytest.mark.netns


def wait_for(pred, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def state(name: str) -> dict:
    return json.loads(tb("inspect", "--name", name, "--json").stdout)


def test_multi_plane_fabric_forwards_on_every_plane():
    name = unique_name("mp")
    tb(
        "up",
        "--name",
        name,
        "--spines",
        "2",
        "--leaves",
        "2",
        "--hosts-per-leaf",
        "1",
        "--planes",
        "2",
    )
    try:
        st = state(name)
        assert {"leaf1p1", "leaf1p2", "spine2p1", "spine2p2"} <= set(st["nodes"])
        for ip in ("10.1.2.1", "10.2.2.1"):
            out = tb("exec", "--name", name, "h1", "--", "ping", "-c1", "-W2", ip).stdout
            assert "1 received" in out
        # Plane 2 traffic crosses only plane-2 switches.
        c = json.loads(tb("counters", "--name", name, "--json").stdout)
        assert all(sw.endswith(("p1", "p2")) for sw in c)
    finally:
        tb("down", "--name", name)
    assert leftovers(name) == []


def test_dead_switch_is_reported_and_clean_after_sigkill_of_supervisor():
    name = unique_name("k")
    tb("up", "--name", name, "--spines", "1", "--leaves", "2", "--hosts-per-leaf", "1")
    st = state(name)
    pids = [p["pid"] for p in st["processes"]]
    spine = next(p for p in st["processes"] if p["role"] == "switch" and p["node"] == "spine1")
    os.kill(spine["pid"], signal.SIGKILL)
    wait_for(lambda: state(name)["status"] == "degraded", what="degraded status")
    assert "spine1" in state(name)["message"]
    sup = next(p for p in st["processes"] if p["role"] == "supervisor")
    os.kill(sup["pid"], signal.SIGKILL)
    wait_for(lambda: not pid_exists(sup["pid"]), what="supervisor exit")
    out = tb("clean").stdout
    assert name in out
    assert leftovers(name) == []
    wait_for(
        lambda: not any(pid_exists(p) for p in pids), what="every process of the fabric to exit"
    )


def test_interrupted_up_tears_down_what_it_built():
    name = unique_name("i")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "testbed.cli",
            "up",
            "--name",
            name,
            "--spines",
            "2",
            "--leaves",
            "3",
            "--hosts-per-leaf",
            "2",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,
    )
    wait_for(lambda: (RUN_ROOT / name / "state.json").exists(), what="the build to start")
    time.sleep(0.3)  # mid-build: namespaces and some switches exist
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    assert proc.returncode != 0
    wait_for(lambda: leftovers(name) == [], timeout=20, what=f"no leftovers of {name}")


def test_live_switch_survives_garbage_frames_and_control_garbage():
    name = unique_name("g")
    tb("up", "--name", name, "--spines", "1", "--leaves", "2", "--hosts-per-leaf", "1")
    try:
        # Thousands of random and mutated frames from h1's NIC straight into leaf1.
        fuzz = (
            "import os, random, socket, struct\n"
            "s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)\n"
            "s.bind(('h1-eth0', 0))\n"
            "rnd = random.Random(7)\n"
            "for i in range(3000):\n"
            "    n = rnd.choice([14, 20, 33, 60, 200, 1400])\n"
            "    f = bytearray(os.urandom(n))\n"
            "    if i % 2:\n"
            "        f[12:14] = b'\\x08\\x00'\n"
            "    if i % 2 and n > 14:\n"
            "        f[14] = rnd.choice([0x45, 0x46, 0x44, 0x65, 0x4f])\n"
            "    s.send(bytes(f))\n"
        )
        tb("exec", "--name", name, "h1", "--", sys.executable, "-c", fuzz)
        c = json.loads(tb("counters", "--name", name, "--json", "leaf1").stdout)["leaf1"]
        dropped = sum(c["drops"].values())
        assert c["ports"]["leaf1-eth0"]["rx_packets"] >= 3000
        assert dropped >= 2900, c["drops"]
        assert {"non_ipv4", "truncated"} <= set(c["drops"])
        # Control-socket garbage gets an error reply; the switch keeps forwarding.
        sock_path = state(name)["switch_sockets"]["leaf1"]
        for garbage in (
            b"\xff\xfe not json\n",
            b"[1,2]\n",
            b'{"op": "port", "port": "nope", "up": false}\n',
        ):
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(3)
                s.connect(sock_path)
                s.sendall(garbage)
                reply = json.loads(s.recv(65536))
            assert reply["ok"] is False and reply["error"]
        out = tb("exec", "--name", name, "h1", "--", "ping", "-c1", "-W2", "10.1.2.1").stdout
        assert "1 received" in out
        assert state(name)["status"] == "up"
    finally:
        tb("down", "--name", name)


def test_cli_prompt_runs_node_and_testbed_commands():
    name = unique_name("c")
    tb("up", "--name", name, "--spines", "1", "--leaves", "2", "--hosts-per-leaf", "1")
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "testbed.cli", "cli", "--name", name],
            input="nodes\nh1 ping -c1 -W2 h2\ncounters leaf1\nexit\n",
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
        )
        assert proc.returncode == 0, proc.stderr
        assert "h1 h2 leaf1 leaf2 spine1" in proc.stdout
        assert "1 received" in proc.stdout
        assert "leaf1-eth0" in proc.stdout
    finally:
        tb("down", "--name", name)

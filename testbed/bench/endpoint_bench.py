"""`testbed bench endpoint`: the endpoint process against same-run baselines.

Two parts, each measured value next to the baseline it is compared with in the same run:

1. **Packet rate and CPU per packet** on loopback namespaces: two namespaces of this run only
   (``tbe<pid>-a``, ``-b``) joined by one veth, offloads off, no switch, no shaping. The
   sender's and the receiver's endpoint processes run a bulk transfer as fast as the transport
   goes; their packets/s and CPU µs per packet (user + system, from the process's own stats)
   are compared with a bare Python UDP blaster and receiver (``sendto`` / ``recv`` in a loop,
   no transport: the floor any Python endpoint pays) run on the same veth. The three send
   designs of ``endpoint.udp_io`` (``udp``, ``connected``, ``raw``) are measured the same way.
2. **Goodput vs. link rate** through a real fabric with one leaf switch and two hosts
   (``testbed up --spines 1 --leaves 1 --hosts-per-leaf 2``) at 100 and 200 Mbps: application
   goodput of a bulk transfer, against the best any sender can get (payload/frame x rate) and
   against the bare UDP blaster's received payload rate through the same fabric.

Each figure is the median of ``reps`` runs (the machine has 2 shared cores). ``quick`` uses
one run and smaller transfers. The helpers here (:class:`NetnsPair`, :class:`FabricEndpoints`)
also serve the fabric tests.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time

from contracts.framing import DATA_OVERHEAD, DEFAULT_MTU, goodput_ceiling, mrc_payload
from contracts.ports import ROCEV2_UDP_PORT
from contracts.runtime import PACKAGE_ROOT, child_env
from endpoint.metrics import placed_samples
from testbed.analysis import metrics as tm
from testbed.analysis.emulator_timing import switch_kernel_drops
from testbed.fabric import client
from testbed.fabric.failures import ctl_request
from testbed.fabric.lifecycle import FabricError
from testbed.fabric.session import Fabric
from testbed.harness.endpoints import (
    EndpointProcs,
    FabricEndpoints,
    run_job,
)
from topologies import TopologyParams

PR_SET_PDEATHSIG = 1
MAX_PAYLOAD = mrc_payload()  # a full data packet's message bytes at the default MTU (1420)
HTSIM_NDP_CEILING = 1500 / 1692
"""The same ceiling in htsim's NDP (1500 B payload in 1692 B on the wire), for comparison."""


class BenchError(RuntimeError):
    """The bench cannot run here (not root, a process failed to start...)."""


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if check and proc.returncode != 0:
        raise BenchError(f"bench: {' '.join(cmd)}: {proc.stderr.strip() or proc.returncode}")
    return proc


def ideal_goodput_mbps(link_mbps: float, mtu: int = DEFAULT_MTU) -> float:
    """Application Mbps a link of ``link_mbps`` carries with full MRC-style data packets."""
    return link_mbps * goodput_ceiling(mtu)


def ceiling_line(mtu: int = DEFAULT_MTU) -> str:
    """The header overhead ceiling in words, beside htsim's, for the benches' text output."""
    return (
        f"MRC header overhead ceiling: {100 * goodput_ceiling(mtu):.2f} % at {mtu} B "
        f"(frames as the emulation counts them; {100 * goodput_ceiling(mtu, physical=True):.2f} % "
        f"with FCS, preamble and gap; htsim NDP: 1500/1692 = {100 * HTSIM_NDP_CEILING:.2f} %)"
    )


# ----- endpoint processes -----------------------------------------------------------------------


# ----- running a job and measuring it -----------------------------------------------------------


def transfer_metrics(
    eps: EndpointProcs,
    job: int,
    t0: float,
    failures: tuple[float, ...] = (),
    bottleneck=None,
    failure_ends: tuple[float, ...] | None = None,
) -> dict:
    """Goodput, stall and failover of one job, from the endpoints' metrics files, with the
    scenario engine's own definitions (testbed.analysis.metrics); times relative to ``t0``.
    `failure_ends`: when each failure was healed (default: never). `deliveries` are the
    (time, bytes) samples at the endpoints' 1 ms resolution."""

    deliveries: list[tuple[float, int]] = []
    messages: list = []
    retransmits: dict[str, int] = {}
    counters: dict[str, int] = {}
    per_sender_done: dict[str, float] = {}
    for host in eps.procs:
        recs = eps.records(host)
        deliveries += [(t - t0, n) for t, n in placed_samples(recs, job)]
        last: dict[tuple, dict] = {}
        for r in recs:
            if r.get("job") != job:
                continue
            if r["type"] == "msg" and r["side"] == "tx":
                messages.append(tm.Message(r["posted"] - t0, r["bytes"], r["acked"] - t0))
                per_sender_done[host] = max(per_sender_done.get(host, 0.0), r["acked"] - t0)
            elif r["type"] == "counters":
                last[(r["peer"], r["qp"])] = r
        for r in last.values():
            for k, v in r["retransmits"].items():
                retransmits[k] = retransmits.get(k, 0) + v
            for k, v in r["counters"].items():
                counters[k] = counters.get(k, 0) + v
    deliveries.sort()
    delivered = sum(n for _, n in deliveries)
    done = [m.done_s for m in messages if m.done_s is not None]
    end_s = max([deliveries[-1][0] if deliveries else 0.0, *done]) + tm.BIN_S
    start = min((m.start_s for m in messages), default=0.0)
    active = max((max(done) if done else end_s) - start, 1e-9)
    times, mbps = tm.goodput_series(deliveries, end_s)
    outstanding = tm.outstanding_intervals(messages, end_s)
    fo, _each = tm.failover(
        times,
        mbps,
        outstanding,
        [f - t0 for f in failures],
        complete=True,
        fallback_mbps=None if bottleneck is None else tm.FALLBACK_EFFICIENCY * bottleneck,
        failure_ends=None if failure_ends is None else [f - t0 for f in failure_ends],
    )
    return {
        "delivered_bytes": delivered,
        "goodput_mbps": delivered * 8 / active / 1e6,
        "active_s": active,
        "max_stall_ms": tm.max_stall_ms([t for t, n in deliveries if n > 0], outstanding),
        "failover_ms": fo.ms,
        "failover_status": fo.status,
        "bin_times": times,
        "bin_mbps": mbps,
        "retransmits": retransmits,
        "counters": counters,
        "flow_done_s": per_sender_done,
        "messages": len(messages),
        "deliveries": deliveries,
    }


def switch_counters(name: str) -> dict:

    return client.call(name, {"op": "counters", "node": None})["counters"]


def kernel_drops(name: str) -> int:
    """The fabric's switches' kernel drops so far; an unreadable figure stops the bench (fail
    closed: never reported as 0 drops)."""
    total, missing = switch_kernel_drops(switch_counters(name))
    if total is None:
        raise RuntimeError("; ".join(missing))
    return total


def fabric_trims(name: str) -> int:
    return sum(p["trims"] for c in switch_counters(name).values() for p in c["ports"].values())


def ctl(name: str, action: str, *args: str, direction: str | None = None) -> None:
    """A failure control applied through the supervisor, in this process (no CLI start-up, so
    the time around the call bounds when the switches applied it to a few ms)."""

    client.call(name, ctl_request(action, list(args), direction))


# ----- part 1: loopback namespaces --------------------------------------------------------------

VETH_A, VETH_B = "eba", "ebb"
ADDR_A, ADDR_B = "10.253.0.1", "10.253.0.2"
OFFLOADS = ("tso", "gso", "gro", "tx", "rx", "sg")
BASE_PORT = ROCEV2_UDP_PORT  # the bench's UDP baselines use the ports from here on
BLAST_PAYLOAD = MAX_PAYLOAD + DATA_OVERHEAD  # same datagram size as a full data packet


class NetnsPair:
    """Two namespaces of this run (``tbe<pid>-a``/``-b``) joined by one veth; nothing else."""

    def __init__(self) -> None:
        self.prefix = f"tbe{os.getpid()}"
        self.ns = {"a": f"{self.prefix}-a", "b": f"{self.prefix}-b"}
        self.created: list[str] = []
        cpus = sorted(os.sched_getaffinity(0))
        self.cpu = {"a": cpus[0], "b": cpus[1] if len(cpus) > 1 else cpus[0]}
        try:
            for role in ("a", "b"):
                _run("ip", "netns", "add", self.ns[role])
                self.created.append(self.ns[role])
                self.exec(role, "sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1")
                self.exec(role, "ip", "link", "set", "lo", "up")
            _run(
                "ip", "-n", self.ns["a"], "link", "add", VETH_A, "type", "veth",
                "peer", "name", VETH_B, "netns", self.ns["b"],
            )  # fmt: skip
            for role, ifname, addr in (("a", VETH_A, ADDR_A), ("b", VETH_B, ADDR_B)):
                self.exec(role, "ethtool", "-K", ifname, *[w for o in OFFLOADS for w in (o, "off")])
                self.exec(role, "ip", "addr", "add", f"{addr}/24", "dev", ifname)
                self.exec(role, "ip", "link", "set", ifname, "up")
        except BaseException:
            self.destroy()
            raise

    def exec(self, role: str, *cmd: str) -> subprocess.CompletedProcess:
        return _run("ip", "netns", "exec", self.ns[role], *cmd)

    def prefix_cmd(self, role: str) -> list[str]:
        """Launcher that enters the namespace and pins to this role's core (both exec in place)."""
        return ["ip", "netns", "exec", self.ns[role], "taskset", "-c", str(self.cpu[role])]

    def destroy(self) -> None:
        for name in reversed(self.created):
            _run("ip", "netns", "del", name, check=False)
        self.created.clear()


def _proc_cpu(pid: int) -> float:
    """User + system seconds of a process (``/proc/PID/stat``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _baseline_udp(pair: NetnsPair, seconds: float) -> dict:
    """The bare Python UDP blaster and receiver on the same veth: pps and CPU/packet each."""
    port = BASE_PORT + 1
    me = [sys.executable, "-m", "testbed.bench.endpoint_bench"]
    sink = subprocess.Popen(
        [*pair.prefix_cmd("b"), *me, "sink", ADDR_B, str(port), str(seconds + 2.0)],
        stdout=subprocess.PIPE, env=child_env(), cwd=PACKAGE_ROOT, preexec_fn=_die_with_parent,
    )  # fmt: skip
    try:
        if not sink.stdout.readline().startswith(b"ready"):
            raise BenchError("bench: the UDP sink did not start")
        blast = subprocess.run(
            [*pair.prefix_cmd("a"), *me, "blast", ADDR_B, str(port), str(seconds)],
            capture_output=True, env=child_env(), cwd=PACKAGE_ROOT, timeout=seconds + 30, check=True,
        )  # fmt: skip
        tx = json.loads(blast.stdout)
        out, _ = sink.communicate(timeout=seconds + 30)
        rx = json.loads(out)
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait()
    return {
        "udp_blaster": {"pps": tx["packets"] / tx["seconds"], "cpu_us": tx["cpu_us_per_packet"]},
        "udp_sink": {
            "pps": rx["packets"] / max(rx["seconds"], 1e-9),
            "cpu_us": rx["cpu_us_per_packet"],
        },
    }


def _endpoint_loopback(pair: NetnsPair, design: str, nbytes: int) -> dict:
    """A bulk transfer between endpoint processes in the two namespaces, unpaced."""
    config = {"hosts": {"a": [ADDR_A], "b": [ADDR_B]}, "io": design}
    eps = EndpointProcs(config, {"a": pair.prefix_cmd("a"), "b": pair.prefix_cmd("b")})
    try:
        co = eps.coordinator
        before = {h: r["process"] for h, r in co.stats().items()}
        t0 = time.monotonic()
        status = co.run(1, {"workload": {"kind": "bulk", "src": "a", "dst": "b", "bytes": nbytes}})
        seconds = time.monotonic() - t0
        after = {h: r["process"] for h, r in co.stats().items()}
        conn = co.stats(1)["a"]["jobs"]["1"]["connections"]["b"]["counters"]
    finally:
        eps.stop()
        eps.cleanup()
    if not status["b"]["done"]:
        raise BenchError(f"bench: endpoint bulk ({design}) did not finish")
    packets = conn["data_tx"]
    cpu = {h: after[h]["cpu_s"] - before[h]["cpu_s"] for h in after}
    return {
        "endpoint_sender": {"pps": packets / seconds, "cpu_us": cpu["a"] / packets * 1e6},
        "endpoint_receiver": {"pps": packets / seconds, "cpu_us": cpu["b"] / packets * 1e6},
        "goodput_mbps": nbytes * 8 / seconds / 1e6,
    }


def _median_runs(runs: list[dict]) -> dict:
    out: dict = {}
    for key in runs[0]:
        if isinstance(runs[0][key], dict):
            out[key] = {k: statistics.median(r[key][k] for r in runs) for k in runs[0][key]}
        else:
            out[key] = statistics.median(r[key] for r in runs)
    return out


def loopback_part(reps: int, nbytes: int, seconds: float) -> dict:
    pair = NetnsPair()
    try:
        base = _median_runs([_baseline_udp(pair, seconds) for _ in range(reps)])
        rows = []
        for design in ("udp", "connected", "raw"):
            ep = _median_runs([_endpoint_loopback(pair, design, nbytes) for _ in range(reps)])
            pps = {
                "endpoint_sender": ep["endpoint_sender"]["pps"],
                "endpoint_receiver": ep["endpoint_receiver"]["pps"],
                "udp_blaster": base["udp_blaster"]["pps"],
                "udp_sink": base["udp_sink"]["pps"],
            }
            cpu = {
                "endpoint_sender": ep["endpoint_sender"]["cpu_us"],
                "endpoint_receiver": ep["endpoint_receiver"]["cpu_us"],
                "udp_blaster": base["udp_blaster"]["cpu_us"],
                "udp_sink": base["udp_sink"]["cpu_us"],
            }
            rows.append(
                {
                    "io": design,
                    "datagram_bytes": BLAST_PAYLOAD,
                    "pps": {k: round(v) for k, v in pps.items()},
                    "cpu_us_per_packet": {k: round(v, 2) for k, v in cpu.items()},
                    "goodput_mbps": round(ep["goodput_mbps"], 1),
                    "ratio": {
                        "sender_cpu_vs_udp_blaster": round(
                            cpu["endpoint_sender"] / cpu["udp_blaster"], 2
                        ),
                        "receiver_cpu_vs_udp_sink": round(
                            cpu["endpoint_receiver"] / cpu["udp_sink"], 2
                        ),
                        "sender_pps_vs_udp_blaster": round(
                            pps["endpoint_sender"] / pps["udp_blaster"], 3
                        ),
                    },
                }
            )
        return {"rows": rows}
    finally:
        pair.destroy()


# ----- part 2: goodput vs link rate through a fabric --------------------------------------------


def _fabric_udp_baseline(
    name: str, fab, seconds: float, src: str = "h1", dst: str = "h2", port: int = BASE_PORT + 2
) -> float:
    """Payload Mbps a bare UDP blaster gets from `src` to `dst` through the fabric."""

    st = client.state(name)
    me = [sys.executable, "-m", "testbed.bench.endpoint_bench"]
    dst_ip = fab.host_ip(dst)
    sink = subprocess.Popen(
        ["mnexec", "-a", str(st.nodes[dst]["pid"]), *me, "sink", dst_ip, str(port), str(seconds + 2)],
        stdout=subprocess.PIPE, env=child_env(), cwd=PACKAGE_ROOT, preexec_fn=_die_with_parent,
    )  # fmt: skip
    try:
        if not sink.stdout.readline().startswith(b"ready"):
            raise BenchError(f"bench: the UDP sink did not start in {dst}")
        subprocess.run(
            ["mnexec", "-a", str(st.nodes[src]["pid"]), *me, "blast", dst_ip, str(port), str(seconds)],
            capture_output=True, env=child_env(), cwd=PACKAGE_ROOT, timeout=seconds + 30, check=True,
        )  # fmt: skip
        rx = json.loads(sink.communicate(timeout=seconds + 30)[0])
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait()
    return rx["bytes"] * 8 / max(rx["seconds"], 1e-9) / 1e6


def goodput_part(rates: tuple[int, ...], reps: int, nbytes_per_mbps: int, seconds: float) -> list:
    """Bulk h1 -> h2 through one leaf switch at each rate, against the ideal and the blaster."""

    rows = []
    for mbps in rates:
        params = TopologyParams(spines=1, leaves=1, hosts_per_leaf=2, link_mbps=mbps)
        fabric = Fabric(params, name=f"eb{os.getpid() % 100000}r{mbps}").up(owned=True)
        name, fab = fabric.name, fabric.description
        with endpoints_on(fabric, ["h1", "h2"], mbps) as eps:
            k0 = kernel_drops(name)
            goodputs, blasts = [], []
            for rep in range(reps):
                nbytes = nbytes_per_mbps * mbps
                req = {"workload": {"kind": "bulk", "src": "h1", "dst": "h2", "bytes": nbytes}}
                res = run_job(eps, rep + 1, req)
                if not res["status"]["h2"]["done"]:
                    raise BenchError(f"bench: bulk at {mbps} Mbps did not finish")
                goodputs.append(transfer_metrics(eps, rep + 1, res["t0"])["goodput_mbps"])
                blasts.append(_fabric_udp_baseline(name, fab, seconds))
            ideal = ideal_goodput_mbps(mbps)
            g, b = statistics.median(goodputs), statistics.median(blasts)
            rows.append(
                {
                    "link_mbps": mbps,
                    "goodput_mbps": {
                        "endpoint": round(g, 2),
                        "ideal": round(ideal, 2),
                        "udp_blaster": round(b, 2),
                    },
                    "runs": [round(x, 2) for x in goodputs],
                    "ratio": {
                        "endpoint_vs_link": round(g / mbps, 3),
                        "endpoint_vs_ideal": round(g / ideal, 3),
                        "endpoint_vs_udp_blaster": round(g / b, 3) if b else None,
                    },
                    "kernel_drops": kernel_drops(name) - k0,
                }
            )
    return rows


@contextlib.contextmanager
def endpoints_on(fabric: Fabric, hosts: list[str], pace_mbps: float):
    """Endpoint processes on `hosts` of `fabric` (already up); on the way out, the endpoints
    are stopped and the fabric taken down, whatever happened."""
    eps = None
    try:
        eps = FabricEndpoints(fabric.name, fabric.description, hosts, pace_mbps=pace_mbps)
        yield eps
    finally:
        if eps is not None:
            eps.stop()
            eps.cleanup()
        with contextlib.suppress(FabricError):
            fabric.down()


# ----- entry points -------------------------------------------------------------------------------


def run_endpoint_bench(quick: bool = False) -> dict:
    """The whole endpoint bench; returns the docs/design.md "Benchmark output"-shaped object."""
    if os.geteuid() != 0:
        raise BenchError("bench endpoint needs root (it creates network namespaces): use sudo")
    for tool in ("ip", "ethtool", "taskset", "mnexec"):
        if shutil.which(tool) is None:
            raise BenchError(f"bench endpoint needs {tool!r} on PATH")
    reps = 1 if quick else 3
    started = time.time()
    loop = loopback_part(
        reps, nbytes=(8 if quick else 30) * 1_000_000, seconds=1.0 if quick else 2.0
    )
    good = goodput_part(
        (100, 200),
        reps,
        nbytes_per_mbps=(60_000 if quick else 150_000),
        seconds=1.0 if quick else 2.0,
    )
    return {
        "bench": "endpoint",
        "loopback": loop["rows"],
        "goodput": good,
        "io_default": "udp",
        "meta": bench_meta(
            reps,
            started,
            "medians; CPU from /proc per process (user+system); a shared machine is noisy",
        ),
    }


def bench_meta(reps: int, started: float, note: str, **extra) -> dict:
    """The `meta` of a bench result: what a reader needs to judge how noisy the run was."""
    return {
        "reps": reps,
        **extra,
        "cpus": len(os.sched_getaffinity(0)),
        "load_avg": os.getloadavg(),
        "seconds": round(time.time() - started, 1),
        "note": note,
    }


def format_endpoint_table(d: dict) -> str:
    """The human-readable form of a run_endpoint_bench() result."""
    lines = [f"endpoint bench: median of {d['meta']['reps']} run(s), {d['meta']['cpus']} cores"]
    lines.append("")
    lines.append(f"loopback namespaces (veth, no switch), {BLAST_PAYLOAD}-byte datagrams")
    lines.append(f"  {'io':<10} {'role':<18} {'kpps':>8} {'CPU us/pkt':>11}")
    for r in d["loopback"]:
        for role in ("endpoint_sender", "endpoint_receiver", "udp_blaster", "udp_sink"):
            lines.append(
                f"  {r['io']:<10} {role:<18} {r['pps'][role] / 1000:8.1f} "
                f"{r['cpu_us_per_packet'][role]:11.2f}"
            )
        lines.append("  " + ", ".join(f"{k} {v}" for k, v in r["ratio"].items()))
    lines.append("")
    lines.append("goodput through one leaf switch (bulk h1 -> h2)")
    lines.append(f"  {'link':>6} {'endpoint':>9} {'ideal':>7} {'udp blast':>10}  vs link  vs ideal")
    for r in d["goodput"]:
        g = r["goodput_mbps"]
        lines.append(
            f"  {r['link_mbps']:>6} {g['endpoint']:9.1f} {g['ideal']:7.1f} {g['udp_blaster']:10.1f}"
            f"  {r['ratio']['endpoint_vs_link']:7.3f}  {r['ratio']['endpoint_vs_ideal']:8.3f}"
        )
    lines.append(ceiling_line())
    return "\n".join(lines)


# ----- the baselines (run inside a namespace as python -m testbed.bench.endpoint_bench ...) ------


def _blast(dst: str, port: int, seconds: float) -> dict:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, (10 << 2) | 2)
    payload = bytes(BLAST_PAYLOAD)
    addr = (dst, port)
    sent = 0
    c0, t0 = _proc_cpu(os.getpid()), time.monotonic()
    end = t0 + seconds
    while True:
        for _ in range(256):
            try:
                s.sendto(payload, addr)
                sent += 1
            except OSError:
                pass
        if time.monotonic() >= end:
            break
    t1, c1 = time.monotonic(), _proc_cpu(os.getpid())
    return {
        "packets": sent,
        "seconds": t1 - t0,
        "cpu_us_per_packet": (c1 - c0) / max(sent, 1) * 1e6,
    }


def _sink(addr: str, port: int, seconds: float) -> dict:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    s.bind((addr, port))
    s.settimeout(0.3)
    print("ready", flush=True)
    n = nbytes = 0
    first = last = None
    c0 = None
    end = time.monotonic() + seconds
    buf = bytearray(65536)
    while time.monotonic() < end:
        try:
            k = s.recv_into(buf)
        except TimeoutError:
            if n:
                break
            continue
        if first is None:
            first, c0 = time.monotonic(), _proc_cpu(os.getpid())
        last = time.monotonic()
        n += 1
        nbytes += k
    c1 = _proc_cpu(os.getpid())
    dur = (last - first) if n > 1 else 0.0
    cpu = (c1 - c0) if c0 is not None else 0.0
    return {
        "packets": n,
        "bytes": nbytes,
        "seconds": dur,
        "cpu_us_per_packet": cpu / max(n, 1) * 1e6,
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] == "blast":
        print(json.dumps(_blast(args[1], int(args[2]), float(args[3]))), flush=True)
        return 0
    if args and args[0] == "sink":
        print(json.dumps(_sink(args[1], int(args[2]), float(args[3]))), flush=True)
        return 0
    quick = "--quick" in args
    result = run_endpoint_bench(quick=quick)
    print(json.dumps(result, indent=1) if "--json" in args else format_endpoint_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The bench's test bed: three namespaces of one run, the C load generator, CPU readings.

`testbed bench switch` (testbed.bench.switch_bench) measures on a bed of its own, so that no
fabric, no other bench and no earlier run shares its links or counters:

    gen: g0 ──── d0 :dut: d1 ──── s0 :sink

`Bed` creates exactly these namespaces (named `tbb<pid>-gen`, `-dut`, `-sink`), starts every
process in them pinned to a core, and deletes what it created -- also on Ctrl-C. loadgen.c is
compiled here (once per source version, into a cache directory). The /proc readers at the end
are how the bench tells a DUT's own CPU time from what a neighbour on the machine took.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from pyroute2 import IPRoute

from contracts import dscp
from contracts.netns import Netns
from contracts.runtime import child_env

LOADGEN_SRC = Path(__file__).with_name("loadgen.c")

GEN_MAC = "02:7b:00:00:00:01"
DUT0_MAC = "02:7b:00:00:01:00"
DUT1_MAC = "02:7b:00:00:01:01"
SINK_MAC = "02:7b:00:00:02:00"
GEN_IF, DUT_IN, DUT_OUT, SINK_IF = "g0", "d0", "d1", "s0"
OFFLOADS = ("tso", "gso", "gro", "tx", "rx", "sg")
TOS_TRIMMABLE = dscp.tos(dscp.TRIMMABLE_DSCP, dscp.ECN_ECT0)  # what MRC-style data carries
TOS_BEST_EFFORT = 0  # not trimmable: what overflows the queue is tail-dropped
FLOWS = 8  # UDP source ports 49152..49159 (the EV)
PR_SET_PDEATHSIG = 1


class BenchError(RuntimeError):
    """The bench cannot run here (not root, no gcc, a DUT failed to start...)."""


# ----- the C load generator -------------------------------------------------------------------


def cache_dir() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(xdg) / "testbed"
    if os.geteuid() == 0:
        return Path("/var/cache/testbed")
    return Path.home() / ".cache" / "testbed"


def build_loadgen() -> Path:
    """Compile loadgen.c (once per source version) and return the binary's path."""
    src = LOADGEN_SRC.read_bytes()
    digest = hashlib.sha256(src).hexdigest()[:16]
    out_dir = cache_dir()
    binary = out_dir / f"loadgen-{digest}"
    if binary.exists() and os.access(binary, os.X_OK):
        return binary
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise BenchError("bench: gcc is needed to build the load generator (apt-get install gcc)")
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".loadgen-{digest}.{os.getpid()}"
    proc = subprocess.run(
        [cc, "-O2", "-Wall", "-o", str(tmp), str(LOADGEN_SRC)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BenchError(f"bench: compiling {LOADGEN_SRC} failed:\n{proc.stderr.strip()}")
    os.replace(tmp, binary)
    for old in out_dir.glob("loadgen-*"):  # older builds of the same tool
        if old != binary:
            old.unlink(missing_ok=True)
    return binary


# ----- namespaces and processes of this run ---------------------------------------------------


def _die_with_parent() -> None:
    """Child: be killed if the bench dies (the flag survives exec of ip, taskset, python)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def run_cmd(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise BenchError(f"bench: {' '.join(cmd)}: {proc.stderr.strip() or proc.returncode}")
    return proc


class Bed:
    """The three namespaces of one bench run and every process started in them."""

    def __init__(self, loadgen: Path) -> None:
        self.prefix = f"tbb{os.getpid()}"
        self.ns = {role: f"{self.prefix}-{role}" for role in ("gen", "dut", "sink")}
        self.loadgen = str(loadgen)
        self.created: list[str] = []
        self.netlink: dict[str, IPRoute] = {}
        self.procs: list[subprocess.Popen] = []
        self.dir = Path(tempfile.mkdtemp(prefix=f"{self.prefix}-"))
        self.logs: list = []
        cpus = sorted(os.sched_getaffinity(0))
        self.gen_cpu = cpus[0]
        self.dut_cpu = cpus[1] if len(cpus) > 1 else cpus[0]
        self.cpus = len(cpus)

    # set-up and teardown

    def create(self) -> None:
        for role in ("gen", "dut", "sink"):
            name = self.ns[role]
            run_cmd("ip", "netns", "add", name)
            self.created.append(name)
            self.ns_run(
                role,
                "sysctl",
                "-q",
                "-w",
                "net.ipv6.conf.all.disable_ipv6=1",
                "net.ipv6.conf.default.disable_ipv6=1",
            )
        g, d, s = self.ns["gen"], self.ns["dut"], self.ns["sink"]
        run_cmd(
            "ip",
            "-n",
            g,
            "link",
            "add",
            GEN_IF,
            "address",
            GEN_MAC,
            "type",
            "veth",
            "peer",
            "name",
            DUT_IN,
            "address",
            DUT0_MAC,
            "netns",
            d,
        )
        run_cmd(
            "ip",
            "-n",
            d,
            "link",
            "add",
            DUT_OUT,
            "address",
            DUT1_MAC,
            "type",
            "veth",
            "peer",
            "name",
            SINK_IF,
            "address",
            SINK_MAC,
            "netns",
            s,
        )
        for role, ifname in (("gen", GEN_IF), ("dut", DUT_IN), ("dut", DUT_OUT), ("sink", SINK_IF)):
            self.ns_run(role, "ethtool", "-K", ifname, *[w for o in OFFLOADS for w in (o, "off")])
            run_cmd("ip", "-n", self.ns[role], "link", "set", ifname, "up")
        # The sink only counts: drop everything at tc ingress so its IP stack does no work (rx
        # counters and AF_PACKET taps see frames before tc). Best effort: old kernels lack it.
        if (
            self.ns_run(
                "sink", "tc", "qdisc", "add", "dev", SINK_IF, "clsact", check=False
            ).returncode
            == 0
        ):
            self.ns_run(
                "sink",
                "tc",
                "filter",
                "add",
                "dev",
                SINK_IF,
                "ingress",
                "bpf",
                "da",
                "bytecode",
                "1,6 0 0 2,",
                check=False,
            )
        for role in self.ns:  # opened now, so that no measurement window pays for it
            self._netlink(role)

    def set_rps(self, role: str, ifname: str, cpu: int | None) -> None:
        mask = "0" if cpu is None else format(1 << cpu, "x")
        self.ns_run(
            role,
            "sh",
            "-c",
            f"echo {mask} > /sys/class/net/{ifname}/queues/rx-0/rps_cpus",
            check=False,
        )

    def destroy(self) -> None:
        """Stop every process of this run, delete exactly the namespaces it created."""
        masked = threading.current_thread() is threading.main_thread()
        if masked:  # a second Ctrl-C must not leave half of it behind
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            for proc in list(self.procs):
                self.stop(proc, grace_s=1.0)
            for ipr in self.netlink.values():
                ipr.close()
            self.netlink.clear()
            for name in reversed(self.created):
                run_cmd("ip", "netns", "del", name, check=False)
            self.created.clear()
            for f in self.logs:
                f.close()
            self.logs.clear()
            shutil.rmtree(self.dir, ignore_errors=True)
        finally:
            if masked:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})

    # commands and processes

    def ns_run(self, role: str, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
        return run_cmd("ip", "netns", "exec", self.ns[role], *cmd, check=check)

    def spawn(
        self, role: str, argv: list[str], cpu: int, log: str, realtime: bool = False
    ) -> subprocess.Popen:
        """Start `argv` in a namespace, pinned to `cpu`; `realtime` for measuring instruments
        that sleep most of the time (paced generator, probe receiver), so a busy neighbour on
        the machine does not turn their pacing or timestamps into noise."""
        env = child_env()
        rt = ["chrt", "-f", str(GEN_RT_PRIORITY)] if realtime and shutil.which("chrt") else []
        err = open(self.dir / f"{log}.log", "ab")  # noqa: SIM115 - closed in destroy()
        self.logs.append(err)
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.ns[role], "taskset", "-c", str(cpu), *rt, *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
            env=env,
            preexec_fn=_die_with_parent,
        )
        proc.log = self.dir / f"{log}.log"  # type: ignore[attr-defined]
        proc.what = " ".join(Path(argv[0]).name if i == 0 else a for i, a in enumerate(argv[:4]))  # type: ignore[attr-defined]
        self.procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen, grace_s: float = 3.0) -> str:
        """SIGTERM (then SIGKILL) one process this bench started; returns what it printed."""
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        if proc in self.procs:
            self.procs.remove(proc)
        return out.decode(errors="replace") if out else ""

    def finish(self, proc: subprocess.Popen, timeout: float) -> str:
        """Wait for a process that ends by itself (loadgen); returns its stdout."""
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            return self.stop(proc)
        if proc in self.procs:
            self.procs.remove(proc)
        if proc.returncode != 0:
            raise BenchError(f"bench: {proc.what} exited {proc.returncode}: {_tail(proc)}")
        return out.decode(errors="replace")

    def wait_line(self, proc: subprocess.Popen, want: str, timeout: float = 20.0) -> None:
        """Block until `proc` prints a line containing `want` (its 'ready' message)."""
        deadline = time.monotonic() + timeout
        fd = proc.stdout.fileno()
        buf = b""
        while time.monotonic() < deadline:
            r, _, _ = select.select([fd], [], [], 0.1)
            if r:
                chunk = os.read(fd, 4096)
                if not chunk:
                    break
                buf += chunk
                if want.encode() in buf:
                    return
            elif proc.poll() is not None:
                break
        raise BenchError(f"bench: {proc.what} did not start: {_tail(proc)}")

    def loadgen_send(
        self,
        frame_bytes: int,
        dst_mac: str,
        duration_s: float,
        pps: float = 0.0,
        tos: int = TOS_TRIMMABLE,
        probe_hz: float = 0.0,
    ) -> subprocess.Popen:
        argv = [
            self.loadgen,
            "send",
            GEN_IF,
            GEN_MAC,
            dst_mac,
            str(frame_bytes),
            f"{duration_s:.3f}",
            f"{pps:.1f}",
            str(tos),
            str(FLOWS),
            f"{probe_hz:.1f}",
        ]
        return self.spawn("gen", argv, self.gen_cpu, "loadgen", realtime=pps != 0)

    def _netlink(self, role: str) -> IPRoute:
        """A netlink socket inside the namespace of `role`, opened once: the thread enters the
        namespace only to create it (a socket stays where it was made)."""
        if role not in self.netlink:
            with Netns(f"/var/run/netns/{self.ns[role]}") as ns, ns.entered():
                self.netlink[role] = IPRoute()
        return self.netlink[role]

    def link_stats(self, role: str) -> tuple[float, dict[str, dict[str, int]]]:
        """(time of the reading, {ifname: counters}) for every interface of a namespace.

        The time is known only to within the request: the counters were read somewhere in it,
        its midpoint is taken. This process shares the generator's core, and a paced generator
        runs there under SCHED_FIFO: a reading waited for that core. Measured 2026-12-07 on the
        200 Mbps shaper's 1 s window, as `read_uncertainty_pct`: 1.0 % with an `ip -s link`
        process, 1.7 % with a netlink dump from this process (its socket then opened in the
        first reading), 0.22 % with that dump made at a real-time priority above the
        generator's (`_ahead_of_generator`), 0.21 % with the sockets opened beforehand too:
        what is done here."""
        ipr = self._netlink(role)
        with _ahead_of_generator():
            t0 = time.monotonic()
            links = ipr.get_links()
            t1 = time.monotonic()
        stats = {}
        for link in links:
            s = link.get_attr("IFLA_STATS64")
            stats[link.get_attr("IFLA_IFNAME")] = {
                k: 0 if s is None else s[k]
                for k in (
                    "rx_packets",
                    "rx_bytes",
                    "rx_dropped",
                    "tx_packets",
                    "tx_bytes",
                    "tx_dropped",
                )
            }
        return (t0 + t1) / 2, stats

    def sink(self) -> tuple[float, dict[str, int]]:
        t, stats = self.link_stats("sink")
        return t, stats[SINK_IF]


GEN_RT_PRIORITY = 10  # the paced generator's SCHED_FIFO priority (`spawn`)


@contextlib.contextmanager
def _ahead_of_generator():
    """Run the body at a SCHED_FIFO priority above the generator's, then return to the normal
    class: a counter reading is then not delayed by the generator spinning on the same core.
    Where the priority cannot be raised the body runs as it is (the reading reports how long
    it took)."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(GEN_RT_PRIORITY + 10))
    except OSError:
        yield
        return
    try:
        yield
    finally:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))


def _tail(proc: subprocess.Popen) -> str:
    try:
        text = Path(proc.log).read_text(errors="replace").strip()  # type: ignore[attr-defined]
    except (OSError, AttributeError):
        return f"exit {proc.poll()}"
    return text[-600:] or f"exit {proc.poll()}"


# ----- CPU and memory of processes and cores, from /proc ----------------------------------------


def schedstat(pid: int) -> tuple[int, int]:
    """(ns on CPU, ns waiting for a CPU) of one process, from /proc/PID/schedstat."""
    try:
        run, wait, _slices = Path(f"/proc/{pid}/schedstat").read_text().split()
        return int(run), int(wait)
    except (OSError, ValueError):
        return 0, 0


# Columns of a /proc/stat "cpuN" line, after the name: user nice system idle iowait irq softirq
# steal ...
KERNEL_COLUMNS = (2, 5, 6)  # system, irq, softirq
STEAL_COLUMNS = (7,)  # the hypervisor ran something else on this virtual core


def proc_stat_ns(cpus: list[int], columns: tuple[int, ...]) -> int:
    """ns these cores spent in the given /proc/stat columns, summed."""
    hz = os.sysconf("SC_CLK_TCK")
    want = {f"cpu{c}" for c in cpus}
    ticks = 0
    for line in Path("/proc/stat").read_text().splitlines():
        f = line.split()
        if f[0] in want:
            ticks += sum(int(f[1 + c]) for c in columns if 1 + c < len(f))
    return ticks * 1_000_000_000 // hz


def process_rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0

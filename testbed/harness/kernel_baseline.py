"""The kernel baselines of the scenario runner: Linux TCP and Linux MPTCP, driven by iperf3.

`KernelBaseline` runs a scenario's traffic matrix (`testbed.scenario.flows`) in the host
namespaces of a running fabric with one iperf3 test per flow, each on a port of its own
(``5201 + k``; an all-reduce hop alternates between ``5201 + 2k`` and ``5202 + 2k`` from step to
step so that a step never meets the server of the previous step still tidying up), so ECMP
hashes every flow by its own 5-tuple. ``tcp`` is plain iperf3; ``mptcp`` is ``mptcpize run
iperf3`` on both sides (iperf3 3.12 has no ``--mptcp``). Lifecycle, as the runner drives it:
`prepare` (MPTCP set-up, servers listening), `go` (t0), `wait` (deadline), `collect`, `stop`.

Whose view, and why ``-R``: every flow is a *reverse* test -- the iperf3 server runs in the flow's
source host and sends, the client runs in the destination and receives -- because a normal
``-n BYTES`` test ends when the *sender* has written the bytes into its socket: the receiver then
stops counting, and what was still in flight is never reported (measured on a 20 Mbps fabric:
1.51 MB of 2 MB; esnet/iperf#382). With ``-R`` the test ends when the *receiver* has read the bytes
(iperf3 checks ``bytes_received`` on the client), so the client's ``-J -i 0.1`` JSON is the
receiver's own account of the whole flow, and it is written even when the client is killed at
the deadline (SIGTERM: intervals so far included). The price is a little waste: the sender keeps
sending until it hears TEST_END, and that tail is discarded. Bytes beyond the flow's size (reads
come in 128 KiB blocks) are not counted.

Deliveries: iperf3's finest useful interval is 0.1 s, and `testbed.analysis.metrics` wants 1 ms samples,
so each interval's bytes are spread uniformly over it in 1 ms samples (`spread`); a message is
done when that series reaches the flow's size. So stall and failover times of the kernel
baselines are only as sharp as 0.1 s intervals allow: an interval in which delivery stopped
half-way looks like one at half rate. Intervals count from the test's start, which is neither
the launch (process start-up and control handshake come first: 10-50 ms) nor the exit minus the
duration (the closing result exchange often waits out a delayed ACK, and after a failure it can
wait out RTO backoff -- 2.5 s seen). The start is taken from the *server*, which runs in text
mode with ``-i 0.1 --forceflush``: iperf3 writes its text when an interval timer fires and when
TEST_END arrives, a reader thread timestamps each line, and each line bounds the start from
above (`server_anchors`); the anchor is the least of those bounds and ``exit - duration``, never
before the launch. Checked against tshark (the first data packet in the receiver's namespace):
within +-3 ms, 10 ms at worst. The server's ``connected to ... port P`` line names the client's
data port, which the client's JSON holds too, so tests are matched exactly.

TCP retransmissions are the ``Tcp: RetransSegs`` growth of the workload hosts' namespaces between
`prepare` and `collect`, not the client's ``sum_sent.retransmits``: that number arrives in the
closing result exchange, so a flow killed at the deadline -- the failure case -- has none, and for
MPTCP iperf3's TCP_INFO sees one subflow only. The JSON sum is kept in ``details`` (for tcp the
two agree within ~10 % when every flow completes). The hosts use the kernel's default congestion
control (``bbr`` on the development VM), recorded in ``details``.

MPTCP set-up (sysctl, limits, the endpoints the servers announce, and the ``ip mptcp monitor``
that counts each connection's subflows) is testbed.harness.mptcp_setup, with what was measured.

All-reduce: the steps run one after another in a background thread; a step starts one iperf3
client per ring hop at once (from parallel threads: < 1 ms apart), against the servers started in
`prepare`; it ends when the last hop's receiver has all its bytes (from the JSON, as above), and
the next step starts once every client of this one has exited. A step not finished at the
deadline is ``(start, None)`` and no further step is started. Each step therefore includes
iperf3's process start-up and control handshake -- the cost of a kernel-transport job that opens
a transfer per step, which MRC's endpoints do not pay. Measured on an idle 20 Mbps fabric
(median over 20 steps, against the bytes/rate ideal): a 16 KiB step, almost pure overhead, takes
52-60 ms instead of 6.6 ms; a 256 KiB step of a 2-host ring 167-230 ms instead of 105 ms; of the
4-host ring 340-445 ms instead of 157 ms. It grows with the ring because a hop's handshake (some
five crossings of the fabric) queues behind the other hops' data, ~26 ms per full 64 KB queue
at 20 Mbps (``details["flows"][i]["startup_ms"]``: launch to test start, median 10-50 ms, up to
300 ms). The closing exchange (``closing_ms``, median 6-65 ms) is outside the step's time but
delays the next step's start.

Everything started here (servers, clients, monitors) is a child process whose PID this object
holds (testbed.harness.owned_processes); `stop` ends them by PID, SIGTERM then SIGKILL, and
nothing else. Reading iperf3's output is testbed.harness.iperf_output. ``details`` (also written
to ``<workdir>/kernel_flows.json`` by `collect`) has one row per iperf3 test.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contracts.stats import percentile
from testbed.fabric import client
from testbed.harness.errors import BaselineError
from testbed.harness.iperf_output import (
    INTERVAL_S,
    file_size,
    file_tail,
    kernel_flow_records,
    load_json,
    monitor_subflows,
    receiver_intervals,
    retrans_segs,
    server_anchors,
    spread,
)
from testbed.harness.mptcp_setup import SIGNAL_PORT_BASE, announce_endpoints, start_monitors
from testbed.harness.owned_processes import Child, terminate
from testbed.harness.records import Message, TransportRun
from testbed.scenario import AllreduceWorkload, Flow, Scenario, flows, workload_hosts

PORT_BASE = 5201
LISTEN_TIMEOUT_S = 10.0
BUSY_RETRIES = 50
BUSY_RETRY_S = 0.005

__all__ = ["BaselineError", "KernelBaseline"]


@dataclass
class _Hop:
    """One iperf3 test: flow `index` of the matrix (in `step` for an all-reduce)."""

    index: int
    flow: Flow
    step: int | None
    port: int
    start: float  # monotonic launch of the first attempt
    child: Child | None = None
    attempts: int = 0
    out: Path | None = None


@dataclass
class _Server:
    host: str
    port: int
    child: Child


@dataclass
class _Step:
    start: float
    end: float | None = None
    hops: list[_Hop] = field(default_factory=list)


# --------------------------------------------------------------------------- the baseline


class KernelBaseline:
    """iperf3 (tcp) or mptcpize iperf3 (mptcp) flows in the hosts of a running fabric."""

    def __init__(self, fabric_name: str, sc: Scenario, transport: str, workdir: Path) -> None:
        if transport not in ("tcp", "mptcp"):
            raise BaselineError(f"transport {transport!r} is not a kernel baseline (tcp, mptcp)")
        tools = ["mnexec", "iperf3"] + (["mptcpize"] if transport == "mptcp" else [])
        for tool in tools:
            if shutil.which(tool) is None:
                raise BaselineError(
                    f"{transport} baseline needs {tool}, which is not installed; "
                    "run scripts/setup.sh"
                )
        self.name = fabric_name
        self.sc = sc
        self.transport = transport
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.flows = flows(sc)
        self.allreduce = isinstance(sc.workload, AllreduceWorkload)
        self.nsteps = sc.workload.steps if isinstance(sc.workload, AllreduceWorkload) else 1
        self.fabric = sc.fabric()
        st = client.state(fabric_name)
        self.pids = {h: int(st.nodes[h]["pid"]) for h in workload_hosts(sc)}
        self.hosts = list(self.pids)
        self.details: dict[str, Any] = {"transport": transport}
        self._servers: list[_Server] = []
        self._monitors: dict[str, Child] = {}
        self._hops: list[_Hop] = []
        self._steps: list[_Step] = []
        self._lock = threading.Lock()
        self._abort = threading.Event()
        self._wake = threading.Event()  # set whenever a client exits
        self._finished = threading.Event()
        self._thread: threading.Thread | None = None
        self._deadline = math.inf
        self._retrans0: dict[str, int] = {}

    # ------------------------------------------------------------------ helpers

    def _ns(self, host: str, *cmd: str) -> list[str]:
        return ["mnexec", "-a", str(self.pids[host]), *cmd]

    def _run(self, host: str, *cmd: str) -> str:
        proc = subprocess.run(self._ns(host, *cmd), capture_output=True, text=True, timeout=10)
        if proc.returncode != 0:
            raise BaselineError(
                f"{host}: {' '.join(cmd)} failed: {(proc.stderr or proc.stdout).strip()}"
            )
        return proc.stdout

    def _iperf(self, host: str, *args: str) -> list[str]:
        wrap = ["mptcpize", "run"] if self.transport == "mptcp" else []
        return self._ns(host, *wrap, "iperf3", *args)

    def _ports(self, index: int) -> list[int]:
        if self.allreduce and self.nsteps > 1:
            return [PORT_BASE + 2 * index, PORT_BASE + 2 * index + 1]
        return [PORT_BASE + index]

    # ------------------------------------------------------------------ lifecycle

    def prepare(self) -> None:
        """MPTCP set-up, then one iperf3 server per flow port, returning once all listen."""
        last = max(p for i in range(len(self.flows)) for p in self._ports(i))
        if last >= SIGNAL_PORT_BASE:
            raise BaselineError(f"{len(self.flows)} flows need ports up to {last}: too many")
        if self.transport == "mptcp":
            self._setup_mptcp()
        wanted: dict[str, set[int]] = {}
        for i, f in enumerate(self.flows):
            for port in self._ports(i):
                srv = self._iperf(
                    f.src, "-s", "-p", str(port), "-i", str(INTERVAL_S), "--forceflush"
                )
                child = Child(
                    srv,
                    self.workdir / f"server-{f.src}-{port}.txt",
                    self.workdir / f"server-{f.src}-{port}.err",
                    read_lines=True,
                )
                self._servers.append(_Server(f.src, port, child))
                wanted.setdefault(f.src, set()).add(port)
        self._await_listening(wanted)
        cc = self._run(self.hosts[0], "sysctl", "-n", "net.ipv4.tcp_congestion_control").strip()
        self.details["congestion_control"] = cc
        self._retrans0 = {h: retrans_segs(pid) for h, pid in self.pids.items()}

    def _setup_mptcp(self) -> None:
        """See testbed.harness.mptcp_setup: the servers announce endpoints, the clients count."""
        self.details["mptcp_endpoints"] = announce_endpoints(
            self._run, self._ns, self.fabric, self.hosts, self.flows, self.sc.topology.planes
        )
        start_monitors(self._ns, sorted({f.dst for f in self.flows}), self.workdir, self._monitors)

    def _await_listening(self, wanted: Mapping[str, set[int]]) -> None:
        until = time.monotonic() + LISTEN_TIMEOUT_S
        pending = {h: set(p) for h, p in wanted.items()}
        while pending:
            for srv in self._servers:
                if not srv.child.running:
                    srv.child.done.wait(2)
                    err = (self.workdir / f"server-{srv.host}-{srv.port}.err").read_text().strip()
                    out = " ".join(line for _, line in srv.child.lines[-3:])
                    why = err or out or "no output"
                    raise BaselineError(f"iperf3 server on {srv.host}:{srv.port} exited: {why}")
            for host in list(pending):
                listening = set()
                for line in self._run(host, "ss", "-ltnH").splitlines():
                    cols = line.split()
                    if len(cols) >= 4 and cols[3].rpartition(":")[2].isdigit():
                        listening.add(int(cols[3].rpartition(":")[2]))
                pending[host] -= listening
                if not pending[host]:
                    del pending[host]
            if not pending:
                return
            if time.monotonic() >= until:
                raise BaselineError(
                    f"iperf3 servers not listening after {LISTEN_TIMEOUT_S:g}s: {pending}"
                )
            time.sleep(0.02)

    def go(self) -> float:
        """Start the workload: all flows at once, or the all-reduce step loop in a thread."""
        t0 = time.monotonic()
        self._t0 = t0
        self._deadline = t0 + self.sc.duration_s
        if self.allreduce:
            self._thread = threading.Thread(target=self._step_loop, name="allreduce", daemon=True)
            self._thread.start()
        else:
            step = _Step(t0)
            step.hops = self._launch_all(None)
            self._steps.append(step)
            self._thread = threading.Thread(target=self._watch, args=(step,), daemon=True)
            self._thread.start()
        return t0

    def _launch_all(self, step: int | None) -> list[_Hop]:
        """One client per flow, started from parallel threads so they start close together."""
        hops: list[_Hop | None] = [None] * len(self.flows)

        def one(i: int) -> None:
            hops[i] = self._launch(i, step)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(self.flows))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return [h for h in hops if h is not None]

    def _launch(self, index: int, step: int | None) -> _Hop:
        f = self.flows[index]
        ports = self._ports(index)
        port = ports[(step or 0) % len(ports)]
        hop = _Hop(index, f, step, port, time.monotonic())
        with self._lock:
            self._hops.append(hop)
        self._start_attempt(hop)
        return hop

    def _start_attempt(self, hop: _Hop) -> None:
        hop.attempts += 1
        tag = f"{hop.index}" if hop.step is None else f"s{hop.step}-{hop.index}"
        hop.out = self.workdir / f"client-{tag}-a{hop.attempts}.json"
        argv = self._iperf(
            hop.flow.dst,
            "-c", self.fabric.host_ip(hop.flow.src, 1),
            "-p", str(hop.port),
            "-R",
            "-n", str(hop.flow.bytes),
            "-J",
            "-i", str(INTERVAL_S),
            "--forceflush",
        )  # fmt: skip
        if self._abort.is_set():
            return
        child = Child(argv, hop.out, hop.out.with_suffix(".err"), on_exit=self._wake.set)
        # `stop` and `wait` set the abort flag, then take the lock to list the children: a child
        # registered before that is on their list, one registered after sees the flag.
        with self._lock:
            aborted = self._abort.is_set()
            hop.child = child
        if aborted:
            terminate([child])

    def _run_step(self, step: _Step) -> bool:
        """Wait for every hop of `step`, retrying a hop whose server turned it away as busy.
        True iff every client exited successfully (i.e. received all its bytes) in time."""
        checked: set[int] = set()
        while True:
            self._wake.clear()
            for hop in step.hops:
                c = hop.child
                if c is None or not c.done.is_set() or id(c) in checked:
                    continue
                checked.add(id(c))
                if c.proc.returncode != 0 and hop.attempts < BUSY_RETRIES and self._busy(hop):
                    time.sleep(BUSY_RETRY_S)
                    self._start_attempt(hop)
            pending = [h for h in step.hops if h.child is not None and not h.child.done.is_set()]
            if not pending:
                break
            if self._abort.is_set() or time.monotonic() >= self._deadline:
                return False
            self._wake.wait(min(0.5, max(0.0, self._deadline - time.monotonic())))
        ok = all(h.child is not None and h.child.proc.returncode == 0 for h in step.hops)
        if ok:
            step.end = max(h.child.ended for h in step.hops if h.child and h.child.ended)
        return ok

    def _busy(self, hop: _Hop) -> bool:
        doc = load_json(hop.out) if hop.out else None
        return doc is not None and "busy" in str(doc.get("error", "")) and not self._abort.is_set()

    def _watch(self, step: _Step) -> None:
        self._run_step(step)
        self._finished.set()

    def _step_loop(self) -> None:
        try:
            for s in range(self.nsteps):
                if self._abort.is_set() or time.monotonic() >= self._deadline:
                    break
                step = _Step(time.monotonic())
                with self._lock:
                    self._steps.append(step)
                step.hops = self._launch_all(s)
                if not self._run_step(step):
                    break
        finally:
            self._finished.set()

    def completed(self) -> bool:
        return len(self._steps) == self.nsteps and all(s.end is not None for s in self._steps)

    def wait(self, deadline: float) -> bool:
        """Block until the workload is done or `deadline`; kill what still runs then."""
        self._deadline = deadline
        self._finished.wait(max(0.0, deadline - time.monotonic()))
        if not self._finished.is_set():
            self._abort.set()
            with self._lock:
                live = [h.child for h in self._hops if h.child is not None]
            terminate(live)  # SIGTERM: iperf3 still writes its JSON, intervals so far included
            if self._thread is not None:
                self._thread.join(5)
        return self.completed()

    # ------------------------------------------------------------------ results

    def collect(self, t0: float, end_s: float) -> TransportRun:
        """Deliveries, messages, steps and retransmissions from the iperf3 outputs."""
        terminate(list(self._monitors.values()))
        subflows: dict[tuple[str, int], int] = {}
        for host in self._monitors:
            text = (self.workdir / f"mptcp-monitor-{host}.txt").read_text()
            for port, n in monitor_subflows(text.splitlines()).items():
                subflows[(host, port)] = n
        anchors: dict[tuple[str, int], float] = {}
        for srv in self._servers:
            for port, t in server_anchors(list(srv.child.lines)).items():
                anchors[(srv.host, port)] = t
        deliveries: list[tuple[float, int]] = []
        by_flow: dict[tuple[str, str], list[tuple[float, float]]] = {}
        messages: list[Message] = []
        done_by_hop: dict[int, float | None] = {}
        rows = []
        json_retrans = 0
        with self._lock:
            hops = list(self._hops)
        for hop in hops:
            doc = load_json(hop.out) if hop.out else None
            row: dict[str, Any] = {
                "flow": hop.index,
                "step": hop.step,
                "src": hop.flow.src,
                "dst": hop.flow.dst,
                "bytes": hop.flow.bytes,
                "port": hop.port,
                "attempts": hop.attempts,
                "launched_s": round(hop.start - t0, 6),
                # How the last attempt ended (negative: killed by that signal) and what it left:
                # a flow with nothing received says why by these.
                "exit_code": hop.child.proc.returncode if hop.child else None,
                "json_bytes": file_size(hop.out),
                "stderr": file_tail(hop.out.with_suffix(".err")) if hop.out else "",
            }
            done = None
            if doc is not None and doc.get("intervals"):
                conn = (doc.get("start", {}).get("connected") or [{}])[0]
                data_port = conn.get("local_port")
                launched = hop.child.started if hop.child else hop.start
                ended = hop.child.ended if hop.child and hop.child.ended else time.monotonic()
                received = doc.get("end", {}).get("sum_received", {})
                duration = float(received.get("end") or receiver_intervals(doc)[-1][1])
                # Upper bounds of the test's start: the server's lines, and the exit minus the
                # receiver's duration (late by the closing exchange); the launch is a lower bound.
                by_server = anchors.get((hop.flow.src, data_port), math.inf)
                by_exit = ended - duration
                how = "server" if by_server <= by_exit else "exit"
                anchor = max(min(by_server, by_exit), launched)
                samples, done = spread(receiver_intervals(doc), anchor - t0, hop.flow.bytes)
                clipped = [(min(max(t, 0.0), end_s), n) for t, n in samples]
                deliveries += clipped
                by_flow.setdefault((hop.flow.src, hop.flow.dst), []).extend(clipped)
                sent = doc.get("end", {}).get("sum_sent", {})
                json_retrans += int(sent.get("retransmits", 0) or 0)
                row.update(
                    anchor=how,
                    test_start_s=round(anchor - t0, 6),
                    startup_ms=round((anchor - launched) * 1e3, 2),
                    closing_ms=round((ended - anchor - duration) * 1e3, 2),
                    exited_s=round(ended - t0, 6),
                    received=sum(n for _, n in samples),
                    done_s=None if done is None else round(done, 6),
                    error=doc.get("error"),
                    json_retransmits=sent.get("retransmits"),
                    data_port=data_port,
                    congestion=doc.get("end", {}).get("receiver_tcp_congestion"),
                )
                if self.transport == "mptcp":
                    row["subflows"] = subflows.get((hop.flow.dst, data_port))
            else:
                row.update(received=0, done_s=None, error=(doc or {}).get("error", "no output"))
            rows.append(row)
            messages.append(Message(hop.start - t0, hop.flow.bytes, done))
            done_by_hop[id(hop)] = done
        retrans = 0
        for host, pid in self.pids.items():
            try:
                retrans += retrans_segs(pid) - self._retrans0.get(host, 0)
            except (OSError, ValueError, IndexError):
                pass
        # A step ends when the last of its hops' receivers has all its bytes (not when the last
        # client exits: iperf3's closing result exchange adds 5-65 ms that is no part of TCP).
        steps: list[tuple[float, float | None]] = []
        for s in self._steps:
            ends = [done_by_hop.get(id(h)) for h in s.hops]
            finished = len(ends) == len(self.flows) and all(e is not None for e in ends)
            steps.append((s.start - t0, max(ends) if finished else None))  # type: ignore[type-var]
        exits = [(s.start - t0, None if s.end is None else s.end - t0) for s in self._steps]
        startup = [r["startup_ms"] for r in rows if "startup_ms" in r]
        self.details.update(
            flows=rows,
            steps=steps if self.allreduce else [],
            steps_by_exit=exits if self.allreduce else [],
            retransmits_netns=retrans,
            retransmits_json=json_retrans,
            startup_ms={
                "p50": percentile(startup, 50),  # contracts.stats: nearest rank
                "max": max(startup) if startup else None,
            },
        )
        if self.transport == "mptcp":
            counts = [r.get("subflows") for r in rows if r.get("subflows")]
            self.details["subflows"] = {
                "min": min(counts, default=0),
                "max": max(counts, default=0),
            }
        (self.workdir / "kernel_flows.json").write_text(
            json.dumps(self.details, indent=1, default=str)
        )
        return TransportRun(
            transport=self.transport,
            deliveries=deliveries,
            messages=messages,
            end_s=end_s,
            retransmits={"tcp": retrans},
            trims=0,
            steps=steps if self.allreduce else (),
            flows=kernel_flow_records(rows),
            flow_deliveries={k: sorted(v) for k, v in sorted(by_flow.items())},
        )

    def stop(self) -> None:
        """End every process this object started, by PID (SIGTERM, then SIGKILL). Idempotent."""
        self._abort.set()
        with self._lock:
            children = [h.child for h in self._hops if h.child is not None]
        children += [s.child for s in self._servers] + list(self._monitors.values())
        terminate(children)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)

    def pids_started(self) -> list[int]:
        """PIDs of every process this object started (for checks that none is left)."""
        with self._lock:
            out = [h.child.pid for h in self._hops if h.child is not None]
        return out + [s.child.pid for s in self._servers] + [m.pid for m in self._monitors.values()]

"""Endpoint processes: one ``python -m endpoint`` per host, and the coordinator that drives them.

A job runs in four moves that every caller shares (the runner, the benches, the labs): start
the processes (`EndpointProcs` / `FabricEndpoints`), `start` a job on each over its control
socket, `go` at once on all of them, then `wait` and read each host's metrics file. Processes
are started through a launcher prefix that execs in place (``mnexec -a PID`` into a fabric
host, ``ip netns exec`` into a bare namespace), so the PID we hold is the endpoint's own and we
never kill anything by name. Each dies with its parent (PR_SET_PDEATHSIG: when the thread
that started it ends, so start them from the main thread, as every caller here does), so a
crashed caller leaves no endpoint behind. An endpoint in a fabric's host also carries
TESTBED_FABRIC=<name>, as every process of a fabric does: the fabric's cleanup finds it by that.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from contracts.runtime import PACKAGE_ROOT, child_env
from endpoint.control import Coordinator
from endpoint.metrics import BIN_S, read_records
from testbed.fabric import client
from testbed.harness.transport_timing import transport_timing
from topologies.timing import time_scale

PR_SET_PDEATHSIG = 1


class HarnessError(RuntimeError):
    """An endpoint process could not be started or driven; the message names the host."""


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


ENDPOINT_LAYOUT_ENV = "TESTBED_ENDPOINT_PROCESSES"
PER_HOST = "per-host"
SHARED = "shared"
ENDPOINT_LAYOUTS = (PER_HOST, SHARED, "shared:K")


def endpoint_layout(value: str | None = None) -> str:
    """`value`, else $TESTBED_ENDPOINT_PROCESSES, else per-host; ValueError names a bad one.

    `shared`: one process serves every host's endpoint (endpoint/shared.py says why);
    `shared:K`: K processes, each serving a contiguous share of the hosts (one per core: a
    single process for 16 hosts saturated one core at N = 2,500 while the other idled)."""
    source = "endpoint layout" if value is not None else ENDPOINT_LAYOUT_ENV
    mode = value if value is not None else os.environ.get(ENDPOINT_LAYOUT_ENV) or PER_HOST
    if mode in (PER_HOST, SHARED) or _shared_count(mode) is not None:
        return mode
    raise ValueError(f"{source}: {mode!r} is not one of {', '.join(ENDPOINT_LAYOUTS)} (K >= 1)")


def _shared_count(mode: str) -> int | None:
    head, _, k = mode.partition(":")
    if head != SHARED or not k.isdigit() or int(k) < 1:
        return None
    return int(k)


def host_groups(hosts: list[str], layout: str) -> list[list[str]]:
    """Which hosts each endpoint process serves under `layout`: one each (per-host), all in
    one (shared), or K contiguous groups of sizes differing by at most one (shared:K)."""
    if layout == PER_HOST:
        return [[h] for h in hosts]
    k = 1 if layout == SHARED else _shared_count(layout)
    if k is None:
        raise ValueError(f"endpoint layout: {layout!r} is not one of {', '.join(ENDPOINT_LAYOUTS)}")
    k = min(k, len(hosts)) or 1
    size, extra = divmod(len(hosts), k)
    out, i = [], 0
    for g in range(k):
        n = size + (1 if g < extra else 0)
        out.append(hosts[i : i + n])
        i += n
    return [g for g in out if g]


class EndpointProcs:
    """Endpoint processes started by this code (each through a launcher prefix, e.g. mnexec or
    ip netns exec, that execs in place so the PID is the endpoint's), and their coordinator.

    `netns` (host -> /proc/PID/ns/net), when given, makes one process serve every host of
    `launch` (started with the first host's prefix; endpoint.shared), or each of `groups` (lists
    of hosts, `host_groups`) if given: `procs` then maps every host to its process."""

    def __init__(
        self,
        config: dict,
        launch: dict[str, list[str]],
        workdir: str | None = None,
        env: dict[str, str] | None = None,
        netns: dict[str, str] | None = None,
        groups: list[list[str]] | None = None,
    ):
        self.config = config
        self.dir = Path(workdir or tempfile.mkdtemp(prefix="tbe-ep-"))
        self._own_dir = workdir is None
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: list = []
        self._log_host: dict[str, str] = {}  # host -> the host whose log its process writes
        self.coordinator: Coordinator | None = None
        cfg = json.dumps(config)
        if netns is None:
            groups = [[h] for h in launch]
        elif groups is None:
            groups = [list(launch)]
        try:
            for hosts in groups:
                err = open(self.dir / f"{hosts[0]}.log", "wb")  # noqa: SIM115 - closed in stop()
                self.logs.append(err)
                args = []
                for h in hosts:
                    args += ["--host", h, "--control", str(self.sock(h))]
                    args += ["--metrics", str(self.metrics_path(h))]
                    if netns is not None:
                        args += ["--netns", netns[h]]
                proc = subprocess.Popen(
                    [*launch[hosts[0]], sys.executable, "-m", "endpoint", "--config", cfg, *args],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=err,
                    env=child_env(env),
                    cwd=PACKAGE_ROOT,
                    preexec_fn=_die_with_parent,
                )
                for h in hosts:
                    self.procs[h] = proc
                    self._log_host[h] = hosts[0]
            for host, p in self.procs.items():
                line = p.stdout.readline().decode(errors="replace")
                if not line.startswith("ready"):
                    raise HarnessError(f"endpoint {host} did not start: {self.log(host)}")
            self.coordinator = Coordinator({h: str(self.sock(h)) for h in self.procs})
        except BaseException:
            self.stop()
            raise

    def sock(self, host: str) -> Path:
        return self.dir / f"{host}.sock"

    def metrics_path(self, host: str) -> Path:
        return self.dir / f"{host}.jsonl"

    def log(self, host: str) -> str:
        try:
            name = self._log_host.get(host, host)
            return (self.dir / f"{name}.log").read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def records(self, host: str) -> list[dict]:
        return read_records(self.metrics_path(host))

    def stop(self) -> dict[str, int | None]:
        """Clean stop over the control socket, then SIGTERM/SIGKILL by PID what is left."""
        if self.coordinator is not None:
            self.coordinator.stop()
            self.coordinator = None
        codes = {}
        for host, p in self.procs.items():
            try:
                codes[host] = p.wait(5)
            except subprocess.TimeoutExpired:
                p.send_signal(signal.SIGTERM)
                try:
                    codes[host] = p.wait(3)
                except subprocess.TimeoutExpired:
                    p.kill()
                    codes[host] = p.wait()
            if p.stdout:
                p.stdout.close()
        for f in self.logs:
            f.close()
        self.logs.clear()
        return codes

    def cleanup(self) -> None:
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)


def fabric_endpoint_config(
    fab, hosts: list[str] | None = None, time_dilation: float = 1.0, **extra
) -> dict:
    """The endpoint ``--config`` of a fabric description (``topologies.Fabric``) running at
    `time_dilation`.

    It carries the fabric's DSCPs into every job's transport (``extra["transport"]`` may add
    other TransportConfig defaults): the switches trim and prioritise by the values in
    ``fab.params``, so the endpoints must mark their packets with the same ones. And its MTU:
    the endpoints size their data packets to fill the NICs' MTU (``max_payload``), no more.
    The transport's time constants and the metrics bins follow the fabric's time scale
    (testbed.harness.transport_timing), and the process runs on the fabric's virtual clock.
    """
    planes = sorted({i.plane for i in fab.interfaces[fab.hosts()[0]]})
    hosts = hosts or fab.hosts()
    params = fab.params
    dscps = {
        "trimmable_dscp": params.trimmable_dscp,
        "trimmed_dscp": params.trimmed_dscp,
        "control_dscp": params.control_dscp,
    }
    transport = {
        **transport_timing(params, time_dilation),
        **dscps,
        **extra.pop("transport", {}),
    }
    return {
        "hosts": {h: [fab.host_ip(h, p) for p in planes] for h in hosts},
        "bin_s": BIN_S * time_scale(params),
        "time_dilation": time_dilation,
        "mtu": params.mtu,
        **extra,
        "transport": transport,
    }


class FabricEndpoints(EndpointProcs):
    """The endpoints of the given hosts of a running fabric (started with mnexec): a process
    in each host, or with `layout` shared (default: $TESTBED_ENDPOINT_PROCESSES, else
    per-host) one process for them all, or shared:K K processes."""

    def __init__(
        self,
        name: str,
        fab,
        hosts: list[str] | None = None,
        workdir: str | None = None,
        layout: str | None = None,
        **config_extra,
    ) -> None:
        st = client.state(name)
        hosts = hosts or fab.hosts()
        launch = {h: ["mnexec", "-a", str(st.nodes[h]["pid"])] for h in hosts}
        config_extra.setdefault("time_dilation", st.time_dilation)  # the fabric's clock
        self.time_dilation = config_extra["time_dilation"]
        self.layout = endpoint_layout(layout)
        netns = (
            {h: f"/proc/{st.nodes[h]['pid']}/ns/net" for h in hosts}
            if self.layout != PER_HOST
            else None
        )
        super().__init__(
            fabric_endpoint_config(fab, fab.hosts(), **config_extra),
            launch,
            workdir=workdir,
            env={"TESTBED_FABRIC": name},
            netns=netns,
            groups=host_groups(list(hosts), self.layout) if netns is not None else None,
        )


def run_job(
    eps: EndpointProcs, job: int, request: dict, timeline=(), timeout: float = 60.0
) -> dict:
    """start on every endpoint, go on every endpoint, apply ``timeline`` ((at_s, fn) pairs,
    seconds after the first go), then wait for every endpoint to finish the job."""
    co = eps.coordinator
    co.start(job, request)
    go = co.go(job)
    t0 = min(go.values())
    applied = []
    for at, fn in sorted(timeline, key=lambda e: e[0]):
        delay = t0 + at - time.monotonic()
        if delay > 0:
            time.sleep(delay)  # a scenario timeline is wall-clock by definition
        before = time.monotonic()
        fn()
        applied.append((before, time.monotonic()))
    status = co.wait(job, timeout)
    return {"go": go, "t0": t0, "status": status, "applied": applied}

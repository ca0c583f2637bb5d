"""Builds a topology description into namespaces, veths and switch processes, with Mininet.

Mininet is only the builder: `Mininet(topo=LeafSpineTopo(...), controller=None)` where the
Topo (testbed/fabric/topo.py) is generated from the same description every other part reads.
Its switch nodes are bare namespaces; what makes one a switch is the `python -m switch` process
this module starts inside it. Nodes configure themselves through netlink (addresses, routes,
neighbours, offloads, NIC rate). Everything created is recorded in the fabric's state file as
it is created, so a teardown after any failure removes exactly that, and nothing else (never
`mn -c`, which kills by name and deletes every `*-ethN` link on the machine).

A build can be cancelled (`cancel`, the supervisor's stop event: a signal, its owner gone): it
stops before the next node, phase or switch and raises `BuildCancelled`; `stop()` then removes
what exists. Node shells and switch processes die with the supervisor (PR_SET_PDEATHSIG), and
`stop()` also ends whatever else runs in the fabric's namespaces, so nothing holds one open.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from contracts.runtime import child_env
from switch.config import switch_config
from switch.control import ControlError, request
from testbed.fabric.cleanup import kill_pids, netns_of, pids_in_netns
from testbed.fabric.netlink import NamespaceError, node_netlink
from testbed.fabric.state import FabricState, ProcessRecord, process_start_ticks, record
from testbed.fabric.switch_layout import SHARED, switch_layout
from topologies import Fabric

SWITCH_START_TIMEOUT_S = 15.0
PR_SET_PDEATHSIG = 1


class BuildError(RuntimeError):
    """The fabric could not be built; the message says which node or link."""


class BuildCancelled(BuildError):
    """The build was asked to stop (`cancel` set) before it finished."""


def _pdeathsig(sig: int):
    """A Popen preexec_fn: the child gets `sig` when the thread that started it ends. Every
    node shell and switch is started by the supervisor's main thread, which ends only with
    the supervisor, so they go with it even if it is killed outright."""

    def set_it() -> None:
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig)

    return set_it


class _ShellDiesWithSupervisor:
    """Mixin for Mininet node classes: the node's shell (the process holding its namespaces)
    gets SIGKILL when the supervisor dies. Only the shell: `node.popen` children are not
    touched (self.shell is set by then)."""

    def _popen(self, cmd, **params):
        if getattr(self, "shell", None) is None:
            params.setdefault("preexec_fn", _pdeathsig(signal.SIGKILL))
        return super()._popen(cmd, **params)


def _mininet():
    # Lazy on purpose (Mininet, and `topo` which subclasses its classes): `testbed --help`,
    # validation, the API's pure parts and pure tests never need Mininet, and only the
    # supervisor process builds a fabric.
    from mininet.log import setLogLevel
    from mininet.net import Mininet

    from testbed.fabric import topo

    setLogLevel("error")
    return Mininet, topo


REACHABILITY_HOPS_PER_S = 5_000.0
"""Packet-hops per real second the reachability check counts on: below any calibrated budget
here, so the check's timeout covers a slow machine."""


def reachability_timeout(pings: int, delay_us: float, time_dilation: float) -> float:
    """Seconds a reachability ping may take: 2 s, plus a 6-hop round trip of propagation at
    the fabric's dilation (two link delays per hop), plus every ping and its reply over six
    hops at REACHABILITY_HOPS_PER_S (pure)."""
    rtt = 12 * delay_us * 1e-6 * max(1.0, time_dilation)
    return 2.0 + rtt + pings * 2 * 6 / REACHABILITY_HOPS_PER_S


class FabricBuilder:
    """Owns the Mininet object of one fabric for as long as the fabric is up."""

    def __init__(
        self,
        fabric: Fabric,
        state: FabricState,
        directory: Path,
        seed: int = 1,
        time_dilation: float = 1.0,
        cancel: threading.Event | None = None,
    ) -> None:
        self.fabric = fabric
        self.cancel = cancel or threading.Event()
        self.state = state
        self.dir = directory
        self.seed = seed
        self.time_dilation = time_dilation
        self.net = None
        self.switch_procs: dict[str, subprocess.Popen] = {}
        self.switch_logs: dict[str, object] = {}
        self.switch_log_names: dict[str, str] = {}  # switch -> its process's log (shared or own)

    # ----- build ------------------------------------------------------------------------------

    def checkpoint(self) -> None:
        """Raise BuildCancelled if the build was asked to stop."""
        if self.cancel.is_set():
            raise BuildCancelled("stopped while building")

    def build(self) -> None:
        Mininet, topo = _mininet()
        fab = self.fabric
        self.net = Mininet(
            topo=topo.LeafSpineTopo(
                fabric=fab,
                time_dilation=self.time_dilation,
                host_cls=self._recorded(topo.FabricHost),
                switch_cls=self._recorded(topo.SwitchNamespace),
            ),
            controller=None,
            build=False,
            cleanup=False,
        )
        try:
            self.net.build()  # nodes, links, then each host configures itself
            self.checkpoint()
            self.net.start()  # each switch namespace configures its ports
            self.checkpoint()
        except NamespaceError as exc:
            raise BuildError(f"configuring a node failed: {exc}") from exc
        self.state.nodes = {
            n: self.state.nodes[n] | {"interfaces": [self._intf_info(i) for i in fab.interfaces[n]]}
            for n in fab.nodes
        }
        self.state.save(self.dir)

    def _recorded(self, cls):
        """A node factory for Mininet that records each node's shell as soon as it exists (and
        stops the build before the next node when it is cancelled)."""
        cls = type(cls.__name__, (_ShellDiesWithSupervisor, cls), {})

        def make(name: str, **params):
            self.checkpoint()
            node = cls(name, **params)
            spec = self.fabric.nodes[name]
            self.state.processes.append(record("node-shell", name, node.pid))
            self.state.nodes[name] = {
                "kind": spec.kind,
                "plane": spec.plane,
                "pid": node.pid,
                "router_ip": spec.router_ip,
            }
            self.state.save(self.dir)
            return node

        return make

    @staticmethod
    def _intf_info(i) -> dict:
        return {
            "name": i.name,
            "mac": i.mac,
            "ip": i.ip,
            "peer": i.peer_node,
            "peer_intf": i.peer_name,
            "plane": i.plane,
        }

    def node(self, name: str):
        return self.net.nameToNode[name]

    def set_host_rate(self, host: str, dev: str, mbps: float) -> None:
        """A host NIC's (virtual) rate: its kernel token bucket runs at mbps / dilation."""
        try:
            with node_netlink(self.node(host).pid, host) as nl:
                nl.set_rate(dev, mbps / self.time_dilation, self.fabric.params.mtu)
        except NamespaceError as exc:
            raise BuildError(f"setting the rate of {dev} failed: {exc}") from exc

    def host_nic_counters(self, host: str) -> dict[str, dict]:
        """Per NIC: packets sent and packets the host's own qdisc dropped (kernel side, not the
        emulated network: a sender that overruns its NIC)."""
        out = {}
        with node_netlink(self.node(host).pid, host) as nl:
            for intf in self.fabric.interfaces[host]:
                try:
                    out[intf.name] = nl.qdisc_counters(intf.name)
                except NamespaceError as exc:
                    out[intf.name] = {"error": str(exc)}
        return out

    # ----- switches ---------------------------------------------------------------------------

    def start_switches(self) -> None:
        names = self.fabric.switches()
        try:
            layout = switch_layout()
        except ValueError as exc:
            raise BuildError(str(exc)) from None
        if layout == SHARED:
            self._start_switch_process(names)
        else:
            for name in names:
                self.checkpoint()
                self._start_switch_process([name])
        deadline = time.monotonic() + SWITCH_START_TIMEOUT_S
        pending = set(self.fabric.switches())
        while pending:
            self.checkpoint()
            for name in sorted(pending):
                proc = self.switch_procs[name]
                if proc.poll() is not None:
                    raise BuildError(
                        f"switch {name} exited with {proc.returncode}: {self.switch_log_tail(name)}"
                    )
                try:
                    request(self.state.switch_sockets[name], {"op": "ping"}, timeout=0.5)
                    pending.discard(name)
                except ControlError:
                    pass
            if pending and time.monotonic() > deadline:
                raise BuildError(
                    f"switches did not start in {SWITCH_START_TIMEOUT_S:g}s: {sorted(pending)}"
                )
            if pending:
                time.sleep(0.05)

    def _start_switch_process(self, names: list[str]) -> None:
        """One switch process for the switch nodes `names`; with one name it runs inside the
        node's namespace, with several it opens each node's ports in that node's namespace."""
        args: list[str] = []
        sockets = {}
        for name in names:
            cfg = switch_config(self.fabric, name, seed=self.seed, time_dilation=self.time_dilation)
            cfg_path = self.dir / "switches" / f"{name}.json"
            cfg_path.parent.mkdir(parents=True, exist_ok=True)
            cfg_path.write_text(cfg.to_json())
            sockets[name] = str(self.dir / "switches" / f"{name}.sock")
            args += ["--config", str(cfg_path), "--control", sockets[name]]
            if len(names) > 1:
                args += ["--netns", f"/proc/{self.node(name).pid}/ns/net"]
        log_name = names[0] if len(names) == 1 else "switches"
        log = open(self.dir / "switches" / f"{log_name}.log", "ab")  # noqa: SIM115 - kept for the process
        cmd = [switch_python(), "-m", "switch", *args, "--die-with-parent"]
        if len(names) == 1:
            cmd = ["mnexec", "-a", str(self.node(names[0]).pid), *cmd]
        env = child_env()
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            preexec_fn=_pdeathsig(signal.SIGTERM),  # a clean stop: its capture is flushed
        )
        for name in names:
            self.switch_logs[name] = log
            self.switch_log_names[name] = log_name
            self.switch_procs[name] = proc
            self.state.switch_sockets[name] = sockets[name]
            self.state.processes.append(
                ProcessRecord("switch", name, proc.pid, _ticks_or_zero(proc.pid))
            )
        self.state.save(self.dir)

    def switch_log_tail(self, name: str, n: int = 400) -> str:
        try:
            log = self.dir / "switches" / f"{self.switch_log_names.get(name, name)}.log"
            return log.read_text(errors="replace")[-n:].strip()
        except OSError:
            return ""

    # ----- checks -----------------------------------------------------------------------------

    def check_reachability(self, timeout_s: float | None = None) -> list[str]:
        """Ping every other host on every plane from every host; returns the failures.

        The pings' timeout (default `reachability_timeout`) grows with the time dilation and
        the fabric: at N = 100,000 a 6-hop round trip of 1 µs links takes 1.2 real seconds,
        and 64 hosts' 4,032 pings are ~50,000 packet-hops the emulator carries at its pace."""
        self.checkpoint()
        fab = self.fabric
        targets = [
            (h, fab.host_ip(h, k)) for h in fab.hosts() for k in range(1, fab.params.planes + 1)
        ]
        if timeout_s is None:
            timeout_s = reachability_timeout(
                len(fab.hosts()) * (len(targets) - 1), fab.params.delay_us, self.time_dilation
            )
        failures: list[str] = []
        procs = []
        for src in fab.hosts():
            dsts = [addr for h, addr in targets if h != src]
            script = " ".join(
                f"(ping -n -q -c1 -W{timeout_s:g} {addr} >/dev/null 2>&1 || echo {addr}) &"
                for addr in dsts
            )
            procs.append(
                (src, self.node(src).popen(["sh", "-c", script + " wait"], stdout=subprocess.PIPE))
            )
        for src, proc in procs:
            out, _ = proc.communicate(timeout=timeout_s * 4 + 5)
            failures += [f"{src} -> {addr}" for addr in out.decode().split()]
        return failures

    # ----- teardown ---------------------------------------------------------------------------

    def stop(self) -> None:
        """End the switches, whatever else runs in the fabric's namespaces, then the node
        shells (and with them the namespaces and veths); also after a cancelled build."""
        shells = {p.pid for p in self.state.processes if p.role == "node-shell" and p.alive()}
        me = netns_of(os.getpid())
        inodes = {i for i in map(netns_of, shells) if i is not None and i != me}
        procs = list({id(p): p for p in self.switch_procs.values()}.values())
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 3.0
        for proc in procs:
            try:
                proc.wait(max(0.05, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for log in {id(f): f for f in self.switch_logs.values()}.values():
            log.close()
        # Endpoints, kernel baselines, captures: whoever started them, they hold namespaces.
        others = pids_in_netns(inodes, exclude=shells)
        if others:
            kill_pids(others, 2.0)
        if self.net is not None:
            for node in list(self.net.hosts) + list(self.net.switches):
                try:
                    node.terminate()
                except Exception:  # noqa: BLE001 - keep tearing down the rest
                    pass
            self.net = None
        # Shells of a build cut short (created, not yet in the Mininet object) and anything
        # recorded that is still there.
        left = [
            p.pid
            for p in self.state.processes
            if p.role in ("node-shell", "switch") and p.pid != os.getpid() and p.alive()
        ]
        if left:
            kill_pids(left, 1.0)


def switch_python() -> str:
    """The interpreter for switch processes: TESTBED_SWITCH_PYTHON (e.g. /usr/bin/pypy3; the
    switch runs on PyPy 3.9 too) or this one."""
    return os.environ.get("TESTBED_SWITCH_PYTHON", sys.executable)


def _ticks_or_zero(pid: int) -> int:
    return process_start_ticks(pid) or 0

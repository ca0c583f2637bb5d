"""One object owns a fabric's life: `Fabric`.

The command line, the scenario runner, the benches, the labs and users' scripts all build,
drive and remove fabrics through this class, so there is one way up and one way down::

    from testbed import Fabric, LeafSpine
    with Fabric(LeafSpine(spines=2, leaves=2, hosts_per_leaf=2, link_mbps=100)) as f:
        f.exec("h1", "ping", "-c1", "10.1.2.1")
        f.ctl("blackhole", "spine1", "leaf2")
        print(f.counters("leaf2"))

Why a session and a detached supervisor: the fabric's namespaces, veths and switch processes
belong to a supervisor process (`testbed.fabric.supervisor`) that outlives whoever built them,
so ``testbed up`` can return and ``testbed exec`` / ``ctl`` / ``down`` reach the same fabric
later by name. `Fabric` is the handle on that supervisor. Used as a context manager it removes
the fabric when the block ends -- also after an exception, Ctrl-C, SIGTERM or SIGHUP, and if
this process is killed outright its supervisor notices and removes it; `up()` alone leaves it
running, and `Fabric.attach(name)` picks up a fabric that is already up.
"""

from __future__ import annotations

import contextlib
import subprocess
import uuid
from collections.abc import Sequence
from types import TracebackType
from typing import Any

import topologies
from contracts.clock import check_dilation
from testbed.fabric import client, failures, interrupts
from testbed.fabric.cleanup import clean_fabric
from testbed.fabric.lifecycle import FabricError, bring_up, need_root, tear_down
from testbed.fabric.state import DEFAULT_NAME, FabricState, check_name
from topologies import TopologyParams


def new_name(prefix: str = "f") -> str:
    """A fresh fabric name (state and cleanup are per name, so concurrent runs never meet)."""
    return prefix + uuid.uuid4().hex[:6]


class Fabric:
    """A leaf-spine fabric emulated on this machine: built by `up()`, removed by `down()`.

    `topology`: the fabric's parameters (`LeafSpine`, i.e. `topologies.TopologyParams`).
    `name`: the fabric's name (what `testbed --name` takes); default a fresh unique one.
    `seed`: ECMP hash seeds derive from it. `switch_processes`: "per-node" or "shared".
    `time_dilation`: N real seconds per virtual second (contracts.clock): the topology's rates
    and delays are the datacenter's, served N times slower.
    """

    def __init__(
        self,
        topology: TopologyParams | None = None,
        *,
        name: str | None = None,
        seed: int = 1,
        switch_processes: str | None = None,
        time_dilation: float = 1.0,
    ) -> None:
        self.params = topology if topology is not None else TopologyParams()
        self.params.validate()  # a bad parameter fails here, before anything is created
        try:
            self.time_dilation = check_dilation(time_dilation)
        except ValueError as exc:
            raise FabricError(str(exc)) from None
        self.name = check_name(name) if name is not None else new_name()
        self.seed = seed
        self.switch_processes = switch_processes
        self.description: topologies.Fabric = topologies.leaf_spine(self.params)
        self._up = False
        self._old_handlers: dict[int, Any] = {}

    # ----- life ---------------------------------------------------------------------------

    @classmethod
    def attach(cls, name: str = DEFAULT_NAME) -> Fabric:
        """The handle on fabric `name`, already up (built by `testbed up` or another process)."""
        st = client.state(name)
        fab = cls(
            TopologyParams(**st.params), name=name, seed=st.seed, time_dilation=st.time_dilation
        )
        fab._up = True
        return fab

    def up(self, *, owned: bool | None = None) -> Fabric:
        """Build the fabric and return once every switch forwards; on failure or interrupt
        nothing of it is left. It stays up (detached from this process) until `down()`; with
        `owned=True` only while this process lives: its supervisor removes it when this
        process is gone, however it ended (default: `lifecycle.own_fabrics`, which the command
        line sets for everything but `testbed up`)."""
        bring_up(
            self.name,
            self.params,
            self.seed,
            self.switch_processes,
            self.time_dilation,
            owned=owned,
        )
        self._up = True
        return self

    def down(self) -> None:
        """Remove exactly what `up()` built. Raises FabricError naming anything left behind."""
        need_root("testbed down")
        self._up = False
        tear_down(self.name)

    @property
    def is_up(self) -> bool:
        return self._up

    def __enter__(self) -> Fabric:
        # SIGTERM and SIGHUP (a `kill`, a CI timeout, a closed terminal) become an exception
        # in the main thread, so the block unwinds and the fabric goes with it.
        self._old_handlers = interrupts.catch()
        try:
            return self.up(owned=True)
        except BaseException:
            self._release_signals()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if exc_type is None:
                self.down()
            else:
                # The block failed: remove the fabric, but let the block's own error propagate.
                with interrupts.deferred():
                    with contextlib.suppress(Exception):
                        tear_down(self.name)
                    clean_fabric(self.name)
                self._up = False
        finally:
            self._release_signals()

    def _release_signals(self) -> None:
        interrupts.release(self._old_handlers)
        self._old_handlers = {}

    # ----- what is in it ------------------------------------------------------------------

    def state(self) -> FabricState:
        """The state file: processes (PID and start time), nodes, namespaces, status."""
        return client.state(self.name)

    def inspect(self) -> dict:
        """Live view from the supervisor: nodes, NICs, addresses, ports, PIDs."""
        return client.inspect(self.name)

    def hosts(self) -> list[str]:
        return self.description.hosts()

    def switches(self) -> list[str]:
        return self.description.switches()

    def host_ip(self, host: str, plane: int = 1) -> str:
        return self.description.host_ip(host, plane)

    def node_pid(self, node: str) -> int:
        """The PID of the shell that holds `node`'s namespace (what mnexec -a takes)."""
        nodes = self.state().nodes
        if node not in nodes:
            raise FabricError(
                f"no node {node!r} in fabric {self.name!r} (nodes: {', '.join(nodes)})"
            )
        return int(nodes[node]["pid"])

    # ----- acting on it -------------------------------------------------------------------

    def in_node(self, node: str) -> list[str]:
        """The command prefix that runs a program inside `node`'s namespace."""
        return ["mnexec", "-a", str(self.node_pid(node))]

    def exec(
        self, node: str, *argv: str, check: bool = False, capture: bool = False, timeout=None
    ) -> subprocess.CompletedProcess:
        """Run a program in `node`'s namespace and wait for it (its exit status is kept)."""
        if not argv:
            raise FabricError("exec: no command given")
        return subprocess.run(
            [*self.in_node(node), *argv],
            check=check,
            capture_output=capture,
            text=capture,
            timeout=timeout,
        )

    def popen(self, node: str, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen:
        """Start a program in `node`'s namespace; the caller owns (waits for, kills) it."""
        return subprocess.Popen([*self.in_node(node), *argv], **kwargs)

    def ctl(self, action: str, *args: str | float, direction: str | None = None) -> dict:
        """Apply a failure control, e.g. ``ctl("loss", "leaf1", "spine2", 1.5)`` or
        ``ctl("blackhole", "spine1", "leaf2", direction="spine1,leaf2")``; the words are those
        of `testbed ctl`. Returns the supervisor's reply (``steps``: switch changes made)."""
        return client.call(
            self.name, failures.ctl_request(action, [str(a) for a in args], direction)
        )

    def counters(self, node: str | None = None) -> dict:
        """Per-port switch counters of `node`, or of every switch: {switch: {...}}."""
        return client.call(self.name, {"op": "counters", "node": node})["counters"]

    def host_counters(self) -> dict:
        """Host NIC counters (tx packets, qdisc drops): {host: {nic: {...}}}."""
        return client.call(self.name, {"op": "host-counters"})["hosts"]

    def call(self, request: dict, timeout: float = 30.0) -> dict:
        """A raw supervisor request (the ops of testbed.fabric.supervisor)."""
        return client.call(self.name, request, timeout=timeout)

    def __repr__(self) -> str:
        p = self.params
        return (
            f"Fabric({self.name!r}, {p.spines} spines x {p.leaves} leaves x "
            f"{p.hosts_per_leaf} hosts, {'up' if self._up else 'down'})"
        )

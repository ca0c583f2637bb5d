"""`testbed cli`: a Mininet-style prompt against a running fabric, plus the testbed commands.

Mininet's own CLI needs the Mininet object in its process, and that object lives in the fabric's
supervisor; so this prompt speaks Mininet's dialect (`h1 ping -c1 h3`, `nodes`, `net`,
`pingall`) by running commands in the node namespaces, and adds `ctl`, `counters`, `inspect`.
Node names in a command are replaced by their plane-1 address, as in Mininet.
"""

from __future__ import annotations

import cmd
import shlex
import subprocess
from collections.abc import Callable

from testbed.fabric.session import Fabric

# The command dispatcher (testbed.cli.commands.main) is handed in rather than imported: this
# module sits below the command table, which imports it to serve `testbed cli`.
Dispatch = Callable[[list[str]], int]


class FabricCli(cmd.Cmd):
    intro = "testbed cli: '<node> <command>' runs in a node (h1 ping -c1 h3); help lists the rest"

    def __init__(self, name: str, dispatch: Dispatch) -> None:
        super().__init__()
        self.name = name
        self.dispatch = dispatch
        self.fabric = Fabric.attach(name)
        self.state = self.fabric.state()
        self.prompt = f"testbed:{name}> "
        self.ips = {
            n: next((i["ip"] for i in v.get("interfaces", []) if i.get("ip")), None)
            for n, v in self.state.nodes.items()
        }

    def _run(self, node: str, argv: list[str]) -> int:
        argv = [self.ips.get(a) or a if a in self.ips else a for a in argv]
        return self.fabric.exec(node, *argv).returncode

    def default(self, line: str) -> None:
        parts = shlex.split(line)
        if parts and parts[0] in self.state.nodes:
            if len(parts) == 1:
                print(f"usage: {parts[0]} COMMAND ...")
                return
            self._run(parts[0], parts[1:])
            return
        print(f"unknown command or node: {parts[0] if parts else line!r} (help lists commands)")

    def do_nodes(self, _arg: str) -> None:
        "List the nodes."
        print(" ".join(self.state.nodes))

    def do_net(self, _arg: str) -> None:
        "List the links, Mininet style."
        for n, v in self.state.nodes.items():
            print(n, " ".join(f"{i['name']}:{i['peer_intf']}" for i in v.get("interfaces", [])))

    def do_pingall(self, _arg: str) -> None:
        "Ping every host from every host (plane 1)."
        hosts = [n for n, v in self.state.nodes.items() if v["kind"] == "host"]
        lost = total = 0
        for src in hosts:
            row = []
            for dst in hosts:
                if dst == src:
                    continue
                total += 1
                ok = self._quiet(src, ["ping", "-c1", "-W1", self.ips[dst]]) == 0
                lost += not ok
                row.append(dst if ok else "X")
            print(f"{src} -> {' '.join(row)}")
        print(
            f"*** Results: {100 * lost / max(1, total):.0f}% dropped ({total - lost}/{total} received)"
        )

    def _quiet(self, node: str, argv: list[str]) -> int:
        return subprocess.call(self.fabric.in_node(node) + argv, stdout=subprocess.DEVNULL)

    def do_ctl(self, arg: str) -> None:
        "ctl ACTION ARGS... [--direction A,B]: apply a failure (see testbed ctl --help)."
        self._testbed(["ctl", *shlex.split(arg)])

    def do_counters(self, arg: str) -> None:
        "counters [NODE]: per-port switch counters."
        self._testbed(["counters", *shlex.split(arg)])

    def do_inspect(self, _arg: str) -> None:
        "inspect: nodes, NICs, PIDs."
        self._testbed(["inspect"])

    def _testbed(self, argv: list[str]) -> None:
        self.dispatch([argv[0], "--name", self.name, *argv[1:]])

    def do_exit(self, _arg: str) -> bool:
        "Leave the prompt (the fabric stays up)."
        return True

    do_quit = do_exit
    do_EOF = do_exit

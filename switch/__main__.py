"""`python -m switch --config CFG.json --control SOCK [--netns PATH]`: run a switch.

Given once, one switch runs in the current namespace (the default: one process per switch
node). Given several times, one process serves all those switches in one event loop
(switch/loop.py says why), each with its own ports, opened in its own namespace (`--netns`,
e.g. /proc/PID/ns/net of the node), and its own control socket.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import sys
from contextlib import nullcontext
from typing import TYPE_CHECKING

from contracts import datapath
from contracts.clock import virtual_clock
from contracts.datapath import PYTHON
from switch import core_loop, local_links, loop
from switch.config import SwitchConfig
from switch.control import ControlServer
from switch.core import ForwardingCore
from switch.dataplane import Switch
from switch.queueing import TRIM_DECISION_ENV
from switch.ring import RX_FRAMES, TX_FRAMES, RingSocket, frame_size_for, ring_frames_for

if TYPE_CHECKING:
    from contracts.netns import Netns


def _die_with_parent(parent: int) -> bool:
    """A switch outlives nothing: if whoever started it dies (even by SIGKILL), so does it.
    `parent`: the parent at start; False if it is already gone (it died before the request,
    which then never fires). The fabric builder also asks for it before the switch execs."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    return os.getppid() == parent


def _open_switch(config: SwitchConfig, netns: Netns | None, ring_frames: int | None) -> Switch:
    size = frame_size_for(config.mtu)  # its ports' MTU, so that no frame arrives truncated
    if ring_frames is None:
        rx, tx = ring_frames_for(len(config.ports), size)
    else:
        rx, tx = ring_frames, TX_FRAMES

    def open_port(name: str) -> RingSocket:
        with netns.entered() if netns is not None else nullcontext():
            ring = RingSocket(name, rx, tx, size)
        ring.netns = netns
        return ring

    return Switch(config, open_port=open_port)


def main(argv: list[str] | None = None) -> int:
    parent = os.getppid()
    ap = argparse.ArgumentParser(prog="python -m switch", description=__doc__)
    ap.add_argument(
        "--config",
        required=True,
        action="append",
        help="switch config JSON (written by the fabric builder); repeat to serve several",
    )
    ap.add_argument(
        "--control",
        required=True,
        action="append",
        help="path of the control Unix socket to create, one per --config",
    )
    ap.add_argument(
        "--netns",
        action="append",
        help="network namespace of each --config's ports (e.g. /proc/PID/ns/net); "
        "default: the current one",
    )
    ap.add_argument(
        "--ring-frames",
        type=int,
        default=None,
        help=f"rx ring slots per port (default {RX_FRAMES}, fewer for a switch of many ports)",
    )
    ap.add_argument(
        "--die-with-parent", action="store_true", help="exit when the starting process dies"
    )
    args = ap.parse_args(argv)
    if len(args.control) != len(args.config):
        ap.error(f"{len(args.config)} --config but {len(args.control)} --control")
    if args.netns is not None and len(args.netns) != len(args.config):
        ap.error(f"{len(args.config)} --config but {len(args.netns)} --netns")
    if args.netns:
        from contracts.netns import Netns  # only a switch that serves other namespaces needs it
    members = []
    try:
        for i, path in enumerate(args.config):
            try:
                config = SwitchConfig.load(path)
            except (OSError, ValueError, TypeError, KeyError) as exc:
                print(f"switch: bad config {path}: {exc}", file=sys.stderr)
                return 2
            try:
                netns = Netns(args.netns[i]) if args.netns else None
                switch = _open_switch(config, netns, args.ring_frames)
            except OSError as exc:
                print(f"switch {config.name}: cannot open ports: {exc}", file=sys.stderr)
                return 1
            except (ImportError, SyntaxError) as exc:  # TESTBED_TRIM_DECISION names a bad file
                print(
                    f"switch {config.name}: cannot load the trimming decision: {exc}",
                    file=sys.stderr,
                )
                return 2
            members.append((switch, ControlServer(args.control[i])))

        def stop(_sig, _frm) -> None:
            for sw, _ in members:
                sw.running = False

        signal.signal(signal.SIGTERM, stop)
        if args.die_with_parent and not _die_with_parent(parent):
            print("switch: the process that started it is gone; not starting", file=sys.stderr)
            return 1
        signal.signal(signal.SIGINT, stop)
        switches = [sw for sw, _ in members]
        wire = len(members) > 1 and local_links.enabled()
        plugged = os.environ.get(TRIM_DECISION_ENV)
        # The compiled core (switch/core.py) where it is built and asked for; a plug-in trim
        # decision runs in Python (it is a student's Python function), so it keeps this path.
        path = PYTHON if plugged else datapath.resolve("switch")
        core = None
        if path == datapath.C:
            core = ForwardingCore(
                [sw.config for sw in switches], datapath="c", wire_local=wire, switches=switches
            )
            core_loop.adopt(core)
        delivered = None
        if core is None and wire:
            delivered = local_links.link(switches, virtual_clock(switches[0].dilation))
        note = f", trimming decision from {plugged}" if plugged else ""
        shared = f" (one process for {len(members)} switches)" if len(members) > 1 else ""
        for sw, _ in members:
            wired = len(local_links.wired_ports(sw))
            mem = f", {wired} of them wired in memory" if wired else ""
            print(
                f"switch {sw.name}: forwarding on {len(sw.ports)} ports{mem}{note}{shared}, "
                f"{path} data path",
                flush=True,
            )
        if core is not None:
            forward = lambda: core_loop.run(core, [ctl for _, ctl in members])  # noqa: E731
        else:
            forward = lambda: loop.run(members, delivered)  # noqa: E731
        profile_path = os.environ.get("SWITCH_CPU_PROFILE")
        if profile_path:  # development aid, as ENDPOINT_CPU_PROFILE: cProfile of CPU time
            import cProfile
            import time

            prof = cProfile.Profile(time.process_time)
            prof.runcall(forward)
            prof.dump_stats(f"{profile_path}.{os.getpid()}")
        else:
            forward()
    finally:
        for sw, control in members:
            if sw.capture is not None:  # stopped or killed mid-capture: keep what was recorded
                sw.capture.stop()
            control.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

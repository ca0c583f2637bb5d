"""The detached process that owns one running fabric (`testbed up` starts it, `down` ends it).

Mininet keeps a namespace alive only while the shell holding it lives, and that shell lives only
as long as the Python process that holds the Mininet object; so for a fabric that stays up
between commands (as containerlab's deploy/inspect/exec/destroy do), one process must own it.
This is that process: it builds the fabric, starts and watches the switches (a switch that dies
is reported in `inspect`, not silently lost), applies failure actions, gathers counters, and
tears everything down on `down`, SIGTERM, SIGINT, SIGHUP or any error -- removing exactly what
it built, also when the signal comes mid-build (the build stops at the next node or phase).

Its owner (``--owner PID:START``, the process that called `bring_up`) is watched: when that
process is gone -- exited, crashed, killed by SIGKILL -- the supervisor tears the fabric down
as on `down` and removes its run directory. With ``--detach-when-up`` (`testbed up`) the watch
ends once the fabric is up: such a fabric stays until `down`. The node shells and switch
processes it starts die with it (PR_SET_PDEATHSIG), should it be killed outright.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import sys
import threading
import time
import traceback
from dataclasses import asdict
from pathlib import Path

from switch.control import ControlError, request
from testbed.fabric import failures
from testbed.fabric.builder import BuildCancelled, BuildError, FabricBuilder
from testbed.fabric.cleanup import kill_pids, tagged_pids
from testbed.fabric.state import FabricState, process_start_ticks, record, run_dir
from topologies import TopologyParams, leaf_spine

FABRIC_ENV = "TESTBED_FABRIC"  # every process of a fabric carries it: cleanup finds orphans by it


OWNER_POLL_S = 0.25


class Supervisor:
    def __init__(
        self,
        name: str,
        params: TopologyParams,
        seed: int,
        time_dilation: float = 1.0,
        stopping: threading.Event | None = None,
    ) -> None:
        self.name = name
        self.dir = run_dir(name)
        self.fabric = leaf_spine(params)
        self.time_dilation = time_dilation
        self.seed = seed  # impairments' RNGs derive from it (failures.impair_seed)
        self.state = FabricState(
            name=name,
            params=self.fabric.to_dict()["params"],
            seed=seed,
            time_dilation=time_dilation,
        )
        self.state.processes.append(record("supervisor", "-", os.getpid()))
        self.state.save(self.dir)
        self.stopping = stopping if stopping is not None else threading.Event()
        self.owner_gone = False
        self.builder = FabricBuilder(
            self.fabric,
            self.state,
            self.dir,
            seed=seed,
            time_dilation=time_dilation,
            cancel=self.stopping,
        )
        self.lock = threading.RLock()  # Mininet's node.cmd() is not thread-safe
        self.flaps: dict[tuple[str, str], threading.Event] = {}

    # ----- life cycle -------------------------------------------------------------------------

    def start(self) -> None:
        t0 = time.monotonic()
        self.builder.build()
        self.builder.start_switches()
        failures_ = self.builder.check_reachability()
        if failures_:
            raise BuildError(
                f"fabric does not forward: {len(failures_)} host pairs unreachable, e.g. {failures_[:3]}"
            )
        self._set_status("up", f"built in {time.monotonic() - t0:.1f}s; all host pairs reachable")

    def _set_status(self, status: str, message: str) -> None:
        with self.lock:
            self.state.status = status
            self.state.message = message
            self.state.save(self.dir)

    def watch(self) -> None:
        """Report switch processes that die; the fabric is then 'degraded', not silently broken."""
        while not self.stopping.wait(0.2):
            dead = [
                f"{n} (exit {p.returncode}): {self.builder.switch_log_tail(n, 200)}"
                for n, p in self.builder.switch_procs.items()
                if p.poll() is not None
            ]
            if dead and self.state.status == "up":
                self._set_status("degraded", "switch died: " + "; ".join(dead))

    def watch_owner(self, pid: int, ticks: int | None, detach_when_up: bool) -> None:
        """Tear the fabric down when the process that started it is gone (PID and start time:
        a recycled PID is not the owner). `detach_when_up`: stop watching once it is up."""
        while not self.stopping.wait(OWNER_POLL_S):
            if detach_when_up and self.state.status in ("up", "degraded"):
                return
            if ticks is None or process_start_ticks(pid) != ticks:
                print(f"supervisor: owner {pid} is gone; tearing the fabric down", flush=True)
                self.owner_gone = True
                self.stopping.set()
                return

    def stop(self) -> None:
        self.stopping.set()
        for ev in self.flaps.values():
            ev.set()
        with self.lock:
            self.state.status = "stopping"
            self.state.save(self.dir)
            self.builder.stop()
        # Anything of this fabric started but not yet recorded when the build was cut short.
        strays = tagged_pids(self.name)
        if strays:
            kill_pids(strays, 2.0)

    # ----- requests ---------------------------------------------------------------------------

    def handle(self, req: dict) -> dict:
        op = req.get("op")
        if op == "inspect":
            return {"ok": True, "state": self.inspect()}
        if op == "counters":
            return {"ok": True, "counters": self.counters(req.get("node"))}
        if op == "host-counters":
            with self.lock:
                return {
                    "ok": True,
                    "hosts": {h: self.builder.host_nic_counters(h) for h in self.fabric.hosts()},
                }
        if op == "ctl":
            return self.ctl(req)
        if op == "down":
            return {"ok": True, "stopping": True}
        return {"ok": False, "error": f"unknown op {op!r}"}

    def inspect(self) -> dict:
        d = asdict(self.state)
        for p in d["processes"]:
            p["alive"] = any(r.pid == p["pid"] and r.alive() for r in self.state.processes)
        return d

    def counters(self, node: str | None) -> dict:
        names = self.fabric.switches() if node is None else [node]
        out = {}
        for n in names:
            if n not in self.state.switch_sockets:
                raise failures.FailureError(f"counters: {n!r} is not a switch of this fabric")
            try:
                out[n] = request(self.state.switch_sockets[n], {"op": "counters"})["counters"]
            except ControlError as exc:
                out[n] = {"error": str(exc)}
        return out

    def ctl(self, req: dict) -> dict:
        args = {
            k: req[k]
            for k in (
                "link",
                "direction",
                "node",
                "plane",
                "percent",
                "mbps",
                "period_ms",
                "count",
                "impair",
                "seed",
            )  # fmt: skip
            if req.get(k) is not None
        }
        args.setdefault("seed", self.seed)
        for k in ("link", "direction"):
            if k in args:
                args[k] = tuple(args[k])
        try:
            p = failures.plan(self.fabric, req.get("action"), **args)
        except (failures.FailureError, TypeError) as exc:
            return {"ok": False, "error": str(exc)}
        applied_at = time.time()
        requested = time.monotonic()
        if p.flap is not None:
            self._start_flap(p)
        else:
            err = self.apply(p.steps)
            if err:
                return {"ok": False, "error": err}
            if p.action in ("heal", "link-up") and p.link in self.flaps:
                self.flaps.pop(p.link).set()
        # CLOCK_MONOTONIC is shared by every namespace: the runner lines these up with the
        # endpoints' records. `applied_mono` is when the last switch acknowledged its step.
        return {
            "ok": True,
            "applied_at": applied_at,
            "requested_mono": requested,
            "applied_mono": time.monotonic(),
            "steps": len(p.steps),
        }

    def apply(self, steps: list) -> str | None:
        errors = []
        with self.lock:
            for step in steps:
                try:
                    if isinstance(step, failures.SwitchStep):
                        request(self.state.switch_sockets[step.switch], step.request)
                    else:
                        self.builder.set_host_rate(step.host, step.dev, step.mbps)
                except (ControlError, BuildError) as exc:
                    errors.append(f"{getattr(step, 'switch', getattr(step, 'host', '?'))}: {exc}")
        return "; ".join(errors) or None

    def _start_flap(self, p: failures.Plan) -> None:
        """Flap: `count` cycles of carrier loss for half a period, then carrier back. The
        period is virtual: it lasts N times longer at time dilation N."""
        period, count = p.flap
        period *= self.time_dilation
        down = failures.link_steps(self.fabric, p.directions, {"up": False}, {"rx_up": False})
        up = failures.link_steps(self.fabric, p.directions, {"up": True}, {"rx_up": True})
        old = self.flaps.pop(p.link, None)
        if old:
            old.set()
        cancel = threading.Event()
        self.flaps[p.link] = cancel

        def run() -> None:
            t = time.monotonic()
            for _ in range(count):
                self.apply(down)
                t += period / 2
                if cancel.wait(max(0.0, t - time.monotonic())):
                    break
                self.apply(up)
                t += period / 2
                if cancel.wait(max(0.0, t - time.monotonic())):
                    break
            self.apply(up)

        threading.Thread(target=run, daemon=True, name=f"flap-{p.link}").start()

    # ----- server -----------------------------------------------------------------------------

    def serve(self) -> None:
        path = self.dir / "supervisor.sock"
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            srv.bind(str(path))
        finally:
            os.umask(old)
        srv.listen(16)
        srv.settimeout(0.5)
        try:
            while not self.stopping.is_set():
                try:
                    conn, _ = srv.accept()
                except TimeoutError:
                    continue
                threading.Thread(target=self._answer, args=(conn,), daemon=True).start()
        finally:
            srv.close()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(30)
            try:
                buf = b""
                while not buf.endswith(b"\n"):
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    buf += chunk
                req = json.loads(buf)
                if not isinstance(req, dict):
                    raise ValueError("request must be a JSON object")
                reply = self.handle(req)
            except Exception as exc:  # noqa: BLE001 - one bad request must not stop the fabric
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            try:
                conn.sendall(json.dumps(reply).encode() + b"\n")
            except OSError:
                pass
            if req_is_down(buf):
                self.stopping.set()


def req_is_down(buf: bytes) -> bool:
    try:
        return json.loads(buf).get("op") == "down"
    except (ValueError, AttributeError):
        return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m testbed.fabric.supervisor")
    ap.add_argument("--name", required=True)
    ap.add_argument("--params", required=True, help="TopologyParams as JSON")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--time-dilation", type=float, default=1.0)
    ap.add_argument(
        "--owner", help="PID:START of the process whose end ends the fabric (bring_up's caller)"
    )
    ap.add_argument("--detach-when-up", action="store_true", help="stop watching the owner once up")
    args = ap.parse_args(argv)
    # Signals first: one that arrives while the state is being written or the fabric built
    # stops the build at its next step, and everything built so far is removed.
    stopping = threading.Event()

    def on_signal(_sig, _frm) -> None:
        stopping.set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    os.environ[FABRIC_ENV] = args.name
    params = TopologyParams(**json.loads(args.params))
    sup = Supervisor(args.name, params, args.seed, args.time_dilation, stopping=stopping)
    if args.owner:
        pid, _, ticks = args.owner.partition(":")
        threading.Thread(
            target=sup.watch_owner,
            args=(int(pid), int(ticks) if ticks.isdigit() else None, args.detach_when_up),
            daemon=True,
            name="owner",
        ).start()
    rc = 0
    try:
        if not stopping.is_set():
            sup.start()
            threading.Thread(target=sup.watch, daemon=True).start()
            sup.serve()
    except BuildCancelled:
        print("supervisor: stopped while building; removing what was built", flush=True)
    except Exception as exc:  # noqa: BLE001 - report, then tear down what was built
        traceback.print_exc()
        sup._set_status("failed", f"{type(exc).__name__}: {exc}")
        rc = 1
    finally:
        sup.stop()
        if rc == 0 or sup.owner_gone:
            _remove_dir(sup.dir)
        else:
            # Keep state.json and logs so `up` can show why (its caller then removes them;
            # `testbed clean` does, should that caller be gone).
            sup._set_status("failed", sup.state.message)
    return rc


def _remove_dir(d: Path) -> None:
    shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

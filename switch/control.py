"""The switch's control channel: one JSON request per connection on a root-only Unix socket.

`testbed ctl` and `testbed counters` (through the fabric supervisor) use it to apply failures and
read counters at run time. The protocol is deliberately tiny -- a line of JSON in, a line of JSON
out -- so that a student can drive a switch with `socat` and so that garbage is easy to reject:
every malformed request gets {"ok": false, "error": "..."} and the switch keeps forwarding.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contracts.clock import virtual_clock
from switch.capture import Capture
from switch.impairment import ImpairmentSpec, impair
from switch.pcap import SNAPLEN_DEFAULT

if TYPE_CHECKING:
    from switch.dataplane import Switch

MAX_REQUEST = 65536
CLIENT_TIMEOUT_S = 0.2


class ControlError(RuntimeError):
    """The switch answered a request with an error, or could not be reached."""


class ControlServer:
    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # root-only: failure controls are privileged
        try:
            self.sock.bind(self.path)
        finally:
            os.umask(old)
        self.sock.listen(16)
        self.sock.setblocking(False)

    def fileno(self) -> int:
        return self.sock.fileno()

    def serve(self, switch: Switch) -> None:
        """Answer every pending connection (called when the listening socket is readable)."""
        while True:
            try:
                conn, _ = self.sock.accept()
            except BlockingIOError:
                return
            with conn:
                conn.settimeout(CLIENT_TIMEOUT_S)
                try:
                    reply = handle(switch, _read_line(conn))
                except Exception as exc:  # noqa: BLE001 - a bad request must never stop the switch
                    reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                try:
                    conn.sendall(json.dumps(reply).encode() + b"\n")
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def _read_line(conn: socket.socket) -> bytes:
    buf = b""
    while b"\n" not in buf:
        chunk = conn.recv(4096)
        if not chunk:
            break
        buf += chunk
        if len(buf) > MAX_REQUEST:
            raise ValueError("request too long")
    return buf.split(b"\n", 1)[0]


def _number(req: dict, key: str, lo: float, hi: float) -> float:
    v = req[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
        raise ValueError(f"{key}: must be a number in [{lo:g}, {hi:g}], got {v!r}")
    return float(v)


def _flag(req: dict, key: str) -> bool:
    v = req[key]
    if not isinstance(v, bool):
        raise ValueError(f"{key}: must be true or false, got {v!r}")
    return v


PORT_KEYS = {
    "op",
    "port",
    "up",
    "rx_up",
    "blackhole",
    "loss_pct",
    "rx_blackhole",
    "rx_loss_pct",
    "rate_mbps",
    "heal",
    "impair",
}
OP_KEYS = {
    "ping": {"op"},
    "counters": {"op"},
    "port": PORT_KEYS,
    "switch": {"op", "up"},
    "debug": {"op", "on", "path"},
    "capture": {"op", "on", "dir", "ports", "direction", "snaplen", "max_mb"},
    "stop": {"op"},
}


def handle(switch: Switch, line: bytes) -> dict[str, Any]:
    """Apply one request to `switch`; returns the reply (never raises for bad input)."""
    try:
        req = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return {"ok": False, "error": f"request is not JSON: {exc}"}
    except RecursionError:
        return {"ok": False, "error": "request is not JSON: nested too deeply"}
    if not isinstance(req, dict) or not isinstance(req.get("op"), str):
        return {"ok": False, "error": "request must be an object with a string 'op'"}
    op = req["op"]
    allowed = OP_KEYS.get(op)
    if allowed is None:
        return {"ok": False, "error": f"unknown op {op!r}"}
    unknown = set(req) - allowed
    if unknown:
        return {"ok": False, "error": f"{op}: unknown field {sorted(unknown)[0]!r}"}
    try:
        if op == "ping":
            return {"ok": True, "switch": switch.name, "pid": os.getpid()}
        if op == "counters":
            return {"ok": True, "counters": switch.counters()}
        if op == "port":
            return _port(switch, req)
        if op == "switch":
            switch.set_switch_up(_flag(req, "up"))
            return {"ok": True}
        if op == "debug":
            return _debug(switch, req)
        if op == "capture":
            return _capture(switch, req)
        if op == "stop":
            switch.running = False
            return {"ok": True}
    except KeyError as exc:
        return {"ok": False, "error": f"{op}: missing field {exc.args[0]!r}"}
    except ValueError as exc:
        return {"ok": False, "error": f"{op}: {exc}"}
    return {"ok": False, "error": f"unknown op {op!r}"}


def _port(switch: Switch, req: dict) -> dict:
    name = req["port"]
    port = switch.port_by_name.get(name) if isinstance(name, str) else None
    if port is None:
        raise ValueError(f"no port {name!r} on {switch.name}")
    # Validate everything before changing anything: a half-applied request would be a lie.
    changes: list = []
    if "heal" in req and _flag(req, "heal"):
        changes.append(port.heal)
    if "up" in req:
        up = _flag(req, "up")
        changes.append(lambda: switch.set_port_up(port, up))
    if "rx_up" in req:
        rx_up = _flag(req, "rx_up")
        changes.append(lambda: setattr(port, "rx_up", rx_up))
    if "blackhole" in req:
        bh = _flag(req, "blackhole")
        changes.append(lambda: setattr(port, "blackhole", bh))
    if "rx_blackhole" in req:
        rbh = _flag(req, "rx_blackhole")
        changes.append(lambda: setattr(port, "rx_blackhole", rbh))
    if "loss_pct" in req:
        loss = _number(req, "loss_pct", 0, 100) / 100
        if loss:
            _python_only(switch, name, "egress loss")
        changes.append(lambda: setattr(port, "loss", loss))
    if "rx_loss_pct" in req:
        rloss = _number(req, "rx_loss_pct", 0, 100) / 100
        changes.append(lambda: setattr(port, "rx_loss", rloss))
    if "rate_mbps" in req:
        rate = _number(req, "rate_mbps", 0.001, 100_000)
        changes.append(lambda: port.set_rate(rate))
    if "impair" in req:
        # {...}: stochastic impairments (switch/impairment.py), replacing any; null: none.
        spec = None if req["impair"] is None else ImpairmentSpec.from_dict(req["impair"])
        if spec is not None:
            _python_only(switch, name, "impairments")
        changes.append(lambda: impair(port, spec))
    for change in changes:
        change()
    switch.refresh()
    return {"ok": True, "port": port.snapshot()["state"]}


def _python_only(switch: Switch, port: str, feature: str) -> None:
    """Refuse (ValueError: the request's error) a feature the switch's data path lacks."""
    if switch.guard is not None:
        switch.guard(port, feature)


def _debug(switch: Switch, req: dict) -> dict:
    if _flag(req, "on"):
        _python_only(switch, "*", "the debug log")
        path = req.get("path")
        if not isinstance(path, str):
            raise ValueError("path: a file to write dissected trims and drops to is required")
        try:
            log = open(path, "a")  # noqa: SIM115 - lives until debug is switched off
        except OSError as exc:
            raise ValueError(f"path: cannot open {path!r}: {exc.strerror}") from None
        if switch.debug_log is not None:
            switch.debug_log.close()
        switch.debug_log = log
        switch.refresh()
    elif switch.debug_log is not None:
        switch.debug_log.close()
        switch.debug_log = None
        switch.refresh()
    return {"ok": True}


def _capture(switch: Switch, req: dict) -> dict:
    """{"on": true, "dir", "ports", "direction", "snaplen", "max_mb"}: write a pcap per port
    into `dir` (switch/capture.py); {"on": false}: stop, flush, and say what was captured."""
    if not _flag(req, "on"):
        if switch.capture is None:
            raise ValueError("no capture is running")
        stats = switch.capture.stop()
        switch.capture = None
        return {"ok": True, "ports": stats}
    if switch.capture is not None:
        raise ValueError("a capture is already running; stop it first")
    _python_only(switch, "*", "capture")
    directory = req["dir"]
    if not isinstance(directory, str):
        raise ValueError(f"dir: must be a path, got {directory!r}")
    ports = req["ports"]
    if not isinstance(ports, list):
        raise ValueError(f"ports: must be a list of port names, got {ports!r}")
    snaplen = int(_number(req, "snaplen", 14, 262144)) if "snaplen" in req else SNAPLEN_DEFAULT
    max_mb = _number(req, "max_mb", 0, 1e6) if "max_mb" in req else 0.0
    switch.capture = Capture(
        switch,
        ports,
        directory,
        virtual_clock(switch.dilation),
        direction=req.get("direction", "both"),
        snaplen=snaplen,
        max_bytes=int(max_mb * 1e6),
    )
    return {"ok": True, "files": {n: pc.writer.path for n, pc in switch.capture.ports.items()}}


def request(path: str | Path, req: dict, timeout: float = 2.0) -> dict:
    """Send one request to a switch; raises ControlError if unreachable or it answers an error."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(path))
            s.sendall(json.dumps(req).encode() + b"\n")
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
    except OSError as exc:
        raise ControlError(f"switch control socket {path}: {exc}") from None
    try:
        reply = json.loads(buf)
    except json.JSONDecodeError:
        raise ControlError(f"switch control socket {path}: unreadable reply {buf[:80]!r}") from None
    if not reply.get("ok"):
        raise ControlError(reply.get("error", "unknown error"))
    return reply

"""Talks to a running fabric's supervisor over its Unix socket."""

from __future__ import annotations

import json
import socket
from dataclasses import asdict

from testbed.fabric.state import FabricState, StateError, run_dir


class ClientError(RuntimeError):
    """The fabric is not up, or the supervisor answered an error."""


def call(name: str, req: dict, timeout: float = 30.0) -> dict:
    path = run_dir(name) / "supervisor.sock"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(path))
            s.sendall(json.dumps(req).encode() + b"\n")
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(1 << 20)
                if not chunk:
                    break
                buf += chunk
    except FileNotFoundError:
        raise ClientError(f"--name: no fabric named {name!r} is up") from None
    except OSError as exc:
        raise ClientError(
            f"fabric {name!r}: supervisor unreachable ({exc}); try testbed clean"
        ) from None
    try:
        reply = json.loads(buf)
    except json.JSONDecodeError:
        raise ClientError(f"fabric {name!r}: unreadable supervisor reply {buf[:100]!r}") from None
    if not reply.get("ok"):
        raise ClientError(reply.get("error", "unknown error"))
    return reply


def state(name: str) -> FabricState:
    try:
        return FabricState.load(run_dir(name))
    except StateError as exc:
        raise ClientError(str(exc)) from None


def inspect(name: str) -> dict:
    """Live view from the supervisor; the state file if the supervisor is gone."""
    try:
        return call(name, {"op": "inspect"}, timeout=5)["state"]
    except ClientError:
        d = asdict(state(name))
        d["status"] = f"{d['status']} (supervisor not answering)"
        return d

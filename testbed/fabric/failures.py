"""Failure actions (the docs/design.md list) turned into the switch requests that carry them out.

Pure: given the fabric description and an action, `plan()` returns the steps, so `testbed ctl`,
the scenario runner and the tests share one meaning of "link-down spine1 leaf2".

Where an impairment acts: a direction of a link is impaired at the switch that sends on it
(its egress port: queue, serialiser, wire). A host has no switch, so for the host->leaf
direction the leaf applies it on receive, and a rate change is the host NIC's token bucket.
A link-down is carrier loss: the sending switch prunes the port from its ECMP groups at once
(local repair). The switch at the other end of a spine-leaf link cannot route around it -- a
spine has exactly one port per leaf -- so traffic hashed onto that spine for that leaf is
black-holed until the link returns, as in a real statically routed fabric.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

from topologies import Fabric, TopologyError

LINK_ACTIONS = ("link-down", "link-up", "blackhole", "loss", "degrade", "flap", "heal", "impair")
NODE_ACTIONS = ("switch-down", "switch-up")
PLANE_ACTIONS = ("plane-down", "plane-up")
ACTIONS = LINK_ACTIONS + NODE_ACTIONS + PLANE_ACTIONS


class FailureError(ValueError):
    """The action or its arguments are invalid; the message names which."""


@dataclass(frozen=True)
class SwitchStep:
    switch: str
    request: dict


@dataclass(frozen=True)
class HostRateStep:
    host: str
    dev: str
    mbps: float


@dataclass
class Plan:
    action: str
    steps: list = field(default_factory=list)
    flap: tuple[float, int] | None = None  # (period_s, count): the caller toggles down/up
    link: tuple[str, str] | None = None
    directions: list[tuple[str, str]] = field(default_factory=list)


def _directions(
    fab: Fabric, a: str, b: str, direction: tuple[str, str] | None
) -> list[tuple[str, str]]:
    try:
        fab.link_between(a, b)
    except TopologyError as exc:
        raise FailureError(str(exc)) from None
    if direction is None:
        return [(a, b), (b, a)]
    if len(direction) != 2 or set(direction) != {a, b}:
        raise FailureError(f"direction: must be [{a}, {b}] or [{b}, {a}], got {list(direction)}")
    return [tuple(direction)]


def _is_switch(fab: Fabric, node: str) -> bool:
    return fab.nodes[node].kind != "host"


def link_steps(
    fab: Fabric, directions: list[tuple[str, str]], egress: dict, rx: dict | None
) -> list:
    """Requests for each direction: `egress` at a sending switch, `rx` at a leaf facing a host."""
    steps = []
    for src, dst in directions:
        if _is_switch(fab, src):
            port = fab.interface(src, dst).name
            steps.append(SwitchStep(src, {"op": "port", "port": port, **egress}))
        elif rx is not None:
            port = fab.interface(dst, src).name
            steps.append(SwitchStep(dst, {"op": "port", "port": port, **rx}))
    return steps


def plan(
    fab: Fabric,
    action: str,
    link: tuple[str, str] | None = None,
    direction: tuple[str, str] | None = None,
    node: str | None = None,
    plane: int | None = None,
    percent: float | None = None,
    mbps: float | None = None,
    period_ms: float | None = None,
    count: int | None = None,
    impair: dict | None = None,
    seed: int = 1,
) -> Plan:
    """The steps of `action`. `impair`: the stochastic impairments of an `impair` action
    (switch/impairment.py's keys but `seed`); `seed`: the scenario's (or fabric's) seed, from
    which each impaired direction's RNG seed is derived (`impair_seed`)."""
    if action not in ACTIONS:
        raise FailureError(f"action: unknown {action!r}; one of {', '.join(ACTIONS)}")
    p = Plan(action)
    if action in LINK_ACTIONS:
        if link is None or len(link) != 2:
            raise FailureError(f"{action}: needs a link of two nodes")
        a, b = link
        dirs = _directions(fab, a, b, direction)
        p.link, p.directions = (a, b), dirs
        if action == "link-down":
            p.steps = link_steps(fab, dirs, {"up": False}, {"rx_up": False})
        elif action == "link-up":
            p.steps = link_steps(fab, dirs, {"up": True}, {"rx_up": True})
        elif action == "blackhole":
            p.steps = link_steps(fab, dirs, {"blackhole": True}, {"rx_blackhole": True})
        elif action == "loss":
            if percent is None or not 0 <= percent <= 100:
                raise FailureError(f"loss: percent must be in [0, 100], got {percent}")
            p.steps = link_steps(fab, dirs, {"loss_pct": percent}, {"rx_loss_pct": percent})
        elif action == "degrade":
            if mbps is None or not mbps > 0:
                raise FailureError(f"degrade: mbps must be > 0, got {mbps}")
            p.steps = link_steps(fab, dirs, {"rate_mbps": mbps}, None)
            p.steps += [
                HostRateStep(src, fab.interface(src, dst).name, mbps)
                for src, dst in dirs
                if not _is_switch(fab, src)
            ]
        elif action == "heal":
            p.steps = link_steps(fab, dirs, {"heal": True, "up": True}, {"heal": True, "up": True})
            nominal = fab.link_between(a, b).mbps
            if nominal > 0:
                p.steps += [
                    HostRateStep(src, fab.interface(src, dst).name, nominal)
                    for src, dst in dirs
                    if not _is_switch(fab, src)
                ]
        elif action == "impair":
            if not isinstance(impair, dict) or not impair:
                raise FailureError("impair: needs the impairments, e.g. {'jitter_us': 20}")
            for src, dst in dirs:
                if not _is_switch(fab, src):
                    raise FailureError(
                        f"impair: {src} is a host, which has no switch to impair what it sends; "
                        f"give direction [{dst}, {src}] (impairments act at a sending switch)"
                    )
                port = fab.interface(src, dst).name
                req = {"impair": {**impair, "seed": impair_seed(seed, src, dst)}}
                p.steps.append(SwitchStep(src, {"op": "port", "port": port, **req}))
        elif action == "flap":
            if period_ms is None or not period_ms >= 2:
                raise FailureError(f"flap: period_ms must be >= 2, got {period_ms}")
            n = 1 if count is None else count
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise FailureError(f"flap: count must be a positive integer, got {count}")
            p.flap = (period_ms / 1000.0, n)
        return p
    if action in NODE_ACTIONS:
        if node is None or node not in fab.nodes:
            raise FailureError(f"{action}: no node named {node!r}")
        if not _is_switch(fab, node):
            raise FailureError(f"{action}: {node} is a host, not a switch")
        p.steps = _switch_steps(fab, [node], up=action == "switch-up")
        return p
    if plane is None or not isinstance(plane, int) or not 1 <= plane <= fab.params.planes:
        raise FailureError(f"{action}: plane must be in 1..{fab.params.planes}, got {plane!r}")
    p.steps = _switch_steps(fab, fab.plane_switches(plane), up=action == "plane-up")
    return p


def impair_seed(seed: int, src: str, dst: str) -> int:
    """The RNG seed of the impairments of direction src -> dst: fixed by (seed, direction),
    so a rerun with the same seed draws the same fates, and each direction its own."""
    return zlib.crc32(f"{seed}:impair:{src}->{dst}".encode())


def _switch_steps(fab: Fabric, switches: list[str], up: bool) -> list:
    """A dead switch drops everything, and its neighbours see carrier loss on the ports facing it."""
    steps = [SwitchStep(s, {"op": "switch", "up": up}) for s in switches]
    for s in switches:
        for intf in fab.interfaces[s]:
            peer = intf.peer_node
            if _is_switch(fab, peer) and peer not in switches:
                steps.append(SwitchStep(peer, {"op": "port", "port": intf.peer_name, "up": up}))
    return steps


CTL_USAGE = """actions:
  link-down A B | link-up A B | blackhole A B | heal A B
  loss A B PERCENT | degrade A B MBPS | flap A B PERIOD_MS [COUNT]
  impair A B KEY=VALUE... (jitter_us, jitter_distribution, jitter_reorder, reorder_percent,
         reorder_delay_us, corrupt_percent, duplicate_percent, drop_every,
         ge=P,R[,LOSS_GOOD,LOSS_BAD])
  switch-down NODE | switch-up NODE | plane-down K | plane-up K
  link actions take --direction FROM,TO to act on one direction only (e.g. the ACK path)"""


def ctl_request(action: str, rest: list[str], direction: str | None = None) -> dict:
    """Parse ``ACTION ARGS...`` (the words of `testbed ctl`, `Fabric.ctl`) into a supervisor
    request. Pure; the supervisor checks the names against the fabric."""
    if action not in ACTIONS:
        raise FailureError(f"ctl: unknown action {action!r}\n{CTL_USAGE}")
    req: dict = {"op": "ctl", "action": action}
    want = {"loss": ["percent"], "degrade": ["mbps"], "flap": ["period_ms", "count?"]}.get(
        action, []
    )
    if action in LINK_ACTIONS:
        if len(rest) < 2:
            raise FailureError(
                f"ctl {action}: needs two adjacent nodes, e.g. {action} spine1 leaf2"
            )
        req["link"] = rest[:2]
        rest = rest[2:]
        if direction:
            parts = direction.split(",")
            if len(parts) != 2:
                raise FailureError(f"--direction: expected FROM,TO, got {direction!r}")
            req["direction"] = parts
    elif action in NODE_ACTIONS:
        if len(rest) != 1:
            raise FailureError(f"ctl {action}: needs one switch name")
        req["node"] = rest[0]
        rest = []
    else:
        if len(rest) != 1 or not rest[0].isdigit():
            raise FailureError(f"ctl {action}: needs a plane number")
        req["plane"] = int(rest[0])
        rest = []
    if action == "impair":
        req["impair"] = _impair_words(rest)
        return req
    required = [w for w in want if not w.endswith("?")]
    if len(rest) < len(required) or len(rest) > len(want):
        raise FailureError(
            f"ctl {action}: expected {' '.join(w.upper() for w in want)} after the link, got {rest}"
        )
    for key, value in zip(want, rest, strict=False):
        key = key.rstrip("?")
        try:
            req[key] = int(value) if key == "count" else float(value)
        except ValueError:
            raise FailureError(
                f"ctl {action}: {key.upper()} must be a number, got {value!r}"
            ) from None
    return req


_IMPAIR_WORDS = {
    "jitter_us": float,
    "jitter_distribution": str,
    "jitter_reorder": lambda v: {"true": True, "false": False}[v.lower()],
    "reorder_percent": float,
    "reorder_delay_us": float,
    "corrupt_percent": float,
    "duplicate_percent": float,
    "drop_every": int,
}


def _impair_words(words: list[str]) -> dict:
    """``jitter_us=20 ge=1,25`` -> the `impair` mapping (the switch checks the ranges)."""
    if not words:
        raise FailureError("ctl impair: expected KEY=VALUE impairments after the link")
    out: dict = {}
    for word in words:
        key, eq, value = word.partition("=")
        try:
            if key == "ge":
                nums = [float(x) for x in value.split(",")]
                if not 1 <= len(nums) <= 4:
                    raise ValueError
                out["gilbert_elliott"] = dict(
                    zip(("p", "r", "loss_good", "loss_bad"), nums, strict=False)
                )
            elif eq and key in _IMPAIR_WORDS:
                out[key] = _IMPAIR_WORDS[key](value)
            else:
                raise KeyError(key)
        except KeyError:
            raise FailureError(
                f"ctl impair: unknown {key!r}; one of ge, {', '.join(_IMPAIR_WORDS)}"
            ) from None
        except ValueError:
            raise FailureError(f"ctl impair: bad value in {word!r}") from None
    return out
